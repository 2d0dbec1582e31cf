#include "plan/chakra.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <queue>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "plan/protobuf_wire.h"
#include "scenarios/error.h"

namespace clustersim {
namespace {

namespace fs = std::filesystem;
using wire::Reader;
using wire::Writer;

// AttributeProto fields: name 1; values int32 7, int64 9, uint64 13, bool 27, string 29,
// double 3. Node fields: id 1, name 2, type 3, ctrl_deps 4, data_deps 5,
// start_time_micros 6, duration_micros 7, attr 10. GlobalMetadata: version 1, attr 2.
// One attribute: its name, then its value as `value` writes it.
template <typename Value>
std::string attr(const std::string& name, Value value) {
  Writer w;
  w.bytes(1, name);
  value(w);
  return w.str();
}
std::string attr_i64(const std::string& name, int64_t v) {
  return attr(name, [&](Writer& w) { w.i64(9, v); });
}
std::string attr_i32(const std::string& name, int32_t v) {
  return attr(name, [&](Writer& w) { w.i64(7, v); });
}
std::string attr_u64(const std::string& name, uint64_t v) {
  return attr(name, [&](Writer& w) { w.u64(13, v); });
}
std::string attr_bool(const std::string& name, bool v) {
  return attr(name, [&](Writer& w) { w.boolean(27, v); });
}
std::string attr_str(const std::string& name, const std::string& v) {
  return attr(name, [&](Writer& w) { w.bytes(29, v); });
}
std::string attr_f64(const std::string& name, double v) {
  return attr(name, [&](Writer& w) { w.f64(3, v); });
}

void append_delimited(std::string& out, const std::string& msg) {
  Writer w;
  w.varint(msg.size());
  out += w.str();
  out += msg;
}

}  // namespace

uint32_t chakra_comm_type(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::AllReduce:
      return 0;
    case CollectiveKind::Reduce:
      return 1;
    case CollectiveKind::AllGather:
      return 2;
    case CollectiveKind::Broadcast:
      return 5;
    case CollectiveKind::AllToAll:
      return 6;
    case CollectiveKind::ReduceScatter:
      return 7;
  }
  return 0;
}

std::vector<ChakraFile> plan_to_chakra(const Plan& plan, const std::string& prefix,
                                       const std::vector<std::vector<double>>& seconds) {
  if (seconds.size() != plan.programs.size())
    throw std::invalid_argument("plan_to_chakra: op times for " + std::to_string(seconds.size()) +
                                " programs, the plan has " + std::to_string(plan.programs.size()));
  for (size_t p = 0; p < seconds.size(); ++p)
    if (seconds[p].size() != plan.programs[p].ops.size())
      throw std::invalid_argument("plan_to_chakra: program " + std::to_string(p) + " has " +
                                  std::to_string(plan.programs[p].ops.size()) + " ops and " +
                                  std::to_string(seconds[p].size()) + " op times");
  std::vector<ChakraFile> files;
  std::set<int32_t> used_groups;
  for (int32_t r = 0; r < plan.world_size; ++r) {
    const uint32_t pi = plan.rank_program[static_cast<size_t>(r)];
    const Program& prog = plan.programs[pi];
    std::string out;
    {
      Writer meta;
      meta.bytes(1, "0.0.4");
      meta.bytes(2, attr_str("generator", "clustersim"));
      meta.bytes(2, attr_i64("rank", r));
      meta.bytes(2, attr_i64("world_size", plan.world_size));
      append_delimited(out, meta.str());
    }
    std::vector<int64_t> last_on_stream(prog.streams.size(), -1);
    std::map<std::tuple<int32_t, int32_t, int>, int32_t> seq;  // (src, dst, phase) -> sends / receives so far
    for (uint32_t i = 0; i < prog.ops.size(); ++i) {
      const Op& op = prog.ops[i];
      Writer n;
      n.u64(1, i);
      n.bytes(2, plan.names[op.name]);
      const uint32_t type = op.kind == OpKind::Collective ? 7 : op.kind == OpKind::Send ? 5
                                                               : op.kind == OpKind::Recv ? 6
                                                                                         : 4;
      n.u64(3, type);
      std::vector<uint64_t> data(prog.deps.begin() + op.dep_begin, prog.deps.begin() + op.dep_begin + op.dep_count);
      std::vector<uint64_t> ctrl;
      const int64_t prev = last_on_stream[op.stream];
      if (prev >= 0 && std::find(data.begin(), data.end(), static_cast<uint64_t>(prev)) == data.end())
        ctrl.push_back(static_cast<uint64_t>(prev));
      last_on_stream[op.stream] = i;
      n.packed(4, ctrl);
      n.packed(5, data);
      const double t = seconds[pi][i];
      if (t > 0) n.u64(7, static_cast<uint64_t>(std::llround(t * 1e6)));
      n.bytes(10, attr_bool("is_cpu_op", false));
      n.bytes(10, attr_str("stream", prog.streams[op.stream]));
      n.bytes(10, attr_str("op_kind", std::string(to_string(op.kind))));
      n.bytes(10, attr_i64("layer", op.layer));
      n.bytes(10, attr_i64("micro_batch", op.micro_batch));
      n.bytes(10, attr_str("phase", std::string(to_string(op.phase))));
      if (op.kind == OpKind::Collective) {
        const int32_t g = plan.group_of(r, op.group);
        used_groups.insert(g);
        n.bytes(10, attr_i64("comm_type", chakra_comm_type(op.collective)));
        n.bytes(10, attr_i64("comm_size", op.bytes));
        n.bytes(10, attr_str("pg_name", std::to_string(g)));
        n.bytes(10, attr_str("group_kind", std::string(to_string(op.group))));
        if (op.holds_sms) n.bytes(10, attr_bool("holds_sms", true));
        if (op.held_sms > 0) n.bytes(10, attr_i32("held_sms", op.held_sms));
      } else if (op.kind == OpKind::Send || op.kind == OpKind::Recv) {
        const int32_t peer = p2p_peer(plan, r, op);
        const int32_t src = op.kind == OpKind::Send ? r : peer, dst = op.kind == OpKind::Send ? peer : r;
        n.bytes(10, attr_i32("comm_src", src));
        n.bytes(10, attr_i32("comm_dst", dst));
        n.bytes(10, attr_i32("comm_tag", seq[{src, dst, static_cast<int>(op.phase)}]++));
        n.bytes(10, attr_i64("comm_size", op.bytes));
        // The communicator it runs on (PP's, CP's ring): NCCL gives a posted send or receive
        // the channels its whole communicator allows, so the group travels with it.
        if (const int32_t g = plan.group_of(r, op.group); g >= 0) {
          used_groups.insert(g);
          n.bytes(10, attr_str("pg_name", std::to_string(g)));
          n.bytes(10, attr_str("group_kind", std::string(to_string(op.group))));
        }
        if (op.holds_sms) n.bytes(10, attr_bool("holds_sms", true));
        if (op.held_sms > 0) n.bytes(10, attr_i32("held_sms", op.held_sms));
        if (op.sm_margin) n.bytes(10, attr_bool("sm_margin", true));
        if (op.overlaps_compute) n.bytes(10, attr_bool("overlaps_compute", true));
      } else {
        const double flops = kernel_flops(op);
        n.bytes(10, attr_i64("num_ops", static_cast<int64_t>(std::llround(flops))));
        n.bytes(10, attr_u64("tensor_size", static_cast<uint64_t>(op.bytes_read + op.bytes_written)));
        n.bytes(10, attr_f64("duration_s", t));
        // The kernel's shape, so an import costs it (and the real backend runs it) as the
        // plan did, not by its recorded time alone.
        if (op.fixed_seconds <= 0) {
          n.bytes(10, attr_str("dtype", std::string(to_string(op.dtype))));
          n.bytes(10, attr_i64("shape_m", op.m));
          n.bytes(10, attr_i64("shape_n", op.n));
          n.bytes(10, attr_i64("shape_k", op.k));
          n.bytes(10, attr_i64("shape_batch", op.batch));
          n.bytes(10, attr_i64("bytes_read", op.bytes_read));
          n.bytes(10, attr_i64("bytes_written", op.bytes_written));
          n.bytes(10, attr_i64("mem_access", static_cast<int64_t>(op.access)));
          n.bytes(10, attr_f64("flops", op.flops));
          if (op.recompute) n.bytes(10, attr_bool("recompute", true));
          if (op.kind == OpKind::Attention || op.access == MemAccess::CudaCoreDecode) {
            n.bytes(10, attr_i64("heads", op.heads));
            n.bytes(10, attr_i64("kv_heads", op.kv_heads));
            n.bytes(10, attr_i64("q_len", op.q_len));
            n.bytes(10, attr_i64("kv_len", op.kv_len));
            n.bytes(10, attr_i64("head_dim", op.head_dim));
            n.bytes(10, attr_bool("causal", op.causal));
            if (op.dropout) n.bytes(10, attr_bool("dropout", true));
          }
        }
      }
      append_delimited(out, n.str());
    }
    files.push_back({prefix + "." + std::to_string(r) + ".et", std::move(out)});
  }
  std::string json = "{";
  bool first = true;
  for (int32_t g : used_groups) {
    json += std::string(first ? "\n" : ",\n") + "  \"" + std::to_string(g) + "\": [";
    first = false;
    const auto& ranks = plan.groups[static_cast<size_t>(g)].ranks;
    for (size_t i = 0; i < ranks.size(); ++i) json += (i ? ", " : "") + std::to_string(ranks[i]);
    json += "]";
  }
  json += "\n}\n";
  files.push_back({"comm_group.json", json});
  return files;
}

bool chakra_trace_name(const std::string& file, std::string& workload, std::string& rank) {
  if (file.size() <= 3 || file.compare(file.size() - 3, 3, ".et") != 0) return false;
  const size_t dot = file.rfind('.', file.size() - 4);
  if (dot == std::string::npos) return false;
  rank = file.substr(dot + 1, file.size() - dot - 4);
  if (rank.empty() || rank.find_first_not_of("0123456789") != std::string::npos) return false;
  workload = file.substr(0, dot);
  return true;
}

double chakra_flops_per_rank(const Plan& plan) {
  if (plan.world_size <= 0) return 0;
  double flops = 0;
  for (int32_t r = 0; r < plan.world_size; ++r)
    for (const Op& op : plan.programs[plan.rank_program[static_cast<size_t>(r)]].ops)
      // A shaped memory kernel's elementwise arithmetic is not counted, as a planned run's
      // hardware FLOPs leave it out (GEMMs and attention only); a foreign trace's compute
      // node, of no known class, brings its num_ops.
      if (op.kind != OpKind::Memory || op.fixed_seconds > 0) flops += kernel_flops(op);
  return flops / plan.world_size;
}

}  // namespace clustersim
