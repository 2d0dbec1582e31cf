#include "plan/plan_io.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cstdio>
#include <iterator>

#include "scenarios/error.h"

namespace clustersim {
namespace {

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// A userbuffers kernel's SMs and the margin of the GEMMs beside it (Op::held_sms, sm_margin).
std::string userbuffers(const Op& op) {
  return (op.held_sms > 0 ? ",\"held_sms\":" + std::to_string(op.held_sms) : std::string()) +
         (op.sm_margin ? ",\"sm_margin\":true" : "");
}

std::string number(double v) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, ec == std::errc() ? p : buf);
}

template <typename T>
std::string int_list(const std::vector<T>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

void write_op(std::string& out, const Program& p, const Op& op) {
  out += "{\"kind\":" + quote(to_string(op.kind)) + ",\"name\":" + std::to_string(op.name) +
         ",\"stream\":" + std::to_string(op.stream) + ",\"phase\":" + quote(to_string(op.phase)) +
         ",\"layer\":" + std::to_string(op.layer) + ",\"micro_batch\":" + std::to_string(op.micro_batch) +
         ",\"dtype\":" + quote(to_string(op.dtype));
  switch (op.kind) {
    case OpKind::Gemm:
      out += ",\"m\":" + std::to_string(op.m) + ",\"n\":" + std::to_string(op.n) + ",\"k\":" + std::to_string(op.k) +
             ",\"batch\":" + std::to_string(op.batch) + (op.beside_sms ? ",\"beside_sms\":true" : "") + userbuffers(op);
      if (op.group_experts > 0)
        out += ",\"group_experts\":" + std::to_string(op.group_experts) +
               ",\"group_top_k\":" + std::to_string(op.group_top_k) +
               ",\"group_tokens\":" + std::to_string(op.group_tokens);
      break;
    case OpKind::Attention:
      out += ",\"batch\":" + std::to_string(op.batch) + ",\"heads\":" + std::to_string(op.heads) +
             ",\"kv_heads\":" + std::to_string(op.kv_heads) + ",\"q_len\":" + std::to_string(op.q_len) +
             ",\"kv_len\":" + std::to_string(op.kv_len) + ",\"head_dim\":" + std::to_string(op.head_dim) +
             ",\"causal\":" + (op.causal ? "true" : "false") + (op.dropout ? ",\"dropout\":true" : "");
      break;
    case OpKind::Memory:
      // An access class other than a plain stream, with the element count it is costed by
      // (a cast-transpose's matrix is m x n; a host wait's count is m, the backwards it
      // relaunches n, the autograd nodes each walks batch, the small ops it dispatches k; a
      // multi-tensor kernel's cost is its bytes'; a CUDA-core decode kernel's, its grid and
      // heads; k > 1 elsewhere: the small kernels the op stands for).
      if (op.access == MemAccess::CudaCoreDecode) {
        out += ",\"access\":" + quote(to_string(op.access)) + ",\"heads\":" + std::to_string(op.heads) +
               ",\"kv_heads\":" + std::to_string(op.kv_heads) + ",\"head_dim\":" + std::to_string(op.head_dim) +
               ",\"k\":" + std::to_string(op.k) + ",\"n\":" + std::to_string(op.n) +
               ",\"q_len\":" + std::to_string(op.q_len) + ",\"kv_len\":" + std::to_string(op.kv_len);
      } else {
        if (op.access != MemAccess::Streaming) {
          out += ",\"access\":" + quote(to_string(op.access));
          if (op.access != MemAccess::MultiTensor) out += ",\"m\":" + std::to_string(op.m);
          if (op.access == MemAccess::Fp8CastTranspose || (op.access == MemAccess::HostSync && op.n > 0))
            out += ",\"n\":" + std::to_string(op.n);
          if (op.access == MemAccess::HostSync && op.n > 0 && op.batch > 1)
            out += ",\"batch\":" + std::to_string(op.batch);
        }
        if ((op.access == MemAccess::HostSync && op.k > 0) || op.k > 1) out += ",\"k\":" + std::to_string(op.k);
      }
      break;
    case OpKind::Collective:
      out += ",\"collective\":" + quote(to_string(op.collective)) + ",\"group\":" + quote(to_string(op.group)) +
             (op.holds_sms ? ",\"holds_sms\":true" : "") + userbuffers(op) + ",\"bytes\":" + std::to_string(op.bytes);
      break;
    case OpKind::Send:
    case OpKind::Recv:
      out += ",\"group\":" + quote(to_string(op.group)) + ",\"peer\":" + std::to_string(op.peer) +
             ",\"relative_peer\":" + (op.relative_peer ? "true" : "false") +
             (op.holds_sms ? ",\"holds_sms\":true" : "") + userbuffers(op) +
             (op.overlaps_compute ? ",\"overlaps_compute\":true" : "") +
             ",\"bytes\":" + std::to_string(op.bytes);
      break;
  }
  out += std::string(op.recompute ? ",\"recompute\":true" : "") + ",\"bytes_read\":" + std::to_string(op.bytes_read) +
         ",\"bytes_written\":" + std::to_string(op.bytes_written) + ",\"flops\":" + number(op.flops) +
         (op.fixed_seconds > 0 ? ",\"fixed_seconds\":" + number(op.fixed_seconds) : std::string()) + ",\"deps\":[";
  for (uint32_t d = 0; d < op.dep_count; ++d) out += (d ? "," : "") + std::to_string(p.deps[op.dep_begin + d]);
  out += "]}";
}

// ---- reading ---------------------------------------------------------------------------

struct Reader {
  std::string source;

  SourceMark at(const YAML::Node& n) const { return SourceMark{source, n.Mark().line + 1, n.Mark().column + 1}; }

  YAML::Node need(const YAML::Node& parent, const char* key) const {
    YAML::Node n = parent[key];
    if (!n) throw InputError(at(parent), std::string("missing \"") + key + "\"");
    return n;
  }

  template <typename T>
  T integer(const YAML::Node& n, T lo, T hi, const char* what) const {
    if (!n.IsScalar()) throw InputError(at(n), std::string(what) + " must be an integer");
    const std::string& s = n.Scalar();
    long long v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size())
      throw InputError(at(n), std::string(what) + " must be an integer, got '" + s + "'");
    if (v < static_cast<long long>(lo) || v > static_cast<long long>(hi))
      throw InputError(at(n), std::string(what) + " = " + s + " is out of range [" + std::to_string(lo) + ", " +
                                  std::to_string(hi) + "]");
    return static_cast<T>(v);
  }

  int64_t i64(const YAML::Node& op, const char* key, int64_t lo = 0) const {
    YAML::Node n = op[key];
    if (!n) return key == std::string("batch") ? 1 : 0;
    return integer<int64_t>(n, lo, INT64_MAX, key);
  }

  template <typename E>
  E name_of(const YAML::Node& n, bool (*parse)(std::string_view, E&), const char* what) const {
    if (!n.IsScalar()) throw InputError(at(n), std::string(what) + " must be a name");
    E e{};
    if (!parse(n.Scalar(), e)) throw InputError(at(n), std::string("unknown ") + what + " '" + n.Scalar() + "'");
    return e;
  }
};

template <typename E, size_t N>
bool parse_enum(std::string_view s, E& out, const E (&all)[N]) {
  for (E e : all)
    if (to_string(e) == s) {
      out = e;
      return true;
    }
  return false;
}

bool parse_op_kind(std::string_view s, OpKind& k) {
  static const OpKind all[] = {OpKind::Gemm,       OpKind::Attention, OpKind::Memory,
                               OpKind::Collective, OpKind::Send,      OpKind::Recv};
  return parse_enum(s, k, all);
}
bool parse_group_kind(std::string_view s, GroupKind& k) {
  static const GroupKind all[] = {GroupKind::TP, GroupKind::DP,  GroupKind::PP,   GroupKind::CP,
                                  GroupKind::EP, GroupKind::EDP, GroupKind::World};
  return parse_enum(s, k, all);
}
bool parse_phase(std::string_view s, Phase& k) {
  static const Phase all[] = {Phase::Forward, Phase::Backward, Phase::Optimizer, Phase::Other};
  return parse_enum(s, k, all);
}
constexpr MemAccess kAllAccess[] = {MemAccess::Streaming,  MemAccess::DynamicCast, MemAccess::MultiTensor,
                                    MemAccess::Fp8CastTranspose, MemAccess::RandomMask, MemAccess::Scatter,
                                    MemAccess::IndexPut,   MemAccess::HostSync,    MemAccess::MixedSoftmax,
                                    MemAccess::CudaCoreDecode, MemAccess::StridedCopy, MemAccess::CatCopy,
                                    MemAccess::TanhGelu, MemAccess::BroadcastLoop};
static_assert(std::size(kAllAccess) == static_cast<size_t>(kLastMemAccess) + 1, "every access class has a name");

}  // namespace

std::string plan_to_json(const Plan& plan) {
  std::string out = "{\"format\":\"clustersim-plan\",\"version\":1,\"world_size\":" + std::to_string(plan.world_size) +
                    ",\n\"names\":[";
  for (size_t i = 0; i < plan.names.size(); ++i) out += (i ? "," : "") + quote(plan.names[i]);
  out += "],\n\"rank_program\":" + int_list(plan.rank_program) + ",\n\"rank_gpu\":" + int_list(plan.rank_gpu) +
         ",\n\"mirror_of\":" + int_list(plan.mirror_of) + ",\n\"groups\":[";
  for (size_t g = 0; g < plan.groups.size(); ++g)
    out += std::string(g ? ",\n" : "\n") + "{\"kind\":" + quote(to_string(plan.groups[g].kind)) +
           ",\"ranks\":" + int_list(plan.groups[g].ranks) + "}";
  out += "],\n\"programs\":[";
  for (size_t p = 0; p < plan.programs.size(); ++p) {
    const Program& prog = plan.programs[p];
    out += std::string(p ? ",\n" : "\n") + "{\"name\":" + quote(prog.name) + ",\"streams\":[";
    for (size_t s = 0; s < prog.streams.size(); ++s) out += (s ? "," : "") + quote(prog.streams[s]);
    out += "],\"ops\":[";
    for (size_t i = 0; i < prog.ops.size(); ++i) {
      out += i ? ",\n" : "\n";
      write_op(out, prog, prog.ops[i]);
    }
    out += "]}";
  }
  return out + "]}\n";
}

Plan plan_from_json(const std::string& text, const std::string& source) {
  Reader rd{source};
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw InputError(SourceMark{source, e.mark.line + 1, e.mark.column + 1}, "malformed plan: " + e.msg);
  }
  if (!root.IsMap() || !root["format"] || root["format"].Scalar() != "clustersim-plan")
    throw InputError(SourceMark{source, 1, 1}, "not a clustersim plan (expected \"format\": \"clustersim-plan\")");
  if (rd.integer<int>(rd.need(root, "version"), 1, 1000, "version") != 1)
    throw InputError(rd.at(root["version"]), "unsupported plan version, expected 1");
  Plan plan;
  plan.world_size = rd.integer<int32_t>(rd.need(root, "world_size"), 1, 1 << 24, "world_size");
  const size_t world = static_cast<size_t>(plan.world_size);
  for (const auto& n : rd.need(root, "names")) plan.names.push_back(n.Scalar());

  auto rank_list = [&](const char* key, int32_t hi, auto& out) {
    YAML::Node list = rd.need(root, key);
    if (!list.IsSequence() || list.size() != world)
      throw InputError(rd.at(list), std::string(key) + " must list one entry per rank (" + std::to_string(world) + ")");
    for (const auto& n : list) out.push_back(rd.integer<int32_t>(n, 0, hi, key));
  };
  YAML::Node programs = rd.need(root, "programs");
  if (!programs.IsSequence() || programs.size() == 0)
    throw InputError(rd.at(programs), "programs must be a non-empty list");
  std::vector<int32_t> rp;
  rank_list("rank_program", static_cast<int32_t>(programs.size()) - 1, rp);
  plan.rank_program.assign(rp.begin(), rp.end());
  rank_list("rank_gpu", INT32_MAX, plan.rank_gpu);
  rank_list("mirror_of", plan.world_size - 1, plan.mirror_of);

  std::array<int32_t, kGroupKinds> none;
  none.fill(-1);
  plan.rank_groups.assign(world, none);
  for (const auto& g : rd.need(root, "groups")) {
    GroupKind kind = rd.name_of<GroupKind>(rd.need(g, "kind"), parse_group_kind, "group kind");
    std::vector<int32_t> ranks;
    for (const auto& r : rd.need(g, "ranks")) {
      ranks.push_back(rd.integer<int32_t>(r, 0, plan.world_size - 1, "group rank"));
      if (plan.rank_groups[static_cast<size_t>(ranks.back())][static_cast<size_t>(kind)] >= 0)
        throw InputError(rd.at(r), "rank " + r.Scalar() + " is in two " + std::string(to_string(kind)) + " groups");
    }
    plan.add_group(kind, std::move(ranks));
  }

  for (const auto& pn : programs) {
    Program prog;
    prog.name = rd.need(pn, "name").Scalar();
    for (const auto& s : rd.need(pn, "streams")) prog.streams.push_back(s.Scalar());
    if (prog.streams.empty() || prog.streams.size() > 255)
      throw InputError(rd.at(pn), "a program needs 1 to 255 streams");
    for (const auto& on : rd.need(pn, "ops")) {
      Op op;
      op.kind = rd.name_of<OpKind>(rd.need(on, "kind"), parse_op_kind, "op kind");
      op.name = rd.integer<uint32_t>(rd.need(on, "name"), 0, static_cast<uint32_t>(plan.names.size()) - 1, "name");
      op.stream =
          rd.integer<uint8_t>(rd.need(on, "stream"), 0, static_cast<uint8_t>(prog.streams.size() - 1), "stream");
      if (on["phase"]) op.phase = rd.name_of<Phase>(on["phase"], parse_phase, "phase");
      if (on["dtype"]) op.dtype = rd.name_of<DType>(on["dtype"], parse_dtype, "dtype");
      if (on["layer"]) op.layer = rd.integer<int32_t>(on["layer"], -1, INT32_MAX, "layer");
      if (on["micro_batch"]) op.micro_batch = rd.integer<int32_t>(on["micro_batch"], -1, INT32_MAX, "micro_batch");
      op.m = rd.i64(on, "m");
      if (on["access"]) {
        const std::string a = on["access"].IsScalar() ? on["access"].Scalar() : std::string();
        if (!parse_enum(a, op.access, kAllAccess)) {
          std::string names;
          for (MemAccess e : kAllAccess) names += (names.empty() ? "" : ", ") + std::string(to_string(e));
          throw InputError(rd.at(on["access"]), "access must be one of " + names + ", got '" + a + "'");
        }
      }
      op.n = rd.i64(on, "n");
      op.k = rd.i64(on, "k");
      op.batch = rd.i64(on, "batch");
      op.heads = rd.i64(on, "heads");
      op.kv_heads = rd.i64(on, "kv_heads");
      op.q_len = rd.i64(on, "q_len");
      op.kv_len = rd.i64(on, "kv_len");
      op.head_dim = rd.i64(on, "head_dim");
      op.bytes = rd.i64(on, "bytes");
      op.bytes_read = rd.i64(on, "bytes_read");
      op.bytes_written = rd.i64(on, "bytes_written");
      if (on["causal"]) op.causal = on["causal"].as<bool>(false);
      if (on["relative_peer"]) op.relative_peer = on["relative_peer"].as<bool>(false);
      if (on["holds_sms"]) op.holds_sms = on["holds_sms"].as<bool>(false);
      if (on["overlaps_compute"]) op.overlaps_compute = on["overlaps_compute"].as<bool>(false);
      if (on["beside_sms"]) op.beside_sms = on["beside_sms"].as<bool>(false);
      if (on["held_sms"]) op.held_sms = rd.integer<uint16_t>(on["held_sms"], 0, 4096, "held_sms");
      if (on["sm_margin"]) op.sm_margin = on["sm_margin"].as<bool>(false);
      if (on["group_experts"]) {
        op.group_experts = rd.integer<uint16_t>(on["group_experts"], 1, UINT16_MAX, "group_experts");
        op.group_top_k =
            rd.integer<uint8_t>(rd.need(on, "group_top_k"), 1,
                                static_cast<uint8_t>(std::min<int>(op.group_experts, UINT8_MAX)), "group_top_k");
        op.group_tokens = rd.integer<int32_t>(rd.need(on, "group_tokens"), 1, INT32_MAX, "group_tokens");
      }
      if (on["dropout"]) op.dropout = on["dropout"].as<bool>(false);
      if (on["recompute"]) op.recompute = on["recompute"].as<bool>(false);
      if (on["collective"])
        op.collective = rd.name_of<CollectiveKind>(on["collective"], parse_collective, "collective");
      if (on["group"]) op.group = rd.name_of<GroupKind>(on["group"], parse_group_kind, "group kind");
      if (on["peer"]) op.peer = rd.integer<int32_t>(on["peer"], 0, plan.world_size - 1, "peer");
      if (on["flops"]) {
        try {
          op.flops = on["flops"].as<double>();
        } catch (const YAML::Exception&) {
          throw InputError(rd.at(on["flops"]), "flops must be a number");
        }
        if (!(op.flops >= 0)) throw InputError(rd.at(on["flops"]), "flops must be >= 0");
      }
      if (on["fixed_seconds"]) {
        try {
          op.fixed_seconds = on["fixed_seconds"].as<double>();
        } catch (const YAML::Exception&) {
          throw InputError(rd.at(on["fixed_seconds"]), "fixed_seconds must be a number");
        }
        if (!(op.fixed_seconds >= 0 && op.fixed_seconds <= 1e6))
          throw InputError(rd.at(on["fixed_seconds"]), "fixed_seconds must lie in [0, 1e6]");
      }
      std::vector<uint32_t> deps;
      const uint32_t self = static_cast<uint32_t>(prog.ops.size());
      for (const auto& d : on["deps"]) {
        if (self == 0) throw InputError(rd.at(d), "the first op cannot have dependencies");
        deps.push_back(rd.integer<uint32_t>(d, 0, self - 1, "dependency (must name an earlier op)"));
      }
      prog.add(op, deps);
    }
    plan.programs.push_back(std::move(prog));
  }
  for (size_t r = 0; r < world; ++r) {
    const size_t m = static_cast<size_t>(plan.mirror_of[r]);
    if (plan.mirror_of[m] != static_cast<int32_t>(m) || plan.rank_program[m] != plan.rank_program[r])
      throw InputError(rd.at(root["mirror_of"]),
                       "mirror_of[" + std::to_string(r) + "] must be a representative rank running the same program");
  }
  return plan;
}

}  // namespace clustersim
