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
// A step alone on its links (solo): when none of a one-step collective's links carries
// another flow, its flows are solved apart from the shared system, once per distinct
// step (the same routes, bytes and latencies give the same schedule), and the step holds
// its links until it ends. A flow that later needs one of those links first puts the
// solo step's flows, as they stand at that instant, into the shared system; solved
// together from then on, the rates are those the shared system would have reached. The
// mirrored pipeline sends of a data-parallel run are such steps: thousands of identical
// sends whose flows meet each other and nothing else. Off while link usage is recorded
// (a solo step's links would carry no recorded rate).
//
// The network keeps its own clock in step with the caller's: the caller asks
// next_time(), then advance()s to it (or starts collectives at its current time).
#pragma once

#include <cstdint>
#include <queue>
#include <span>
#include <unordered_map>
#include <vector>

#include "cost_models/maxmin.h"
#include "cost_models/network.h"
#include "plan/time.h"
#include "plan/timeline.h"
#include "topology/huge_pages.h"

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
  // Off: every step goes into the shared system (the plain path the solo steps must
  // equal). Set before the first start().
  void set_solo_steps(bool on) { solo_on_ = on; }
  // Steps run solo, and how many of those were later put into the shared system.
  uint64_t solo_steps() const { return solo_started_; }
  uint64_t solo_merged() const { return solo_merged_; }

 private:
  enum class State : uint8_t { Base, Moving, Solo, Draining, Done };
  static constexpr uint32_t kNone = ~uint32_t{0};
  struct Collective {
    Expansion e;
    std::vector<int32_t> gpus;
    size_t step = 0;
    uint32_t pending = 0;      // transfers of the current step still moving bytes
    SimTime step_end;          // max over finished transfers of finish + latency
    double extra_latency = 0;  // pipelined steps: latency paid once the bytes are through
    State state = State::Base;
    uint64_t timer = 0;        // its live timer's seq; a popped timer with another is stale
    uint32_t solo = kNone;     // Solo: its entry in solo_steps_
    SimTime solo_start;        // Solo: when the step began
  };
  // A solo step: its flows (those with links and bytes), each flow's route, and its
  // schedule alone: when its step would end (before the pipelined latency), from its start.
  struct SoloStep {
    std::vector<uint32_t> key;      // its transfers' GPUs and bytes, repeat, schedule, protocol
    double extra_latency = 0;
    std::vector<uint32_t> links;    // the flows' routes, flattened: flow i is links[at[i] .. at[i + 1])
    std::vector<uint32_t> at;
    std::vector<double> bytes;      // wire bytes × repeat
    std::vector<double> latency;    // owed once the bytes are through
    std::vector<uint32_t> distinct; // its links, each once, in order of first use
    int64_t end_ps = 0;
  };
  // A solo step's flow while its schedule is computed or replayed.
  struct SoloFlow {
    double remaining = 0, rate = 0;
    int64_t since = 0, end = 0;
    uint32_t gen = 0;
    bool alive = true;
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
  void push_timer(uint32_t c, SimTime t);
  // The current step's routes into routes_, their latencies into lat_, and its pipelined
  // latency into the collective.
  void route_step(uint32_t c);
  // The step's latency paid once its bytes are through (0 for a lock-step step), from
  // lat_ and each transfer's links (links_of(i)).
  template <class LinksOf>
  double pipelined_latency(const Collective& col, LinksOf links_of);
  void add_flow(uint32_t c, std::span<const uint32_t> links, double bytes, double latency, SimTime now);
  // A one-step collective's step, described once per distinct step (kNone past kSoloBytes).
  uint32_t step_entry(uint32_t c);
  // Begins a described step: solo when its links are free, in the shared system when not.
  void run_entry(uint32_t c, uint32_t entry, SimTime now);
  // Runs a solo step's flows alone from time 0 up to `stop_ps` (the whole step when
  // INT64_MAX); leaves each flow's state in solo_flows_ and returns the step's end so far
  // (the latest removal + latency). solo_pending_: flows still moving.
  int64_t run_solo(const SoloStep& s, int64_t stop_ps);
  // Puts solo collective c's flows, as they stand at `now`, into the shared system.
  void merge_solo(uint32_t c, SimTime now);
  void release_links(uint32_t c);
  void resolve(SimTime now);
  void drop_stale_ends();
  void close_interval(uint32_t link, SimTime now);

  TransferPaths paths_;
  BigVector<uint32_t> step_load_;  // per link, transfers of the step being begun (zero between)
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
  bool solo_on_ = true;
  // By link, while solo steps are on: the shared flows crossing it (each crossing), or
  // -(c + 1) while solo collective c holds it, or 0.
  BigVector<int32_t> use_;
  std::vector<SoloStep> solo_steps_;
  std::unordered_multimap<uint64_t, uint32_t> solo_index_;  // hash -> entry
  size_t solo_bytes_ = 0;  // what the entries hold; past kSoloBytes steps go into the shared system
  static constexpr size_t kSoloBytes = size_t{256} << 20;
  std::vector<uint32_t> key_scratch_, all_links_, at_, local_scratch_;
  std::unordered_multimap<uint64_t, uint32_t> shape_index_;  // schedules by the shape of their step
  std::vector<SoloFlow> solo_flows_;
  uint32_t solo_pending_ = 0;
  uint32_t solo_live_ = 0;  // solo collectives holding links
  uint64_t solo_started_ = 0, solo_merged_ = 0;
};

}  // namespace clustersim
