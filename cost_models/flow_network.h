// The flow-level network: collectives run as flows that share links max-min fairly
// (maxmin.h) with every other flow in flight, so concurrent collectives contend — a DP
// all-reduce and a PP send crossing one NIC slow each other down.
//
// A collective runs its expansion step by step. Each transfer of a step is one flow of
// repeat × wire bytes along its route. In a lock-step step a flow whose bytes are
// through still owes repeat × its latency; in a pipelined step (ring, tree) the step's
// latency (step_latency()) is paid once the last flow is through — so with no other
// traffic a step lasts exactly what the analytic network says. Rates are
// re-solved when a flow starts or ends, only for the links it shares.
//
// The network keeps its own clock in step with the caller's: the caller asks
// next_time(), then advance()s to it (or starts collectives at its current time).
#pragma once

#include <cstdint>
#include <queue>
#include <span>
#include <vector>

#include "cost_models/maxmin.h"
#include "cost_models/network.h"
#include "reports/timeline.h"
#include "sim/time.h"

namespace clustersim {

class FlowNetwork {
 public:
  FlowNetwork(Topology& topo, const NetworkProfile& profile);

  // Starts a collective at time `now` (>= the last advance); returns its id.
  uint64_t start(Expansion e, std::vector<int32_t> gpus, SimTime now);
  // When something next happens inside the network, or SimTime::max() when idle.
  SimTime next_time() const;
  // Moves the clock to `t` (<= next_time()) and appends the ids of the collectives that
  // finished at `t`, in the order they were started.
  void advance(SimTime t, std::vector<uint64_t>& finished);

  bool idle() const { return active_ == 0; }
  uint64_t flows_started() const { return flows_started_; }
  // Piecewise-constant link rates so far, as bytes carried per interval; flush()
  // closes the open intervals at the current time.
  LinkLoads& usage() { return usage_; }
  void flush_usage();
  // Off: link-rate intervals are not kept (nothing asked for them); rates are the same.
  // Set before the first start().
  void set_record_usage(bool on) { record_usage_ = on; }

 private:
  enum class State : uint8_t { Base, Moving, Draining, Done };
  struct Collective {
    Expansion e;
    std::vector<int32_t> gpus;
    size_t step = 0;
    uint32_t pending = 0;      // transfers of the current step still moving bytes
    SimTime step_end;          // max over finished transfers of finish + latency
    double extra_latency = 0;  // pipelined steps: latency paid once the bytes are through
    State state = State::Base;
  };
  // A flow's bytes are counted down only when its rate changes: `remaining` as of
  // `since`, moving at `rate` since then, so an event costs the flows whose rates it
  // changed, not every flow in flight.
  struct Flow {
    uint32_t coll = 0;
    double remaining = 0;  // wire bytes, as of `since`
    double rate = 0;       // bytes/s since `since`
    SimTime since;
    double latency = 0;  // seconds still owed after the bytes
    uint32_t gen = 0;    // bumped whenever its end time is rescheduled; older ends are stale
    bool alive = false;
  };
  // When a flow's bytes will be through at its current rate.
  struct FlowEnd {
    SimTime t;
    uint32_t var, gen;
    bool operator>(const FlowEnd& o) const { return t != o.t ? t > o.t : var > o.var; }
  };
  struct Timer {
    SimTime t;
    uint64_t seq;
    uint32_t coll;
    bool operator>(const Timer& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };

  void begin_step(uint32_t c, SimTime now);
  void resolve(SimTime now);
  void drop_stale_ends();
  void close_interval(uint32_t link, SimTime now);

  TransferPaths paths_;
  std::vector<uint32_t> step_load_;  // per link, transfers of the step being begun (zero between)
  std::vector<Route> routes_;        // the step being begun: its transfers' routes
  std::vector<double> lat_;          // and their step latencies
  MaxMinSystem system_;
  std::vector<Collective> colls_;
  std::vector<Flow> flows_;
  std::priority_queue<FlowEnd, std::vector<FlowEnd>, std::greater<>> ends_;
  std::vector<uint32_t> due_;  // flows ending at the instant being advanced to
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  uint64_t timer_seq_ = 0;
  SimTime now_;
  size_t active_ = 0;
  uint64_t flows_started_ = 0;
  // Each link's rate since when, for the usage intervals (kept only when they are recorded).
  struct LinkRate {
    double rate = 0;
    int64_t since = 0;
  };
  std::vector<LinkRate> link_rates_;
  LinkLoads usage_;
  // Intervals closing at one instant, grouped into loads before they are kept.
  struct Closing {
    int64_t since;
    double bytes;
    uint32_t link;
  };
  std::vector<Closing> closing_;
  std::vector<uint32_t> group_;
  void keep_closings(int64_t end_ps);
  bool record_usage_ = true;
};

}  // namespace clustersim
