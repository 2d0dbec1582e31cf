// Whole-run cost of the shipped example scenarios (plan + simulate, no output files).
//   build/bench/bench_scenarios
#include <benchmark/benchmark.h>

#include <string>

#include "sim/run.h"
#include "sim/search.h"
#include "sim/serving.h"

namespace {

void run_example(benchmark::State& state, const std::string& file) {
  const auto s = clustersim::load_scenario(std::string(CLUSTERSIM_SOURCE_DIR) + "/scenarios/examples/" + file);
  double events = 0;
  // Without files to write (run --set output=null, sweep, search, accuracy): no timeline or
  // link usage kept, so a stage's TP ranks fold onto its first.
  clustersim::RunOptions o;
  o.record_link_usage = o.keep_spans = state.range(0) != 0;
  for (auto _ : state) {
    auto out = clustersim::run_training(s, o);
    events = static_cast<double>(out.exec.events);
    benchmark::DoNotOptimize(out.exec.makespan);
  }
  state.counters["events"] = events;
  state.counters["events/s"] =
      benchmark::Counter(events * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_Gpt3_1_3b_Dgx(benchmark::State& state) { run_example(state, "gpt3-1.3b-dgx-h100.yaml"); }
void BM_Llama3_8b_128xH100(benchmark::State& state) { run_example(state, "llama3-8b-128xh100.yaml"); }
void BM_Llama3_8b_1024xH100(benchmark::State& state) { run_example(state, "llama3-8b-1024xh100-sp.yaml"); }

// Inference serving: requests served per second of wall time.
void run_serving_example(benchmark::State& state, const std::string& file) {
  const auto s = clustersim::load_scenario(std::string(CLUSTERSIM_SOURCE_DIR) + "/scenarios/examples/" + file);
  double requests = 0, iterations = 0;
  for (auto _ : state) {
    auto r = clustersim::run_serving(s);
    requests = static_cast<double>(r.requests.size());
    iterations = static_cast<double>(r.iterations);
    benchmark::DoNotOptimize(r.makespan_s);
  }
  state.counters["requests"] = requests;
  state.counters["iterations"] = iterations;
  state.counters["requests/s"] =
      benchmark::Counter(requests * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_Serve_Llama3_70b_Tp8(benchmark::State& state) {
  run_serving_example(state, "inference/llama3-70b-tp8-dgx-h100.yaml");
}
void BM_Serve_Llama3_8b_8Replicas_100k(benchmark::State& state) {
  run_serving_example(state, "inference/llama3-8b-8-replicas-sarathi.yaml");
}

// Layout search on GPT-3 175B / 1,024 A100: enumeration, memory pruning and estimates
// only (no op-by-op refinement); layouts_per_s × 60 is the layouts per minute.
void BM_SearchEstimate_Gpt3_175b_1024(benchmark::State& state) {
  using namespace clustersim;
  const Scenario s =
      load_scenario(std::string(CLUSTERSIM_SOURCE_DIR) + "/scenarios/examples/training/gpt3-175b-1024xa100.yaml");
  SearchOptions o;
  o.top_k = 0;
  o.progress = false;
  int64_t layouts = 0;
  for (auto _ : state) {
    Scenario copy = s;
    copy.parallel.tp = 3;  // no baseline to simulate either
    const SearchResult r = search_layouts(copy, o);
    layouts += r.enumerated;
    benchmark::DoNotOptimize(r.estimated);
  }
  state.counters["layouts"] = static_cast<double>(layouts) / static_cast<double>(state.iterations());
  state.counters["layouts_per_s"] = benchmark::Counter(static_cast<double>(layouts), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SearchEstimate_Gpt3_175b_1024)->Unit(benchmark::kMillisecond);

BENCHMARK(BM_Serve_Llama3_70b_Tp8)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Serve_Llama3_8b_8Replicas_100k)->Unit(benchmark::kMillisecond);
// Arg 1: the timeline and link usage kept (what output files need); 0: metrics only.
BENCHMARK(BM_Gpt3_1_3b_Dgx)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Llama3_8b_128xH100)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Llama3_8b_1024xH100)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

}  // namespace
