#include "scenarios/model.h"

namespace clustersim {
namespace {

ModelConfig make(std::string name, int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t ffn,
                 FfnType type, int64_t vocab, int64_t seq, bool tied) {
  ModelConfig m;
  m.name = std::move(name);
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.ffn_hidden = ffn;
  m.ffn_type = type;
  m.vocab = vocab;
  m.seq_len = seq;
  m.tied_embeddings = tied;
  m.biases = m.learned_positions = type == FfnType::Gelu;  // the GPT family
  // Megatron-LM's GPT defaults --attention-dropout and --hidden-dropout to 0.1; Llama
  // trains without dropout.
  m.dropout = type == FfnType::Gelu ? 0.1 : 0.0;
  return m;
}

ModelConfig moe(ModelConfig m, int64_t experts, int64_t top_k, int64_t shared, int64_t ffn, int64_t dense) {
  m.moe.experts = experts;
  m.moe.top_k = top_k;
  m.moe.shared_experts = shared;
  m.moe.expert_ffn_hidden = ffn;
  m.moe.dense_layers = dense;
  return m;
}

ModelConfig deepseek_v3() {
  ModelConfig m =
      moe(make("deepseek-v3", 61, 7168, 128, 128, 18432, FfnType::Swiglu, 129280, 4096, false), 256, 8, 1, 2048, 3);
  m.mla = {1536, 512, 128, 64, 128};
  m.mtp_layers = 1;
  // Its routing (the V3 report, 2.1.2; config.json): sigmoid affinities, the load balanced
  // by a bias on the top-k selection and a sequence-wise balance loss of weight 1e-4, the
  // experts in 8 groups of which each token's best 4 (node-limited routing), the chosen
  // affinities normalized and scaled by 2.5.
  m.moe.score_sigmoid = true;
  m.moe.expert_bias = true;
  m.moe.groups = 8;
  m.moe.group_topk = 4;
  m.moe.topk_scaling = 2.5;
  m.moe.load_balancing = "seq_aux_loss";
  m.moe.aux_loss_coeff = 1e-4;
  return m;
}

// GPT-3: Brown et al. 2020, Table 2.1 (1.3B with 16 heads of 128, as Megatron-LM runs
// it); vocabulary 51200 (50257 padded). Llama 3: Meta's model cards / params.json.
const std::vector<ModelConfig>& presets() {
  static const std::vector<ModelConfig> kPresets = {
      make("gpt3-1.3b", 24, 2048, 16, 16, 8192, FfnType::Gelu, 51200, 2048, true),
      make("gpt3-175b", 96, 12288, 96, 96, 49152, FfnType::Gelu, 51200, 2048, true),
      make("llama3-8b", 32, 4096, 32, 8, 14336, FfnType::Swiglu, 128256, 8192, false),
      make("llama3-70b", 80, 8192, 64, 8, 28672, FfnType::Swiglu, 128256, 8192, false),
      make("llama3-405b", 126, 16384, 128, 8, 53248, FfnType::Swiglu, 128256, 8192, false),
      // The Megatron-LM scaling family (Narayanan et al. 2021, Table 1): GPT layers, 4h MLP.
      make("megatron-1.7b", 24, 2304, 24, 24, 4 * 2304, FfnType::Gelu, 51200, 2048, true),
      make("megatron-3.6b", 30, 3072, 32, 32, 4 * 3072, FfnType::Gelu, 51200, 2048, true),
      make("megatron-7.5b", 36, 4096, 32, 32, 4 * 4096, FfnType::Gelu, 51200, 2048, true),
      make("megatron-18.4b", 40, 6144, 48, 48, 4 * 6144, FfnType::Gelu, 51200, 2048, true),
      make("megatron-39.1b", 48, 8192, 64, 64, 4 * 8192, FfnType::Gelu, 51200, 2048, true),
      make("megatron-76.1b", 60, 10240, 80, 80, 4 * 10240, FfnType::Gelu, 51200, 2048, true),
      make("megatron-145.6b", 80, 12288, 96, 96, 4 * 12288, FfnType::Gelu, 51200, 2048, true),
      make("megatron-310.1b", 96, 16384, 128, 128, 4 * 16384, FfnType::Gelu, 51200, 2048, true),
      make("megatron-529.6b", 105, 20480, 128, 128, 4 * 20480, FfnType::Gelu, 51200, 2048, true),
      make("megatron-1t", 128, 25600, 160, 160, 4 * 25600, FfnType::Gelu, 51200, 2048, true),
      moe(make("mixtral-8x7b", 32, 4096, 32, 8, 14336, FfnType::Swiglu, 32000, 4096, false), 8, 2, 0, 14336, 0),
      // DeepSeek-V3 (DeepSeek-AI 2024, the V3 report and its config.json): multi-head latent attention
      // (q_lora 1536, kv_lora 512, heads of 128 + 64 rotary, values of 128), 256 routed
      // experts (top 8) and one shared, the first 3 layers dense, one MTP module.
      deepseek_v3(),
  };
  return kPresets;
}

}  // namespace

int64_t ModelConfig::attention_params() const {
  if (is_mla()) {
    // Query (down, its norm, up; or one projection), the key/value latent with the shared
    // rotary key, its norm, the up projection to every head's key and value, the output.
    const int64_t qk = mla.qk_head_dim + mla.rope_head_dim;
    const int64_t q = mla.q_lora_rank > 0 ? hidden * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * heads * qk
                                          : hidden * heads * qk;
    return q + hidden * (mla.kv_lora_rank + mla.rope_head_dim) + mla.kv_lora_rank +
           mla.kv_lora_rank * heads * (mla.qk_head_dim + mla.v_head_dim) + heads * mla.v_head_dim * hidden;
  }
  const int64_t d = head_dim();
  return hidden * (heads + 2 * kv_heads) * d + heads * d * hidden + (biases ? (heads + 2 * kv_heads) * d + hidden : 0);
}

int64_t ModelConfig::dense_mlp_params() const {
  return mlp_matrices() * hidden * ffn_hidden + (biases ? ffn_hidden + hidden : 0);
}

int64_t ModelConfig::expert_params() const { return mlp_matrices() * hidden * moe.expert_ffn_hidden; }

int64_t ModelConfig::layer_params(int64_t layer) const {
  // GPT-style models carry LayerNorm gains and biases; Llama has RMSNorm gains only.
  const int64_t norms = biases ? 4 * hidden : 2 * hidden;
  const int64_t mlp = moe_layer(layer) ? hidden * moe.experts + (moe.experts + moe.shared_experts) * expert_params()
                                       : dense_mlp_params();
  return attention_params() + mlp + norms;
}

std::string_view to_string(BlockSpec::Type t) {
  switch (t) {
    case BlockSpec::Type::Attention:
      return "attention";
    case BlockSpec::Type::Mlp:
      return "mlp";
    case BlockSpec::Type::Moe:
      return "moe";
    case BlockSpec::Type::Conv:
      return "conv";
    case BlockSpec::Type::Norm:
      return "norm";
    case BlockSpec::Type::Embedding:
      return "embedding";
  }
  return "?";
}

int64_t BlockSpec::params() const {
  switch (type) {
    case Type::Attention:  // QKV and output projections with biases, the pre-norm
      return 4 * hidden * hidden + 4 * hidden + 2 * hidden;
    case Type::Mlp:
      return 2 * hidden * ffn_hidden + ffn_hidden + hidden + 2 * hidden;
    case Type::Moe:  // the router and every expert
      return hidden * experts + experts * (2 * hidden * ffn_hidden + ffn_hidden + hidden) + 2 * hidden;
    case Type::Conv:
      return channels_out * channels_in * kernel * kernel + channels_out;
    case Type::Norm:
      return 2 * hidden;
    case Type::Embedding:
      return vocab * hidden;
  }
  return 0;
}

double BlockSpec::forward_flops() const {
  const double rows = static_cast<double>(batch) * static_cast<double>(tokens);
  const double h = static_cast<double>(hidden), f = static_cast<double>(ffn_hidden);
  switch (type) {
    case Type::Attention: {
      const double scores = 4.0 * static_cast<double>(batch) * static_cast<double>(tokens) *
                            static_cast<double>(tokens) * h * (causal ? 0.5 : 1.0);
      return 2.0 * rows * h * 4.0 * h + scores;
    }
    case Type::Mlp:
      return 4.0 * rows * h * f;
    case Type::Moe:
      return 2.0 * rows * h * static_cast<double>(experts) + static_cast<double>(top_k) * 4.0 * rows * h * f;
    case Type::Conv: {
      const double out =
          static_cast<double>(batch) * static_cast<double>(height / stride) * static_cast<double>(width / stride);
      return 2.0 * out * static_cast<double>(channels_out) * static_cast<double>(channels_in * kernel * kernel);
    }
    case Type::Norm:
    case Type::Embedding:
      return 0;
  }
  return 0;
}

double BlockSpec::activation_elements() const {
  if (type == Type::Conv)
    return static_cast<double>(batch) * static_cast<double>(height) * static_cast<double>(width) *
           static_cast<double>(channels_in);
  return static_cast<double>(batch) * static_cast<double>(tokens) * static_cast<double>(hidden);
}

int64_t ModelConfig::total_params() const {
  if (!blocks.empty()) {
    int64_t sum = 0;
    for (const BlockSpec& b : blocks) sum += b.count * b.params();
    return sum;
  }
  const int64_t embed = vocab * hidden * (tied_embeddings ? 1 : 2);
  const int64_t pos = learned_positions ? seq_len * hidden : 0;
  int64_t sum = 0;
  for (int64_t l = 0; l < layers; ++l) sum += layer_params(l);
  return sum + embed + pos + 2 * hidden + mtp_layers * mtp_params();
}

int64_t ModelConfig::mtp_params() const {
  // Megatron-Core's MultiTokenPredictionLayer: the two norms of the hidden state and the
  // next token's embedding, their projection (2h -> h), a transformer layer like the last
  // one, its final norm; the embedding and the output layer are the model's own.
  return 2 * hidden * hidden + 3 * hidden + layer_params(layers - 1);
}

const ModelConfig* find_model_preset(std::string_view name) {
  for (const auto& m : presets())
    if (m.name == name) return &m;
  return nullptr;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> out;
  for (const auto& m : presets()) out.push_back(m.name);
  return out;
}

std::string_view to_string(FfnType f) { return f == FfnType::Gelu ? "gelu" : "swiglu"; }

bool parse_ffn_type(std::string_view s, FfnType& out) {
  if (s == "gelu")
    out = FfnType::Gelu;
  else if (s == "swiglu")
    out = FfnType::Swiglu;
  else
    return false;
  return true;
}

}  // namespace clustersim
