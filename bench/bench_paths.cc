// The paths users take beyond the benchmarked default: calibrated profiles (training
// and serving, against the same run with the built-in defaults), every scale-out fabric
// on both network models, and runs that write their SQLite timeline and trace.
//   build/bench/bench_paths
#include <benchmark/benchmark.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "calibrate/profile.h"
#include "reports/sqlite_writer.h"
#include "sim/run.h"
#include "sim/serving.h"

namespace {

using namespace clustersim;

const std::string kSrc = CLUSTERSIM_SOURCE_DIR;
const std::string kProfile = kSrc + "/calibrate/profiles/h200.yaml";

RunOptions no_outputs() {
  RunOptions o;
  o.record_link_usage = false;
  o.keep_spans = false;
  return o;
}

Scenario example(const std::string& file) {
  Scenario s = load_scenario(kSrc + "/scenarios/examples/" + file);
  s.output_sqlite.clear();
  s.output_trace.clear();
  return s;
}

void BM_LoadProfile_H200(benchmark::State& state) {
  for (auto _ : state) {
    const CalibrationProfile p = load_profile(kProfile);
    benchmark::DoNotOptimize(p.compute.measured);
  }
}
BENCHMARK(BM_LoadProfile_H200)->Unit(benchmark::kMillisecond);

// Llama 3 70B on 64 H100: arg 0 the defaults, arg 1 calibrate/profiles/h200.yaml.
void BM_Train_Llama3_70b_64(benchmark::State& state) {
  Scenario s = example("training/llama3-70b-64xh100.yaml");
  if (state.range(0)) s.calibration = kProfile;
  for (auto _ : state) benchmark::DoNotOptimize(run_training(s, no_outputs()).exec.makespan);
}
BENCHMARK(BM_Train_Llama3_70b_64)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// 3,000 requests on Llama 3 70B TP 8: arg 0 the defaults, arg 1 the H200 profile.
void BM_Serve_Llama3_70b_3000(benchmark::State& state) {
  Scenario s = example("inference/llama3-70b-tp8-dgx-h100.yaml");
  s.serving.requests = 3000;
  if (state.range(0)) s.calibration = kProfile;
  for (auto _ : state) benchmark::DoNotOptimize(run_serving(s).makespan_s);
}
BENCHMARK(BM_Serve_Llama3_70b_3000)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// Runs the training scenario once per iteration; events per second as a counter.
void time_training(benchmark::State& state, const Scenario& s, const RunOptions& o) {
  RunOutcome out;
  for (auto _ : state) {
    out = run_training(s, o);
    benchmark::DoNotOptimize(out.exec.makespan);
  }
  state.counters["events_per_s"] = benchmark::Counter(
      static_cast<double>(out.exec.events) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// The eager (Composer / FSDP) stack at scale: MPT-1B on 512 H100, LLM Foundry's published
// case. Arg 0: plain eager layers; arg 1: as the file runs it, with MPT's unpad / pad around
// FlashAttention and the two training metrics after each backward.
void BM_Eager_Mpt1b_512(benchmark::State& state) {
  Scenario s = load_scenario(kSrc + "/scenarios/published/training/llmfoundry-mpt-1b-512xh100-seq2048-bf16.yaml");
  if (state.range(0) == 0) {
    s.training.attention_padding = "none";
    s.training.train_metrics = 0;
  }
  time_training(state, s, no_outputs());
}
BENCHMARK(BM_Eager_Mpt1b_512)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// Llama 3 405B on 16,384 H100 on each scale-out fabric: arg 0 the fabric (0 fat-tree,
// 1 rail-optimized, 2 torus), arg 1 the network model (0 analytic, 1 flow).
void BM_Llama3_405b_16384_Fabric(benchmark::State& state) {
  Scenario s = example("training/llama3-405b-16384xh100.yaml");
  static const FabricKind kinds[] = {FabricKind::FatTree, FabricKind::RailOptimized, FabricKind::Torus};
  s.cluster.fabric.kind = kinds[state.range(0)];
  s.network_model = state.range(1) ? "flow" : "analytic";
  time_training(state, s, no_outputs());
}
BENCHMARK(BM_Llama3_405b_16384_Fabric)
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({2, 0})
    ->Args({0, 1})
    ->Args({1, 1})
    ->Unit(benchmark::kMillisecond);

// The 405B layout on a rail-optimized fabric with the flow network at DP arg 0 (128:
// 16,384 GPUs; 1,024: 131,072 GPUs), arg 1 whether one-step collectives alone on their
// links run as solo steps (FlowNetwork; 0 is the plain path, for the before/after).
void BM_Llama3_405b_RailFlow(benchmark::State& state) {
  Scenario s = example("training/llama3-405b-16384xh100.yaml");
  const int dp = static_cast<int>(state.range(0));
  s.cluster.nodes = dp * s.parallel.tp * s.parallel.pp / s.cluster.node.gpus;
  s.parallel.dp = dp;
  s.training.global_batch = 16 * dp;
  s.cluster.fabric.kind = FabricKind::RailOptimized;
  s.network_model = "flow";
  RunOptions o = no_outputs();
  o.solo_steps = state.range(1) != 0;
  time_training(state, s, o);
}
BENCHMARK(BM_Llama3_405b_RailFlow)
    ->Args({128, 0})
    ->Args({128, 1})
    ->Args({1024, 0})
    ->Args({1024, 1})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

// The shipped GPT-3 175B x 1,024 example with its own outputs: the SQLite timeline
// (spans, link usage) and the trace, as `clustersim run` writes them.
void BM_Gpt3_175b_1024_WithOutputs(benchmark::State& state) {
  Scenario s = load_scenario(kSrc + "/scenarios/examples/training/gpt3-175b-1024xa100.yaml");
  const std::string dir = "/tmp/clustersim-bench-out-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  s.output_sqlite = dir + "/out.sqlite";
  s.output_trace = state.range(0) ? dir + "/out.trace.json" : "";
  double bytes = 0;
  for (auto _ : state) {
    std::filesystem::remove(s.output_sqlite);
    RunOptions o;
    const RunOutcome out = run_training(s, o);
    write_outputs(out);
    benchmark::DoNotOptimize(out.exec.makespan);
    bytes = static_cast<double>(std::filesystem::file_size(s.output_sqlite));
  }
  state.counters["sqlite_MB"] = bytes / 1e6;
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_Gpt3_175b_1024_WithOutputs)->Arg(0)->Unit(benchmark::kMillisecond)->Iterations(1);

// Llama 3 405B on 16,384 H100 with the variability example's spread: 32 seeded draws of
// the step (run --samples 32), on arg 0 threads.
void BM_Llama3_405b_16384_Samples32(benchmark::State& state) {
  Scenario s = example("variability/llama3-405b-16384xh100-variability.yaml");
  double p95 = 0;
  for (auto _ : state) {
    RunOutcome out = run_training(s, no_outputs());
    run_samples(out, 32, static_cast<int>(state.range(0)), no_outputs());
    for (const auto& [k, v] : out.metrics)
      if (k == "iteration_time_s_p95") p95 = v;
  }
  state.counters["iteration_p95_s"] = p95;
}
BENCHMARK(BM_Llama3_405b_16384_Samples32)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->Iterations(1);

// A topology file of mixed nodes (the pruned route search, each GPU model's kernel
// times): the shipped H100-beside-A100 example, and the same two generations at 512
// nodes (Llama 3 70B, TP 8, PP 4, DP 128).
void BM_MixedTopology(benchmark::State& state) {
  Scenario s = example("clusters/llama3-70b-h100-beside-a100.yaml");
  if (state.range(0) > 8) {
    const std::string dir = std::filesystem::temp_directory_path() / ("clustersim-bench-mixed-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/t.yaml") << "nodes:\n  - {preset: dgx-h100, count: " << state.range(0) / 2
                                   << "}\n  - {preset: dgx-a100, count: " << state.range(0) / 2 << "}\n";
    std::ofstream(dir + "/s.yaml") << "cluster: {topology_file: t.yaml}\nmodel: {preset: llama3-70b}\n"
                                      "parallel: {tp: 8, pp: 4, dp: " << state.range(0) / 4 << ", zero_stage: 1, "
                                      "sequence_parallel: true}\ntraining: {global_batch: " << state.range(0) * 2
                                   << ", recompute: full}\n";
    s = load_scenario(dir + "/s.yaml");
  }
  for (auto _ : state) benchmark::DoNotOptimize(run_training(s, no_outputs()).exec.makespan);
}
BENCHMARK(BM_MixedTopology)->Arg(8)->Arg(512)->Unit(benchmark::kMillisecond);

// Models as lists of blocks: the AlphaFold-style trunk with DAP and the diffusion UNet
// beside its frozen encoders.
void BM_BlockModels(benchmark::State& state) {
  const Scenario s = example(state.range(0) ? "blocks/sd-unet-components-16xh100.yaml"
                                            : "blocks/alphafold-trunk-dap-32xa100.yaml");
  for (auto _ : state) benchmark::DoNotOptimize(run_training(s, no_outputs()).exec.makespan);
}
BENCHMARK(BM_BlockModels)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
