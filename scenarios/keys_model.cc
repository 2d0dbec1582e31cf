// Scenario keys of the model: presets, shapes, attention, mixtures of experts, layer blocks (scenarios/key_table.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "scenarios/key_table.h"
#include "scenarios/readers.h"
#include "scenarios/topology_file.h"
#include "scenarios/units.h"
#include "topology/presets.h"

namespace clustersim {
namespace {

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
      if (!inner)
        throw InputError(b.mark, where + " needs blocks: beside repeat:, expected {repeat: N, blocks: [...]}");
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
      if (!b.find(r))
        throw InputError(b.mark,
                         where + " (" + t + ") needs " + r + ":, expected all of: " + join(shapes[ti].required));
    if (spec.type == T::Attention && spec.hidden % spec.heads != 0)
      throw InputError(b.find("heads")->mark,
                       where + ".heads must divide hidden (" + std::to_string(spec.hidden) + ")");
    if (spec.type == T::Moe && spec.top_k > spec.experts)
      throw InputError(b.find("top_k")->mark,
                       where + ".top_k must be at most experts (" + std::to_string(spec.experts) + ")");
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

}  // namespace

void add_model_keys(KeyList& t) {
  using S = Scenario;
  using N = YNode;
  t.insert(
      t.end(),
      {
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
           "a head's width d, where the model's heads are not hidden / heads wide (Qwen3 30B-A3B: hidden 2048, 32 "
           "heads "
           "of 128; Megatron's --kv-channels, Hugging Face's head_dim): the QKV projection is h x (heads + 2 "
           "kv_heads)·d, "
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
           "{type: attention|mlp|moe|conv|norm|embedding, count, stage, frozen, axis: row|column, batch, tokens, "
           "hidden, "
           "heads, causal, ffn_hidden, experts, top_k, vocab, height, width, channels_in, channels_out, kernel, "
           "stride} "
           "(docs/model.md, \"Models as lists of blocks\")",
           [](const N& n, S& s) { s.model.blocks = read_blocks(n); }},
          {"model.dtype", "dtype", "bf16",
           "fp32 | bf16 | fp16 | fp8 | int8 | int4; serving: the weights in it, the GEMMs at its tensor-core rate "
           "where "
           "the GPU has one (fp8 without FP8 tensor cores, as on Ampere: weight-only, 16-bit math; int4: 4-bit "
           "weights with 8-bit math, W4A8, at the INT8 rate); training: fp32 to fp8",
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
          {"model.moe.capacity_factor", "number", "1.0",
           "tokens an expert takes, relative to an even split (>= 1): a dropping router's cap (routing.dropless: "
           "false); "
           "a dropless router has none, so another value beside it is refused",
           [](const N& n, S& s) {
             s.model.moe.capacity_factor = as_double(n, "model.moe.capacity_factor", 1.0, false);
             if (s.model.moe.capacity_factor > 64)
               throw InputError(n.mark,
                                "model.moe.capacity_factor = " + n.scalar + " is out of range, expected 1 to 64");
           }},
          {"model.moe.routing", "mapping", "{dist: even}",
           "how the router spreads tokens over experts in training (serving: uniform, each expert's rows binomial; "
           "another spread is refused there)",
           nullptr},
          {"model.moe.routing.dist", "name", "even",
           "even (each expert its exact share) | uniform (random, multinomial counts) | zipf | histogram; the "
           "most-loaded "
           "EP rank sets the layer's time (docs/model.md)",
           [](const N& n, S& s) {
             s.model.moe.routing.dist = as_enum(n, "model.moe.routing.dist", {"even", "uniform", "zipf", "histogram"});
           }},
          {"model.moe.routing.alpha", "number", "1.0",
           "zipf: the k-th most popular expert's share is proportional to k^-alpha",
           [](const N& n, S& s) { s.model.moe.routing.alpha = as_number(n, "model.moe.routing.alpha", 0, 10); }},
          {"model.moe.routing.histogram", "list", "[]",
           "histogram: each expert's relative load, one per expert, as measured",
           [](const N& n, S& s) {
             if (n.kind != YNode::Kind::Seq)
               throw InputError(n.mark, "model.moe.routing.histogram must be a list of numbers, got " + n.kind_name());
             s.model.moe.routing.histogram.clear();
             for (const YNode& v : n.seq)
               s.model.moe.routing.histogram.push_back(as_double(v, "model.moe.routing.histogram", 0, false));
           }},
          {"model.moe.routing.dropless", "bool", "true",
           "true: experts take every token routed to them (Megatron-Core's default); false: capacity_factor caps each, "
           "the rest is dropped",
           [](const N& n, S& s) { s.model.moe.routing.dropless = as_bool(n, "model.moe.routing.dropless"); }},
          {"model.moe.dense_layers", "integer", "0", "leading layers that keep a dense MLP",
           [](const N& n, S& s) { s.model.moe.dense_layers = as_int(n, "model.moe.dense_layers", 0); }},
          {"model.moe.router_dtype", "name", "auto",
           "auto (the router's GEMMs in the activations' type) | fp32 (Megatron-Core's --moe-router-dtype fp32: the "
           "router's input and weight cast to FP32 and its three GEMMs run in FP32, as NeMo's DeepSeek-V3 recipes "
           "set); "
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
           [](const N& n, S& s) {
             s.model.moe.router_padding_for_fp8 = as_bool(n, "model.moe.router_padding_for_fp8");
           }},
          {"model.moe.groups", "integer", "0",
           "group-limited routing (--moe-router-num-groups): the experts in this many groups, a token's top-k taken "
           "from its best model.moe.group_topk groups (DeepSeek-V3: 8 and 4); 0: off",
           [](const N& n, S& s) { s.model.moe.groups = as_int(n, "model.moe.groups", 0, 1 << 20); }},
          {"model.moe.group_topk", "integer", "0",
           "group-limited routing (--moe-router-group-topk): the groups a token "
           "may use; with model.moe.groups",
           [](const N& n, S& s) { s.model.moe.group_topk = as_int(n, "model.moe.group_topk", 0, 1 << 20); }},
          {"model.moe.topk_scaling", "number", "0",
           "the chosen experts' probabilities scaled by this (--moe-router-topk-scaling-factor; DeepSeek-V3 2.5); 0: "
           "not",
           [](const N& n, S& s) { s.model.moe.topk_scaling = as_number(n, "model.moe.topk_scaling", 0, 1e6); }},
          {"model.moe.load_balancing", "name", "aux_loss",
           "the balancing loss (--moe-router-load-balancing-type): aux_loss (the switch loss over the micro-batch, its "
           "expert counts all-reduced over TP x CP) | seq_aux_loss (per sequence, the scores all-gathered over TP x "
           "CP) "
           "| none; computed only with model.moe.aux_loss_coeff > 0",
           [](const N& n, S& s) {
             s.model.moe.load_balancing = as_enum(n, "model.moe.load_balancing", {"aux_loss", "seq_aux_loss", "none"});
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
          {"model.mla.qk_head_dim", "integer", "0",
           "a query/key head's part without rotary embedding (DeepSeek-V3 128)",
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
      });
}

}  // namespace clustersim
