// Decoder-only transformer description and presets. Parameter and FLOP counts are
// exact for the shapes the planner emits (see docs/model.md for the formulas).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "topology/dtype.h"

namespace clustersim {

enum class FfnType : uint8_t { Gelu, Swiglu };

// How the router spreads tokens over experts (plan/moe_routing.h; docs/model.md, "MoE
// routing skew").
struct MoeRouting {
  std::string dist = "even";      // even (every expert its exact share) | uniform | zipf | histogram
  double alpha = 1.0;             // zipf: popularity of the k-th most popular expert ∝ k^-alpha
  std::vector<double> histogram;  // histogram: each expert's relative load, as measured
  bool dropless = true;           // false: capacity_factor caps each expert, the rest is dropped
  uint64_t seed = 1;              // the scenario's seed
};

struct MoeConfig {
  int64_t experts = 0;  // 0: a dense model
  int64_t top_k = 0;
  int64_t shared_experts = 0;
  int64_t expert_ffn_hidden = 0;
  double capacity_factor = 1.0;  // tokens an expert takes, relative to a perfectly even split
  int64_t dense_layers = 0;      // leading layers that keep a dense MLP (DeepSeek: 3)
  bool router_fp32 = false;      // the router's GEMMs in FP32 (Megatron-Core's --moe-router-dtype fp32)
  MoeRouting routing;
  // The routing function after the router's GEMM (docs/model.md, "The router's own
  // kernels"): Megatron-Core's --moe-router-score-function, --moe-router-enable-expert-bias,
  // --moe-router-num-groups / --moe-router-group-topk, --moe-router-topk-scaling-factor,
  // --moe-router-load-balancing-type and --moe-aux-loss-coeff.
  bool score_sigmoid = false;               // sigmoid scores (DeepSeek-V3); false: softmax
  bool expert_bias = false;                 // aux-loss-free balancing: a per-expert bias added for the top-k only
  int64_t groups = 0, group_topk = 0;       // group-limited top-k: the best group_topk of `groups` (0: off)
  double topk_scaling = 0;                  // the top-k probabilities scaled (0: not)
  std::string load_balancing = "aux_loss";  // aux_loss | seq_aux_loss | none
  double aux_loss_coeff = 0;                // 0: the balancing loss is not computed
  // Under FP8 the router pads each expert's tokens to a multiple of 16 (Megatron-Core's
  // --moe-router-padding-for-fp8), so the grouped MLP copies nothing into padded buffers.
  bool router_padding_for_fp8 = false;
};

// Multi-head latent attention (DeepSeek-V2 and V3; Megatron-Core's MLASelfAttention;
// docs/model.md, "Multi-head latent attention"): the query through a rank-q_lora_rank
// bottleneck (0: one projection h -> heads·(qk_head_dim + rope_head_dim)), keys and values
// up-projected from a shared latent of kv_lora_rank, and one rotary key of rope_head_dim
// that every head shares. A query or key head is qk_head_dim + rope_head_dim wide, a value
// head v_head_dim.
struct MlaConfig {
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;  // 0: not MLA
  int64_t qk_head_dim = 0;
  int64_t rope_head_dim = 0;
  int64_t v_head_dim = 0;
};

// One entry of a model given as a list of layer types (`model.blocks`, docs/model.md,
// "Models as lists of blocks"): `count` layers of one type and shape. A sample is `batch`
// rows of `tokens` positions of `hidden` features (AlphaFold's MSA: rows = sequences,
// tokens = residues); convolutions take an image of height × width × channels_in.
struct BlockSpec {
  enum class Type : uint8_t { Attention, Mlp, Moe, Conv, Norm, Embedding };
  Type type = Type::Mlp;
  std::string name;
  int64_t count = 1;
  int64_t stage = -1;   // pipeline stage (a component); -1: split by FLOPs
  bool frozen = false;  // no weight gradients (a diffusion model's text encoder and VAE)
  bool column = false;  // tensors sharded along the other axis under parallel.tp (axial attention)
  bool causal = false;
  int64_t batch = 1, tokens = 1, hidden = 0, heads = 0, ffn_hidden = 0, experts = 0, top_k = 1, vocab = 0;
  int64_t height = 0, width = 0, channels_in = 0, channels_out = 0, kernel = 1, stride = 1;

  int64_t params() const;
  double forward_flops() const;        // one sample
  double activation_elements() const;  // the block's input, one sample
};
std::string_view to_string(BlockSpec::Type t);

struct ModelConfig {
  std::string name;
  std::vector<BlockSpec> blocks;  // a model as a list of blocks, instead of the transformer fields
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t ffn_hidden = 0;
  FfnType ffn_type = FfnType::Gelu;
  int64_t vocab = 0;
  int64_t seq_len = 0;
  DType dtype = DType::BF16;
  bool tied_embeddings = false;
  bool biases = false;             // GPT: linear biases and LayerNorm (gain + bias); Llama: RMSNorm gain only
  bool learned_positions = false;  // GPT: a learned position table; Llama: rotary, no weights
  double dropout = 0.0;            // attention and hidden dropout probability (Megatron GPT: 0.1; Llama: 0)
  int64_t head_channels = 0;       // a head's width when it is not hidden / heads (Qwen3, Gemma; Megatron's
                                   // --kv-channels); 0: hidden / heads
  MoeConfig moe;
  MlaConfig mla;
  int64_t mtp_layers = 0;  // multi-token prediction modules after the last layer (DeepSeek-V3: 1)

  bool is_mla() const { return mla.kv_lora_rank > 0; }
  // The attention kernel's heads and width: under MLA every head has its own key and value
  // (up-projected), query and key heads qk + rope wide and value heads v wide; the kernel
  // is timed as heads of their mean width, (qk + rope + v) / 2, whose products and bytes
  // are the same (docs/model.md).
  int64_t attn_kv_heads() const { return is_mla() ? heads : kv_heads; }
  int64_t attn_head_dim() const {
    return is_mla() ? (mla.qk_head_dim + mla.rope_head_dim + mla.v_head_dim) / 2 : head_dim();
  }
  // The attention output's width, the output projection's input: heads x value width.
  int64_t attn_out_width() const { return heads * (is_mla() ? mla.v_head_dim : head_dim()); }
  int64_t head_dim() const { return head_channels > 0 ? head_channels : heads > 0 ? hidden / heads : 0; }
  bool moe_layer(int64_t layer) const { return moe.experts > 0 && layer >= moe.dense_layers; }
  int64_t mlp_matrices() const { return ffn_type == FfnType::Swiglu ? 3 : 2; }
  int64_t attention_params() const;
  int64_t dense_mlp_params() const;
  int64_t expert_params() const;  // one expert
  // Weights of one transformer layer: QKV + output projection, MLP (or router, experts
  // and shared experts), norms.
  int64_t layer_params(int64_t layer = 0) const;
  // All weights: layers, token embedding (and an untied output layer), final norm, and
  // the multi-token prediction modules.
  int64_t total_params() const;
  int64_t mtp_params() const;  // one multi-token prediction module
};

const ModelConfig* find_model_preset(std::string_view name);
std::vector<std::string> model_preset_names();
std::string_view to_string(FfnType f);
bool parse_ffn_type(std::string_view s, FfnType& out);

}  // namespace clustersim
