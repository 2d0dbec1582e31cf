// The executor's set-up (programs, kernel times, the factors beside NCCL, collective costs)
// and its summary of a finished run (sim/executor_state.h).
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
#include "sim/executor.h"
#include "sim/executor_state.h"
#include "sim/variability.h"

namespace clustersim::exec {

void Executor::prepare() {
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
  // Each group's GPUs, and whether they span nodes.
  group_gpus_.resize(plan_.groups.size());
  group_spans_nodes_.assign(plan_.groups.size(), 0);
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    for (int32_t r : plan_.groups[g].ranks) group_gpus_[g].push_back(plan_.rank_gpu[static_cast<size_t>(r)]);
    const auto& gpus = group_gpus_[g];
    for (int32_t gpu : gpus)
      if (topo_.node_of(gpu) != topo_.node_of(gpus.front())) group_spans_nodes_[g] = 1;
  }
  // The representatives: the plan's, with the TP ranks of each stage folded onto its first
  // where their timelines provably equal it.
  rep_ = plan_.mirror_of;
  if (flow_ && !opt_.simulate_all_ranks && !mirrored_sends_alike())
    for (int32_t r = 0; r < plan_.world_size; ++r) rep_[static_cast<size_t>(r)] = r;
  fold_weight_.assign(static_cast<size_t>(plan_.world_size), 1);
  tp_rep_.resize(static_cast<size_t>(plan_.world_size));
  for (int32_t r = 0; r < plan_.world_size; ++r) tp_rep_[static_cast<size_t>(r)] = r;
  fold_tensor_parallel();
  for (int32_t r = 0; r < plan_.world_size; ++r) {
    if (!opt_.simulate_all_ranks && rep_[static_cast<size_t>(r)] != r) continue;
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
  result_.representative = rep_;
  // How many simulated members each group has: a collective starts when they all arrive.
  simulated_.assign(static_cast<size_t>(plan_.world_size), 0);
  for (int32_t r : result_.simulated_ranks) simulated_[static_cast<size_t>(r)] = 1;
  if (flow_ && !opt_.simulate_all_ranks) {
    mirrors_.assign(static_cast<size_t>(plan_.world_size), {});
    for (int32_t r = 0; r < plan_.world_size; ++r) {
      const int32_t rep = rep_[static_cast<size_t>(r)];
      if (rep != r) mirrors_[static_cast<size_t>(rep)].push_back(r);
    }
  }
  group_expected_.assign(plan_.groups.size(), 0);
  for (size_t g = 0; g < plan_.groups.size(); ++g)
    for (int32_t r : plan_.groups[g].ranks) group_expected_[g] += simulated_[static_cast<size_t>(r)];
}

const BesideNccl& Executor::beside_nccl_of(int32_t r) {
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

bool Executor::network_peer(int32_t rank, const Op& op) const {
  const int32_t group = plan_.group_of(rank, op.group);
  if (group < 0 || p2p_peer(plan_, rank, op) < 0) return false;
  return group_spans_nodes_[static_cast<size_t>(group)] != 0;
}

const std::vector<SimTime>& Executor::compute_times_for(int32_t r, uint32_t p) {
  const auto& models = topo_.gpu_models();
  if (models.size() < 2) return infos_[p].compute_time;
  if (models.size() > 64) throw std::runtime_error("a cluster of more than 64 GPU models is not supported");
  if (model_mask_.empty()) {
    model_mask_.assign(static_cast<size_t>(plan_.world_size), 0);
    for (int32_t m = 0; m < plan_.world_size; ++m) {
      const int32_t into = opt_.simulate_all_ranks ? m : rep_[static_cast<size_t>(m)];
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

std::vector<SimTime> Executor::kernel_times(const Program& prog, const GpuSpec& gpu) {
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

CollectiveResult Executor::cost_collective(int32_t group, const Op& op) {
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

void Executor::summarize() {
  // Spans were collected per rank; each rank's are sorted by (start, stream, op) and
  // appended in rank order.
  std::vector<uint32_t> order(slots_.size());
  for (uint32_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return slots_[a].rank < slots_[b].rank; });
  size_t total = 0;
  for (const auto& v : slot_spans_) total += v.size();
  if (opt_.keep_spans) result_.spans.reserve(total);
  // The means over the simulated ranks, each counting the TP ranks folded onto it: summed in
  // whole picoseconds, exactly, so a folded run's means are the unfolded run's to the bit.
  __extension__ typedef __int128 Wide;
  Wide exposed_sum = 0, busy_sum = 0, bubble_sum = 0;
  std::array<Wide, kGroupKinds> kind_sum{};
  int64_t weight_total = 0;
  for (const RankState& st : slots_) weight_total += fold_weight_[static_cast<size_t>(st.rank)];
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
      if (is_comm(op.kind)) {
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
    const Wide w = fold_weight_[static_cast<size_t>(rank)];
    const int64_t exposed_all = exposed(comm_all);
    exposed_sum += w * exposed_all;
    // Busy is the union of the kernels' intervals (a gap behind a kernel on another stream,
    // or two compute streams at once, counts once): never more than the step.
    int64_t busy_ps = 0;
    for (auto [a, b] : busy) busy_ps += b - a;
    busy_sum += w * busy_ps;
    result_.rank_compute_busy_s[static_cast<size_t>(rank)] += static_cast<double>(busy_ps) * 1e-12;
    bubble_sum += w * std::max<int64_t>(0, sim_.now().picoseconds() - busy_ps - exposed_all);
    for (size_t k = 0; k < kGroupKinds; ++k) kind_sum[k] += w * exposed(comm[k]);
    if (opt_.keep_spans) result_.spans.insert(result_.spans.end(), spans.begin(), spans.end());
    std::vector<SpanRecord>().swap(spans);
  }
  if (weight_total == 0) return;
  const double n = static_cast<double>(weight_total);
  result_.exposed_comm_s = static_cast<double>(exposed_sum) * 1e-12 / n;
  result_.compute_busy_s = static_cast<double>(busy_sum) * 1e-12 / n;
  result_.bubble_s = static_cast<double>(bubble_sum) * 1e-12 / n;
  for (size_t k = 0; k < kGroupKinds; ++k) result_.exposed_comm_by_kind[k] = static_cast<double>(kind_sum[k]) * 1e-12 / n;
}

}  // namespace clustersim::exec
