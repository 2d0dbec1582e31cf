// The clustersim command line. Only this file decides exit codes:
//   0 success, 1 bad input (scenario or flag values), 2 usage, 3 failure while running
//   or writing results.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "calibrate/profile.h"
#include "cli/accuracy.h"
#include "calibrate/profile_check.h"
#include "plan/plan_io.h"
#include "plan/training_planner.h"
#include "reports/html_report.h"
#include "reports/output_file.h"
#include "reports/sqlite_writer.h"
#include "reports/trace_writer.h"
#include "scenarios/scenario.h"
#include "scenarios/units.h"
#include "sim/collective_sweep.h"
#include "sim/run.h"
#include "sim/search.h"
#include "sim/serving.h"
#include "sim/sweep.h"
#include "sim/sweep_mpi.h"
#include "sim/validate.h"
#include "topology/presets.h"
#ifdef CLUSTERSIM_HAVE_REAL
#include "real_backend/real_executor.h"
#endif
#ifdef CLUSTERSIM_HAVE_MPI
#include "real_backend/mpi_launch.h"
#endif
#ifdef CLUSTERSIM_HAVE_REAL
#include "sim/real_commands.h"
#endif

namespace {

using namespace clustersim;

constexpr const char* kUsage =
    "usage: clustersim <command> [options]\n"
    "\n"
    "commands:\n"
    "  run S.yaml [--set key=value]... [--json]      simulate a training scenario\n"
    "  collective --op OP --gpus N --cluster PRESET [--nodes K] [--algo A] [--proto P]\n"
    "             [--network-model analytic|flow] [--concurrent K] [--fabric F] [--oversubscription X]\n"
    "             [--nics-per-leaf N] [--profile P.yaml] [--min SIZE] [--max SIZE] [--json]\n"
    "                                                collective size sweep, nccl-tests style\n"
    "  plan S.yaml [--set key=value]... [--out FILE] write the scenario's Plan as JSON (stdout by default)\n"
    "  sweep S.yaml [--jobs N] [--set key=value]... [--out R.sqlite] [--rank-by METRIC] [--mpi] [--json]\n"
    "                                                run every point of the scenario's sweep: block and rank them;\n"
    "                                                results in R.sqlite (default output.sqlite), resumable;\n"
    "                                                --mpi spreads the points over mpirun's ranks\n"
    "  report RUN.sqlite --html OUT.html [--run ID] [--max-spans N]\n"
    "                                                a self-contained HTML report of one run (default: the last)\n"
    "  search S.yaml [--top K] [--jobs N] [--refine flow|analytic] [--set key=value]... [--json]\n"
    "                                                the fastest valid training layout for the model, cluster and\n"
    "                                                global batch: estimate every layout, simulate the best K\n"
    "  real S.yaml [--set key=value]... [--iterations N] [--warmup W] [--mpi] [--json]\n"
    "                                                execute the scenario's plan on GPUs (CUDA, cuBLAS, NCCL): one\n"
    "                                                thread per local GPU, or one process per GPU under mpirun --mpi\n"
    "                                                (the same: clustersim-real S.yaml ...)\n"
    "  calibrate --suite gemm|attention|memory|launch|collectives|p2p|overlap|all --out P.yaml [--raw M.sqlite]\n"
    "            [--passes N]\n"
    "                                                measure this GPU's kernels (and, on 2+ GPUs, NCCL's\n"
    "                                                collectives; overlap: kernels beside a waiting NCCL\n"
    "                                                kernel, not part of all) into a calibration profile\n"
    "  validate S.yaml --profile P.yaml [--iterations N] [--json] [--real-from DB.sqlite]\n"
    "                                                run real and simulated, report per-op and end-to-end error\n"
    "                                                (--real-from: against the real run a validate recorded)\n"
    "  profile-check P.yaml [--gpu PRESET]           held-out error of a profile's GEMM interpolation\n"
    "  accuracy DIR [--json] [--jobs N]              every scenario in DIR with a reference: block, predicted\n"
    "                                                against the published value; error per case, MAPE, worst\n"
    "  keys                                          list every scenario key (type, default, meaning)\n"
    "  help, --help                                  this text\n"
    "  --version                                     the version\n"
    "\n"
    "run options:\n"
    "  --set key=value       override a scenario key (repeatable), e.g. --set parallel.tp=4\n"
    "  --json                print one JSON object instead of the table\n"
    "  --simulate-all-ranks  simulate every rank instead of one per symmetry class\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string need_value(const std::vector<std::string>& args, size_t& i) {
  if (i + 1 >= args.size()) throw UsageError(args[i] + " needs a value");
  return args[++i];
}

int cmd_run(const std::vector<std::string>& args) {
  std::string path;
  std::vector<std::string> sets;
  bool json = false;
  RunOptions opt;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set")
      sets.push_back(need_value(args, i));
    else if (a.rfind("--set=", 0) == 0)
      sets.push_back(a.substr(6));
    else if (a == "--json")
      json = true;
    else if (a == "--simulate-all-ranks")
      opt.simulate_all_ranks = true;
    else if (!a.empty() && a[0] == '-')
      throw UsageError("unknown option '" + a + "' for run");
    else if (path.empty())
      path = a;
    else
      throw UsageError("run takes one scenario file, got '" + path + "' and '" + a + "'");
  }
  if (path.empty()) throw UsageError("run needs a scenario file");
  Scenario s = load_scenario(path, sets);
  if (!s.sweep.empty())
    std::cerr << s.mark("sweep").str()
              << ": warning: run simulates the scenario as written; sweep points are not run\n";
  if (s.inference) {
    check_output_paths(s);
    const ServingResult r = run_serving(s, !s.output_sqlite.empty() || !s.output_trace.empty(), true);
    write_serving_outputs(s, r);
    std::cout << (json ? serving_summary_json(s, r) + "\n" : serving_summary_table(s, r));
    return 0;
  }
  check_output_paths(s);
  opt.progress = true;
  opt.record_link_usage = !s.output_sqlite.empty() || !s.output_trace.empty();
  opt.keep_spans = opt.record_link_usage;
  RunOutcome out = run_training(s, opt);
  write_outputs(out);
  std::cout << (json ? summary_json_line(out) + "\n" : summary_table(out));
  return 0;
}

int cmd_collective(const std::vector<std::string>& args) {
  CollectiveSweepConfig cfg;
  std::string preset, op = "all-reduce", algo = "auto", proto = "auto", model = "analytic", fabric = "fat-tree";
  double oversub = 1.0;
  int nics_per_leaf = 32;
  int nodes = 0;
  bool json = false, have_gpus = false;
  auto as_int = [](const std::string& flag, const std::string& v) {
    try {
      size_t used = 0;
      long long x = std::stoll(v, &used);
      if (used != v.size() || x < 1 || x > (1 << 20)) throw std::invalid_argument(v);
      return static_cast<int>(x);
    } catch (const std::exception&) {
      throw InputError(SourceMark{flag, 0, 0}, "expected a positive integer up to 1048576, got '" + v + "'");
    }
  };
  auto as_size = [](const std::string& flag, const std::string& v) {
    int64_t b = 0;
    std::string why;
    if (!parse_size(v, b, why)) throw InputError(SourceMark{flag, 0, 0}, why);
    if (b < 1) throw InputError(SourceMark{flag, 0, 0}, "size must be at least 1 byte");
    return b;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--op")
      op = need_value(args, i);
    else if (a == "--gpus") {
      cfg.gpus = as_int(a, need_value(args, i));
      have_gpus = true;
    } else if (a == "--nodes")
      nodes = as_int(a, need_value(args, i));
    else if (a == "--cluster")
      preset = need_value(args, i);
    else if (a == "--algo")
      algo = need_value(args, i);
    else if (a == "--proto")
      proto = need_value(args, i);
    else if (a == "--network-model")
      model = need_value(args, i);
    else if (a == "--concurrent")
      cfg.concurrent = as_int(a, need_value(args, i));
    else if (a == "--fabric")
      fabric = need_value(args, i);
    else if (a == "--oversubscription") {
      const std::string v = need_value(args, i);
      char* end = nullptr;
      oversub = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(oversub >= 1.0) || oversub > 1e6)
        throw InputError(SourceMark{a, 0, 0}, "expected a number >= 1, got '" + v + "'");
    } else if (a == "--nics-per-leaf")
      nics_per_leaf = as_int(a, need_value(args, i));
    else if (a == "--profile")
      cfg.profile = load_profile(need_value(args, i), SourceMark{"--profile", 0, 0}).network;
    else if (a == "--min")
      cfg.min_bytes = as_size(a, need_value(args, i));
    else if (a == "--max")
      cfg.max_bytes = as_size(a, need_value(args, i));
    else if (a == "--json")
      json = true;
    else
      throw UsageError("unknown option '" + a + "' for collective");
  }
  if (!have_gpus) throw UsageError("collective needs --gpus N");
  if (preset.empty()) throw UsageError("collective needs --cluster PRESET");
  if (op == "send-recv")
    cfg.kind = SweepOp::SendRecv;
  else if (!parse_collective(op, cfg.op))
    throw InputError(SourceMark{"--op", 0, 0},
                     "unknown operation '" + op +
                         "', expected all-reduce, all-gather, reduce-scatter, broadcast, reduce, "
                         "all-to-all or send-recv");
  if (algo != "auto") {
    Algorithm a;
    if (!parse_algorithm(algo, a))
      throw InputError(SourceMark{"--algo", 0, 0}, "unknown algorithm '" + algo +
                                                       "', expected auto, ring, tree, direct, halving-doubling, "
                                                       "hierarchical or nvls");
    cfg.algorithm = a;
  }
  if (proto != "auto") {
    Protocol p;
    if (!parse_protocol(proto, p))
      throw InputError(SourceMark{"--proto", 0, 0},
                       "unknown protocol '" + proto + "', expected auto, LL, LL128 or Simple");
    cfg.protocol = p;
  }
  if (model != "analytic" && model != "flow")
    throw InputError(SourceMark{"--network-model", 0, 0},
                     "unknown network model '" + model + "', expected analytic or flow");
  cfg.flow = model == "flow";
  const NodeSpec* node = find_node_preset(preset);
  if (!node) {
    std::string names;
    for (const auto& n : node_preset_names()) names += (names.empty() ? "" : ", ") + n;
    throw InputError(SourceMark{"--cluster", 0, 0},
                     "unknown cluster preset '" + preset + "', expected one of: " + names);
  }
  cfg.cluster.node = *node;
  if (!parse_fabric(fabric, cfg.cluster.fabric.kind))
    throw InputError(SourceMark{"--fabric", 0, 0},
                     "unknown fabric '" + fabric + "', expected fat-tree, rail-optimized, switch, ring or torus");
  cfg.cluster.fabric.oversubscription = oversub;
  cfg.cluster.fabric.nics_per_leaf = nics_per_leaf;
  if (static_cast<int64_t>(cfg.gpus) * cfg.concurrent > (int64_t{1} << 20))
    throw InputError(SourceMark{"--concurrent", 0, 0}, "--gpus x --concurrent = " +
                                                           std::to_string(static_cast<int64_t>(cfg.gpus) * cfg.concurrent) +
                                                           " ranks is past the budget of 1048576, expected fewer");
  const int total = cfg.gpus * cfg.concurrent;
  cfg.nodes = nodes > 0 ? nodes : (total + node->gpus - 1) / node->gpus;
  if (total % cfg.nodes != 0)
    throw InputError(SourceMark{"--gpus", 0, 0}, "--gpus is the total over all nodes: " + std::to_string(total) +
                                                     " GPUs do not split evenly over " + std::to_string(cfg.nodes) +
                                                     " nodes");
  if (total / cfg.nodes > node->gpus)
    throw InputError(SourceMark{"--gpus", 0, 0},
                     std::to_string(total) + " GPUs on " + std::to_string(cfg.nodes) + " node(s) of " + preset +
                         " need " + std::to_string(total / cfg.nodes) + " GPUs per node, the preset has " +
                         std::to_string(node->gpus) + "; add --nodes");
  if (cfg.nodes > 1) cfg.cluster.node.nics = std::min(cfg.cluster.node.nics, total / cfg.nodes);
  if (cfg.min_bytes > cfg.max_bytes) throw InputError(SourceMark{"--min", 0, 0}, "--min is larger than --max");
  std::vector<CollectiveRow> rows;
  try {
    rows = run_collective_sweep(cfg);
  } catch (const std::invalid_argument& e) {
    throw InputError(SourceMark{"--algo", 0, 0}, e.what());
  }
  std::cout << (json ? format_collective_json(cfg, rows) + "\n" : format_collective_table(cfg, rows));
  return 0;
}

int cmd_sweep(const std::vector<std::string>& args) {
  std::string path;
  SweepOptions opt;
  bool json = false, mpi = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set") {
      opt.sets.push_back(need_value(args, i));
    } else if (a.rfind("--set=", 0) == 0) {
      opt.sets.push_back(a.substr(6));
    } else if (a == "--jobs" || a == "-j") {
      const std::string v = need_value(args, i);
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || n < 1 || n > 1024)
        throw InputError(SourceMark{a, 0, 0}, "expected a thread count from 1 to 1024, got '" + v + "'");
      opt.jobs = static_cast<int>(n);
    } else if (a == "--out") {
      opt.database = need_value(args, i);
    } else if (a == "--rank-by") {
      opt.rank_by = need_value(args, i);
    } else if (a == "--json") {
      json = true;
    } else if (a == "--mpi") {
      mpi = true;
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError("unknown option '" + a + "' for sweep");
    } else if (path.empty()) {
      path = a;
    } else {
      throw UsageError("sweep takes one scenario file, got '" + path + "' and '" + a + "'");
    }
  }
  if (path.empty()) throw UsageError("sweep needs a scenario file");
  {
    const Scenario s = load_scenario(path, opt.sets);
    if (opt.database.empty()) opt.database = s.output_sqlite;
    if (!opt.database.empty())
      check_output(opt.database == s.output_sqlite ? s.mark("output.sqlite") : SourceMark{"--out", 0, 0}, "--out",
                 opt.database, scenario_inputs(s));
  }
  if (mpi) return sweep_mpi(path, opt, json);
  const SweepReport r = run_sweep(path, opt);
  std::cout << (json ? sweep_json(r) : sweep_table(r));
  for (const SweepPointResult& x : r.results)
    if (x.status == "ok") return 0;
  return 1;  // no point could run
}

int cmd_search(const std::vector<std::string>& args) {
  std::string path;
  std::vector<std::string> sets;
  SearchOptions opt;
  bool json = false;
  auto count = [&](const std::string& flag, const std::string& v, int lo, int hi) {
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (*end != '\0' || n < lo || n > hi)
      throw InputError(SourceMark{flag, 0, 0}, "expected an integer from " + std::to_string(lo) + " to " +
                                                   std::to_string(hi) + ", got '" + v + "'");
    return static_cast<int>(n);
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set") {
      sets.push_back(need_value(args, i));
    } else if (a.rfind("--set=", 0) == 0) {
      sets.push_back(a.substr(6));
    } else if (a == "--top") {
      opt.top_k = count(a, need_value(args, i), 1, 1000);
    } else if (a == "--jobs" || a == "-j") {
      opt.jobs = count(a, need_value(args, i), 1, 1024);
    } else if (a == "--refine") {
      opt.refine = need_value(args, i);
      if (opt.refine != "flow" && opt.refine != "analytic")
        throw InputError(SourceMark{a, 0, 0}, "expected flow or analytic, got '" + opt.refine + "'");
    } else if (a == "--json") {
      json = true;
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError("unknown option '" + a + "' for search");
    } else if (path.empty()) {
      path = a;
    } else {
      throw UsageError("search takes one scenario file, got '" + path + "' and '" + a + "'");
    }
  }
  if (path.empty()) throw UsageError("search needs a scenario file");
  const Scenario s = load_scenario(path, sets);
  const SearchResult r = search_layouts(s, opt);
  std::cout << (json ? search_json(r) : search_table(r));
  return r.best >= 0 ? 0 : 1;
}

int cmd_report(const std::vector<std::string>& args) {
  std::string db, html;
  ReportOptions opt;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--html") {
      html = need_value(args, i);
    } else if (a == "--run") {
      const std::string v = need_value(args, i);
      char* end = nullptr;
      opt.run_id = std::strtoll(v.c_str(), &end, 10);
      if (*end != '\0' || opt.run_id < 1)
        throw InputError(SourceMark{"--run", 0, 0}, "expected a run id (a positive integer), got '" + v + "'");
    } else if (a == "--max-spans") {
      const std::string v = need_value(args, i);
      char* end = nullptr;
      opt.max_spans = std::strtoll(v.c_str(), &end, 10);
      if (*end != '\0' || opt.max_spans < 1)
        throw InputError(SourceMark{"--max-spans", 0, 0}, "expected a positive integer, got '" + v + "'");
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError("unknown option '" + a + "' for report");
    } else if (db.empty()) {
      db = a;
    } else {
      throw UsageError("report takes one database, got '" + db + "' and '" + a + "'");
    }
  }
  if (db.empty()) throw UsageError("report needs a database (RUN.sqlite)");
  if (html.empty()) throw UsageError("report needs --html OUT.html");
  check_output(SourceMark{"--html", 0, 0}, "--html", html, {db});
  write_html_report(db, html, opt);
  std::cerr << "wrote " << html << "\n";
  return 0;
}

int cmd_plan(const std::vector<std::string>& args) {
  std::string path, out;
  std::vector<std::string> sets;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set")
      sets.push_back(need_value(args, i));
    else if (a == "--out")
      out = need_value(args, i);
    else if (!a.empty() && a[0] == '-')
      throw UsageError("unknown option '" + a + "' for plan");
    else if (path.empty())
      path = a;
    else
      throw UsageError("plan takes one scenario file");
  }
  if (path.empty()) throw UsageError("plan needs a scenario file");
  const Scenario s = load_scenario(path, sets);
  if (!out.empty()) check_output(SourceMark{"--out", 0, 0}, "--out", out, scenario_inputs(s));
  const std::string json = plan_to_json(build_training_plan(s).plan);
  if (out.empty()) {
    std::cout << json;
    return 0;
  }
  write_file_atomically(out, json);
  return 0;
}

int cmd_real(const std::vector<std::string>& args) {
  std::string path;
  std::vector<std::string> sets;
  bool json = false, mpi = false;
  int iterations = 5, warmup = 2;
  auto count = [](const std::string& flag, const std::string& v, int lo) {
    try {
      size_t used = 0;
      const long x = std::stol(v, &used);
      if (used != v.size() || x < lo || x > 100000) throw std::invalid_argument(v);
      return static_cast<int>(x);
    } catch (const std::exception&) {
      throw InputError(SourceMark{flag, 0, 0}, "expected an integer >= " + std::to_string(lo) + ", got '" + v + "'");
    }
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set")
      sets.push_back(need_value(args, i));
    else if (a == "--iterations")
      iterations = count(a, need_value(args, i), 1);
    else if (a == "--warmup")
      warmup = count(a, need_value(args, i), 0);
    else if (a == "--json")
      json = true;
    else if (a == "--mpi")
      mpi = true;
    else if (!a.empty() && a[0] == '-')
      throw UsageError("unknown option '" + a + "' for real");
    else if (path.empty())
      path = a;
    else
      throw UsageError("real takes one scenario file");
  }
  if (path.empty()) throw UsageError("real needs a scenario file");
  const Scenario s = load_scenario(path, sets);
  check_output_paths(s);
  PlannerOptions po;
  po.use_symmetry = false;  // every rank runs on a GPU of its own
  const TrainingPlan tp = build_training_plan(s, po);
#ifndef CLUSTERSIM_HAVE_REAL
  (void)tp;
  (void)json;
  (void)mpi;
  (void)iterations;
  (void)warmup;
  throw std::runtime_error(
      "this build has no real backend: CUDA, cuBLASLt and NCCL were not found when it was configured");
#else
  real::RealOptions ro;
  ro.iterations = iterations;
  ro.warmup = warmup;
  real::RealResult rr;
  if (mpi) {
#ifdef CLUSTERSIM_HAVE_MPI
    real::MpiRun run;
    try {
      run = real::run_plan_mpi(tp.plan, ro);
    } catch (const std::exception& e) {
      std::cerr << "clustersim: error: " << e.what() << "\n";
      real::mpi_abort(3);  // the other processes would wait for this one forever
    }
    const int rank = run.rank;
    real::mpi_finalize();
    if (rank != 0) return 0;  // rank 0 reports for all
    rr = std::move(run.result);
#else
    throw std::runtime_error("this build has no MPI launch: no MPI was found when it was configured");
#endif
  } else {
    rr = real::run_plan(tp.plan, ro);
  }
  const double iter = rr.median_iteration_s;
  const double tokens = static_cast<double>(tp.layout.global_batch * s.model.seq_len);
  const double tflops = tp.model_flops_per_rank / iter / 1e12;
  Timeline t;
  t.run.name = s.name;
  t.run.source = "real";
  t.run.kind = "training";
  t.run.network_model = "real";
  t.run.scenario_yaml = s.merged_yaml;
  t.run.seed = s.seed;
  t.run.metrics = {{"iteration_time_s", iter},
                   {"iterations_timed", static_cast<double>(rr.iteration_s.size())},
                   {"tokens_per_s", tokens / iter},
                   {"tflops_per_gpu", tflops},
                   {"hardware_tflops_per_gpu", tp.hardware_flops_per_rank / iter / 1e12},
                   {"mfu", tflops / (s.cluster.node.gpu.peak_flops(s.model.dtype) / 1e12)},
                   {"gpus", static_cast<double>(tp.plan.world_size)}};
  for (size_t i = 0; i < rr.iteration_s.size(); ++i)
    t.run.metrics.emplace_back("iteration_" + std::to_string(i) + "_s", rr.iteration_s[i]);
  add_clock_metrics(rr.clocks, t.run.metrics);
  t.plan = &tp.plan;
  for (int32_t r = 0; r < tp.plan.world_size; ++r)
    t.ranks.push_back(RankInfo{r, 0, r, "gpu" + std::to_string(r), tp.plan.rank_program[static_cast<size_t>(r)], r});
  t.spans = rr.spans;
  if (!s.output_sqlite.empty()) write_sqlite(t, s.output_sqlite);
  if (!s.output_trace.empty()) write_chrome_trace(t, s.output_trace);
  if (json) {
    std::cout << summary_json({{"name", s.name}, {"kind", "training"}, {"source", "real"}, {"device", rr.device_name}},
                              t.run.metrics)
              << "\n";
  } else {
    std::printf(
        "scenario        %s\nsource          real: %d x %s\niteration       %.6f s (median of %zu after %d warm-up)\n"
        "throughput      %.1f tokens/s\nper GPU         %.1f TFLOP/s model, MFU %.1f%%\nops timed       %zu\n",
        s.name.c_str(), rr.devices, rr.device_name.c_str(), iter, rr.iteration_s.size(), warmup, tokens / iter, tflops,
        100.0 * tflops / (s.cluster.node.gpu.peak_flops(s.model.dtype) / 1e12), rr.spans.size());
    if (const std::string c = clock_line(rr.clocks); !c.empty()) std::printf("GPUs            %s\n", c.c_str());
  }
  return 0;
#endif
}

// Held-out error of a profile's GEMM interpolation; runs anywhere (no GPU needed).
int cmd_profile_check(const std::vector<std::string>& args) {
  if (args.size() != 1 && args.size() != 3) throw UsageError("profile-check takes P.yaml [--gpu PRESET]");
  const CalibrationProfile p = load_profile(args[0], SourceMark{args[0], 0, 0});
  std::string gpu_name = "h200-sxm";
  if (args.size() == 3) {
    if (args[1] != "--gpu") throw UsageError("unknown option '" + args[1] + "' for profile-check");
    gpu_name = args[2];
  }
  const GpuSpec* gpu = find_gpu_preset(gpu_name);
  if (!gpu) throw InputError(SourceMark{"--gpu", 0, 0}, "unknown GPU preset '" + gpu_name + "'");
  const HeldOutError e = gemm_held_out_error(p, *gpu);
  if (e.points == 0) throw InputError(SourceMark{args[0], 0, 0}, "the profile has no GEMM table to check");
  std::printf(
      "gemm interpolation, %d held-out shapes (powers-of-two grid predicting the shapes between): median |err| %.2f%%, "
      "p95 %.2f%%, "
      "worst %.2f%%\n",
      e.points, 100 * e.median, 100 * e.p95, 100 * e.worst);
  return 0;
}

int cmd_keys() {
  auto cell = [](std::string v) {  // a literal '|' would end a Markdown table cell
    for (size_t i = v.find('|'); i != std::string::npos; i = v.find('|', i + 2)) v.replace(i, 1, "\\|");
    return v;
  };
  std::cout << "| key | type | default | meaning |\n| --- | --- | --- | --- |\n";
  for (const auto& k : scenario_key_docs())
    std::cout << "| `" << k.key << "` | " << cell(k.type) << " | " << cell(k.default_value) << " | " << cell(k.doc)
              << " |\n";
  return 0;
}

// Runs one command; its exit code.
int dispatch(const std::string& cmd, const std::vector<std::string>& args) {
  try {
    if (cmd == "run") return cmd_run(args);
    if (cmd == "collective") return cmd_collective(args);
    if (cmd == "plan") return cmd_plan(args);
    if (cmd == "sweep") return cmd_sweep(args);
    if (cmd == "search") return cmd_search(args);
    if (cmd == "report") return cmd_report(args);
    if (cmd == "real") return cmd_real(args);
    if (cmd == "validate") {
      RealHooks hooks;
#ifdef CLUSTERSIM_HAVE_REAL
      hooks = real_hooks();
#endif
      try {
        return cmd_validate(args, hooks);
      } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
      }
    }
    if (cmd == "calibrate") {
#ifdef CLUSTERSIM_HAVE_REAL
      try {
        return cmd_calibrate(args);
      } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
      }
#else
      throw std::runtime_error(
          cmd + " needs the real backend: CUDA, cuBLASLt and NCCL were not found when this build was configured");
#endif
    }
    if (cmd == "keys") return cmd_keys();
    if (cmd == "accuracy") {
      try {
        return cmd_accuracy(args);
      } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
      }
    }
    if (cmd == "profile-check") return cmd_profile_check(args);
    if (cmd == "help" || cmd == "--help" || cmd == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (cmd == "--version") {
      std::cout << "clustersim 0.1.0\n";
      return 0;
    }
    throw UsageError("unknown command '" + cmd + "'");
  } catch (const UsageError& e) {
    std::cerr << "clustersim: " << e.what() << "\n\n" << kUsage;
    return 2;
  } catch (const InputError& e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "clustersim: error: " << e.what() << "\n";
    return 3;
  }
}

// A command's output that did not reach its destination (a full disk, /dev/full, a
// closed pipe) is a failure: exit 3, not 0.
int check_stdout(int rc) {
  errno = 0;
  std::cout.flush();
  const bool ok = std::cout.good() && std::fflush(stdout) == 0 && !std::ferror(stdout);
  if (ok) return rc;
  std::cerr << "clustersim: error: cannot write standard output" << (errno ? std::string(": ") + std::strerror(errno) : "")
            << "\n";
  return 3;
}

}  // namespace

#ifdef CLUSTERSIM_GPU_BINARY
// The commands that drive GPUs run in the GPU binary built beside this one: loading
// cuBLASLt and NCCL costs ~200 MB and ~50 ms at every start, which a simulation should
// not pay. Does not return: the command runs there, or fails here naming the binary.
bool needs_gpu_binary(const std::string& cmd, const std::vector<std::string>& args) {
  if (cmd == "real" || cmd == "calibrate") return true;
  // validate --real-from compares with a recording: no GPU.
  return cmd == "validate" && std::find(args.begin(), args.end(), "--real-from") == args.end();
}

[[noreturn]] void hand_to_gpu_binary(const std::string& cmd, char** argv) {
  std::string self(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", self.data(), self.size() - 1);
  std::string gpu = CLUSTERSIM_GPU_BINARY;
  if (n > 0) {
    self.resize(static_cast<size_t>(n));
    gpu = self.substr(0, self.rfind('/') + 1) + gpu;
    argv[0] = const_cast<char*>(gpu.c_str());
    ::execv(gpu.c_str(), argv);
  }
  std::cerr << "clustersim: error: " << cmd << " runs in " << gpu << ", built beside clustersim, which cannot be run"
            << (n > 0 ? std::string(": ") + std::strerror(errno) : std::string()) << "\n";
  std::exit(3);
}
#endif

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << kUsage;
    return 2;
  }
#ifdef CLUSTERSIM_HAVE_REAL
  // Called as clustersim-real with a scenario rather than a command: `clustersim real`.
  {
    const std::string self = argv[0];
    const std::string name = self.substr(self.rfind('/') + 1);
    static const char* const kCommands[] = {"run",           "collective", "plan",     "sweep",     "search",
                                            "report",        "real",       "validate", "calibrate", "keys",
                                            "profile-check", "accuracy",   "help",     "--help",    "-h",         "--version"};
    if (name == "clustersim-real" &&
        std::find(std::begin(kCommands), std::end(kCommands), args.front()) == std::end(kCommands))
      args.insert(args.begin(), "real");
  }
#endif
  const std::string cmd = args.front();
  args.erase(args.begin());
#ifdef CLUSTERSIM_GPU_BINARY
  if (needs_gpu_binary(cmd, args)) hand_to_gpu_binary(cmd, argv);
#endif
  return check_stdout(dispatch(cmd, args));
}
