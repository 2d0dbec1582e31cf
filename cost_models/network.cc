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

Route TransferPaths::append_path(const Transfer& t, std::span<const int32_t> gpus, std::vector<uint32_t>& out) {
  if (t.src == kSwitch || t.dst == kSwitch) {
    Route r = path(t, gpus);
    out.insert(out.end(), r.links.begin(), r.links.end());
    r.links = {};
    return r;
  }
  return topo_.append_route(gpus[static_cast<size_t>(t.src)], gpus[static_cast<size_t>(t.dst)], out);
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
  return profile_.step_latency(r.cls, e.family, e.proto, r.latency);
}

const AnalyticNetwork::StepShape& AnalyticNetwork::shape(const CollectiveStep& step, std::span<const int32_t> gpus) {
  WordHash hash;  // over the GPUs and the transfers' ends
  hash.add(gpus.size());
  for (int32_t g : gpus) hash.add(static_cast<uint32_t>(g));
  hash.add(step.transfers.size());
  for (const Transfer& t : step.transfers)
    hash.add(static_cast<uint64_t>(static_cast<uint32_t>(t.src)) << 32 | static_cast<uint32_t>(t.dst));
  const uint64_t h = hash.value;
  ++clock_;
  auto same = [&](const StepShape& s) {
    if (s.hash != h || s.gpus.size() != gpus.size() || s.ends.size() != step.transfers.size()) return false;
    if (!std::equal(gpus.begin(), gpus.end(), s.gpus.begin())) return false;
    for (size_t i = 0; i < s.ends.size(); ++i) {
      const Transfer& t = step.transfers[i];
      if (s.ends[i] != (static_cast<uint64_t>(static_cast<uint32_t>(t.src)) << 32 | static_cast<uint32_t>(t.dst)))
        return false;
    }
    return true;
  };
  for (StepShape& s : shapes_)
    if (same(s)) {
      s.used = clock_;
      return s;
    }
  constexpr size_t kShapes = 64;
  StepShape* slot = nullptr;
  if (shapes_.size() < kShapes) {
    slot = &shapes_.emplace_back();
  } else {
    slot = &*std::min_element(shapes_.begin(), shapes_.end(),
                              [](const StepShape& a, const StepShape& b) { return a.used < b.used; });
  }
  StepShape& s = *slot;
  s.hash = h;
  s.used = clock_;
  s.gpus.assign(gpus.begin(), gpus.end());
  s.ends.clear();
  for (const Transfer& t : step.transfers)
    s.ends.push_back(static_cast<uint64_t>(static_cast<uint32_t>(t.src)) << 32 | static_cast<uint32_t>(t.dst));
  paths_.paths(step.transfers, gpus, s.routes);
  touched_.clear();
  for (const Route& r : s.routes)
    for (uint32_t l : r.links)
      if (load_[l]++ == 0) touched_.push_back(l);
  s.rate.assign(s.routes.size(), std::numeric_limits<double>::infinity());
  for (size_t i = 0; i < s.routes.size(); ++i)
    for (uint32_t l : s.routes[i].links) s.rate[i] = std::min(s.rate[i], paths_.capacity(l) / load_[l]);
  for (uint32_t l : touched_) load_[l] = 0;
  return s;
}

CollectiveCost AnalyticNetwork::run(const Expansion& e, std::span<const int32_t> gpus, bool link_bytes) {
  CollectiveCost cost;
  if (e.steps.empty()) return cost;
  cost.seconds = e.base_latency;
  std::vector<uint32_t> used;
  for (const CollectiveStep& step : e.steps) {
    const StepShape& sh = shape(step, gpus);
    double lockstep = 0, moving = 0;
    lat_.assign(step.transfers.size(), 0.0);
    for (size_t i = 0; i < step.transfers.size(); ++i) {
      const Transfer& t = step.transfers[i];
      const Route& r = sh.routes[i];
      if (r.links.empty()) continue;
      lat_[i] = paths_.latency(r, e);
      const double bw = paths_.wire_bytes(t, e) / sh.rate[i];
      lockstep = std::max(lockstep, lat_[i] + bw);
      moving = std::max(moving, bw);
    }
    const double rep = static_cast<double>(step.repeat);
    cost.seconds += step.latency == StepLatency::Max ? lockstep * rep : step_latency(step, lat_, moving) + moving * rep;
    if (!link_bytes) continue;
    for (size_t i = 0; i < step.transfers.size(); ++i)
      for (uint32_t l : sh.routes[i].links) {
        if (bytes_[l] == 0) used.push_back(l);
        bytes_[l] += paths_.wire_bytes(step.transfers[i], e) * static_cast<double>(step.repeat);
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
