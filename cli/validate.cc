#include "cli/validate.h"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "calibrate/profile.h"
#include "cli/args.h"
#include "cli/output.h"
#include "plan/training_planner.h"
#include "reports/output_file.h"
#include "reports/sqlite_writer.h"
#include "reports/summary.h"
#include "scenarios/error.h"
#include "sim/run.h"

namespace clustersim {
std::string value_of(const std::vector<std::string>& args, size_t& i) {
  try {
    return need_value(args, i);
  } catch (const UsageError& e) {
    throw std::invalid_argument(e.what());
  }
}

void add_clock_metrics(const std::vector<real::GpuClockSummary>& clocks, Metrics& m) {
  if (clocks.empty() || !clocks[0].available) return;
  const real::GpuClockSummary& g = clocks[0];
  m.emplace_back("sm_clock_mhz", g.sm_mhz_median);
  m.emplace_back("sm_clock_max_mhz", g.sm_mhz_max);
  m.emplace_back("power_w", g.power_w_mean);
  m.emplace_back("power_limit_w", g.power_limit_w);
  m.emplace_back("power_capped_fraction", g.power_capped_fraction);
}

std::string real_rank_device(int32_t rank, const std::string& board) {
  const std::string slot = "gpu" + std::to_string(rank);
  return board.empty() ? slot : slot + " (" + board + ")";
}

std::string clock_line(const std::vector<real::GpuClockSummary>& clocks) {
  std::string out;
  for (size_t i = 0; i < clocks.size(); ++i) {
    const real::GpuClockSummary& g = clocks[i];
    if (!g.available) continue;
    char buf[200];
    std::snprintf(buf, sizeof buf, "%sgpu%zu SM %.0f MHz (max %.0f), %.0f W of %.0f W, power-capped %.0f%% of the time",
                  out.empty() ? "" : "; ", i, g.sm_mhz_median, g.sm_mhz_max, g.power_w_mean, g.power_limit_w,
                  100 * g.power_capped_fraction);
    out += buf;
  }
  return out;
}

// The real run recorded in a validation database (its run of source 'real'), checked
// against the plan: every recorded op must be the op the plan has at that place, with
// the same kind and shape, and every span must name one of them.
RealRun read_real_run(const std::string& path, const Plan& plan) {
  auto fail = [&](const std::string& what) { return InputError(SourceMark{path, 0, 0}, what); };
  check_input_file(path, "the SQLite database of a validate run");
  sqlite3* raw = nullptr;
  const int open_rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
  std::unique_ptr<sqlite3, decltype(&sqlite3_close)> db(raw, &sqlite3_close);
  if (open_rc != SQLITE_OK) throw fail(std::string("cannot open: ") + (raw ? sqlite3_errmsg(raw) : "out of memory"));
  auto query = [&](const std::string& sql, auto&& row) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db.get(), sql.c_str(), -1, &st, nullptr) != SQLITE_OK)
      throw fail(std::string("not a clustersim database (") + sqlite3_errmsg(db.get()) +
                 "), expected the file validate writes");
    std::unique_ptr<sqlite3_stmt, decltype(&sqlite3_finalize)> held(st, &sqlite3_finalize);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) row(st);
    if (rc != SQLITE_DONE) throw fail(std::string("cannot read: ") + sqlite3_errmsg(db.get()));
  };
  auto text = [&](sqlite3_stmt* st, int col) {
    const unsigned char* t = sqlite3_column_text(st, col);
    if (!t) throw fail("a recorded name is missing, expected the file validate writes");
    return std::string(reinterpret_cast<const char*>(t));
  };
  int64_t run = -1;
  query("SELECT max(run_id) FROM runs WHERE source = 'real' AND complete = 1", [&](sqlite3_stmt* st) {
    if (sqlite3_column_type(st, 0) != SQLITE_NULL) run = sqlite3_column_int64(st, 0);
  });
  if (run < 0) throw fail("holds no complete real run, expected one written by validate");
  const std::string where = " WHERE run_id = " + std::to_string(run);
  // The recorded plan, op by op.
  auto other_plan = [&](int64_t p, int64_t i, const std::string& what) {
    return fail("its real run is of another plan: program " + std::to_string(p) + " op " + std::to_string(i) + " " +
                what);
  };
  size_t recorded = 0;
  std::vector<std::vector<char>> seen(plan.programs.size());
  for (size_t p = 0; p < plan.programs.size(); ++p) seen[p].assign(plan.programs[p].ops.size(), 0);
  query(
      "SELECT program, op_index, name, kind, m, n, k, batch, heads, kv_heads, q_len, kv_len, head_dim, bytes_read, "
      "bytes_written, bytes, causal, coalesce(collective, ''), coalesce(grp, ''), coalesce(peer, 0) FROM ops" +
          where,
      [&](sqlite3_stmt* st) {
        const int64_t p = sqlite3_column_int64(st, 0), i = sqlite3_column_int64(st, 1);
        if (p < 0 || static_cast<size_t>(p) >= plan.programs.size() || i < 0 ||
            static_cast<size_t>(i) >= plan.programs[static_cast<size_t>(p)].ops.size())
          throw other_plan(p, i, "is not in the scenario's plan");
        if (seen[static_cast<size_t>(p)][static_cast<size_t>(i)]++) throw other_plan(p, i, "is recorded twice");
        const Op& op = plan.programs[static_cast<size_t>(p)].ops[static_cast<size_t>(i)];
        const std::string name = text(st, 2), kind = text(st, 3);
        if (name != plan.names[op.name] || kind != to_string(op.kind))
          throw other_plan(p, i,
                           "is '" + name + "' (" + kind + "), expected the scenario's '" + plan.names[op.name] + "' (" +
                               std::string(to_string(op.kind)) + ")");
        // A memory op's m annotates its cost class (elements cast or drawn for), not a shape
        // the real backend runs, except for the FP8 cast-transpose, whose m x n it transposes.
        const bool m_is_shape = op.kind != OpKind::Memory || op.access == MemAccess::Fp8CastTranspose;
        const int64_t want[] = {op.m,     op.n,      op.k,        op.batch,      op.heads,         op.kv_heads,
                                op.q_len, op.kv_len, op.head_dim, op.bytes_read, op.bytes_written, op.bytes};
        static const char* const field[] = {"m",     "n",      "k",        "batch",      "heads",         "kv_heads",
                                            "q_len", "kv_len", "head_dim", "bytes_read", "bytes_written", "bytes"};
        for (int f = m_is_shape ? 0 : 1; f < 12; ++f)
          if (sqlite3_column_int64(st, 4 + f) != want[f])
            throw other_plan(p, i,
                             "'" + name + "' has " + field[f] + " " + std::to_string(sqlite3_column_int64(st, 4 + f)) +
                                 ", expected the scenario's " + std::to_string(want[f]));
        const bool comm = is_comm(op.kind);
        const std::string coll = text(st, 17), grp = text(st, 18);
        if ((sqlite3_column_int(st, 16) != 0) != op.causal ||
            coll != (op.kind == OpKind::Collective ? std::string(to_string(op.collective)) : std::string()) ||
            grp != (comm ? std::string(to_string(op.group)) : std::string()) ||
            ((op.kind == OpKind::Send || op.kind == OpKind::Recv) && sqlite3_column_int(st, 19) != op.peer))
          throw other_plan(p, i, "'" + name + "' differs from the scenario's in its mask, collective, group or peer");
        ++recorded;
      });
  if (recorded != plan.total_ops())
    throw fail("its real run is of another plan: " + std::to_string(recorded) +
               " ops recorded, expected the scenario's " + std::to_string(plan.total_ops()));
  RealRun r;
  real::GpuClockSummary clocks;
  query("SELECT key, value FROM metrics" + where, [&](sqlite3_stmt* st) {
    const std::string key = text(st, 0);
    const double v = sqlite3_column_double(st, 1);
    if (key == "iteration_time_s") r.median_iteration_s = v;
    if (key == "sm_clock_mhz") clocks.sm_mhz_median = v, clocks.available = true;
    if (key == "sm_clock_max_mhz") clocks.sm_mhz_max = v;
    if (key == "power_w") clocks.power_w_mean = v;
    if (key == "power_limit_w") clocks.power_limit_w = v;
    if (key == "power_capped_fraction") clocks.power_capped_fraction = v;
    if (key == "op_events") r.op_events = v != 0;
  });
  if (clocks.available) r.clocks = {clocks};
  // The board the run was recorded on, from its ranks' devices ("gpu0 (NVIDIA H100 80GB HBM3)").
  query("SELECT device FROM ranks" + where + " ORDER BY rank LIMIT 1", [&](sqlite3_stmt* st) {
    const std::string d = text(st, 0);
    const size_t open = d.find(" (");
    if (open != std::string::npos && d.size() > open + 3 && d.back() == ')')
      r.board = d.substr(open + 2, d.size() - open - 3);
  });
  r.device_name = (r.board.empty() ? "" : r.board + ", ") + "the real run in " + path;
  query("SELECT rank, op_index, start_ps, end_ps FROM spans" + where, [&](sqlite3_stmt* st) {
    SpanRecord sp;
    sp.rank = sqlite3_column_int(st, 0);
    const int64_t op_index = sqlite3_column_int64(st, 1);
    if (op_index < 0 || op_index > INT32_MAX)
      throw fail("its real run has op " + std::to_string(op_index) + ", expected an index into the plan");
    sp.op = static_cast<uint32_t>(op_index);
    sp.start_ps = sqlite3_column_int64(st, 2);
    sp.end_ps = sqlite3_column_int64(st, 3);
    if (sp.rank < 0 || sp.rank >= plan.world_size)
      throw fail("its real run has rank " + std::to_string(sp.rank) + ", expected ranks below the scenario's " +
                 std::to_string(plan.world_size));
    const Program& prog = plan.programs[plan.rank_program[static_cast<size_t>(sp.rank)]];
    if (sp.op >= prog.ops.size())
      throw fail("its real run has rank " + std::to_string(sp.rank) + " op " + std::to_string(sp.op) +
                 ", expected ops below the scenario's " + std::to_string(prog.ops.size()));
    sp.stream = prog.ops[sp.op].stream;
    r.spans.push_back(sp);
  });
  if ((r.op_events && r.spans.empty()) || r.median_iteration_s <= 0)
    throw fail("its real run has no spans or no iteration time");
  return r;
}

namespace {

// `--profile P.yaml` in place of the scenario's calibration: key, a fault in it marked at
// the flag rather than at the scenario.
void use_profile(Scenario& s, const std::string& profile) {
  if (profile.empty()) return;
  s.calibration = std::filesystem::absolute(profile).string();
  s.marks["calibration"] = SourceMark{"--profile", 0, 0};
}

}  // namespace

int cmd_validate(const std::vector<std::string>& args, const RealHooks& hooks) {
  refuse_repeated(args, {"--profile", "--iterations", "--warmup", "--real-from", "--against", "--timing"});
  std::string path, profile, real_from, against;
  std::vector<std::string> sets;
  bool json = false, op_events = true, timing_given = false;
  int iterations = 5, warmup = 2;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--timing")
      op_events = need_timing(args, i), timing_given = true;
    else if (a == "--profile")
      profile = value_of(args, i);
    else if (a == "--set")
      sets.push_back(value_of(args, i));
    else if (a == "--iterations")
      iterations = static_cast<int>(need_int(args, i, a, 1, 100000));
    else if (a == "--warmup")
      warmup = static_cast<int>(need_int(args, i, a, 0, 100000));
    else if (a == "--json")
      json = true;
    else if (a == "--real-from")
      real_from = value_of(args, i);
    else if (a == "--against") {
      against = value_of(args, i);
      if (against != "pytorch")
        throw InputError(SourceMark{"--against", 0, 0}, "unknown reference '" + against + "', expected pytorch");
    }
    else if (!a.empty() && a[0] == '-')
      throw std::invalid_argument("unknown option '" + a + "' for validate");
    else
      path = a;
  }
  if (path.empty()) throw std::invalid_argument("validate needs a scenario file");
  // The scenario is read first: a bad one is the input's fault, whatever runs it.
  Scenario s = load_scenario(path, sets);
  use_profile(s, profile);
  if (!against.empty()) return validate_against_pytorch(s, iterations, warmup, json, real_from);
  if (real_from.empty() && !hooks.run_training)
    throw std::runtime_error(
        "validate needs the real backend: CUDA, cuBLASLt and NCCL were not found when this build was configured "
        "(--real-from DB.sqlite compares with a real run recorded earlier)");
  if (real_from.empty() && hooks.device_count() == 0)
    throw std::runtime_error(
        "validate runs the scenario on a GPU, and this machine has none (--real-from DB.sqlite compares with a real "
        "run recorded earlier)");
  if (s.inference && !op_events)
    throw std::invalid_argument("--timing stream times training steps; serving validation times each iteration's ops");
  if (s.inference && !real_from.empty())
    throw std::invalid_argument("--real-from compares training steps; serving validation runs on the GPU");
  if (s.inference) return hooks.run_serving(s, iterations, warmup, json);
  check_output_paths(s);
  if (!real_from.empty() && !s.output_sqlite.empty())
    check_output(s.mark("output.sqlite"), "output.sqlite", s.output_sqlite, {real_from}, true);
  PlannerOptions po;
  po.use_symmetry = false;
  const TrainingPlan tp = build_training_plan(s, po);
  // A recording is read first: a wrong one fails before the simulation, and the output
  // may be the very file.
  RealRun real_run;
  if (!real_from.empty()) {
    real_run = read_real_run(real_from, tp.plan);
    if (timing_given && real_run.op_events != op_events)
      throw InputError(SourceMark{real_from, 0, 0}, std::string("its real run was timed with --timing ") +
                                                        (real_run.op_events ? "ops" : "stream") +
                                                        ", expected the --timing given");
    op_events = real_run.op_events;
  }
  // The simulator, every rank simulated so each real rank has its twin.
  RunOptions ro;
  ro.simulate_all_ranks = true;
  ro.attention_dropout = false;  // the real backend's attention draws no dropout mask (real_backend/README.md)
  // Kernels as the real run timed them: each between its own two events, or from a full
  // queue when no event stands between ops (docs/model.md, "Kernels from a full queue").
  ro.timed_kernels = op_events;
  const RunOutcome sim = run_training(s, ro);
  if (real_from.empty()) real_run = hooks.run_training(tp.plan, iterations, warmup, op_events);

  // Per op: (simulated - real) / real, for ops the GPU spent at least a microsecond on.
  std::map<std::pair<int32_t, uint32_t>, int64_t> sim_ps;
  for (const SpanRecord& sp : sim.exec.spans) sim_ps[{sp.rank, sp.op}] = sp.end_ps - sp.start_ps;
  struct Row {
    std::string name, kind;
    double real_s, sim_s, err;
  };
  // A real send or receive is timed from when its stream reached it, so it holds the
  // wait for its peer; the simulator starts both at the transfer. Compare like with
  // like: a pair's real spans start when the later of the two was posted.
  std::vector<SpanRecord> real_spans = real_run.spans;
  {
    std::map<std::pair<int32_t, uint32_t>, size_t> at;
    for (size_t i = 0; i < real_spans.size(); ++i) at[{real_spans[i].rank, real_spans[i].op}] = i;
    for (const P2pMatch& m : match_p2p(tp.plan)) {
      auto a = at.find({m.send_rank, m.send_op}), b = at.find({m.recv_rank, m.recv_op});
      if (a == at.end() || b == at.end()) continue;
      SpanRecord &x = real_spans[a->second], &y = real_spans[b->second];
      const int64_t start = std::max(x.start_ps, y.start_ps);
      x.start_ps = std::min(start, x.end_ps);
      y.start_ps = std::min(start, y.end_ps);
    }
  }
  std::vector<Row> rows;
  for (const SpanRecord& sp : real_spans) {
    const Op& op = tp.plan.programs[tp.plan.rank_program[static_cast<size_t>(sp.rank)]].ops[sp.op];
    const double rs = static_cast<double>(sp.end_ps - sp.start_ps) * 1e-12;
    auto it = sim_ps.find({sp.rank, sp.op});
    if (it == sim_ps.end() || rs < 1e-6) continue;
    const double ss = static_cast<double>(it->second) * 1e-12;
    rows.push_back({tp.plan.names[op.name], std::string(to_string(op.kind)), rs, ss, (ss - rs) / rs});
  }
  std::vector<double> abs_err;
  for (const Row& r : rows) abs_err.push_back(std::fabs(r.err));
  std::sort(abs_err.begin(), abs_err.end());
  auto pct = [&](double q) {
    return abs_err.empty() ? 0.0 : abs_err[std::min(abs_err.size() - 1, static_cast<size_t>(q * abs_err.size()))];
  };
  const double median = pct(0.5), p95 = pct(0.95);
  // The clock the profile's tables were measured at, when it says.
  const double calibration_mhz = s.calibration.empty() ? 0.0 : load_profile(s.calibration).sm_clock_mhz;
  const double real_iter = real_run.median_iteration_s, sim_iter = sim.exec.makespan.seconds();
  const double e2e = (sim_iter - real_iter) / real_iter;
  // Worst op names by median error.
  std::map<std::string, std::vector<double>> by_name;
  std::map<std::string, std::pair<double, double>> time_by_name;
  for (const Row& r : rows) {
    by_name[r.name].push_back(r.err);
    time_by_name[r.name].first += r.real_s;
    time_by_name[r.name].second += r.sim_s;
  }
  std::vector<std::pair<double, std::string>> worst;
  for (auto& [name, errs] : by_name) {
    std::sort(errs.begin(), errs.end());
    worst.emplace_back(errs[errs.size() / 2], name);
  }
  std::sort(worst.begin(), worst.end(), [](auto& a, auto& b) { return std::fabs(a.first) > std::fabs(b.first); });

  // Both timelines in one database.
  if (!s.output_sqlite.empty()) {
    make_parent_dirs(s.output_sqlite);
    Timeline st = make_timeline(sim);
    write_sqlite(st, s.output_sqlite);
    Timeline rt;
    rt.run = st.run;
    rt.run.source = "real";
    rt.run.network_model = "real";
    rt.run.metrics = {{"iteration_time_s", real_iter}, {"op_events", op_events ? 1.0 : 0.0}};
    add_clock_metrics(real_run.clocks, rt.run.metrics);
    rt.plan = &tp.plan;
    for (int32_t r = 0; r < tp.plan.world_size; ++r)
      rt.ranks.push_back(RankInfo{r, 0, r, real_rank_device(r, real_run.board),
                                  tp.plan.rank_program[static_cast<size_t>(r)], r});
    rt.spans = real_run.spans;
    write_sqlite(rt, s.output_sqlite);
  }
  if (json) {
    Metrics m = {{"ops_compared", static_cast<double>(rows.size())}};
    if (op_events) m.insert(m.end(), {{"median_abs_error", median}, {"p95_abs_error", p95}});
    m.insert(m.end(), {{"real_iteration_s", real_iter}, {"sim_iteration_s", sim_iter}, {"iteration_error", e2e}});
    add_clock_metrics(real_run.clocks, m);
    if (calibration_mhz > 0) m.emplace_back("calibration_sm_clock_mhz", calibration_mhz);
    std::cout << summary_json({{"name", s.name}, {"device", real_run.device_name}, {"profile", s.calibration}}, m)
              << "\n";
    return 0;
  }
  std::printf("validate        %s on %s, profile %s\n", s.name.c_str(), real_run.device_name.c_str(),
              s.calibration.empty() ? "(defaults)" : s.calibration.c_str());
  if (op_events)
    std::printf("per-op error    median |err| %.2f%%, p95 %.2f%% over %zu ops (>= 1 us)\n", 100 * median, 100 * p95,
                rows.size());
  else
    std::printf("per-op error    not measured (--timing stream: no event between ops; kernels simulated from a full "
                "queue)\n");
  std::printf("iteration       real %.6f s, simulated %.6f s, error %+.2f%%\n", real_iter, sim_iter, 100 * e2e);
  if (const std::string c = clock_line(real_run.clocks); !c.empty()) std::printf("real GPUs       %s\n", c.c_str());
  if (calibration_mhz > 0 && !real_run.clocks.empty() && real_run.clocks[0].available)
    std::printf(
        "clock           the profile was measured at SM %.0f MHz, the real run ran at %.0f MHz (%+.1f%%): "
        "compute-bound kernels move with it\n",
        calibration_mhz, real_run.clocks[0].sm_mhz_median,
        100 * (real_run.clocks[0].sm_mhz_median / calibration_mhz - 1));
  if (!op_events) return 0;
  std::printf("worst ops (median error by name; total real / simulated ms):\n");
  for (size_t i = 0; i < worst.size() && i < 8; ++i)
    std::printf("  %-28s %+7.2f%%   %10.3f / %10.3f\n", worst[i].second.c_str(), 100 * worst[i].first,
                1e3 * time_by_name[worst[i].second].first, 1e3 * time_by_name[worst[i].second].second);
  return 0;
}

}  // namespace clustersim
