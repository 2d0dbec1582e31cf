#include "cost_models/flow_network.h"

#include <algorithm>
#include <cmath>
#include <bit>
#include <limits>
#include <stdexcept>

namespace clustersim {

FlowNetwork::FlowNetwork(Topology& topo, const NetworkProfile& profile) : paths_(topo, profile) {
  system_.reserve_constraints(topo.links().size());
  for (size_t l = 0; l < topo.links().size(); ++l) system_.add_constraint(paths_.capacity(static_cast<uint32_t>(l)));
  step_load_.assign(topo.links().size(), 0);
}

uint64_t FlowNetwork::start(Expansion e, std::vector<int32_t> gpus, SimTime now) {
  now_ = std::max(now_, now);
  const auto id = static_cast<uint32_t>(colls_.size());
  if (use_.empty() && solo_on_ && !record_usage_) use_.assign(system_.constraints(), 0);
  if (link_rates_.empty() && record_usage_) link_rates_.assign(system_.constraints(), LinkRate{});
  colls_.push_back(Collective{std::move(e), std::move(gpus), 0, 0, now, 0.0, State::Base, 0, kNone, now});
  ++active_;
  // The base latency elapses before the first step moves any byte.
  push_timer(id, now + SimTime::from_seconds(colls_[id].e.base_latency));
  return id;
}

void FlowNetwork::push_timer(uint32_t c, SimTime t) {
  colls_[c].timer = ++timer_seq_;
  timers_.push(Timer{t, timer_seq_, c});
}

SimTime FlowNetwork::next_time() const {
  SimTime t = ends_.empty() ? SimTime::max() : ends_.top().t;
  if (!timers_.empty()) t = std::min(t, timers_.top().t);
  return t;
}

template <class LinksOf>
double FlowNetwork::pipelined_latency(const Collective& col, LinksOf links_of) {
  const CollectiveStep& step = col.e.steps[col.step];
  if (step.latency == StepLatency::Max) return 0.0;
  // One round's data on the slowest route, its links shared by this step's transfers
  // alone (as the analytic network counts it). (Only a Path step's latency depends on it.)
  double round_data = 0;
  if (step.latency == StepLatency::Path) {
    const size_t n = step.transfers.size();
    for (size_t i = 0; i < n; ++i)
      for (uint32_t l : links_of(i)) ++step_load_[l];
    for (size_t i = 0; i < n; ++i) {
      double rate = std::numeric_limits<double>::infinity();
      for (uint32_t l : links_of(i)) rate = std::min(rate, paths_.capacity(l) / step_load_[l]);
      if (rate < std::numeric_limits<double>::infinity())
        round_data = std::max(round_data, paths_.wire_bytes(step.transfers[i], col.e) / rate);
    }
    for (size_t i = 0; i < n; ++i)
      for (uint32_t l : links_of(i)) step_load_[l] = 0;
  }
  return step_latency(step, lat_, round_data);
}

void FlowNetwork::route_step(uint32_t c) {
  Collective& col = colls_[c];
  const CollectiveStep& step = col.e.steps[col.step];
  paths_.paths(step.transfers, col.gpus, routes_);
  lat_.assign(step.transfers.size(), 0.0);
  for (size_t i = 0; i < step.transfers.size(); ++i) lat_[i] = paths_.latency(routes_[i], col.e);
  col.extra_latency = pipelined_latency(col, [&](size_t i) { return routes_[i].links; });
}

void FlowNetwork::begin_step(uint32_t c, SimTime now) {
  Collective& col = colls_[c];
  col.step_end = now;
  col.pending = 0;
  if (!use_.empty() && col.e.steps.size() == 1) {
    const uint32_t entry = step_entry(c);
    if (entry != kNone) {
      run_entry(c, entry, now);
      return;
    }
  }
  const CollectiveStep& step = col.e.steps[col.step];
  const double rep = static_cast<double>(step.repeat);
  const bool lockstep = step.latency == StepLatency::Max;
  route_step(c);
  // Solo steps holding links this step needs join the shared system first.
  if (solo_live_ > 0)
    for (size_t i = 0; i < step.transfers.size(); ++i)
      if (step.transfers[i].bytes > 0)
        for (uint32_t l : routes_[i].links)
          if (use_[l] < 0) merge_solo(static_cast<uint32_t>(-use_[l] - 1), now);
  constexpr size_t kAhead = 4;  // flows whose links are asked for ahead of their adding
  for (size_t i = 0; i < std::min(kAhead, routes_.size()); ++i) system_.prefetch(routes_[i].links);
  for (size_t i = 0; i < step.transfers.size(); ++i) {
    if (i + kAhead < routes_.size()) system_.prefetch(routes_[i + kAhead].links);
    const Transfer& t = step.transfers[i];
    const auto links = routes_[i].links;
    if (links.empty() || t.bytes <= 0) continue;
    add_flow(c, links, paths_.wire_bytes(t, col.e) * rep, lockstep ? lat_[i] * rep : 0.0, now);
  }
  if (col.pending == 0) {  // nothing to move: only the latency
    col.state = State::Draining;
    push_timer(c, now + SimTime::from_seconds(col.extra_latency));
  }
}

void FlowNetwork::add_flow(uint32_t c, std::span<const uint32_t> links, double bytes, double latency, SimTime now) {
  const MaxMinSystem::Id var = system_.add_variable(links);
  if (!use_.empty())
    for (uint32_t l : links) ++use_[l];
  if (var >= flows_.size()) flows_.resize(var + 1);
  Flow& f = flows_[var];  // its rate and end come with the next resolve()
  f.coll = c;
  f.remaining = bytes;
  f.rate = 0;
  f.since = now;
  f.latency = latency;
  ++f.gen;
  f.alive = true;
  ++colls_[c].pending;
  ++flows_started_;
}

uint32_t FlowNetwork::step_entry(uint32_t c) {
  const Collective& col = colls_[c];
  const CollectiveStep& step = col.e.steps[col.step];
  // The key: everything the step's routes, bytes and latencies follow from; each transfer
  // by its ends' GPUs (kSwitch: its node's switch) and bytes.
  std::vector<uint32_t>& key = key_scratch_;
  key.clear();
  key.push_back(static_cast<uint32_t>(step.transfers.size()));
  auto gpu = [&](int32_t at) { return at == kSwitch ? ~uint32_t{0} : static_cast<uint32_t>(col.gpus[static_cast<size_t>(at)]); };
  for (const Transfer& t : step.transfers) {
    key.push_back(gpu(t.src));
    key.push_back(gpu(t.dst));
    const auto bits = std::bit_cast<uint64_t>(t.bytes);
    key.push_back(static_cast<uint32_t>(bits));
    key.push_back(static_cast<uint32_t>(bits >> 32));
    if (step.latency == StepLatency::RingMean) key.push_back(t.channel);
  }
  const auto rep_bits = static_cast<uint64_t>(step.repeat);
  key.push_back(static_cast<uint32_t>(rep_bits));
  key.push_back(static_cast<uint32_t>(rep_bits >> 32));
  key.push_back(static_cast<uint32_t>(step.latency) << 16 | static_cast<uint32_t>(col.e.proto) << 8 |
                static_cast<uint32_t>(col.e.family));
  key.insert(key.end(), step.path.begin(), step.path.end());
  WordHash hash;
  for (uint32_t w : key) hash.add(w);
  const uint64_t h = hash.value;
  auto [lo, hi] = solo_index_.equal_range(h);
  for (auto it = lo; it != hi; ++it)
    if (solo_steps_[it->second].key == key) return it->second;
  if (solo_bytes_ > kSoloBytes) return kNone;
  // New: its routes (kept here, not in the topology's route table), bytes, latencies,
  // pipelined latency, and its schedule alone.
  const size_t n = step.transfers.size();
  std::vector<uint32_t>& all = all_links_;
  all.clear();
  at_.assign(1, 0);
  lat_.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const Route r = paths_.append_path(step.transfers[i], col.gpus, all);
    at_.push_back(static_cast<uint32_t>(all.size()));
    lat_[i] = paths_.latency(at_[i + 1] - at_[i], r, col.e);
  }
  auto links_of = [&](size_t i) { return std::span<const uint32_t>(all.data() + at_[i], at_[i + 1] - at_[i]); };
  const double rep = static_cast<double>(step.repeat);
  const bool lockstep = step.latency == StepLatency::Max;
  SoloStep s;
  s.key = key;
  s.extra_latency = pipelined_latency(col, links_of);
  s.at.push_back(0);
  for (size_t i = 0; i < n; ++i) {
    const Transfer& t = step.transfers[i];
    const auto links = links_of(i);
    if (links.empty() || t.bytes <= 0) continue;  // as begin_step: not a flow
    s.links.insert(s.links.end(), links.begin(), links.end());
    s.at.push_back(static_cast<uint32_t>(s.links.size()));
    s.bytes.push_back(paths_.wire_bytes(t, col.e) * rep);
    s.latency.push_back(lockstep ? lat_[i] * rep : 0.0);
  }
  // Its links numbered in order of first use: the schedule alone follows from these
  // numbers, the numbered links' capacities, and the flows' bytes and latencies, so a
  // step of the same shape elsewhere on the fabric (another rail, another pair of
  // stages) has the same schedule.
  std::vector<uint32_t>& local = local_scratch_;
  local.clear();
  for (uint32_t l : s.links) {
    if (step_load_[l] == 0) {
      s.distinct.push_back(l);
      step_load_[l] = static_cast<uint32_t>(s.distinct.size());
    }
    local.push_back(step_load_[l] - 1);
  }
  for (uint32_t l : s.distinct) step_load_[l] = 0;
  WordHash shape;
  for (uint32_t k : local) shape.add(k);
  for (uint32_t a : s.at) shape.add(a);
  for (uint32_t l : s.distinct) shape.add(std::bit_cast<uint64_t>(paths_.capacity(l)));
  for (double b : s.bytes) shape.add(std::bit_cast<uint64_t>(b));
  for (double b : s.latency) shape.add(std::bit_cast<uint64_t>(b));
  const uint64_t hs = shape.value;
  auto same_shape = [&](const SoloStep& o) {
    if (o.at != s.at || o.bytes != s.bytes || o.latency != s.latency || o.distinct.size() != s.distinct.size())
      return false;
    for (size_t k = 0; k < o.distinct.size(); ++k)
      if (paths_.capacity(o.distinct[k]) != paths_.capacity(s.distinct[k])) return false;
    for (size_t k = 0; k < o.distinct.size(); ++k) step_load_[o.distinct[k]] = static_cast<uint32_t>(k);
    bool same = true;
    for (size_t k = 0; k < o.links.size() && same; ++k) same = step_load_[o.links[k]] == local[k];
    for (uint32_t l : o.distinct) step_load_[l] = 0;
    return same;
  };
  s.end_ps = -1;
  auto [slo, shi] = shape_index_.equal_range(hs);
  for (auto it = slo; it != shi && s.end_ps < 0; ++it)
    if (same_shape(solo_steps_[it->second])) s.end_ps = solo_steps_[it->second].end_ps;
  if (s.end_ps < 0) {
    s.end_ps = s.bytes.empty() ? 0 : run_solo(s, std::numeric_limits<int64_t>::max());
    shape_index_.emplace(hs, static_cast<uint32_t>(solo_steps_.size()));
  }
  solo_bytes_ += 4 * (s.key.size() + s.links.size() + s.at.size() + s.distinct.size()) + 16 * s.bytes.size();
  const auto id = static_cast<uint32_t>(solo_steps_.size());
  solo_steps_.push_back(std::move(s));
  solo_index_.emplace(h, id);
  return id;
}

void FlowNetwork::run_entry(uint32_t c, uint32_t entry, SimTime now) {
  Collective& col = colls_[c];
  const SoloStep& s = solo_steps_[entry];
  col.extra_latency = s.extra_latency;
  if (s.bytes.empty()) {  // nothing to move: only the latency
    col.state = State::Draining;
    push_timer(c, now + SimTime::from_seconds(col.extra_latency));
    return;
  }
  // Alone when none of its links carries a flow or belongs to a solo step; solo steps
  // holding links it needs join the shared system first.
  bool alone = true;
  for (uint32_t l : s.distinct) {
    const int32_t u = use_[l];
    if (u < 0) merge_solo(static_cast<uint32_t>(-u - 1), now);
    alone = alone && u == 0;
  }
  if (!alone) {
    for (size_t i = 0; i < s.bytes.size(); ++i)
      add_flow(c, std::span<const uint32_t>(s.links.data() + s.at[i], s.at[i + 1] - s.at[i]), s.bytes[i],
               s.latency[i], now);
    return;
  }
  for (uint32_t l : s.distinct) use_[l] = -static_cast<int32_t>(c) - 1;
  ++solo_live_;
  ++solo_started_;
  flows_started_ += s.bytes.size();
  col.state = State::Solo;
  col.solo = entry;
  col.solo_start = now;
  col.pending = static_cast<uint32_t>(s.bytes.size());
  push_timer(c, now + SimTime::ps(s.end_ps) + SimTime::from_seconds(col.extra_latency));
}

int64_t FlowNetwork::run_solo(const SoloStep& s, int64_t stop) {
  // The shared system's arithmetic on a system of this step's links alone: its rates,
  // the flows' ends rounded to picoseconds, flows within a picosecond of an instant
  // leaving at it (FlowNetwork::advance).
  // Its links are numbered in order of first use (`distinct`'s order).
  MaxMinSystem sys;
  for (size_t k = 0; k < s.distinct.size(); ++k) {
    sys.add_constraint(paths_.capacity(s.distinct[k]));
    step_load_[s.distinct[k]] = static_cast<uint32_t>(k);
  }
  const size_t n = s.bytes.size();
  solo_flows_.assign(n, SoloFlow{});
  std::vector<uint32_t>& local = all_links_;
  for (size_t i = 0; i < n; ++i) {
    local.clear();
    for (uint32_t k = s.at[i]; k < s.at[i + 1]; ++k) local.push_back(step_load_[s.links[k]]);
    sys.add_variable(local);
    solo_flows_[i].remaining = s.bytes[i];
  }
  for (uint32_t l : s.distinct) step_load_[l] = 0;
  std::priority_queue<FlowEnd, std::vector<FlowEnd>, std::greater<>> ends;
  auto rerate = [&](int64_t t) {
    sys.solve();
    for (MaxMinSystem::Id v : sys.changed_variables()) {
      SoloFlow& f = solo_flows_[v];
      const double rate = sys.rate(v);
      if (rate == f.rate) continue;
      f.remaining -= f.rate * SimTime::ps(t - f.since).seconds();
      f.since = t;
      f.rate = rate;
      ++f.gen;
      if (rate > 0) {
        f.end = (SimTime::ps(t) + SimTime::from_seconds(std::max(0.0, f.remaining) / rate)).picoseconds();
        ends.push(FlowEnd{SimTime::ps(f.end), v, f.gen});
      }
    }
  };
  auto stale = [&](const FlowEnd& e) { return !solo_flows_[e.var].alive || solo_flows_[e.var].gen != e.gen; };
  int64_t step_end = 0;
  uint32_t pending = static_cast<uint32_t>(n);
  // Removes the flows through by t + 1 ps, at t.
  auto leave = [&](int64_t t) {
    while (!ends.empty() && ends.top().t <= SimTime::ps(t) + SimTime::ps(1)) {
      const FlowEnd e = ends.top();
      ends.pop();
      if (stale(e)) continue;
      SoloFlow& f = solo_flows_[e.var];
      step_end = std::max(step_end, (SimTime::ps(t) + SimTime::from_seconds(s.latency[e.var])).picoseconds());
      sys.remove_variable(e.var);
      f.alive = false;
      ++f.gen;
      --pending;
    }
  };
  rerate(0);
  while (pending > 0) {
    while (!ends.empty() && stale(ends.top())) ends.pop();
    if (ends.empty()) throw std::logic_error("flow network: a solo step's flow never ends");
    const int64_t t = ends.top().t.picoseconds();
    if (t > stop) break;
    leave(t);
    if (pending > 0) rerate(t);
  }
  if (pending > 0) leave(stop);  // stopped: the instant another step needs its links
  solo_pending_ = pending;
  return step_end;
}

void FlowNetwork::release_links(uint32_t c) {
  for (uint32_t l : solo_steps_[colls_[c].solo].distinct) use_[l] = 0;
  --solo_live_;
}

void FlowNetwork::merge_solo(uint32_t c, SimTime now) {
  Collective& col = colls_[c];
  const SoloStep& s = solo_steps_[col.solo];
  release_links(c);
  ++solo_merged_;
  const SimTime start = col.solo_start;
  col.step_end = start + SimTime::ps(run_solo(s, (now - start).picoseconds()));
  col.pending = solo_pending_;
  if (col.pending == 0) {  // all through: its end timer stands
    col.state = State::Draining;
    return;
  }
  col.state = State::Moving;
  col.timer = 0;  // its end comes from its flows now
  for (size_t i = 0; i < s.bytes.size(); ++i) {
    const SoloFlow& sf = solo_flows_[i];
    if (!sf.alive) continue;
    const std::span<const uint32_t> links(s.links.data() + s.at[i], s.at[i + 1] - s.at[i]);
    const MaxMinSystem::Id var = system_.add_variable(links);
    for (uint32_t l : links) ++use_[l];
    if (var >= flows_.size()) flows_.resize(var + 1);
    Flow& f = flows_[var];
    f.coll = c;
    f.remaining = sf.remaining;
    f.rate = sf.rate;
    f.since = start + SimTime::ps(sf.since);
    f.latency = s.latency[i];
    ++f.gen;
    f.alive = true;
    if (sf.rate > 0) ends_.push(FlowEnd{start + SimTime::ps(sf.end), var, f.gen});
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
    if (!use_.empty()) system_.for_each_link(v, [&](uint32_t l) { --use_[l]; });
    system_.remove_variable(v);
    f.alive = false;
    ++f.gen;
    changed = true;
    if (--col.pending == 0) {
      col.state = State::Draining;
      push_timer(f.coll, col.step_end + SimTime::from_seconds(col.extra_latency));
    }
  }
  // Timers due now: the base latency is over (begin step 0), or a step is over (begin
  // the next, or finish). Handling one may add another for the same instant.
  while (!timers_.empty() && timers_.top().t <= t) {
    const uint32_t c = timers_.top().coll;
    const uint64_t seq = timers_.top().seq;
    timers_.pop();
    Collective& col = colls_[c];
    if (seq != col.timer) continue;  // a solo step's end, since merged into the shared system
    if (col.state == State::Solo) {
      release_links(c);
      col.state = State::Draining;
    }
    if (col.state == State::Draining) ++col.step;
    if (col.state == State::Base || col.state == State::Draining) {
      if (col.step >= col.e.steps.size()) {
        col.state = State::Done;
        --active_;
        finished.push_back(c);
        std::vector<CollectiveStep>().swap(col.e.steps);
        std::vector<int32_t>().swap(col.gpus);
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
