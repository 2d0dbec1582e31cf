// The analytic network: executes a collective's steps over topology routes.
//
// A step's transfers run at once. A transfer pays its route latency (per-hop, cut-
// through: serialization is paid once, at the bottleneck, not at every hop) plus its
// bytes over its bottleneck share; a link crossed by k transfers of the same step
// gives each 1/k of its bandwidth, so capacity is conserved inside a collective. A
// step lasts as long as its slowest transfer. Contention *between* concurrent
// collectives is not modelled here.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "cost_models/collective.h"
#include "topology/topology.h"

namespace clustersim {

struct CollectiveCost {
  double seconds = 0;
  std::vector<std::pair<uint32_t, double>> link_bytes;  // bytes each link carried, by link id
};

class AnalyticNetwork {
 public:
  explicit AnalyticNetwork(Topology& topo) : topo_(topo), load_(topo.links().size(), 0) {}

  // `gpus[i]` is the GPU of group position i.
  CollectiveCost run(const std::vector<CollectiveStep>& steps, std::span<const int32_t> gpus);

 private:
  Topology& topo_;
  std::vector<uint32_t> load_;  // transfers per link in the current step
  std::vector<double> bytes_;   // bytes per link over the collective
  std::vector<uint32_t> touched_;
};

}  // namespace clustersim
