#include "sim/executor.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>

#include "cost_models/flow_network.h"
#include "cost_models/network.h"
#include "cost_models/power_cap.h"
#include "cost_models/tuner.h"
#include "sim/event_queue.h"
#include "sim/executor_state.h"
#include "sim/variability.h"

namespace clustersim {

std::shared_ptr<CollectiveCache> make_collective_cache() { return std::make_shared<CollectiveCache>(); }

namespace exec {

Executor::Executor(const Plan& plan, Topology& topo, const ExecOptions& opt)
    : plan_(plan),
      topo_(topo),
      opt_(opt),
      net_(topo, opt.network),
      launch_gap_(SimTime::from_seconds(opt.compute.launch_overhead_s)),
      blocking_gap_(SimTime::from_seconds(std::max(0.0, opt.blocking_launch_s))) {
  if (opt.flow) {
    flow_ = std::make_unique<FlowNetwork>(topo, opt.network);
    flow_->set_record_usage(opt.record_link_usage);
    flow_->set_solo_steps(opt.solo_steps);
  }
}

ExecResult Executor::run() {
  prepare();
  result_.rank_finish.assign(static_cast<size_t>(plan_.world_size), SimTime::zero());
  slot_spans_.resize(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    total_ops_ += slots_[i].program->ops.size();
    slot_spans_[i].reserve(slots_[i].program->ops.size());
  }
  // Streams whose first op is communication start first, as complete() releases them.
  for (uint32_t s = 0; s < slots_.size(); ++s)
    for (const bool comm : {true, false})
      for (uint32_t st = 0; st < slots_[s].cursor.size(); ++st) {
        const auto& list = slots_[s].info->stream_ops[st];
        if (!list.empty() && is_comm(slots_[s].program->ops[list[0]].kind) == comm) try_start(s, st);
      }
  Simulation<Completion>::Event ev;
  while (sim_.next(ev)) {
    if (ev.payload.slot == kWake) {
      if (ev.payload.op == wake_version_) network_wake();
      continue;
    }
    complete(ev.payload.slot, ev.payload.op);
  }
  if (flow_) {
    flow_->flush_usage();
    if (opt_.record_link_usage) result_.link_usage = std::move(flow_->usage());
  }
  for (const RankState& r : slots_) {
    if (r.done != r.program->ops.size()) {
      std::string where;
      for (size_t st = 0; st < r.cursor.size(); ++st)
        if (r.cursor[st] < r.info->stream_ops[st].size()) {
          const Op& op = r.program->ops[r.info->stream_ops[st][r.cursor[st]]];
          where += " " + r.program->streams[st] + ":" + plan_.names[op.name];
        }
      if (!r.finished.empty())
        where +=
            "; with blocking launches (training.launch_blocking, CUDA_LAUNCH_BLOCKING=1) a rank issues one op "
            "at a time in program order, and this plan's ranks wait on each other's sends and receives in a "
            "cycle: a real job would hang as well";
      throw std::runtime_error("plan cannot finish: rank " + std::to_string(r.rank) + " is stuck at" + where);
    }
  }
  result_.makespan = sim_.now();
  result_.events = sim_.events_processed();
  summarize();
  return std::move(result_);
}

void Executor::try_start(uint32_t slot, uint32_t stream) {
  RankState& r = slots_[slot];
  if (r.busy[stream]) return;
  const auto& list = r.info->stream_ops[stream];
  if (r.cursor[stream] >= list.size()) return;
  const uint32_t op_index = list[r.cursor[stream]];
  if (r.pending[op_index] != 0) return;
  const bool blocking = opt_.blocking_launch_s >= 0;
  // Blocking launches: the host is still waiting on an earlier op, unless this is
  // communication and everything it waits on is communication issued before it in one
  // run (NCCL group calls: batched sends and receives are posted together).
  if (blocking && op_index != r.first_open) {
    if (!is_comm(r.program->ops[op_index].kind)) return;
    for (uint32_t j = r.first_open; j < op_index; ++j)
      if (!is_comm(r.program->ops[j].kind) || (!r.finished[j] && !r.issued[j])) return;
  }
  if (blocking) r.issued[op_index] = 1;
  r.busy[stream] = 1;
  r.stream_start[stream] = sim_.now();
  const Op& op = r.program->ops[op_index];
  if (is_comm(op.kind)) {
    // A userbuffers kernel (Op::holds_sms) holds the SMs its configuration gives it, so
    // the kernels starting beside it take the factor measured for that many; an NCCL
    // kernel holds its channels' (below).
    if (op.holds_sms) {
      ++r.waiting_sms;
      const GpuSpec& g =
          topo_.gpu_models()[static_cast<size_t>(topo_.gpu_model_of(plan_.rank_gpu[static_cast<size_t>(r.rank)]))];
      std::array<double, 3> f{};
      for (const OpKind k : {OpKind::Gemm, OpKind::Attention, OpKind::Memory})
        f[overlap_kind_index(k)] = beside_userbuffers(k, g, opt_.compute, op.held_sms, op.sm_margin);
      r.sms_factors.emplace_back(op_index, f);
    }
    if (op.kind == OpKind::Collective) {
      if (!op.holds_sms) ++r.waiting_coll;
      if (op.holds_sms) retime(slot);
      arrive(slot, op_index, op);
    } else {
      ++r.waiting_p2p;
      if (op.overlaps_compute) ++(network_peer(r.rank, op) ? r.waiting_p2p_net : r.waiting_p2p_node);
      arrive_p2p(slot, op_index, op);
    }
    // Blocking launches: the next communication op of the same run goes out with this one.
    if (blocking && op_index + 1 < r.program->ops.size() && is_comm(r.program->ops[op_index + 1].kind))
      try_start(slot, r.program->ops[op_index + 1].stream);
  } else {
    // A kernel starts a launch gap after its stream became ready (joins have no kernel).
    SimTime kernel = (*r.compute_time)[op_index];
    if (kernel > SimTime::zero() && (!opt_.rank_slowdown.empty() || opt_.kernel_jitter > 0)) {
      double f = opt_.rank_slowdown.empty() ? 1.0 : opt_.rank_slowdown[static_cast<size_t>(r.rank)];
      if (opt_.kernel_jitter > 0) f *= kernel_jitter_factor(opt_.kernel_jitter, opt_.jitter_seed, r.rank, op_index);
      if (f != 1.0) kernel = SimTime::from_seconds(kernel.seconds() * f);
    }
    const SimTime gap = blocking ? blocking_gap_ : launch_gap_;
    if (kernel > SimTime::zero()) {
      r.stream_start[stream] = sim_.now() + gap;
      RankState::Running& k = r.running[stream];
      k.op = op_index;
      k.seg_start = sim_.now() + gap;
      k.base = kernel.seconds();
      k.done = 0;
      k.f = beside(r, op);
      k.end = k.seg_start + (k.f == 1.0 ? kernel : SimTime::from_seconds(k.base * k.f));
      sim_.schedule_at(k.end, Completion{slot, op_index});
    } else {
      sim_.schedule_in(kernel, Completion{slot, op_index});
    }
  }
}

void Executor::arrive(uint32_t slot, uint32_t op_index, const Op& op) {
  RankState& r = slots_[slot];
  const int32_t group = plan_.group_of(r.rank, op.group);
  if (group < 0)
    throw std::runtime_error("rank " + std::to_string(r.rank) + " has no " + std::string(to_string(op.group)) +
                             " group");
  const uint32_t seq = r.coll_seq[static_cast<size_t>(op.group)]++;
  const uint64_t key = (static_cast<uint64_t>(group) << 32) | seq;
  Rendezvous& rv = rendezvous_[key];
  // NCCL's collectives take one count on every member (all-to-all's per-peer counts
  // aside): a member that brings another kind or size is a plan whose ranks disagree, not
  // one to run at the size of whichever member arrived last.
  if (!rv.members.empty()) {
    const auto [s0, o0] = rv.members.front();
    const Op& first = slots_[s0].program->ops[o0];
    if (first.collective != op.collective || (op.collective != CollectiveKind::AllToAll && first.bytes != op.bytes))
      throw std::runtime_error("rank " + std::to_string(r.rank) + "'s " + plan_.names[op.name] + " (" +
                               std::string(to_string(op.collective)) + ", " + std::to_string(op.bytes) +
                               " B) meets rank " + std::to_string(slots_[s0].rank) + "'s " + plan_.names[first.name] +
                               " (" + std::string(to_string(first.collective)) + ", " + std::to_string(first.bytes) +
                               " B) as collective " + std::to_string(seq) + " of their " +
                               std::string(to_string(op.group)) +
                               " group: every member's must be the same kind and size");
  }
  rv.members.emplace_back(slot, op_index);
  if (++rv.arrived < group_expected_[static_cast<size_t>(group)]) return;
  const CollectiveResult& c = collective_cost(group, op);
  launch(c.expansion, group_gpus_[static_cast<size_t>(group)], c, std::move(rv.members));
  rendezvous_.erase(key);
}

void Executor::arrive_p2p(uint32_t slot, uint32_t op_index, const Op& op) {
  RankState& r = slots_[slot];
  const int32_t peer = p2p_peer(plan_, r.rank, op);
  if (peer < 0)
    throw std::runtime_error("rank " + std::to_string(r.rank) + ": " + std::string(to_string(op.kind)) +
                             " to a peer outside its " + std::string(to_string(op.group)) + " group");
  const int32_t src = op.kind == OpKind::Send ? r.rank : peer;
  const int32_t dst = op.kind == OpKind::Send ? peer : r.rank;
  // Sends and receives match per (source, destination, phase), in issue order. Ranks folded
  // onto their TP group's first meet there: a ring inside the group (k sends t -> t+1) is the
  // first rank's own send meeting its own receive, as every hop starts when both ends reach it.
  const int32_t ks = tp_rep_[static_cast<size_t>(src)], kd = tp_rep_[static_cast<size_t>(dst)];
  const auto pair = std::make_tuple(ks, kd, static_cast<int>(op.phase));
  const uint32_t seq = (op.kind == OpKind::Send ? send_seq_ : recv_seq_)[pair]++;
  const auto key = std::make_tuple(ks, kd, static_cast<int>(op.phase), seq);
  Rendezvous& rv = p2p_[key];
  // NCCL's send and its receive take one count: ends that disagree are a plan to refuse.
  if (!rv.members.empty()) {
    const auto [s0, o0] = rv.members.front();
    const Op& other = slots_[s0].program->ops[o0];
    if (other.bytes != op.bytes)
      throw std::runtime_error("rank " + std::to_string(r.rank) + "'s " + plan_.names[op.name] + " (" +
                               std::to_string(op.bytes) + " B) meets rank " + std::to_string(slots_[s0].rank) + "'s " +
                               plan_.names[other.name] + " (" + std::to_string(other.bytes) +
                               " B): a send and its receive must move the same bytes");
  }
  rv.members.emplace_back(slot, op_index);
  const uint32_t expected =
      static_cast<uint32_t>(simulated_[static_cast<size_t>(ks)]) + simulated_[static_cast<size_t>(kd)];
  if (++rv.arrived < expected) return;
  std::vector<int32_t> gpus = {plan_.rank_gpu[static_cast<size_t>(src)], plan_.rank_gpu[static_cast<size_t>(dst)]};
  CollectiveResult c;
  // NCCL picks a send's protocol by its size (nccl_p2p_protocol): LL for small ones.
  const bool across_nodes = topo_.node_of(gpus[0]) != topo_.node_of(gpus[1]);
  c.expansion.proto = nccl_p2p_protocol(static_cast<double>(op.bytes), across_nodes);
  c.expansion.base_latency = opt_.network.base(LatencyFamily::Ring, c.expansion.proto);
  CollectiveStep one;
  one.transfers.push_back(Transfer{0, 1, static_cast<double>(op.bytes)});
  // On the flow network the ranks that mirror this pair send the same bytes at the same
  // moment; their flows go in too, so links they share see the contention they cause.
  if (flow_ && !mirrors_.empty()) {
    const int32_t offset = dst - src;
    gpus.reserve(2 + 2 * mirrors_[static_cast<size_t>(src)].size());
    one.transfers.reserve(1 + mirrors_[static_cast<size_t>(src)].size());
    for (int32_t m : mirrors_[static_cast<size_t>(src)]) {
      const int32_t md = m + offset;
      if (md < 0 || md >= plan_.world_size || rep_[static_cast<size_t>(md)] != dst) continue;
      const auto k = static_cast<int32_t>(gpus.size());
      gpus.push_back(plan_.rank_gpu[static_cast<size_t>(m)]);
      gpus.push_back(plan_.rank_gpu[static_cast<size_t>(md)]);
      one.transfers.push_back(Transfer{k, k + 1, static_cast<double>(op.bytes)});
    }
  }
  c.expansion.steps.push_back(std::move(one));
  if (!flow_) {
    const auto& cost = p2p_cost(gpus[0], gpus[1], op.bytes);
    c.duration = cost.first;
    c.link_bytes = cost.second;
  }
  // A receive posted early waits for its sender; that wait is pipeline idle time, not
  // communication: the span starts when the transfer does.
  for (auto [s2, o2] : rv.members) slots_[s2].stream_start[slots_[s2].program->ops[o2].stream] = sim_.now();
  launch(c.expansion, gpus, c, std::move(rv.members));
  p2p_.erase(key);
}

const std::pair<SimTime, std::vector<std::pair<uint32_t, double>>>& Executor::p2p_cost(int32_t src_gpu, int32_t dst_gpu,
                                                                                       int64_t bytes) {
  const auto memo_key = std::make_tuple(src_gpu, dst_gpu, bytes);
  auto it = p2p_memo_.find(memo_key);
  if (it != p2p_memo_.end()) return it->second;
  const std::vector<int32_t> gpus = {src_gpu, dst_gpu};
  // NCCL picks a send's protocol by its size (nccl_p2p_protocol): LL for small ones.
  const Protocol proto = nccl_p2p_protocol(static_cast<double>(bytes), topo_.node_of(src_gpu) != topo_.node_of(dst_gpu));
  Expansion e;
  e.proto = proto;
  e.base_latency = opt_.network.base(LatencyFamily::Ring, proto);
  CollectiveStep one;
  one.transfers.push_back(Transfer{0, 1, static_cast<double>(bytes)});
  e.steps.push_back(std::move(one));
  CollectiveCost cost = net_.run(e, gpus);
  // A calibrated send/recv inside a node replaces the model's time.
  const double measured = measured_p2p_seconds(opt_.network, layout_of(topo_, gpus), static_cast<double>(bytes));
  return p2p_memo_
      .emplace(memo_key,
               std::make_pair(SimTime::from_seconds(measured >= 0 ? measured : cost.seconds), std::move(cost.link_bytes)))
      .first->second;
}

void Executor::launch(const Expansion& e, const std::vector<int32_t>& gpus, const CollectiveResult& c,
                      std::vector<std::pair<uint32_t, uint32_t>> members) {
  if (flow_) {
    const uint64_t id = flow_->start(e, gpus, sim_.now());
    in_flight_.emplace(id, std::move(members));
    rearm_wake();
    return;
  }
  for (auto [s, o] : members) sim_.schedule_in(c.duration, Completion{s, o});
  if (opt_.record_link_usage) {
    const int64_t start = sim_.now().picoseconds();
    for (auto [link, bytes] : c.link_bytes)
      result_.link_usage.push_back(LinkUsage{link, start, start + c.duration.picoseconds(), bytes});
  }
}

void Executor::rearm_wake() {
  const SimTime t = flow_->next_time();
  if (t == SimTime::max()) return;
  sim_.schedule_at(t, Completion{kWake, ++wake_version_});
}

void Executor::network_wake() {
  std::vector<uint64_t> finished;
  flow_->advance(sim_.now(), finished);
  for (uint64_t id : finished) {
    auto it = in_flight_.find(id);
    auto members = std::move(it->second);
    in_flight_.erase(it);
    for (auto [s, o] : members) complete(s, o);
  }
  rearm_wake();
}

const CollectiveResult& Executor::collective_cost(int32_t group, const Op& op) {
  const auto key = std::make_tuple(group, static_cast<int>(op.collective), op.bytes);
  auto it = memo_.find(key);
  if (it != memo_.end()) return it->second;
  if (CollectiveCache* shared = opt_.collective_cache.get()) {
    {
      std::lock_guard<std::mutex> lock(shared->mu);
      auto s = shared->memo.find(key);
      if (s != shared->memo.end()) return s->second;
    }
    CollectiveResult r = cost_collective(group, op);
    std::lock_guard<std::mutex> lock(shared->mu);
    return shared->memo.emplace(key, std::move(r)).first->second;  // a racing thread's equal result stays
  }
  return memo_.emplace(key, cost_collective(group, op)).first->second;
}

double Executor::beside(RankState& r, const Op& op) {
  if (r.waiting_p2p == 0 && r.waiting_coll == 0 && r.waiting_sms == 0) return 1.0;
  const size_t k = overlap_kind_index(op.kind);
  const BesideNccl& b = beside_nccl_of(r.rank);
  double ub = 1.0;
  for (const auto& [held, f] : r.sms_factors) ub = std::max(ub, f[k]);
  return std::max({r.waiting_p2p_node > 0 ? b.p2p_node[k] : 1.0, r.waiting_p2p_net > 0 ? b.p2p_net[k] : 1.0,
                   r.waiting_coll > 0 ? b.collective[k] : 1.0, ub});
}

void Executor::retime(uint32_t slot) {
  RankState& r = slots_[slot];
  const SimTime now = sim_.now();
  for (RankState::Running& k : r.running) {
    if (k.op == ~0u) continue;
    const double f = beside(r, r.program->ops[k.op]);
    if (f == k.f) continue;
    if (now > k.seg_start) {
      k.done = std::min(1.0, k.done + (now - k.seg_start).seconds() / (k.base * k.f));
      k.seg_start = now;
    }
    k.f = f;
    const SimTime end = k.seg_start + SimTime::from_seconds((1.0 - k.done) * k.base * f);
    if (end == k.end) continue;
    k.end = end;
    sim_.schedule_at(end, Completion{slot, k.op});
  }
}

void Executor::complete(uint32_t slot, uint32_t op_index) {
  RankState& r = slots_[slot];
  const Op& op = r.program->ops[op_index];
  const uint32_t stream = op.stream;
  if (!is_comm(op.kind)) {
    // A kernel's completion event that retime() replaced: the op is done already, or its
    // end has moved.
    const auto& list = r.info->stream_ops[stream];
    if (!r.busy[stream] || r.cursor[stream] >= list.size() || list[r.cursor[stream]] != op_index) return;
    RankState::Running& k = r.running[stream];
    if (k.op == op_index) {
      if (sim_.now() != k.end) return;
      k.op = ~0u;
    }
  }
  if (op.kind == OpKind::Collective && !op.holds_sms) --r.waiting_coll;
  if (op.kind == OpKind::Send || op.kind == OpKind::Recv) --r.waiting_p2p;
  if (op.holds_sms) {
    --r.waiting_sms;
    for (size_t i = 0; i < r.sms_factors.size(); ++i)
      if (r.sms_factors[i].first == op_index) {
        r.sms_factors.erase(r.sms_factors.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
  }
  if (op.overlaps_compute) --(network_peer(r.rank, op) ? r.waiting_p2p_net : r.waiting_p2p_node);
  if (op.kind == OpKind::Collective && op.holds_sms) retime(slot);
  slot_spans_[slot].push_back(
      SpanRecord{r.rank, op.stream, op_index, r.stream_start[stream].picoseconds(), sim_.now().picoseconds()});
  r.busy[stream] = 0;
  ++r.cursor[stream];
  if (!r.finished.empty()) {
    r.finished[op_index] = 1;
    while (r.first_open < r.finished.size() && r.finished[r.first_open]) ++r.first_open;
  }
  if (++r.done == r.program->ops.size()) result_.rank_finish[static_cast<size_t>(r.rank)] = sim_.now();
  if ((++completed_ & 0xFFFF) == 0 && opt_.progress) opt_.progress(completed_, total_ops_);
  // Communication that this completion releases starts before the kernels it releases:
  // an NCCL kernel and a GEMM launched at the same instant run side by side, so the GEMM
  // takes the slowdown whatever order the plan lists them in (a Chakra round trip
  // reorders them).
  const ProgramInfo& info = *r.info;
  const uint32_t begin = info.dependents_begin[op_index], end = info.dependents_begin[op_index + 1];
  for (uint32_t i = begin; i < end; ++i) {
    const uint32_t d = info.dependents[i];
    if (--r.pending[d] == 0 && is_comm(r.program->ops[d].kind)) try_start(slot, r.program->ops[d].stream);
  }
  for (uint32_t i = begin; i < end; ++i) {
    const uint32_t d = info.dependents[i];
    if (r.pending[d] == 0 && !is_comm(r.program->ops[d].kind)) try_start(slot, r.program->ops[d].stream);
  }
  try_start(slot, stream);
  // Blocking launches: the host goes on to the next op in program order, on whichever stream.
  if (!r.finished.empty() && r.first_open < r.finished.size()) try_start(slot, r.program->ops[r.first_open].stream);
}

}  // namespace exec

ExecResult execute_plan(const Plan& plan, Topology& topo, const ExecOptions& opt) {
  return exec::Executor(plan, topo, opt).run();
}

}  // namespace clustersim
