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
#include "sim/variability.h"

namespace clustersim {
namespace {

// What is shared by every rank running one program: durations, dependents, stream order.
struct ProgramInfo {
  std::vector<SimTime> compute_time;                   // per op (0 for collectives)
  std::vector<uint32_t> dependents_begin, dependents;  // CSR: ops waiting on each op
  std::vector<std::vector<uint32_t>> stream_ops;       // per stream, ops in issue order
};

struct RankState {
  int32_t rank = 0;
  const Program* program = nullptr;
  const ProgramInfo* info = nullptr;
  const std::vector<SimTime>* compute_time = nullptr;  // its GPU's kernel times (info's, or a mixed cluster's)
  std::vector<uint32_t> pending;      // unmet dependencies per op
  std::vector<uint32_t> cursor;       // next position in each stream
  std::vector<uint8_t> busy;          // stream running (or waiting in a collective)
  std::vector<SimTime> stream_start;  // start of the op running on each stream
  std::array<uint32_t, kGroupKinds> coll_seq{};
  uint32_t done = 0;
  uint32_t waiting_p2p = 0, waiting_coll = 0;  // NCCL kernels on the GPU: reached, not finished
  uint32_t waiting_sms = 0;  // userbuffers kernels (Op::holds_sms: p2p, or bulk collectives not counted above)
  // Their factors [gemm, attention, memory] (beside_userbuffers), by op: a kernel starting
  // beside them takes the largest.
  std::vector<std::pair<uint32_t, std::array<double, 3>>> sms_factors;
  uint32_t waiting_p2p_node = 0, waiting_p2p_net = 0;  // and those posted ahead of compute (Op::overlaps_compute)
  // The kernel in flight on each stream and its progress: a bulk userbuffers kernel (a
  // collective that holds SMs) can start or end while it runs, and its rest then runs at
  // the new factor (retime()).
  struct Running {
    uint32_t op = ~0u;
    SimTime seg_start, end;            // since seg_start at factor f; its completion event's time
    double base = 0, done = 0, f = 1;  // seconds alone; fraction done before seg_start
  };
  std::vector<Running> running;
  // Blocking launches (ExecOptions::blocking_launch_s): ops finished, and the first op in
  // program order that has not, which alone may be issued.
  std::vector<uint8_t> finished, issued;
  uint32_t first_open = 0;
};

bool is_comm(OpKind k) { return k == OpKind::Collective || k == OpKind::Send || k == OpKind::Recv; }

// Factors [gemm, attention, memory] beside NCCL's kernels (cost_models/compute.h).
struct BesideNccl {
  std::array<double, 3> collective{}, p2p_node{}, p2p_net{};
};

struct Completion {
  uint32_t slot;
  uint32_t op;
};

struct Rendezvous {
  uint32_t arrived = 0;
  SimTime last;
  std::vector<std::pair<uint32_t, uint32_t>> members;  // (slot, op)
};

}  // namespace

// A collective's cost on its group: its expansion into steps, and (analytic) its time
// and the bytes each link carried.
struct CollectiveResult {
  Expansion expansion;
  SimTime duration;  // analytic
  std::vector<std::pair<uint32_t, double>> link_bytes;
};

struct CollectiveCache {
  std::mutex mu;
  std::map<std::tuple<int32_t, int, int64_t>, CollectiveResult> memo;  // node-based: references stay valid
};

std::shared_ptr<CollectiveCache> make_collective_cache() { return std::make_shared<CollectiveCache>(); }

namespace {

constexpr uint32_t kWake = ~0u;  // Completion::slot of a network wake-up event

class Executor {
 public:
  Executor(const Plan& plan, Topology& topo, const ExecOptions& opt)
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

  ExecResult run() {
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
          where += "; with blocking launches (training.launch_blocking, CUDA_LAUNCH_BLOCKING=1) a rank issues one op "
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

 private:
  void prepare() {
    infos_.resize(plan_.programs.size());
    for (size_t p = 0; p < plan_.programs.size(); ++p) {
      const Program& prog = plan_.programs[p];
      ProgramInfo& info = infos_[p];
      const size_t n = prog.ops.size();
      info.compute_time = kernel_times(prog, topo_.gpu());
      std::vector<uint32_t> count(n + 1, 0);
      info.stream_ops.resize(prog.streams.size());
      for (size_t i = 0; i < n; ++i) {
        const Op& op = prog.ops[i];
        info.stream_ops[op.stream].push_back(static_cast<uint32_t>(i));
        for (uint32_t d = 0; d < op.dep_count; ++d) ++count[prog.deps[op.dep_begin + d] + 1];
      }
      for (size_t i = 0; i < n; ++i) count[i + 1] += count[i];
      info.dependents_begin = count;
      info.dependents.resize(prog.deps.size());
      std::vector<uint32_t> fill(count.begin(), count.end() - 1);
      for (size_t i = 0; i < n; ++i) {
        const Op& op = prog.ops[i];
        for (uint32_t d = 0; d < op.dep_count; ++d)
          info.dependents[fill[prog.deps[op.dep_begin + d]]++] = static_cast<uint32_t>(i);
      }
    }
    for (int32_t r = 0; r < plan_.world_size; ++r) {
      if (!opt_.simulate_all_ranks && plan_.mirror_of[static_cast<size_t>(r)] != r) continue;
      RankState st;
      st.rank = r;
      const uint32_t p = plan_.rank_program[static_cast<size_t>(r)];
      st.program = &plan_.programs[p];
      st.info = &infos_[p];
      st.compute_time = &compute_times_for(r, p);
      st.pending.resize(st.program->ops.size());
      for (size_t i = 0; i < st.pending.size(); ++i) st.pending[i] = st.program->ops[i].dep_count;
      st.cursor.assign(st.program->streams.size(), 0);
      st.busy.assign(st.program->streams.size(), 0);
      st.stream_start.assign(st.program->streams.size(), SimTime::zero());
      st.running.assign(st.program->streams.size(), RankState::Running{});
      if (opt_.blocking_launch_s >= 0) {
        st.finished.assign(st.program->ops.size(), 0);
        st.issued.assign(st.program->ops.size(), 0);
      }
      slots_.push_back(std::move(st));
      result_.simulated_ranks.push_back(r);
    }
    // How many simulated members each group has: a collective starts when they all arrive.
    simulated_.assign(static_cast<size_t>(plan_.world_size), 0);
    for (int32_t r : result_.simulated_ranks) simulated_[static_cast<size_t>(r)] = 1;
    if (flow_ && !opt_.simulate_all_ranks) {
      mirrors_.assign(static_cast<size_t>(plan_.world_size), {});
      for (int32_t r = 0; r < plan_.world_size; ++r) {
        const int32_t rep = plan_.mirror_of[static_cast<size_t>(r)];
        if (rep != r) mirrors_[static_cast<size_t>(rep)].push_back(r);
      }
    }
    group_expected_.resize(plan_.groups.size());
    group_gpus_.resize(plan_.groups.size());
    group_spans_nodes_.assign(plan_.groups.size(), 0);
    for (size_t g = 0; g < plan_.groups.size(); ++g) {
      for (int32_t r : plan_.groups[g].ranks) {
        group_expected_[g] += simulated_[static_cast<size_t>(r)];
        group_gpus_[g].push_back(plan_.rank_gpu[static_cast<size_t>(r)]);
      }
      const auto& gpus = group_gpus_[g];
      for (int32_t gpu : gpus)
        if (topo_.node_of(gpu) != topo_.node_of(gpus.front())) group_spans_nodes_[g] = 1;
    }
  }

  // The factors a GEMM, attention or memory kernel takes beside NCCL's kernels on rank r's
  // GPU (cost_models/compute.h, beside_collective and beside_p2p), per GPU model.
  const BesideNccl& beside_nccl_of(int32_t r) {
    const auto& models = topo_.gpu_models();
    if (beside_nccl_.empty()) {
      auto factors = [&](const GpuSpec& g) {
        BesideNccl b;
        for (const OpKind k : {OpKind::Gemm, OpKind::Attention, OpKind::Memory}) {
          const size_t i = overlap_kind_index(k);
          b.collective[i] = beside_collective(k, g, opt_.compute);
          b.p2p_node[i] = beside_p2p(k, g, opt_.compute, false);
          b.p2p_net[i] = beside_p2p(k, g, opt_.compute, true);
        }
        return b;
      };
      for (const GpuSpec& g : models) beside_nccl_.push_back(factors(g));  // a topology has one model at least
    }
    if (beside_nccl_.size() < 2) return beside_nccl_[0];
    // A rank standing for several models runs at the slowest one's kernel times
    // (compute_times_for): it takes that model's factors too.
    size_t m = static_cast<size_t>(topo_.gpu_model_of(plan_.rank_gpu[static_cast<size_t>(r)]));
    const uint64_t mask = model_mask_.empty() ? 0 : model_mask_[static_cast<size_t>(r)];
    for (size_t k = 0; k < models.size() && k < 64; ++k)
      if ((mask >> k & 1) && models[k].peak_bf16 < models[m].peak_bf16) m = k;
    return beside_nccl_[m];
  }

  // A send or receive posted ahead of compute that runs on a network peer's channel count
  // (nccl_net_peer_channels, not nccl_channels). NCCL gives every peer of a communicator the
  // same count, the fewest any pair of its ranks allows (ncclTopoComputeP2pChannels: the
  // minimum of ncclTopoGetNchannels over the local GPUs and every rank, a rank outside the
  // node counting as a network peer): so the count is the network's as soon as the group
  // (the communicator the op runs on) leaves the node, even to a peer in the same node.
  bool network_peer(int32_t rank, const Op& op) const {
    const int32_t group = plan_.group_of(rank, op.group);
    if (group < 0 || p2p_peer(plan_, rank, op) < 0) return false;
    return group_spans_nodes_[static_cast<size_t>(group)] != 0;
  }

  // Kernel times for rank `r` of program `p`. Every GPU the same model: the program's
  // own. A topology file that mixes models: costed on each model the rank stands for
  // (itself and, unless every rank is simulated, the ranks mirroring it), kernel by
  // kernel the slowest, as a synchronous step waits for its slowest member (the
  // variability rule, sim/variability.h).
  const std::vector<SimTime>& compute_times_for(int32_t r, uint32_t p) {
    const auto& models = topo_.gpu_models();
    if (models.size() < 2) return infos_[p].compute_time;
    if (models.size() > 64) throw std::runtime_error("a cluster of more than 64 GPU models is not supported");
    if (model_mask_.empty()) {
      model_mask_.assign(static_cast<size_t>(plan_.world_size), 0);
      for (int32_t m = 0; m < plan_.world_size; ++m) {
        const int32_t into = opt_.simulate_all_ranks ? m : plan_.mirror_of[static_cast<size_t>(m)];
        model_mask_[static_cast<size_t>(into)] |= uint64_t{1}
                                                  << topo_.gpu_model_of(plan_.rank_gpu[static_cast<size_t>(m)]);
      }
    }
    const uint64_t mask = model_mask_[static_cast<size_t>(r)];
    auto [it, fresh] = mixed_compute_.try_emplace({p, mask});
    if (fresh) {
      const Program& prog = plan_.programs[p];
      it->second.assign(prog.ops.size(), SimTime::zero());
      for (size_t k = 0; k < models.size(); ++k) {
        if (!(mask >> k & 1)) continue;
        const std::vector<SimTime> t = kernel_times(prog, models[k]);
        for (size_t i = 0; i < prog.ops.size(); ++i) it->second[i] = std::max(it->second[i], t[i]);
      }
    }
    return it->second;
  }

  // Each op's kernel time on `gpu`: its burst-rate cost (from a full queue unless timed),
  // then the clock the board's power cap leaves each phase's mix of kernels
  // (cost_models/compute.h, apply_power_cap).
  std::vector<SimTime> kernel_times(const Program& prog, const GpuSpec& gpu) {
    std::vector<double> s(prog.ops.size());
    for (size_t i = 0; i < s.size(); ++i) s[i] = compute_seconds(prog.ops[i], gpu, opt_.compute);
    // From a full queue (no timing events between kernels), each kernel with its gap takes
    // less than the tables' bracketed times. Blocking launches have no queue: each kernel
    // starts blocking_launch_s after its issue instead of a gap after the kernel before, which
    // was measured as the time a kernel takes beyond its queued time, its gap included.
    if (!opt_.timed_kernels) {
      const double gap = opt_.compute.launch_overhead_s;
      const bool blocking = opt_.blocking_launch_s >= 0;
      for (size_t i = 0; i < s.size(); ++i) {
        const Op& op = prog.ops[i];
        if (!blocking)
          s[i] = queued_seconds(op, s[i], gap, gpu, opt_.compute);
        else if (s[i] > 0 && timed_kernel_count(op, gpu, opt_.compute) > 0)
          s[i] = queued_seconds(op, s[i] + gap, 0, gpu, opt_.compute);
      }
    }
    result_.power_clock =
        std::min(result_.power_clock, apply_power_cap(prog.ops, s, opt_.compute.launch_overhead_s, gpu, opt_.compute));
    std::vector<SimTime> out(s.size());
    for (size_t i = 0; i < s.size(); ++i) out[i] = SimTime::from_seconds(s[i]);
    return out;
  }

  void try_start(uint32_t slot, uint32_t stream) {
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
        const GpuSpec& g = topo_.gpu_models()[static_cast<size_t>(
            topo_.gpu_model_of(plan_.rank_gpu[static_cast<size_t>(r.rank)]))];
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

  void arrive(uint32_t slot, uint32_t op_index, const Op& op) {
    RankState& r = slots_[slot];
    const int32_t group = plan_.group_of(r.rank, op.group);
    if (group < 0)
      throw std::runtime_error("rank " + std::to_string(r.rank) + " has no " + std::string(to_string(op.group)) +
                               " group");
    const uint32_t seq = r.coll_seq[static_cast<size_t>(op.group)]++;
    const uint64_t key = (static_cast<uint64_t>(group) << 32) | seq;
    Rendezvous& rv = rendezvous_[key];
    rv.members.emplace_back(slot, op_index);
    if (++rv.arrived < group_expected_[static_cast<size_t>(group)]) return;
    const CollectiveResult& c = collective_cost(group, op);
    launch(c.expansion, group_gpus_[static_cast<size_t>(group)], c, std::move(rv.members));
    rendezvous_.erase(key);
  }

  // The k-th send a -> b meets the k-th receive on b from a.
  void arrive_p2p(uint32_t slot, uint32_t op_index, const Op& op) {
    RankState& r = slots_[slot];
    const int32_t peer = p2p_peer(plan_, r.rank, op);
    if (peer < 0)
      throw std::runtime_error("rank " + std::to_string(r.rank) + ": " + std::string(to_string(op.kind)) +
                               " to a peer outside its " + std::string(to_string(op.group)) + " group");
    const int32_t src = op.kind == OpKind::Send ? r.rank : peer;
    const int32_t dst = op.kind == OpKind::Send ? peer : r.rank;
    // Sends and receives match per (source, destination, phase), in issue order.
    const auto pair = std::make_tuple(src, dst, static_cast<int>(op.phase));
    const uint32_t seq = (op.kind == OpKind::Send ? send_seq_ : recv_seq_)[pair]++;
    const auto key = std::make_tuple(src, dst, static_cast<int>(op.phase), seq);
    Rendezvous& rv = p2p_[key];
    rv.members.emplace_back(slot, op_index);
    const uint32_t expected =
        static_cast<uint32_t>(simulated_[static_cast<size_t>(src)]) + simulated_[static_cast<size_t>(dst)];
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
        if (md < 0 || md >= plan_.world_size || plan_.mirror_of[static_cast<size_t>(md)] != dst) continue;
        const auto k = static_cast<int32_t>(gpus.size());
        gpus.push_back(plan_.rank_gpu[static_cast<size_t>(m)]);
        gpus.push_back(plan_.rank_gpu[static_cast<size_t>(md)]);
        one.transfers.push_back(Transfer{k, k + 1, static_cast<double>(op.bytes)});
      }
    }
    c.expansion.steps.push_back(std::move(one));
    if (!flow_) {
      const auto memo_key = std::make_tuple(gpus[0], gpus[1], op.bytes);
      auto it = p2p_memo_.find(memo_key);
      if (it == p2p_memo_.end()) {
        CollectiveCost cost = net_.run(c.expansion, gpus);
        // A calibrated send/recv inside a node replaces the model's time.
        const double measured =
            measured_p2p_seconds(opt_.network, layout_of(topo_, gpus), static_cast<double>(op.bytes));
        it = p2p_memo_
                 .emplace(memo_key, std::make_pair(SimTime::from_seconds(measured >= 0 ? measured : cost.seconds),
                                                   std::move(cost.link_bytes)))
                 .first;
      }
      c.duration = it->second.first;
      c.link_bytes = it->second.second;
    }
    // A receive posted early waits for its sender; that wait is pipeline idle time, not
    // communication: the span starts when the transfer does.
    for (auto [s2, o2] : rv.members) slots_[s2].stream_start[slots_[s2].program->ops[o2].stream] = sim_.now();
    launch(c.expansion, gpus, c, std::move(rv.members));
    p2p_.erase(key);
  }

  // Runs a collective (or p2p transfer) for its members: at once in the analytic
  // model, as flows in the flow model.
  void launch(const Expansion& e, const std::vector<int32_t>& gpus, const CollectiveResult& c,
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

  void rearm_wake() {
    const SimTime t = flow_->next_time();
    if (t == SimTime::max()) return;
    sim_.schedule_at(t, Completion{kWake, ++wake_version_});
  }

  void network_wake() {
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

  const CollectiveResult& collective_cost(int32_t group, const Op& op) {
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

  CollectiveResult cost_collective(int32_t group, const Op& op) {
    const auto& gpus = group_gpus_[static_cast<size_t>(group)];
    const GroupLayout layout = layout_of(topo_, gpus);
    const double bytes = static_cast<double>(op.bytes);
    std::optional<Algorithm> algo = opt_.algorithm;
    // A fixed algorithm that cannot run this operation on this group falls back to auto
    // (e.g. ring for an all-to-all, NVLS for a group spanning nodes or under LL).
    if (algo && (!unsupported_reason(op.collective, *algo, layout).empty() ||
                 (opt_.protocol && !unsupported_protocol_reason(*algo, *opt_.protocol).empty())))
      algo.reset();
    const CollectiveChoice choice =
        choose_collective(op.collective, bytes, layout, gpus, net_, opt_.network, algo, opt_.protocol);
    CollectiveResult r;
    r.expansion =
        expand_collective(CollectiveRequest{op.collective, choice.algo, choice.proto, bytes, 0}, layout, opt_.network);
    if (!flow_) {
      CollectiveCost cost = net_.run(r.expansion, gpus);
      // A calibrated fit for this collective inside a node replaces the model's time.
      r.duration = SimTime::from_seconds(choice.measured ? choice.predicted_s : cost.seconds);
      r.link_bytes = std::move(cost.link_bytes);
    }
    return r;
  }

  // An NCCL kernel on the GPU (waiting or moving data) holds SMs: a kernel beside a
  // collective, a send or receive posted ahead of compute, or a userbuffers kernel runs at
  // the profile's measured slowdown, else at the one the NCCL kernel's channels imply on
  // this GPU (beside_collective, beside_p2p); the largest of those in flight.
  double beside(RankState& r, const Op& op) {
    if (r.waiting_p2p == 0 && r.waiting_coll == 0 && r.waiting_sms == 0) return 1.0;
    const size_t k = overlap_kind_index(op.kind);
    const BesideNccl& b = beside_nccl_of(r.rank);
    double ub = 1.0;
    for (const auto& [held, f] : r.sms_factors) ub = std::max(ub, f[k]);
    return std::max({r.waiting_p2p_node > 0 ? b.p2p_node[k] : 1.0, r.waiting_p2p_net > 0 ? b.p2p_net[k] : 1.0,
                     r.waiting_coll > 0 ? b.collective[k] : 1.0, ub});
  }

  // A bulk userbuffers kernel started or ended on the slot's GPU: each kernel in flight runs
  // the rest of its work at the factor that holds from now on (its completion event moves;
  // complete() drops the old one).
  void retime(uint32_t slot) {
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

  void complete(uint32_t slot, uint32_t op_index) {
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
    if (!r.finished.empty() && r.first_open < r.finished.size())
      try_start(slot, r.program->ops[r.first_open].stream);
  }

  // Exposed communication: comm time during which the compute stream was idle.
  void summarize() {
    // Spans were collected per rank; each rank's are sorted by (start, stream, op) and
    // appended in rank order.
    std::vector<uint32_t> order(slots_.size());
    for (uint32_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return slots_[a].rank < slots_[b].rank; });
    size_t total = 0;
    for (const auto& v : slot_spans_) total += v.size();
    if (opt_.keep_spans) result_.spans.reserve(total);
    const double n = static_cast<double>(slots_.size());
    result_.rank_compute_busy_s.assign(static_cast<size_t>(plan_.world_size), 0.0);
    for (uint32_t slot : order) {
      std::vector<SpanRecord>& spans = slot_spans_[slot];
      std::sort(spans.begin(), spans.end(), [](const SpanRecord& a, const SpanRecord& b) {
        if (a.start_ps != b.start_ps) return a.start_ps < b.start_ps;
        if (a.stream != b.stream) return a.stream < b.stream;
        return a.op < b.op;
      });
      if (spans.empty()) continue;
      const int32_t rank = spans.front().rank;
      const Program& prog = plan_.programs[plan_.rank_program[static_cast<size_t>(rank)]];
      std::vector<std::pair<int64_t, int64_t>> compute, comm_all;
      std::array<std::vector<std::pair<int64_t, int64_t>>, kGroupKinds> comm;
      for (const SpanRecord& s : spans) {
        const Op& op = prog.ops[s.op];
        if (op.kind == OpKind::Collective || op.kind == OpKind::Send || op.kind == OpKind::Recv) {
          comm[static_cast<size_t>(op.group)].emplace_back(s.start_ps, s.end_ps);
          comm_all.emplace_back(s.start_ps, s.end_ps);
        } else {
          // The launch gap before a kernel occupies its stream too: it is neither a
          // bubble nor communication.
          const int64_t gap = s.end_ps > s.start_ps ? launch_gap_.picoseconds() : 0;
          compute.emplace_back(s.start_ps - gap, s.end_ps);
        }
      }
      auto merged = [](std::vector<std::pair<int64_t, int64_t>> v) {
        if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
        std::vector<std::pair<int64_t, int64_t>> out;
        for (auto iv : v) {
          if (!out.empty() && iv.first <= out.back().second)
            out.back().second = std::max(out.back().second, iv.second);
          else
            out.push_back(iv);
        }
        return out;
      };
      const auto busy = merged(compute);
      // In picoseconds, exactly: a step with no bubble reports 0, not rounding noise.
      auto exposed = [&](const std::vector<std::pair<int64_t, int64_t>>& v) {
        int64_t total = 0;
        size_t j = 0;
        for (auto [a, b] : merged(v)) {
          int64_t covered = 0;
          while (j < busy.size() && busy[j].second <= a) ++j;
          for (size_t k = j; k < busy.size() && busy[k].first < b; ++k)
            covered += std::min(b, busy[k].second) - std::max(a, busy[k].first);
          total += (b - a) - covered;
        }
        return total;
      };
      const int64_t exposed_all = exposed(comm_all);
      result_.exposed_comm_s += static_cast<double>(exposed_all) * 1e-12 / n;
      // Busy is the union of the kernels' intervals (a gap behind a kernel on another stream,
      // or two compute streams at once, counts once): never more than the step.
      int64_t busy_ps = 0;
      for (auto [a, b] : busy) busy_ps += b - a;
      result_.compute_busy_s += static_cast<double>(busy_ps) * 1e-12 / n;
      result_.rank_compute_busy_s[static_cast<size_t>(rank)] += static_cast<double>(busy_ps) * 1e-12;
      result_.bubble_s +=
          static_cast<double>(std::max<int64_t>(0, sim_.now().picoseconds() - busy_ps - exposed_all)) * 1e-12 / n;
      for (size_t k = 0; k < kGroupKinds; ++k)
        result_.exposed_comm_by_kind[k] += static_cast<double>(exposed(comm[k])) * 1e-12 / n;
      if (opt_.keep_spans) result_.spans.insert(result_.spans.end(), spans.begin(), spans.end());
      std::vector<SpanRecord>().swap(spans);
    }
  }

  const Plan& plan_;
  Topology& topo_;
  const ExecOptions& opt_;
  AnalyticNetwork net_;
  SimTime launch_gap_;
  SimTime blocking_gap_;  // a kernel's start after its issue when launches block
  uint64_t completed_ = 0, total_ops_ = 0;
  std::unique_ptr<FlowNetwork> flow_;
  uint32_t wake_version_ = 0;
  std::map<uint64_t, std::vector<std::pair<uint32_t, uint32_t>>> in_flight_;
  std::vector<uint8_t> simulated_;
  std::vector<std::vector<int32_t>> mirrors_;  // flow network: representative -> the ranks it stands for
  std::map<std::tuple<int32_t, int32_t, int>, uint32_t> send_seq_, recv_seq_;
  std::map<std::tuple<int32_t, int32_t, int, uint32_t>, Rendezvous> p2p_;
  std::map<std::tuple<int32_t, int32_t, int64_t>, std::pair<SimTime, std::vector<std::pair<uint32_t, double>>>>
      p2p_memo_;
  Simulation<Completion> sim_;
  std::vector<ProgramInfo> infos_;
  std::vector<uint64_t> model_mask_;  // per simulated rank: the GPU models it stands for (mixed clusters)
  std::vector<BesideNccl> beside_nccl_;  // beside_nccl_of, per GPU model
  std::map<std::pair<uint32_t, uint64_t>, std::vector<SimTime>> mixed_compute_;
  std::vector<RankState> slots_;
  std::vector<uint32_t> group_expected_;
  std::vector<std::vector<int32_t>> group_gpus_;
  std::vector<uint8_t> group_spans_nodes_;  // a group's GPUs are on more than one node
  std::unordered_map<uint64_t, Rendezvous> rendezvous_;
  std::map<std::tuple<int32_t, int, int64_t>, CollectiveResult> memo_;
  std::vector<std::vector<SpanRecord>> slot_spans_;  // by slot, in completion order
  ExecResult result_;
};

}  // namespace

ExecResult execute_plan(const Plan& plan, Topology& topo, const ExecOptions& opt) {
  return Executor(plan, topo, opt).run();
}

}  // namespace clustersim
