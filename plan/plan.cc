#include "plan/plan.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>

namespace clustersim {

std::string_view to_string(OpKind k) {
  switch (k) {
    case OpKind::Gemm:
      return "gemm";
    case OpKind::Attention:
      return "attention";
    case OpKind::Memory:
      return "memory";
    case OpKind::Collective:
      return "collective";
    case OpKind::Send:
      return "send";
    case OpKind::Recv:
      return "recv";
  }
  return "?";
}

static constexpr CollectiveKind kCollectives[] = {CollectiveKind::AllReduce,     CollectiveKind::AllGather,
                                                  CollectiveKind::ReduceScatter, CollectiveKind::AllToAll,
                                                  CollectiveKind::Broadcast,     CollectiveKind::Reduce};

std::string_view to_string(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::AllReduce:
      return "all-reduce";
    case CollectiveKind::AllGather:
      return "all-gather";
    case CollectiveKind::ReduceScatter:
      return "reduce-scatter";
    case CollectiveKind::AllToAll:
      return "all-to-all";
    case CollectiveKind::Broadcast:
      return "broadcast";
    case CollectiveKind::Reduce:
      return "reduce";
  }
  return "?";
}

bool parse_collective(std::string_view s, CollectiveKind& out) {
  for (CollectiveKind k : kCollectives) {
    if (s == to_string(k)) {
      out = k;
      return true;
    }
  }
  return false;
}

std::string_view to_string(GroupKind k) {
  switch (k) {
    case GroupKind::TP:
      return "tp";
    case GroupKind::DP:
      return "dp";
    case GroupKind::PP:
      return "pp";
    case GroupKind::CP:
      return "cp";
    case GroupKind::EP:
      return "ep";
    case GroupKind::EDP:
      return "edp";
    case GroupKind::World:
      return "world";
  }
  return "?";
}

std::string_view to_string(Phase p) {
  switch (p) {
    case Phase::Forward:
      return "forward";
    case Phase::Backward:
      return "backward";
    case Phase::Optimizer:
      return "optimizer";
    case Phase::Other:
      return "other";
  }
  return "?";
}

std::string_view to_string(MemAccess a) {
  switch (a) {
    case MemAccess::Streaming:
      return "streaming";
    case MemAccess::DynamicCast:
      return "dynamic-cast";
    case MemAccess::MultiTensor:
      return "multi-tensor";
    case MemAccess::Fp8CastTranspose:
      return "fp8-cast-transpose";
    case MemAccess::RandomMask:
      return "random-mask";
    case MemAccess::Scatter:
      return "scatter";
    case MemAccess::IndexPut:
      return "index-put";
    case MemAccess::HostSync:
      return "host-sync";
    case MemAccess::MixedSoftmax:
      return "mixed-softmax";
    case MemAccess::CudaCoreDecode:
      return "cuda-core-decode";
    case MemAccess::StridedCopy:
      return "strided-copy";
    case MemAccess::CatCopy:
      return "cat-copy";
    case MemAccess::TanhGelu:
      return "tanh-gelu";
    case MemAccess::BroadcastLoop:
      return "broadcast-loop";
  }
  return "?";
}

uint32_t Program::add(const Op& op, std::initializer_list<uint32_t> after) {
  return add(op, std::vector<uint32_t>(after));
}

uint32_t Program::add(const Op& op, const std::vector<uint32_t>& after) {
  Op o = op;
  o.dep_begin = static_cast<uint32_t>(deps.size());
  o.dep_count = 0;
  const auto self = static_cast<uint32_t>(ops.size());
  for (uint32_t d : after) {
    if (d >= self) throw std::logic_error("plan: an op may only depend on earlier ops");
    deps.push_back(d);
    ++o.dep_count;
  }
  ops.push_back(o);
  return self;
}

uint8_t Program::stream(std::string_view name) {
  for (size_t i = 0; i < streams.size(); ++i)
    if (streams[i] == name) return static_cast<uint8_t>(i);
  if (streams.size() >= 255) throw std::logic_error("plan: too many streams");
  streams.emplace_back(name);
  return static_cast<uint8_t>(streams.size() - 1);
}

uint32_t Plan::intern(std::string_view name) {
  if (indexed_ > names.size()) name_index_.clear(), indexed_ = 0;  // the table was replaced
  for (; indexed_ < names.size(); ++indexed_) name_index_.emplace(names[indexed_], static_cast<uint32_t>(indexed_));
  if (const auto it = name_index_.find(name); it != name_index_.end()) return it->second;
  names.emplace_back(name);
  name_index_.emplace(names.back(), static_cast<uint32_t>(names.size() - 1));
  indexed_ = names.size();
  return static_cast<uint32_t>(names.size() - 1);
}

Op Plan::make_op(std::string_view name, OpKind kind, Phase phase, int32_t layer, int32_t micro_batch, uint8_t stream,
                 DType dtype) {
  Op op;
  op.kind = kind;
  op.name = intern(name);
  op.phase = phase;
  op.layer = layer;
  op.micro_batch = micro_batch;
  op.stream = stream;
  op.dtype = dtype;
  return op;
}

int32_t Plan::add_group(GroupKind kind, std::vector<int32_t> ranks) {
  const auto id = static_cast<int32_t>(groups.size());
  for (int32_t r : ranks) rank_groups.at(static_cast<size_t>(r))[static_cast<size_t>(kind)] = id;
  groups.push_back(Group{kind, std::move(ranks)});
  return id;
}

std::vector<int32_t> Plan::representatives() const {
  std::vector<int32_t> out;
  for (int32_t r = 0; r < world_size; ++r)
    if (mirror_of[static_cast<size_t>(r)] == r) out.push_back(r);
  return out;
}

size_t Plan::total_ops() const {
  size_t n = 0;
  for (const auto& p : programs) n += p.ops.size();
  return n;
}

int32_t p2p_peer(const Plan& plan, int32_t rank, const Op& op) {
  const int32_t group = plan.group_of(rank, op.group);
  if (group < 0 || op.peer < 0) return -1;
  const auto& members = plan.groups[static_cast<size_t>(group)].ranks;
  size_t index = static_cast<size_t>(op.peer);
  if (op.relative_peer) {
    const auto self = std::find(members.begin(), members.end(), rank);
    if (self == members.end()) return -1;
    index = (static_cast<size_t>(self - members.begin()) + index) % members.size();
  }
  return index < members.size() ? members[index] : -1;
}

std::vector<P2pMatch> match_p2p(const Plan& plan) {
  // (source, destination, phase) -> ops in order, one list per side.
  std::map<std::tuple<int32_t, int32_t, int>,
           std::pair<std::vector<std::pair<int32_t, uint32_t>>, std::vector<std::pair<int32_t, uint32_t>>>>
      sides;
  for (int32_t r = 0; r < plan.world_size; ++r) {
    const Program& prog = plan.programs[plan.rank_program[static_cast<size_t>(r)]];
    for (uint32_t i = 0; i < prog.ops.size(); ++i) {
      const Op& op = prog.ops[i];
      if (op.kind != OpKind::Send && op.kind != OpKind::Recv) continue;
      const int32_t peer = p2p_peer(plan, r, op);
      if (peer < 0) continue;
      const bool send = op.kind == OpKind::Send;
      auto& side = sides[{send ? r : peer, send ? peer : r, static_cast<int>(op.phase)}];
      (send ? side.first : side.second).emplace_back(r, i);
    }
  }
  std::vector<P2pMatch> out;
  for (const auto& [key, side] : sides)
    for (size_t k = 0; k < std::min(side.first.size(), side.second.size()); ++k)
      out.push_back({side.first[k].first, side.first[k].second, side.second[k].first, side.second[k].second});
  return out;
}

double gemm_flops(const Op& op) {
  return 2.0 * static_cast<double>(op.m) * static_cast<double>(op.n) * static_cast<double>(op.k) *
         static_cast<double>(op.batch);
}

double kernel_flops(const Op& op) {
  if (is_comm(op.kind)) return 0;
  if (op.flops > 0) return op.flops;
  return op.kind == OpKind::Gemm ? gemm_flops(op) : op.kind == OpKind::Attention ? attention_flops(op) : 0.0;
}

double attention_flops(const Op& op) {
  // QK^T and PV: 2 GEMMs of 2·q·kv·d each per head; a causal mask skips about half.
  double f = 4.0 * static_cast<double>(op.batch) * static_cast<double>(op.heads) * static_cast<double>(op.q_len) *
             static_cast<double>(op.kv_len) * static_cast<double>(op.head_dim);
  return op.causal ? f * 0.5 : f;
}

}  // namespace clustersim
