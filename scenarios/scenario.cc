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
#include <initializer_list>
#include <set>

#include "scenarios/key_table.h"
#include "scenarios/readers.h"
#include "scenarios/set_option.h"
#include "scenarios/topology_file.h"
#include "scenarios/units.h"
#include "topology/presets.h"

namespace clustersim {
namespace {

namespace fs = std::filesystem;

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

// Refuses, at its line, the first key written under `prefix` that is neither one of
// `allowed` nor under one of them: a key the run would ignore. The message is the key and `why`.
void refuse_keys_under(const Scenario& s, const std::string& prefix, std::initializer_list<const char*> allowed,
                       const std::string& why) {
  for (const auto& entry : s.marks) {
    const std::string& key = entry.first;  // a plain reference: clang's lambdas do not capture bindings
    if (key.rfind(prefix, 0) != 0) continue;
    const bool kept = std::any_of(allowed.begin(), allowed.end(), [&key](const char* a) {
      const std::string k = a;
      return key == k || key.rfind(k + ".", 0) == 0;
    });
    if (!kept) throw InputError(entry.second, key + why);
  }
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
                     "taken from inference.prompt_tokens and output_tokens, expected no inference.arrivals.trace");
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

// The analytic network costs each transfer alone on its route. That is exact where every
// GPU owns its NIC on a non-blocking fabric, as in DGX nodes on a rail-optimized or full
// fat-tree. Where GPUs share a NIC, or leaves share an oversubscribed uplink, the DP
// groups of one node's TP and PP ranks reduce at the same time through the same link, and
// only the flow network, which shares links among concurrent transfers, sees it.
std::string auto_network_model(const ClusterSpec& c) {
  if (c.nodes < 2) return "analytic";
  if (c.fabric.oversubscription > 1.0) return "flow";
  // An explicit fabric (a topology file's links) may funnel any traffic through one link:
  // only the flow network shares it.
  if (!c.fabric_links.empty()) return "flow";
  for (int n = 0; n < c.nodes; ++n) {
    const NodeSpec& node = c.node_at(n);
    if (node.nics < node.gpus) return "flow";
    if (c.node_specs.empty()) break;  // every node built alike
  }
  return "analytic";
}

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
  for (size_t i = 0; i < sets.size(); ++i) apply_set(root, sets[i]);
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
  // Userbuffers' kernels take SMs from the GPU's own: as many as it has leaves the GEMM none.
  for (const auto& [k, v] : {std::pair{"parallel.tp_overlap_proj_sms", s.parallel.tp_overlap_proj_sms},
                             {"parallel.tp_overlap_fc2_sms", s.parallel.tp_overlap_fc2_sms},
                             {"parallel.tp_overlap_qkv_dgrad_sms", s.parallel.tp_overlap_qkv_dgrad_sms},
                             {"parallel.tp_overlap_fc1_dgrad_sms", s.parallel.tp_overlap_fc1_dgrad_sms},
                             {"parallel.tp_overlap_qkv_wgrad_sms", s.parallel.tp_overlap_qkv_wgrad_sms},
                             {"parallel.tp_overlap_fc1_wgrad_sms", s.parallel.tp_overlap_fc1_wgrad_sms}}) {
    // On GPUs whose GEMMs run on clusters of SMs (Hopper's pairs), each block a kernel holds
    // takes its pair from the GEMM: at half the SMs or more the GEMM has none left.
    const GpuSpec& gpu = s.cluster.node.gpu;
    const int most = gpu.gemm_cluster_sms >= 2 ? gpu.sm_count / gpu.gemm_cluster_sms : gpu.sm_count;
    if (s.marks.count(k) && gpu.sm_count > 0 && v >= most)
      throw InputError(s.mark(k), std::string(k) + " is " + std::to_string(v) + ", expected fewer than " +
                                      std::to_string(most) + " on a " + gpu.name + " (" + std::to_string(gpu.sm_count) +
                                      " SMs" + (gpu.gemm_cluster_sms >= 2 ? ", its GEMMs in pairs of them" : "") +
                                      "; the GEMM it overlaps runs on the rest)");
  }
  // The key sets each GPU's link into the node's NVSwitch: a node without one (direct GPU links,
  // as MI300X's Infinity Fabric mesh and DGX-1's NVLink, or PCIe alone) would ignore it.
  if (s.marks.count("cluster.gpu_spec.nvlink_bandwidth") && !s.cluster.node.nvswitch)
    throw InputError(s.mark("cluster.gpu_spec.nvlink_bandwidth"),
                     "node " + s.cluster.node.preset +
                         " has no NVSwitch for the key to set (its GPUs link directly or over PCIe), expected a "
                         "topology file's gpu_links for other links between its GPUs");
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
    // The step is the traces': of training:, only what prices or repeats their ops applies.
    refuse_keys_under(s, "training.",
                      {"training.iterations", "training.duration", "training.step_overhead", "training.attention",
                       "training.launch_blocking"},
                      " does not go with workload.chakra (the traces give the step), expected only "
                      "training.iterations, duration, step_overhead, attention and launch_blocking");
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
    refuse_keys_under(s, "model.", {"model.blocks", "model.dtype", "model.name"},
                      " does not go with model.blocks, expected the shapes in the blocks");
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
    // A spread with no distribution would be drawn from none: dropped without a word.
    if (d.dist == "none" && s.marks.count(key + ".sigma"))
      throw InputError(s.mark(key + ".sigma"),
                       key + ".sigma would not be used: dist is none, expected dist: normal or lognormal beside it");
  }
  for (size_t i = 0; i < s.variability.stragglers.size(); ++i) {
    const Straggler& st = s.variability.stragglers[i];
    // Two slowdowns of one GPU, node or link would multiply: say which one holds.
    for (size_t j = 0; j < i; ++j) {
      const Straggler& o = s.variability.stragglers[j];
      if (o.kind == st.kind && (st.kind == "link" ? o.link == st.link : o.index == st.index))
        throw InputError(st.mark, "variability.stragglers names this " + st.kind + " twice, expected each once");
    }
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
  // A serving replica's layout is its TP and PP degrees; the rest of parallel: lays out
  // training and would be ignored (cp and ep are refused by the serving engine, by name).
  if (s.inference)
    refuse_keys_under(s, "parallel.", {"parallel.tp", "parallel.pp", "parallel.cp", "parallel.ep"},
                      " lays out training, and a serving replica is parallel.tp x parallel.pp, expected only those "
                      "(replicas: inference.replicas)");
  // A dense model's experts (model.moe.experts 0 beside a top_k, shared experts or an
  // expert's size written above 0) and, in serving, the training router's spread would not
  // be used: refused by name rather than ignored.
  for (const auto& [key, mark] : s.marks) {
    if (key.rfind("model.moe.", 0) != 0) continue;
    const bool sized = (key == "model.moe.top_k" && m.moe.top_k > 0) ||
                       (key == "model.moe.shared_experts" && m.moe.shared_experts > 0) ||
                       (key == "model.moe.expert_ffn_hidden" && m.moe.expert_ffn_hidden > 0);
    if (m.moe.experts == 0 && sized)
      throw InputError(mark, key +
                                 " would not be used: model.moe.experts is 0 (a dense model), expected experts > 0 "
                                 "beside it");
    if (s.inference && key.rfind("model.moe.routing", 0) == 0 && m.moe.routing.dist != "uniform")
      throw InputError(mark, key +
                                 " would not be used: serving spreads a batch's tokens over the experts as a "
                                 "router of independent tokens does (each expert's rows binomial, docs/model.md), "
                                 "expected routing: {dist: uniform} or none");
  }
  if (m.moe.dense_layers > m.layers)
    throw InputError(s.mark("model.moe.dense_layers"),
                     "model.moe.dense_layers = " + std::to_string(m.moe.dense_layers) +
                         " is past model.layers = " + std::to_string(m.layers));
  if (s.inference) {
    // Keys the arrivals would not use: a trace gives the arrivals and the lengths; a closed
    // loop has no rate; only gamma gaps have a cv; only a closed loop has clients.
    const std::string process = s.serving.arrival_process;
    for (const auto& [key, mark] : s.marks) {
      const bool lengths = key.rfind("inference.prompt_tokens", 0) == 0 || key.rfind("inference.output_tokens", 0) == 0;
      std::string why;
      if (!s.serving.trace.empty() &&
          (lengths || key == "inference.arrivals.process" || key == "inference.arrivals.concurrency" ||
           key == "inference.arrivals.rate_per_s" || key == "inference.arrivals.cv"))
        why = "inference.arrivals.trace gives the arrivals and the lengths";
      else if (key == "inference.arrivals.rate_per_s" && process == "closed")
        why = "a closed loop sends each request when the client's last one ends, at no rate";
      else if (key == "inference.arrivals.cv" && process != "gamma")
        why = "only gamma gaps have a coefficient of variation (process: gamma)";
      else if (key == "inference.arrivals.concurrency" && process != "closed")
        why = "only a closed loop has clients (process: closed)";
      else if (key == "inference.max_batch_tokens" &&
               (s.serving.scheduler == "static" || s.serving.scheduler == "orca"))
        why = s.serving.scheduler + " batches whole requests by count (max_batch_size), not by tokens";
      else if (key == "inference.swap_space" && s.serving.preemption != "swap")
        why = "only swap preemption moves a preempted request's KV cache to host memory (preemption: swap)";
      else if (lengths && s.serving.trace.empty()) {
        // Each length distribution's own parameters: a fixed length its value; the others
        // their range; lognormal its mean and sigma; zipf its exponent.
        const bool prompt = key.rfind("inference.prompt_tokens", 0) == 0;
        const std::string& dist = (prompt ? s.serving.prompt : s.serving.output).dist;
        const std::string part = key.substr(key.rfind('.') + 1);
        if ((part == "value" && dist != "fixed") || ((part == "min" || part == "max") && dist == "fixed") ||
            ((part == "mean" || part == "sigma") && dist != "lognormal") || (part == "alpha" && dist != "zipf"))
          why = "a " + dist + " length has no " + part +
                " (fixed: value; uniform and zipf: min, max; lognormal: " + "min, max, mean, sigma; zipf: alpha)";
      }
      if (!why.empty()) throw InputError(mark, key + " would not be used: " + why);
    }
  }
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
    // A shared prefix needs both halves: its length and how many distinct ones there are
    // (groups: 0, written, turns it off).
    const bool tokens_alone =
        s.serving.prefix_tokens > 0 && s.serving.prefix_groups == 0 && !s.marks.count("inference.shared_prefix.groups");
    if (tokens_alone || (s.serving.prefix_groups > 0 && s.serving.prefix_tokens == 0)) {
      const bool tokens = tokens_alone;
      throw InputError(s.mark(tokens ? "inference.shared_prefix.tokens" : "inference.shared_prefix.groups"),
                       tokens ? "inference.shared_prefix.tokens is set but no shared_prefix.groups, so no request "
                                "opens with a prefix; expected groups >= 1 (the distinct prefixes)"
                              : "inference.shared_prefix.groups is set but no shared_prefix.tokens, so the prefixes "
                                "are empty; expected tokens >= 1 (each prefix's length)");
    }
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
  // A node's GPUs are wired all to all and its NICs each to the fabric: the cost of
  // building them grows with their square and their number, past what any machine has.
  constexpr int64_t kMaxGpusPerNode = 4096;
  if (!s.allow_large && s.cluster.node.gpus > kMaxGpusPerNode)
    throw InputError(s.mark("cluster.gpus_per_node"), "cluster.gpus_per_node = " + std::to_string(s.cluster.node.gpus) +
                                                          " is past the budget of " + std::to_string(kMaxGpusPerNode) +
                                                          " GPUs a node (--allow-large runs it anyway)");
  auto most_nics = [](int64_t gpus) { return std::max<int64_t>(64, 8 * gpus); };  // 8 a GPU, at least 64
  const int64_t max_nics = most_nics(s.cluster.node.gpus);
  if (!s.allow_large && s.cluster.node.nics > max_nics)
    throw InputError(s.mark("cluster.scale_out.nics_per_node"),
                     "cluster.scale_out.nics_per_node = " + std::to_string(s.cluster.node.nics) +
                         " is past the budget of " + std::to_string(max_nics) +
                         " NICs a node (8 a GPU, at least 64; --allow-large runs it anyway)");
  // A topology file's other node builds take the same budgets as its first.
  for (size_t n = 0; n < s.cluster.node_specs.size() && !s.allow_large; ++n) {
    const NodeSpec& ns = s.cluster.node_specs[n];
    if (ns.gpus > kMaxGpusPerNode || ns.nics > most_nics(ns.gpus))
      throw InputError(s.mark("cluster.topology_file"), "the topology file's node " + std::to_string(n) + " has " +
                                                            std::to_string(ns.gpus) + " GPUs and " +
                                                            std::to_string(ns.nics) + " NICs, past the budget of " +
                                                            std::to_string(kMaxGpusPerNode) +
                                                            " GPUs a node and 8 NICs a GPU (at least 64; "
                                                            "--allow-large runs it anyway)");
  }
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

  // The run's seed is every random choice's: the arrivals' too, unless they name their own.
  if (s.inference && !s.marks.count("inference.arrivals.seed")) s.serving.arrival_seed = s.seed;
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
