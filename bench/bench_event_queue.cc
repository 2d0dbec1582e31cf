// Engine throughput: events per second through the (time, sequence) queue.
//   build/bench/bench_event_queue
#include <benchmark/benchmark.h>

#include <cstdint>

#include "sim/event_queue.h"

namespace {

using clustersim::SimTime;
using clustersim::Simulation;

struct Payload {
  uint32_t id;
};

// A simple event chain: each event schedules its successor, so the queue holds one
// event at a time — the pure cost of push + pop + clock advance.
void BM_EventChain(benchmark::State& state) {
  const int64_t n = state.range(0);
  for (auto _ : state) {
    Simulation<Payload> sim;
    sim.schedule_at(SimTime::zero(), Payload{0});
    Simulation<Payload>::Event ev;
    while (sim.next(ev)) {
      if (ev.payload.id + 1 < n) sim.schedule_in(SimTime::ns(1), Payload{ev.payload.id + 1});
    }
    benchmark::DoNotOptimize(sim.now());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["events/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * n), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EventChain)->Arg(1 << 20);

// K concurrent chains (K events pending), as when many ranks' streams are in flight.
void BM_EventChains(benchmark::State& state) {
  const int64_t k = state.range(0);
  const int64_t total = 1 << 20;
  for (auto _ : state) {
    Simulation<Payload> sim;
    sim.reserve(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) sim.schedule_at(SimTime::ns(i % 97), Payload{static_cast<uint32_t>(i)});
    int64_t done = 0;
    Simulation<Payload>::Event ev;
    while (sim.next(ev)) {
      if (++done + k <= total) sim.schedule_in(SimTime::ns(1 + (ev.payload.id * 7919) % 1000), ev.payload);
    }
    benchmark::DoNotOptimize(sim.now());
  }
  state.SetItemsProcessed(state.iterations() * total);
  state.counters["events/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * total), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EventChains)->Arg(64)->Arg(4096)->Arg(65536);

}  // namespace
