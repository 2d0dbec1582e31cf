// `clustersim real`: the scenario's plan executed on GPUs.
#include "cli/output.h"
#include "plan/training_planner.h"
#include "reports/sqlite_writer.h"
#include "reports/summary.h"
#include "reports/trace_writer.h"
#include "scenarios/scenario.h"
#include "sim/run.h"
#ifdef CLUSTERSIM_HAVE_REAL
#include "real_backend/real_executor.h"
#include "cli/real_commands.h"
#endif
#ifdef CLUSTERSIM_HAVE_MPI
#include "real_backend/mpi_launch.h"
#endif

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"

namespace clustersim {

int cmd_real(const std::vector<std::string>& args) {
  refuse_repeated(args, {"--iterations", "--warmup", "--timing"});
  std::string path;
  std::vector<std::string> sets;
  bool json = false, mpi = false, op_events = true;
  int iterations = 5, warmup = 2;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set")
      sets.push_back(need_value(args, i));
    else if (a == "--iterations")
      iterations = static_cast<int>(need_int(args, i, a, 1, 100000));
    else if (a == "--warmup")
      warmup = static_cast<int>(need_int(args, i, a, 0, 100000));
    else if (a == "--json")
      json = true;
    else if (a == "--mpi")
      mpi = true;
    else if (a == "--timing")
      op_events = need_timing(args, i);
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
  // Imported traces run too: kernels with shapes as those kernels, compute nodes with
  // only a recorded time as a kernel that holds the GPU that long.
  const TrainingPlan tp = scenario_plan(s, po);
#ifndef CLUSTERSIM_HAVE_REAL
  (void)tp;
  (void)json;
  (void)mpi;
  (void)iterations;
  (void)warmup;
  (void)op_events;
  throw std::runtime_error(
      "this build has no real backend: CUDA, cuBLASLt and NCCL were not found when it was configured");
#else
  real::RealOptions ro;
  ro.iterations = iterations;
  ro.warmup = warmup;
  ro.op_events = op_events;
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
                   {"mfu", tflops / (mean_peak_flops(s.cluster, s.model.dtype) / 1e12)},
                   {"gpus", static_cast<double>(tp.plan.world_size)},
                   {"op_events", op_events ? 1.0 : 0.0}};
  for (size_t i = 0; i < rr.iteration_s.size(); ++i)
    t.run.metrics.emplace_back("iteration_" + std::to_string(i) + "_s", rr.iteration_s[i]);
  add_clock_metrics(rr.clocks, t.run.metrics);
  t.plan = &tp.plan;
  for (int32_t r = 0; r < tp.plan.world_size; ++r)
    t.ranks.push_back(
        RankInfo{r, 0, r, real_rank_device(r, rr.device_name), tp.plan.rank_program[static_cast<size_t>(r)], r});
  t.spans = rr.spans;
  if (!s.output_sqlite.empty()) write_sqlite(t, s.output_sqlite);
  if (!s.output_trace.empty()) write_chrome_trace(t, s.output_trace);
  if (json) {
    std::vector<std::pair<std::string, std::string>> fields = {
        {"name", s.name}, {"kind", "training"}, {"source", "real"}, {"device", rr.device_name}};
    if (!rr.attention_backend.empty()) fields.emplace_back("attention", rr.attention_backend);
    std::cout << summary_json(fields, t.run.metrics) << "\n";
  } else {
    std::printf(
        "scenario        %s\nsource          real: %d x %s\niteration       %.6f s (median of %zu after %d warm-up)\n"
        "throughput      %.1f tokens/s\nper GPU         %.1f TFLOP/s model, MFU %.1f%%\n",
        s.name.c_str(), rr.devices, rr.device_name.c_str(), iter, rr.iteration_s.size(), warmup, tokens / iter, tflops,
        100.0 * tflops / (mean_peak_flops(s.cluster, s.model.dtype) / 1e12));
    if (op_events)
      std::printf("ops timed       %zu\n", rr.spans.size());
    else
      std::printf("ops timed       none (--timing stream: no event between ops, each stream's end timed)\n");
    if (const std::string c = clock_line(rr.clocks); !c.empty()) std::printf("GPUs            %s\n", c.c_str());
    if (!rr.attention_backend.empty()) std::printf("attention       %s\n", rr.attention_backend.c_str());
  }
  return 0;
#endif
}

}  // namespace clustersim
