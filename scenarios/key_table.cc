// The scenario key table and the walk that applies it: every key with its type, default,
// one-line doc and parser (the large groups in keys_*.cc), the lookup, and the error for a
// key that is not in it, with the nearest one named.
#include "scenarios/key_table.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "scenarios/error.h"
#include "scenarios/readers.h"
#include "scenarios/units.h"

namespace clustersim {

// ---- the key table --------------------------------------------------------------------

const std::vector<KeySpec>& key_table() {
  using S = Scenario;
  using N = YNode;
  static const std::vector<KeySpec> kKeys = [] {
    KeyList t;
    t.insert(
        t.end(),
        {
            {"name", "string", "file name", "free text stored with every run",
             [](const N& n, S& s) {
               s.name = scalar(n, "name", "text");
               // Printed as is in the summary table: a control character would
               // reach the terminal (an escape sequence recolours or rewrites it).
               // C1 controls (U+0080-U+009F) are 0xC2 0x80-0x9F in UTF-8.
               const std::string& t = s.name;
               for (size_t i = 0; i < t.size(); ++i) {
                 const auto c = static_cast<unsigned char>(t[i]);
                 const bool c1 = c == 0xC2 && i + 1 < t.size() && static_cast<unsigned char>(t[i + 1]) >= 0x80 &&
                                 static_cast<unsigned char>(t[i + 1]) <= 0x9F;
                 if (c < 0x20 || c == 0x7f || c1)
                   throw InputError(n.mark, "name holds a control character, expected printable text");
               }
             }},
            {"include", "list of paths", "[]", "files merged first (relative to this file); this file wins", nullptr},
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
             "nodes: [8, 9]}]; each job's own file gives its model, layout and size (sim/jobs.h; relative to this "
             "file)",
             [](const N& n, S& s) {
               if (n.kind != YNode::Kind::Seq || n.seq.empty())
                 throw InputError(n.mark,
                                  "jobs must be a non-empty list of {scenario: PATH, first_node: N}, got " +
                                      (n.kind == YNode::Kind::Seq ? std::string("an empty list") : n.kind_name()));
               for (const YNode& item : n.seq) {
                 if (item.kind != YNode::Kind::Map)
                   throw InputError(item.mark,
                                    "a job must be a mapping {scenario: PATH, first_node: N}, got " + item.kind_name());
                 JobSpec j;
                 j.mark = item.mark;
                 for (const auto& [k, v] : item.map) {
                   if (k == "scenario") {
                     j.scenario = scalar(v, "jobs.scenario", "a path");
                     j.path = as_path(v, "jobs.scenario");
                   } else if (k == "first_node")
                     j.first_node = as_int(v, "jobs.first_node", 0, kMaxCount);
                   else if (k == "nodes")
                     j.nodes = int_list(v, "jobs.nodes", 0, kMaxCount);
                   else
                     throw InputError(v.key_mark,
                                      "unknown key '" + k + "' in a job, expected one of: scenario, first_node, nodes");
                 }
                 if (j.scenario.empty()) throw InputError(item.mark, "a job needs scenario: PATH");
                 if (!j.nodes.empty() && item.find("first_node"))
                   throw InputError(item.find("first_node")->key_mark,
                                    "a job places itself by first_node or by nodes, expected one of them");
                 s.jobs.push_back(j);
               }
             }},
            {"workload", "mapping", "", "a workload given as traces instead of model: and parallel:", nullptr},
            {"workload.chakra", "path", "none",
             "a folder of Chakra execution traces (<name>.<rank>.et, comm_group.json; relative to this file): one rank "
             "per trace, run on the cluster (plan/chakra.h)",
             [](const N& n, S& s) { s.chakra_dir = as_path(n, "workload.chakra"); }},
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
             "auto (flow where concurrent transfers must share a link: nodes with fewer NICs than GPUs, an "
             "oversubscribed fabric, or a topology file's explicit links; analytic otherwise) | analytic (each "
             "collective alone on the network) | flow "
             "(max-min shared links: concurrent transfers contend)",
             [](const N& n, S& s) {
               s.network_model = as_enum(n, "network_model", {"auto", "analytic", "flow"});
             }},
            {"calibration", "path", "none",
             "calibration profile YAML (calibrate/profiles/*.yaml; relative to this file); else the built-in defaults; "
             "a warning if the profile's gpu: is another model than the cluster's GPU",
             [](const N& n, S& s) { s.calibration = as_path(n, "calibration"); }},
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

namespace {

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

}  // namespace

[[noreturn]] void unknown_key(std::string parent, const std::string& key, const SourceMark& mark) {
  // yaml-cpp reads a merge key as a plain key named <<.
  if (key == "<<")
    throw InputError(mark,
                     "YAML merge keys (<<) are not supported, expected the keys written out, or include: to "
                     "merge another file");
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

// A value as the key of `type` reads it, for telling two spellings of one value apart:
// a number, size, time or bandwidth as its quantity ("1" and "+1", "1h" and "60min",
// "80GB" and "80000000000"), anything else (or what does not read) as written.
std::string value_identity(const std::string& type, const std::string& text) {
  std::string why;
  char buf[40];
  if (type == "integer" || type == "number") {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (!text.empty() && *end == '\0') return std::snprintf(buf, sizeof buf, "%.17g", v), buf;
  } else if (int64_t bytes = 0; type == "size" && parse_size(text, bytes, why)) {
    return std::to_string(bytes);
  } else if (double sec = 0; type == "time" && parse_time(text, sec, why)) {
    return std::snprintf(buf, sizeof buf, "%.17g", sec), buf;
  } else if (double span = 0; type == "duration" && parse_duration(text, span, why)) {
    return std::snprintf(buf, sizeof buf, "%.17g", span), buf;
  } else if (double bps = 0; type == "bandwidth" && parse_bandwidth(text, bps, why)) {
    return std::snprintf(buf, sizeof buf, "%.17g", bps), buf;
  }
  return text;
}

// A list of one setting's values (a sweep's, reference.unstated's): each a value (null too
// where `null_ok`: a draft model's "none"), each once, however it is spelled.
void check_value_list(const YNode& list, const std::string& name, bool null_ok, const std::string& type) {
  for (size_t i = 0; i < list.seq.size(); ++i) {
    const YNode& item = list.seq[i];
    const SourceMark at = item.mark.known() ? item.mark : list.mark;
    if (item.kind != YNode::Kind::Scalar && !(null_ok && item.kind == YNode::Kind::Null))
      throw InputError(at, name + ": expected a value, got " + item.kind_name());
    for (size_t j = 0; j < i; ++j)
      if (list.seq[j].kind == item.kind &&
          value_identity(type, list.seq[j].scalar) == value_identity(type, item.scalar))
        throw InputError(at, name + ": " +
                                 (item.kind == YNode::Kind::Null ? std::string("null") : "'" + item.scalar + "'") +
                                 (item.scalar == list.seq[j].scalar ? std::string(" is listed twice")
                                                                    : " is '" + list.seq[j].scalar + "' again") +
                                 ", expected each value once");
  }
}

// Collects (key, node) leaves in document order, rejecting unknown keys.
void walk(const YNode& map, const std::string& parent, std::vector<std::pair<std::string, const YNode*>>& leaves,
          Scenario& s) {
  for (const auto& [k, v] : map.map) {
    const std::string key = parent.empty() ? k : parent + "." + k;
    const KeySpec* spec = find_key(key);
    if (!spec) unknown_key(parent, k, v.key_mark);
    // A block written as null (output: null, faults: ~) is the block unwritten, as --set
    // KEY=null makes it: a file can drop a block its includes give.
    if (v.kind == YNode::Kind::Null && !spec->apply && key != "include" && key != "sweep" &&
        key != "reference.unstated")
      continue;
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
        check_value_list(sv, "sweep." + sk, sk == "inference.speculative.draft_model", target->type);
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
        check_value_list(uv, "reference.unstated." + uk, false, target->type);
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

}  // namespace clustersim
