#include "cost_models/flow_network.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace clustersim {

FlowNetwork::FlowNetwork(Topology& topo, const NetworkProfile& profile) : paths_(topo, profile) {
  for (size_t l = 0; l < topo.links().size(); ++l) system_.add_constraint(paths_.capacity(static_cast<uint32_t>(l)));
  link_rate_.assign(topo.links().size(), 0.0);
  link_since_.assign(topo.links().size(), 0);
  step_load_.assign(topo.links().size(), 0);
}

uint64_t FlowNetwork::start(Expansion e, std::vector<int32_t> gpus, SimTime now) {
  progress(now);
  const auto id = static_cast<uint32_t>(colls_.size());
  colls_.push_back(Collective{std::move(e), std::move(gpus), 0, 0, now, 0.0, State::Base});
  ++active_;
  // The base latency elapses before the first step moves any byte.
  timers_.push(Timer{now + SimTime::from_seconds(colls_[id].e.base_latency), timer_seq_++, id});
  return id;
}

SimTime FlowNetwork::next_time() const {
  SimTime t = next_flow_end_;
  if (!timers_.empty()) t = std::min(t, timers_.top().t);
  return t;
}

void FlowNetwork::begin_step(uint32_t c, SimTime now) {
  Collective& col = colls_[c];
  col.step_end = now;
  col.pending = 0;
  const CollectiveStep& step = col.e.steps[col.step];
  const double rep = static_cast<double>(step.repeat);
  const bool lockstep = step.latency == StepLatency::Max;
  routes_.clear();
  for (const Transfer& t : step.transfers) routes_.push_back(paths_.path(t, col.gpus));
  // One round's data on the slowest route, its links shared by this step's transfers
  // alone (as the analytic network counts it).
  // (Only a Path step's latency depends on it.)
  double round_data = 0;
  if (step.latency == StepLatency::Path) {
    for (const Route& r : routes_)
      for (uint32_t l : r.links) ++step_load_[l];
    for (size_t i = 0; i < step.transfers.size(); ++i) {
      double rate = std::numeric_limits<double>::infinity();
      for (uint32_t l : routes_[i].links) rate = std::min(rate, paths_.capacity(l) / step_load_[l]);
      if (rate < std::numeric_limits<double>::infinity())
        round_data = std::max(round_data, paths_.wire_bytes(step.transfers[i].bytes, col.e) / rate);
    }
    for (const Route& r : routes_)
      for (uint32_t l : r.links) step_load_[l] = 0;
  }
  lat_.assign(step.transfers.size(), 0.0);
  for (size_t i = 0; i < step.transfers.size(); ++i) lat_[i] = paths_.latency(routes_[i], col.e);
  col.extra_latency = lockstep ? 0.0 : step_latency(step, lat_, round_data);
  for (size_t i = 0; i < step.transfers.size(); ++i) {
    const Transfer& t = step.transfers[i];
    const auto links = routes_[i].links;
    if (links.empty() || t.bytes <= 0) continue;
    Flow f;
    f.coll = c;
    f.remaining = paths_.wire_bytes(t.bytes, col.e) * rep;
    f.latency = lockstep ? lat_[i] * rep : 0.0;
    f.var = system_.add_variable(links);
    f.alive = true;
    if (f.var >= flows_.size()) flows_.resize(f.var + 1);
    flows_[f.var] = f;
    live_flows_.push_back(f.var);
    ++col.pending;
    ++flows_started_;
  }
  if (col.pending == 0) {  // nothing to move: only the latency
    col.state = State::Draining;
    timers_.push(Timer{now + SimTime::from_seconds(col.extra_latency), timer_seq_++, c});
  }
}

// Moves every live flow forward to time t at its current rate.
void FlowNetwork::progress(SimTime t) {
  if (t <= now_) return;
  const double dt = (t - now_).seconds();
  for (uint32_t v : live_flows_) flows_[v].remaining -= system_.rate(v) * dt;
  now_ = t;
}

void FlowNetwork::resolve(SimTime now) {
  const auto& changed = system_.solve();
  // Close the rate interval of every link whose share may have changed.
  for (MaxMinSystem::Id l : changed) {
    const double r = system_.usage(l);
    if (r == link_rate_[l]) continue;
    if (record_usage_ && link_rate_[l] > 0 && now.picoseconds() > link_since_[l])
      usage_.push_back(LinkUsage{l, link_since_[l], now.picoseconds(),
                                 link_rate_[l] * static_cast<double>(now.picoseconds() - link_since_[l]) * 1e-12});
    link_rate_[l] = r;
    link_since_[l] = now.picoseconds();
  }
  next_flow_end_ = SimTime::max();
  for (uint32_t v : live_flows_) {
    const double rate = system_.rate(v);
    if (rate <= 0) continue;
    next_flow_end_ = std::min(next_flow_end_, now + SimTime::from_seconds(std::max(0.0, flows_[v].remaining) / rate));
  }
}

void FlowNetwork::advance(SimTime t, std::vector<uint64_t>& finished) {
  progress(t);
  bool changed = false;
  // Flows whose bytes are through (within a picosecond's worth) leave the network and
  // owe their latency; a step whose last flow leaves ends at its latest such time.
  for (size_t i = 0; i < live_flows_.size();) {
    Flow& f = flows_[live_flows_[i]];
    const double rate = system_.rate(f.var);
    if (f.remaining > rate * 1e-12 + 1e-9) {
      ++i;
      continue;
    }
    Collective& col = colls_[f.coll];
    col.step_end = std::max(col.step_end, t + SimTime::from_seconds(f.latency));
    system_.remove_variable(f.var);
    f.alive = false;
    live_flows_[i] = live_flows_.back();
    live_flows_.pop_back();
    changed = true;
    if (--col.pending == 0) {
      col.state = State::Draining;
      timers_.push(Timer{col.step_end + SimTime::from_seconds(col.extra_latency), timer_seq_++, f.coll});
    }
  }
  // Timers due now: the base latency is over (begin step 0), or a step is over (begin
  // the next, or finish). Handling one may add another for the same instant.
  while (!timers_.empty() && timers_.top().t <= t) {
    const uint32_t c = timers_.top().coll;
    timers_.pop();
    Collective& col = colls_[c];
    if (col.state == State::Draining) ++col.step;
    if (col.state == State::Base || col.state == State::Draining) {
      if (col.step >= col.e.steps.size()) {
        col.state = State::Done;
        --active_;
        finished.push_back(c);
        std::vector<CollectiveStep>().swap(col.e.steps);
        continue;
      }
      col.state = State::Moving;
      begin_step(c, t);
      changed = true;
    }
  }
  if (changed) resolve(t);
}

void FlowNetwork::flush_usage() {
  for (size_t l = 0; l < link_rate_.size(); ++l) {
    if (record_usage_ && link_rate_[l] > 0 && now_.picoseconds() > link_since_[l])
      usage_.push_back(LinkUsage{static_cast<uint32_t>(l), link_since_[l], now_.picoseconds(),
                                 link_rate_[l] * static_cast<double>(now_.picoseconds() - link_since_[l]) * 1e-12});
    link_since_[l] = now_.picoseconds();
  }
}

}  // namespace clustersim
