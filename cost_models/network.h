// Executing a collective's expansion on the topology, without contention from other
// collectives (the `analytic` network model).
//
// Each transfer pays a step latency — the protocol's per-step latency for the slowest
// link class on its route (NCCL's tuning figures) plus the physical per-hop latencies,
// once (cut-through: serialization is paid at the bottleneck, not at every hop) — and
// moves bytes / protocol-efficiency wire bytes at its bottleneck share: a link of
// capacity B (line rate × the class's efficiency) crossed by k transfers of one step
// gives each B/k, so capacity is conserved inside a collective. How latencies of a
// repeated step add up depends on its schedule (StepLatency: lock-step rounds,
// pipelined ring, pipelined tree); a collective costs its base latency plus its steps.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "cost_models/collective.h"
#include "cost_models/protocol.h"
#include "topology/huge_pages.h"
#include "topology/topology.h"

namespace clustersim {

// FNV-1a taken a word at a time (not byte by byte): a fixed, portable hash for the
// networks' memo keys, each hit confirmed by comparing the whole key.
struct WordHash {
  uint64_t value = 14695981039346656037ull;
  void add(uint64_t word) { value = (value ^ word) * 1099511628211ull; }
};

// Turns transfers between group positions into links, latencies and capacities; shared
// by the analytic and the flow network so that both see the same physics.
class TransferPaths {
 public:
  TransferPaths(Topology& topo, const NetworkProfile& profile);
  Route path(const Transfer& t, std::span<const int32_t> gpus);
  // Where path(t, gpus) will look, asked for ahead (see Topology::prefetch_route).
  void prefetch(const Transfer& t, std::span<const int32_t> gpus) const {
    if (t.src != kSwitch && t.dst != kSwitch)
      topo_.prefetch_route(gpus[static_cast<size_t>(t.src)], gpus[static_cast<size_t>(t.dst)]);
  }
  // The transfer's links appended to `out`, its latency and class returned (links empty):
  // see Topology::append_route.
  Route append_path(const Transfer& t, std::span<const int32_t> gpus, std::vector<uint32_t>& out);
  // Routes for a step's transfers, in order, into `out` (cleared first).
  void paths(const std::vector<Transfer>& transfers, std::span<const int32_t> gpus, std::vector<Route>& out);
  // The transfer's step latency on route r: the protocol's per-step latency for its
  // slowest class, and what its hops add beyond the route NCCL's figure holds.
  double latency(const Route& r, const Expansion& e) const;
  // The same for a route of `hops` links with that latency and class.
  double latency(size_t hops, const Route& r, const Expansion& e) const {
    return hops == 0 ? 0 : profile_.step_latency(r.cls, e.family, e.proto, r.latency);
  }
  // A transfer's wire bytes: its payload over the protocol's efficiency, and over the
  // switch's reduction rate for a transfer to or from the NVLink switch (NVLS); an NVLS
  // tree's network transfers move at the protocol's rate alone.
  double wire_bytes(const Transfer& t, const Expansion& e) const {
    const bool nvls = e.family == LatencyFamily::Nvls && (t.src == kSwitch || t.dst == kSwitch);
    return t.bytes / (profile_.protocol(e.proto).bandwidth_efficiency * (nvls ? profile_.nvls_efficiency : 1.0));
  }
  // A link's usable rate: its line rate × its class's efficiency.
  double capacity(uint32_t link) const { return capacity_[link]; }
  Topology& topology() { return topo_; }
  const NetworkProfile& profile() const { return profile_; }

 private:
  Topology& topo_;
  const NetworkProfile& profile_;
  BigVector<double> capacity_;  // by link: 8 bytes a link, not the link's whole record
};

struct CollectiveCost {
  double seconds = 0;
  std::vector<std::pair<uint32_t, double>> link_bytes;  // wire bytes each link carried, by link id
};

class AnalyticNetwork {
 public:
  AnalyticNetwork(Topology& topo, const NetworkProfile& profile)
      : paths_(topo, profile), load_(topo.links().size(), 0), bytes_(topo.links().size(), 0.0) {}

  // `gpus[i]` is the GPU of group position i. Without `link_bytes` the cost's link_bytes
  // stay empty (the tuner compares times only).
  CollectiveCost run(const Expansion& e, std::span<const int32_t> gpus, bool link_bytes = true);

 private:
  // A step's routes and each transfer's bottleneck share, which follow from the group's
  // GPUs and the transfers' ends alone (not their bytes or protocol): the tuner costs
  // each algorithm under every protocol, and those expansions repeat their steps' shapes.
  struct StepShape {
    std::vector<int32_t> gpus;
    std::vector<uint64_t> ends;  // per transfer: src, dst
    std::vector<Route> routes;
    std::vector<double> rate;    // per transfer: its narrowest link's capacity / the step's transfers on it
    uint64_t hash = 0, used = 0;
  };
  const StepShape& shape(const CollectiveStep& step, std::span<const int32_t> gpus);
  std::vector<StepShape> shapes_;  // the most recently used few
  uint64_t clock_ = 0;
  TransferPaths paths_;
  std::vector<uint32_t> load_;  // transfers per link in the current step
  std::vector<double> bytes_;   // wire bytes per link over the collective
  std::vector<uint32_t> touched_;
  std::vector<double> lat_;
};

}  // namespace clustersim
