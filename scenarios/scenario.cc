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

// ---- model.blocks -----------------------------------------------------------------------

void read_blocks_into(const YNode& n, const std::string& at, std::vector<BlockSpec>& out, int64_t& layers);

std::vector<BlockSpec> read_blocks(const YNode& n) {
  std::vector<BlockSpec> out;
  int64_t layers = 0;
  read_blocks_into(n, "model.blocks", out, layers);
  return out;
}

void read_blocks_into(const YNode& n, const std::string& at, std::vector<BlockSpec>& out, int64_t& layers) {
  if (n.kind != YNode::Kind::Seq || n.seq.empty())
    throw InputError(n.mark, at + " must be a list of blocks, expected e.g. [{type: mlp, tokens: 1024, "
                             "hidden: 512, ffn_hidden: 2048}]");
  using T = BlockSpec::Type;
  const std::vector<std::string> types = {"attention", "mlp", "moe", "conv", "norm", "embedding"};
  // The shape keys each type takes; `required` must be given.
  struct Shape {
    std::vector<std::string> allowed, required;
  };
  const std::vector<Shape> shapes = {
      {{"batch", "tokens", "hidden", "heads", "causal"}, {"tokens", "hidden", "heads"}},
      {{"batch", "tokens", "hidden", "ffn_hidden"}, {"tokens", "hidden", "ffn_hidden"}},
      {{"batch", "tokens", "hidden", "ffn_hidden", "experts", "top_k"}, {"tokens", "hidden", "ffn_hidden", "experts"}},
      {{"batch", "height", "width", "channels_in", "channels_out", "kernel", "stride"},
       {"height", "width", "channels_in", "channels_out"}},
      {{"batch", "tokens", "hidden"}, {"tokens", "hidden"}},
      {{"batch", "tokens", "hidden", "vocab"}, {"tokens", "hidden", "vocab"}},
  };
  for (size_t i = 0; i < n.seq.size(); ++i) {
    const YNode& b = n.seq[i];
    const std::string where = at + "[" + std::to_string(i) + "]";
    if (b.kind != YNode::Kind::Map) throw InputError(b.mark, where + " must be a mapping, got " + b.kind_name());
    if (const YNode* rep = b.find("repeat")) {
      // A group of blocks repeated in order (an Evoformer or a transformer block's layers).
      for (const auto& [k, v] : b.map)
        if (k != "repeat" && k != "blocks")
          throw InputError(v.key_mark.known() ? v.key_mark : v.mark,
                           "'" + k + "' does not go with repeat:, expected {repeat: N, blocks: [...]}");
      const YNode* inner = b.find("blocks");
      if (!inner) throw InputError(b.mark, where + " needs blocks: beside repeat:, expected {repeat: N, blocks: [...]}");
      const int64_t times = as_int(*rep, where + ".repeat", 1, 100000);
      std::vector<BlockSpec> group;
      int64_t group_layers = 0;
      read_blocks_into(*inner, where + ".blocks", group, group_layers);
      if (group_layers * times + layers > 100'000)
        throw InputError(rep->mark, "model.blocks has more than 100,000 layers, expected fewer");
      for (int64_t r = 0; r < times; ++r) out.insert(out.end(), group.begin(), group.end());
      layers += group_layers * times;
      continue;
    }
    const YNode* type = b.find("type");
    if (!type) throw InputError(b.mark, where + " needs type:, expected one of: " + join(types));
    BlockSpec spec;
    const std::string t = as_enum(*type, where + ".type", types);
    const size_t ti = static_cast<size_t>(std::find(types.begin(), types.end(), t) - types.begin());
    spec.type = static_cast<T>(ti);
    std::vector<std::string> allowed = {"type", "name", "count", "stage", "frozen", "axis"};
    allowed.insert(allowed.end(), shapes[ti].allowed.begin(), shapes[ti].allowed.end());
    for (const auto& member : b.map) {
      const std::string& k = member.first;
      const YNode& v = member.second;  // a plain reference: lambdas below capture it
      const std::string key = where + "." + k;
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end())
        throw InputError(v.key_mark.known() ? v.key_mark : v.mark,
                         "'" + k + "' does not apply to a " + t + " block, expected one of: " + join(allowed));
      auto dim = [&](int64_t max = kMaxModelDim) { return as_int(v, key, 1, max); };
      if (k == "name") spec.name = scalar(v, key, "a name");
      if (k == "count") spec.count = dim(100000);
      if (k == "stage") spec.stage = as_int(v, key, 0, kMaxCount);
      if (k == "frozen") spec.frozen = as_bool(v, key);
      if (k == "axis") spec.column = as_enum(v, key, {"row", "column"}) == "column";
      if (k == "causal") spec.causal = as_bool(v, key);
      if (k == "batch") spec.batch = dim();
      if (k == "tokens") spec.tokens = dim();
      if (k == "hidden") spec.hidden = dim();
      if (k == "heads") spec.heads = dim();
      if (k == "ffn_hidden") spec.ffn_hidden = dim();
      if (k == "experts") spec.experts = dim(1 << 16);
      if (k == "top_k") spec.top_k = dim(1 << 16);
      if (k == "vocab") spec.vocab = dim();
      if (k == "height") spec.height = dim();
      if (k == "width") spec.width = dim();
      if (k == "channels_in") spec.channels_in = dim();
      if (k == "channels_out") spec.channels_out = dim();
      if (k == "kernel") spec.kernel = dim(64);
      if (k == "stride") spec.stride = dim(64);
    }
    for (const std::string& r : shapes[ti].required)
      if (!b.find(r)) throw InputError(b.mark, where + " (" + t + ") needs " + r + ":, expected all of: " + join(shapes[ti].required));
    if (spec.type == T::Attention && spec.hidden % spec.heads != 0)
      throw InputError(b.find("heads")->mark, where + ".heads must divide hidden (" + std::to_string(spec.hidden) + ")");
    if (spec.type == T::Moe && spec.top_k > spec.experts)
      throw InputError(b.find("top_k")->mark, where + ".top_k must be at most experts (" + std::to_string(spec.experts) + ")");
    if (spec.type == T::Conv && (spec.height % spec.stride != 0 || spec.width % spec.stride != 0))
      throw InputError(b.find("stride")->mark, where + ".stride must divide height and width");
    // Sizes that stay far inside the FLOP and byte arithmetic (one sample's tensors).
    if (spec.activation_elements() * std::max<int64_t>({1, spec.ffn_hidden, spec.channels_out}) > 1e18)
      throw InputError(b.mark, where + " is too large: one sample's tensors pass 10^18 elements");
    layers += spec.count;
    if (layers > 100'000) throw InputError(b.mark, "model.blocks has more than 100,000 layers, expected fewer");
    out.push_back(spec);
  }
}

// ---- the key table --------------------------------------------------------------------

struct KeySpec {
  std::string key, type, default_value, doc;
  std::function<void(const YNode&, Scenario&)> apply;  // empty for a mapping of further keys
};

const std::vector<KeySpec>& key_table() {
  using S = Scenario;
  using N = YNode;
  static const std::vector<KeySpec> kKeys = {
      {"name", "string", "file name", "free text stored with every run",
       [](const N& n, S& s) { s.name = scalar(n, "name", "text"); }},
      {"include", "list of paths", "[]", "files merged first (relative to this file); this file wins", nullptr},
      {"seed", "integer", "1", "seed of every random choice in the run",
       [](const N& n, S& s) { s.seed = static_cast<uint64_t>(as_int(n, "seed", 0)); }},
      {"cluster", "mapping", "", "the machines and the fabric between them", nullptr},
      {"cluster.preset", "name", "(required)",
       "node preset: dgx-a100, dgx-h100, dgx-h200, dgx-b200, pcie-8gpu, dgx-gb200-nvl72 (72 GPUs in one NVLink "
       "domain), mi300x-8gpu",
       [](const N& n, S& s) {
         const NodeSpec* p = find_node_preset(as_enum(n, "cluster.preset", node_preset_names()));
         s.cluster.node = *p;
       }},
      {"cluster.topology_file", "path", "none",
       "the cluster node by node, with its own GPUs, boards and fabric (docs/topology-files.md; relative to this "
       "file), instead of preset, nodes, gpu, gpu_spec and scale_out",
       [](const N& n, S& s) {
         const std::string& given = scalar(n, "cluster.topology_file", "a path");
         fs::path p(given);
         if (p.is_relative() && n.mark.file != "--set" && !n.mark.file.empty())
           p = fs::path(n.mark.file).parent_path() / p;
         s.cluster = load_topology_file(p.string(), n.mark);
         std::error_code ec;
         s.inputs.push_back(fs::weakly_canonical(p, ec).string());
       }},
      {"cluster.nodes", "integer", "1", "number of nodes",
       [](const N& n, S& s) { s.cluster.nodes = as_count(n, "cluster.nodes"); }},
      {"cluster.gpus_per_node", "integer", "preset's", "GPUs per node (1 for a single GPU)",
       [](const N& n, S& s) { s.cluster.node.gpus = as_count(n, "cluster.gpus_per_node"); }},
      {"cluster.gpu", "name", "preset's",
       "GPU preset: v100-sxm2-32gb, a100-sxm-80gb, a100-sxm-40gb, a100-pcie-80gb, h100-sxm, h100-pcie, h200-sxm, b200, gb200, mi300x",
       [](const N& n, S& s) { s.cluster.node.gpu = *find_gpu_preset(as_enum(n, "cluster.gpu", gpu_preset_names())); }},
      {"cluster.gpu_spec", "mapping", "", "a GPU nobody has preset: its fields over the node's GPU (dense rates)",
       nullptr},
      {"cluster.gpu_spec.name", "string", "custom", "the GPU's name in outputs",
       [](const N& n, S& s) { s.cluster.node.gpu.name = scalar(n, "cluster.gpu_spec.name", "a name"); }},
      {"cluster.gpu_spec.bf16_tflops", "number", "GPU's", "dense BF16/FP16 tensor TFLOP/s",
       [](const N& n, S& s) { s.cluster.node.gpu.peak_bf16 = 1e12 * as_number(n, "cluster.gpu_spec.bf16_tflops", 1e-3, 1e6); }},
      {"cluster.gpu_spec.fp8_tflops", "number", "GPU's", "dense FP8 tensor TFLOP/s (0: no FP8 tensor cores)",
       [](const N& n, S& s) { s.cluster.node.gpu.peak_fp8 = 1e12 * as_number(n, "cluster.gpu_spec.fp8_tflops", 0, 1e6); }},
      {"cluster.gpu_spec.tf32_tflops", "number", "GPU's", "dense TF32 tensor TFLOP/s",
       [](const N& n, S& s) { s.cluster.node.gpu.peak_tf32 = 1e12 * as_number(n, "cluster.gpu_spec.tf32_tflops", 0, 1e6); }},
      {"cluster.gpu_spec.fp32_tflops", "number", "GPU's", "FP32 (non-tensor) TFLOP/s",
       [](const N& n, S& s) { s.cluster.node.gpu.peak_fp32 = 1e12 * as_number(n, "cluster.gpu_spec.fp32_tflops", 1e-3, 1e6); }},
      {"cluster.gpu_spec.hbm", "size", "GPU's", "HBM capacity (e.g. 192GB; at least 1GiB: a size without a unit is bytes)",
       [](const N& n, S& s) {
         s.cluster.node.gpu.hbm_bytes = as_size(n, "cluster.gpu_spec.hbm");
         if (s.cluster.node.gpu.hbm_bytes < (int64_t{1} << 30))
           throw InputError(n.mark, "cluster.gpu_spec.hbm = " + n.scalar +
                                        " is under 1 GiB (a size without a unit is bytes), expected e.g. 80GB");
       }},
      {"cluster.gpu_spec.hbm_bandwidth", "bandwidth", "GPU's", "HBM bandwidth (e.g. 8TB/s)",
       [](const N& n, S& s) { s.cluster.node.gpu.hbm_bandwidth = as_bandwidth(n, "cluster.gpu_spec.hbm_bandwidth"); }},
      {"cluster.gpu_spec.sm_count", "integer", "GPU's", "streaming multiprocessors (compute units)",
       [](const N& n, S& s) { s.cluster.node.gpu.sm_count = static_cast<int>(as_int(n, "cluster.gpu_spec.sm_count", 1, 100000)); }},
      {"cluster.gpu_spec.sm_clock_mhz", "number", "GPU's",
       "boost SM clock in MHz (0: unknown); with sm_count, the rate of the issue slots that per-element integer, "
       "conversion and special-function work takes (sm_count x clock x 256; 0 prices it at the FP32 peak)",
       [](const N& n, S& s) {
         s.cluster.node.gpu.sm_clock_hz = 1e6 * as_number(n, "cluster.gpu_spec.sm_clock_mhz", 0, 1e5);
       }},
      {"cluster.gpu_spec.power_limit", "number", "GPU's", "board power limit in W (0: no power model, burst rates)",
       [](const N& n, S& s) { s.cluster.node.gpu.power_limit_w = as_number(n, "cluster.gpu_spec.power_limit", 0, 1e5); }},
      {"cluster.gpu_spec.idle_power", "number", "GPU's", "W the board draws busy between kernels, clocks up",
       [](const N& n, S& s) { s.cluster.node.gpu.idle_power_w = as_number(n, "cluster.gpu_spec.idle_power", 0, 1e5); }},
      {"cluster.gpu_spec.stream_power", "number", "GPU's", "W the board draws while a memory-bound kernel streams at full HBM rate",
       [](const N& n, S& s) { s.cluster.node.gpu.stream_power_w = as_number(n, "cluster.gpu_spec.stream_power", 0, 1e5); }},
      {"cluster.gpu_spec.capped_bf16_tflops", "number", "GPU's", "BF16 tensor TFLOP/s back to back at the power limit (sets the energy per FLOP)",
       [](const N& n, S& s) { s.cluster.node.gpu.capped_bf16_flops = 1e12 * as_number(n, "cluster.gpu_spec.capped_bf16_tflops", 0, 1e6); }},
      {"cluster.gpu_spec.fp8_energy_ratio", "number", "GPU's", "energy of an FP8 tensor FLOP over a BF16 one",
       [](const N& n, S& s) { s.cluster.node.gpu.fp8_energy_ratio = as_number(n, "cluster.gpu_spec.fp8_energy_ratio", 0.01, 10); }},
      {"cluster.gpu_spec.nvlink_bandwidth", "bandwidth", "preset's", "GPU-to-switch scale-up link, each way",
       [](const N& n, S& s) { s.cluster.node.nvlink_bandwidth = as_bandwidth(n, "cluster.gpu_spec.nvlink_bandwidth"); }},
      {"cluster.scale_out", "mapping", "", "the fabric between nodes", nullptr},
      {"cluster.scale_out.topology", "name", "fat-tree", "fat-tree | rail-optimized | switch | ring | torus",
       [](const N& n, S& s) {
         parse_fabric(
             as_enum(n, "cluster.scale_out.topology", {"fat-tree", "rail-optimized", "switch", "ring", "torus"}),
             s.cluster.fabric.kind);
       }},
      {"cluster.scale_out.nic_bandwidth", "bandwidth", "preset's", "per NIC, each direction (e.g. 400Gbps)",
       [](const N& n, S& s) { s.cluster.node.nic_bandwidth = as_bandwidth(n, "cluster.scale_out.nic_bandwidth"); }},
      {"cluster.scale_out.nics_per_node", "integer", "preset's", "NICs per node (DGX presets: one per GPU)",
       [](const N& n, S& s) { s.cluster.node.nics = as_count(n, "cluster.scale_out.nics_per_node"); }},
      {"cluster.scale_out.oversubscription", "number", "1.0", "leaf down-link : up-link bandwidth ratio (>= 1)",
       [](const N& n, S& s) {
         s.cluster.fabric.oversubscription = as_double(n, "cluster.scale_out.oversubscription", 1.0, false);
       }},
      {"cluster.scale_out.latency", "time", "0.5us", "latency of each scale-out link (NIC-switch, switch-switch)",
       [](const N& n, S& s) { s.cluster.fabric.latency = as_time(n, "cluster.scale_out.latency"); }},
      {"cluster.scale_out.nics_per_leaf", "integer", "32", "NICs under one leaf switch (its down-link radix)",
       [](const N& n, S& s) { s.cluster.fabric.nics_per_leaf = as_count(n, "cluster.scale_out.nics_per_leaf"); }},
      {"model", "mapping", "", "the transformer", nullptr},
      {"model.preset", "name", "none",
       "gpt3-1.3b, gpt3-175b, llama3-8b, llama3-70b, llama3-405b, megatron-1.7b ... megatron-1t (the Megatron-LM "
       "scaling family), mixtral-8x7b, deepseek-v3; fields given override it",
       [](const N& n, S& s) { s.model = *find_model_preset(as_enum(n, "model.preset", model_preset_names())); }},
      {"model.layers", "integer", "preset's", "transformer layers",
       [](const N& n, S& s) { s.model.layers = as_int(n, "model.layers", 1, kMaxModelDim); }},
      {"model.hidden", "integer", "preset's", "hidden size h",
       [](const N& n, S& s) { s.model.hidden = as_int(n, "model.hidden", 1, kMaxModelDim); }},
      {"model.heads", "integer", "preset's", "attention heads",
       [](const N& n, S& s) { s.model.heads = as_int(n, "model.heads", 1, kMaxModelDim); }},
      {"model.kv_heads", "integer", "preset's, else heads", "key/value heads (< heads means GQA)",
       [](const N& n, S& s) { s.model.kv_heads = as_int(n, "model.kv_heads", 1, kMaxModelDim); }},
      {"model.head_dim", "integer", "hidden / heads",
       "a head's width d, where the model's heads are not hidden / heads wide (Qwen3 30B-A3B: hidden 2048, 32 heads "
       "of 128; Megatron's --kv-channels, Hugging Face's head_dim): the QKV projection is h x (heads + 2 kv_heads)·d, "
       "the output projection heads·d x h",
       [](const N& n, S& s) { s.model.head_channels = as_int(n, "model.head_dim", 1, kMaxModelDim); }},
      {"model.ffn_hidden", "integer", "preset's", "MLP inner size",
       [](const N& n, S& s) { s.model.ffn_hidden = as_int(n, "model.ffn_hidden", 1, kMaxModelDim); }},
      {"model.ffn_type", "name", "preset's", "gelu | swiglu",
       [](const N& n, S& s) {
         parse_ffn_type(as_enum(n, "model.ffn_type", {"gelu", "swiglu"}), s.model.ffn_type);
       }},
      {"model.vocab", "integer", "preset's", "vocabulary size",
       [](const N& n, S& s) { s.model.vocab = as_int(n, "model.vocab", 1, kMaxModelDim); }},
      {"model.seq_len", "integer", "preset's", "tokens per sequence",
       [](const N& n, S& s) { s.model.seq_len = as_int(n, "model.seq_len", 1, kMaxModelDim); }},
      {"model.blocks", "list of blocks", "[]",
       "the model as a list of layer types with their shapes, instead of the transformer fields: each "
       "{type: attention|mlp|moe|conv|norm|embedding, count, stage, frozen, axis: row|column, batch, tokens, hidden, "
       "heads, causal, ffn_hidden, experts, top_k, vocab, height, width, channels_in, channels_out, kernel, stride} "
       "(docs/model.md, \"Models as lists of blocks\")",
       [](const N& n, S& s) { s.model.blocks = read_blocks(n); }},
      {"model.dtype", "dtype", "bf16", "fp32 | bf16 | fp16 | fp8 | int8 | int4",
       [](const N& n, S& s) { s.model.dtype = as_dtype(n, "model.dtype"); }},
      {"model.tied_embeddings", "bool", "preset's", "output layer shares the token embedding",
       [](const N& n, S& s) { s.model.tied_embeddings = as_bool(n, "model.tied_embeddings"); }},
      {"model.dropout", "number", "preset's (GPT 0.1, Llama 0)",
       "attention-probability and hidden dropout (Megatron-LM --attention-dropout / --hidden-dropout); 0 runs no "
       "dropout kernels",
       [](const N& n, S& s) {
         s.model.dropout = as_double(n, "model.dropout", 0, false);
         if (s.model.dropout >= 1) throw InputError(n.mark, "model.dropout must be below 1, got " + n.scalar);
       }},
      {"model.moe", "mapping", "", "mixture of experts (0 experts: dense)", nullptr},
      {"model.moe.experts", "integer", "0", "experts per MoE layer",
       [](const N& n, S& s) { s.model.moe.experts = as_int(n, "model.moe.experts", 0); }},
      {"model.moe.top_k", "integer", "0", "experts per token",
       [](const N& n, S& s) { s.model.moe.top_k = as_int(n, "model.moe.top_k", 0); }},
      {"model.moe.shared_experts", "integer", "0", "always-active experts",
       [](const N& n, S& s) { s.model.moe.shared_experts = as_int(n, "model.moe.shared_experts", 0); }},
      {"model.moe.capacity_factor", "number", "1.0", "tokens an expert takes, relative to an even split (>= 1)",
       [](const N& n, S& s) {
         s.model.moe.capacity_factor = as_double(n, "model.moe.capacity_factor", 1.0, false);
         if (s.model.moe.capacity_factor > 64)
           throw InputError(n.mark, "model.moe.capacity_factor = " + n.scalar + " is out of range, expected 1 to 64");
       }},
      {"model.moe.routing", "mapping", "{dist: even}", "how the router spreads tokens over experts", nullptr},
      {"model.moe.routing.dist", "name", "even",
       "even (each expert its exact share) | uniform (random, multinomial counts) | zipf | histogram; the most-loaded "
       "EP rank sets the layer's time (docs/model.md)",
       [](const N& n, S& s) {
         s.model.moe.routing.dist = as_enum(n, "model.moe.routing.dist", {"even", "uniform", "zipf", "histogram"});
       }},
      {"model.moe.routing.alpha", "number", "1.0", "zipf: the k-th most popular expert's share is proportional to k^-alpha",
       [](const N& n, S& s) { s.model.moe.routing.alpha = as_number(n, "model.moe.routing.alpha", 0, 10); }},
      {"model.moe.routing.histogram", "list", "[]", "histogram: each expert's relative load, one per expert, as measured",
       [](const N& n, S& s) {
         if (n.kind != YNode::Kind::Seq)
           throw InputError(n.mark, "model.moe.routing.histogram must be a list of numbers, got " + n.kind_name());
         s.model.moe.routing.histogram.clear();
         for (const YNode& v : n.seq) s.model.moe.routing.histogram.push_back(as_double(v, "model.moe.routing.histogram", 0, false));
       }},
      {"model.moe.routing.dropless", "bool", "true",
       "true: experts take every token routed to them (Megatron-Core's default); false: capacity_factor caps each, "
       "the rest is dropped",
       [](const N& n, S& s) { s.model.moe.routing.dropless = as_bool(n, "model.moe.routing.dropless"); }},
      {"model.moe.dense_layers", "integer", "0", "leading layers that keep a dense MLP",
       [](const N& n, S& s) { s.model.moe.dense_layers = as_int(n, "model.moe.dense_layers", 0); }},
      {"model.moe.router_dtype", "name", "auto",
       "auto (the router's GEMMs in the activations' type) | fp32 (Megatron-Core's --moe-router-dtype fp32: the "
       "router's input and weight cast to FP32 and its three GEMMs run in FP32, as NeMo's DeepSeek-V3 recipes set); "
       "docs/model.md",
       [](const N& n, S& s) {
         s.model.moe.router_fp32 = as_enum(n, "model.moe.router_dtype", {"auto", "fp32"}) == "fp32";
       }},
      {"model.moe.score_function", "name", "softmax",
       "the router's scores (Megatron-Core's --moe-router-score-function): softmax (over the chosen experts' "
       "logits) | sigmoid (each logit's sigmoid, the chosen ones normalized; DeepSeek-V3); docs/model.md, \"The "
       "router's own kernels\"",
       [](const N& n, S& s) {
         s.model.moe.score_sigmoid = as_enum(n, "model.moe.score_function", {"softmax", "sigmoid"}) == "sigmoid";
       }},
      {"model.moe.expert_bias", "bool", "false",
       "aux-loss-free balancing (--moe-router-enable-expert-bias): a per-expert bias added to the scores for the "
       "top-k choice, its counts accumulated every micro-batch; needs model.moe.score_function: sigmoid",
       [](const N& n, S& s) { s.model.moe.expert_bias = as_bool(n, "model.moe.expert_bias"); }},
      {"model.moe.router_padding_for_fp8", "bool", "false",
       "under FP8, the router pads each expert's tokens to a multiple of 16 (Megatron-Core's "
       "--moe-router-padding-for-fp8), so the grouped MLP needs no padding copies; false: Transformer Engine's "
       "Fp8Padding copies the dispatched tokens into 16-row-aligned buffers and Fp8Unpadding copies the output "
       "back, forward and backward (docs/model.md, \"MoE layers\")",
       [](const N& n, S& s) { s.model.moe.router_padding_for_fp8 = as_bool(n, "model.moe.router_padding_for_fp8"); }},
      {"model.moe.groups", "integer", "0",
       "group-limited routing (--moe-router-num-groups): the experts in this many groups, a token's top-k taken "
       "from its best model.moe.group_topk groups (DeepSeek-V3: 8 and 4); 0: off",
       [](const N& n, S& s) { s.model.moe.groups = as_int(n, "model.moe.groups", 0, 1 << 20); }},
      {"model.moe.group_topk", "integer", "0", "group-limited routing (--moe-router-group-topk): the groups a token "
       "may use; with model.moe.groups",
       [](const N& n, S& s) { s.model.moe.group_topk = as_int(n, "model.moe.group_topk", 0, 1 << 20); }},
      {"model.moe.topk_scaling", "number", "0",
       "the chosen experts' probabilities scaled by this (--moe-router-topk-scaling-factor; DeepSeek-V3 2.5); 0: not",
       [](const N& n, S& s) { s.model.moe.topk_scaling = as_number(n, "model.moe.topk_scaling", 0, 1e6); }},
      {"model.moe.load_balancing", "name", "aux_loss",
       "the balancing loss (--moe-router-load-balancing-type): aux_loss (the switch loss over the micro-batch, its "
       "expert counts all-reduced over TP x CP) | seq_aux_loss (per sequence, the scores all-gathered over TP x CP) "
       "| none; computed only with model.moe.aux_loss_coeff > 0",
       [](const N& n, S& s) {
         s.model.moe.load_balancing =
             as_enum(n, "model.moe.load_balancing", {"aux_loss", "seq_aux_loss", "none"});
       }},
      {"model.moe.aux_loss_coeff", "number", "0",
       "the balancing loss's weight (--moe-aux-loss-coeff, default 0; Grok-1 and Mixtral recipes 0.01, DeepSeek-V3 "
       "1e-4); 0: Megatron-Core skips the loss, its kernels and its collective",
       [](const N& n, S& s) { s.model.moe.aux_loss_coeff = as_number(n, "model.moe.aux_loss_coeff", 0, 1e6); }},
      {"model.moe.expert_ffn_hidden", "integer", "0", "MLP inner size of one expert",
       [](const N& n, S& s) { s.model.moe.expert_ffn_hidden = as_int(n, "model.moe.expert_ffn_hidden", 0); }},
      {"model.mla", "mapping", "",
       "multi-head latent attention (DeepSeek-V2/V3, Megatron-Core's --multi-latent-attention): queries through a "
       "low-rank bottleneck, keys and values from a shared latent (docs/model.md, \"Multi-head latent attention\")",
       nullptr},
      {"model.mla.q_lora_rank", "integer", "0",
       "the query's bottleneck (DeepSeek-V3 1536); 0: one projection h -> heads·(qk_head_dim + rope_head_dim)",
       [](const N& n, S& s) { s.model.mla.q_lora_rank = as_int(n, "model.mla.q_lora_rank", 0, kMaxModelDim); }},
      {"model.mla.kv_lora_rank", "integer", "0", "the key/value latent's width (DeepSeek-V3 512); 0: no MLA",
       [](const N& n, S& s) { s.model.mla.kv_lora_rank = as_int(n, "model.mla.kv_lora_rank", 0, kMaxModelDim); }},
      {"model.mla.qk_head_dim", "integer", "0", "a query/key head's part without rotary embedding (DeepSeek-V3 128)",
       [](const N& n, S& s) { s.model.mla.qk_head_dim = as_int(n, "model.mla.qk_head_dim", 1, kMaxModelDim); }},
      {"model.mla.rope_head_dim", "integer", "0",
       "a query/key head's rotary part (DeepSeek-V3 64); the key's is one, shared by every head",
       [](const N& n, S& s) { s.model.mla.rope_head_dim = as_int(n, "model.mla.rope_head_dim", 1, kMaxModelDim); }},
      {"model.mla.v_head_dim", "integer", "0", "a value head's width (DeepSeek-V3 128)",
       [](const N& n, S& s) { s.model.mla.v_head_dim = as_int(n, "model.mla.v_head_dim", 1, kMaxModelDim); }},
      {"model.mtp_layers", "integer", "preset's (DeepSeek-V3 1, else 0)",
       "multi-token prediction modules after the last layer (DeepSeek-V3, Megatron-Core's --mtp-num-layers): each "
       "predicts one more token with its own norms, projection and transformer layer and the shared output layer, "
       "on the last pipeline stage",
       [](const N& n, S& s) { s.model.mtp_layers = as_int(n, "model.mtp_layers", 0, 16); }},
      {"parallel", "mapping", "", "the parallel layout", nullptr},
      {"parallel.dp", "integer", "GPUs/(tp·pp·cp)", "data-parallel degree (auto: GPUs / (tp·pp·cp))",
       [](const N& n, S& s) {
         s.parallel.dp = n.kind == YNode::Kind::Scalar && n.scalar == "auto" ? 0 : as_degree(n, "parallel.dp");
       }},
      {"parallel.tp", "integer", "1", "tensor-parallel degree",
       [](const N& n, S& s) { s.parallel.tp = as_degree(n, "parallel.tp"); }},
      {"parallel.pp", "integer", "1", "pipeline-parallel degree",
       [](const N& n, S& s) { s.parallel.pp = as_degree(n, "parallel.pp"); }},
      {"parallel.cp", "integer", "1", "context-parallel degree",
       [](const N& n, S& s) { s.parallel.cp = as_degree(n, "parallel.cp"); }},
      {"parallel.cp_comm", "name", "p2p",
       "how context parallelism exchanges K and V (Megatron-Core's --cp-comm-type): p2p (Transformer Engine's ring: "
       "cp attention blocks, each beside the send of the next K/V block) | all-gather (K and V all-gathered over the "
       "CP group before one attention over the whole sequence, and the K/V gradients reduce-scattered after the "
       "backward; the all-gather in the attention's path, as Llama 3's training ran it); docs/model.md",
       [](const N& n, S& s) { s.parallel.cp_comm = as_enum(n, "parallel.cp_comm", {"p2p", "all-gather"}); }},
      {"parallel.ep", "integer", "1",
       "expert-parallel degree: experts carved out of the DP x CP ranks in Megatron-Core's order (CP innermost), so ep "
       "divides dp·cp; the experts' own TP is parallel.tp",
       [](const N& n, S& s) { s.parallel.ep = as_degree(n, "parallel.ep"); }},
      {"parallel.expert_tp", "integer", "parallel.tp",
       "the experts' TP degree (Megatron-Core's --expert-tensor-parallel-size): tp (each expert split over the TP "
       "group as the dense layers are; the dispatcher all-gathers over TP what its ranks received) or 1 (whole "
       "experts on every rank, EP carved out of TP x DP x CP, no gather; needs sequence_parallel when tp > 1)",
       [](const N& n, S& s) { s.parallel.expert_tp = as_degree(n, "parallel.expert_tp"); }},
      {"parallel.moe_dispatcher", "name", "alltoall",
       "a mixture of experts' token dispatcher (Megatron-Core's --moe-token-dispatcher-type): alltoall (the rank's own "
       "tokens' rows sent to their experts' ranks; NeMo's and Megatron-Bridge's MoE recipes) | allgather (every EP "
       "rank's tokens all-gathered, the local experts' rows permuted out after the host reads their counts, the "
       "output reduce-scattered back; Megatron-Core's own default through core_r0.12; needs expert_tp 1 or tp 1); "
       "docs/model.md",
       [](const N& n, S& s) {
         s.parallel.moe_dispatcher = as_enum(n, "parallel.moe_dispatcher", {"alltoall", "allgather"});
       }},
      {"parallel.moe_shared_expert_overlap", "bool", "false",
       "a mixture of experts' shared experts run beside the token dispatcher's all-to-alls and TP collectives "
       "(Megatron-Core's --moe-shared-expert-overlap; NeMo's DeepSeek configs set it); false: after the routed "
       "experts' combine, on the same stream (Megatron-Core's MoELayer: output + shared_experts(input)); docs/model.md",
       [](const N& n, S& s) { s.parallel.moe_shared_expert_overlap = as_bool(n, "parallel.moe_shared_expert_overlap"); }},
      {"parallel.sequence_parallel", "bool", "false", "Megatron SP: all-gather / reduce-scatter instead of all-reduce",
       [](const N& n, S& s) { s.parallel.sequence_parallel = as_bool(n, "parallel.sequence_parallel"); }},
      {"parallel.zero_stage", "integer", "0", "0..3 (3 = FSDP-like)",
       [](const N& n, S& s) {
         s.parallel.zero_stage = as_int(n, "parallel.zero_stage", 0);
         if (s.parallel.zero_stage > 3)
           throw InputError(n.mark, "parallel.zero_stage must be 0, 1, 2 or 3, got " + n.scalar);
       }},
      {"parallel.schedule", "name", "1f1b", "gpipe | 1f1b | interleaved-1f1b",
       [](const N& n, S& s) {
         s.parallel.schedule = as_enum(n, "parallel.schedule", {"gpipe", "1f1b", "interleaved-1f1b"});
       }},
      {"parallel.virtual_stages", "integer", "1", "model chunks per pipeline rank",
       [](const N& n, S& s) { s.parallel.virtual_stages = as_degree(n, "parallel.virtual_stages"); }},
      {"parallel.first_stage_layers", "integer", "an even split",
       "layers on the first pipeline stage, where it holds fewer or more than the rest (Megatron-Core's "
       "--decoder-first-pipeline-num-layers, NeMo's num_layers_in_first_pipeline_stage); the stages not given share "
       "the remaining layers evenly, and each stage's layers split evenly over its virtual_stages chunks",
       [](const N& n, S& s) {
         s.parallel.first_stage_layers = as_int(n, "parallel.first_stage_layers", 0, kMaxModelDim);
       }},
      {"parallel.last_stage_layers", "integer", "an even split",
       "layers on the last pipeline stage (--decoder-last-pipeline-num-layers; DeepSeek-V3's recipes leave it short "
       "for the output layer and the multi-token prediction module)",
       [](const N& n, S& s) {
         s.parallel.last_stage_layers = as_int(n, "parallel.last_stage_layers", 0, kMaxModelDim);
       }},
      {"parallel.microbatch_group", "integer", "pp",
       "interleaved-1f1b: micro-batches each model chunk runs back to back before the next chunk (Megatron-Core's "
       "--microbatch-group-size-per-virtual-pipeline-stage, from pp to the micro-batches per pipeline; pp is the "
       "depth-first schedule; more holds more activations and leaves the pipeline sends more time)",
       [](const N& n, S& s) { s.parallel.microbatch_group = as_degree(n, "parallel.microbatch_group"); }},
      {"parallel.micro_batch", "integer", "1", "sequences per micro-batch",
       [](const N& n, S& s) { s.parallel.micro_batch = as_degree(n, "parallel.micro_batch"); }},
      {"parallel.bucket_size", "integer", "40000000",
       "parameters per DP gradient bucket (reduced as soon as its layers' gradients are final)",
       [](const N& n, S& s) { s.parallel.bucket_params = as_int(n, "parallel.bucket_size", 1); }},
      {"parallel.tp_comm_overlap", "bool", "false",
       "Megatron-Core --tp-comm-overlap: with sequence_parallel, each TP all-gather / reduce-scatter is split into tp "
       "chunks exchanged around the ring while the GEMM it feeds (or drains) runs chunk by chunk",
       [](const N& n, S& s) { s.parallel.tp_comm_overlap = as_bool(n, "parallel.tp_comm_overlap"); }},
      {"parallel.tp_overlap_reduce_scatter", "name", "pipeline",
       "with tp_comm_overlap, how Transformer Engine's userbuffers overlap the forward's reduce-scatters (proj_fprop, "
       "fc2_fprop): pipeline (a reduce-scatter kernel of num_sm SMs beside the GEMM's chunks, TE's default and NeMo's "
       "BF16 configurations) | ring-exchange (the chunks' partial sums sent over the ring by copy engines and added at "
       "the end, the GEMM leaving one SM: Megatron-Bridge's FP8 configurations); docs/model.md",
       [](const N& n, S& s) {
         s.parallel.tp_overlap_reduce_scatter =
             as_enum(n, "parallel.tp_overlap_reduce_scatter", {"pipeline", "ring-exchange"});
       }},
      {"parallel.tp_overlap_proj_sms", "integer", "16",
       "with tp_comm_overlap and pipelined reduce-scatters: the SMs the forward projection's reduce-scatter kernel "
       "holds beside its GEMM's chunks (TE userbuffers' num_sm for proj_fprop; TE's default 16, NeMo's Llama 3.1 "
       "configurations 24); docs/model.md",
       [](const N& n, S& s) { s.parallel.tp_overlap_proj_sms = as_int(n, "parallel.tp_overlap_proj_sms", 1, 1024); }},
      {"parallel.tp_overlap_fc2_sms", "integer", "16",
       "the same for FC2's reduce-scatter (fc2_fprop: TE's default 16, NeMo's Llama 3.1 70B 16, 405B 8)",
       [](const N& n, S& s) { s.parallel.tp_overlap_fc2_sms = as_int(n, "parallel.tp_overlap_fc2_sms", 1, 1024); }},
      {"parallel.tp_overlap_sm_margin", "bool", "false",
       "with tp_comm_overlap: the GEMMs beside those kernels are planned for the SMs they leave (TE's set_sm_margin; "
       "off in TE's defaults, on in NeMo's and Megatron-Bridge's configurations); the slowdown measured either way "
       "is in docs/model.md",
       [](const N& n, S& s) { s.parallel.tp_overlap_sm_margin = as_bool(n, "parallel.tp_overlap_sm_margin"); }},
      {"parallel.tp_async_grad_reduce", "bool", "true",
       "the backward of a column-parallel layer (QKV, MLP up) reduces its input gradient (all-reduce, or "
       "reduce-scatter under SP) beside its weight-gradient GEMM and all-gathers the weight gradient's input beside "
       "its data-gradient GEMM (Megatron-LM's LinearWithGradAccumulationAndAsyncCommunication since 2021-09, "
       "Transformer Engine's layers); false: Megatron-LM before, whose reduction ran once both GEMMs were done (the "
       "backward of copy_to_tensor_model_parallel_region); docs/model.md",
       [](const N& n, S& s) { s.parallel.tp_async_grad_reduce = as_bool(n, "parallel.tp_async_grad_reduce"); }},
      {"parallel.tp_overlap_qkv_dgrad_sms", "integer", "16",
       "with tp_comm_overlap: the SMs of the backward's bulk all-gather of the QKV input (for its weight gradient) "
       "beside the QKV data-gradient GEMM (TE userbuffers' num_sm for qkv_dgrad, no margin; TE's default 16, NeMo's "
       "and Megatron-Bridge's configurations 2-8); docs/model.md",
       [](const N& n, S& s) {
         s.parallel.tp_overlap_qkv_dgrad_sms = as_int(n, "parallel.tp_overlap_qkv_dgrad_sms", 1, 1024);
       }},
      {"parallel.tp_overlap_fc1_dgrad_sms", "integer", "16",
       "the same for the MLP's first layer: its input's bulk all-gather beside its data-gradient GEMM (fc1_dgrad: TE's "
       "default 16, the configurations 2)",
       [](const N& n, S& s) {
         s.parallel.tp_overlap_fc1_dgrad_sms = as_int(n, "parallel.tp_overlap_fc1_dgrad_sms", 1, 1024);
       }},
      {"parallel.tp_overlap_qkv_wgrad_sms", "integer", "16",
       "with tp_comm_overlap: the SMs of the backward's bulk reduce-scatter of the QKV input gradient beside the QKV "
       "weight-gradient GEMM (TE userbuffers' num_sm for qkv_wgrad, no margin; TE's default 16, NeMo's and "
       "Megatron-Bridge's configurations 24-32)",
       [](const N& n, S& s) {
         s.parallel.tp_overlap_qkv_wgrad_sms = as_int(n, "parallel.tp_overlap_qkv_wgrad_sms", 1, 1024);
       }},
      {"parallel.tp_overlap_fc1_wgrad_sms", "integer", "16",
       "the same for the MLP's first layer's input gradient beside its weight-gradient GEMM (fc1_wgrad: TE's default "
       "16, the configurations 2-8)",
       [](const N& n, S& s) {
         s.parallel.tp_overlap_fc1_wgrad_sms = as_int(n, "parallel.tp_overlap_fc1_wgrad_sms", 1, 1024);
       }},
      {"parallel.overlap_grad_reduce", "bool", "true",
       "reduce each gradient bucket as soon as its layers' gradients are final (--overlap-grad-reduce); false: all "
       "buckets after the backward",
       [](const N& n, S& s) { s.parallel.overlap_grad_reduce = as_bool(n, "parallel.overlap_grad_reduce"); }},
      {"parallel.overlap_p2p_comm", "name", "auto",
       "pipeline sends and receives: true (posted ahead, overlapped with the forward and backward chunks: "
       "Megatron's interleaved schedule, --overlap-p2p-communication, the default since 2023-10) | false (each "
       "send and receive blocks the compute stream until done, as Megatron's non-interleaved 1F1B always does and "
       "its interleaved schedule did before 2023-05) | auto (true for interleaved-1f1b, else false)",
       [](const N& n, S& s) {
         s.parallel.overlap_p2p_comm = as_enum(n, "parallel.overlap_p2p_comm", {"auto", "true", "false"});
       }},
      {"parallel.batch_p2p_sync", "name", "auto",
       "with blocking pipeline sends and receives (parallel.overlap_p2p_comm false), Megatron ends each batched "
       "send and receive with torch.cuda.synchronize() (--batch-p2p-sync, on by default; unconditional in the "
       "2021-22 code): the host waits for every stream of the device, DP bucket reductions still running "
       "included, and the next chunk's kernels, a backward's after compute.backward_relaunch, start from an empty "
       "queue: true | false | auto (true under training.framework megatron with blocking p2p); docs/model.md",
       [](const N& n, S& s) {
         s.parallel.batch_p2p_sync = as_enum(n, "parallel.batch_p2p_sync", {"auto", "true", "false"});
       }},
      {"parallel.pp_scatter_gather", "bool", "true",
       "without sequence parallelism, each TP rank sends its 1/tp slice of a pipeline activation or gradient and the "
       "receiving stage all-gathers the slices over its TP group (Megatron's scatter-gather optimization, on by "
       "default since 2021-02: Narayanan et al. 2021, Section 4.1); false: every TP rank sends the whole tensor",
       [](const N& n, S& s) { s.parallel.pp_scatter_gather = as_bool(n, "parallel.pp_scatter_gather"); }},
      {"parallel.overlap_param_gather", "bool", "true",
       "ZeRO 1/2 (distributed optimizer): all-gather each bucket's updated parameters ahead of its layers in the next "
       "forward (--overlap-param-gather); false: after the optimizer step",
       [](const N& n, S& s) { s.parallel.overlap_param_gather = as_bool(n, "parallel.overlap_param_gather"); }},
      {"parallel.fp8_param_gather", "bool", "false",
       "with model.dtype fp8 under training.framework megatron and zero_stage >= 1: the linear layers' weights are "
       "FP8 tensors (Megatron-Core's --fp8-param-gather, TE's fp8_model_init): the optimizer casts its FP32 shard "
       "to FP8, the DP all-gather moves 1 byte a weight, no BF16 copy is kept (ZeRO 3 gathers FP8 unless "
       "parallel.fsdp_param_dtype says otherwise); docs/model.md",
       [](const N& n, S& s) { s.parallel.fp8_param_gather = as_bool(n, "parallel.fp8_param_gather"); }},
      {"parallel.zero3_param_gather", "name", "micro-batch",
       "ZeRO 3 / FSDP: micro-batch (each layer's parameters all-gathered before its forward and again before its "
       "backward, every micro-batch) | forward (before each forward only, kept through that micro-batch's backward: "
       "FSDP SHARD_GRAD_OP, reshard_after_forward off) | step (gathered in the first micro-batch's forward and kept unsharded until the "
       "step ends: FSDP with reshard_after_forward and reshard_after_backward off, as pipeline schedules run it)",
       [](const N& n, S& s) {
         s.parallel.zero3_param_gather = as_enum(n, "parallel.zero3_param_gather", {"micro-batch", "forward", "step"});
       }},
      {"parallel.zero3_backward_prefetch", "name", "pre",
       "ZeRO 3 / FSDP, gathering before each backward: when the backward's all-gather of the next layer down is "
       "issued on the DP communicator's stream: pre (from this layer's pre-backward hook: PyTorch FSDP's "
       "BackwardPrefetch.BACKWARD_PRE default, Megatron-FSDP's prefetch) | post (from its post-backward hook: "
       "BACKWARD_POST, Composer's default) | none (when the layer below's backward begins, behind this layer's "
       "reduce-scatter). The hooks run on the host ahead of the GPU, so pre and post put the gather ahead of this "
       "layer's reduce-scatter, beside its kernels, alike; docs/model.md",
       [](const N& n, S& s) {
         s.parallel.zero3_backward_prefetch =
             as_enum(n, "parallel.zero3_backward_prefetch", {"pre", "post", "none"});
       }},
      {"parallel.fsdp_param_dtype", "name", "auto",
       "ZeRO 3 / FSDP: the dtype parameters are all-gathered and computed in: auto (megatron: the model dtype; "
       "pytorch-eager: fp32, FSDP without a mixed-precision policy) | fp32 | bf16 | fp16 (FSDP MixedPrecision "
       "param_dtype: the linear layers then need no autocast weight casts)",
       [](const N& n, S& s) {
         s.parallel.fsdp_param_dtype = as_enum(n, "parallel.fsdp_param_dtype", {"auto", "fp32", "bf16", "fp16"});
       }},
      {"parallel.fsdp_reduce_dtype", "name", "auto",
       "ZeRO 3 / FSDP: the dtype gradients are reduce-scattered in: auto (fp32, or fp16 for fp16 models) | fp32 | "
       "bf16 | fp16 (FSDP MixedPrecision reduce_dtype)",
       [](const N& n, S& s) {
         s.parallel.fsdp_reduce_dtype = as_enum(n, "parallel.fsdp_reduce_dtype", {"auto", "fp32", "bf16", "fp16"});
       }},
      {"parallel.grad_reduce_dtype", "name", "auto",
       "ZeRO 0-2 under training.framework megatron: the dtype of the main-gradient buffer the micro-batches "
       "accumulate into and the DP all-reduce / reduce-scatter moves: auto (fp32 for bf16 and fp8 models, as "
       "Megatron sets accumulate_allreduce_grads_in_fp32 for bf16; the model's type for fp16) | fp32 | bf16 "
       "(Megatron-Core grad_reduce_in_fp32 False, NeMo's grad_sync_dtype bf16: 2 bytes a parameter, copied to "
       "FP32 before the optimizer step) | fp16; ZeRO 3 reduces in parallel.fsdp_reduce_dtype",
       [](const N& n, S& s) {
         s.parallel.grad_reduce_dtype = as_enum(n, "parallel.grad_reduce_dtype", {"auto", "fp32", "bf16", "fp16"});
       }},
      {"parallel.zero3_grad_sync", "name", "micro-batch",
       "ZeRO 3 / FSDP: micro-batch (each layer's gradients reduce-scattered in every micro-batch's backward) | step "
       "(accumulated unsharded and reduce-scattered in the last micro-batch's backward: FSDP's "
       "set_requires_gradient_sync(False) / no_sync for all but the last)",
       [](const N& n, S& s) {
         s.parallel.zero3_grad_sync = as_enum(n, "parallel.zero3_grad_sync", {"micro-batch", "step"});
       }},
      {"parallel.placement", "order", "tp-cp-ep-dp-pp",
       "rank order, innermost first (a permutation of tp, cp, ep, dp, pp)",
       [](const N& n, S& s) {
         const std::string& v = scalar(n, "parallel.placement", "an order such as tp-cp-ep-dp-pp");
         std::vector<std::string> parts;
         size_t start = 0;
         for (size_t i = 0; i <= v.size(); ++i)
           if (i == v.size() || v[i] == '-') {
             parts.push_back(v.substr(start, i - start));
             start = i + 1;
           }
         std::vector<std::string> sorted = parts;
         std::sort(sorted.begin(), sorted.end());
         if (sorted != std::vector<std::string>{"cp", "dp", "ep", "pp", "tp"})
           throw InputError(
               n.mark, "parallel.placement '" + v + "' must name each of tp, cp, ep, dp, pp once, e.g. tp-cp-ep-dp-pp");
         s.parallel.placement = v;
       }},
      {"training", "mapping", "", "the training run", nullptr},
      {"training.global_batch", "integer", "dp · micro_batch", "sequences per iteration",
       [](const N& n, S& s) { s.training.global_batch = as_int(n, "training.global_batch", 1, int64_t{1} << 32); }},
      {"training.iterations", "integer", "1", "iterations (identical in a deterministic model: one is simulated)",
       [](const N& n, S& s) { s.training.iterations = as_int(n, "training.iterations", 1, int64_t{1} << 32); }},
      {"training.recompute", "name", "none", "none | selective | full",
       [](const N& n, S& s) {
         s.training.recompute = as_enum(n, "training.recompute", {"none", "selective", "full"});
       }},
      {"training.recompute_modules", "list", "[core_attn]",
       "with recompute: selective, what runs again in the backward instead of keeping its outputs (Megatron-Core's "
       "--recompute-modules): core_attn (the attention kernel's forward) | mla_up_proj (multi-head latent "
       "attention's up projections, rotary embedding and the query, key and value assembled from them, rebuilt from "
       "the kept latents); docs/model.md",
       [](const N& n, S& s) {
         if (n.kind != YNode::Kind::Seq)
           throw InputError(n.mark, "training.recompute_modules must be a list, e.g. [core_attn, mla_up_proj], got " +
                                        n.kind_name());
         s.training.recompute_modules.clear();
         for (const YNode& v : n.seq)
           s.training.recompute_modules.push_back(
               as_enum(v, "training.recompute_modules", {"core_attn", "mla_up_proj"}));
       }},
      {"training.optimizer", "name", "adam", "adam | sgd",
       [](const N& n, S& s) {
         s.training.optimizer = as_enum(n, "training.optimizer", {"adam", "sgd"});
       }},
      {"training.attention", "name", "flash",
       "flash (fused, IO-aware: cuDNN / FlashAttention-3 on Hopper) | flash2 (FlashAttention-2: no wgmma or TMA, "
       "~35 % of Hopper's peak; the fused kernel elsewhere) | unfused (QK^T and PV as batched GEMMs, the scores, "
       "softmax and dropout through HBM, as Megatron-LM before 2023) | triton (FlashAttention in Triton, flash_attn_triton.py "
       "on Triton's pre-MLIR backend: MPT / LLM Foundry's attn_impl: triton of 2023; FlashAttention-2's work at "
       "compute.triton_attention_factor its time; no dropout)",
       [](const N& n, S& s) {
         s.training.attention = as_enum(n, "training.attention", {"flash", "flash2", "unfused", "triton"});
       }},
      {"training.attention_padding", "name", "none",
       "none | unpad (training.framework pytorch-eager with a FlashAttention kernel: flash-attn's bert_padding around "
       "a variable-length kernel, as MPT's flash path runs it: unpad_input gathers q, k and v row by row, its mask "
       "arithmetic synchronizing the host twice a call, and pad_input scatters the output back into zeros; their "
       "backwards scatter and gather; docs/model.md, \"Padding around the kernel\")",
       [](const N& n, S& s) {
         s.training.attention_padding = as_enum(n, "training.attention_padding", {"none", "unpad"});
       }},
      {"training.train_metrics", "int", "0",
       "with training.framework pytorch-eager: how many metrics the trainer updates from the logits after each "
       "micro-batch's backward, each a cross-entropy under autocast (log_softmax on the 16-bit logits with an FP32 "
       "output, nll_loss) with no gradient (Composer's _eval_train_metrics), and computes once a step, syncing each "
       "metric's two states over every rank (torchmetrics' barrier, n fills, all-gather and n copies, dispatched by "
       "the host at compute.host_op each); 2 for MPT (LanguageCrossEntropy and LanguagePerplexity, LLM Foundry's "
       "use_train_metrics default); docs/model.md, \"Training metrics\"",
       [](const N& n, S& s) {
         s.training.train_metrics = static_cast<int>(as_int(n, "training.train_metrics", 0, 16));
       }},
      {"training.loss_sync", "name", "auto",
       "what the stack does with each micro-batch's loss before its backward, on the last pipeline stage: check "
       "(Megatron-LM since 2025-04 and Megatron-Bridge: the NaN and Inf checks' two host waits and the backward's "
       "relaunch after them, 2 x compute.host_sync + compute.backward_relaunch + compute.autograd_node a node of the "
       "graph the backward walks; the reporting loss is all-reduced once a step) | check-allreduce (Megatron-LM 2023-09 to 2025-04: the wait, then the "
       "reporting loss all-reduced over DP every micro-batch; the NaN check alone) | allreduce (before 2023-09: "
       "average_losses_across_data_parallel_group, no check) | none (Composer: the loss is reduced once a step) | "
       "auto (check under megatron, none under pytorch-eager); with cp > 1 the modes that all-reduce also "
       "all-reduce the loss over CP; docs/model.md, \"Per-step costs\"",
       [](const N& n, S& s) {
         s.training.loss_sync =
             as_enum(n, "training.loss_sync", {"auto", "none", "check", "allreduce", "check-allreduce"});
       }},
      {"training.plan_revision", "name", "current",
       "which revision of the Megatron plan to build: current | 2026-12-04 (the plan as built before 2026-12-05: "
       "the hidden dropout's backward folded into the LayerNorm backwards, no bias-gradient reductions outside "
       "Transformer Engine, the optimizer step as one streaming pass with the parameter copy; for replaying real "
       "runs recorded then with validate --real-from, whose plans must match op by op); docs/model.md, "
       "\"Megatron-Core's layer, kernel by kernel\"",
       [](const N& n, S& s) {
         s.training.plan_revision = as_enum(n, "training.plan_revision", {"current", "2026-12-04"});
       }},
      {"training.fp8_attention", "bool", "false",
       "with model.dtype fp8: run the attention core in FP8 too (Transformer Engine keeps it in BF16 unless asked); "
       "refused with training.framework: pytorch-eager (SDPA runs BF16)",
       [](const N& n, S& s) { s.training.fp8_attention = as_bool(n, "training.fp8_attention"); }},
      {"training.fp8_recipe", "name", "delayed",
       "with model.dtype fp8, Transformer Engine's scaling recipe (Megatron-Core's --fp8-recipe): delayed (DelayedScaling: "
       "each cast scales by an amax history and records the new amax as it writes, so TE's norms write FP8 directly) | "
       "tensorwise (Float8CurrentScaling, 'FP8-CS': each tensor's own amax before its cast, a read pass of its own; "
       "TE's norms write BF16 with the amax, then a quantize kernel; amaxes of sequence-parallel tensors all-reduced "
       "over TP); docs/model.md",
       [](const N& n, S& s) { s.training.fp8_recipe = as_enum(n, "training.fp8_recipe", {"delayed", "tensorwise"}); }},
      {"training.framework", "name", "megatron",
       "megatron (Megatron-Core / Transformer Engine: fused norms and bias-activations, BF16 weights with FP32 main "
       "grads) | pytorch-eager (plain PyTorch under torch.autocast(bfloat16): FP32 parameters cast at every "
       "linear, the residual stream, norms and loss in FP32, every elementwise op its own kernel, fused AdamW; "
       "with model.dtype fp8 the linears are Transformer Engine's te.Linear under fp8_autocast, casting input, "
       "weight and gradient to FP8 at every micro-batch; docs/model.md)",
       [](const N& n, S& s) {
         s.training.framework = as_enum(n, "training.framework", {"megatron", "pytorch-eager"});
       }},
      {"training.grad_accumulation_fusion", "bool", "true",
       "megatron: each linear layer's weight-gradient GEMM accumulates into the main gradient buffer in place "
       "(--gradient-accumulation-fusion, Megatron-LM since 2022-02); false: the GEMM writes a 16-bit gradient that "
       "a separate kernel adds into the buffer at every micro-batch, as Megatron-LM of 2021 did",
       [](const N& n, S& s) {
         s.training.grad_accumulation_fusion = as_bool(n, "training.grad_accumulation_fusion");
       }},
      {"training.grad_nan_check", "name", "auto",
       "megatron, ZeRO 0-2: before each gradient bucket's DP all-reduce or reduce-scatter, Megatron-Core's DDP takes "
       "the bucket's norm and asserts it is not NaN, a host wait in the backward (check_for_nan_in_grad, "
       "--check-for-nan-in-loss-and-grad: on by default since 2023, set by NeMo's recipes, turned off by "
       "Megatron-Bridge's performance scripts): true | false | auto (true where training.loss_sync checks the loss: "
       "the one flag governs both); docs/model.md, \"Per-step costs\"",
       [](const N& n, S& s) {
         s.training.grad_nan_check = as_enum(n, "training.grad_nan_check", {"auto", "true", "false"});
       }},
      {"training.transformer_impl", "name", "transformer-engine",
       "megatron: transformer-engine (Megatron-Core's Transformer Engine modules: vectorized fused norms and "
       "activations whose kernels also reduce the bias gradients) | local (Megatron-LM's own layer of 2021-22, "
       "--transformer-impl local: the GeLU as a TorchScript-fused tanh kernel, each bias gradient a separate sum "
       "over the tokens, and with training.attention: unfused the attention context made contiguous after its "
       "permute, forward and backward, and the query, key and value gradients concatenated into the fused QKV "
       "gradient, all through PyTorch's strided loops); docs/model.md, \"Megatron-LM's own layer\"",
       [](const N& n, S& s) {
         s.training.transformer_impl = as_enum(n, "training.transformer_impl", {"transformer-engine", "local"});
       }},
      {"training.rope_fusion", "bool", "true",
       "megatron, rotary models: Megatron-Core applies the rotary embedding to the query and key with Transformer "
       "Engine's fused kernel, one read and one write of each (Megatron-LM's --no-rope-fusion off by default; NeMo's "
       "and Megatron-Bridge's Llama configs apply_rope_fusion: true); false: apply_rotary_pos_emb's unfused "
       "elementwise chain (TransformerConfig's own default), which takes what 28.5 (forward) and 30 (backward) "
       "copies of the tensors would on an H200; "
       "docs/model.md",
       [](const N& n, S& s) { s.training.rope_fusion = as_bool(n, "training.rope_fusion"); }},
      {"training.moe_permute", "name", "unfused",
       "megatron, MoE: how the dispatcher permutes the tokens into expert order (docs/model.md, \"The router's own "
       "kernels\"): unfused (core_r0.12: a padded router's rows sorted on the device and its probabilities "
       "masked_select-ed, whose output size the host reads: one host wait; dropless, the tokens and the probabilities "
       "masked_select-ed: two) | masked-select (core_r0.10: the permutation's tokens and the unpermutation's "
       "probabilities masked_select-ed, padded or not: two) | fused (Transformer Engine's permute kernels, "
       "--moe-permute-fusion: no index bookkeeping, no wait but a dropless dispatcher's own)",
       [](const N& n, S& s) {
         s.training.moe_permute = as_enum(n, "training.moe_permute", {"unfused", "masked-select", "fused"});
       }},
      {"training.defer_embedding_wgrad", "bool", "false",
       "megatron: the output layer's weight-gradient GEMMs are deferred from each micro-batch's backward to after "
       "the last one (Megatron-Core's defer_embedding_wgrad_compute, drained by finish_embedding_wgrad_compute at "
       "the schedule's end), so on the last pipeline stage they run in the pipeline's flush; docs/model.md",
       [](const N& n, S& s) { s.training.defer_embedding_wgrad = as_bool(n, "training.defer_embedding_wgrad"); }},
      {"training.wgrad_deferral_limit", "integer", "0",
       "with defer_embedding_wgrad: how many micro-batches' output-layer weight gradients are deferred, the first "
       "ones of the step (Megatron-Core's wgrad_deferral_limit; 0: all)",
       [](const N& n, S& s) {
         s.training.wgrad_deferral_limit = as_int(n, "training.wgrad_deferral_limit", 0, 1 << 30);
       }},
      {"training.launch_blocking", "bool", "false",
       "true: the job ran with CUDA_LAUNCH_BLOCKING=1, so each op is issued only after every earlier op of its rank "
       "finished (no kernel queue, no overlap of streams) and each kernel waits for its own dispatch "
       "(compute.blocking_launch, docs/model.md)",
       [](const N& n, S& s) { s.training.launch_blocking = as_bool(n, "training.launch_blocking"); }},
      {"training.cross_entropy", "name", "unfused",
       "unfused (F.cross_entropy on logits.float(), or Megatron's vocab-parallel loss: the FP32 copy, log_softmax or its "
       "max, exp and softmax passes, and their backwards through HBM; Megatron-LM's default) | fused (pytorch-eager: one "
       "kernel each way on the 16-bit logits, FlashAttention's xentropy, MPT / LLM Foundry's loss_fn default; megatron: "
       "--cross-entropy-loss-fusion, three jit-fused passes, NeMo's and Megatron-Bridge's default); docs/model.md",
       [](const N& n, S& s) { s.training.cross_entropy = as_enum(n, "training.cross_entropy", {"unfused", "fused"}); }},
      {"training.step_overhead", "time", "3ms",
       "host and framework work per iteration that the GPUs wait for (scheduling, loss and grad-norm bookkeeping, "
       "logging); docs/model.md gives the source",
       [](const N& n, S& s) {
         s.training.step_overhead_s = as_time(n, "training.step_overhead");
         s.training.step_overhead_set = true;
       }},
      {"training.duration", "duration", "24h",
       "wall-clock time of the job; with faults: the goodput is over it (s, min, h, d)",
       [](const N& n, S& s) { s.training.duration_s = as_positive_duration(n, "training.duration"); }},
      {"variability", "mapping", "", "spread between GPUs, kernels and links (run --samples N draws it N times)",
       nullptr},
      {"variability.gpu_speed", "mapping", "{dist: none}",
       "each GPU's speed factor; a GPU's kernels take 1/speed as long", nullptr},
      {"variability.gpu_speed.dist", "name", "none", "none | normal (1 + sigma Z, cut at 0.1) | lognormal (e^(sigma Z))",
       [](const N& n, S& s) {
         s.variability.gpu_speed.dist = as_enum(n, "variability.gpu_speed.dist", {"none", "normal", "lognormal"});
       }},
      {"variability.gpu_speed.sigma", "number", "0", "spread of the speed factor (of its logarithm for lognormal)",
       [](const N& n, S& s) { s.variability.gpu_speed.sigma = as_number(n, "variability.gpu_speed.sigma", 0, 1); }},
      {"variability.link_speed", "mapping", "{dist: none}", "each link's bandwidth factor", nullptr},
      {"variability.link_speed.dist", "name", "none", "none | normal | lognormal, as gpu_speed.dist",
       [](const N& n, S& s) {
         s.variability.link_speed.dist = as_enum(n, "variability.link_speed.dist", {"none", "normal", "lognormal"});
       }},
      {"variability.link_speed.sigma", "number", "0", "spread of the bandwidth factor",
       [](const N& n, S& s) { s.variability.link_speed.sigma = as_number(n, "variability.link_speed.sigma", 0, 1); }},
      {"variability.kernel_jitter", "number", "0",
       "coefficient of variation of each kernel's time (lognormal, mean 1), drawn per kernel",
       [](const N& n, S& s) { s.variability.kernel_jitter = as_number(n, "variability.kernel_jitter", 0, 1); }},
      {"variability.stragglers", "list", "[]",
       "named slow parts: [{gpu: 17, slowdown: 1.3}, {node: 2, slowdown: 1.1}, {link: \"node0/nic0->leaf0\", "
       "slowdown: 4}]",
       [](const N& n, S& s) {
         if (n.kind != YNode::Kind::Seq)
           throw InputError(n.mark, "variability.stragglers must be a list of {gpu|node|link: ..., slowdown: X}, got " +
                                        n.kind_name());
         for (const YNode& item : n.seq) {
           if (item.kind != YNode::Kind::Map)
             throw InputError(item.mark, "a straggler must be a mapping {gpu: 17, slowdown: 1.3}, got " +
                                             item.kind_name());
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
               throw InputError(v.key_mark, "unknown key '" + k + "' in a straggler, expected one of: gpu, node, "
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
      {"faults.link_mtbf", "duration", "none", "mean time between failures of one scale-out cable (both directions)",
       [](const N& n, S& s) { s.faults.link_mtbf_s = as_positive_duration(n, "faults.link_mtbf"); }},
      {"faults.failures", "list", "[]", "a failure trace: times from the start, e.g. [3h, 7.5h, 20h]",
       [](const N& n, S& s) {
         if (n.kind != YNode::Kind::Seq)
           throw InputError(n.mark, "faults.failures must be a list of times such as [3h, 7.5h], got " + n.kind_name());
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
           throw InputError(n.mark, "jobs must be a non-empty list of {scenario: PATH, first_node: N}, got " +
                                        n.kind_name());
         for (const YNode& item : n.seq) {
           if (item.kind != YNode::Kind::Map)
             throw InputError(item.mark, "a job must be a mapping {scenario: PATH, first_node: N}, got " +
                                             item.kind_name());
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
      {"inference", "mapping", "", "an inference-serving run instead of training", nullptr},
      {"inference.replicas", "integer", "1", "model replicas, each tp × pp GPUs",
       [](const N& n, S& s) { s.serving.replicas = as_int(n, "inference.replicas", 1, 1 << 20); }},
      {"inference.scheduler", "name", "vllm",
       "static | orca | vllm (v0: prefill-first) | sarathi (chunked prefill in the token budget) | vllm-v1 (chunked "
       "prefill; defaults max_batch_size 1024, max_batch_tokens 8192) | trtllm (in-flight batching: decodes, then whole "
       "prompts within max_num_tokens; defaults max_batch_size 2048, max_batch_tokens 8192)",
       [](const N& n, S& s) {
         s.serving.scheduler =
             as_enum(n, "inference.scheduler", {"static", "orca", "vllm", "sarathi", "vllm-v1", "trtllm"});
       }},
      {"inference.router", "name", "round-robin", "round-robin | least-outstanding | least-kv",
       [](const N& n, S& s) { s.serving.router = as_enum(n, "inference.router", {"round-robin", "least-outstanding", "least-kv"}); }},
      {"inference.max_batch_size", "integer", "256", "requests in one iteration at most",
       [](const N& n, S& s) { s.serving.max_batch_size = as_int(n, "inference.max_batch_size", 1, 1 << 20); }},
      {"inference.max_batch_tokens", "integer", "8192", "vllm: prefill tokens per iteration (a longer prompt runs alone); sarathi: the token budget; not used by static and orca",
       [](const N& n, S& s) { s.serving.max_batch_tokens = as_int(n, "inference.max_batch_tokens", 1, 1 << 24); }},
      {"inference.iteration_overhead", "time", "1ms",
       "host work per engine step that the GPUs wait for: scheduling, input preparation, sampling, "
       "detokenization, CUDA-graph launch (docs/model.md)",
       [](const N& n, S& s) { s.serving.iteration_overhead_s = as_time(n, "inference.iteration_overhead"); }},
      {"inference.request_overhead", "time", "5ms",
       "front end per request before the engine sees it: HTTP/gRPC, tokenization, queueing into the engine; "
       "counts in TTFT and end-to-end latency (docs/model.md)",
       [](const N& n, S& s) { s.serving.request_overhead_s = as_time(n, "inference.request_overhead"); }},
      {"inference.kv_block_tokens", "integer", "16", "tokens per paged KV-cache block",
       [](const N& n, S& s) { s.serving.kv_block_tokens = as_int(n, "inference.kv_block_tokens", 1, 1 << 16); }},
      {"inference.requests", "integer", "1000", "requests to serve (with a trace: its first rows, at most its row count)",
       [](const N& n, S& s) { s.serving.requests = as_int(n, "inference.requests", 1, int64_t{1} << 26); }},
      {"inference.arrivals", "mapping", "", "when requests arrive", nullptr},
      {"inference.arrivals.process", "name", "poisson",
       "poisson | gamma | fixed | closed (closed: `concurrency` clients, each sending its next request the moment "
       "its last one ends, as benchmark clients at a fixed concurrency do)",
       [](const N& n, S& s) { s.serving.arrival_process = as_enum(n, "inference.arrivals.process", {"poisson", "gamma", "fixed", "closed"}); }},
      {"inference.arrivals.concurrency", "integer", "1", "closed: clients in flight",
       [](const N& n, S& s) { s.serving.concurrency = as_int(n, "inference.arrivals.concurrency", 1, 1 << 20); }},
      {"inference.arrivals.rate_per_s", "number", "8", "mean arrivals per second",
       [](const N& n, S& s) { s.serving.rate_per_s = as_double(n, "inference.arrivals.rate_per_s", 0, true); }},
      {"inference.arrivals.cv", "number", "1.0", "gamma: coefficient of variation of the gaps (burstiness)",
       [](const N& n, S& s) {
         s.serving.cv = as_double(n, "inference.arrivals.cv", 0, true);
         if (s.serving.cv < 1e-3 || s.serving.cv > 1e3)
           throw InputError(n.mark, "inference.arrivals.cv = " + n.scalar + " is out of range, expected 0.001 to 1000");
       }},
      {"inference.arrivals.seed", "integer", "1", "seed of arrivals and lengths",
       [](const N& n, S& s) { s.serving.arrival_seed = static_cast<uint64_t>(as_int(n, "inference.arrivals.seed", 0)); }},
      {"inference.arrivals.trace", "path", "none", "CSV of arrival_s, prompt_tokens, output_tokens[, prefix_group] (instead of a process; a first line that starts with a letter is a header)",
       [](const N& n, S& s) { s.serving.trace = scalar(n, "inference.arrivals.trace", "a path"); }},
      {"inference.prompt_tokens", "mapping", "", "prompt length distribution", nullptr},
      {"inference.output_tokens", "mapping", "", "output length distribution", nullptr},
      {"inference.prompt_tokens.dist", "name", "fixed", "fixed | uniform | lognormal | zipf",
       [](const N& n, S& s) { s.serving.prompt.dist = as_enum(n, "inference.prompt_tokens.dist", {"fixed", "uniform", "lognormal", "zipf"}); }},
      {"inference.prompt_tokens.value", "integer", "preset", "fixed: the length",
       [](const N& n, S& s) { s.serving.prompt.value = as_int(n, "inference.prompt_tokens.value", 1, 1 << 24); }},
      {"inference.prompt_tokens.min", "integer", "1", "uniform / zipf: smallest length",
       [](const N& n, S& s) { s.serving.prompt.min = as_int(n, "inference.prompt_tokens.min", 1, 1 << 24); }},
      {"inference.prompt_tokens.max", "integer", "4096", "uniform / zipf / lognormal: largest length",
       [](const N& n, S& s) { s.serving.prompt.max = as_int(n, "inference.prompt_tokens.max", 1, 1 << 24); }},
      {"inference.prompt_tokens.mean", "number", "1024", "lognormal: mean length",
       [](const N& n, S& s) { s.serving.prompt.mean = as_double(n, "inference.prompt_tokens.mean", 0, true); }},
      {"inference.prompt_tokens.sigma", "number", "0.5", "lognormal: sigma of log length",
       [](const N& n, S& s) { s.serving.prompt.sigma = as_double(n, "inference.prompt_tokens.sigma", 0, false); }},
      {"inference.prompt_tokens.alpha", "number", "1.2", "zipf: exponent",
       [](const N& n, S& s) { s.serving.prompt.alpha = as_double(n, "inference.prompt_tokens.alpha", 0, true); }},
      {"inference.output_tokens.dist", "name", "fixed", "fixed | uniform | lognormal | zipf",
       [](const N& n, S& s) { s.serving.output.dist = as_enum(n, "inference.output_tokens.dist", {"fixed", "uniform", "lognormal", "zipf"}); }},
      {"inference.output_tokens.value", "integer", "preset", "fixed: the length",
       [](const N& n, S& s) { s.serving.output.value = as_int(n, "inference.output_tokens.value", 1, 1 << 24); }},
      {"inference.output_tokens.min", "integer", "1", "uniform / zipf: smallest length",
       [](const N& n, S& s) { s.serving.output.min = as_int(n, "inference.output_tokens.min", 1, 1 << 24); }},
      {"inference.output_tokens.max", "integer", "4096", "uniform / zipf / lognormal: largest length",
       [](const N& n, S& s) { s.serving.output.max = as_int(n, "inference.output_tokens.max", 1, 1 << 24); }},
      {"inference.output_tokens.mean", "number", "1024", "lognormal: mean length",
       [](const N& n, S& s) { s.serving.output.mean = as_double(n, "inference.output_tokens.mean", 0, true); }},
      {"inference.output_tokens.sigma", "number", "0.5", "lognormal: sigma of log length",
       [](const N& n, S& s) { s.serving.output.sigma = as_double(n, "inference.output_tokens.sigma", 0, false); }},
      {"inference.output_tokens.alpha", "number", "1.2", "zipf: exponent",
       [](const N& n, S& s) { s.serving.output.alpha = as_double(n, "inference.output_tokens.alpha", 0, true); }},
      {"inference.slo", "mapping", "", "service-level objective for goodput", nullptr},
      {"inference.slo.ttft", "time", "500ms", "time to first token", [](const N& n, S& s) { s.serving.slo_ttft_s = as_time(n, "inference.slo.ttft"); }},
      {"inference.slo.tpot", "time", "50ms", "time per output token", [](const N& n, S& s) { s.serving.slo_tpot_s = as_time(n, "inference.slo.tpot"); }},
      {"inference.weight_dtype", "dtype", "model.dtype", "stored weights: fp16 | bf16 | fp8 | int8 (W8A8 GEMMs) | int4 (weight-only, bf16 math)",
       [](const N& n, S& s) {
         s.serving.weight_dtype = as_dtype(n, "inference.weight_dtype");
         s.serving.weight_dtype_set = true;
       }},
      {"inference.kv_dtype", "dtype", "model.dtype", "KV-cache entries: fp16 | bf16 | fp8 | int8 | int4",
       [](const N& n, S& s) {
         s.serving.kv_dtype = as_dtype(n, "inference.kv_dtype");
         s.serving.kv_dtype_set = true;
       }},
      {"inference.decode_attention", "name", "streaming",
       "the decode-attention kernel: streaming (its math on tensor cores, bound by the K/V it streams: FlashInfer, "
       "FlashAttention's decode, TensorRT-LLM's XQA) | turbomind-v0.1 (LMDeploy v0.1's TurboMind kernel: QK and PV "
       "on CUDA cores, 4 query heads a block, 1,024-token slices; docs/model.md)",
       [](const N& n, S& s) {
         s.serving.decode_attention = as_enum(n, "inference.decode_attention", {"streaming", "turbomind-v0.1"});
       }},
      {"inference.fp8_context_fmha", "name", "auto",
       "a prefill's context attention in FP8 (TensorRT-LLM's use_fp8_context_fmha; its two products at the FP8 "
       "peak, at 0.81 of the BF16 kernel's efficiency, FlashAttention-3's FP8 and FP16 rates): auto (on for a "
       "TensorRT-LLM engine, inference.scheduler trtllm, with FP8 weights and an FP8 KV cache on a GPU with FP8 "
       "tensor cores, as trtllm-bench builds FP8 engines and TensorRT-LLM's builder forces it for paged context "
       "FMHA over an FP8 cache) | on (needs an FP8 KV cache and FP8 tensor cores) | off; docs/model.md, "
       "\"FP8 context attention\"",
       [](const N& n, S& s) {
         s.serving.fp8_context_fmha = as_enum(n, "inference.fp8_context_fmha", {"auto", "on", "off"});
       }},
      {"inference.sampler", "name", "auto",
       "the GPU work on the logits after the output layer, per emitting row of the vocabulary, greedy requests: auto "
       "(the scheduler's engine: trtllm for trtllm, vllm-v0 for vllm, vllm-v1 for vllm-v1, none otherwise) | none | "
       "trtllm (FP32 logits; the decoder's penalty copy, softmax and top-k passes, 48 B an entry) | vllm-v0 (the cast "
       "to FP32, temperature, softmax and log-softmax, argmax: 50 B from 16-bit logits) | vllm-v1 (the cast and "
       "argmax: 10 B); docs/model.md, \"Sampling on the logits\"",
       [](const N& n, S& s) {
         s.serving.sampler = as_enum(n, "inference.sampler", {"auto", "none", "trtllm", "vllm-v0", "vllm-v1"});
       }},
      {"inference.engine_build", "name", "default",
       "with inference.scheduler trtllm: default (TensorRT-LLM's build defaults, max_batch_size 2048, max_num_tokens "
       "8192) | trtllm-bench (the limits trtllm-bench build picks from the dataset: the requests of the mean prompt and "
       "output length that fit in 0.95 of the memory the weights leave, rounded up; tuning.py's calc_engine_setting; "
       "weight-only INT8/INT4 keep the defaults); a max_batch_size or max_batch_tokens the scenario sets is kept; "
       "docs/model.md, \"Serving engine costs\"",
       [](const N& n, S& s) {
         s.serving.engine_build = as_enum(n, "inference.engine_build", {"default", "trtllm-bench"});
       }},
      {"inference.chunked_context", "bool", "false",
       "with inference.scheduler trtllm: contexts are chunked into the token budget the decodes leave (TensorRT-LLM's "
       "enable_chunked_context with the first-come-first-served chunking policy; trtllm-bench runs it so), where "
       "without it a context joins whole and only one longer than max_num_tokens is chunked",
       [](const N& n, S& s) { s.serving.chunked_context = as_bool(n, "inference.chunked_context"); }},
      {"inference.kv_cache_free_fraction", "number", "0.9",
       "with inference.scheduler trtllm: the KV cache's share of the memory free once the engine's weights and "
       "activations are in place (TensorRT-LLM's kv_cache_free_gpu_mem_fraction, default 0.9), where the other "
       "schedulers take 90% of the GPU's memory less the weights and activations, as vLLM's gpu_memory_utilization "
       "does; docs/model.md, \"Serving engine costs\"",
       [](const N& n, S& s) {
         s.serving.kv_cache_free_fraction = as_number(n, "inference.kv_cache_free_fraction", 0.01, 1.0);
       }},
      {"inference.preemption", "name", "recompute", "recompute | swap: what a preempted request's KV cache does",
       [](const N& n, S& s) { s.serving.preemption = as_enum(n, "inference.preemption", {"recompute", "swap"}); }},
      {"inference.swap_space", "size", "4GiB", "host memory per GPU for swapped-out KV (then recompute)",
       [](const N& n, S& s) { s.serving.swap_space_bytes = as_size(n, "inference.swap_space"); }},
      {"inference.prefix_caching", "bool", "false", "reuse the cached KV blocks of a shared prompt prefix (vLLM automatic prefix caching)",
       [](const N& n, S& s) { s.serving.prefix_caching = as_bool(n, "inference.prefix_caching"); }},
      {"inference.shared_prefix", "mapping", "", "prompts that open with a shared prefix (system prompts, few-shot examples)", nullptr},
      {"inference.shared_prefix.tokens", "integer", "0", "tokens of each shared prefix",
       [](const N& n, S& s) { s.serving.prefix_tokens = as_int(n, "inference.shared_prefix.tokens", 0, 1 << 24); }},
      {"inference.shared_prefix.groups", "integer", "0", "distinct prefixes; each request draws one uniformly (a trace's 4th column names it instead)",
       [](const N& n, S& s) { s.serving.prefix_groups = as_int(n, "inference.shared_prefix.groups", 0, 1 << 24); }},
      {"inference.disaggregation", "mapping", "", "separate prefill and decode pools", nullptr},
      {"inference.disaggregation.prefill_replicas", "integer", "0", "replicas that only prefill",
       [](const N& n, S& s) { s.serving.prefill_replicas = as_int(n, "inference.disaggregation.prefill_replicas", 0); }},
      {"inference.disaggregation.decode_replicas", "integer", "0", "replicas that only decode",
       [](const N& n, S& s) { s.serving.decode_replicas = as_int(n, "inference.disaggregation.decode_replicas", 0); }},
      {"inference.speculative", "mapping", "", "speculative decoding", nullptr},
      {"inference.speculative.draft_model", "name", "null", "draft model preset",
       [](const N& n, S& s) { s.serving.draft_model = n.scalar == "null" ? "" : scalar(n, "inference.speculative.draft_model", "a preset"); }},
      {"inference.speculative.lookahead", "integer", "0", "draft tokens per step (at most 256)",
       [](const N& n, S& s) { s.serving.lookahead = as_int(n, "inference.speculative.lookahead", 0, 256); }},
      {"inference.speculative.acceptance_rate", "number", "0.0", "probability a draft token is accepted",
       [](const N& n, S& s) { s.serving.acceptance_rate = as_double(n, "inference.speculative.acceptance_rate", 0, false); }},
      {"collectives", "mapping", "", "collective algorithms", nullptr},
      {"collectives.algorithm", "name", "auto",
       "auto | ring | tree | direct | halving-doubling | hierarchical | nvls (auto: lowest predicted time, as NCCL's "
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
       "model: h100-sxm, h200-sxm, or gpu_spec's power keys; docs/model.md); false: every kernel at its burst rate",
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
           throw InputError(
               n.mark, "reference.value = " + n.scalar + " is outside 1e-12 to 1e15, expected the published number");
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
       "causal | full: how the source's tflops_per_gpu or mfu counts attention's products (full: the whole square, "
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
      {"output.trace_ranks", "list", "all", "ranks the trace shows, e.g. [0, 8, 63] (a trace a viewer can open at scale)",
       [](const N& n, S& s) { s.trace_ranks = int_list(n, "output.trace_ranks", 0, (int64_t{1} << 20) - 1); }},
      {"output.trace_stages", "list", "all", "pipeline stages the trace shows, e.g. [0, 7]",
       [](const N& n, S& s) { s.trace_stages = int_list(n, "output.trace_stages", 0, 65535); }},
      {"sweep", "mapping", "", "key path -> list of values; every combination is a point", nullptr},
  };
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
  while (!parent.empty() && !find_key(parent)) parent = parent.find('.') == std::string::npos ? "" : parent.substr(0, parent.rfind('.'));
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
  std::string msg = is_name(key) ? "unknown key '" + prefix + key + "'" : "unknown key (not a plain name) under '" + (parent.empty() ? std::string("the top level") : parent) + "'";
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
    throw InputError(from.known() ? from : doc.mark, (from.known() ? "included file '" + fs::path(path).filename().string() + "' is not a scenario: " : std::string()) +
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
    throw InputError(SourceMark{file, 1, 1}, "--set key '" + key +
                                                 "' has an empty part, expected dotted names such as parallel.tp; "
                                                 "top-level keys: " + [] {
                                                   std::string t;
                                                   for (const auto& k : key_table())
                                                     if (k.key.find('.') == std::string::npos)
                                                       t += (t.empty() ? "" : ", ") + k.key;
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
    throw InputError(at, "inference.engine_build: trtllm-bench builds TensorRT-LLM engines, expected "
                         "inference.scheduler: trtllm, got '" + inf.scheduler + "'");
  if (!inf.trace.empty())
    throw InputError(at, "inference.engine_build: trtllm-bench sizes the engine from the dataset's mean lengths, "
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
    throw InputError(at, "inference.engine_build: trtllm-bench finds no request of the dataset's mean length in the "
                         "memory the weights leave, expected more GPUs or a smaller model");
  const double bs = std::min(requests, 4096.0) / pp;
  const double tokens = std::min(bs * (1 + isl / osl), 32768.0);
  const auto up = [](double x, double step) { return step * std::ceil(x / step); };
  const double max_bs = bs < 256 ? std::max(64.0, up(bs, 32)) : bs < 1024 ? up(bs, 128) : up(bs, 256);
  const double max_tokens = tokens < 4096 ? std::max(2048.0, up(tokens, 256)) : tokens < 8192 ? up(tokens, 512)
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
    if (const std::string why = power_model_problem(s.cluster.node.gpu); !why.empty())
      throw InputError(s.mark(k), why);
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
        throw InputError(s.mark(own), std::string(own) + ": does not go with workload.chakra, the traces give the workload");
    if (s.marks.count("faults")) {
      s.faults.set = true;
      if (s.faults.checkpoint_size_bytes < 0)
        throw InputError(s.mark("faults"), "faults.checkpoint_size is required with workload.chakra (the traces carry "
                                           "no model to size a checkpoint from)");
      if (s.faults.checkpoint_bandwidth <= 0)
        throw InputError(s.mark("faults"), "faults.checkpoint_bandwidth is required, expected e.g. 100GB/s");
    }
    s.model.name = "chakra traces";
    s.chakra_dir = (fs::path(s.chakra_dir).is_relative() ? fs::path(path).parent_path() / s.chakra_dir
                                                         : fs::path(s.chakra_dir)).string();
    s.merged_yaml = emit_yaml(root);
    s.config_yaml = s.merged_yaml;
    return s;
  }
  if (!s.jobs.empty()) {
    // A jobs: file describes the shared cluster; each job's file has the rest.
    for (const char* own : {"model", "parallel", "training", "inference", "variability", "faults", "sweep", "reference"})
      if (s.marks.count(own))
        throw InputError(s.mark(own), std::string(own) + ": belongs in each job's scenario, not beside jobs:");
    if (s.marks.count("output"))
      throw InputError(s.mark("output"), "a jobs: run prints its summary (--json for the object) and writes no "
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
      throw InputError(s.mark("model"), std::string("model.") + key + " is not set: give model.preset or model." + key);
  }
  if (m.name.empty()) m.name = "custom";
  if (m.head_channels == 0 && m.hidden % m.heads != 0)
    throw InputError(s.mark("model.heads"), "model.heads (" + std::to_string(m.heads) + ") must divide model.hidden (" +
                                                std::to_string(m.hidden) + "), or give model.head_dim");
  if (m.is_mla()) {
    const MlaConfig& a = m.mla;
    if (a.qk_head_dim <= 0 || a.rope_head_dim <= 0 || a.v_head_dim <= 0)
      throw InputError(s.mark("model.mla"), "model.mla needs qk_head_dim, rope_head_dim and v_head_dim (DeepSeek-V3: "
                                            "128, 64, 128)");
    if (m.head_channels > 0)
      throw InputError(s.mark("model.head_dim"),
                       "model.head_dim does not apply under model.mla: its heads' widths are model.mla's");
    if (m.learned_positions)
      throw InputError(s.mark("model.mla"), "model.mla's keys carry a rotary part, expected a model without a learned "
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
                       "tflops_per_gpu or mfu (not " + s.reference.metric + ")");
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
      throw InputError(s.mark("faults"), "faults: applies to training runs (goodput over training.duration), not to "
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
      throw InputError(s.mark("model.moe.routing"), "model.moe.routing needs a mixture-of-experts model (model.moe.experts > 0)");
    if (r.dist == "histogram") {
      if (static_cast<int64_t>(r.histogram.size()) != m.moe.experts)
        throw InputError(s.mark(r.histogram.empty() ? "model.moe.routing" : "model.moe.routing.histogram"),
                         "model.moe.routing.histogram has " + std::to_string(r.histogram.size()) +
                             " entries, expected one per expert (" + std::to_string(m.moe.experts) + ")");
      double sum = 0;
      for (double v : r.histogram) sum += v;
      if (sum <= 0)
        throw InputError(s.mark("model.moe.routing.histogram"), "model.moe.routing.histogram sums to 0, expected loads");
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
                       "selective (it is " + s.training.recompute + ")");
    for (const std::string& mod : s.training.recompute_modules)
      if (mod == "mla_up_proj" && !m.is_mla())
        throw InputError(s.mark("training.recompute_modules"),
                         "training.recompute_modules: mla_up_proj needs multi-head latent attention (model.mla)");
  }
  if (s.inference && s.marks.count("training"))
    throw InputError(s.mark("training"), "a training: block beside inference: is not used, expected one of the two");
  if (m.moe.dense_layers > m.layers)
    throw InputError(s.mark("model.moe.dense_layers"), "model.moe.dense_layers = " + std::to_string(m.moe.dense_layers) +
                                                          " is past model.layers = " + std::to_string(m.layers));
  if (s.inference && s.serving.trace.empty()) {
    for (const auto& [what, d] : {std::pair{"prompt_tokens", &s.serving.prompt}, {"output_tokens", &s.serving.output}}) {
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
    throw InputError(s.mark("cluster.nodes"), std::to_string(static_cast<int64_t>(s.cluster.nodes) * s.cluster.node.gpus) +
                                                  " GPUs is past the budget of 1048576 GPUs per cluster "
                                                  "(--allow-large runs it anyway)");
  if (!s.allow_large && s.inference && s.serving.requests > 10'000'000)
    throw InputError(s.mark("inference.requests"), "inference.requests = " + std::to_string(s.serving.requests) +
                                                       " is past the budget of 10000000 requests per run "
                                                       "(--allow-large runs it anyway)");
  if (s.inference && s.serving.trace.empty()) {
    // Tokens the run is expected to serve: requests x the mean prompt and output lengths
    // of their distributions (zipf's from the integral of its truncated density).
    const double tokens = static_cast<double>(s.serving.requests) *
                          (length_mean(s.serving.prompt) + length_mean(s.serving.output));
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
    if (!s.marks.count("inference.max_batch_size")) s.serving.max_batch_size = s.serving.scheduler == "trtllm" ? 2048 : 1024;
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
                     "vllm-v1 chunk prefills already), got '" + s.serving.scheduler + "'");
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
