#include "cli/real_commands.h"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <tuple>

#include "calibrate/fit.h"
#include "calibrate/profile.h"
#include "cli/calibrate_args.h"
#include "cli/output.h"
#include "plan/training_planner.h"
#include "real_backend/collective_bench.h"
#include "real_backend/cudnn_attention.h"
#include "real_backend/gpu_monitor.h"
#include "real_backend/microbench.h"
#include "real_backend/real_executor.h"
#include "reports/output_file.h"
#include "reports/sqlite_writer.h"
#include "reports/summary.h"
#include "sim/run.h"
#include "sim/serving.h"

namespace clustersim {
namespace {

std::string num(double v) { return format_number(v); }

}  // namespace

namespace {

// Raw measurements, one row per (GPU, key), written as each is taken: an interrupted
// calibration resumes from where it stopped.
class RawStore {
 public:
  RawStore(const std::string& path, std::string gpu) : gpu_(std::move(gpu)) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK)
      throw std::runtime_error("cannot open " + path + ": " + sqlite3_errmsg(db_));
    exec(
        "CREATE TABLE IF NOT EXISTS calibration_measurements (gpu TEXT NOT NULL, key TEXT NOT NULL, seconds REAL NOT "
        "NULL, "
        "PRIMARY KEY (gpu, key))");
  }
  ~RawStore() { sqlite3_close(db_); }
  bool get(const std::string& key, double& seconds) {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db_, "SELECT seconds FROM calibration_measurements WHERE gpu = ? AND key = ?", -1, &st, nullptr);
    sqlite3_bind_text(st, 1, gpu_.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, key.c_str(), -1, SQLITE_TRANSIENT);
    const bool found = sqlite3_step(st) == SQLITE_ROW;
    if (found) seconds = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    if (found) ++reused_;
    return found;
  }
  void put(const std::string& key, double seconds) {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO calibration_measurements VALUES (?, ?, ?)", -1, &st, nullptr);
    sqlite3_bind_text(st, 1, gpu_.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, key.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 3, seconds);
    const int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) throw std::runtime_error(std::string("cannot record a measurement: ") + sqlite3_errmsg(db_));
  }
  int reused() const { return reused_; }

 private:
  void exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      const std::string msg = err ? err : "?";
      sqlite3_free(err);
      throw std::runtime_error("calibration database: " + msg);
    }
  }
  sqlite3* db_ = nullptr;
  std::string gpu_;
  int reused_ = 0;
};

}  // namespace

int cmd_calibrate(const std::vector<std::string>& args) {
  const CalibrateArgs a = parse_calibrate_args(args);
  const std::string &out = a.out, &raw = a.raw;
  if (!a.attention_backend.empty()) {
    real::AttentionChoice c = real::AttentionChoice::Auto;
    if (!real::parse_attention_choice(a.attention_backend, c))  // the names parse_calibrate_args takes
      throw std::logic_error("attention backend '" + a.attention_backend + "' passed the argument check");
    real::set_attention_choice(c);
  }
  if (real::device_count() == 0) throw std::runtime_error("calibrate measures a GPU, and this machine has none");
  real::MicrobenchOptions mo;
  mo.passes = a.passes;
  mo.gemm = a.gemm;
  mo.attention = a.attention;
  mo.memory = a.memory;
  mo.launch = a.launch;
  real::CollectiveBenchOptions co;
  co.collectives = a.collectives || (a.all && real::device_count() >= 2);
  co.p2p = a.p2p || (a.all && real::device_count() >= 2);
  const bool overlap = a.overlap;
  const std::vector<AttentionPoint>& borrowed = a.borrowed;
  std::string attention_backend = a.borrowed_backend;  // else measured here: which kernels ran
  const bool tty = ::isatty(STDERR_FILENO);
  mo.progress = [&](int done, int total, const std::string& what) {
    if (tty) {
      const int w = 30, filled = total ? done * w / total : w;
      std::fprintf(stderr, "\r[%s%s] %d/%d %-40s", std::string(static_cast<size_t>(filled), '#').c_str(),
                   std::string(static_cast<size_t>(w - filled), '.').c_str(), done, total, what.c_str());
      if (done == total) std::fprintf(stderr, "\n");
    } else if (done == total || done % 50 == 0) {
      std::fprintf(stderr, "calibrate: %d/%d %s\n", done, total, what.c_str());
    }
  };
  make_parent_dirs(raw);
  RawStore store(raw, real::device_name(0));
  mo.cached = [&](const std::string& key, double& seconds) { return store.get(key, seconds); };
  mo.record = [&](const std::string& key, double seconds) { store.put(key, seconds); };
  const bool compute = mo.gemm || mo.attention || mo.memory || mo.launch || !borrowed.empty();
  // The SM clock while the kernels are measured: a run at another clock (a step held at
  // its power cap) runs its compute-bound kernels slower than these tables say.
  real::GpuMonitor monitor({0});
  real::MicrobenchResult r = compute ? real::run_microbenchmarks(mo) : real::describe_device();
  if (attention_backend.empty()) attention_backend = r.attention_backend;
  for (const AttentionPoint& a : borrowed)
    r.attention.push_back({a.backward, a.head_dim, a.seq, a.batch_heads, a.causal, a.seconds, a.group});
  const std::vector<real::GpuClockSummary> clocks = monitor.summary();
  std::vector<CollectiveFit> fits;
  std::vector<CollectiveSample> samples;
  std::string held_out;
  if (co.collectives || co.p2p) {
    co.progress = mo.progress;
    co.cached = mo.cached;
    co.record = mo.record;
    for (const auto& m : real::run_collective_bench(co))
      samples.push_back(CollectiveSample{m.op, m.algo, m.proto, m.ranks, static_cast<double>(m.bytes), m.seconds});
    fits = fit_collectives(samples);
    // How well the interpolation predicts a size it was not given, below and from 1 MiB.
    std::vector<double> small, large;
    for (const HeldOutError& e : leave_one_size_out(samples))
      (e.sample.bytes >= 1048576 ? large : small).push_back(std::fabs(e.error));
    auto summary = [](std::vector<double> v) {
      if (v.empty()) return std::string("none");
      std::sort(v.begin(), v.end());
      char buf[96];
      std::snprintf(buf, sizeof buf, "median %.1f %%, p95 %.1f %%, worst %.1f %%", 100 * v[v.size() / 2],
                    100 * v[std::min(v.size() - 1, v.size() * 95 / 100)], 100 * v.back());
      return std::string(buf);
    };
    held_out = "leave-one-size-out error: < 1 MiB " + summary(small) + "; >= 1 MiB " + summary(large);
  }
  std::vector<real::OverlapMeasurement> overlaps;
  if (overlap) {
    overlaps = real::run_overlap_bench(mo.warmup, 10);
    for (const auto& m : overlaps) {
      store.put("overlap " + m.comm + " " + m.kernel + " alone", m.alone_s);
      store.put("overlap " + m.comm + " " + m.kernel + " shared", m.shared_s);
    }
  }
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  std::string y = "# Measured by clustersim calibrate on " + r.gpu +
                  ". The compute model interpolates these\n"
                  "# tables (cost_models/compute.h); network constants not measured here keep their\n"
                  "# defaults (calibrate/profiles/defaults.yaml).\n";
  y += "gpu: \"" + r.gpu + "\"\ndate: \"" + std::string(date) + "\"\ndriver: \"" + r.driver + "\"\ncuda: \"" + r.cuda +
       "\"\nnccl: \"" + r.nccl + "\"\ncommand: \"clustersim calibrate --suite " + a.suite + " --passes " +
       std::to_string(a.passes) + (a.attention_backend.empty() ? "" : " --attention-backend " + a.attention_backend) +
       " --out " + out + "\"\n";
  if (compute && !clocks.empty() && clocks[0].available)
    y += "sm_clock_mhz: " + num(clocks[0].sm_mhz_median) + "  # median SM clock while the kernels were measured\n";
  y += "compute:\n";
  if (mo.launch) {
    y += "  launch_overhead: " + num(r.launch_gap_s * 1e6) + "us\n";
    y += "  queue_interval: " + num(r.queue_interval_s * 1e6) + "us  # a small kernel back to back from a full queue\n";
    y += "  queue_saving: " + num(r.queue_saving_s * 1e6) + "us  # a kernel and its gap, between events less queued\n";
  }
  if (!overlaps.empty()) {
    // Kernel time beside a resident NCCL kernel over its time alone.
    y += "  overlap_slowdown:  # a kernel's time beside a waiting NCCL kernel, over its time alone\n";
    for (const std::string comm : {"p2p", "collective"}) {
      y += "    " + comm + ": {";
      bool first = true;
      for (const auto& m : overlaps)
        if (m.comm == comm) {
          y += std::string(first ? "" : ", ") + m.kernel + ": " + num(std::max(1.0, m.shared_s / m.alone_s));
          first = false;
        }
      y += "}\n";
    }
  }
  if (!compute && overlaps.empty()) y.resize(y.size() - std::string("compute:\n").size());
  if (!r.gemm.empty()) {
    y += "  gemm_backend: \"cuBLASLt (CUDA " + r.cuda + ")\"\n";
    y += "  gemm_table:  # [dtype, m, n, k, seconds]\n";
    for (const auto& g : r.gemm)
      y += "    - [" + g.dtype + ", " + std::to_string(g.m) + ", " + std::to_string(g.n) + ", " + std::to_string(g.k) +
           ", " + num(g.seconds) + "]\n";
  }
  if (!r.attention.empty()) {
    y += "  attention_backend: \"" + attention_backend + "\"\n";
    y += "  attention_table:  # [phase, head_dim, causal, seq, batch_heads, seconds, gqa_group]\n";
    for (const auto& a : r.attention)
      y += std::string("    - [") + (a.backward ? "backward" : "forward") + ", " + std::to_string(a.head_dim) + ", " +
           (a.causal ? "true" : "false") + ", " + std::to_string(a.seq) + ", " + std::to_string(a.batch_heads) + ", " +
           num(a.seconds) + ", " + std::to_string(a.group) + "]\n";
  }
  if (!r.memory.empty()) {
    y += "  memory_table:  # [bytes read + written, seconds, bytes read / bytes]\n";
    for (const auto& m : r.memory)
      y += "    - [" + std::to_string(m.bytes) + ", " + num(m.seconds) + ", " + num(m.read_share) + "]\n";
  }
  if (!fits.empty()) {
    y += "network:\n  # Collectives inside one node, measured. A time is interpolated linearly in bytes between\n"
         "  # the measured sizes (collective_points); " +
         held_out +
         ".\n"
         "  # The line over all sizes (collective_table) carries on past the largest.\n"
         "  collective_table:  # [op, algo, proto, ranks, alpha_s, beta_s_per_byte, rms_rel_residual]\n";
    for (const CollectiveFit& f : fits)
      y += "    - [" + f.op + ", " + f.algo + ", " + f.proto + ", " + std::to_string(f.ranks) + ", " + num(f.alpha_s) +
           ", " + num(f.beta_s_per_byte) + ", " + num(f.rms_rel_residual) + "]\n";
    y += "  collective_points:  # [op, algo, proto, ranks, bytes, seconds]\n";
    std::vector<CollectiveSample> sorted = samples;
    std::stable_sort(sorted.begin(), sorted.end(), [](const CollectiveSample& a, const CollectiveSample& b) {
      return std::tie(a.op, a.algo, a.proto, a.ranks, a.bytes) < std::tie(b.op, b.algo, b.proto, b.ranks, b.bytes);
    });
    for (const CollectiveSample& c : sorted)
      if (c.seconds > 0)
        y += "    - [" + c.op + ", " + c.algo + ", " + c.proto + ", " + std::to_string(c.ranks) + ", " +
             std::to_string(static_cast<int64_t>(c.bytes)) + ", " + num(c.seconds) + "]\n";
  }
  make_parent_dirs(out);
  write_file_atomically(out, y);
  load_profile(out);  // what was written reads back
  std::cout << "calibrate: " << r.gemm.size() << " GEMM shapes, " << r.attention.size() << " attention points, "
            << r.memory.size() << " memory sizes on " << r.gpu << " -> " << out << " (raw measurements in " << raw
            << ", " << store.reused() << " reused from an earlier run)";
  if (!fits.empty()) std::cout << "; " << fits.size() << " collective series (" << held_out << ")";
  std::cout << "\n";
  return 0;
}

namespace {

// Serving: iteration Plans of representative batches — decodes at several batch sizes,
// prefill chunks, a chunked-prefill mix — run on the GPU and costed by the engine's own
// path (memoized attention-free plan on the executor + attention kernels).
int validate_serving(const Scenario& s, const real::RealOptions& rop, bool json) {
  if (s.parallel.tp * s.parallel.pp > real::device_count())
    throw InputError(s.mark("parallel"), "a replica needs " + std::to_string(s.parallel.tp * s.parallel.pp) +
                                             " GPUs, this machine has " + std::to_string(real::device_count()));
  ServingShape shape;
  shape.model = s.model;
  shape.tp = s.parallel.tp;
  shape.pp = s.parallel.pp;
  shape.weight_dtype = s.serving.weight_dtype_for(s.model.dtype);
  shape.kv_dtype = s.serving.kv_dtype_for(s.model.dtype);
  struct Case {
    std::string name;
    IterationBatch batch;
  };
  std::vector<Case> cases;
  for (int64_t b : {1, 16, 64, 256}) {
    IterationBatch x;
    x.tokens = x.emitting = b;
    x.decode_context = b * 1024;
    cases.push_back({"decode " + std::to_string(b) + " x 1k ctx", x});
  }
  for (int64_t c : {512, 2048}) {
    IterationBatch x;
    x.tokens = c;
    x.emitting = 1;
    x.prefill = {{c, 0}};
    cases.push_back({"prefill " + std::to_string(c), x});
  }
  {
    IterationBatch x;
    x.tokens = 1024 + 64;
    x.emitting = 1 + 64;
    x.prefill = {{1024, 1024}};
    x.decode_context = 64 * 2048;
    cases.push_back({"chunk 1024 + 64 decodes", x});
  }
  // The real backend runs a prefill's attention in 16 bits: the simulated side costs the same
  // kernel, not TensorRT-LLM's FP8 context attention that inference.fp8_context_fmha may take.
  Scenario sim_s = s;
  sim_s.serving.fp8_context_fmha = "off";
  std::string device;
  std::vector<double> errs;
  Metrics m;
  if (!json) std::printf("%-26s %12s %12s %9s\n", "iteration", "real", "simulated", "error");
  for (const Case& c : cases) {
    const Plan plan = build_iteration_plan(shape, c.batch, true);
    const real::RealResult rr = real::run_plan(plan, rop);
    device = rr.device_name;
    const double sim = serving_iteration_seconds(sim_s, c.batch);
    const double err = (sim - rr.median_iteration_s) / rr.median_iteration_s;
    errs.push_back(std::fabs(err));
    m.emplace_back(c.name + " real_s", rr.median_iteration_s);
    m.emplace_back(c.name + " sim_s", sim);
    if (!json)
      std::printf("%-26s %10.3f ms %10.3f ms %+8.2f%%\n", c.name.c_str(), 1e3 * rr.median_iteration_s, 1e3 * sim,
                  100 * err);
  }
  std::sort(errs.begin(), errs.end());
  const double median = errs[errs.size() / 2], worst = errs.back();
  m.emplace_back("median_abs_error", median);
  m.emplace_back("max_abs_error", worst);
  if (json) {
    std::cout << summary_json({{"name", s.name}, {"device", device}, {"profile", s.calibration}}, m) << "\n";
  } else {
    std::printf("serving iterations on %s, profile %s: median |error| %.2f%%, worst %.2f%%\n", device.c_str(),
                s.calibration.empty() ? "(defaults)" : s.calibration.c_str(), 100 * median, 100 * worst);
  }
  return 0;
}

}  // namespace

RealHooks real_hooks() {
  RealHooks h;
  h.device_count = [] { return real::device_count(); };
  h.run_training = [](const Plan& plan, int iterations, int warmup, bool op_events) {
    real::RealOptions rop;
    rop.iterations = iterations;
    rop.warmup = warmup;
    rop.op_events = op_events;
    real::RealResult r = real::run_plan(plan, rop);
    if (!r.attention_backend.empty()) std::fprintf(stderr, "real: attention on %s\n", r.attention_backend.c_str());
    return RealRun{std::move(r.spans), r.median_iteration_s, r.device_name, std::move(r.clocks), r.device_name,
                   op_events};
  };
  h.run_serving = [](const Scenario& s, int iterations, int warmup, bool json) {
    real::RealOptions rop;
    rop.iterations = iterations;
    rop.warmup = warmup;
    return validate_serving(s, rop, json);
  };
  return h;
}

}  // namespace clustersim
