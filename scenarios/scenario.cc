// Scenario loading: includes, merge, --set, then one walk of the merged tree against
// the key table. Each key's parser is a small lambda beside its documentation.
#include "scenarios/scenario.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>

#include "scenarios/key_table.h"
#include "scenarios/readers.h"
#include "scenarios/topology_file.h"
#include "scenarios/units.h"
#include "topology/presets.h"

namespace clustersim {
namespace {

// The analytic network costs each transfer alone on its route. That is exact where every
// GPU owns its NIC on a non-blocking fabric, as in DGX nodes on a rail-optimized or full
// fat-tree. Where GPUs share a NIC, or leaves share an oversubscribed uplink, the DP
// groups of one node's TP and PP ranks reduce at the same time through the same link, and
// only the flow network, which shares links among concurrent transfers, sees it.
std::string auto_network_model(const ClusterSpec& c) {
  if (c.nodes < 2) return "analytic";
  if (c.fabric.oversubscription > 1.0) return "flow";
  for (int n = 0; n < c.nodes; ++n) {
    const NodeSpec& node = c.node_at(n);
    if (node.nics < node.gpus) return "flow";
    if (c.node_specs.empty()) break;  // every node built alike
  }
  return "analytic";
}

namespace fs = std::filesystem;

// ---- the key table --------------------------------------------------------------------

const std::vector<KeySpec>& key_table() {
  using S = Scenario;
  using N = YNode;
  static const std::vector<KeySpec> kKeys = [] {
    KeyList t;
    t.insert(t.end(), {
                          {"name", "string", "file name", "free text stored with every run",
                           [](const N& n, S& s) { s.name = scalar(n, "name", "text"); }},
                          {"include", "list of paths", "[]",
                           "files merged first (relative to this file); this file wins", nullptr},
                          {"seed", "integer", "1", "seed of every random choice in the run",
                           [](const N& n, S& s) { s.seed = static_cast<uint64_t>(as_int(n, "seed", 0)); }},
                      });
    add_cluster_keys(t);
    add_model_keys(t);
    add_parallel_keys(t);
    add_training_keys(t);
    t.insert(
        t.end(),
        {
            {"variability", "mapping", "", "spread between GPUs, kernels and links (run --samples N draws it N times)",
             nullptr},
            {"variability.gpu_speed", "mapping", "{dist: none}",
             "each GPU's speed factor; a GPU's kernels take 1/speed as long", nullptr},
            {"variability.gpu_speed.dist", "name", "none",
             "none | normal (1 + sigma Z, cut at 0.1) | lognormal (e^(sigma Z))",
             [](const N& n, S& s) {
               s.variability.gpu_speed.dist = as_enum(n, "variability.gpu_speed.dist", {"none", "normal", "lognormal"});
             }},
            {"variability.gpu_speed.sigma", "number", "0",
             "spread of the speed factor (of its logarithm for lognormal)",
             [](const N& n, S& s) {
               s.variability.gpu_speed.sigma = as_number(n, "variability.gpu_speed.sigma", 0, 1);
             }},
            {"variability.link_speed", "mapping", "{dist: none}", "each link's bandwidth factor", nullptr},
            {"variability.link_speed.dist", "name", "none", "none | normal | lognormal, as gpu_speed.dist",
             [](const N& n, S& s) {
               s.variability.link_speed.dist =
                   as_enum(n, "variability.link_speed.dist", {"none", "normal", "lognormal"});
             }},
            {"variability.link_speed.sigma", "number", "0", "spread of the bandwidth factor",
             [](const N& n, S& s) {
               s.variability.link_speed.sigma = as_number(n, "variability.link_speed.sigma", 0, 1);
             }},
            {"variability.kernel_jitter", "number", "0",
             "coefficient of variation of each kernel's time (lognormal, mean 1), drawn per kernel",
             [](const N& n, S& s) { s.variability.kernel_jitter = as_number(n, "variability.kernel_jitter", 0, 1); }},
            {"variability.stragglers", "list", "[]",
             "named slow parts: [{gpu: 17, slowdown: 1.3}, {node: 2, slowdown: 1.1}, {link: \"node0/nic0->leaf0\", "
             "slowdown: 4}]",
             [](const N& n, S& s) {
               if (n.kind != YNode::Kind::Seq)
                 throw InputError(n.mark,
                                  "variability.stragglers must be a list of {gpu|node|link: ..., slowdown: X}, got " +
                                      n.kind_name());
               for (const YNode& item : n.seq) {
                 if (item.kind != YNode::Kind::Map)
                   throw InputError(item.mark,
                                    "a straggler must be a mapping {gpu: 17, slowdown: 1.3}, got " + item.kind_name());
                 Straggler st;
                 st.mark = item.mark;
                 bool slow = false;
                 for (const auto& [k, v] : item.map) {
                   if (k == "gpu" || k == "node") {
                     if (!st.kind.empty())
                       throw InputError(v.key_mark, "a straggler names one of gpu, node or link, got a second: " + k);
                     st.kind = k;
                     st.index = as_int(v, "variability.stragglers." + k, 0, kMaxCount * 64);
                   } else if (k == "link") {
                     if (!st.kind.empty())
                       throw InputError(v.key_mark, "a straggler names one of gpu, node or link, got a second: " + k);
                     st.kind = k;
                     st.link = scalar(v, "variability.stragglers.link", "a link such as node0/nic0->leaf0");
                   } else if (k == "slowdown") {
                     st.slowdown = as_number(v, "variability.stragglers.slowdown", 1, 1000);
                     slow = true;
                   } else {
                     throw InputError(v.key_mark, "unknown key '" + k +
                                                      "' in a straggler, expected one of: gpu, node, "
                                                      "link, slowdown");
                   }
                 }
                 if (st.kind.empty()) throw InputError(item.mark, "a straggler needs one of gpu, node or link");
                 if (!slow) throw InputError(item.mark, "a straggler needs slowdown, expected e.g. 1.3");
                 s.variability.stragglers.push_back(st);
               }
             }},
            {"faults", "mapping", "", "failures, restarts and checkpoints: run reports goodput over training.duration",
             nullptr},
            {"faults.gpu_mtbf", "duration", "none", "mean time between failures of one GPU, e.g. 50000h",
             [](const N& n, S& s) { s.faults.gpu_mtbf_s = as_positive_duration(n, "faults.gpu_mtbf"); }},
            {"faults.node_mtbf", "duration", "none", "mean time between failures of one node (host, NIC, power)",
             [](const N& n, S& s) { s.faults.node_mtbf_s = as_positive_duration(n, "faults.node_mtbf"); }},
            {"faults.link_mtbf", "duration", "none",
             "mean time between failures of one scale-out cable (both directions)",
             [](const N& n, S& s) { s.faults.link_mtbf_s = as_positive_duration(n, "faults.link_mtbf"); }},
            {"faults.failures", "list", "[]", "a failure trace: times from the start, e.g. [3h, 7.5h, 20h]",
             [](const N& n, S& s) {
               if (n.kind != YNode::Kind::Seq)
                 throw InputError(n.mark,
                                  "faults.failures must be a list of times such as [3h, 7.5h], got " + n.kind_name());
               for (const YNode& v : n.seq) s.faults.failures_s.push_back(as_duration(v, "faults.failures"));
               std::sort(s.faults.failures_s.begin(), s.faults.failures_s.end());
             }},
            {"faults.restart", "duration", "10min", "detection, restart and reload after a failure",
             [](const N& n, S& s) { s.faults.restart_s = as_duration(n, "faults.restart"); }},
            {"faults.checkpoint_bandwidth", "bandwidth", "(required)",
             "checkpoint write bandwidth to storage, all writers together",
             [](const N& n, S& s) { s.faults.checkpoint_bandwidth = as_bandwidth(n, "faults.checkpoint_bandwidth"); }},
            {"faults.checkpoint_interval", "duration", "auto",
             "time between checkpoints (auto: the interval of highest expected goodput; docs/model.md)",
             [](const N& n, S& s) {
               if (n.kind == YNode::Kind::Scalar && n.scalar == "auto")
                 s.faults.checkpoint_interval_s = 0;
               else
                 s.faults.checkpoint_interval_s = as_positive_duration(n, "faults.checkpoint_interval");
             }},
            {"faults.checkpoint_size", "size", "auto", "bytes a checkpoint writes (auto: weights and optimizer state)",
             [](const N& n, S& s) {
               if (n.kind == YNode::Kind::Scalar && n.scalar == "auto")
                 s.faults.checkpoint_size_bytes = -1;
               else
                 s.faults.checkpoint_size_bytes = as_size(n, "faults.checkpoint_size");
             }},
            {"faults.hot_spares", "integer", "unlimited",
             "spare nodes that replace a failed one at once; when none is left a restart also waits for a repair",
             [](const N& n, S& s) {
               if (n.kind == YNode::Kind::Scalar && n.scalar == "unlimited")
                 s.faults.hot_spares = -1;
               else
                 s.faults.hot_spares = as_int(n, "faults.hot_spares", 0, kMaxCount);
             }},
            {"faults.repair", "duration", "4h", "time a failed node is away before it is a spare again",
             [](const N& n, S& s) { s.faults.repair_s = as_duration(n, "faults.repair"); }},
            {"jobs", "list", "[]",
             "several jobs on this file's cluster: [{scenario: train.yaml, first_node: 0}, {scenario: serve.yaml, "
             "nodes: [8, 9]}]; each job's own file gives its model, layout and size (sim/jobs.h)",
             [](const N& n, S& s) {
               if (n.kind != YNode::Kind::Seq || n.seq.empty())
                 throw InputError(
                     n.mark, "jobs must be a non-empty list of {scenario: PATH, first_node: N}, got " + n.kind_name());
               for (const YNode& item : n.seq) {
                 if (item.kind != YNode::Kind::Map)
                   throw InputError(item.mark,
                                    "a job must be a mapping {scenario: PATH, first_node: N}, got " + item.kind_name());
                 JobSpec j;
                 j.mark = item.mark;
                 for (const auto& [k, v] : item.map) {
                   if (k == "scenario")
                     j.scenario = scalar(v, "jobs.scenario", "a path");
                   else if (k == "first_node")
                     j.first_node = as_int(v, "jobs.first_node", 0, kMaxCount);
                   else if (k == "nodes")
                     j.nodes = int_list(v, "jobs.nodes", 0, kMaxCount);
                   else
                     throw InputError(v.key_mark,
                                      "unknown key '" + k + "' in a job, expected one of: scenario, first_node, nodes");
                 }
                 if (j.scenario.empty()) throw InputError(item.mark, "a job needs scenario: PATH");
                 s.jobs.push_back(j);
               }
             }},
            {"workload", "mapping", "", "a workload given as traces instead of model: and parallel:", nullptr},
            {"workload.chakra", "path", "none",
             "a folder of Chakra execution traces (<name>.<rank>.et, comm_group.json; relative to this file): one rank "
             "per trace, run on the cluster (plan/chakra.h)",
             [](const N& n, S& s) { s.chakra_dir = scalar(n, "workload.chakra", "a path"); }},
        });
    add_inference_keys(t);
    t.insert(
        t.end(),
        {
            {"collectives", "mapping", "", "collective algorithms", nullptr},
            {"collectives.algorithm", "name", "auto",
             "auto | ring | tree | direct | halving-doubling | hierarchical | nvls (auto: lowest predicted time, as "
             "NCCL's "
             "tuner; an algorithm a collective cannot use falls back to auto for it)",
             [](const N& n, S& s) {
               s.algorithm = as_enum(n, "collectives.algorithm",
                                     {"auto", "ring", "tree", "direct", "halving-doubling", "hierarchical", "nvls"});
             }},
            {"collectives.protocol", "name", "auto", "auto | LL | LL128 | Simple",
             [](const N& n, S& s) {
               s.protocol = as_enum(n, "collectives.protocol", {"auto", "LL", "LL128", "Simple"});
             }},
            {"network_model", "name", "auto",
             "auto (flow where concurrent transfers must share a link: nodes with fewer NICs than GPUs, or an "
             "oversubscribed fabric; analytic otherwise) | analytic (each collective alone on the network) | flow "
             "(max-min shared links: concurrent transfers contend)",
             [](const N& n, S& s) {
               s.network_model = as_enum(n, "network_model", {"auto", "analytic", "flow"});
             }},
            {"calibration", "path", "none",
             "calibration profile YAML (calibrate/profiles/*.yaml; relative to this file); else the built-in defaults; "
             "a warning if the profile's gpu: is another model than the cluster's GPU",
             [](const N& n, S& s) { s.calibration = scalar(n, "calibration", "a path"); }},
            {"cluster.power_cap", "bool", "true",
             "run each phase's kernels at the SM clock the board's power limit leaves their mix (GPUs with a power "
             "model: h100-sxm, h200-sxm, or gpu_spec's power keys; docs/model.md); false: every kernel at its burst "
             "rate",
             [](const N& n, S& s) { s.power_cap = as_bool(n, "cluster.power_cap"); }},
            {"cluster.board_spread", "number", "0.0148",
             "coefficient of variation of the boards' FLOP rate under the power cap; a synchronous job runs at its "
             "expected slowest board's (default: seven H200 boards measured, docs/model.md; acts only through the "
             "power model; 0: every board alike)",
             [](const N& n, S& s) { s.board_spread = as_number(n, "cluster.board_spread", 0, 0.5); }},
            {"cluster.memory_reserve", "size", "auto",
             "GPU memory per GPU the model cannot use: CUDA context, NCCL buffers, allocator fragmentation (auto: see "
             "docs/model.md)",
             [](const N& n, S& s) {
               if (n.kind == YNode::Kind::Scalar && n.scalar == "auto")
                 s.memory_reserve_bytes = -1;
               else
                 s.memory_reserve_bytes = as_size(n, "cluster.memory_reserve");
             }},
            {"reference", "mapping", "", "a published or measured value this scenario reproduces (clustersim accuracy)",
             nullptr},
            {"reference.metric", "name", "(required)", "the --json metric of run it is compared with",
             [](const N& n, S& s) {
               s.reference.metric = scalar(n, "reference.metric", "a metric name");
               s.reference.set = true;
             }},
            {"reference.value", "number", "(required)", "the published value, in reference.unit",
             [](const N& n, S& s) {
               s.reference.value = as_double(n, "reference.value", 0, true);
               // A published figure, so that errors relative to it stay finite.
               if (s.reference.value < 1e-12 || s.reference.value > 1e15)
                 throw InputError(n.mark, "reference.value = " + n.scalar +
                                              " is outside 1e-12 to 1e15, expected the published number");
               s.reference.set = true;
             }},
            {"reference.unit", "name", "the metric's", "s | ms | us | % | fraction | tokens/s | TFLOP/s | requests/s",
             [](const N& n, S& s) {
               s.reference.unit = as_enum(n, "reference.unit",
                                          {"s", "ms", "us", "%", "fraction", "tokens/s", "TFLOP/s", "requests/s"});
             }},
            {"reference.source", "string", "(required)", "where the value was published (citation)",
             [](const N& n, S& s) { s.reference.source = scalar(n, "reference.source", "text"); }},
            {"reference.attention_flops", "name", "causal",
             "causal | full: how the source's tflops_per_gpu or mfu counts attention's products (full: the whole "
             "square, "
             "Megatron-LM's count until 2025-03); accuracy predicts in the source's count",
             [](const N& n, S& s) {
               s.reference.attention_flops = as_enum(n, "reference.attention_flops", {"causal", "full"});
             }},
            {"reference.unstated", "mapping", "",
             "key path -> list of values: settings the source does not state; accuracy also predicts every combination "
             "(at most 64) and reports the band they span beside the prediction at the file's own values",
             nullptr},
            {"output", "mapping", "", "where results go", nullptr},
            {"output.sqlite", "path", "none", "SQLite timeline database (a run is appended)",
             [](const N& n, S& s) { s.output_sqlite = scalar(n, "output.sqlite", "a path"); }},
            {"output.trace", "path", "none", "Chrome / Perfetto trace JSON",
             [](const N& n, S& s) { s.output_trace = scalar(n, "output.trace", "a path"); }},
            {"output.trace_ranks", "list", "all",
             "ranks the trace shows, e.g. [0, 8, 63] (a trace a viewer can open at scale)",
             [](const N& n, S& s) { s.trace_ranks = int_list(n, "output.trace_ranks", 0, (int64_t{1} << 20) - 1); }},
            {"output.trace_stages", "list", "all", "pipeline stages the trace shows, e.g. [0, 7]",
             [](const N& n, S& s) { s.trace_stages = int_list(n, "output.trace_stages", 0, 65535); }},
            {"sweep", "mapping", "", "key path -> list of values; every combination is a point", nullptr},
        });
    return t;
  }();
  return kKeys;
}

const KeySpec* find_key(const std::string& key) {
  for (const auto& k : key_table())
    if (k.key == key) return &k;
  return nullptr;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

bool is_name(const std::string& k) {
  if (k.empty() || k.size() > 64) return false;
  for (char c : k)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

[[noreturn]] void unknown_key(std::string parent, const std::string& key, const SourceMark& mark) {
  // Under a parent that is not a mapping of keys itself, list the nearest one's.
  while (!parent.empty() && !find_key(parent))
    parent = parent.find('.') == std::string::npos ? "" : parent.substr(0, parent.rfind('.'));
  std::vector<std::string> siblings;
  const std::string prefix = parent.empty() ? "" : parent + ".";
  std::string best;
  size_t best_d = 3;
  for (const auto& k : key_table()) {
    if (k.key.compare(0, prefix.size(), prefix) != 0) continue;
    std::string rest = k.key.substr(prefix.size());
    if (rest.empty() || rest.find('.') != std::string::npos) continue;
    siblings.push_back(rest);
    size_t d = edit_distance(rest, key);
    if (d < best_d) {
      best_d = d;
      best = rest;
    }
  }
  // A key that is not a plain name is not echoed: an included file that is not a
  // scenario (any readable file) must not have its first line printed.
  std::string msg = is_name(key) ? "unknown key '" + prefix + key + "'"
                                 : "unknown key (not a plain name) under '" +
                                       (parent.empty() ? std::string("the top level") : parent) + "'";
  if (!best.empty())
    msg += ", did you mean '" + best + "'?";
  else if (siblings.empty())
    msg += ", '" + parent + "' takes a value, not keys under it";
  else
    msg += ", expected one of: " + join(siblings);
  throw InputError(mark, msg);
}

// Collects (key, node) leaves in document order, rejecting unknown keys.
void walk(const YNode& map, const std::string& parent, std::vector<std::pair<std::string, const YNode*>>& leaves,
          Scenario& s) {
  for (const auto& [k, v] : map.map) {
    const std::string key = parent.empty() ? k : parent + "." + k;
    const KeySpec* spec = find_key(key);
    if (!spec) unknown_key(parent, k, v.key_mark);
    s.marks[key] = v.kind == YNode::Kind::Null ? v.key_mark : v.mark;
    if (key == "include") continue;
    if (key == "inference") s.inference = true;
    if (key == "sweep") {
      if (v.kind != YNode::Kind::Map)
        throw InputError(v.mark, "sweep must be a mapping of key -> list of values, got " + v.kind_name());
      for (const auto& [sk, sv] : v.map) {
        const KeySpec* target = find_key(sk);
        if (!target || !target->apply || sk == "sweep")
          throw InputError(sv.key_mark, "sweep: unknown key '" + sk + "'");
        if (sv.kind != YNode::Kind::Seq || sv.seq.empty())
          throw InputError(sv.mark, "sweep." + sk + " must be a non-empty list of values");
        // A sweep's points write its own database: a point's output files would be dropped.
        if (sk.rfind("output.", 0) == 0)
          throw InputError(sv.key_mark, "sweep: " + sk +
                                            " names the run's files, which a sweep does not write "
                                            "(its points go to the sweep's database), expected a setting of the run");
        for (size_t i = 0; i < sv.seq.size(); ++i) {
          const YNode& item = sv.seq[i];
          const SourceMark at = item.mark.known() ? item.mark : sv.mark;
          const bool no_draft = item.kind == YNode::Kind::Null && sk == "inference.speculative.draft_model";
          if (item.kind != YNode::Kind::Scalar && !no_draft)
            throw InputError(at, "sweep." + sk + ": expected a value, got " + item.kind_name());
          for (size_t j = 0; j < i; ++j)
            if (sv.seq[j].kind == item.kind && sv.seq[j].scalar == item.scalar)
              throw InputError(at, "sweep." + sk + ": '" + item.scalar + "' is listed twice, expected each value once");
        }
        s.sweep.emplace_back(sk, sv);
      }
      continue;
    }
    if (key == "reference.unstated") {
      if (v.kind != YNode::Kind::Map || v.map.empty())
        throw InputError(v.kind == YNode::Kind::Null ? v.key_mark : v.mark,
                         "reference.unstated must be a mapping of key -> list of values, got " + v.kind_name());
      size_t combinations = 1;
      for (const auto& [uk, uv] : v.map) {
        const KeySpec* target = find_key(uk);
        if (!target || !target->apply || uk == "sweep" || uk.rfind("reference.", 0) == 0 || uk.rfind("output.", 0) == 0)
          throw InputError(uv.key_mark, "reference.unstated: unknown key '" + uk + "', expected a setting of the run");
        if (uv.kind != YNode::Kind::Seq || uv.seq.empty())
          throw InputError(uv.mark, "reference.unstated." + uk + " must be a non-empty list of values");
        for (const YNode& item : uv.seq)
          if (item.kind != YNode::Kind::Scalar)
            throw InputError(item.mark, "reference.unstated." + uk + ": expected a value, got " + item.kind_name());
        combinations *= uv.seq.size();
        if (combinations > 64)
          throw InputError(uv.mark, "reference.unstated spans more than 64 combinations, expected at most 64");
      }
      s.reference.unstated.clear();
      for (const auto& [uk, uv] : v.map) s.reference.unstated.emplace_back(uk, uv);
      continue;
    }
    if (!spec->apply) {
      if (v.kind != YNode::Kind::Map)
        throw InputError(v.kind == YNode::Kind::Null ? v.key_mark : v.mark,
                         key + " must be a mapping of keys, got " + v.kind_name());
      walk(v, key, leaves, s);
    } else {
      if (v.kind == YNode::Kind::Null && key == "inference.speculative.draft_model") continue;  // null: no draft
      if (v.kind == YNode::Kind::Null) throw InputError(v.key_mark, key + " has no value, expected " + spec->type);
      leaves.emplace_back(key, &v);
    }
  }
}

std::vector<std::string> include_list(const YNode& root) {
  std::vector<std::string> out;
  const YNode* inc = root.find("include");
  if (!inc) return out;
  if (inc->kind == YNode::Kind::Scalar) return {inc->scalar};
  if (inc->kind != YNode::Kind::Seq)
    throw InputError(inc->mark, "include must be a path or a list of paths, got " + inc->kind_name());
  for (const auto& item : inc->seq) out.push_back(scalar(item, "include", "a path"));
  return out;
}

// The files read so far: each file's merged tree (loaded once, however many files
// include it) and every path read, in order.
struct Loaded {
  std::vector<std::pair<std::string, YNode>> trees;  // canonical path -> merged tree
  std::vector<std::string> files;
};

// Loads `path` with its includes merged underneath it; `stack` detects cycles.
YNode load_with_includes(const std::string& path, const SourceMark& from, std::vector<std::string>& stack,
                         Loaded& loaded) {
  std::error_code ec;
  std::string canon = fs::weakly_canonical(fs::path(path), ec).string();
  if (ec) canon = path;
  if (auto it = std::find(stack.begin(), stack.end(), canon); it != stack.end()) {
    std::string chain;
    for (; it != stack.end(); ++it) chain += "'" + fs::path(*it).filename().string() + "' -> ";
    throw InputError(from, "include cycle: " + chain + "'" + fs::path(canon).filename().string() + "'");
  }
  for (const auto& [p, tree] : loaded.trees)
    if (p == canon) return tree;
  loaded.files.push_back(canon);
  YNode doc = load_yaml_file(path, from);
  if (doc.kind == YNode::Kind::Null) doc.kind = YNode::Kind::Map;
  if (doc.kind != YNode::Kind::Map)
    throw InputError(from.known() ? from : doc.mark,
                     (from.known() ? "included file '" + fs::path(path).filename().string() + "' is not a scenario: "
                                   : std::string()) +
                         "a scenario must be a mapping of keys, got " + doc.kind_name());
  // An included file none of whose top-level keys is a scenario key is not a scenario
  // fragment (a stray include of any readable file): it is named, its text never echoed.
  if (from.known() && !doc.map.empty() &&
      std::none_of(doc.map.begin(), doc.map.end(), [](const auto& kv) { return find_key(kv.first) != nullptr; }))
    throw InputError(from, "included file '" + fs::path(path).filename().string() +
                               "' is not a scenario: none of its top-level keys is a scenario key");
  stack.push_back(canon);
  YNode merged;
  merged.kind = YNode::Kind::Map;
  merged.mark = doc.mark;
  const YNode* inc = doc.find("include");
  std::vector<std::string> incs = include_list(doc);
  for (size_t i = 0; i < incs.size(); ++i) {
    const YNode& at = inc->kind == YNode::Kind::Seq ? inc->seq[i] : *inc;
    fs::path p = fs::path(incs[i]);
    if (p.is_relative()) p = fs::path(path).parent_path() / p;
    std::error_code ec;  // a name the file system refuses (too long, say) is an input error, not a crash
    const bool there = fs::exists(p, ec);
    if (ec) throw InputError(at.mark, "included file '" + incs[i] + "' cannot be opened: " + ec.message());
    if (!there) throw InputError(at.mark, "included file '" + incs[i] + "' does not exist");
    YNode sub = load_with_includes(p.string(), at.mark, stack, loaded);
    if (YNode* subinc = sub.find("include")) *subinc = YNode{};  // already merged
    merge_yaml(merged, sub);
  }
  stack.pop_back();
  merge_yaml(merged, doc);
  loaded.trees.emplace_back(canon, merged);
  return merged;
}

// Puts `value` at the dotted `key`, creating mappings on the way.
void set_node(YNode& root, const std::string& key, const YNode& value) {
  YNode* cur = &root;
  size_t start = 0;
  for (;;) {
    size_t dot = key.find('.', start);
    std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    YNode* next = cur->find(part);
    if (dot == std::string::npos) {
      if (next)
        *next = value;
      else
        cur->map.emplace_back(part, value);
      return;
    }
    if (!next) {
      YNode m;
      m.kind = YNode::Kind::Map;
      m.mark = m.key_mark = value.mark;
      cur->map.emplace_back(part, m);
      next = &cur->map.back().second;
    } else if (next->kind != YNode::Kind::Map) {
      next->kind = YNode::Kind::Map;
      next->map.clear();
    }
    cur = next;
    start = dot + 1;
  }
}

void apply_set(YNode& root, const std::string& arg, int index) {
  const std::string file = "--set '" + arg + "'";
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError(SourceMark{file, 1, 1}, "--set expects key=value, e.g. --set parallel.tp=4");
  const std::string key = arg.substr(0, eq);
  if (key.front() == '.' || key.back() == '.' || key.find("..") != std::string::npos)
    throw InputError(
        SourceMark{file, 1, 1}, "--set key '" + key +
                                    "' has an empty part, expected dotted names such as parallel.tp; "
                                    "top-level keys: " +
                                    [] {
                                      std::string t;
                                      for (const auto& k : key_table())
                                        if (k.key.find('.') == std::string::npos) t += (t.empty() ? "" : ", ") + k.key;
                                      return t;
                                    }());
  const KeySpec* spec = find_key(key);
  if (spec && !spec->apply)
    throw InputError(SourceMark{file, 1, 1},
                     "'" + key + "' is " +
                         (key == "include" ? "not settable from the command line"
                                           : "a mapping; set one of its keys, e.g. " + key + ".<key>=value"));
  if (!spec) {
    // The first part of the key that names nothing, under the longest prefix that does.
    std::string parent;
    for (size_t at = 0;;) {
      const size_t dot = key.find('.', at);
      const std::string head = key.substr(0, dot);
      if (dot == std::string::npos || !find_key(head))
        unknown_key(parent, key.substr(at, dot == std::string::npos ? std::string::npos : dot - at),
                    SourceMark{file, 1, 1});
      parent = head;
      at = dot + 1;
    }
  }
  YNode value = parse_yaml(arg.substr(eq + 1), file);
  const int col = static_cast<int>(eq) + 2;
  value.mark = SourceMark{file, 1, col};
  value.key_mark = SourceMark{file, 1, 1};
  (void)index;
  set_node(root, key, value);
}

// The mean of a length distribution (zipf's from the integral of its truncated density).
double length_mean(const LengthDist& d) {
  const double lo = static_cast<double>(d.min), hi = static_cast<double>(d.max);
  if (d.dist == "fixed") return static_cast<double>(d.value);
  if (d.dist == "uniform") return (lo + hi) / 2;
  if (d.dist == "lognormal") return std::min(d.mean, hi);
  auto power = [](double x, double e) { return std::fabs(e) < 1e-9 ? std::log(x) : std::pow(x, e) / e; };
  const double den = power(hi, 1 - d.alpha) - power(lo, 1 - d.alpha);
  return den > 0 ? (power(hi, 2 - d.alpha) - power(lo, 2 - d.alpha)) / den : lo;
}

// The engine limits `trtllm-bench build --dataset` builds with when none are given
// (TensorRT-LLM, tensorrt_llm/bench/build/tuning.py, calc_engine_setting and
// finetune_setting): the requests of the dataset's mean length that fit in 0.95 of the
// memory the weights leave (each GPU holding at least one KV head), at most 4,096 a pipeline
// stage, then rounded up to a "slightly optimistic" batch size (at least 64) and a token
// budget for that batch's prompts (2,048 to 32,768).
void trtllm_bench_engine_limits(Scenario& s) {
  InferenceConfig& inf = s.serving;
  const SourceMark at = s.mark("inference.engine_build");
  if (inf.scheduler != "trtllm")
    throw InputError(at,
                     "inference.engine_build: trtllm-bench builds TensorRT-LLM engines, expected "
                     "inference.scheduler: trtllm, got '" +
                         inf.scheduler + "'");
  if (!inf.trace.empty())
    throw InputError(at,
                     "inference.engine_build: trtllm-bench sizes the engine from the dataset's mean lengths, "
                     "taken from inference.prompt_tokens and output_tokens, expected no inference.trace");
  const ModelConfig& m = s.model;
  // Weight-only INT8 / INT4 engines are not among the quantizations the heuristic tunes: the
  // build keeps TensorRT-LLM's defaults (get_benchmark_engine_settings).
  const DType weights = inf.weight_dtype_for(m.dtype);
  if (weights == DType::INT8 || weights == DType::INT4) return;
  auto bytes = [](DType d) { return d == DType::FP8 ? 1.0 : 2.0; };
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const double tp = static_cast<double>(s.parallel.tp), pp = static_cast<double>(s.parallel.pp);
  const double kv_heads = std::max(tp, static_cast<double>(m.kv_heads));
  // Under MLA every rank caches the whole latent and rotary key.
  const double kv_width = m.is_mla() ? tp * static_cast<double>(m.mla.kv_lora_rank + m.mla.rope_head_dim)
                                     : 2.0 * kv_heads * static_cast<double>(m.head_dim());
  const double gib_per_token = static_cast<double>(m.layers) * kv_width * bytes(inf.kv_dtype_for(m.dtype)) / gib;
  // The engine's size in GB (parameters / 10^9 x bytes), taken from the memory in GiB as the
  // source does; its later versions count the engine in GiB too.
  const double engine = static_cast<double>(m.total_params()) * bytes(weights) / 1e9;
  const double memory = s.cluster.node.gpu.hbm_bytes / gib * tp * pp;
  const double isl = length_mean(inf.prompt), osl = length_mean(inf.output);
  const double requests = (memory - engine) * 0.95 / (gib_per_token * (isl + osl));
  if (requests < 1)
    throw InputError(at,
                     "inference.engine_build: trtllm-bench finds no request of the dataset's mean length in the "
                     "memory the weights leave, expected more GPUs or a smaller model");
  const double bs = std::min(requests, 4096.0) / pp;
  const double tokens = std::min(bs * (1 + isl / osl), 32768.0);
  const auto up = [](double x, double step) { return step * std::ceil(x / step); };
  const double max_bs = bs < 256 ? std::max(64.0, up(bs, 32)) : bs < 1024 ? up(bs, 128) : up(bs, 256);
  const double max_tokens = tokens < 4096   ? std::max(2048.0, up(tokens, 256))
                            : tokens < 8192 ? up(tokens, 512)
                                            : up(tokens, 1024);
  // A limit the scenario sets itself is kept (the tool takes both when both are given).
  if (!s.marks.count("inference.max_batch_size")) inf.max_batch_size = static_cast<int64_t>(max_bs);
  if (!s.marks.count("inference.max_batch_tokens")) inf.max_batch_tokens = static_cast<int64_t>(max_tokens);
}

}  // namespace

SourceMark Scenario::mark(const std::string& key) const {
  for (std::string k = key;;) {
    auto it = marks.find(k);
    if (it != marks.end()) return it->second;
    size_t dot = k.rfind('.');
    if (dot == std::string::npos) break;
    k = k.substr(0, dot);
  }
  return SourceMark{path, 1, 1};
}

Scenario load_scenario(const std::string& path, const std::vector<std::string>& sets, const LoadOptions& options) {
  return load_scenario(path, sets, {}, options);
}

Scenario load_scenario(const std::string& path, const std::vector<std::string>& sets,
                       const std::vector<std::pair<std::string, YNode>>& overrides, const LoadOptions& options) {
  std::vector<std::string> stack;
  Loaded loaded;
  YNode root = load_with_includes(path, SourceMark{}, stack, loaded);
  for (size_t i = 0; i < sets.size(); ++i) apply_set(root, sets[i], static_cast<int>(i) + 1);
  for (const auto& [key, value] : overrides) set_node(root, key, value);
  if (YNode* inc = root.find("include")) *inc = YNode{};

  Scenario s;
  s.path = path;
  s.inputs = std::move(loaded.files);
  s.allow_large = options.allow_large;
  s.name = fs::path(path).stem().string();
  std::vector<std::pair<std::string, const YNode*>> leaves;
  walk(root, "", leaves, s);
  // Presets first, so the fields beside them override whatever order they were written in.
  std::stable_partition(leaves.begin(), leaves.end(), [](const auto& l) {
    return l.first == "cluster.preset" || l.first == "model.preset" || l.first == "cluster.topology_file";
  });
  // A topology file is the whole cluster: what a preset's cluster would set beside it is refused.
  if (std::any_of(leaves.begin(), leaves.end(), [](const auto& l) { return l.first == "cluster.topology_file"; }))
    for (const auto& [key, node] : leaves)
      for (const char* own : {"cluster.preset", "cluster.nodes", "cluster.gpus_per_node", "cluster.gpu",
                              "cluster.gpu_spec.", "cluster.scale_out."})
        if (key == own || (own[std::strlen(own) - 1] == '.' && key.rfind(own, 0) == 0))
          throw InputError(node->key_mark.known() ? node->key_mark : node->mark,
                           key + " does not go with cluster.topology_file, expected it in the topology file");
  // A custom GPU's fields after the GPU preset they amend.
  std::stable_partition(leaves.begin(), leaves.end(),
                        [](const auto& l) { return l.first.rfind("cluster.gpu_spec.", 0) != 0; });
  bool have_cluster = false, have_model_preset = false;
  int64_t preset_heads = 0;
  for (const auto& [key, node] : leaves) {
    find_key(key)->apply(*node, s);
    if (key == "model.preset") preset_heads = s.model.heads;
    have_cluster |= key == "cluster.preset" || key == "cluster.topology_file";
    have_model_preset |= key == "model.preset";
  }
  if (!have_cluster)
    throw InputError(s.mark("cluster"), "cluster.preset is required (or cluster.topology_file), expected one of: " +
                                            join(node_preset_names()));

  // Mixed nodes or a fabric given link by link: training and traces run on them; serving
  // replicas and jobs are placed on nodes alike, and are refused there.
  if (!s.cluster.uniform()) {
    if (s.inference)
      throw InputError(s.mark("cluster.topology_file"),
                       "serving on a topology file of mixed nodes or an explicit fabric is not modelled, expected "
                       "nodes alike on a generated fabric");
    if (!s.jobs.empty())
      throw InputError(s.mark("cluster.topology_file"),
                       "jobs: on a topology file of mixed nodes or an explicit fabric is not modelled, expected nodes "
                       "alike on a generated fabric");
  }
  // A GPU's power model is whole or absent: a limit needs the idle floor under it and the
  // capped rate that sets the energy per FLOP (docs/model.md, "Clocks under the power cap").
  for (const char* k : {"cluster.gpu_spec.power_limit", "cluster.gpu_spec.idle_power", "cluster.gpu_spec.stream_power",
                        "cluster.gpu_spec.capped_bf16_tflops", "cluster.gpu_spec.fp8_energy_ratio"}) {
    if (!s.marks.count(k)) continue;
    if (const std::string why = power_model_problem(s.cluster.node.gpu); !why.empty()) throw InputError(s.mark(k), why);
    break;
  }
  // A node trimmed to fewer GPUs keeps one NIC per GPU at most, unless told otherwise.
  if (s.marks.count("cluster.gpus_per_node") && !s.marks.count("cluster.scale_out.nics_per_node"))
    s.cluster.node.nics = std::min(s.cluster.node.nics, s.cluster.node.gpus);
  if (!s.marks.count("network_model") || s.network_model == "auto") s.network_model = auto_network_model(s.cluster);

  if (!s.chakra_dir.empty()) {
    // The traces are the workload: the model and layout are what they recorded.
    for (const char* own : {"model", "parallel", "inference", "jobs", "sweep"})
      if (s.marks.count(own))
        throw InputError(s.mark(own),
                         std::string(own) + ": does not go with workload.chakra, the traces give the workload");
    if (s.marks.count("faults")) {
      s.faults.set = true;
      if (s.faults.checkpoint_size_bytes < 0)
        throw InputError(s.mark("faults"),
                         "faults.checkpoint_size is required with workload.chakra (the traces carry "
                         "no model to size a checkpoint from)");
      if (s.faults.checkpoint_bandwidth <= 0)
        throw InputError(s.mark("faults"), "faults.checkpoint_bandwidth is required, expected e.g. 100GB/s");
    }
    s.model.name = "chakra traces";
    s.chakra_dir =
        (fs::path(s.chakra_dir).is_relative() ? fs::path(path).parent_path() / s.chakra_dir : fs::path(s.chakra_dir))
            .string();
    s.merged_yaml = emit_yaml(root);
    s.config_yaml = s.merged_yaml;
    return s;
  }
  if (!s.jobs.empty()) {
    // A jobs: file describes the shared cluster; each job's file has the rest.
    for (const char* own :
         {"model", "parallel", "training", "inference", "variability", "faults", "sweep", "reference"})
      if (s.marks.count(own))
        throw InputError(s.mark(own), std::string(own) + ": belongs in each job's scenario, not beside jobs:");
    if (s.marks.count("output"))
      throw InputError(s.mark("output"),
                       "a jobs: run prints its summary (--json for the object) and writes no "
                       "output: files, expected none");
    if (!s.marks.count("network_model")) s.network_model = "flow";  // the jobs contend on the fabric
    s.merged_yaml = emit_yaml(root);
    s.config_yaml = s.merged_yaml;
    return s;
  }
  ModelConfig& m = s.model;
  if (s.marks.count("model") == 0)
    throw InputError(SourceMark{path, 1, 1}, "model is required: a preset or its fields");
  if (!m.blocks.empty()) {
    // A model of blocks: the transformer's fields do not apply.
    for (const auto& [key, mark] : s.marks)
      if (key.rfind("model.", 0) == 0 && key != "model.blocks" && key != "model.dtype" && key != "model.name" &&
          key.rfind("model.blocks.", 0) != 0)
        throw InputError(mark, key + " does not go with model.blocks, expected the shapes in the blocks");
    if (s.inference) throw InputError(s.mark("inference"), "inference: serves transformer models, not model.blocks");
    if (m.name.empty()) m.name = "blocks";
  } else {
    // kv_heads defaults to heads (MHA) unless a GQA preset set it: overriding the heads of
    // an MHA preset keeps it MHA.
    if (!s.marks.count("model.kv_heads") && (!have_model_preset || m.kv_heads == preset_heads)) m.kv_heads = m.heads;
    for (auto [key, value] : {std::pair{"layers", m.layers},
                              {"hidden", m.hidden},
                              {"heads", m.heads},
                              {"ffn_hidden", m.ffn_hidden},
                              {"vocab", m.vocab},
                              {"seq_len", m.seq_len}}) {
      if (value <= 0)
        throw InputError(s.mark("model"),
                         std::string("model.") + key + " is not set: give model.preset or model." + key);
    }
    if (m.name.empty()) m.name = "custom";
    if (m.head_channels == 0 && m.hidden % m.heads != 0)
      throw InputError(s.mark("model.heads"), "model.heads (" + std::to_string(m.heads) +
                                                  ") must divide model.hidden (" + std::to_string(m.hidden) +
                                                  "), or give model.head_dim");
    if (m.is_mla()) {
      const MlaConfig& a = m.mla;
      if (a.qk_head_dim <= 0 || a.rope_head_dim <= 0 || a.v_head_dim <= 0)
        throw InputError(s.mark("model.mla"),
                         "model.mla needs qk_head_dim, rope_head_dim and v_head_dim (DeepSeek-V3: "
                         "128, 64, 128)");
      if (m.head_channels > 0)
        throw InputError(s.mark("model.head_dim"),
                         "model.head_dim does not apply under model.mla: its heads' widths are model.mla's");
      if (m.learned_positions)
        throw InputError(s.mark("model.mla"),
                         "model.mla's keys carry a rotary part, expected a model without a learned "
                         "position table (ffn_type swiglu, or a Llama-like preset)");
    }
    if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0)
      throw InputError(s.mark("model.kv_heads"), "model.kv_heads (" + std::to_string(m.kv_heads) +
                                                     ") must divide model.heads (" + std::to_string(m.heads) + ")");
  }
  if (s.reference.set || s.marks.count("reference")) {
    if (s.reference.metric.empty())
      throw InputError(s.mark("reference"), "reference.metric is required, e.g. iteration_time_s");
    if (!s.marks.count("reference.value"))
      throw InputError(s.mark("reference"), "reference.value is required, expected the published number");
    if (s.reference.source.empty())
      throw InputError(s.mark("reference"), "reference.source is required, expected a citation");
    if (s.reference.attention_flops == "full" && s.reference.metric != "tflops_per_gpu" && s.reference.metric != "mfu")
      throw InputError(s.mark("reference.attention_flops"),
                       "reference.attention_flops: full converts a model-FLOP figure, expected reference.metric "
                       "tflops_per_gpu or mfu (not " +
                           s.reference.metric + ")");
    if (s.reference.attention_flops == "full" && s.inference)
      throw InputError(s.mark("reference.attention_flops"),
                       "reference.attention_flops applies to training runs, not to inference:");
    if (s.reference.attention_flops == "full" && !s.chakra_dir.empty())
      throw InputError(s.mark("reference.attention_flops"),
                       "reference.attention_flops: full needs the planner's attention FLOPs, which Chakra traces "
                       "(workload.chakra) do not carry");
    s.reference.set = true;
  }
  // Keys that would be silently ignored are errors.
  if (s.marks.count("faults")) {
    FaultConfig& f = s.faults;
    f.set = true;
    if (s.inference)
      throw InputError(s.mark("faults"),
                       "faults: applies to training runs (goodput over training.duration), not to "
                       "inference:");
    if (f.gpu_mtbf_s <= 0 && f.node_mtbf_s <= 0 && f.link_mtbf_s <= 0 && f.failures_s.empty())
      throw InputError(s.mark("faults"), "faults: needs gpu_mtbf, node_mtbf, link_mtbf or a failures: trace");
    if (f.checkpoint_bandwidth <= 0)
      throw InputError(s.mark("faults"), "faults.checkpoint_bandwidth is required, expected e.g. 100GB/s");
    for (double t : f.failures_s)
      if (t > s.training.duration_s)
        throw InputError(s.mark("faults.failures"), "faults.failures has a failure past training.duration");
  }
  {
    MoeRouting& r = s.model.moe.routing;
    r.seed = s.seed;
    if (r.dist != "even" && m.moe.experts == 0)
      throw InputError(s.mark("model.moe.routing"),
                       "model.moe.routing needs a mixture-of-experts model (model.moe.experts > 0)");
    if (r.dist == "histogram") {
      if (static_cast<int64_t>(r.histogram.size()) != m.moe.experts)
        throw InputError(s.mark(r.histogram.empty() ? "model.moe.routing" : "model.moe.routing.histogram"),
                         "model.moe.routing.histogram has " + std::to_string(r.histogram.size()) +
                             " entries, expected one per expert (" + std::to_string(m.moe.experts) + ")");
      double sum = 0;
      for (double v : r.histogram) sum += v;
      if (sum <= 0)
        throw InputError(s.mark("model.moe.routing.histogram"),
                         "model.moe.routing.histogram sums to 0, expected loads");
    } else if (!r.histogram.empty()) {
      throw InputError(s.mark("model.moe.routing.histogram"), "model.moe.routing.histogram needs dist: histogram");
    }
  }
  for (const char* part : {"gpu_speed", "link_speed"}) {
    const std::string key = std::string("variability.") + part;
    const SpreadDist& d = key == "variability.gpu_speed" ? s.variability.gpu_speed : s.variability.link_speed;
    if (d.dist != "none" && !s.marks.count(key + ".sigma"))
      throw InputError(s.mark(key + ".dist"), key + ".sigma is required with dist " + d.dist + ", expected e.g. 0.05");
  }
  for (const Straggler& st : s.variability.stragglers) {
    if (st.kind == "gpu" && st.index >= s.gpus())
      throw InputError(st.mark, "straggler gpu " + std::to_string(st.index) + " is past the cluster's " +
                                    std::to_string(s.gpus()) + " GPUs, expected 0.." + std::to_string(s.gpus() - 1));
    if (st.kind == "node" && st.index >= s.cluster.nodes)
      throw InputError(st.mark, "straggler node " + std::to_string(st.index) + " is past the cluster's " +
                                    std::to_string(s.cluster.nodes) + " nodes, expected 0.." +
                                    std::to_string(s.cluster.nodes - 1));
  }
  if (s.marks.count("training.recompute_modules")) {
    if (s.training.recompute != "selective")
      throw InputError(s.mark("training.recompute_modules"),
                       "training.recompute_modules applies under selective recompute, expected training.recompute: "
                       "selective (it is " +
                           s.training.recompute + ")");
    for (const std::string& mod : s.training.recompute_modules)
      if (mod == "mla_up_proj" && !m.is_mla())
        throw InputError(s.mark("training.recompute_modules"),
                         "training.recompute_modules: mla_up_proj needs multi-head latent attention (model.mla)");
  }
  if (s.inference && s.marks.count("training"))
    throw InputError(s.mark("training"), "a training: block beside inference: is not used, expected one of the two");
  if (m.moe.dense_layers > m.layers)
    throw InputError(s.mark("model.moe.dense_layers"),
                     "model.moe.dense_layers = " + std::to_string(m.moe.dense_layers) +
                         " is past model.layers = " + std::to_string(m.layers));
  if (s.inference && s.serving.trace.empty()) {
    for (const auto& [what, d] :
         {std::pair{"prompt_tokens", &s.serving.prompt}, {"output_tokens", &s.serving.output}}) {
      if (d->dist != "fixed" && d->min > d->max)
        throw InputError(s.mark(std::string("inference.") + what + ".min"),
                         std::string("inference.") + what + ".min = " + std::to_string(d->min) +
                             " is past its max = " + std::to_string(d->max) + ", expected min <= max");
      // Every request of a fixed length, or the shortest one a distribution can draw.
      const int64_t longest = d->dist == "fixed" ? d->value : d->min;
      if (longest > m.seq_len)
        throw InputError(s.mark(std::string("inference.") + what),
                         std::string("inference.") + what + " reach " + std::to_string(longest) +
                             " tokens, past model.seq_len = " + std::to_string(m.seq_len) +
                             " (the longest context the model serves), expected shorter or a longer model.seq_len");
    }
    // A request's prompt and output share the context: even the shortest must fit.
    auto shortest = [](const LengthDist& d) { return d.dist == "fixed" ? d.value : d.min; };
    const int64_t context = shortest(s.serving.prompt) + shortest(s.serving.output);
    if (context > m.seq_len)
      throw InputError(s.mark("inference.output_tokens"),
                       "the shortest request, a prompt of " + std::to_string(shortest(s.serving.prompt)) +
                           " and an output of " + std::to_string(shortest(s.serving.output)) +
                           " tokens, runs past model.seq_len = " + std::to_string(m.seq_len) +
                           " (the longest context the model serves), expected shorter or a longer model.seq_len");
    // A shared prefix opens the prompt: one longer than every prompt the lengths allow opens none.
    const LengthDist& pr = s.serving.prompt;
    const int64_t longest_prompt = pr.dist == "fixed" ? pr.value : pr.max;
    if (s.serving.prefix_groups > 0 && s.serving.prefix_tokens > longest_prompt)
      throw InputError(s.mark("inference.shared_prefix.tokens"),
                       "inference.shared_prefix.tokens = " + std::to_string(s.serving.prefix_tokens) +
                           " is longer than every prompt (at most " + std::to_string(longest_prompt) +
                           " tokens), expected a prefix that prompts open with");
  }
  // Work budgets: a cluster past 2^20 GPUs, or a run past 10^7 requests, is refused before any work.
  const int64_t gpus = static_cast<int64_t>(s.cluster.nodes) * s.cluster.node.gpus;
  if (gpus > (int64_t{1} << 26))  // a ceiling no flag lifts: the cluster's graph would not fit in memory
    throw InputError(s.mark("cluster.nodes"), std::to_string(gpus) + " GPUs is past 67108864, the most any run takes");
  if (!s.allow_large && gpus > (int64_t{1} << 20))
    throw InputError(s.mark("cluster.nodes"),
                     std::to_string(static_cast<int64_t>(s.cluster.nodes) * s.cluster.node.gpus) +
                         " GPUs is past the budget of 1048576 GPUs per cluster "
                         "(--allow-large runs it anyway)");
  if (!s.allow_large && s.inference && s.serving.requests > 10'000'000)
    throw InputError(s.mark("inference.requests"), "inference.requests = " + std::to_string(s.serving.requests) +
                                                       " is past the budget of 10000000 requests per run "
                                                       "(--allow-large runs it anyway)");
  if (s.inference && s.serving.trace.empty()) {
    // Tokens the run is expected to serve: requests x the mean prompt and output lengths
    // of their distributions (zipf's from the integral of its truncated density).
    const double tokens =
        static_cast<double>(s.serving.requests) * (length_mean(s.serving.prompt) + length_mean(s.serving.output));
    char amount[32];
    std::snprintf(amount, sizeof amount, "%.3g", tokens);
    if (tokens > 1e12)
      throw InputError(s.mark("inference.requests"), std::string("the run would serve about ") + amount +
                                                         " tokens, past 1e12, the most any run takes");
    if (!s.allow_large && tokens > 1e10)
      throw InputError(s.mark("inference.requests"), std::string("the run would serve about ") + amount +
                                                         " tokens (requests x mean prompt and output), past the "
                                                         "budget of 1e10 (--allow-large runs it anyway)");
  }

  if (s.serving.arrival_process == "closed" && !s.marks.count("inference.arrivals.concurrency"))
    s.serving.concurrency = 1;
  // The engines' own defaults: vLLM v1 on GPUs of 70 GiB and more (max_num_seqs 1024,
  // max_num_batched_tokens 8192 for the API server, vllm/engine/arg_utils.py);
  // TensorRT-LLM's build defaults (max_batch_size 2048, max_num_tokens 8192).
  if (s.serving.scheduler == "vllm-v1" || s.serving.scheduler == "trtllm") {
    if (!s.marks.count("inference.max_batch_size"))
      s.serving.max_batch_size = s.serving.scheduler == "trtllm" ? 2048 : 1024;
    if (!s.marks.count("inference.max_batch_tokens")) s.serving.max_batch_tokens = 8192;
  }
  if (s.inference && s.serving.engine_build == "trtllm-bench") trtllm_bench_engine_limits(s);
  if (s.inference && s.marks.count("inference.kv_cache_free_fraction") && s.serving.scheduler != "trtllm")
    throw InputError(s.mark("inference.kv_cache_free_fraction"),
                     "inference.kv_cache_free_fraction is TensorRT-LLM's, expected inference.scheduler: trtllm, got '" +
                         s.serving.scheduler + "'");
  if (s.inference && s.serving.chunked_context && s.serving.scheduler != "trtllm")
    throw InputError(s.mark("inference.chunked_context"),
                     "inference.chunked_context is TensorRT-LLM's, expected inference.scheduler: trtllm (sarathi and "
                     "vllm-v1 chunk prefills already), got '" +
                         s.serving.scheduler + "'");
  s.merged_yaml = emit_yaml(root);
  YNode config = root;
  config.map.erase(
      std::remove_if(config.map.begin(), config.map.end(), [](const auto& kv) { return kv.first == "sweep"; }),
      config.map.end());
  s.config_yaml = emit_yaml(config);
  return s;
}

std::vector<KeyDoc> scenario_key_docs() {
  std::vector<KeyDoc> out;
  for (const auto& k : key_table()) out.push_back(KeyDoc{k.key, k.type, k.default_value, k.doc});
  return out;
}

}  // namespace clustersim
