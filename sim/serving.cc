#include "sim/serving.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "cost_models/compute.h"
#include "cost_models/flow_network.h"
#include "cost_models/network.h"
#include "cost_models/protocol.h"
#include "plan/memory.h"
#include "plan/plan.h"
#include "plan/rng.h"
#include "plan/serving_plan.h"
#include "reports/progress.h"
#include "reports/summary.h"
#include "reports/trace_writer.h"
#include "scenarios/error.h"
#include "sim/arrivals.h"
#include "sim/parallel.h"
#include "sim/run.h"
#include "sim/variability.h"

namespace clustersim {
namespace {

// TensorRT-LLM's buffers for each sequence slot the engine was built for (max_batch_size),
// beside the engine's activations: the runtime's (the engine's logits and the step's I/O) and
// the decoder's (sampling and penalty workspaces, the logits it sorts), most of them a row of
// the whole vocabulary on every rank. Its executor logs both when it starts ("[MemUsageChange]
// Allocated 1.14 GB GPU memory for runtime buffers", "... 4.35 GB GPU memory for decoder"):
// 5.49 GiB for 4,096 slots of Llama 2's 32,000 tokens in the trtllm-bench guide's log
// (TensorRT-LLM v0.12, docs/source/performance/perf-benchmarking.md), 44.97 bytes a slot and
// vocabulary entry.
constexpr double kTrtllmSlotBytes = 5.49 * 1024.0 * 1024.0 * 1024.0 / (4096.0 * 32000.0);

// ---- iteration cost --------------------------------------------------------------------
// A part of an iteration at burst rates, and its kernels as the power controller sees
// them: an iteration is one window, so its clock comes from all its parts together.
struct IterCost {
  double burst = 0;
  PowerMix mix;
  IterCost& operator+=(const IterCost& o) {
    burst += o.burst;
    mix += o.mix;
    return *this;
  }
  IterCost scaled(double k) const { return IterCost{burst * k, mix.scaled(k)}; }
};

// Whether a prefill's context attention runs in FP8 (inference.fp8_context_fmha). TensorRT-LLM
// runs it so for the engines trtllm-bench builds with FP8 quantization (bench/build/build.py:
// use_fp8_context_fmha when the quantization is FP8, which also sets an FP8 KV cache), and its
// builder turns it on for any paged context FMHA over an FP8 cache; it needs FP8 tensor cores.
bool fp8_context_attention(const Scenario& s, DType weights, DType kv) {
  const std::string& v = s.serving.fp8_context_fmha;
  if (v == "off") return false;
  const bool tensor_cores = s.cluster.node.gpu.peak_fp8 > 0;
  if (v == "on") return true;  // validated: an FP8 cache on FP8 tensor cores
  return s.serving.scheduler == "trtllm" && weights == DType::FP8 && kv == DType::FP8 && tensor_cores;
}

// An iteration's time is its Plan's (plan/serving_plan.h): the attention-free part runs
// on the executor over the replica's GPUs, once per distinct (tokens, emitting rows);
// the attention kernels, which depend on each request's context, are costed per batch
// by the same compute model and added (every kernel of an iteration runs on one
// stream, so the sum is the plan's time — a test checks it against the whole plan).
class IterationCost {
 public:
  IterationCost(const Scenario& s, const ModelConfig& model, Topology& topo, ExecOptions opt)
      : gpu_(s.cluster.node.gpu), topo_(topo), opt_(std::move(opt)) {
    shape_.model = model;
    shape_.tp = s.parallel.tp;
    shape_.pp = s.parallel.pp;
    shape_.weight_dtype = s.serving.weight_dtype_for(model.dtype);
    shape_.kv_dtype = s.serving.kv_dtype_for(model.dtype);
    shape_.turbomind_decode = s.serving.decode_attention == "turbomind-v0.1";
    shape_.fp8_context_attention = fp8_context_attention(s, shape_.weight_dtype, shape_.kv_dtype);
    const std::string sampler = s.serving.sampler_for_engine();
    shape_.sampler = sampler == "trtllm"    ? ServingShape::Sampler::Trtllm
                     : sampler == "vllm-v0" ? ServingShape::Sampler::VllmV0
                     : sampler == "vllm-v1" ? ServingShape::Sampler::VllmV1
                                            : ServingShape::Sampler::None;
    // Within one iteration a replica's collectives run one at a time on its own links:
    // the analytic network is exact there.
    opt_.flow = false;
    opt_.record_link_usage = false;
    gap_ = opt_.compute.launch_overhead_s;
    // The executor runs the dense part at burst rates; the iteration's clock is applied
    // to the whole iteration (seconds()), attention included.
    capped_ = opt_.compute;
    opt_.compute.power_cap = false;
    tp_symmetric_ = s.cluster.node.gpus % shape_.tp == 0;
  }

  const ServingShape& shape() const { return shape_; }
  double kv_bytes_per_token(int64_t stage = 0) const {  // one GPU: its stage's layers (stage 0 is the fullest), K and V
    return static_cast<double>(shape_.stage_layers(stage)) * shape_.kv_layer_bytes();
  }
  // One GPU's weights: the fullest stage's layers over tp, and the embedding (first
  // stage; the untied output layer sits on the last). Weight quantization (FP8, INT8, INT4)
  // covers the layers' linears only: the embedding table is a lookup and the output layer
  // is left out by the quantizers' defaults, so both keep the model's dtype.
  double weight_bytes_per_gpu() const {
    const ModelConfig& m = shape_.model;
    const double w = dtype_bits(shape_.weight_dtype) / 8.0;
    const double e = dtype_bits(m.dtype) / 8.0;
    const double tp = static_cast<double>(shape_.tp);
    const double table = static_cast<double>(m.vocab * m.hidden);
    if (shape_.pp == 1) {
      const double tables = std::min(table * (m.tied_embeddings ? 1 : 2), static_cast<double>(m.total_params()));
      return ((static_cast<double>(m.total_params()) - tables) * w + tables * e) / tp;
    }
    const double layers = static_cast<double>(shape_.stage_layers(0)) * static_cast<double>(m.layer_params());
    return (layers * w + table * e) / tp;
  }

  // Everything but attention, for `tokens` rows of which `emitting` reach the logits.
  IterCost dense(int64_t tokens, int64_t emitting) {
    const uint64_t key = static_cast<uint64_t>(tokens) << 20 | static_cast<uint64_t>(emitting);
    auto it = memo_.find(key);
    if (it != memo_.end()) {
      ++hits_;
      return it->second;
    }
    ++misses_;
    IterationBatch b;
    b.tokens = tokens;
    b.emitting = emitting;
    const Plan plan = build_iteration_plan(shape_, b, false, 0, tp_symmetric_);
    IterCost c;
    c.burst = execute_plan(plan, topo_, opt_).makespan.seconds();
    // One program per pipeline stage, run one after another within the iteration: their
    // kernels together are the window (stages alike in their mix settle at one clock, and
    // each stretches its own clock-bound time), as the attention kernels of all layers are.
    for (const Program& prog : plan.programs)
      for (const Op& op : prog.ops)
        c.mix.add(op, SimTime::from_seconds(compute_seconds(op, gpu_, opt_.compute)).seconds(), gap_, gpu_, capped_);
    memo_.emplace(key, c);
    return c;
  }

  // A prefill chunk of `q` tokens appended to a context of `past` tokens, all layers.
  IterCost prefill_attention(int64_t q, int64_t past) {
    IterationBatch b;
    b.prefill.push_back({q, past});
    return attention(b);
  }
  // One paged decode-attention kernel per layer reading `context_tokens` tokens of KV for
  // `seqs` requests, the longest `longest` tokens.
  IterCost decode_attention(int64_t context_tokens, int64_t seqs, int64_t longest) {
    IterationBatch b;
    b.decode_context = context_tokens;
    b.decode_seqs = seqs;
    b.decode_max_context = longest;
    return attention(b);
  }
  // An iteration's seconds: its parts' burst time, with the clock-bound kernels at the
  // clock the power cap leaves their mix (cost_models/compute.h, power_capped_seconds).
  double seconds(const IterCost& c) const { return power_capped_seconds(c.burst, c.mix, gpu_, capped_); }

  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  IterCost attention(const IterationBatch& b) const {
    IterCost c;
    for (const Op& op : iteration_attention_ops(shape_, b)) {
      const double k = SimTime::from_seconds(compute_seconds(op, gpu_, opt_.compute)).seconds();
      if (k > 0) c.burst += k + SimTime::from_seconds(gap_).seconds();
      c.mix.add(op, k, gap_, gpu_, capped_);
    }
    return c.scaled(static_cast<double>(shape_.model.layers));
  }

  const GpuSpec& gpu_;
  Topology& topo_;
  ExecOptions opt_;
  ComputeProfile capped_;  // the scenario's compute profile, its power cap as set
  ServingShape shape_;
  double gap_ = 0;
  bool tp_symmetric_ = false;
  std::unordered_map<uint64_t, IterCost> memo_;
  int64_t hits_ = 0, misses_ = 0;
};

// ---- the engine ------------------------------------------------------------------------
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
  int64_t available() const { return free_blocks + idle_blocks; }
};

struct Work {
  int64_t req;
  int64_t tokens;  // prefill chunk size, or 1 for a decode
  bool decode;
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

class Engine {
 public:
  Engine(const Scenario& s, IterationCost& cost, IterationCost* draft, int64_t blocks_per_replica, Topology& topo,
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

  ServingResult run(const std::vector<Arrival>& arrivals) {
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
    while (!q.empty() || (flow_ && !flow_->idle())) {
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
        kick(x.prefill_replica, inflight, now);
        rep = x.replica;
      }
      kick(rep, inflight, now);
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

  double mean_in_system() const { return mean_in_system_; }
  double kv_transfer_seconds() const { return transfer_s_; }
  double kv_transfer_bytes() const { return transfer_bytes_; }
  void log_iterations() { log_ = true; }
  void show_progress(Progress* p) { progress_ = p; }
  // Variability: replica i's GPU work takes slowdown[i] times as long (its slowest GPU
  // sets the pace of its tensor- and pipeline-parallel collectives).
  void set_replica_slowdown(std::vector<double> slowdown) { slow_ = std::move(slowdown); }

 private:
  void log_iteration(int rep, const std::vector<Work>& w, double start, double end) {
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

  void kick(int rep, std::vector<std::vector<Work>>& inflight, double now) {
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

  // Disaggregation: a prefilled request's KV goes from every GPU of the prefill replica
  // to its counterpart on the decode replica, over whatever the topology routes it
  // through (NVLink inside a node, else PCIe, NICs and the fabric). On the flow network
  // the shards are flows sharing links max-min with every other transfer in flight; on
  // the analytic one a transfer takes its uncontended time and transfers queue
  // first-come on each replica's egress and ingress.
  void start_transfer(int from, Req& x, int64_t id, double now) {
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

  int route(int64_t idx, int64_t first, int64_t last) {
    const size_t n = static_cast<size_t>(last - first);
    if (c_.router == "round-robin") return static_cast<int>(first + static_cast<int64_t>(static_cast<size_t>(idx) % n));
    size_t best = static_cast<size_t>(first);
    for (size_t i = best + 1; i < static_cast<size_t>(last); ++i) {
      if (c_.router == "least-outstanding" ? reps_[i].outstanding < reps_[best].outstanding
                                           : reps_[i].available() > reps_[best].available())
        best = i;
    }
    return static_cast<int>(best);
  }

  bool grow(Replica& r, Req& x, int64_t tokens) {  // blocks for kv + tokens
    const int64_t need = ceil_div(x.kv + tokens, c_.kv_block_tokens) - x.blocks - x.shared_blocks;
    if (need <= 0) return true;
    if (need > r.available()) return false;
    while (need > r.free_blocks) evict(r);
    r.free_blocks -= need;
    x.blocks += need;
    peak_used_ = std::max(peak_used_, blocks_ - r.available());
    return true;
  }
  void release(Replica& r, Req& x) {
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
  // Frees the least recently used prefix no request references.
  void evict(Replica& r) {
    auto victim = r.prefixes.end();
    for (auto it = r.prefixes.begin(); it != r.prefixes.end(); ++it)
      if (it->second.refs == 0 && (victim == r.prefixes.end() || it->second.last_use < victim->second.last_use))
        victim = it;
    r.free_blocks += victim->second.blocks;
    r.idle_blocks -= victim->second.blocks;
    r.prefixes.erase(victim);
  }
  // Prefix caching, on admission of a request with nothing cached: when its prefix's
  // blocks are on this replica it references them and prefills only the rest (at least
  // its last prompt token, whose logits it needs). Only whole blocks are shared.
  void attach_prefix(Replica& r, Req& x) {
    if (x.group < 0 || x.kv > 0 || x.swapped) return;
    ++result_.prefix_lookups;
    auto it = r.prefixes.find(x.group);
    if (it == r.prefixes.end()) return;
    const int64_t use = std::min(it->second.blocks, (x.prompt - 1) / c_.kv_block_tokens);
    if (use <= 0) return;
    if (it->second.refs++ == 0) r.idle_blocks -= it->second.blocks;
    x.shared_blocks = use;
    x.kv = use * c_.kv_block_tokens;
    ++result_.prefix_hits;
    result_.prefix_tokens_reused += x.kv;
  }
  // Undoes attach_prefix when the request could not be admitted after all.
  void detach_prefix(Replica& r, Req& x) {
    if (x.shared_blocks == 0) return;
    release(r, x);
    x.kv = 0;
  }
  // A request that computed its prefix itself hands those blocks to the replica's cache.
  void register_prefix(Replica& r, Req& x) {
    if (x.group < 0 || x.shared_blocks > 0 || r.prefixes.count(x.group)) return;
    const int64_t blocks =
        std::min({c_.prefix_tokens / c_.kv_block_tokens, (x.prompt - 1) / c_.kv_block_tokens, x.blocks});
    if (blocks <= 0) return;
    r.prefixes[x.group] = CachedPrefix{blocks, 1, now_};
    x.blocks -= blocks;
    x.shared_blocks = blocks;
  }

  // Recompute preemption: the youngest running request gives its blocks back and
  // returns to the head of the queue; its generated tokens are prefilled again.
  // With `preemption: swap` the KV goes to host memory over PCIe instead (while the
  // replica's swap space lasts) and comes back when the request is readmitted; the copies
  // stall the iteration that makes them, as vLLM's cache operations do.
  void preempt_last(Replica& r) {
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
  double kv_bytes(const Req& x) const {  // one GPU's shard (the fullest stage's)
    return static_cast<double>(x.kv) * (cost_.kv_bytes_per_token() + (draft_ ? draft_->kv_bytes_per_token() : 0));
  }
  double kv_bytes(const Req& x, int64_t stage) const {  // a GPU of `stage`
    double per_token = cost_.kv_bytes_per_token(stage);
    if (draft_) per_token += draft_->kv_bytes_per_token(stage);
    return static_cast<double>(x.kv) * per_token;
  }

  // Picks the next iteration's work and returns its duration.
  double schedule(int rep, std::vector<Work>& w) {
    const double t = schedule_work(rep, w);
    Replica& r = reps_[static_cast<size_t>(rep)];
    if (w.empty()) return 0;  // copies wait for the next iteration
    const double copies = r.pending_copy_s;
    r.pending_copy_s = 0;
    return t + copies;
  }

  double schedule_work(int rep, std::vector<Work>& w) {
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
          attach_prefix(r, x);
          if (!grow(r, x, x.prompt + x.output - x.kv)) {
            detach_prefix(r, x);
            break;
          }
          r.running.push_back(r.waiting.front());
          r.waiting.pop_front();
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
    // Admission of waiting requests (and, for sarathi, chunks of partly prefilled ones).
    auto admit = [&](int64_t room) {
      while (!r.waiting.empty() && static_cast<int64_t>(r.running.size()) < c_.max_batch_size) {
        Req& x = reqs_[static_cast<size_t>(r.waiting.front())];
        if (x.swapped) {  // swap in: blocks for its KV, then it runs with the others
          if (!grow(r, x, 0)) break;
          x.swapped = false;
          r.swap_used -= kv_bytes(x);
          r.pending_copy_s += kv_bytes(x) / s_.cluster.node.pcie_bandwidth;
          r.running.push_back(r.waiting.front());
          r.waiting.pop_front();
          continue;
        }
        attach_prefix(r, x);
        int64_t chunk = x.target - x.kv;
        // TensorRT-LLM chunks only a context longer than max_num_tokens (it could not
        // run otherwise); shorter ones join whole while they fit, unless context chunking
        // is on (inference.chunked_context: the first-come-first-served policy fills the
        // budget left after the decodes with chunks).
        const bool split = chunked || (sch == "trtllm" && (c_.chunked_context || chunk > room));
        if (split) chunk = std::min(chunk, room - tokens);
        const bool over = !split && tokens > 0 && tokens + chunk > room;  // a prompt over the budget runs alone
        // TensorRT-LLM's default capacity policy (GUARANTEED_NO_EVICT) admits a request
        // only with the KV blocks of its whole output reserved: nothing is ever preempted.
        const int64_t reserve = sch == "trtllm" ? x.prompt + x.output - x.kv : chunk;
        if (chunk <= 0 || over || !grow(r, x, reserve)) {
          detach_prefix(r, x);
          break;
        }
        r.running.push_back(r.waiting.front());
        r.waiting.pop_front();
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
      int64_t n = prefilling ? x.target - x.kv : step_;
      if (prefilling && (chunked || (sch == "trtllm" && (c_.chunked_context || n > budget))))
        n = std::min(n, budget - tokens);
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

  double cost_of(const std::vector<Work>& w, int rep) {
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

  // Applies an iteration's work at time `now`; returns the requests that finished.
  int64_t finish_iteration(int rep, const std::vector<Work>& w, double now) {
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

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  const double f = pos - static_cast<double>(i);
  return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

}  // namespace

double serving_iteration_seconds(const Scenario& s, const IterationBatch& batch) {
  ExecOptions eo;
  apply_calibration(s, eo.compute, eo.network);
  eo.timed_kernels = true;  // serving keeps the bracketed kernel costs (docs/model.md, "Kernels from a full queue")
  collective_options(s, eo);
  Topology topo(s.cluster);
  IterationCost cost(s, s.model, topo, eo);
  IterCost it = cost.dense(batch.tokens, batch.emitting);
  it += cost.decode_attention(batch.decode_context, batch.decode_seqs, batch.decode_max_context);
  for (const PrefillChunk& c : batch.prefill) it += cost.prefill_attention(c.tokens, c.past);
  return cost.seconds(it);
}

ServingResult run_serving(const Scenario& s, bool log_iterations, bool progress, int64_t sample) {
  const InferenceConfig& c = s.serving;
  const int64_t pools = c.prefill_replicas + c.decode_replicas;
  if (pools > 0 && (c.prefill_replicas < 1 || c.decode_replicas < 1))
    throw InputError(s.mark("inference.disaggregation"),
                     "disaggregation needs both pools, expected prefill_replicas >= 1 and decode_replicas >= 1");
  if (pools > 0 && c.scheduler == "static")
    throw InputError(s.mark("inference.scheduler"),
                     "static batching cannot hand requests between pools, expected orca, vllm or sarathi");
  if (pools > 0 && c.replicas != 1 && c.replicas != pools)
    throw InputError(s.mark("inference.replicas"),
                     "with disaggregation the replicas are the two pools, expected replicas: " + std::to_string(pools));
  const int64_t replicas = pools > 0 ? pools : c.replicas;
  const ModelConfig* draft_model = nullptr;
  if (!c.draft_model.empty()) {
    draft_model = find_model_preset(c.draft_model);
    if (!draft_model)
      throw InputError(s.mark("inference.speculative.draft_model"),
                       "unknown draft model '" + c.draft_model + "', expected a model preset");
    if (c.lookahead < 1)
      throw InputError(s.mark("inference.speculative.lookahead"), "a draft model needs lookahead >= 1");
    if (draft_model->heads % s.parallel.tp != 0)
      throw InputError(s.mark("inference.speculative.draft_model"), "tp must divide the draft model's heads");
  } else if (c.lookahead > 0 || c.acceptance_rate > 0) {
    throw InputError(s.mark("inference.speculative"), "speculative decoding needs a draft_model");
  }
  if (c.acceptance_rate < 0 || c.acceptance_rate > 1)
    throw InputError(s.mark("inference.speculative.acceptance_rate"), "acceptance_rate must lie in [0, 1]");
  if (c.decode_attention == "turbomind-v0.1") {
    // The kernel as TurboMind v0.1.0a1 builds it: FP16 queries, a head dim of 128, an FP16 or
    // INT8 cache (DispatchDecoderMultiheadAttention).
    const DType kv = c.kv_dtype_for(s.model.dtype);
    for (const ModelConfig* m : {&s.model, draft_model}) {
      if (!m) continue;
      if (m->is_mla())
        throw InputError(s.mark("inference.decode_attention"),
                         "turbomind-v0.1's decode kernel runs multi-head attention, the model has latent attention "
                         "(model.mla); expected decode_attention: streaming");
      if (m->head_dim() != 128)
        throw InputError(s.mark("inference.decode_attention"),
                         "turbomind-v0.1's decode kernel is built for a head dim of 128, the model has " +
                             std::to_string(m->head_dim()) + "; expected decode_attention: streaming");
      if (m->dtype != DType::FP16)
        throw InputError(s.mark("inference.decode_attention"),
                         "turbomind-v0.1's decode kernel runs FP16 models, the model is " +
                             std::string(to_string(m->dtype)) + "; expected model.dtype: fp16");
    }
    if (kv != DType::FP16 && kv != DType::INT8)
      throw InputError(s.mark("inference.decode_attention"),
                       "turbomind-v0.1's decode kernel reads an FP16 or INT8 cache, expected inference.kv_dtype: "
                       "fp16 or int8");
  }
  if (c.fp8_context_fmha == "on") {
    if (c.kv_dtype_for(s.model.dtype) != DType::FP8)
      throw InputError(s.mark("inference.fp8_context_fmha"),
                       "FP8 context attention reads its keys and values from an FP8 cache, expected "
                       "inference.kv_dtype: fp8");
    if (s.cluster.node.gpu.peak_fp8 <= 0)
      throw InputError(s.mark("inference.fp8_context_fmha"), "FP8 context attention needs FP8 tensor cores, which " +
                                                                 s.cluster.node.gpu.name +
                                                                 " lacks; expected fp8_context_fmha: off or auto");
  }
  if (s.parallel.cp != 1)
    throw InputError(s.mark("parallel.cp"), "serving replicas do not split context, expected cp: 1");
  const MoeConfig& moe = s.model.moe;
  if (moe.experts > 0 && (moe.top_k < 1 || moe.top_k > moe.experts || moe.expert_ffn_hidden < 1))
    throw InputError(s.mark("model.moe"), "a mixture of experts needs 1 <= top_k <= experts (" +
                                              std::to_string(moe.experts) + ") and expert_ffn_hidden > 0");
  if (moe.experts > 0 && (moe.expert_ffn_hidden % s.parallel.tp != 0))
    throw InputError(s.mark("parallel.tp"),
                     "tp = " + std::to_string(s.parallel.tp) + " does not divide model.moe.expert_ffn_hidden = " +
                         std::to_string(moe.expert_ffn_hidden) + ": every GPU holds 1/tp of every expert");
  if (s.parallel.ep != 1)
    throw InputError(s.mark("parallel.ep"),
                     "serving replicas shard every expert over their tp GPUs (docs/model.md, \"Mixture of experts\"), "
                     "expected ep: 1");
  const int64_t tp = s.parallel.tp, pp = s.parallel.pp;
  if (pp > s.model.layers) throw InputError(s.mark("parallel.pp"), "more pipeline stages than layers");
  if (tp > s.cluster.node.gpus)
    throw InputError(s.mark("parallel.tp"), "tp " + std::to_string(tp) + " spans nodes, expected tp <= " +
                                                std::to_string(s.cluster.node.gpus) + " GPUs per node");
  if (replicas * tp * pp > s.gpus())
    throw InputError(s.mark("inference.replicas"),
                     std::to_string(replicas) + " replicas of tp " + std::to_string(tp) + " × pp " +
                         std::to_string(pp) + " need " + std::to_string(replicas * tp * pp) +
                         " GPUs, expected at most the cluster's " + std::to_string(s.gpus()));
  if (s.model.heads % tp != 0) throw InputError(s.mark("parallel.tp"), "tp must divide the model's attention heads");
  if (c.trace.empty() && c.rate_per_s <= 0)
    throw InputError(s.mark("inference.arrivals.rate_per_s"), "arrival rate must be positive");
  // Times are doubles in seconds: past ~1e9 s (31 years) they no longer resolve a microsecond.
  const double arrivals_span = static_cast<double>(c.requests) / c.rate_per_s;  // inf for a subnormal rate
  if (c.trace.empty() && c.arrival_process != "closed" && !(arrivals_span <= 1e9))
    throw InputError(s.mark("inference.arrivals.rate_per_s"),
                     "the arrivals would span " +
                         (arrivals_span < 1e300 ? "about " + format_number(arrivals_span) : std::string("over 1e300")) +
                         " s (requests over rate_per_s), past 1e9 s, expected a rate of at least " +
                         format_number(static_cast<double>(c.requests) / 1e9) + " a second");

  ExecOptions eo;
  apply_calibration(s, eo.compute, eo.network);
  collective_options(s, eo);
  eo.timed_kernels = true;  // as serving_iteration_seconds
  Topology topo(s.cluster);
  if (c.fabric_share < 1)  // jobs: what other jobs' traffic leaves of the fabric (sim/jobs.h)
    for (const Link& l : topo.links())
      if (l.cls == LinkClass::Network) topo.set_link_bandwidth(l.id, l.bandwidth * c.fabric_share);
  std::vector<double> replica_slowdown;
  if (sample == 0) {
    const VariabilityConfig& v = s.variability;
    bool link_straggler = false;
    for (const Straggler& st : v.stragglers) link_straggler |= st.kind == "link";
    if (v.link_speed.dist != "none" || v.kernel_jitter > 0 || link_straggler)
      std::cerr << s.mark("variability").str()
                << ": warning: a serving run draws gpu_speed and GPU or node stragglers per replica; link_speed, "
                   "link stragglers and kernel_jitter apply to training runs only\n";
  }
  if (s.variability.any()) {
    // Each replica runs at its slowest GPU (docs/model.md, "Variability").
    const std::vector<double> gpu = draw_gpu_slowdowns(s, topo, stream_seed(s.seed, static_cast<uint64_t>(sample)));
    const int64_t per = s.parallel.tp * s.parallel.pp;
    for (int64_t r = 0; r < replicas; ++r)
      replica_slowdown.push_back(*std::max_element(gpu.begin() + r * per, gpu.begin() + (r + 1) * per));
  }
  IterationCost cost(s, s.model, topo, eo);
  std::unique_ptr<IterationCost> draft;
  if (draft_model) draft = std::make_unique<IterationCost>(s, *draft_model, topo, eo);

  // KV capacity, as vLLM sizes it: 90% of HBM, less the weights' shard and the
  // activation workspace of the largest iteration. TensorRT-LLM gives the KV cache a share
  // (kv_cache_free_gpu_mem_fraction) of the memory left free once the engine is loaded.
  const double bytes = dtype_bits(s.model.dtype) / 8.0;
  const double weights = cost.weight_bytes_per_gpu() + (draft ? draft->weight_bytes_per_gpu() : 0);
  const double activations = static_cast<double>(c.max_batch_tokens) *
                             static_cast<double>(4 * s.model.hidden + 3 * s.model.ffn_hidden / tp) * bytes;
  const double slots = static_cast<double>(c.max_batch_size);
  const double buffers = c.scheduler == "trtllm" ? slots * static_cast<double>(s.model.vocab) * kTrtllmSlotBytes
                                                 : static_cast<double>(c.max_batch_size * s.model.vocab / tp) * 4;
  const double workspace = activations + buffers;
  // TensorRT-LLM measures what is free once the engine is loaded, so the CUDA context and
  // library workspaces and the NCCL buffers (the training memory model's reserve over nothing
  // of its own to fragment: 0.75 GiB, and 0.25 GiB with a communicator) are not in it.
  const double hbm = s.cluster.node.gpu.hbm_bytes;
  const double runtime = default_memory_reserve(MemoryBreakdown{}, tp * pp > 1 ? 1 : 0);
  const double free_bytes = c.scheduler == "trtllm" ? c.kv_cache_free_fraction * (hbm - weights - workspace - runtime)
                                                    : 0.9 * hbm - weights - workspace;
  const double block_bytes =
      (cost.kv_bytes_per_token() + (draft ? draft->kv_bytes_per_token() : 0)) * static_cast<double>(c.kv_block_tokens);
  const int64_t blocks =
      free_bytes > 0 ? static_cast<int64_t>(free_bytes / block_bytes) / pp : 0;  // per virtual engine
  if (blocks < 1) {
    // Name what takes the memory: the weights, or the workspace the batch limits size.
    const bool batch = workspace > weights;
    throw InputError(
        s.mark(batch ? (s.marks.count("inference.max_batch_size") ? "inference.max_batch_size"
                                                                  : "inference.max_batch_tokens")
               : s.marks.count("cluster.gpu_spec.hbm") ? "cluster.gpu_spec.hbm"
                                                       : "parallel.tp"),
        "no room for the KV cache: " + format_number(weights / 1e9) + " GB of weights and " +
            format_number(workspace / 1e9) + " GB of workspace (max_batch_tokens' activations, max_batch_size's " +
            "sampling buffers) per GPU on a " + format_number(s.cluster.node.gpu.hbm_bytes / 1e9) + " GB GPU, " +
            (batch ? "expected smaller inference.max_batch_size or max_batch_tokens" : "expected a larger tp or pp"));
  }

  const std::vector<Arrival> arrivals = make_arrivals(s);
  Engine engine(s, cost, draft.get(), blocks, topo, eo.network);
  if (log_iterations) engine.log_iterations();
  if (!replica_slowdown.empty()) engine.set_replica_slowdown(replica_slowdown);
  Progress bar("serving", static_cast<int64_t>(arrivals.size()), progress);
  if (progress) engine.show_progress(&bar);
  ServingResult r = engine.run(arrivals);
  bar.finish();
  // Whole bytes, as a training run reports them: the memory model's formulas carry fractions of one.
  r.memory_weights = std::round(weights);
  r.memory_activations = std::round(activations);
  r.memory_buffers = std::round(buffers);
  r.memory_kv_cache = std::round(static_cast<double>(blocks * pp) * block_bytes);
  r.memory_reserved =
      std::round(hbm - weights - activations - buffers - static_cast<double>(blocks * pp) * block_bytes);

  std::vector<double> ttft, tpot, e2e;
  double out_tokens = 0, first = r.requests.front().arrival;
  int64_t good = 0;
  for (const ServedRequest& q : r.requests) {
    ttft.push_back(q.first_token - q.arrival);
    e2e.push_back(q.finish - q.arrival);
    const double tp_q = q.output > 1 ? (q.finish - q.first_token) / static_cast<double>(q.output - 1) : 0;
    if (q.output > 1) tpot.push_back(tp_q);
    out_tokens += static_cast<double>(q.output);
    if (q.first_token - q.arrival <= c.slo_ttft_s && tp_q <= c.slo_tpot_s) ++good;
  }
  const double span = r.makespan_s - first;
  const double n = static_cast<double>(r.requests.size());
  r.metrics = {{"requests", n},
               {"makespan_s", r.makespan_s},
               {"throughput_tokens_per_s", out_tokens / span},
               {"requests_per_s", n / span},
               {"goodput_requests_per_s", static_cast<double>(good) / span},
               {"slo_attainment", static_cast<double>(good) / n}};
  for (auto [name, v] :
       {std::pair<const char*, std::vector<double>*>{"ttft_s", &ttft}, {"tpot_s", &tpot}, {"e2e_s", &e2e}})
    for (auto [suffix, qq] : {std::pair<const char*, double>{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}})
      r.metrics.emplace_back(std::string(name) + "_" + suffix, percentile(*v, qq));
  double mean_e2e = 0;
  for (double x : e2e) mean_e2e += x / n;
  r.metrics.insert(
      r.metrics.end(),
      {{"e2e_s_mean", mean_e2e},
       {"mean_requests_in_system", engine.mean_in_system()},
       {"preemptions", static_cast<double>(r.preemptions)},
       {"swaps", static_cast<double>(r.swaps)},
       {"prefix_cache_hit_rate",
        r.prefix_lookups > 0 ? static_cast<double>(r.prefix_hits) / static_cast<double>(r.prefix_lookups) : 0.0},
       {"prefix_tokens_reused", static_cast<double>(r.prefix_tokens_reused)},
       {"kv_transfer_s_mean", engine.kv_transfer_seconds() / n},
       {"kv_transfer_bytes", engine.kv_transfer_bytes()},
       {"tokens_per_verify_step",
        r.verify_steps ? static_cast<double>(r.speculated_tokens) / static_cast<double>(r.verify_steps) : 1.0},
       {"kv_cache_peak_utilization", r.kv_peak_utilization},
       {"kv_blocks_per_replica", static_cast<double>(r.kv_blocks_per_replica)},
       {"memory_weights_bytes", r.memory_weights},
       {"memory_activations_bytes", r.memory_activations},
       {"memory_buffers_bytes", r.memory_buffers},
       {"memory_kv_cache_bytes", r.memory_kv_cache},
       {"memory_reserved_bytes", r.memory_reserved},
       {"iterations", static_cast<double>(r.iterations)},
       {"iteration_cost_memo_hits", static_cast<double>(r.memo_hits)},
       {"iteration_cost_memo_misses", static_cast<double>(r.memo_misses)}});
  return r;
}

void run_serving_samples(const Scenario& s, ServingResult& first, int64_t n, int jobs) {
  n = std::max<int64_t>(1, n);
  const std::vector<std::string> keys = {"ttft_s_p50",
                                         "ttft_s_p99",
                                         "tpot_s_p50",
                                         "tpot_s_p99",
                                         "e2e_s_p50",
                                         "throughput_tokens_per_s",
                                         "goodput_requests_per_s",
                                         "slo_attainment"};
  std::vector<std::vector<double>> values(keys.size(), std::vector<double>(static_cast<size_t>(n)));
  auto take = [&](const Metrics& m, int64_t i) {
    for (size_t k = 0; k < keys.size(); ++k)
      for (const auto& [key, v] : m)
        if (key == keys[k]) values[k][static_cast<size_t>(i)] = v;
  };
  take(first.metrics, 0);
  parallel_for(
      1, n, jobs, [] { return 0; }, [&](int&, int64_t i) { take(run_serving(s, false, false, i).metrics, i); });
  first.samples.clear();
  add_sample_statistics(keys, values, s.seed, first.metrics, first.samples);
}

void write_serving_outputs(const Scenario& s, const ServingResult& r) {
  ServingRecord rec;
  rec.run.name = s.name;
  rec.run.kind = "inference";
  rec.run.network_model = "analytic";
  rec.run.scenario_yaml = s.merged_yaml;
  rec.run.seed = s.serving.arrival_seed;
  rec.run.metrics = r.metrics;
  rec.run.samples = r.samples;
  for (const ServedRequest& q : r.requests)
    rec.requests.push_back({q.replica, q.arrival, q.first_token, q.finish, q.prompt, q.output, q.preemptions});
  rec.iterations = r.iteration_log;
  if (!s.output_sqlite.empty()) write_sqlite(rec, s.output_sqlite);
  if (!s.output_trace.empty()) write_serving_trace(rec, s.output_trace);
}

// The flat fields (`ttft_s_p50`, ...) and, for each latency, an object of its
// percentiles (`"ttft_s": {"p50": ..., "p90": ..., "p99": ...}`).
std::string serving_summary_json(const Scenario& s, const ServingResult& r) {
  std::string out =
      summary_json({{"name", s.name}, {"mode", "inference"}, {"scheduler", s.serving.scheduler}}, r.metrics);
  out.pop_back();  // the closing brace
  for (const char* name : {"ttft_s", "tpot_s", "e2e_s"}) {
    out += std::string(", \"") + name + "\": {";
    const char* sep = "";
    for (const char* q : {"p50", "p90", "p99"})
      for (const auto& [k, v] : r.metrics)
        if (k == std::string(name) + "_" + q) {
          out += std::string(sep) + "\"" + q + "\": " + format_number(v);
          sep = ", ";
        }
    out += "}";
  }
  return out + "}";
}

std::string serving_summary_table(const Scenario& s, const ServingResult& r) {
  std::ostringstream o;
  const InferenceConfig& c = s.serving;
  o << s.name << " — inference, ";
  if (c.prefill_replicas + c.decode_replicas > 0)
    o << c.prefill_replicas << " prefill + " << c.decode_replicas << " decode";
  else
    o << c.replicas;
  o << " replica(s) of tp " << s.parallel.tp << " x pp " << s.parallel.pp << ", " << s.serving.scheduler
    << " scheduler, " << s.serving.router << " router\n";
  for (const auto& [k, v] : r.metrics)
    o << "  " << k << std::string(k.size() < 28 ? 28 - k.size() : 1, ' ') << format_number(v) << "\n";
  return o.str();
}

}  // namespace clustersim
