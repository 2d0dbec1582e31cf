#include "cli/sweep_mpi.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <vector>

#include "reports/output_file.h"
#include "reports/sqlite_writer.h"

#ifdef CLUSTERSIM_SWEEP_MPI
#include <mpi.h>
#endif

namespace clustersim {

#ifdef CLUSTERSIM_SWEEP_MPI
namespace {

// Length-prefixed fields: results travel between ranks as one byte buffer each.
void put_i64(std::string& b, int64_t v) { b.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_f64(std::string& b, double v) { b.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_str(std::string& b, const std::string& s) {
  put_i64(b, static_cast<int64_t>(s.size()));
  b += s;
}
struct Reader {
  const std::string& b;
  size_t at = 0;
  int64_t i64() {
    int64_t v;
    std::memcpy(&v, b.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  double f64() {
    double v;
    std::memcpy(&v, b.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string str() {
    const auto n = static_cast<size_t>(i64());
    std::string s = b.substr(at, n);
    at += n;
    return s;
  }
};

std::string serialize(const std::vector<SweepPointResult>& rs) {
  std::string b;
  put_i64(b, static_cast<int64_t>(rs.size()));
  for (const SweepPointResult& r : rs) {
    put_i64(b, r.index);
    put_str(b, r.settings);
    put_str(b, r.status);
    put_str(b, r.reason);
    put_i64(b, static_cast<int64_t>(r.metrics.size()));
    for (const auto& [k, v] : r.metrics) {
      put_str(b, k);
      put_f64(b, v);
    }
  }
  return b;
}

void deserialize(const std::string& b, std::vector<SweepPointResult>& out) {
  Reader rd{b};
  const int64_t n = rd.i64();
  for (int64_t i = 0; i < n; ++i) {
    SweepPointResult r;
    r.index = rd.i64();
    r.settings = rd.str();
    r.status = rd.str();
    r.reason = rd.str();
    const int64_t m = rd.i64();
    for (int64_t j = 0; j < m; ++j) {
      std::string k = rd.str();
      r.metrics.emplace_back(std::move(k), rd.f64());
    }
    out.push_back(std::move(r));
  }
}

}  // namespace

int sweep_mpi(const std::string& path, SweepOptions opt, bool json) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) MPI_Init(nullptr, nullptr);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int code = 0;
  std::string error;
  try {
    const Scenario base = load_scenario(path, opt.sets);
    if (base.sweep.empty())
      throw InputError(SourceMark{path, 1, 1}, "no sweep: block, expected sweep: {key: [values...]}");
    const std::vector<SweepPoint> points = sweep_points(base);
    const std::string fingerprint = scenario_fingerprint(base);
    // Rank 0: which points still need running.
    std::vector<int64_t> todo;
    std::vector<SweepPointResult> reused;
    if (rank == 0) {
      // Read where it exists; made once the points have run (a refused sweep leaves none).
      std::unique_ptr<SweepStore> store;
      std::error_code ec;
      if (!opt.database.empty() && std::filesystem::exists(opt.database, ec))
        store = std::make_unique<SweepStore>(opt.database);
      for (const SweepPoint& p : points) {
        SweepRow row;
        if (store && store->find(fingerprint, p.settings, row) && row.status != "error") {
          reused.push_back(reused_result(p, row));
        } else {
          todo.push_back(p.index);
        }
      }
    }
    int64_t n = static_cast<int64_t>(todo.size());
    MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    todo.resize(static_cast<size_t>(n));
    MPI_Bcast(todo.data(), static_cast<int>(n), MPI_INT64_T, 0, MPI_COMM_WORLD);

    SweepOptions mine = opt;
    mine.database.clear();
    mine.restrict_points = true;
    mine.only.clear();
    for (size_t i = static_cast<size_t>(rank); i < todo.size(); i += static_cast<size_t>(size))
      mine.only.push_back(todo[i]);
    mine.progress = opt.progress && rank == 0;
    SweepReport local = run_sweep(path, mine);

    const std::string buf = serialize(local.results);
    int len = static_cast<int>(buf.size());
    std::vector<int> lens(static_cast<size_t>(size));
    MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::vector<int> displs(static_cast<size_t>(size), 0);
    std::string all;
    if (rank == 0) {
      int total = 0;
      for (int r = 0; r < size; ++r) {
        displs[static_cast<size_t>(r)] = total;
        total += lens[static_cast<size_t>(r)];
      }
      all.resize(static_cast<size_t>(total));
    }
    MPI_Gatherv(buf.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      std::vector<SweepPointResult> ran;
      for (int r = 0; r < size; ++r)
        deserialize(all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                               static_cast<size_t>(lens[static_cast<size_t>(r)])),
                    ran);
      SweepReport rep;
      rep.name = base.name;
      rep.fingerprint = fingerprint;
      rep.objective = local.objective;
      rep.higher_is_better = local.higher_is_better;
      rep.points = static_cast<int64_t>(points.size());
      rep.results.resize(points.size());
      for (SweepPointResult& r : reused) rep.results[static_cast<size_t>(r.index)] = std::move(r);
      std::unique_ptr<SweepStore> store;
      if (!opt.database.empty()) {
        make_parent_dirs(opt.database);
        store = std::make_unique<SweepStore>(opt.database);
      }
      for (SweepPointResult& r : ran) {
        if (store) store->put(sweep_row(rep, r));
        rep.results[static_cast<size_t>(r.index)] = std::move(r);
      }
      std::cout << (json ? sweep_json(rep) : sweep_table(rep)) << std::flush;
      code = 1;
      for (const SweepPointResult& x : rep.results)
        if (x.status == "ok") code = 0;
    }
  } catch (const std::exception& e) {
    // Every rank loads the same scenario, so a bad one fails everywhere alike; anything
    // else would leave the others waiting: abort the job.
    if (dynamic_cast<const InputError*>(&e) == nullptr) {
      std::cerr << "clustersim: rank " << rank << ": " << e.what() << "\n";
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Finalize();
    throw;
  }
  MPI_Finalize();
  return code;
}

#else

int sweep_mpi(const std::string&, SweepOptions, bool) {
  throw std::runtime_error("sweep --mpi needs MPI, which was not found when this build was configured");
}

#endif

}  // namespace clustersim
