// The serving engine's event loop over its replicas (sim/serving.h says what it models):
// requests, replicas with their queues and KV blocks, and the scheduler that picks each
// iteration's work and costs it with serve::IterationCost.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "cost_models/flow_network.h"
#include "cost_models/network.h"
#include "plan/rng.h"
#include "reports/progress.h"
#include "sim/arrivals.h"
#include "sim/serving.h"
#include "sim/serving_cost.h"

namespace clustersim::serve {

struct Req {
  int64_t prompt = 0, output = 0;
  int64_t target = 0;     // tokens to prefill before the next token: prompt (+ generated after a preemption)
  int64_t kv = 0;         // tokens whose KV is cached
  int64_t generated = 0;  // output tokens emitted
  int64_t blocks = 0;     // KV blocks held
  double arrival = 0, first = -1, finish = -1;
  int replica = 0, preemptions = 0;
  int prefill_replica = -1;   // disaggregation: where it was prefilled
  bool swapped = false;       // its KV is in host memory
  int64_t group = -1;         // shared prefix (-1: none)
  int64_t shared_blocks = 0;  // blocks of a cached prefix it reads (held by the prefix, not by it)
  int64_t promised = 0;       // least-kv: its prompt's blocks, counted against its replica until admitted
};

// A cached prefix's KV blocks on one replica: shared by the requests that reference it;
// kept when none does (evictable, least recently used first) until blocks run out.
struct CachedPrefix {
  int64_t blocks = 0;
  int64_t refs = 0;
  double last_use = 0;
};

struct Replica {
  std::deque<int64_t> waiting;
  std::vector<int64_t> running;  // in admission order
  int64_t free_blocks = 0;
  bool busy = false;
  int64_t outstanding = 0;
  int role = 0;                              // 0 serves whole requests, 1 prefills only, 2 decodes only
  std::deque<int64_t> incoming;              // decode pool: requests whose KV has arrived
  double egress_free = 0, ingress_free = 0;  // KV transfers queue on each replica's links
  double swap_used = 0;                      // bytes of swapped-out KV in host memory, per GPU
  double pending_copy_s = 0;                 // swap copies the next iteration waits for
  std::map<int64_t, CachedPrefix> prefixes;  // by prefix group
  int64_t idle_blocks = 0;                   // held by cached prefixes no request references
  int64_t promised = 0;                      // least-kv: the waiting arrivals' prompt blocks (Req::promised)
  int64_t available() const { return free_blocks + idle_blocks; }
  // The front waiting request leaves the queue: admitted (or swapped in).
  int64_t take_waiting(std::vector<Req>& reqs) {
    const int64_t id = waiting.front();
    waiting.pop_front();
    promised -= reqs[static_cast<size_t>(id)].promised;
    reqs[static_cast<size_t>(id)].promised = 0;
    return id;
  }
};

struct Work {
  int64_t req;
  int64_t tokens;  // prefill chunk size, or 1 for a decode
  bool decode;
};

class Engine {
 public:
  Engine(const Scenario& s, IterationCost& cost, IterationCost* draft, int64_t blocks_per_replica, Topology& topo,
         const NetworkProfile& network);
  ServingResult run(const std::vector<Arrival>& arrivals);
  double mean_in_system() const { return mean_in_system_; }
  double kv_transfer_seconds() const { return transfer_s_; }
  double kv_transfer_bytes() const { return transfer_bytes_; }
  void log_iterations() { log_ = true; }
  void show_progress(Progress* p) { progress_ = p; }
  // Variability: replica i's GPU work takes slowdown[i] times as long (its slowest GPU
  // sets the pace of its tensor- and pipeline-parallel collectives).
  void set_replica_slowdown(std::vector<double> slowdown) { slow_ = std::move(slowdown); }

 private:
  void log_iteration(int rep, const std::vector<Work>& w, double start, double end);
  void kick(int rep, std::vector<std::vector<Work>>& inflight, double now);

  // Disaggregation: a prefilled request's KV goes from every GPU of the prefill replica
  // to its counterpart on the decode replica, over whatever the topology routes it
  // through (NVLink inside a node, else PCIe, NICs and the fabric). On the flow network
  // the shards are flows sharing links max-min with every other transfer in flight; on
  // the analytic one a transfer takes its uncontended time and transfers queue
  // first-come on each replica's egress and ingress.
  void start_transfer(int from, Req& x, int64_t id, double now);
  int route(int64_t idx, int64_t first, int64_t last);
  bool grow(Replica& r, Req& x, int64_t tokens);  // blocks for kv + tokens
  void release(Replica& r, Req& x);
  // Frees the least recently used prefix no request references.
  void evict(Replica& r);
  // Prefix caching, on admission of a request with nothing cached: when its prefix's
  // blocks are on this replica it references them and prefills only the rest (at least
  // its last prompt token, whose logits it needs). Only whole blocks are shared.
  // Returns what the lookup found (-1: no lookup, else the tokens reused), which counts
  // only once the request is admitted (count_prefix): a request left waiting looks again.
  int64_t attach_prefix(Replica& r, Req& x);
  // Undoes attach_prefix when the request could not be admitted after all.
  void detach_prefix(Replica& r, Req& x);
  // Counts an admitted request's lookup and what it reused.
  void count_prefix(int64_t looked);
  // A request that computed its prefix itself hands those blocks to the replica's cache.
  void register_prefix(Replica& r, Req& x);

  // Recompute preemption: the youngest running request gives its blocks back and
  // returns to the head of the queue; its generated tokens are prefilled again.
  // With `preemption: swap` the KV goes to host memory over PCIe instead (while the
  // replica's swap space lasts) and comes back when the request is readmitted; the copies
  // stall the iteration that makes them, as vLLM's cache operations do.
  void preempt_last(Replica& r);
  double kv_bytes(const Req& x) const;                 // one GPU's shard (the fullest stage's)
  double kv_bytes(const Req& x, int64_t stage) const;  // a GPU of `stage`

  // Picks the next iteration's work and returns its duration.
  double schedule(int rep, std::vector<Work>& w);
  double schedule_work(int rep, std::vector<Work>& w);
  double cost_of(const std::vector<Work>& w, int rep);

  // Applies an iteration's work at time `now`; returns the requests that finished.
  int64_t finish_iteration(int rep, const std::vector<Work>& w, double now);

  const Scenario& s_;
  const InferenceConfig& c_;
  IterationCost& cost_;
  IterationCost* draft_;  // speculative decoding's draft model, or none
  int64_t blocks_;
  int64_t step_ = 1;  // tokens a decode step verifies: 1, or lookahead + 1
  Rng accept_;
  std::vector<Req> reqs_;
  std::vector<Replica> reps_;
  int64_t peak_used_ = 0;
  double mean_in_system_ = 0;
  ServingResult result_;
  bool log_ = false;
  int64_t front_ = 0;  // replicas [0, front_) take arrivals; the rest are the decode pool
  std::priority_queue<std::tuple<double, uint64_t, int, int64_t>,
                      std::vector<std::tuple<double, uint64_t, int, int64_t>>, std::greater<>>
      q_;
  uint64_t seq_ = 0;
  double transfer_s_ = 0, transfer_bytes_ = 0;
  double now_ = 0;
  Progress* progress_ = nullptr;
  std::vector<double> slow_;
  std::unique_ptr<FlowNetwork> flow_;
  std::unique_ptr<AnalyticNetwork> analytic_;
  double p2p_latency_ = 0;
  std::unordered_map<uint64_t, int64_t> flow_requests_;  // flow-network id -> request
  std::unordered_map<int64_t, double> transfer_start_;   // request -> when its KV left
};

}  // namespace clustersim::serve
