#include "calibrate/profile.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <tuple>

#include "scenarios/units.h"
#include "scenarios/yaml_tree.h"

namespace clustersim {
namespace {

const YNode& need_map(const YNode& n, const std::string& key) {
  if (n.kind != YNode::Kind::Map) throw InputError(n.mark, key + " must be a mapping, got " + n.kind_name());
  return n;
}

double number(const YNode& n, const std::string& key, double lo, double hi) {
  if (n.kind != YNode::Kind::Scalar) throw InputError(n.mark, key + " must be a number, got " + n.kind_name());
  char* end = nullptr;
  const double v = std::strtod(n.scalar.c_str(), &end);
  if (n.scalar.empty() || *end != '\0' || !(v >= lo && v <= hi))
    throw InputError(n.mark, key + " must be a number in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                 "], got '" + n.scalar + "'");
  return v;
}

double seconds(const YNode& n, const std::string& key) {
  std::string why;
  double v = 0;
  if (n.kind != YNode::Kind::Scalar || !parse_time(n.scalar, v, why))
    throw InputError(n.mark, key + ": " + (why.empty() ? "expected a time such as 2us" : why));
  return v;
}

int64_t bytes(const YNode& n, const std::string& key) {
  std::string why;
  int64_t v = 0;
  if (n.kind != YNode::Kind::Scalar || !parse_size(n.scalar, v, why))
    throw InputError(n.mark, key + ": " + (why.empty() ? "expected a size such as 512KiB" : why));
  if (v < 1) throw InputError(n.mark, key + " must be at least 1 byte");
  return v;
}

// Calls f(name, node) for each member, rejecting names not in `allowed`.
template <typename F>
void members(const YNode& map, const std::string& key, std::initializer_list<const char*> allowed, F f) {
  need_map(map, key);
  for (const auto& [k, v] : map.map) {
    bool ok = false;
    std::string list;
    for (const char* a : allowed) {
      ok |= k == a;
      list += (list.empty() ? "" : ", ") + std::string(a);
    }
    if (!ok) throw InputError(v.key_mark, "unknown key '" + key + "." + k + "', expected one of: " + list);
    f(k, v, key + "." + k);
  }
}

// Rows of a measurement table: lists of scalars of a fixed width.
void read_table(const std::string& name, const YNode& table, const std::string& key,
                std::shared_ptr<MeasuredTables>& out) {
  if (table.kind != YNode::Kind::Seq) throw InputError(table.mark, key + " must be a list of rows");
  // Attention rows: 6 values, or 7 with the GQA group size last; memory rows: 2, or 3
  // with the reads' share of the bytes last (a half when absent).
  const size_t width = name == "gemm_table" ? 5 : name == "attention_table" ? 6 : 2;
  const size_t widest = name == "gemm_table" ? 5 : name == "attention_table" ? 7 : 3;
  for (const YNode& row : table.seq) {
    if (row.kind != YNode::Kind::Seq || row.seq.size() < width || row.seq.size() > widest)
      throw InputError(row.mark, key + ": each row must be a list of " + std::to_string(width) +
                                     (widest > width ? " or " + std::to_string(widest) : std::string()) + " values");
    for (const YNode& cell : row.seq)
      if (cell.kind != YNode::Kind::Scalar) throw InputError(cell.mark, key + ": a row holds plain values");
    auto num = [&](size_t i, double lo) { return number(row.seq[i], key, lo, 1e30); };
    if (name == "gemm_table") {
      DType d;
      if (!parse_dtype(row.seq[0].scalar, d))
        throw InputError(row.seq[0].mark, key + ": unknown dtype '" + row.seq[0].scalar + "'");
      out->gemm.push_back(GemmPoint{d, static_cast<int64_t>(num(1, 1)), static_cast<int64_t>(num(2, 1)),
                                    static_cast<int64_t>(num(3, 1)), num(4, 1e-12)});
    } else if (name == "attention_table") {
      const std::string& phase = row.seq[0].scalar;
      if (phase != "forward" && phase != "backward")
        throw InputError(row.seq[0].mark, key + ": phase must be forward or backward, got '" + phase + "'");
      const std::string& causal = row.seq[2].scalar;
      if (causal != "true" && causal != "false")
        throw InputError(row.seq[2].mark, key + ": causal must be true or false");
      out->attention.push_back(AttentionPoint{
          phase == "backward", causal == "true", static_cast<int64_t>(num(1, 1)), static_cast<int64_t>(num(3, 1)),
          static_cast<int64_t>(num(4, 1)), num(5, 1e-12), row.seq.size() == 7 ? static_cast<int64_t>(num(6, 1)) : 1});
    } else {
      out->memory.push_back(
          MemoryPoint{num(0, 1), num(1, 1e-12), row.seq.size() == 3 ? number(row.seq[2], key, 0, 1) : 0.5});
    }
  }
}

// [op, algo, proto, ranks, alpha_s, beta_s_per_byte, rms_rel_residual] rows.
void read_collective_table(const YNode& table, const std::string& key, std::vector<CollectiveFitRow>* rows) {
  if (table.kind != YNode::Kind::Seq) throw InputError(table.mark, key + " must be a list of rows");
  for (const YNode& row : table.seq) {
    if (row.kind != YNode::Kind::Seq || row.seq.size() != 7)
      throw InputError(row.mark,
                       key + ": each row must be [op, algo, proto, ranks, alpha_s, beta_s_per_byte, rms_rel_residual]");
    CollectiveFitRow f;
    f.op = row.seq[0].scalar;
    f.algo = row.seq[1].scalar;
    f.proto = row.seq[2].scalar;
    f.ranks = static_cast<int>(number(row.seq[3], key, 2, 1 << 20));
    f.alpha_s = number(row.seq[4], key, 0, 1e6);
    f.beta_s_per_byte = number(row.seq[5], key, 0, 1e6);
    number(row.seq[6], key, 0, 1e6);
    rows->push_back(f);
  }
}

// [op, algo, proto, ranks, bytes, seconds] rows: the measured sizes of each series, which
// join the series' table row (or make one).
void read_collective_points(const YNode& table, const std::string& key, std::vector<CollectiveFitRow>* rows) {
  if (table.kind != YNode::Kind::Seq) throw InputError(table.mark, key + " must be a list of rows");
  for (const YNode& row : table.seq) {
    if (row.kind != YNode::Kind::Seq || row.seq.size() != 6)
      throw InputError(row.mark, key + ": each row must be [op, algo, proto, ranks, bytes, seconds]");
    const int ranks = static_cast<int>(number(row.seq[3], key, 2, 1 << 20));
    const double b = number(row.seq[4], key, 1, 1e15);
    const double t = number(row.seq[5], key, 1e-9, 1e6);
    auto it = std::find_if(rows->begin(), rows->end(), [&](const CollectiveFitRow& f) {
      return f.op == row.seq[0].scalar && f.algo == row.seq[1].scalar && f.proto == row.seq[2].scalar &&
             f.ranks == ranks;
    });
    if (it == rows->end()) {
      CollectiveFitRow f;
      f.op = row.seq[0].scalar;
      f.algo = row.seq[1].scalar;
      f.proto = row.seq[2].scalar;
      f.ranks = ranks;
      rows->push_back(f);
      it = rows->end() - 1;
    }
    if (!it->points.empty() && b <= it->points.back().first)
      throw InputError(row.seq[4].mark, key + ": sizes of a series must ascend");
    it->points.emplace_back(b, t);
  }
}

// overlap_slowdown: {p2p: {gemm: x, attention: y, memory: z}, collective: {...}}, each >= 1.
void read_overlap(const YNode& node, const std::string& key, ComputeProfile& c) {
  members(node, key, {"p2p", "collective"}, [&](const std::string& comm, const YNode& x, const std::string& xk) {
    members(x, xk, {"gemm", "attention", "memory"},
            [&](const std::string& kern, const YNode& y, const std::string& yk) {
              const size_t k = kern == "gemm" ? 0 : kern == "attention" ? 1 : 2;
              c.overlap_slowdown[comm == "p2p" ? 0 : 1][k] = number(y, yk, 1.0, 10.0);
            });
  });
}

int protocol_index(const std::string& p) { return p == "LL" ? 0 : p == "LL128" ? 1 : 2; }
int class_index(const std::string& c) { return c == "nvlink" ? 0 : c == "pcie" ? 1 : 2; }
int family_index(const std::string& f) { return f == "ring" ? 0 : f == "tree" ? 1 : 2; }

}  // namespace

CalibrationProfile load_profile(const std::string& path, const SourceMark& from) {
  if (!std::filesystem::exists(path))
    throw InputError(from.known() ? from : SourceMark{path, 0, 0}, "calibration profile '" + path + "' does not exist");
  const YNode root = load_yaml_file(path, from);
  CalibrationProfile p;
  p.path = path;
  if (root.kind == YNode::Kind::Null) return p;
  auto tables = std::make_shared<MeasuredTables>();
  std::vector<CollectiveFitRow> fits;
  const YNode* points = nullptr;
  std::string points_key;
  members(root, "profile",
          {"gpu", "date", "command", "driver", "cuda", "nccl", "sm_clock_mhz", "compute", "network", "measurements"},
          [&](const std::string& k, const YNode& v, const std::string& key) {
            if (k == "gpu" && v.kind == YNode::Kind::Scalar) p.gpu = v.scalar;
            if (k == "sm_clock_mhz") p.sm_clock_mhz = number(v, key, 1, 100000);
            if (k == "compute") {
              members(v, key,
                      {"gemm_efficiency", "fp8_gemm_efficiency", "attention_efficiency", "memory_efficiency",
                       "launch_overhead", "kernel_latency", "gemm_table", "attention_table", "memory_table",
                       "overlap_slowdown", "gemm_backend", "attention_backend", "dynamic_cast_ops_per_element",
                       "multi_tensor_efficiency"},
                      [&](const std::string& c, const YNode& cv, const std::string& ck) {
                        if (c == "gemm_backend" || c == "attention_backend") {
                          if (cv.kind != YNode::Kind::Scalar)
                            throw InputError(cv.mark, ck + " must be a string naming the kernels' library");
                          (c == "gemm_backend" ? p.gemm_backend : p.attention_backend) = cv.scalar;
                        } else if (c == "dynamic_cast_ops_per_element") {
                          p.compute.dynamic_cast_ops_per_element = number(cv, ck, 0, 1e6);
                        } else if (c == "overlap_slowdown")
                          read_overlap(cv, ck, p.compute);
                        else if (c == "launch_overhead")
                          p.compute.launch_overhead_s = seconds(cv, ck);
                        else if (c == "kernel_latency")
                          p.compute.kernel_latency_s = seconds(cv, ck);
                        else if (c == "gemm_table" || c == "attention_table" || c == "memory_table")
                          read_table(c, cv, ck, tables);
                        else {
                          const double e = number(cv, ck, 1e-6, 1.0);
                          if (c == "gemm_efficiency") p.compute.gemm_efficiency = e;
                          if (c == "fp8_gemm_efficiency") p.compute.fp8_gemm_efficiency = e;
                          if (c == "attention_efficiency") p.compute.attention_efficiency = e;
                          if (c == "memory_efficiency") p.compute.memory_efficiency = e;
                          if (c == "multi_tensor_efficiency") p.compute.multi_tensor_efficiency = e;
                        }
                      });
            }
            if (k == "network") {
              NetworkProfile& n = p.network;
              members(v, key,
                      {"link_efficiency", "nvls_efficiency", "protocols", "base_latency", "hop_latency",
                       "collective_table", "collective_points"},
                      [&](const std::string& nk, const YNode& nv, const std::string& nkey) {
                        if (nk == "nvls_efficiency") n.nvls_efficiency = number(nv, nkey, 1e-6, 1.0);
                        if (nk == "collective_table") read_collective_table(nv, nkey, &fits);
                        if (nk == "collective_points") points = &nv, points_key = nkey;
                        if (nk == "link_efficiency")
                          members(nv, nkey, {"nvlink", "pcie", "network"},
                                  [&](const std::string& c, const YNode& x, const std::string& xk) {
                                    n.link_efficiency[static_cast<size_t>(class_index(c))] = number(x, xk, 1e-6, 1.0);
                                  });
                        if (nk == "protocols")
                          members(nv, nkey, {"LL", "LL128", "Simple"},
                                  [&](const std::string& pr, const YNode& x, const std::string& xk) {
                                    members(x, xk, {"bandwidth_efficiency", "chunk"},
                                            [&](const std::string& f, const YNode& y, const std::string& yk) {
                                              ProtocolParams& pp = n.protocols[static_cast<size_t>(protocol_index(pr))];
                                              if (f == "chunk")
                                                pp.chunk_bytes = bytes(y, yk);
                                              else
                                                pp.bandwidth_efficiency = number(y, yk, 1e-6, 1.0);
                                            });
                                  });
                        if (nk == "base_latency")
                          members(nv, nkey, {"ring", "tree", "nvls"},
                                  [&](const std::string& fam, const YNode& x, const std::string& xk) {
                                    members(x, xk, {"LL", "LL128", "Simple"},
                                            [&](const std::string& pr, const YNode& y, const std::string& yk) {
                                              n.base_latency[static_cast<size_t>(family_index(fam))]
                                                            [static_cast<size_t>(protocol_index(pr))] = seconds(y, yk);
                                            });
                                  });
                        if (nk == "hop_latency")
                          members(nv, nkey, {"nvlink", "pcie", "network"},
                                  [&](const std::string& c, const YNode& x, const std::string& xk) {
                                    members(
                                        x, xk, {"ring", "tree"},
                                        [&](const std::string& fam, const YNode& y, const std::string& yk) {
                                          members(
                                              y, yk, {"LL", "LL128", "Simple"},
                                              [&](const std::string& pr, const YNode& z, const std::string& zk) {
                                                n.hop_latency[static_cast<size_t>(class_index(c))][static_cast<size_t>(
                                                    family_index(fam))][static_cast<size_t>(protocol_index(pr))] =
                                                    seconds(z, zk);
                                              });
                                        });
                                  });
                      });
            }
          });
  if (points) read_collective_points(*points, points_key, &fits);
  if (!fits.empty()) p.network.collective_fits = std::make_shared<const std::vector<CollectiveFitRow>>(std::move(fits));
  if (!tables->gemm.empty() || !tables->attention.empty() || !tables->memory.empty()) {
    std::sort(tables->memory.begin(), tables->memory.end(), [](const MemoryPoint& a, const MemoryPoint& b) {
      return std::tie(a.read_share, a.bytes) < std::tie(b.read_share, b.bytes);
    });
    p.compute.measured = tables;
  }
  return p;
}

std::string profile_warning(const CalibrationProfile& p) {
  if (p.attention_backend.rfind("clustersim", 0) != 0 || !p.compute.measured || p.compute.measured->attention.empty())
    return {};
  return "warning: the profile's attention table was measured on clustersim's own attention kernel (" +
         p.attention_backend +
         "), about 1/6 of cuDNN's rate on Hopper: these predictions describe `clustersim real`, not a framework's "
         "step (calibrate/profiles/h200.yaml carries cuDNN's SDPA; `calibrate --attention-from` takes one)";
}

}  // namespace clustersim
