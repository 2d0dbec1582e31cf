// Chakra execution traces read back into a Plan: the decoder of the protobuf stream and the
// import that turns each rank's nodes into ops (plan/chakra.h).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <queue>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "plan/chakra.h"
#include "plan/protobuf_wire.h"
#include "scenarios/error.h"
#include "scenarios/units.h"
#include "scenarios/yaml_tree.h"

namespace clustersim {
namespace {

namespace fs = std::filesystem;
using wire::Reader;

}  // namespace

ChakraTrace decode_chakra(const std::string& bytes) {
  ChakraTrace t;
  Reader outer(bytes);
  bool have_meta = false;
  while (!outer.done()) {
    const std::string_view msg = outer.take(outer.varint());
    Reader r(msg);
    if (!have_meta) {
      have_meta = true;
      while (!r.done()) {
        const wire::Field f = r.field();
        if (f.number == 1 && f.type == wire::kLength) t.version = std::string(f.data);
      }
      continue;
    }
    ChakraNode n;
    while (!r.done()) {
      const wire::Field f = r.field();
      switch (f.number) {
        case 1:
          n.id = f.value;
          break;
        case 2:
          n.name = std::string(f.data);
          break;
        case 3:
          n.type = static_cast<uint32_t>(f.value);
          break;
        case 4:
          Reader::append_varints(f, n.ctrl_deps);
          break;
        case 5:
          Reader::append_varints(f, n.data_deps);
          break;
        case 7:
          n.duration_micros = f.value;
          break;
        case 10: {
          Reader a(f.data);
          std::string name;
          wire::Field value;
          bool have_value = false;
          while (!a.done()) {
            const wire::Field af = a.field();
            if (af.number == 1)
              name = std::string(af.data);
            else if (af.number != 2) {
              value = af;
              have_value = true;
            }
          }
          if (!have_value) break;
          const auto i = static_cast<int64_t>(value.value);
          if (name == "num_ops")
            n.num_ops = i;
          else if (name == "tensor_size")
            n.tensor_size = value.value;
          else if (name == "comm_type")
            n.comm_type = i;
          else if (name == "comm_size")
            n.comm_size = i;
          else if (name == "comm_src")
            n.comm_src = static_cast<int32_t>(i);
          else if (name == "comm_dst")
            n.comm_dst = static_cast<int32_t>(i);
          else if (name == "comm_tag")
            n.comm_tag = static_cast<int32_t>(i);
          else if (name == "holds_sms")
            n.holds_sms = value.value != 0;
          else if (name == "held_sms")
            n.held_sms = static_cast<uint16_t>(std::clamp<int64_t>(i, 0, 4096));
          else if (name == "sm_margin")
            n.sm_margin = value.value != 0;
          else if (name == "overlaps_compute")
            n.overlaps_compute = value.value != 0;
          else if (name == "pg_name" && value.type == wire::kLength)
            n.pg_name = std::string(value.data);
          else if (name == "duration_s" && value.type == wire::kFixed64)
            n.duration_s = value.as_double();
          else if (name == "stream" && value.type == wire::kLength)
            n.stream = std::string(value.data);
          else if (name == "group_kind" && value.type == wire::kLength)
            n.group_kind = std::string(value.data);
          else if (name == "phase" && value.type == wire::kLength)
            n.phase = std::string(value.data);
          else if (name == "op_kind" && value.type == wire::kLength)
            n.op_kind = std::string(value.data);
          else if (name == "dtype" && value.type == wire::kLength)
            n.dtype = std::string(value.data);
          else if (name == "flops" && value.type == wire::kFixed64)
            n.shape.flops = value.as_double();
          else if (name == "causal")
            n.shape.causal = value.value != 0;
          else if (name == "dropout")
            n.shape.dropout = value.value != 0;
          else if (name == "recompute")
            n.shape.recompute = value.value != 0;
          else if (name.rfind("shape_", 0) == 0 || name == "bytes_read" || name == "bytes_written" ||
                   name == "mem_access" || name == "heads" || name == "kv_heads" || name == "q_len" ||
                   name == "kv_len" || name == "head_dim") {
            // Sizes past 2^50 are no kernel: the node keeps its recorded time instead.
            if (i < 0 || i > (int64_t{1} << 50)) {
              n.shape_invalid = true;
              break;
            }
            Op& o = n.shape;
            if (name == "shape_m")
              o.m = i;
            else if (name == "shape_n")
              o.n = i;
            else if (name == "shape_k")
              o.k = i;
            else if (name == "shape_batch")
              o.batch = i;
            else if (name == "bytes_read")
              o.bytes_read = i;
            else if (name == "bytes_written")
              o.bytes_written = i;
            else if (name == "mem_access")
              o.access = i >= 0 && i <= static_cast<int64_t>(kLastMemAccess) ? static_cast<MemAccess>(i)
                                                                             : MemAccess::Streaming;
            else if (name == "heads")
              o.heads = i;
            else if (name == "kv_heads")
              o.kv_heads = i;
            else if (name == "q_len")
              o.q_len = i;
            else if (name == "kv_len")
              o.kv_len = i;
            else if (name == "head_dim")
              o.head_dim = i;
          }
          break;
        }
        default:
          break;
      }
    }
    t.nodes.push_back(std::move(n));
  }
  if (!have_meta) throw wire::ParseError("no GlobalMetadata message");
  return t;
}

namespace {

// Whether a compute node carries a whole kernel shape of its kind (and a dtype).
bool has_shape(const ChakraNode& n, OpKind kind) {
  DType d;
  if (n.shape_invalid || n.dtype.empty() || !parse_dtype(n.dtype, d)) return false;
  const Op& s = n.shape;
  const int64_t limit = int64_t{1} << 24;  // a dimension past this is no kernel anyone runs
  switch (kind) {
    case OpKind::Gemm:
      return s.m > 0 && s.n > 0 && s.k > 0 && s.batch > 0 && s.m <= limit && s.n <= limit && s.k <= limit &&
             s.batch <= limit;
    case OpKind::Attention:
      return s.batch > 0 && s.heads > 0 && s.kv_heads > 0 && s.heads % s.kv_heads == 0 && s.q_len > 0 && s.kv_len > 0 &&
             s.head_dim > 0 && s.batch <= limit && s.heads <= limit && s.q_len <= limit && s.kv_len <= limit &&
             s.head_dim <= 1024;
    case OpKind::Memory:  // a host wait moves nothing: its counts of waits and dispatches are its shape
      if (s.access == MemAccess::HostSync && (s.m > limit || s.n > limit || s.k > limit || s.batch > limit))
        return false;
      return s.bytes_read + s.bytes_written > 0 || (s.access == MemAccess::HostSync && (s.m > 0 || s.k > 0));
    default:
      return false;
  }
}

template <typename E, size_t N>
bool name_to(const std::string& s, const std::array<E, N>& all, E& out) {
  for (E e : all)
    if (to_string(e) == s) {
      out = e;
      return true;
    }
  return false;
}
constexpr std::array<GroupKind, 7> kKinds = {GroupKind::TP, GroupKind::DP,  GroupKind::PP,   GroupKind::CP,
                                             GroupKind::EP, GroupKind::EDP, GroupKind::World};
constexpr std::array<Phase, 4> kPhases = {Phase::Forward, Phase::Backward, Phase::Optimizer, Phase::Other};

[[noreturn]] void bad(const std::string& file, const std::string& what) {
  throw InputError(SourceMark{file, 0, 0}, what);
}

}  // namespace

Plan plan_from_chakra(const std::string& dir, const GpuSpec& gpu) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    bad(dir, "workload.chakra: not a directory, expected a folder of <name>.<rank>.et files");
  // The traces, by rank.
  std::map<int64_t, fs::path> by_rank;
  std::string prefix;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string workload, digits;
    if (!e.is_regular_file() || !chakra_trace_name(e.path().filename().string(), workload, digits)) continue;
    if (prefix.empty()) prefix = workload;
    if (workload != prefix)
      bad(e.path().string(), "traces of two workloads in one folder: '" + prefix + "' and '" + workload + "'");
    if (digits.size() > 7) bad(e.path().string(), "rank number past 2^20");
    // One trace a rank: NAME.1.et and NAME.01.et are both rank 1, and which one counted would
    // follow the folder's listing order.
    const auto [at, fresh] = by_rank.emplace(std::stoll(digits), e.path());
    if (!fresh) {
      const std::string a = std::min(at->second.string(), e.path().string()),
                        b = std::max(at->second.string(), e.path().string());
      bad(a, "two traces of rank " + std::to_string(at->first) + ", this one and " + b +
                 ", expected one file a rank (NAME.<rank>.et)");
    }
  }
  if (by_rank.empty()) bad(dir, "workload.chakra: no <name>.<rank>.et file in the folder");
  const auto world = static_cast<int32_t>(by_rank.size());
  if (by_rank.rbegin()->first != world - 1)
    bad(dir, "workload.chakra: ranks must be 0.." + std::to_string(world - 1) + ", a rank is missing");

  // Process groups from comm_group.json (ASTRA-sim's format), when there is one.
  std::map<std::string, std::vector<int32_t>> pg_ranks;
  const fs::path groups_file = fs::path(dir) / "comm_group.json";
  if (fs::exists(groups_file)) {
    // A regular file of a sane size: a FIFO would never end, a device never stop.
    std::error_code ec;
    if (!fs::is_regular_file(groups_file, ec))
      bad(groups_file.string(), "not a regular file, expected comm_group.json's JSON");
    if (fs::file_size(groups_file, ec) > (64u << 20))
      bad(groups_file.string(), "larger than 64 MiB, expected comm_group.json's JSON of the groups' ranks");
    try {
      const YAML::Node root = YAML::LoadFile(groups_file.string());
      if (!root.IsMap()) bad(groups_file.string(), "comm_group.json must map a group id to its list of ranks");
      for (const auto& kv : root) {
        const std::string id = kv.first.as<std::string>();
        if (pg_ranks.count(id))
          bad(groups_file.string(), "group " + id + " is listed twice, expected each group id once");
        std::vector<int32_t> ranks;
        std::vector<char> seen(static_cast<size_t>(world), 0);
        for (const auto& r : kv.second) {
          const auto v = r.as<int64_t>();
          if (v < 0 || v >= world)
            bad(groups_file.string(),
                "group " + id + " names rank " + std::to_string(v) + ", past the " + std::to_string(world) + " traces");
          if (seen[static_cast<size_t>(v)]++)
            bad(groups_file.string(),
                "group " + id + " lists rank " + std::to_string(v) + " twice, expected each rank once");
          ranks.push_back(static_cast<int32_t>(v));
        }
        if (ranks.empty()) bad(groups_file.string(), "group " + id + " has no ranks, expected its list of ranks");
        pg_ranks[id] = ranks;
      }
    } catch (const YAML::Exception& e) {
      throw InputError(SourceMark{groups_file.string(), e.mark.line + 1, e.mark.column + 1},
                       "not a comm_group.json (" + e.msg + "), expected JSON mapping each group id to its ranks");
    }
  }
  const bool have_groups_file = fs::exists(groups_file);
  std::string first_pg;  // without comm_group.json: the one process group every collective may name

  Plan plan;
  plan.world_size = world;
  plan.rank_groups.assign(static_cast<size_t>(world), {});
  for (auto& g : plan.rank_groups) g.fill(-1);
  std::vector<int32_t> all(static_cast<size_t>(world));
  for (int32_t r = 0; r < world; ++r) all[static_cast<size_t>(r)] = r;
  plan.add_group(GroupKind::World, all);
  for (int32_t r = 0; r < world; ++r) {
    plan.rank_gpu.push_back(r);
    plan.mirror_of.push_back(r);  // nothing is known to be symmetric: every rank is simulated
  }
  std::map<std::string, int32_t> pg_group;  // pg name -> plan group
  auto group_for = [&](const std::string& file, const std::string& pg, const std::string& kind_name) -> int32_t {
    auto it = pg_group.find(pg);
    if (it != pg_group.end()) return it->second;
    std::vector<int32_t> ranks = all;
    if (!pg.empty()) {
      auto pr = pg_ranks.find(pg);
      if (pr == pg_ranks.end()) {
        if (have_groups_file) bad(file, "pg_name '" + pg + "' is not in comm_group.json");
        // With no file, one named group is the world; two are groups whose ranks only the
        // file would say (running them over every rank would never finish).
        if (!have_groups_file && first_pg.empty()) first_pg = pg;
        if (!have_groups_file && pg != first_pg)
          bad(file, "collectives name process groups '" + first_pg + "' and '" + pg +
                        "', and the folder has no "
                        "comm_group.json, expected it beside the traces (clustersim export-chakra writes one)");
      } else {
        ranks = pr->second;
      }
    }
    // A group kind none of its ranks has yet: the one the trace names, else (all ranks)
    // the world, else the first free.
    GroupKind kind = GroupKind::World;
    bool named = !kind_name.empty() && name_to(kind_name, kKinds, kind) && kind != GroupKind::World;
    auto free_for_all = [&](GroupKind k) {
      for (int32_t r : ranks)
        if (plan.rank_groups[static_cast<size_t>(r)][static_cast<size_t>(k)] >= 0) return false;
      return true;
    };
    if (named && free_for_all(kind)) return pg_group[pg] = plan.add_group(kind, ranks);
    if (ranks == all) return pg_group[pg] = 0;
    named = false;
    for (GroupKind k : kKinds)
      if (k != GroupKind::World && free_for_all(k)) {
        kind = k;
        named = true;
        break;
      }
    if (!named) bad(file, "more than 6 process groups meet at one rank; clustersim holds 6 besides the world");
    return pg_group[pg] = plan.add_group(kind, ranks);
  };

  std::map<std::string, uint32_t> program_of;  // encoded program -> index (identical ranks share one)
  for (const auto& [rank, path] : by_rank) {
    const std::string file = path.string();
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    ChakraTrace t;
    try {
      t = decode_chakra(ss.str());
    } catch (const std::exception& e) {
      bad(file, std::string("not a Chakra trace: ") + e.what());
    }
    // Dependency order (Kahn), ties in file order; ids must be unique, deps must exist.
    std::map<uint64_t, size_t> index;
    for (size_t i = 0; i < t.nodes.size(); ++i)
      if (!index.emplace(t.nodes[i].id, i).second)
        bad(file, "node id " + std::to_string(t.nodes[i].id) + " appears twice");
    std::vector<std::vector<size_t>> parents(t.nodes.size()), children(t.nodes.size());
    for (size_t i = 0; i < t.nodes.size(); ++i) {
      std::set<size_t> ps;
      for (const auto* deps : {&t.nodes[i].data_deps, &t.nodes[i].ctrl_deps})
        for (uint64_t d : *deps) {
          auto it = index.find(d);
          if (it == index.end())
            bad(file, "node " + std::to_string(t.nodes[i].id) + " depends on node " + std::to_string(d) +
                          ", which the trace lacks");
          ps.insert(it->second);
        }
      parents[i].assign(ps.begin(), ps.end());
      for (size_t p : ps) children[p].push_back(i);
    }
    std::vector<size_t> pending(t.nodes.size()), order;
    std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
    for (size_t i = 0; i < t.nodes.size(); ++i)
      if ((pending[i] = parents[i].size()) == 0) ready.push(i);
    while (!ready.empty()) {
      const size_t i = ready.top();
      ready.pop();
      order.push_back(i);
      for (size_t c : children[i])
        if (--pending[c] == 0) ready.push(c);
    }
    if (order.size() != t.nodes.size()) bad(file, "the trace's dependencies form a cycle");
    std::vector<uint32_t> op_of(t.nodes.size());
    Program prog;
    prog.name = "chakra";
    // The rank's kernels, one after another: past the documented range of times, a damaged
    // trace, refused here rather than run into an overflow of simulated time.
    double compute_s = 0;
    // A message past 1 PiB is a damaged trace: refused here, not run into days of simulated time.
    auto comm_bytes = [&](const ChakraNode& n) {
      if (n.comm_size > int64_t{1} << 50)
        bad(file, "node " + std::to_string(n.id) + " moves " + std::to_string(n.comm_size) +
                      " bytes, past 1 PiB, expected a message's size (comm_size)");
      return std::max<int64_t>(0, n.comm_size);
    };
    auto add_compute = [&](double seconds, uint64_t id) {
      compute_s += seconds;
      if (!(compute_s <= kMaxTimeSeconds))
        bad(file, "the kernels up to node " + std::to_string(id) +
                      " add up to more than 1e6 s (their durations, or their FLOPs and bytes at the GPU's peak), "
                      "expected a trace of one training step");
    };
    for (size_t i : order) {
      const ChakraNode& n = t.nodes[i];
      Op op;
      // A node's name reaches the tables, terminals, JSON and HTML it is printed to: UTF-8
      // text without control characters, of a name's length.
      if (n.name.size() > 4096)
        bad(file, "node " + std::to_string(n.id) + "'s name is " + std::to_string(n.name.size()) +
                      " bytes, expected a name of at most 4096");
      try {
        check_decoded_text(n.name, SourceMark{file, 0, 0});
      } catch (const InputError& e) {
        bad(file, "node " + std::to_string(n.id) + "'s name holds " + e.detail());
      }
      op.name = plan.intern(n.name.empty() ? "node-" + std::to_string(n.id) : n.name);
      if (!n.phase.empty()) name_to(n.phase, kPhases, op.phase);
      std::string stream;
      switch (n.type) {
        case 4: {  // COMP_NODE (a GEMM or attention kernel keeps its kind: it sets how NCCL's kernels slow it)
          op.kind = n.op_kind == "gemm" ? OpKind::Gemm : n.op_kind == "attention" ? OpKind::Attention : OpKind::Memory;
          if (has_shape(n, op.kind)) {
            // A kernel of known shape (clustersim's own attributes): costed by the compute
            // model on the cluster's GPU, and run as such by the real backend.
            const Op& sh = n.shape;
            parse_dtype(n.dtype, op.dtype);
            op.m = sh.m, op.n = sh.n, op.k = sh.k, op.batch = sh.batch;
            op.bytes_read = sh.bytes_read, op.bytes_written = sh.bytes_written, op.access = sh.access;
            op.heads = sh.heads, op.kv_heads = sh.kv_heads, op.q_len = sh.q_len, op.kv_len = sh.kv_len;
            op.head_dim = sh.head_dim, op.causal = sh.causal, op.dropout = sh.dropout, op.flops = sh.flops;
            op.recompute = sh.recompute;
            // Its work at the GPU's peak counts toward the step as a duration would.
            add_compute(std::max(kernel_flops(op) / gpu.peak_bf16,
                                 static_cast<double>(op.bytes_read + op.bytes_written) / gpu.hbm_bandwidth),
                        n.id);
            stream = "compute";
            break;
          }
          op.flops = static_cast<double>(std::max<int64_t>(0, n.num_ops));
          op.bytes_read = static_cast<int64_t>(std::min<uint64_t>(n.tensor_size, uint64_t{1} << 50));
          if (!(n.duration_s >= 0))
            bad(file, "node " + std::to_string(n.id) + "'s duration_s is not a number of seconds >= 0");
          double t_s = n.duration_s > 0 ? n.duration_s : static_cast<double>(n.duration_micros) * 1e-6;
          // A kernel longer than the documented range of times is a damaged trace, not one to
          // run for days of simulated time and fail there.
          if (!(t_s <= kMaxTimeSeconds)) {
            char secs[32];
            std::snprintf(secs, sizeof secs, "%.3g", t_s);
            bad(file, "node " + std::to_string(n.id) + " runs " + secs +
                          " s, past 1e6 s, expected a kernel's duration (duration_micros or duration_s)");
          }
          // No time in the trace: a roofline of its FLOPs at the BF16 peak and its bytes at
          // HBM bandwidth (what ASTRA-sim's roofline mode does).
          if (t_s <= 0)
            t_s = std::max(op.flops / gpu.peak_bf16, static_cast<double>(op.bytes_read) / gpu.hbm_bandwidth);
          op.fixed_seconds = std::min(t_s, kMaxTimeSeconds);
          add_compute(op.fixed_seconds, n.id);
          stream = "compute";
          break;
        }
        case 7: {  // COMM_COLL_NODE
          op.kind = OpKind::Collective;
          switch (n.comm_type) {
            case 0:
              op.collective = CollectiveKind::AllReduce;
              break;
            case 1:
              op.collective = CollectiveKind::Reduce;
              break;
            case 2:
              op.collective = CollectiveKind::AllGather;
              break;
            case 5:
              op.collective = CollectiveKind::Broadcast;
              break;
            case 6:
              op.collective = CollectiveKind::AllToAll;
              break;
            case 7:
              op.collective = CollectiveKind::ReduceScatter;
              break;
            case 9:
              op.collective = CollectiveKind::AllReduce;
              break;  // a barrier: an all-reduce of nothing
            default:
              bad(file, "node " + std::to_string(n.id) + ": collective type " + std::to_string(n.comm_type) +
                            " (gather, scatter, reduce-scatter-block) is not modelled");
          }
          op.bytes = n.comm_type == 9 ? 0 : comm_bytes(n);
          const int32_t g = group_for(file, n.pg_name, n.group_kind);
          op.group = plan.groups[static_cast<size_t>(g)].kind;
          if (std::find(plan.groups[static_cast<size_t>(g)].ranks.begin(),
                        plan.groups[static_cast<size_t>(g)].ranks.end(),
                        static_cast<int32_t>(rank)) == plan.groups[static_cast<size_t>(g)].ranks.end())
            bad(file, "node " + std::to_string(n.id) + ": rank " + std::to_string(rank) + " is not in its group '" +
                          n.pg_name + "'");
          op.holds_sms = n.holds_sms;
          op.held_sms = n.held_sms;
          stream = "comm";
          break;
        }
        case 5:
        case 6: {  // COMM_SEND_NODE / COMM_RECV_NODE
          op.kind = n.type == 5 ? OpKind::Send : OpKind::Recv;
          const int32_t peer = n.type == 5 ? n.comm_dst : n.comm_src;
          const int32_t self = n.type == 5 ? n.comm_src : n.comm_dst;
          if (peer < 0 || peer >= world || (self >= 0 && self != rank))
            bad(file, "node " + std::to_string(n.id) +
                          ": comm_src / comm_dst do not name this rank and a peer among the " + std::to_string(world) +
                          " traces");
          op.group = GroupKind::World;
          op.peer = peer;
          // On the communicator the trace names (clustersim's own traces name it): the peer is
          // then its index there, and the channels the send holds are that group's.
          if (!n.pg_name.empty()) {
            const int32_t g = group_for(file, n.pg_name, n.group_kind);
            const auto& members = plan.groups[static_cast<size_t>(g)].ranks;
            const auto self_at = std::find(members.begin(), members.end(), static_cast<int32_t>(rank));
            const auto peer_at = std::find(members.begin(), members.end(), peer);
            if (self_at == members.end() || peer_at == members.end())
              bad(file, "node " + std::to_string(n.id) + ": rank " + std::to_string(rank) + " and its peer " +
                            std::to_string(peer) + " are not both in its group '" + n.pg_name + "'");
            op.group = plan.groups[static_cast<size_t>(g)].kind;
            op.peer = static_cast<int32_t>(peer_at - members.begin());
          }
          op.bytes = comm_bytes(n);
          op.holds_sms = n.holds_sms;
          op.held_sms = n.held_sms;
          op.sm_margin = n.sm_margin;
          op.overlaps_compute = n.overlaps_compute;
          stream = "p2p";
          break;
        }
        default:  // metadata, memory load/store and other nodes: ordering only
          op.kind = OpKind::Memory;
          stream = "compute";
          break;
      }
      const std::string& on = n.stream.empty() ? stream : n.stream;
      try {
        check_decoded_text(on, SourceMark{file, 0, 0});
      } catch (const InputError& e) {
        bad(file, "node " + std::to_string(n.id) + "'s stream name holds " + e.detail());
      }
      if (prog.streams.size() >= 255 && std::find(prog.streams.begin(), prog.streams.end(), on) == prog.streams.end())
        bad(file, "node " + std::to_string(n.id) + " opens a 256th stream ('" + on.substr(0, 64) +
                      "'), expected at most 255 streams a rank");
      op.stream = prog.stream(on);
      std::vector<uint32_t> after;
      for (size_t p : parents[i]) after.push_back(op_of[p]);
      op_of[i] = prog.add(op, after);
    }
    // Ranks whose nodes are byte for byte the same (their metadata aside) share a program.
    const std::string bytes = ss.str();
    Reader skip(bytes);
    const uint64_t meta = skip.varint();
    const std::string key = bytes.substr(std::min<size_t>(bytes.size(), skip.offset() + meta));
    auto it = program_of.find(key);
    if (it == program_of.end()) {
      it = program_of.emplace(key, static_cast<uint32_t>(plan.programs.size())).first;
      plan.programs.push_back(std::move(prog));
    }
    plan.rank_program.push_back(it->second);
  }
  return plan;
}

}  // namespace clustersim
