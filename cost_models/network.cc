#include "cost_models/network.h"

#include <algorithm>
#include <limits>

namespace clustersim {

CollectiveCost AnalyticNetwork::run(const std::vector<CollectiveStep>& steps, std::span<const int32_t> gpus) {
  CollectiveCost cost;
  if (bytes_.size() != load_.size()) bytes_.assign(load_.size(), 0.0);
  std::vector<uint32_t> used;
  const auto& links = topo_.links();
  for (const CollectiveStep& step : steps) {
    touched_.clear();
    for (auto [s, d] : step.transfers) {
      for (uint32_t l : topo_.route(gpus[static_cast<size_t>(s)], gpus[static_cast<size_t>(d)])) {
        if (load_[l]++ == 0) touched_.push_back(l);
      }
    }
    double step_s = 0;
    for (auto [s, d] : step.transfers) {
      auto r = topo_.route(gpus[static_cast<size_t>(s)], gpus[static_cast<size_t>(d)]);
      if (r.empty()) continue;
      double rate = std::numeric_limits<double>::infinity();
      double latency = 0;
      for (uint32_t l : r) {
        rate = std::min(rate, links[l].bandwidth / load_[l]);
        latency += links[l].latency;
      }
      step_s = std::max(step_s, latency + step.bytes / rate);
    }
    cost.seconds += step_s * static_cast<double>(step.repeat);
    for (uint32_t l : touched_) {
      if (bytes_[l] == 0) used.push_back(l);
      bytes_[l] += load_[l] * step.bytes * static_cast<double>(step.repeat);
      load_[l] = 0;
    }
  }
  std::sort(used.begin(), used.end());
  cost.link_bytes.reserve(used.size());
  for (uint32_t l : used) {
    cost.link_bytes.emplace_back(l, bytes_[l]);
    bytes_[l] = 0;
  }
  return cost;
}

}  // namespace clustersim
