#include "cost_models/flow_network.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace clustersim {

FlowNetwork::FlowNetwork(Topology& topo, const NetworkProfile& profile) : paths_(topo, profile) {
  for (size_t l = 0; l < topo.links().size(); ++l) system_.add_constraint(paths_.capacity(static_cast<uint32_t>(l)));
  link_rates_.assign(topo.links().size(), LinkRate{});
  step_load_.assign(topo.links().size(), 0);
}

uint64_t FlowNetwork::start(Expansion e, std::vector<int32_t> gpus, SimTime now) {
  now_ = std::max(now_, now);
  const auto id = static_cast<uint32_t>(colls_.size());
  colls_.push_back(Collective{std::move(e), std::move(gpus), 0, 0, now, 0.0, State::Base});
  ++active_;
  // The base latency elapses before the first step moves any byte.
  timers_.push(Timer{now + SimTime::from_seconds(colls_[id].e.base_latency), timer_seq_++, id});
  return id;
}

SimTime FlowNetwork::next_time() const {
  SimTime t = ends_.empty() ? SimTime::max() : ends_.top().t;
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
  paths_.paths(step.transfers, col.gpus, routes_);
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
  constexpr size_t kAhead = 4;  // flows whose links are asked for ahead of their adding
  for (size_t i = 0; i < std::min(kAhead, routes_.size()); ++i) system_.prefetch(routes_[i].links);
  for (size_t i = 0; i < step.transfers.size(); ++i) {
    if (i + kAhead < routes_.size()) system_.prefetch(routes_[i + kAhead].links);
    const Transfer& t = step.transfers[i];
    const auto links = routes_[i].links;
    if (links.empty() || t.bytes <= 0) continue;
    const MaxMinSystem::Id var = system_.add_variable(links);
    if (var >= flows_.size()) flows_.resize(var + 1);
    Flow& f = flows_[var];  // its rate and end come with the next resolve()
    f.coll = c;
    f.remaining = paths_.wire_bytes(t.bytes, col.e) * rep;
    f.rate = 0;
    f.since = now;
    f.latency = lockstep ? lat_[i] * rep : 0.0;
    ++f.gen;
    f.alive = true;
    ++col.pending;
    ++flows_started_;
  }
  if (col.pending == 0) {  // nothing to move: only the latency
    col.state = State::Draining;
    timers_.push(Timer{now + SimTime::from_seconds(col.extra_latency), timer_seq_++, c});
  }
}

void FlowNetwork::resolve(SimTime now) {
  const auto& changed = system_.solve();
  // Close the rate interval of every link whose share may have changed.
  if (record_usage_)
    for (MaxMinSystem::Id l : changed) {
      const double r = system_.usage(l);
      LinkRate& lr = link_rates_[l];
      if (r == lr.rate) continue;
      close_interval(l, now);
      lr.rate = r;
    }
  if (!closing_.empty()) keep_closings(now.picoseconds());
  // Flows whose rate changed: count their bytes up to now at the old rate, and
  // reschedule their end at the new one.
  for (MaxMinSystem::Id v : system_.changed_variables()) {
    Flow& f = flows_[v];
    const double rate = system_.rate(v);
    if (rate == f.rate) continue;
    f.remaining -= f.rate * (now - f.since).seconds();
    f.since = now;
    f.rate = rate;
    ++f.gen;
    if (rate > 0) ends_.push(FlowEnd{now + SimTime::from_seconds(std::max(0.0, f.remaining) / rate), v, f.gen});
  }
  drop_stale_ends();
}

void FlowNetwork::close_interval(uint32_t l, SimTime now) {
  LinkRate& lr = link_rates_[l];
  if (lr.rate > 0 && now.picoseconds() > lr.since)
    closing_.push_back(Closing{lr.since, lr.rate * static_cast<double>(now.picoseconds() - lr.since) * 1e-12, l});
  lr.since = now.picoseconds();
}

void FlowNetwork::keep_closings(int64_t end) {
  // Intervals that close together and began together with the same bytes are one load
  // (a collective phase's links), recorded once with its links in id order.
  std::sort(closing_.begin(), closing_.end(), [](const Closing& a, const Closing& b) {
    if (a.since != b.since) return a.since < b.since;
    if (a.bytes != b.bytes) return a.bytes < b.bytes;
    return a.link < b.link;
  });
  for (size_t i = 0; i < closing_.size();) {
    size_t j = i;
    group_.clear();
    for (; j < closing_.size() && closing_[j].since == closing_[i].since && closing_[j].bytes == closing_[i].bytes; ++j)
      group_.push_back(closing_[j].link);
    usage_.add(closing_[i].since, end, closing_[i].bytes, group_);
    i = j;
  }
  closing_.clear();
}

void FlowNetwork::drop_stale_ends() {
  auto stale = [&](const FlowEnd& e) { return !flows_[e.var].alive || flows_[e.var].gen != e.gen; };
  while (!ends_.empty() && stale(ends_.top())) ends_.pop();
  // A rescheduled flow's older end waits until its time comes; under heavy churn they
  // would pile up, so past twice the live flows the queue keeps only current ends.
  if (ends_.size() > 2 * system_.live_variables() + 1024) {
    std::vector<FlowEnd> keep;
    keep.reserve(system_.live_variables());
    while (!ends_.empty()) {
      if (!stale(ends_.top())) keep.push_back(ends_.top());
      ends_.pop();
    }
    ends_ = decltype(ends_)(std::greater<>(), std::move(keep));
  }
}

void FlowNetwork::advance(SimTime t, std::vector<uint64_t>& finished) {
  now_ = std::max(now_, t);
  bool changed = false;
  // Flows whose bytes are through (within a picosecond) leave the network and owe their
  // latency; a step whose last flow leaves ends at its latest such time.
  due_.clear();
  while (!ends_.empty() && ends_.top().t <= t + SimTime::ps(1)) {
    due_.push_back(ends_.top().var);
    ends_.pop();
    drop_stale_ends();
  }
  // Many flows of a step end together: their records are asked for ahead of removing them
  // (the flow's record first, its links' once that is in).
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < due_.size(); ++i) {
    if (i + 2 * kAhead < due_.size()) system_.prefetch_variable(due_[i + 2 * kAhead]);
    if (i + kAhead < due_.size()) system_.prefetch_links_of(due_[i + kAhead]);
    const uint32_t v = due_[i];
    Flow& f = flows_[v];
    Collective& col = colls_[f.coll];
    col.step_end = std::max(col.step_end, t + SimTime::from_seconds(f.latency));
    system_.remove_variable(v);
    f.alive = false;
    ++f.gen;
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
  if (!record_usage_) return;
  for (size_t l = 0; l < link_rates_.size(); ++l) close_interval(static_cast<uint32_t>(l), now_);
  keep_closings(now_.picoseconds());
}

}  // namespace clustersim
