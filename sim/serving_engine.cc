#include "sim/serving_engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "cost_models/protocol.h"
#include "scenarios/error.h"

namespace clustersim::serve {
namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

Engine::Engine(const Scenario& s, IterationCost& cost, IterationCost* draft, int64_t blocks_per_replica, Topology& topo,
               const NetworkProfile& network)
    : s_(s),
      c_(s.serving),
      cost_(cost),
      draft_(draft),
      blocks_(blocks_per_replica),
      accept_(s.serving.arrival_seed ^ 0xACCE97ull) {
  if (draft_) step_ = 1 + c_.lookahead;
  if (c_.prefill_replicas + c_.decode_replicas > 0) {
    if (s.network_model == "flow")
      flow_ = std::make_unique<FlowNetwork>(topo, network);
    else
      analytic_ = std::make_unique<AnalyticNetwork>(topo, network);
    p2p_latency_ = network.base(LatencyFamily::Ring, Protocol::Simple);
  }
}

ServingResult Engine::run(const std::vector<Arrival>& arrivals) {
  reqs_.resize(arrivals.size());
  for (size_t i = 0; i < arrivals.size(); ++i) {
    reqs_[i].arrival = arrivals[i].t;
    reqs_[i].prompt = arrivals[i].prompt;
    reqs_[i].output = arrivals[i].output;
    reqs_[i].target = arrivals[i].prompt;
    reqs_[i].group = c_.prefix_caching && c_.prefix_tokens >= c_.kv_block_tokens ? arrivals[i].group : -1;
    const int64_t need = ceil_div(arrivals[i].prompt + arrivals[i].output, c_.kv_block_tokens);
    if (need > blocks_)
      throw InputError(s_.mark("inference"), "request " + std::to_string(i) + " needs " + std::to_string(need) +
                                                 " KV blocks but a replica holds " + std::to_string(blocks_) +
                                                 ", expected shorter requests or more GPU memory per replica");
    // TensorRT-LLM without context chunking schedules a context whole within max_num_tokens
    // (microBatchScheduler: a context that does not fit the tokens left stops the batch), so
    // one longer than the budget could never run.
    if (c_.scheduler == "trtllm" && !c_.chunked_context && arrivals[i].prompt > c_.max_batch_tokens)
      throw InputError(s_.mark("inference.max_batch_tokens"),
                       "request " + std::to_string(i) + "'s prompt of " + std::to_string(arrivals[i].prompt) +
                           " tokens is longer than max_num_tokens (" + std::to_string(c_.max_batch_tokens) +
                           "), which TensorRT-LLM without context chunking cannot schedule, expected "
                           "inference.chunked_context: true or max_batch_tokens of at least the longest prompt");
  }
  const int64_t pools = c_.prefill_replicas + c_.decode_replicas;
  // Pipeline parallelism: each replica runs pp virtual engines (pp batches in flight,
  // one per stage), each with its own scheduler and 1/pp of the KV blocks, as vLLM does.
  const int64_t pp = s_.parallel.pp;
  reps_.assign(static_cast<size_t>((pools > 0 ? pools : c_.replicas) * pp), Replica{});
  for (size_t i = 0; i < reps_.size(); ++i) {
    reps_[i].free_blocks = blocks_;
    if (pools > 0) reps_[i].role = static_cast<int64_t>(i) < c_.prefill_replicas * pp ? 1 : 2;
  }
  front_ = pools > 0 ? c_.prefill_replicas * pp : static_cast<int64_t>(reps_.size());
  // Events: (time, seq, kind, index); kind 0 = arrival of request index, 1 = replica
  // index done, 2 = request index's KV has reached its decode replica.
  auto& q = q_;
  uint64_t& seq = seq_;
  size_t next_arrival = 0;
  // A request reaches the engine request_overhead after the client sent it. Closed
  // loop: `concurrency` clients each send their next request when their last one ends.
  const bool closed = c_.arrival_process == "closed" && c_.trace.empty();
  auto push_arrival = [&] {
    if (next_arrival < reqs_.size()) {
      if (closed) reqs_[next_arrival].arrival = now_;
      q.emplace(reqs_[next_arrival].arrival + c_.request_overhead_s, seq++, 0, static_cast<int64_t>(next_arrival));
      ++next_arrival;
    }
  };
  now_ = 0;
  for (int64_t k = 0; k < (closed ? c_.concurrency : 1); ++k) push_arrival();
  std::vector<std::vector<Work>> inflight(reps_.size());
  double now = 0, last_t = 0, in_system_area = 0;
  int64_t in_system = 0;
  int64_t finished = 0;
  uint64_t steps = 0;
  // The replicas an instant's events touched, in order: each starts its next iteration once
  // every event of that instant is in, so requests arriving together are scheduled together.
  std::vector<int> touched;
  auto touch = [&](int rep) {
    if (std::find(touched.begin(), touched.end(), rep) == touched.end()) touched.push_back(rep);
  };
  while (!q.empty() || (flow_ && !flow_->idle()) || !touched.empty()) {
    const double next_event =
        std::min(q.empty() ? std::numeric_limits<double>::infinity() : std::get<0>(q.top()),
                 flow_ && !flow_->idle() ? flow_->next_time().seconds() : std::numeric_limits<double>::infinity());
    if (!touched.empty() && next_event > now) {
      for (int rep : touched) kick(rep, inflight, now);
      touched.clear();
      continue;
    }
    if ((++steps & 0x3FFF) == 0 && progress_) progress_->update(finished, static_cast<int64_t>(reqs_.size()));
    // KV transfers on the flow network finish when the network says; they come first
    // on a tie, like every event scheduled earlier.
    if (flow_ && !flow_->idle() && (q.empty() || flow_->next_time().seconds() <= std::get<0>(q.top()))) {
      const SimTime ft = flow_->next_time();
      std::vector<uint64_t> finished;
      flow_->advance(ft, finished);
      for (uint64_t id : finished) {
        auto it = flow_requests_.find(id);
        q.emplace(ft.seconds(), seq++, 2, it->second);
        flow_requests_.erase(it);
      }
      continue;
    }
    auto [t, sq, kind, idx] = q.top();
    q.pop();
    (void)sq;
    in_system_area += static_cast<double>(in_system) * (t - last_t);
    last_t = now = now_ = t;
    int rep = 0;
    if (kind == 0) {
      ++in_system;
      in_system_area += c_.request_overhead_s;  // its time in the front end, before the engine saw it
      rep = route(idx, 0, front_);
      reqs_[static_cast<size_t>(idx)].replica = rep;
      reps_[static_cast<size_t>(rep)].waiting.push_back(idx);
      // Its replica schedules once the instant's events are in: until then least-kv counts
      // its prompt's blocks as taken there, or every request of the instant would go to
      // the one replica with the most free blocks.
      if (c_.router == "least-kv") {
        Req& x = reqs_[static_cast<size_t>(idx)];
        x.promised = ceil_div(x.prompt, c_.kv_block_tokens);
        reps_[static_cast<size_t>(rep)].promised += x.promised;
      }
      ++reps_[static_cast<size_t>(rep)].outstanding;
      if (!closed) push_arrival();
    } else if (kind == 1) {
      rep = static_cast<int>(idx);
      const int64_t done = finish_iteration(rep, inflight[static_cast<size_t>(rep)], now);
      in_system -= done;
      finished += done;
      if (closed)
        for (int64_t k = 0; k < done; ++k) push_arrival();
      reps_[static_cast<size_t>(rep)].busy = false;
    } else {
      // KV arrived: the prefill replica frees its copy (and may admit more), the
      // decode replica may admit the request.
      Req& x = reqs_[static_cast<size_t>(idx)];
      auto started = transfer_start_.find(idx);
      transfer_s_ += now - started->second;
      transfer_start_.erase(started);
      Replica& from = reps_[static_cast<size_t>(x.prefill_replica)];
      release(from, x);
      reps_[static_cast<size_t>(x.replica)].incoming.push_back(idx);
      touch(x.prefill_replica);
      rep = x.replica;
    }
    touch(rep);
  }
  for (size_t i = 0; i < reqs_.size(); ++i)
    if (reqs_[i].finish < 0)
      throw std::logic_error("serving engine stalled: request " + std::to_string(i) + " never finished");
  result_.makespan_s = now;
  result_.memo_hits = cost_.hits();
  result_.memo_misses = cost_.misses();
  result_.kv_blocks_per_replica = blocks_;
  result_.kv_peak_utilization = static_cast<double>(peak_used_) / static_cast<double>(blocks_);
  mean_in_system_ = now > 0 ? in_system_area / now : 0;
  for (const Req& x : reqs_)
    result_.requests.push_back({x.arrival, x.first, x.finish, x.prompt, x.output,
                                static_cast<int>(x.replica / s_.parallel.pp), x.preemptions});
  return std::move(result_);
}

void Engine::log_iteration(int rep, const std::vector<Work>& w, double start, double end) {
  IterationRow row;
  row.replica = rep;  // the virtual engine (replica · pp + its index) under pipeline parallelism
  row.start_s = start;
  row.end_s = end;
  row.requests = static_cast<int64_t>(w.size());
  for (const Work& x : w) (x.decode ? row.decode_tokens : row.prefill_tokens) += x.tokens;
  row.kv_blocks = blocks_;
  row.kv_blocks_used = blocks_ - reps_[static_cast<size_t>(rep)].available();
  result_.iteration_log.push_back(row);
}

void Engine::kick(int rep, std::vector<std::vector<Work>>& inflight, double now) {
  Replica& r = reps_[static_cast<size_t>(rep)];
  if (r.busy) return;
  std::vector<Work>& w = inflight[static_cast<size_t>(rep)];
  const double dt = schedule(rep, w);
  if (w.empty()) return;
  r.busy = true;
  ++result_.iterations;
  if (log_) log_iteration(rep, w, now, now + dt);
  q_.emplace(now + dt, seq_++, 1, rep);
}

void Engine::start_transfer(int from, Req& x, int64_t id, double now) {
  const int to = route(id, front_, static_cast<int64_t>(reps_.size()));
  x.prefill_replica = from;
  x.replica = to;
  ++reps_[static_cast<size_t>(to)].outstanding;
  // Virtual engines (pp > 1) share their replica's GPUs: stage s's GPUs hold the KV of
  // its layers and send it to stage s's GPUs of the decode replica.
  const int64_t tp = s_.parallel.tp, pp = s_.parallel.pp, n = tp * pp;
  const int64_t src = from / pp, dst = to / pp;
  Expansion e;
  e.base_latency = p2p_latency_;
  CollectiveStep step;
  std::vector<int32_t> gpus;
  for (int64_t i = 0; i < n; ++i) {
    gpus.push_back(static_cast<int32_t>(src * n + i));
    const double shard = kv_bytes(x, i / tp);
    step.transfers.push_back(Transfer{static_cast<int32_t>(i), static_cast<int32_t>(n + i), shard, 0});
    transfer_bytes_ += shard;
  }
  for (int64_t i = 0; i < n; ++i) gpus.push_back(static_cast<int32_t>(dst * n + i));
  e.steps.push_back(std::move(step));
  transfer_start_[id] = now;
  if (flow_) {
    flow_requests_.emplace(flow_->start(std::move(e), std::move(gpus), SimTime::from_seconds(now)), id);
    return;
  }
  const double seconds = analytic_->run(e, gpus).seconds;
  Replica& a = reps_[static_cast<size_t>(src * pp)];  // the physical replicas' links
  Replica& b = reps_[static_cast<size_t>(dst * pp)];
  const double start = std::max({now, a.egress_free, b.ingress_free});
  a.egress_free = b.ingress_free = start + seconds;
  q_.emplace(start + seconds, seq_++, 2, id);
}

int Engine::route(int64_t idx, int64_t first, int64_t last) {
  const size_t n = static_cast<size_t>(last - first);
  if (c_.router == "round-robin") return static_cast<int>(first + static_cast<int64_t>(static_cast<size_t>(idx) % n));
  size_t best = static_cast<size_t>(first);
  for (size_t i = best + 1; i < static_cast<size_t>(last); ++i) {
    if (c_.router == "least-outstanding"
            ? reps_[i].outstanding < reps_[best].outstanding
            : reps_[i].available() - reps_[i].promised > reps_[best].available() - reps_[best].promised)
      best = i;
  }
  return static_cast<int>(best);
}

bool Engine::grow(Replica& r, Req& x, int64_t tokens) {
  const int64_t need = ceil_div(x.kv + tokens, c_.kv_block_tokens) - x.blocks - x.shared_blocks;
  if (need <= 0) return true;
  if (need > r.available()) return false;
  while (need > r.free_blocks) evict(r);
  r.free_blocks -= need;
  x.blocks += need;
  peak_used_ = std::max(peak_used_, blocks_ - r.available());
  return true;
}

void Engine::release(Replica& r, Req& x) {
  r.free_blocks += x.blocks;
  x.blocks = 0;
  if (x.shared_blocks > 0) {
    CachedPrefix& p = r.prefixes.at(x.group);
    if (--p.refs == 0) {
      r.idle_blocks += p.blocks;
      p.last_use = now_;
    }
    x.shared_blocks = 0;
  }
}

void Engine::evict(Replica& r) {
  auto victim = r.prefixes.end();
  for (auto it = r.prefixes.begin(); it != r.prefixes.end(); ++it)
    if (it->second.refs == 0 && (victim == r.prefixes.end() || it->second.last_use < victim->second.last_use))
      victim = it;
  r.free_blocks += victim->second.blocks;
  r.idle_blocks -= victim->second.blocks;
  r.prefixes.erase(victim);
}

int64_t Engine::attach_prefix(Replica& r, Req& x) {
  if (x.group < 0 || x.kv > 0 || x.swapped) return -1;
  auto it = r.prefixes.find(x.group);
  if (it == r.prefixes.end()) return 0;
  const int64_t use = std::min(it->second.blocks, (x.prompt - 1) / c_.kv_block_tokens);
  if (use <= 0) return 0;
  if (it->second.refs++ == 0) r.idle_blocks -= it->second.blocks;
  x.shared_blocks = use;
  x.kv = use * c_.kv_block_tokens;
  return x.kv;
}

void Engine::count_prefix(int64_t looked) {
  if (looked < 0) return;
  ++result_.prefix_lookups;
  if (looked == 0) return;
  ++result_.prefix_hits;
  result_.prefix_tokens_reused += looked;
}

void Engine::detach_prefix(Replica& r, Req& x) {
  if (x.shared_blocks == 0) return;
  release(r, x);
  x.kv = 0;
}

void Engine::register_prefix(Replica& r, Req& x) {
  if (x.group < 0 || x.shared_blocks > 0 || r.prefixes.count(x.group)) return;
  const int64_t blocks =
      std::min({c_.prefix_tokens / c_.kv_block_tokens, (x.prompt - 1) / c_.kv_block_tokens, x.blocks});
  if (blocks <= 0) return;
  r.prefixes[x.group] = CachedPrefix{blocks, 1, now_};
  x.blocks -= blocks;
  x.shared_blocks = blocks;
}

void Engine::preempt_last(Replica& r) {
  const int64_t id = r.running.back();
  Req& x = reqs_[static_cast<size_t>(id)];
  release(r, x);
  const double bytes = kv_bytes(x);
  if (c_.preemption == "swap" && r.swap_used + bytes <= static_cast<double>(c_.swap_space_bytes)) {
    x.swapped = true;
    r.swap_used += bytes;
    r.pending_copy_s += bytes / s_.cluster.node.pcie_bandwidth;
    ++result_.swaps;
  } else {
    x.kv = 0;
    x.target = x.prompt + x.generated;
  }
  ++x.preemptions;
  ++result_.preemptions;
  r.running.pop_back();
  r.waiting.push_front(id);
}

double Engine::kv_bytes(const Req& x) const {
  return static_cast<double>(x.kv) * (cost_.kv_bytes_per_token() + (draft_ ? draft_->kv_bytes_per_token() : 0));
}

double Engine::kv_bytes(const Req& x, int64_t stage) const {
  double per_token = cost_.kv_bytes_per_token(stage);
  if (draft_) per_token += draft_->kv_bytes_per_token(stage);
  return static_cast<double>(x.kv) * per_token;
}

double Engine::schedule(int rep, std::vector<Work>& w) {
  const double t = schedule_work(rep, w);
  Replica& r = reps_[static_cast<size_t>(rep)];
  if (w.empty()) return 0;  // copies wait for the next iteration
  const double copies = r.pending_copy_s;
  r.pending_copy_s = 0;
  return t + copies;
}

double Engine::schedule_work(int rep, std::vector<Work>& w) {
  Replica& r = reps_[static_cast<size_t>(rep)];
  w.clear();
  const std::string& sch = c_.scheduler;
  const int64_t budget = c_.max_batch_tokens;
  int64_t tokens = 0;
  // Decode pool: requests whose KV arrived join first, their blocks taken now.
  while (r.role == 2 && !r.incoming.empty() && static_cast<int64_t>(r.running.size()) < c_.max_batch_size) {
    Req& x = reqs_[static_cast<size_t>(r.incoming.front())];
    if (!grow(r, x, 0)) break;
    r.running.push_back(r.incoming.front());
    r.incoming.pop_front();
  }
  if (sch == "static") {
    // Request-level batching: a batch forms only when the last one has finished, its
    // whole KV (prompt + output) reserved up front; it runs until all its requests end.
    if (r.running.empty()) {
      while (!r.waiting.empty() && static_cast<int64_t>(r.running.size()) < c_.max_batch_size) {
        Req& x = reqs_[static_cast<size_t>(r.waiting.front())];
        const int64_t looked = attach_prefix(r, x);
        if (!grow(r, x, x.prompt + x.output - x.kv)) {
          detach_prefix(r, x);
          break;
        }
        count_prefix(looked);
        r.running.push_back(r.take_waiting(reqs_));
      }
      for (int64_t id : r.running) {
        const Req& x = reqs_[static_cast<size_t>(id)];
        w.push_back({id, x.target - x.kv, false});
      }
    } else {
      for (int64_t id : r.running)
        if (reqs_[static_cast<size_t>(id)].finish < 0) w.push_back({id, step_, true});
    }
    return cost_of(w, rep);
  }
  // vLLM v1 schedules as Sarathi does (chunked prefill in a token budget, decodes
  // first); TensorRT-LLM's in-flight batching adds whole prompts after the decodes
  // while they fit max_num_tokens.
  const bool chunked = sch == "sarathi" || sch == "vllm-v1";
  const bool prefill_first = sch == "vllm";
  // A running request's tokens this iteration: its next decode step, or what is left of its
  // prompt (a chunk of it in what is left of the budget, where the scheduler chunks).
  auto next_tokens = [&](const Req& x) {
    const bool prefilling = x.kv < x.target;
    int64_t n = prefilling ? x.target - x.kv : step_;
    if (prefilling && (chunked || (sch == "trtllm" && c_.chunked_context))) n = std::min(n, budget - tokens);
    return n;
  };
  // Admission of waiting requests (and, for sarathi, chunks of partly prefilled ones).
  auto admit = [&](int64_t room) {
    while (!r.waiting.empty() && static_cast<int64_t>(r.running.size()) < c_.max_batch_size) {
      Req& x = reqs_[static_cast<size_t>(r.waiting.front())];
      if (x.swapped) {
        // Swap in: blocks for its KV, then it runs with the others. After the running
        // requests' turn it also takes its step in this iteration (vLLM's swapped queue
        // follows the running one), which may be the iteration's only work.
        const int64_t n = prefill_first ? 0 : next_tokens(x);
        if (n < 0 || (n == 0 && !prefill_first) || !grow(r, x, n)) break;
        x.swapped = false;
        r.swap_used -= kv_bytes(x);
        r.pending_copy_s += kv_bytes(x) / s_.cluster.node.pcie_bandwidth;
        r.running.push_back(r.take_waiting(reqs_));
        if (n > 0) {
          w.push_back({r.running.back(), n, x.kv >= x.target});
          tokens += n;
        }
        continue;
      }
      const int64_t looked = attach_prefix(r, x);
      int64_t chunk = x.target - x.kv;
      // TensorRT-LLM's contexts join whole while they fit what the decodes leave of
      // max_num_tokens (one longer than it is refused in run()), unless context chunking is
      // on (inference.chunked_context: the first-come-first-served policy fills the budget
      // left after the decodes with chunks).
      const bool split = chunked || (sch == "trtllm" && c_.chunked_context);
      if (split) chunk = std::min(chunk, room - tokens);
      const bool over = !split && tokens > 0 && tokens + chunk > room;  // a prompt over the budget runs alone
      // TensorRT-LLM's default capacity policy (GUARANTEED_NO_EVICT) admits a request
      // only with the KV blocks of its whole output reserved: nothing is ever preempted.
      const int64_t reserve = sch == "trtllm" ? x.prompt + x.output - x.kv : chunk;
      if (chunk <= 0 || over || !grow(r, x, reserve)) {
        detach_prefix(r, x);
        break;
      }
      count_prefix(looked);
      r.running.push_back(r.take_waiting(reqs_));
      w.push_back({r.running.back(), chunk, false});
      tokens += chunk;
    }
  };
  if (prefill_first) {
    admit(budget);
    if (!w.empty()) return cost_of(w, rep);  // a prefill-only iteration
  }
  // Decodes (and, for sarathi, in-progress prefill chunks) of the running requests, in
  // admission order; when blocks run out the youngest is preempted, itself included.
  for (size_t i = 0; i < r.running.size(); ++i) {
    const int64_t id = r.running[i];
    Req& x = reqs_[static_cast<size_t>(id)];
    const bool prefilling = x.kv < x.target;
    const int64_t n = next_tokens(x);
    if (n <= 0) continue;
    bool kept = true;
    while (!grow(r, x, n)) {
      kept = r.running.back() != id;
      preempt_last(r);
      if (!kept) break;
    }
    if (!kept) break;
    w.push_back({id, n, !prefilling});
    tokens += n;
  }
  // Orca batches by request count alone (whole prompts join at any iteration); Sarathi
  // fills what is left of the token budget with prefill chunks.
  if (!prefill_first) admit(chunked || sch == "trtllm" ? budget : std::numeric_limits<int64_t>::max() / 2);
  return cost_of(w, rep);
}

double Engine::cost_of(const std::vector<Work>& w, int rep) {
  if (w.empty()) return 0;
  int64_t tokens = 0, emitting = 0, context = 0, decodes = 0, prefill_tokens = 0, longest = 0;
  IterCost attn, draft_attn;
  for (const Work& x : w) {
    const Req& rq = reqs_[static_cast<size_t>(x.req)];
    tokens += x.tokens;
    if (x.decode) {
      context += rq.kv + x.tokens;
      longest = std::max(longest, rq.kv + x.tokens);
      emitting += x.tokens;  // logits for every verified position
      ++decodes;
    } else {
      attn += cost_.prefill_attention(x.tokens, rq.kv);
      if (draft_) draft_attn += draft_->prefill_attention(x.tokens, rq.kv);
      prefill_tokens += x.tokens;
      if (rq.kv + x.tokens >= rq.target) ++emitting;
    }
  }
  IterCost it = cost_.dense(tokens, emitting);
  it += attn;
  it += cost_.decode_attention(context, decodes, longest);
  if (draft_) {
    // The draft model prefills what the target prefills, then proposes `lookahead`
    // tokens one decode step at a time for every decoding request, on the same GPUs:
    // one window for the power cap.
    if (prefill_tokens > 0) {
      it += draft_->dense(prefill_tokens, 0);
      it += draft_attn;
    }
    if (decodes > 0) {
      IterCost step = draft_->dense(decodes, decodes);
      step += draft_->decode_attention(context, decodes, longest);
      it += step.scaled(static_cast<double>(c_.lookahead));
    }
  }
  double t = cost_.seconds(it);
  if (!slow_.empty()) t *= slow_[static_cast<size_t>(rep / s_.parallel.pp)];
  // The engine's host work per step (scheduling, sampling, detokenization, launch):
  // the GPUs wait for it between iterations.
  return t + c_.iteration_overhead_s;
}

int64_t Engine::finish_iteration(int rep, const std::vector<Work>& w, double now) {
  Replica& r = reps_[static_cast<size_t>(rep)];
  int64_t done = 0;
  for (const Work& x : w) {
    Req& rq = reqs_[static_cast<size_t>(x.req)];
    int64_t emitted = 1;
    if (x.decode && draft_) {
      // Each draft token is accepted with probability acceptance_rate until the first
      // rejection; the target adds one token of its own (a correction or a bonus).
      int64_t j = 0;
      while (j < c_.lookahead && accept_.uniform() < c_.acceptance_rate) ++j;
      emitted = std::min(j + 1, rq.output - rq.generated);
      rq.kv += emitted;  // the rejected positions' KV is dropped
      ++result_.verify_steps;
      result_.speculated_tokens += emitted;
    } else {
      rq.kv += x.tokens;
    }
    if (x.decode || rq.kv >= rq.target) {
      if (!x.decode) {
        rq.target = 0;  // prefill complete; decodes follow
        register_prefix(r, rq);
      }
      rq.generated += emitted;
      if (rq.first < 0) rq.first = now;
      if (r.role == 1 && rq.generated < rq.output) {
        // Prefill pool: hand the request to the decode pool; its blocks stay held
        // until the KV has been sent.
        r.running.erase(std::find(r.running.begin(), r.running.end(), x.req));
        --r.outstanding;
        start_transfer(rep, rq, x.req, now);
        continue;
      }
      if (rq.generated >= rq.output) {
        rq.finish = now;
        ++done;
        --r.outstanding;
        if (c_.scheduler != "static") {
          release(r, rq);
          r.running.erase(std::find(r.running.begin(), r.running.end(), x.req));
        }
      }
    }
  }
  if (c_.scheduler == "static") {
    bool all = true;
    for (int64_t id : r.running) all = all && reqs_[static_cast<size_t>(id)].finish >= 0;
    if (all) {
      for (int64_t id : r.running) release(r, reqs_[static_cast<size_t>(id)]);
      r.running.clear();
    }
  }
  return done;
}

}  // namespace clustersim::serve
