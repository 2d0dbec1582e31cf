#include "cost_models/network.h"

#include <algorithm>
#include <limits>

namespace clustersim {

TransferPaths::TransferPaths(Topology& topo, const NetworkProfile& profile) : topo_(topo), profile_(profile) {
  capacity_.reserve(topo.links().size());
  for (const Link& l : topo.links()) capacity_.push_back(l.bandwidth * profile.efficiency(l.cls));
}

Route TransferPaths::path(const Transfer& t, std::span<const int32_t> gpus) {
  if (t.src == kSwitch) return topo_.switch_route_info(gpus[static_cast<size_t>(t.dst)], false);
  if (t.dst == kSwitch) return topo_.switch_route_info(gpus[static_cast<size_t>(t.src)], true);
  return topo_.route_info(gpus[static_cast<size_t>(t.src)], gpus[static_cast<size_t>(t.dst)]);
}

void TransferPaths::paths(const std::vector<Transfer>& transfers, std::span<const int32_t> gpus,
                          std::vector<Route>& out) {
  constexpr size_t kAhead = 8;
  out.clear();
  for (size_t i = 0; i < std::min(kAhead, transfers.size()); ++i) prefetch(transfers[i], gpus);
  for (size_t i = 0; i < transfers.size(); ++i) {
    if (i + kAhead < transfers.size()) prefetch(transfers[i + kAhead], gpus);
    out.push_back(path(transfers[i], gpus));
  }
}

double TransferPaths::latency(const Route& r, const Expansion& e) const {
  if (r.links.empty()) return 0;
  return r.latency + profile_.hop(r.cls, e.family, e.proto);
}

CollectiveCost AnalyticNetwork::run(const Expansion& e, std::span<const int32_t> gpus, bool link_bytes) {
  CollectiveCost cost;
  if (e.steps.empty()) return cost;
  cost.seconds = e.base_latency;
  std::vector<uint32_t> used;
  for (const CollectiveStep& step : e.steps) {
    touched_.clear();
    paths_.paths(step.transfers, gpus, routes_);
    for (const Route& r : routes_)
      for (uint32_t l : r.links)
        if (load_[l]++ == 0) touched_.push_back(l);
    double lockstep = 0, moving = 0;
    lat_.assign(step.transfers.size(), 0.0);
    for (size_t i = 0; i < step.transfers.size(); ++i) {
      const Transfer& t = step.transfers[i];
      const Route& r = routes_[i];
      if (r.links.empty()) continue;
      double rate = std::numeric_limits<double>::infinity();
      for (uint32_t l : r.links) rate = std::min(rate, paths_.capacity(l) / load_[l]);
      lat_[i] = paths_.latency(r, e);
      const double bw = paths_.wire_bytes(t.bytes, e) / rate;
      lockstep = std::max(lockstep, lat_[i] + bw);
      moving = std::max(moving, bw);
    }
    const double rep = static_cast<double>(step.repeat);
    cost.seconds += step.latency == StepLatency::Max ? lockstep * rep : step_latency(step, lat_, moving) + moving * rep;
    for (uint32_t l : touched_) load_[l] = 0;
    if (!link_bytes) continue;
    for (size_t i = 0; i < step.transfers.size(); ++i)
      for (uint32_t l : routes_[i].links) {
        if (bytes_[l] == 0) used.push_back(l);
        bytes_[l] += paths_.wire_bytes(step.transfers[i].bytes, e) * static_cast<double>(step.repeat);
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
