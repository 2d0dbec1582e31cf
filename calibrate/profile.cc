#include "calibrate/profile.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string_view>
#include <tuple>
#include <vector>

#include "cost_models/collective.h"
#include "cost_models/protocol.h"
#include "plan/plan.h"
#include "scenarios/readers.h"
#include "scenarios/units.h"
#include "scenarios/yaml_tree.h"
#include "topology/gpu.h"

namespace clustersim {
namespace {

// A profile is mostly tables: thousands of rows of plain values, one flow list a line
// (`    - [bf16, 64, 64, 64, 5.4e-06]`). Those rows are read here directly, with the same
// file:line:col marks, and the rest of the file goes to the YAML parser with the rows'
// lines left empty (so its line numbers stay); the parser built a node graph for every
// cell, which made loading a calibrated profile cost more than the run it serves. Any
// row that is not a plain list of plain values sends the whole file to the parser.
struct TableRows {
  std::string key;  // the table's key
  int key_line = 0;
  std::vector<YNode> rows;
};

bool plain_cell(std::string_view c) {
  if (c.empty()) return false;
  for (char ch : c)
    if (ch == '"' || ch == '\'' || ch == '[' || ch == ']' || ch == '{' || ch == '}' || ch == '#' || ch == ':' ||
        ch == '&' || ch == '*' || ch == '!' || ch == '|' || ch == '>' || ch == '%' || ch == '@' || ch == '`')
      return false;
  return true;
}

// Returns false (and leaves `text` as it was) when the file holds a table line it does
// not take.
bool split_tables(const std::string& path, std::string& text, std::vector<TableRows>& tables) {
  static const char* const kTables[] = {"gemm_table", "attention_table", "memory_table", "collective_table",
                                        "collective_points"};
  std::string out;
  out.reserve(text.size());
  std::vector<TableRows> found;
  found.reserve(8);
  size_t at = 0;
  int line = 0;
  TableRows* open = nullptr;
  size_t open_indent = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string_view l(text.data() + at, end - at);
    ++line;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    const size_t indent = l.find_first_not_of(' ');
    if (open && indent != std::string_view::npos && indent > open_indent && l.substr(indent, 2) == "- ") {
      // A row: "- [a, b, ...]" with an optional comment after.
      std::string_view rest = l.substr(indent + 2);
      const size_t lead = rest.find_first_not_of(' ');
      if (lead == std::string_view::npos || rest[lead] != '[') return false;
      const size_t open_col = indent + 2 + lead;
      const size_t close = l.find(']', open_col);
      if (close == std::string_view::npos) return false;
      std::string_view tail = l.substr(close + 1);
      const size_t t = tail.find_first_not_of(' ');
      if (t != std::string_view::npos && tail[t] != '#') return false;
      YNode row;
      row.kind = YNode::Kind::Seq;
      row.mark = SourceMark{path, line, static_cast<int>(indent + 3)};
      size_t cell = open_col + 1;
      while (cell <= close) {
        size_t comma = l.find(',', cell);
        if (comma == std::string_view::npos || comma > close) comma = close;
        std::string_view c = l.substr(cell, comma - cell);
        const size_t b = c.find_first_not_of(' ');
        const size_t e = c.find_last_not_of(' ');
        if (b == std::string_view::npos) {
          if (comma == close && row.seq.empty()) break;  // "[]"
          return false;
        }
        c = c.substr(b, e - b + 1);
        if (!plain_cell(c)) return false;
        YNode v;
        v.kind = YNode::Kind::Scalar;
        v.scalar = std::string(c);
        v.mark = SourceMark{path, line, static_cast<int>(cell + b + 1)};
        row.seq.push_back(std::move(v));
        cell = comma + 1;
      }
      open->rows.push_back(std::move(row));
      out += '\n';  // the row's line, empty
      at = end + 1;
      continue;
    }
    bool replaced = false;
    const size_t first = indent;
    if (first != std::string_view::npos && l[first] != '#') open = nullptr;  // any other content ends a table
    if (first != std::string_view::npos) {
      for (const char* k : kTables) {
        const std::string_view key(k);
        if (l.substr(first, key.size()) != key || l.substr(first + key.size(), 1) != ":") continue;
        std::string_view rest = l.substr(first + key.size() + 1);
        const size_t r = rest.find_first_not_of(' ');
        if (r != std::string_view::npos && rest[r] != '#') break;  // a value on the key's line: the parser's
        if (found.size() == found.capacity()) return false;  // `open` must not move
        found.push_back(TableRows{std::string(key), line, {}});
        open = &found.back();
        open_indent = first;
        // The key stays for the parser, holding an empty list the rows replace.
        out.append(text, at, first + key.size());
        out += ": []\n";
        replaced = true;
        break;
      }
    }
    if (!replaced) {
      out.append(text, at, end - at);
      out += '\n';
    }
    at = end + 1;
  }
  tables = std::move(found);
  text = std::move(out);
  return true;
}

// Puts each table's rows back under its key (found by the key's line).
void attach_tables(YNode& n, std::vector<TableRows>& tables) {
  if (n.kind == YNode::Kind::Map) {
    for (auto& [k, v] : n.map) {
      for (TableRows& t : tables)
        if (t.key == k && v.key_mark.line == t.key_line && v.kind == YNode::Kind::Seq && v.seq.empty()) {
          v.seq = std::move(t.rows);
          t.key_line = -1;
        }
      attach_tables(v, tables);
    }
  } else if (n.kind == YNode::Kind::Seq) {
    for (YNode& v : n.seq) attach_tables(v, tables);
  }
}

YNode load_profile_tree(const std::string& path, const SourceMark& from) {
  // The same checks as any YAML file (a regular file, not huge) come first.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::is_regular_file(status) || std::filesystem::file_size(path, ec) > (64u << 20))
    return load_yaml_file(path, from, "a YAML calibration profile");
  std::ifstream in(path, std::ios::binary);
  if (!in) return load_yaml_file(path, from, "a YAML calibration profile");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  std::vector<TableRows> tables;
  if (!split_tables(path, text, tables) || tables.empty()) return parse_yaml(ss.str(), path);
  YNode root = parse_yaml(text, path);
  attach_tables(root, tables);
  for (const TableRows& t : tables)
    if (t.key_line != -1) return parse_yaml(ss.str(), path);  // a key the tree does not show where expected
  return root;
}


const YNode& need_map(const YNode& n, const std::string& key) {
  if (n.kind != YNode::Kind::Map) throw InputError(n.mark, key + " must be a mapping, got " + n.kind_name());
  return n;
}

double number(const YNode& n, const std::string& key, double lo, double hi) {
  if (n.kind != YNode::Kind::Scalar) throw InputError(n.mark, key + " must be a number, got " + n.kind_name());
  char* end = nullptr;
  const double v = std::strtod(n.scalar.c_str(), &end);
  if (n.scalar.empty() || *end != '\0' || !(v >= lo && v <= hi)) {
    char range[64];
    std::snprintf(range, sizeof range, "[%g, %g]", lo, hi);
    throw InputError(n.mark, key + " must be a number in " + range + ", got '" + n.scalar + "'");
  }
  return v;
}

// A count (a GEMM's or an attention's dimension): a whole number from 1 to 2^31.
int64_t whole(const YNode& n, const std::string& key) {
  const double v = number(n, key, 1, 2147483648.0);
  if (v != std::floor(v))
    throw InputError(n.mark, key + ": a dimension must be a whole number, got '" + n.scalar + "'");
  return static_cast<int64_t>(v);
}

// A profile's times are paid per kernel, host step or collective: past a second each, a run's
// millions of them overflowed the simulated clock at exit 3 with no place named.
double seconds(const YNode& n, const std::string& key) {
  std::string why;
  double v = 0;
  if (n.kind != YNode::Kind::Scalar || !parse_time(n.scalar, v, why))
    throw InputError(n.mark, key + ": " + (why.empty() ? "expected a time such as 2us" : why));
  return at_most_a_second(v, n, key);
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
  std::vector<std::pair<std::array<double, 6>, const YNode*>> shapes;  // each row's shape, for duplicates
  for (const YNode& row : table.seq) {
    if (row.kind != YNode::Kind::Seq || row.seq.size() < width || row.seq.size() > widest)
      throw InputError(row.mark, key + ": each row must be a list of " + std::to_string(width) +
                                     (widest > width ? " or " + std::to_string(widest) : std::string()) + " values");
    for (const YNode& cell : row.seq)
      if (cell.kind != YNode::Kind::Scalar) throw InputError(cell.mark, key + ": a row holds plain values");
    // A kernel's measured time, 1 ps to 1 s (as the profile's other per-kernel times): a
    // table of longer kernels, extrapolated to a step's shapes, ran past the simulated clock.
    auto time = [&](size_t i) { return number(row.seq[i], key, 1e-12, 1.0); };
    auto dim = [&](size_t i) { return whole(row.seq[i], key); };
    // A rate no chip reaches (1e18 FLOP/s, 1e15 bytes/s: a misplaced exponent).
    auto past = [&](double rate, double most, const char* what) {
      if (rate > most) {
        char v[96];
        std::snprintf(v, sizeof v, "%.3g %s, past %.0e", rate, what, most);
        throw InputError(row.mark, key + ": this row's time implies " + v + ", expected a measured time");
      }
    };
    if (name == "gemm_table") {
      DType d;
      if (!parse_dtype(row.seq[0].scalar, d))
        throw InputError(row.seq[0].mark, key + ": unknown dtype '" + row.seq[0].scalar + "'");
      const GemmPoint g{d, dim(1), dim(2), dim(3), time(4)};
      shapes.push_back(
          {{static_cast<double>(d), static_cast<double>(g.m), static_cast<double>(g.n), static_cast<double>(g.k), 0, 0},
           &row});
      past(2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) / g.seconds, 1e18,
           "FLOP/s");
      out->gemm.push_back(g);
    } else if (name == "attention_table") {
      const std::string& phase = row.seq[0].scalar;
      if (phase != "forward" && phase != "backward")
        throw InputError(row.seq[0].mark, key + ": phase must be forward or backward, got '" + phase + "'");
      const std::string& causal = row.seq[2].scalar;
      if (causal != "true" && causal != "false")
        throw InputError(row.seq[2].mark, key + ": causal must be true or false");
      const AttentionPoint a{
          phase == "backward", causal == "true", dim(1), dim(3), dim(4), time(5), row.seq.size() == 7 ? dim(6) : 1};
      // The GQA group shares one K/V head among `group` query heads: whole groups of the
      // batch's query heads.
      if (a.group > a.batch_heads || a.batch_heads % a.group != 0)
        throw InputError(row.seq[6].mark, key + ": a GQA group of " + std::to_string(a.group) + " query heads in " +
                                              std::to_string(a.batch_heads) +
                                              " (batch x heads), expected a group that divides them");
      shapes.push_back({{a.backward ? 1.0 : 0.0, a.causal ? 1.0 : 0.0, static_cast<double>(a.head_dim),
                         static_cast<double>(a.seq), static_cast<double>(a.batch_heads), static_cast<double>(a.group)},
                        &row});
      out->attention.push_back(a);
    } else {
      const MemoryPoint m{number(row.seq[0], key, 1, 1e18), time(1),
                          row.seq.size() == 3 ? number(row.seq[2], key, 0, 1) : 0.5};
      shapes.push_back({{m.bytes, m.read_share, 0, 0, 0, 0}, &row});
      past(m.bytes / m.seconds, 1e15, "bytes/s");
      out->memory.push_back(m);
    }
  }
  // A shape measured twice: which time holds would be the table's order.
  std::sort(shapes.begin(), shapes.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < shapes.size(); ++i)
    if (shapes[i].first == shapes[i - 1].first)
      throw InputError(std::max(shapes[i].second->mark, shapes[i - 1].second->mark,
                                [](const SourceMark& a, const SourceMark& b) { return a.line < b.line; }),
                       key + ": this row's shape is listed twice, expected each shape once");
}

// A series' names, as the calibration writes them and the model looks them up: a collective
// or send-recv, an algorithm (or NCCL's own choice, nccl, or p2p), a protocol (or auto). A
// misspelt one would never be looked up and its measurements would go unused, unsaid.
void check_series(const YNode& row, const std::string& key) {
  CollectiveKind op;
  Algorithm algo;
  Protocol proto;
  const YNode &o = row.seq[0], &a = row.seq[1], &p = row.seq[2];
  if (!parse_collective(o.scalar, op) && o.scalar != "send-recv")
    throw InputError(o.mark, key + ": unknown operation '" + o.scalar +
                                 "', expected all-reduce, all-gather, reduce-scatter, all-to-all, broadcast, reduce "
                                 "or send-recv");
  if (!parse_algorithm(a.scalar, algo) && a.scalar != "nccl" && a.scalar != "p2p")
    throw InputError(a.mark, key + ": unknown algorithm '" + a.scalar +
                                 "', expected ring, tree, direct, halving-doubling, hierarchical, nvls, nccl or p2p");
  if (!parse_protocol(p.scalar, proto) && p.scalar != "auto")
    throw InputError(p.mark, key + ": unknown protocol '" + p.scalar + "', expected LL, LL128, Simple or auto");
}

// A series' group size: a whole number of ranks, 2 to 2^20.
int series_ranks(const YNode& n, const std::string& key) {
  const double v = number(n, key, 2, 1 << 20);
  if (v != std::floor(v)) throw InputError(n.mark, key + ": ranks must be a whole number, got '" + n.scalar + "'");
  return static_cast<int>(v);
}

// [op, algo, proto, ranks, alpha_s, beta_s_per_byte, rms_rel_residual] rows.
void read_collective_table(const YNode& table, const std::string& key, std::vector<CollectiveFitRow>* rows) {
  if (table.kind != YNode::Kind::Seq) throw InputError(table.mark, key + " must be a list of rows");
  for (const YNode& row : table.seq) {
    if (row.kind != YNode::Kind::Seq || row.seq.size() != 7)
      throw InputError(row.mark,
                       key + ": each row must be [op, algo, proto, ranks, alpha_s, beta_s_per_byte, rms_rel_residual]");
    check_series(row, key);
    CollectiveFitRow f;
    f.op = row.seq[0].scalar;
    f.algo = row.seq[1].scalar;
    f.proto = row.seq[2].scalar;
    f.ranks = series_ranks(row.seq[3], key);
    // A series fitted twice: which line holds would be the table's order.
    for (const CollectiveFitRow& g : *rows)
      if (g.op == f.op && g.algo == f.algo && g.proto == f.proto && g.ranks == f.ranks)
        throw InputError(row.mark, key + ": this row's series (" + f.op + ", " + f.algo + ", " + f.proto + ", " +
                                       std::to_string(f.ranks) + " ranks) is listed twice, expected each series once");
    // A collective's start-up at most a second, its time a byte at most a microsecond (1 MB/s,
    // slower than any link a cluster has): values past them ran the step past the clock.
    f.alpha_s = number(row.seq[4], key, 0, 1.0);
    f.beta_s_per_byte = number(row.seq[5], key, 0, 1e-6);
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
    check_series(row, key);
    const int ranks = series_ranks(row.seq[3], key);
    const double b = number(row.seq[4], key, 1, 1e15);
    // A measured size's time, at most 1,000 s (8 GiB at 8 MB/s).
    const double t = number(row.seq[5], key, 1e-9, 1e3);
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

// overlap_slowdown: {p2p: {gemm: x, attention: y, memory: z}, collective: {...},
// userbuffers: {...}}, each >= 1.
void read_overlap(const YNode& node, const std::string& key, ComputeProfile& c) {
  members(node, key, {"p2p", "collective", "userbuffers"}, [&](const std::string& comm, const YNode& x,
                                                               const std::string& xk) {
    members(x, xk, {"gemm", "attention", "memory"},
            [&](const std::string& kern, const YNode& y, const std::string& yk) {
              const size_t k = kern == "gemm" ? 0 : kern == "attention" ? 1 : 2;
              c.overlap_slowdown[comm == "p2p" ? 0 : comm == "collective" ? 1 : 2][k] = number(y, yk, 1.0, 10.0);
            });
  });
}

int protocol_index(const std::string& p) { return p == "LL" ? 0 : p == "LL128" ? 1 : 2; }
int class_index(const std::string& c) { return c == "nvlink" ? 0 : c == "pcie" ? 1 : 2; }
int family_index(const std::string& f) { return f == "ring" ? 0 : f == "tree" ? 1 : 2; }

// The profile keys that give a kernel class's issue slots per element beyond its stream
// (cost_models/compute.h), and the member each sets.
double ComputeProfile::*slots_per_element_key(const std::string& key) {
  static const std::pair<const char*, double ComputeProfile::*> kKeys[] = {
      {"dynamic_cast_ops_per_element", &ComputeProfile::dynamic_cast_ops_per_element},
      {"dropout_rng_ops_per_element", &ComputeProfile::dropout_rng_ops_per_element},
      {"scatter_ops_per_element", &ComputeProfile::scatter_ops_per_element},
      {"index_put_ops_per_element", &ComputeProfile::index_put_ops_per_element},
      {"mixed_softmax_ops_per_element", &ComputeProfile::mixed_softmax_ops_per_element},
      {"strided_copy_ops_per_element", &ComputeProfile::strided_copy_ops_per_element},
      {"cat_copy_ops_per_element", &ComputeProfile::cat_copy_ops_per_element},
      {"tanh_gelu_ops_per_element", &ComputeProfile::tanh_gelu_ops_per_element},
      {"broadcast_loop_ops_per_element", &ComputeProfile::broadcast_loop_ops_per_element},
      {"multi_tensor_ops_per_byte", &ComputeProfile::multi_tensor_ops_per_byte},
  };
  for (const auto& [name, member] : kKeys)
    if (key == name) return member;
  return nullptr;
}

}  // namespace

CalibrationProfile load_profile(const std::string& path, const SourceMark& from) {
  if (!std::filesystem::exists(path))
    throw InputError(from.known() ? from : SourceMark{path, 0, 0}, "calibration profile '" + path + "' does not exist");
  const YNode root = load_profile_tree(path, from);
  CalibrationProfile p;
  p.path = path;
  bool calibrated = false;  // a member of compute: or network: was read
  if (root.kind == YNode::Kind::Null)
    throw InputError(SourceMark{path, 1, 1},
                     "the calibration profile calibrates nothing, expected compute: or "
                     "network: tables (as clustersim calibrate --out writes them)");
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
                      {"gemm_efficiency",
                       "fp8_gemm_efficiency",
                       "attention_efficiency",
                       "memory_efficiency",
                       "launch_overhead",
                       "kernel_latency",
                       "gemm_table",
                       "attention_table",
                       "memory_table",
                       "queue_saving",
                       "queue_interval",
                       "gemm_stream_k",
                       "overlap_slowdown",
                       "nccl_channels",
                       "nccl_net_peer_channels",
                       "gemm_backend",
                       "attention_backend",
                       "dynamic_cast_ops_per_element",
                       "multi_tensor_efficiency",
                       "attention_dropout_ops",
                       "flash2_dropout_ops",
                       "blocking_launch",
                       "dropout_rng_ops_per_element",
                       "scatter_ops_per_element",
                       "index_put_ops_per_element",
                       "host_sync",
                       "backward_relaunch",
                       "autograd_node",
                       "host_op",
                       "mixed_softmax_ops_per_element",
                       "triton_attention_factor",
                       "strided_copy_ops_per_element",
                       "cat_copy_ops_per_element",
                       "tanh_gelu_ops_per_element",
                       "broadcast_loop_ops_per_element",
                       "multi_tensor_ops_per_byte",
                       "boost_energy_ratio"},
                      [&](const std::string& c, const YNode& cv, const std::string& ck) {
                        calibrated = true;
                        if (c == "gemm_backend" || c == "attention_backend") {
                          if (cv.kind != YNode::Kind::Scalar)
                            throw InputError(cv.mark, ck + " must be a string naming the kernels' library");
                          (c == "gemm_backend" ? p.gemm_backend : p.attention_backend) = cv.scalar;
                        } else if (c == "attention_dropout_ops" || c == "flash2_dropout_ops") {
                          // {forward: x, backward: y}: ALU operations per score element
                          auto& ops = c == "attention_dropout_ops" ? p.compute.attention_dropout_ops
                                                                   : p.compute.flash2_dropout_ops;
                          members(cv, ck, {"forward", "backward"},
                                  [&](const std::string& pass, const YNode& pv, const std::string& pk) {
                                    ops[pass == "forward" ? 0 : 1] = number(pv, pk, 0, 1e4);
                                  });
                        } else if (double ComputeProfile::*slots = slots_per_element_key(c)) {
                          p.compute.*slots = number(cv, ck, 0, 1e6);
                        } else if (c == "nccl_channels" || c == "nccl_net_peer_channels") {
                          const double n = number(cv, ck, 1, 64);
                          if (n != static_cast<int>(n))
                            throw InputError(cv.mark, ck + " must be a whole number of channels, expected 1 to 64");
                          (c == "nccl_channels" ? p.compute.nccl_channels : p.compute.nccl_net_peer_channels) =
                              static_cast<int>(n);
                        } else if (c == "overlap_slowdown")
                          read_overlap(cv, ck, p.compute);
                        else if (c == "launch_overhead")
                          p.compute.launch_overhead_s = seconds(cv, ck);
                        else if (c == "kernel_latency")
                          p.compute.kernel_latency_s = seconds(cv, ck);
                        else if (c == "queue_saving")
                          p.compute.queue_saving_s = seconds(cv, ck);
                        else if (c == "queue_interval")
                          p.compute.queue_interval_s = seconds(cv, ck);
                        else if (c == "gemm_stream_k") {
                          if (cv.kind != YNode::Kind::Scalar || (cv.scalar != "true" && cv.scalar != "false"))
                            throw InputError(cv.mark, ck + " must be true or false");
                          p.compute.gemm_stream_k = cv.scalar == "true";
                        }
                        else if (c == "blocking_launch")
                          p.compute.blocking_launch_s = seconds(cv, ck);
                        else if (c == "host_sync")
                          p.compute.host_sync_s = seconds(cv, ck);
                        else if (c == "backward_relaunch")
                          p.compute.backward_relaunch_s = seconds(cv, ck);
                        else if (c == "autograd_node")
                          p.compute.autograd_node_s = seconds(cv, ck);
                        else if (c == "host_op")
                          p.compute.host_op_s = seconds(cv, ck);
                        else if (c == "triton_attention_factor")
                          p.compute.triton_attention_factor = number(cv, ck, 0.1, 100);
                        else if (c == "boost_energy_ratio")  // {gemm: x, attention: y}
                          members(cv, ck, {"gemm", "attention"},
                                  [&](const std::string& kind, const YNode& kv, const std::string& kk) {
                                    p.compute.boost_energy_ratio[kind == "gemm" ? 0 : 1] = number(kv, kk, 1, 3);
                                  });
                        else if (c == "gemm_table" || c == "attention_table" || c == "memory_table")
                          read_table(c, cv, ck, tables);
                        else {
                          // An efficiency of a hundredth of the peak or more: one of
                          // a millionth ran a step of the largest presets past the clock.
                          const double e = number(cv, ck, 0.01, 1.0);
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
                        calibrated = true;
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
                                        x, xk, {"ring", "tree", "nvls"},
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
  // A profile that calibrates nothing would run on the built-in defaults, silently: an
  // empty file, one of other keys only, or empty compute: and network: blocks is an error.
  if (!calibrated)
    throw InputError(root.mark,
                     "the calibration profile calibrates nothing, expected compute: or network: tables (as "
                     "clustersim calibrate --out writes them)");
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
         "), about 1/6 of cuDNN's rate on Hopper: these predictions describe `clustersim real` with that kernel, not "
         "a framework's step (calibrate/profiles/h200.yaml carries cuDNN's SDPA; `calibrate` times cuDNN's fused "
         "attention where libcudnn.so.9 loads, and `calibrate --attention-from` takes another stack's table)";
}

std::string profile_gpu_warning(const CalibrationProfile& p, const std::string& gpu_name) {
  if (board_is_preset_model(p.gpu, gpu_name)) return {};
  return "warning: the profile was measured on " + p.gpu + " and the scenario's GPU is " + gpu_name +
         ": its tables time that board's kernels, not this one's";
}

}  // namespace clustersim
