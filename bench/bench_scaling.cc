// How the cost of one simulated training iteration grows: with GPUs at a fixed per-GPU
// workload (weak scaling), with micro-batches at a fixed cluster, for the planner alone,
// and for the two big examples on the flow network.
//   build/bench/bench_scaling
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "plan/training_planner.h"
#include "sim/run.h"

namespace {

using namespace clustersim;

// As `clustersim run` without output files: no link-usage records, no timeline kept.
const RunOptions kNoOutputs = [] {
  RunOptions o;
  o.record_link_usage = false;
  o.keep_spans = false;
  return o;
}();

Scenario from_text(const std::string& text) {
  const std::string path = "/tmp/clustersim-bench-" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(path) << text;
  Scenario s = load_scenario(path);
  ::unlink(path.c_str());
  return s;
}

void report(benchmark::State& state, const RunOutcome& out) {
  state.counters["events"] = static_cast<double>(out.exec.events);
  state.counters["simulated_ranks"] = static_cast<double>(out.exec.simulated_ranks.size());
  state.counters["events_per_s"] = benchmark::Counter(
      static_cast<double>(out.exec.events) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// Llama 3 8B, TP 8 × PP 4 (PP 1 on one node), DP = the rest, 8 micro-batches per DP
// rank: every GPU does the same work whatever the cluster size; flow network.
void BM_WeakScaling(benchmark::State& state) {
  const int64_t gpus = state.range(0);
  const int64_t pp = gpus >= 32 ? 4 : 1;
  const int64_t dp = gpus / (8 * pp);
  const Scenario s =
      from_text("cluster: {preset: dgx-h100, nodes: " + std::to_string(gpus / 8) +
                "}\nmodel: {preset: llama3-8b}\nparallel: {tp: 8, pp: " + std::to_string(pp) +
                ", sequence_parallel: true, zero_stage: 1}\ntraining: {global_batch: " + std::to_string(dp * 8) +
                "}\nnetwork_model: flow\n");
  RunOutcome out;
  for (auto _ : state) {
    out = run_training(s, kNoOutputs);
    benchmark::DoNotOptimize(out.exec.makespan);
  }
  report(state, out);
}
BENCHMARK(BM_WeakScaling)->Arg(8)->Arg(64)->Arg(512)->Arg(4096)->Arg(16384)->Arg(65536)->Unit(benchmark::kMillisecond);

// GPT-3 175B on 1,024 A100 (TP 8 × PP 8 × DP 16) with m micro-batches per pipeline.
void BM_MicroBatches(benchmark::State& state) {
  const int64_t m = state.range(0);
  const Scenario s = from_text(
      "cluster: {preset: dgx-a100, nodes: 128}\nmodel: {preset: gpt3-175b}\nparallel: {tp: 8, pp: 8, dp: 16, "
      "sequence_parallel: true, zero_stage: 1}\ntraining: {global_batch: " +
      std::to_string(16 * m) + "}\nnetwork_model: flow\n");
  RunOutcome out;
  for (auto _ : state) {
    out = run_training(s, kNoOutputs);
    benchmark::DoNotOptimize(out.exec.makespan);
  }
  report(state, out);
}
BENCHMARK(BM_MicroBatches)->Arg(8)->Arg(16)->Arg(32)->Arg(64)->Arg(96)->Arg(128)->Unit(benchmark::kMillisecond);

void run_big(benchmark::State& state, const std::string& file) {
  Scenario s = load_scenario(std::string(CLUSTERSIM_SOURCE_DIR) + "/scenarios/examples/training/" + file);
  s.output_sqlite.clear();
  s.output_trace.clear();
  s.network_model = "flow";
  RunOutcome out;
  for (auto _ : state) {
    out = run_training(s, kNoOutputs);
    benchmark::DoNotOptimize(out.exec.makespan);
  }
  report(state, out);
}
void BM_Gpt3_175b_1024xA100_Flow(benchmark::State& state) { run_big(state, "gpt3-175b-1024xa100.yaml"); }
void BM_Llama3_405b_16384xH100_Flow(benchmark::State& state) { run_big(state, "llama3-405b-16384xh100.yaml"); }
BENCHMARK(BM_Gpt3_175b_1024xA100_Flow)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Llama3_405b_16384xH100_Flow)->Unit(benchmark::kMillisecond);

// The planner alone: GPT-3 175B's plan (8 stage programs, 1,024 ranks).
void BM_Plan_Gpt3_175b(benchmark::State& state) {
  const Scenario s =
      load_scenario(std::string(CLUSTERSIM_SOURCE_DIR) + "/scenarios/examples/training/gpt3-175b-1024xa100.yaml");
  size_t ops = 0;
  for (auto _ : state) {
    const TrainingPlan p = build_training_plan(s);
    ops = p.plan.total_ops();
    benchmark::DoNotOptimize(ops);
  }
  state.counters["ops"] = static_cast<double>(ops);
}
BENCHMARK(BM_Plan_Gpt3_175b)->Unit(benchmark::kMillisecond);

}  // namespace
