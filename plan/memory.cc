#include "plan/memory.h"

#include <cstdio>

namespace clustersim {

int64_t padded_vocab(const ModelConfig& m, int64_t tp) {
  const int64_t q = 128 * tp;
  return (m.vocab + q - 1) / q * q;
}

int64_t params_per_rank(const ModelConfig& m, int64_t tp) {
  // Linear weights (and their biases) shard over TP; norms and position tables are
  // replicated; the vocabulary shards over TP.
  const int64_t h = m.hidden, d = m.head_dim();
  const int64_t mlp_in = (m.ffn_type == FfnType::Swiglu ? 2 : 1) * m.ffn_hidden;
  int64_t sharded = h * (m.heads + 2 * m.kv_heads) * d + m.heads * d * h + h * mlp_in + m.ffn_hidden * h;
  int64_t replicated = 2 * h;  // two norm gains
  if (m.biases) {
    sharded += (m.heads + 2 * m.kv_heads) * d + mlp_in;
    replicated += 2 * h + 2 * h;  // norm biases, output-projection and MLP-down biases
  }
  const int64_t vocab = padded_vocab(m, tp) * h * (m.tied_embeddings ? 1 : 2);
  const int64_t pos = m.learned_positions ? m.seq_len * h : 0;
  return m.layers * (sharded / tp + replicated) + vocab / tp + pos + 2 * h;
}

MemoryBreakdown training_memory(const ModelConfig& m, const MemoryInputs& in) {
  MemoryBreakdown b;
  const double p = static_cast<double>(params_per_rank(m, in.tp));
  const double e = dtype_bits(m.dtype) / 8.0;
  b.weights = p * e;
  b.gradients = p * (m.dtype == DType::FP16 ? 2.0 : 4.0);
  b.optimizer = p * (in.adam ? (m.dtype == DType::FP32 ? 8.0 : 12.0) : (m.dtype == DType::FP32 ? 4.0 : 8.0));
  const double sbh = static_cast<double>(m.seq_len) * in.micro_batch * m.hidden;
  const double t = static_cast<double>(in.tp);
  const double per_layer = in.sequence_parallel ? sbh * 34.0 / t : sbh * (10.0 + 24.0 / t);
  const double logits = static_cast<double>(m.seq_len) * in.micro_batch * padded_vocab(m, in.tp) / t * (e + 4.0);
  b.activations = (per_layer * m.layers + logits) * in.in_flight_micro_batches;
  return b;
}

std::string MemoryBreakdown::describe() const {
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  char buf[256];
  std::snprintf(buf, sizeof buf, "weights %.1f GiB, gradients %.1f GiB, optimizer state %.1f GiB, activations %.1f GiB",
                weights / GiB, gradients / GiB, optimizer / GiB, activations / GiB);
  return buf;
}

}  // namespace clustersim
