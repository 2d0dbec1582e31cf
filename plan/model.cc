#include "plan/model.h"

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
  };
  return kPresets;
}

}  // namespace

int64_t ModelConfig::layer_params() const {
  const int64_t d = head_dim();
  const int64_t qkv = hidden * (heads + 2 * kv_heads) * d;
  const int64_t out = heads * d * hidden;
  const int64_t mlp = (ffn_type == FfnType::Swiglu ? 3 : 2) * hidden * ffn_hidden;
  // GPT-style models carry biases and LayerNorm gains+biases; Llama has RMSNorm gains only.
  const int64_t extra = biases ? (heads + 2 * kv_heads) * d + hidden + ffn_hidden + hidden + 4 * hidden : 2 * hidden;
  return qkv + out + mlp + extra;
}

int64_t ModelConfig::total_params() const {
  const int64_t embed = vocab * hidden * (tied_embeddings ? 1 : 2);
  const int64_t pos = learned_positions ? seq_len * hidden : 0;
  return layers * layer_params() + embed + pos + 2 * hidden;
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
