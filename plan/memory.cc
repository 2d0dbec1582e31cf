#include "plan/memory.h"

#include <algorithm>
#include <cstdio>

namespace clustersim {

int64_t padded_vocab(const ModelConfig& m, int64_t tp) {
  const int64_t q = 128 * tp;
  return (m.vocab + q - 1) / q * q;
}

StageParams stage_params(const ModelConfig& m, const MemoryInputs& in) {
  // Linear weights (and their biases) shard over TP; norms and position tables are
  // replicated; the vocabulary shards over TP; experts shard over EP, then their own TP.
  StageParams p;
  const double t = static_cast<double>(in.tp), h = static_cast<double>(m.hidden);
  const double et = static_cast<double>(in.expert_tp());
  const int64_t end = in.end_layer < 0 ? m.layers : in.end_layer;
  const double norms = m.biases ? 4 * h : 2 * h;
  // One transformer layer's weights, added into `into`.
  auto add_layer = [&](StageParams& into, int64_t l) {
    into.dense += static_cast<double>(m.attention_params()) / t + norms;
    if (m.moe_layer(l)) {
      into.dense += h * static_cast<double>(m.moe.experts);  // router, replicated
      into.dense += static_cast<double>(m.moe.shared_experts * m.expert_params()) / t;
      into.expert +=
          static_cast<double>(m.moe.experts) / static_cast<double>(in.ep) * static_cast<double>(m.expert_params()) / et;
    } else {
      into.dense += static_cast<double>(m.dense_mlp_params()) / t;
    }
  };
  for (int64_t l = in.first_layer; l < end; ++l) add_layer(p, l);
  p.dense += vocab_params(m, in.tp, in.embedding, in.output, in.mtp_layers);
  // Multi-token prediction modules: a layer like the last, the projection (2h x h) and
  // three norms (the embedding's copy they read is in vocab_params).
  if (in.output && in.mtp_layers > 0) {
    StageParams module;
    add_layer(module, m.layers - 1);
    const double mtp = static_cast<double>(in.mtp_layers);
    p.dense += mtp * (module.dense + 2.0 * h * h / t + 3.0 * h);
    p.expert += mtp * module.expert;
  }
  return p;
}

double vocab_params(const ModelConfig& m, int64_t tp, bool first, bool last, int64_t mtp_layers) {
  const double h = static_cast<double>(m.hidden);
  const double vocab = static_cast<double>(padded_vocab(m, tp)) * h / static_cast<double>(tp);
  double p = 0;
  if (first) p += vocab + (m.learned_positions ? static_cast<double>(m.seq_len) * h : 0.0);
  if (last) {
    p += (!m.tied_embeddings || !first ? vocab : 0.0) + 2 * h;
    if (mtp_layers > 0 && !first && !m.tied_embeddings) p += vocab;
  }
  return p;
}

int64_t params_per_rank(const ModelConfig& m, int64_t tp) {
  MemoryInputs in;
  in.tp = tp;
  const StageParams p = stage_params(m, in);
  return static_cast<int64_t>(p.dense + p.expert);
}

MemoryBreakdown training_memory(const ModelConfig& m, const MemoryInputs& in) {
  MemoryBreakdown b;
  const StageParams sp = stage_params(m, in);
  const double e = dtype_bits(m.dtype) / 8.0;
  const double dp_all = static_cast<double>(in.dp * in.cp);
  // The ranks holding the same experts: DP x CP (x TP / their own TP) over EP.
  const double tp_over_etp = static_cast<double>(in.tp) / static_cast<double>(in.expert_tp());
  const double edp = std::max(1.0, dp_all * tp_over_etp / static_cast<double>(in.ep));
  auto shard = [&](int stage) {  // ZeRO divisor for dense and expert parameters
    return in.zero_stage >= stage ? std::pair{dp_all, edp} : std::pair{1.0, 1.0};
  };
  auto bytes = [&](double per_param, int stage) {
    const auto [d, x] = shard(stage);
    return per_param * (sp.dense / d + sp.expert / x);
  };
  // ZeRO 3 that keeps gathered parameters for the backward holds the whole stage's
  // parameters; gradients synced once a step over several micro-batches, an unsharded
  // accumulation buffer.
  const int grad_stage = in.grads_unsharded ? 4 : 2;
  // Weights kept unsharded are held as gathered (FSDP: its param dtype) besides the shard.
  // FP8: the BF16 weight and its cached FP8 copy; FP8 weights: the FP8 data and its
  // transpose. The vocabulary tables have no FP8 copy (the lookup and the logits' GEMM run in
  // 16 bits): 2 bytes each.
  const double vocab = in.fp8 ? vocab_params(m, in.tp, in.embedding, in.output, in.mtp_layers) : 0.0;
  const double vocab_shard = in.zero_stage >= 3 ? dp_all : 1.0;
  b.weights = in.zero_stage >= 3 && in.zero3_params_held
                  ? bytes(in.zero3_gather_bytes, 4) + (in.fp8 ? 1.0 : 0.0) * (sp.dense + sp.expert - vocab)
                  : bytes(in.fp8_params ? 2.0
                          : in.fp8      ? 3.0
                                        : e,
                          3) -
                        (in.fp8 && !in.fp8_params ? vocab / vocab_shard : 0.0);
  b.gradients = bytes(in.grad_bytes > 0 ? in.grad_bytes : m.dtype == DType::FP16 ? 2.0 : 4.0, grad_stage);
  // Adam's two moments (SGD's momentum) and, for a 16-bit model, the master weights.
  const double master = m.dtype == DType::FP32 ? 0.0 : in.master_bytes;
  b.optimizer = bytes((in.adam ? 2.0 : 1.0) * in.moment_bytes + master, 1);

  const double tokens =
      static_cast<double>(m.seq_len) / static_cast<double>(in.cp) * static_cast<double>(in.micro_batch);
  const double sbh = tokens * static_cast<double>(m.hidden);
  const double t = static_cast<double>(in.tp);
  // Saved activations per layer in units of s'·b·h bytes (16-bit), counted tensor by
  // tensor as Korthikanti et al. 2022 do, for this model's shapes: the attention block
  // keeps its input, Q, K and V (K and V shrink by kv_heads / heads under GQA) and the
  // projection's input; the MLP its input, the up projection's output (two of them
  // under SwiGLU) and the down projection's input; the two norms their inputs; each
  // hidden dropout a 1-byte mask. A GPT layer (4h GELU MLP, MHA, dropout) gives their 34.
  // Under FP8 the four linear layers' saved inputs are 1 byte. Without SP, the norms,
  // the QKV and MLP inputs and the masks are replicated over TP; the rest shards.
  const double h = static_cast<double>(m.hidden);
  const double f = static_cast<double>(m.ffn_hidden) / h;
  // Q and the projection's input are heads·d wide, K and V kv_heads·d each (h and h·g/a
  // when d = h/a).
  const double q = static_cast<double>(m.heads * m.head_dim()) / h;
  const double kv = static_cast<double>(m.kv_heads * m.head_dim()) / h;
  const double mask = m.dropout > 0 ? 1.0 : 0.0;
  const double lin = in.fp8 ? 1.0 : 2.0;  // a linear layer's saved input, bytes per element
  const double replicated = 4.0 + lin + lin + 2.0 * mask;  // norms, QKV input, MLP input, masks
  const double gated = m.mlp_matrices() == 3 ? 2.0 : 1.0;
  double mlp = 2.0 * f * gated + lin * f;  // the up projection's output, the down projection's input
  double gathered = 0;                     // per rank whatever the TP degree
  if (m.moe.experts > 0) {
    // A MoE layer (Megatron-Core's all-to-all dispatcher, docs/model.md "MoE layers"): each
    // rank's experts keep the rows routed to them, top_k a token (capacity-padded unless
    // dropless), all of its TP group's (FC1's input, gathered over TP), their up
    // projection's output and down projection's input at 1/t of the expert's width; the
    // unpermute keeps the experts' outputs for the router probabilities' gradient; shared
    // experts as a dense MLP.
    const double rows = static_cast<double>(m.moe.top_k) * (m.moe.routing.dropless ? 1.0 : m.moe.capacity_factor);
    const double fe = static_cast<double>(m.moe.expert_ffn_hidden) / h;
    const double fs = static_cast<double>(m.moe.shared_experts) * fe;
    mlp = rows * (2.0 * fe * gated + lin * fe) + 2.0 * static_cast<double>(m.moe.top_k) + 2.0 * fs * gated + lin * fs;
    // FC1's input: the TP group's rows when the experts are split over TP (gathered), the
    // rank's own when each rank holds whole experts (expert_tp 1 under SP).
    gathered = rows * lin / tp_over_etp;
  }
  double attention = 2.0 * q + 4.0 * kv + lin * q;  // Q, K and V, the projection's input
  double latents = 0;                                // MLA's, on the rank's tokens under SP
  if (m.is_mla()) {
    // Multi-head latent attention (docs/model.md): the kernel keeps the query and key
    // (qk + rope a head), the contiguous value and its output (the projection's input);
    // each up projection, a LayerNorm-Linear, its latent input and normed copy. Recomputing
    // the up projections (mla_up_proj) frees the query, key and value and keeps the latents
    // alone.
    const MlaConfig& a = m.mla;
    const double n = static_cast<double>(m.heads);
    const double qk = static_cast<double>(a.qk_head_dim + a.rope_head_dim), v = static_cast<double>(a.v_head_dim);
    attention = ((in.mla_up_recompute ? 0.0 : 2.0 * n * qk * 2.0 + 2.0 * n * v) + lin * n * v) / h;
    latents = static_cast<double>(a.q_lora_rank + a.kv_lora_rank) * (in.mla_up_recompute ? 2.0 : 2.0 + lin) / h;
  }
  const double sharded = attention + mlp;  // per head or expert column: split over TP
  double full_layer = in.sequence_parallel ? sbh * (replicated + latents + sharded) / t
                                           : sbh * (replicated + latents + sharded / t);
  full_layer += sbh * gathered;
  if (in.unfused_scores) {
    const double s_local = tokens / static_cast<double>(in.micro_batch);
    const double scores = static_cast<double>(m.heads) * s_local * s_local * static_cast<double>(in.micro_batch) / t;
    full_layer += scores * (m.dropout > 0 ? 5.0 : 2.0);
  }
  // Under full recompute a recomputed layer keeps only its input; the layers a partial
  // recompute leaves out keep everything, and the layer being recomputed holds all of its
  // own for its backward.
  // TorchTitan's op policy keeps what its saved ops output, and the layer's input: Q and
  // V (the odd matmuls wq and wv), the attention kernel's output, and under SwiGLU w1's and
  // w2's outputs, otherwise the up projection's; K, the attention projection's output,
  // w3's and every other op's come again. The layer being recomputed holds the rest.
  double stored_layer = full_layer;
  if (in.op_recompute) {
    const double replicated_kept = 2.0 + (gated == 2.0 ? 2.0 : 0.0);
    const double sharded_kept = 2.0 * q + 2.0 * kv + 2.0 * q + 2.0 * f;
    stored_layer =
        in.sequence_parallel ? sbh * (replicated_kept + sharded_kept) / t : sbh * (replicated_kept + sharded_kept / t);
  }
  const double kept = in.full_recompute ? in.in_flight_kept_layers : in.in_flight_layers;
  const double per_recomputed = 2.0 * sbh / (in.sequence_parallel ? t : 1.0);
  const bool recomputes =
      (in.full_recompute && in.in_flight_layers > kept) || (in.op_recompute && in.in_flight_layers > 0);
  b.activations = stored_layer * kept + per_recomputed * (in.in_flight_layers - kept) +
                  (recomputes ? full_layer - (in.op_recompute ? stored_layer : 0.0) : 0.0);
  // The logits and the tensors passed between stages are 16-bit under FP8 too.
  const double act_e = in.fp8 ? 2.0 : e;
  if (in.output)
    b.activations += static_cast<double>(1 + in.mtp_layers) * tokens * static_cast<double>(padded_vocab(m, in.tp)) / t *
                     (in.fused_cross_entropy ? act_e : act_e + 4.0);
  if (in.pp > 1) b.buffers += 2.0 * 2.0 * sbh * act_e / (in.sequence_parallel ? t : 1.0);
  if (in.zero_stage >= 3 && !in.zero3_params_held) {
    // Two layers gathered at a time (one in use, one prefetched).
    const double layer =
        (sp.dense + sp.expert) / std::max<int64_t>(1, (in.end_layer < 0 ? m.layers : in.end_layer) - in.first_layer);
    b.buffers += 2.0 * layer * in.zero3_gather_bytes;
  }
  return b;
}

double default_memory_reserve(const MemoryBreakdown& b, int communicators) {
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  return 0.75 * GiB + 0.25 * GiB * communicators + 0.03 * b.total();
}

std::string MemoryBreakdown::describe() const {
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  char buf[400];
  std::snprintf(
      buf, sizeof buf,
      "weights %.1f GiB, gradients %.1f GiB, optimizer state %.1f GiB, activations %.1f GiB, buffers %.1f GiB, "
      "reserved %.1f GiB",
      weights / GiB, gradients / GiB, optimizer / GiB, activations / GiB, buffers / GiB, reserved / GiB);
  return buf;
}

}  // namespace clustersim
