// Network model costs: the max-min solver, collective expansion, the analytic and the
// flow network on 1,024 GPUs.
//   build/bench/bench_network
#include <benchmark/benchmark.h>

#include <numeric>
#include <random>
#include <vector>

#include "cost_models/flow_network.h"
#include "cost_models/maxmin.h"
#include "cost_models/network.h"
#include "cost_models/tuner.h"
#include "topology/presets.h"

namespace {

using namespace clustersim;

// F flows over 4,096 links, each flow crossing 4 random links: one full solve.
void BM_MaxMinSolve(benchmark::State& state) {
  const int flows = static_cast<int>(state.range(0));
  std::mt19937 rng(1);
  for (auto _ : state) {
    state.PauseTiming();
    MaxMinSystem s;
    for (int l = 0; l < 4096; ++l) s.add_constraint(1e9 + static_cast<double>(rng() % 1000) * 1e6);
    for (int f = 0; f < flows; ++f) {
      MaxMinSystem::Id r[4];
      for (auto& x : r) x = rng() % 4096;
      s.add_variable(r);
    }
    state.ResumeTiming();
    benchmark::DoNotOptimize(s.solve().size());
  }
  state.counters["flows/s"] = benchmark::Counter(static_cast<double>(flows) * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MaxMinSolve)->Arg(1024)->Arg(8192)->Unit(benchmark::kMillisecond);

// Active transfers against re-solve time: with N flows in flight, one flow starts (a
// re-solve) and ends (another). Local: each flow crosses 4 of 16 links private to its
// block of 8 flows, so components stay small whatever N is (a fat-tree's rings). Shared:
// every flow also crosses one of 4 common links, so the component grows with N (an
// incast onto a few spines: the incremental solver's worst case).
void max_min_churn(benchmark::State& state, bool shared) {
  const int flows = static_cast<int>(state.range(0));
  std::mt19937 rng(2);
  MaxMinSystem s;
  const int blocks = (flows + 7) / 8;
  for (int l = 0; l < 16 * blocks + 4; ++l) s.add_constraint(1e9 + static_cast<double>(rng() % 1000) * 1e6);
  auto route = [&](int f) {
    std::vector<MaxMinSystem::Id> r;
    const auto base = static_cast<MaxMinSystem::Id>(16 * (f / 8));
    for (int k = 0; k < 4; ++k) r.push_back(base + static_cast<MaxMinSystem::Id>(rng() % 16));
    if (shared) r.push_back(static_cast<MaxMinSystem::Id>(16 * blocks) + static_cast<MaxMinSystem::Id>(rng() % 4));
    return r;
  };
  for (int f = 0; f < flows; ++f) s.add_variable(route(f));
  s.solve();
  int f = 0;
  for (auto _ : state) {
    const auto v = s.add_variable(route(f));
    benchmark::DoNotOptimize(s.solve().size());
    s.remove_variable(v);
    benchmark::DoNotOptimize(s.solve().size());
    f = (f + 7919) % flows;
  }
  state.counters["active"] = flows;
}
void BM_MaxMinChurnLocal(benchmark::State& state) { max_min_churn(state, false); }
void BM_MaxMinChurnShared(benchmark::State& state) { max_min_churn(state, true); }
BENCHMARK(BM_MaxMinChurnLocal)->Arg(1024)->Arg(16384)->Arg(262144)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaxMinChurnShared)->Arg(1024)->Arg(16384)->Arg(262144)->Unit(benchmark::kMicrosecond);

struct Cluster {
  Topology topo;
  std::vector<int32_t> gpus;
  explicit Cluster(int nodes) : topo(make(nodes)), gpus(static_cast<size_t>(nodes * 8)) {
    std::iota(gpus.begin(), gpus.end(), 0);
  }
  static ClusterSpec make(int nodes) {
    ClusterSpec c;
    c.node = *find_node_preset("dgx-h100");
    c.nodes = nodes;
    return c;
  }
};

// One 1 GiB ring all-reduce over 128 DGX H100 nodes (1,024 GPUs, 8 rail-spread rings of
// 1,024 transfers each) on the flow network.
void BM_FlowRingAllReduce1024(benchmark::State& state) {
  Cluster c(128);
  NetworkProfile prof;
  const Expansion e = expand_collective(
      CollectiveRequest{CollectiveKind::AllReduce, Algorithm::Ring, Protocol::Simple, 1024.0 * 1024 * 1024, 0},
      layout_of(c.topo, c.gpus), prof);
  uint64_t transfers = 0;
  for (auto _ : state) {
    FlowNetwork net(c.topo, prof);
    net.start(e, c.gpus, SimTime::zero());
    std::vector<uint64_t> done;
    while (!net.idle()) net.advance(net.next_time(), done);
    transfers += net.flows_started();
  }
  state.counters["transfers/s"] = benchmark::Counter(static_cast<double>(transfers), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FlowRingAllReduce1024)->Unit(benchmark::kMillisecond);

// `algorithm: auto` for one size on 1,024 GPUs: ring, tree and NVLS candidates x 3
// protocols expanded and costed on the analytic network (routes cached after the first).
void BM_TunerAllReduce1024(benchmark::State& state) {
  Cluster c(128);
  NetworkProfile prof;
  AnalyticNetwork net(c.topo, prof);
  const GroupLayout layout = layout_of(c.topo, c.gpus);
  for (auto _ : state)
    benchmark::DoNotOptimize(
        choose_collective(CollectiveKind::AllReduce, 1 << 30, layout, c.gpus, net, prof, std::nullopt, std::nullopt));
}
BENCHMARK(BM_TunerAllReduce1024)->Unit(benchmark::kMillisecond);

// What `clustersim collective --op all-reduce --network-model flow` does for one size on
// a fresh cluster of N GPUs: topology, NCCL's choice (tree at these sizes) on the analytic
// network with every route computed once, then the chosen expansion on the flow network.
void BM_AllReduceFreshCluster(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  NetworkProfile prof;
  for (auto _ : state) {
    Cluster c(gpus / 8);
    AnalyticNetwork analytic(c.topo, prof);
    const GroupLayout layout = layout_of(c.topo, c.gpus);
    const CollectiveChoice pick = choose_collective(CollectiveKind::AllReduce, 1 << 30, layout, c.gpus, analytic, prof,
                                                    std::nullopt, std::nullopt);
    const Expansion e = expand_collective(
        CollectiveRequest{CollectiveKind::AllReduce, pick.algo, pick.proto, 1024.0 * 1024 * 1024, 0}, layout, prof);
    FlowNetwork net(c.topo, prof);
    net.start(e, c.gpus, SimTime::zero());
    std::vector<uint64_t> done;
    while (!net.idle()) net.advance(net.next_time(), done);
    benchmark::DoNotOptimize(done.size());
  }
}
BENCHMARK(BM_AllReduceFreshCluster)->Arg(1024)->Arg(4096)->Arg(16384)->Unit(benchmark::kMillisecond);

void BM_ExpandTree1024(benchmark::State& state) {
  Cluster c(128);
  NetworkProfile prof;
  const GroupLayout layout = layout_of(c.topo, c.gpus);
  for (auto _ : state)
    benchmark::DoNotOptimize(expand_collective(
        CollectiveRequest{CollectiveKind::AllReduce, Algorithm::Tree, Protocol::Simple, 1 << 30, 0}, layout, prof));
}
BENCHMARK(BM_ExpandTree1024)->Unit(benchmark::kMillisecond);

}  // namespace
