// Test helper: a preset cluster and the first n GPU indices.
#pragma once

#include <numeric>
#include <vector>

#include "topology/presets.h"

namespace clustersim::testing {

inline ClusterSpec preset_cluster(const char* preset, int nodes) {
  ClusterSpec c;
  c.node = *find_node_preset(preset);
  c.nodes = nodes;
  return c;
}

inline std::vector<int32_t> first_gpus(int n) {
  std::vector<int32_t> g(static_cast<size_t>(n));
  std::iota(g.begin(), g.end(), 0);
  return g;
}

}  // namespace clustersim::testing
