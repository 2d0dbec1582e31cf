// StageBuilder (plan/stage_builder.h): attention, fused or unfused, with ring attention across the
// CP group, the rotary embedding, and multi-head latent attention.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "plan/stage_builder.h"

namespace clustersim {

// Megatron-LM before fused attention: per head, S = QK^T (q x kv x d) into HBM, a fused
// scale-mask-softmax over S (read and write), dropout over S (and its 1-byte mask),
// then O = PV. The GEMMs compute the whole square (the causal mask is applied to the
// scores), so they count twice the causal model FLOPs as hardware FLOPs.
uint32_t StageBuilder::unfused_attention_forward(Phase ph, int32_t L, int64_t q, int64_t kv, uint32_t in) {
  const int64_t heads = m_.heads / t_, d = m_.head_dim();
  const int64_t bh = l_.micro_batch * heads;
  const double scores = static_cast<double>(bh * q * kv);
  const double s_e = static_cast<double>(e_);
  uint32_t x = add_gemm("attn-scores", ph, L, q, kv, d, deps(in), bh, 0.5, attn_dtype_);
  x = add_memory("softmax", ph, L, scores * s_e, scores * s_e, 5.0 * scores, deps(x));
  // PyTorch's dropout kernel draws its Philox numbers per element (MemAccess::RandomMask).
  if (m_.dropout > 0)
    x = accessed(add_memory("attention-dropout", ph, L, scores * s_e, scores * (s_e + 1), scores, deps(x)),
                 MemAccess::RandomMask, scores);
  x = add_gemm("attn-context", ph, L, q, d, kv, deps(x), bh, 0.5, attn_dtype_);
  return context_permute("context-permute", ph, L, x);
}

// Megatron-LM's own layer (transformer_impl: local) makes the context [b, np, s, hn] ->
// [s, b, np, hn] contiguous after PV, and its backward makes the permuted gradient
// contiguous again for the batched GEMMs: PyTorch's strided copy loop, each way.
uint32_t StageBuilder::context_permute(const char* name, Phase ph, int32_t L, uint32_t after) {
  if (!l_.local_impl) return after;
  return strided_copy(name, ph, L, static_cast<double>(tokens_ * (m_.heads / t_) * m_.head_dim()),
                      MemAccess::StridedCopy, deps(after));
}

// A copy of `elements` 16-bit elements through one of PyTorch's strided loops.
uint32_t StageBuilder::strided_copy(const char* name, Phase ph, int32_t L, double elements, MemAccess a,
                                    const std::vector<uint32_t>& after) {
  const double b = elements * static_cast<double>(e_);
  return accessed(add_memory(name, ph, L, b, b, 0, after), a, elements);
}

uint32_t StageBuilder::unfused_attention_backward(int32_t L, int64_t q, int64_t kv, uint32_t dout) {
  const int64_t heads = m_.heads / t_, d = m_.head_dim();
  const int64_t bh = l_.micro_batch * heads;
  const double scores = static_cast<double>(bh * q * kv);
  const double s_e = static_cast<double>(e_);
  const Phase ph = Phase::Backward;
  // Selective recompute (Korthikanti et al. 2022): the attention core's forward runs
  // again here instead of keeping its 5·a·s²·b bytes per layer.
  if (l_.recompute_core_attn) {
    recomputing_ = true;
    dout = join(dout, unfused_attention_forward(ph, L, q, kv, dout));
    recomputing_ = false;
  }
  dout = context_permute("context-permute-backward", ph, L, dout);
  uint32_t dp = add_gemm("attn-context-dgrad", ph, L, q, kv, d, deps(dout), bh, 0.5, attn_dtype_);
  const uint32_t dv = add_gemm("attn-context-wgrad", ph, L, kv, d, q, deps(dout), bh, 0.5, attn_dtype_);
  if (m_.dropout > 0)
    dp = add_memory("attention-dropout-backward", ph, L, scores * (s_e + 1), scores * s_e, scores, deps(dp));
  const uint32_t ds = add_memory("softmax-backward", ph, L, 2 * scores * s_e, scores * s_e, 4.0 * scores, deps(dp));
  const uint32_t dq = add_gemm("attn-scores-dgrad", ph, L, q, d, kv, deps(ds), bh, 0.5, attn_dtype_);
  const uint32_t dk = add_gemm("attn-scores-wgrad", ph, L, kv, d, q, deps(ds, dv), bh, 0.5, attn_dtype_);
  // Megatron-LM's own layer splits the fused QKV output into strided views
  // (split_tensor_along_last_dim), so autograd concatenates their gradients back
  // (torch.cat over strided parts). With rotary embeddings rope_backward does it.
  if (l_.local_impl && m_.learned_positions)
    return strided_copy("qkv-split-backward", ph, L, static_cast<double>(tokens_ * qkv_), MemAccess::CatCopy,
                        deps(dq, dk));
  return join(dq, dk);
}

// Ring attention: the local K/V block first, then cp - 1 blocks arriving from the ring
// predecessor while the block at hand is computed (load-balanced causal split). Forward
// passes K and V on as they arrive; backward passes K, V and their gradients (twice the
// bytes) once each block's gradients are done.
// `fwd`: the forward's kernels, also in the backward phase when recomputed there.
uint32_t StageBuilder::ring_attention(int32_t L, Phase ph, uint32_t input) {
  return ring_attention(L, ph, input, ph == Phase::Forward);
}

uint32_t StageBuilder::ring_attention(int32_t L, Phase ph, uint32_t input, bool fwd) {
  const int64_t q = m_.seq_len / l_.cp;
  const char* block = fwd ? "attention-block" : "attention-block-backward";
  if (l_.cp == 1) {
    if (!l_.flash_attention)
      return fwd ? unfused_attention_forward(ph, L, q, q, input) : unfused_attention_backward(L, q, q, input);
    return add_attention(fwd ? "attention" : "attention-backward", ph, L, q, q, deps(input));
  }
  if (l_.cp_allgather) return allgather_attention(L, ph, input, fwd);
  const double KV = cp_kv_bytes();
  const double kv = fwd ? KV : 2.0 * KV;  // a step's send: K and V, and in the backward their gradients too
  // Transformer Engine's AttnFuncWithCPAndKVP2P around the blocks (docs/model.md,
  // "Context parallelism"): K and V packed into one send buffer; at each step after the
  // first the half of the query, or of K/V, that the load-balanced split leaves the rank
  // copied contiguous; the forward's per-step outputs corrected into one by their
  // log-sum-exps; in the backward each block's dK, dV concatenated and, with its dQ,
  // accumulated. Bytes in units of the rank's query (Q) and K+V (KV) tensors, each
  // step's averaged over the ring's ranks (a step's halves fall to different ranks).
  const double Q = static_cast<double>(l_.micro_batch * q * (m_.heads / t_) * m_.attn_head_dim() * e_);
  const double c = static_cast<double>(l_.cp - 1);
  uint32_t pack = add_memory("cp-kv-pack", ph, L, KV + (fwd ? 0.25 * c * (Q + KV) : 0.0),
                             KV + (fwd ? 0.25 * c * (Q + KV) : 0.0), 0, deps(input));
  uint32_t at = add_attention(block, ph, L, q, q, deps(pack));
  if (!fwd) at = add_memory("cp-grad-accumulate", ph, L, 2 * KV + Q, 2 * KV + Q, 0, deps(at));
  uint32_t have = fwd ? pack : at;
  for (int64_t i = 1; i < l_.cp; ++i) {
    add_p2p(fwd ? "cp-kv-send" : "cp-dkv-send", OpKind::Send, GroupKind::CP, 1, "cp-send", ph, L, kv, deps(have), true,
            false, true);
    const uint32_t recv = add_p2p(fwd ? "cp-kv-recv" : "cp-dkv-recv", OpKind::Recv, GroupKind::CP,
                                  static_cast<int32_t>(l_.cp - 1), "cp-recv", ph, L, kv, deps(have), true, false, true);
    at = add_attention(block, ph, L, q, q, deps(recv, at));
    if (!fwd)
      at = add_memory("cp-grad-accumulate", ph, L, 2.5 * KV + 2.25 * Q, 1.75 * KV + 1.5 * Q,
                      0.75 * (KV + Q) / static_cast<double>(e_), deps(at));
    have = fwd ? recv : at;
  }
  if (!fwd) return at;
  // The corrections: out zero-filled, then each step's output read with out and added
  // into it, over the whole query at steps the rank computes whole and over its second
  // half at the others: 1 + 3c/4 whole-query corrections on average.
  const double corr = 1.0 + 0.75 * c;
  return add_memory("attention-merge", ph, L, 2 * corr * Q, (corr + 1) * Q, 4.0 * corr * Q / static_cast<double>(e_),
                    deps(at));
}

// A CP rank's K and V: its s/cp tokens of the TP rank's K/V heads.
double StageBuilder::cp_kv_bytes() const {
  return 2.0 * static_cast<double>(l_.micro_batch * (m_.seq_len / l_.cp) * (m_.attn_kv_heads() / t_) *
                                   m_.attn_head_dim() * e_);
}

// All-gather context parallelism (parallel.cp_comm: all-gather; Transformer Engine's
// AttnFuncWithCPAndKVAllGather, Megatron-Core's --cp-comm-type all_gather, and Llama 3's
// training as Dubey et al. 2024 describe it, section 3.3.2): the rank's K and V
// all-gathered over the CP group and put back in sequence order (the load-balanced split
// holds chunks i and 2·cp − 1 − i), then the rank's s/cp queries attend over the keys
// before them: s²/(2·cp) score pairs, as one causal kernel of s/cp queries over s keys.
// The backward gathers K and V again (only the local ones are saved), and the K/V
// gradients, computed over the whole gathered length, are reordered and
// reduce-scattered back to their ranks. The all-gathers sit in the attention's path.
uint32_t StageBuilder::allgather_attention(int32_t L, Phase ph, uint32_t input, bool fwd) {
  const int64_t q = m_.seq_len / l_.cp;
  const double gathered = cp_kv_bytes() * static_cast<double>(l_.cp);
  if (cp_ == 0xff) cp_ = p_.stream("cp");
  const uint32_t ag = add_coll(fwd ? "cp-kv-allgather" : "cp-kv-allgather-backward", CollectiveKind::AllGather,
                               GroupKind::CP, cp_, ph, L, gathered, deps(input));
  const uint32_t order = add_memory("cp-kv-reorder", ph, L, gathered, gathered, 0, deps(ag));
  const uint32_t at = add_attention(fwd ? "attention" : "attention-backward", ph, L, q, m_.seq_len, deps(order));
  if (fwd) return at;
  const uint32_t back = add_memory("cp-dkv-reorder", ph, L, gathered, gathered, 0, deps(at));
  const uint32_t rs =
      add_coll("cp-dkv-reduce-scatter", CollectiveKind::ReduceScatter, GroupKind::CP, cp_, ph, L, gathered, deps(back));
  return join(at, rs);
}

double StageBuilder::rope_elements() const {
  return static_cast<double>(tokens_ * (m_.heads / t_ + std::max<int64_t>(1, m_.kv_heads / t_)) * m_.head_dim());
}

uint32_t StageBuilder::rope_forward(Phase ph, int32_t L, uint32_t after) {
  if (m_.learned_positions) return after;
  uint32_t x = after;
  if (m_.kv_heads < m_.heads) {
    const double q = static_cast<double>(tokens_ * (m_.heads / t_) * m_.head_dim() * e_);
    x = add_memory("query-reshape", ph, L, 2.3 * q, 2.3 * q, 0, deps(x));
  }
  const double n = rope_elements();
  return add_memory("rotary", ph, L, rope_reads(false) * n * e_, rope_writes(false) * n * e_, 3.0 * n, deps(x));
}

uint32_t StageBuilder::rope_backward(int32_t L, uint32_t after) {
  if (m_.learned_positions) return after;
  const double n = rope_elements();
  const uint32_t r = add_memory("rotary-backward", Phase::Backward, L, rope_reads(true) * n * e_,
                                rope_writes(true) * n * e_, 3.0 * n, deps(after));
  const double qkv = static_cast<double>(tokens_ * qkv_ * e_);
  return add_memory("qkv-grad-cat", Phase::Backward, L, qkv, qkv, 0, deps(r));
}

// As core_r0.12.0 runs it with Transformer Engine's layer spec and qk_layernorm
// (docs/model.md, "Multi-head latent attention"). Every projection is a column-parallel
// TE Linear: under SP each gathers its own input over TP. The two down projections'
// outputs are split over TP, so each is all-gathered along its width and concatenated
// (gather_from_tensor_model_parallel_region), and under SP the rank keeps its own tokens
// again (a contiguous copy); the up projections are LayerNorm-Linears (the norm on the
// rank's tokens, then the gather). The rotary part of every query head and the one
// shared rotary key are rotated, the query and key concatenated from their parts, the
// value made contiguous, and the attention kernel runs query/key heads of qk + rope and
// value heads of v.
// A column-parallel GEMM of `k` inputs and `n` outputs on the sequence, its input gathered
// over TP under SP.
uint32_t StageBuilder::sp_gemm(const char* ag, const char* gemm, Phase ph, int32_t L, uint32_t in, int64_t n,
                               int64_t k) {
  uint32_t x = in;
  if (t_ > 1 && l_.sequence_parallel)
    x = add_coll(ag, CollectiveKind::AllGather, GroupKind::TP, tp_, ph, L, static_cast<double>(tokens_ * k * e_),
                 deps(in));
  return add_gemm(gemm, ph, L, tokens_, n, k, deps(x));
}

// A down projection's output, `width` wide split over TP: all-gathered along the width and
// concatenated; under SP the rank's tokens of its first `kept` columns copied out.
uint32_t StageBuilder::latent_gather(const char* ag, const char* cat, const char* scatter, Phase ph, int32_t L,
                                     uint32_t in, int64_t width, int64_t kept) {
  if (t_ == 1) return in;
  const double full = static_cast<double>(tokens_ * width * e_);
  uint32_t x = add_coll(ag, CollectiveKind::AllGather, GroupKind::TP, tp_, ph, L, full, deps(in));
  x = add_memory(cat, ph, L, full, full, 0, deps(x));
  if (!l_.sequence_parallel) return x;
  const double own = static_cast<double>(seq_tokens_ * kept * e_);
  return add_memory(scatter, ph, L, own, own, 0, deps(x));
}

// A norm over the rank's tokens of a latent (the LayerNorm-Linear's own norm).
uint32_t StageBuilder::latent_norm(const char* name, Phase ph, int32_t L, uint32_t in, int64_t width) {
  const double x = static_cast<double>(seq_tokens_ * width * e_);
  return add_memory(name, ph, L, ph == Phase::Backward && !recomputing_ ? 3 * x : x,
                    ph == Phase::Backward && !recomputing_ ? 2 * x : x, 8.0 * x / static_cast<double>(e_), deps(in));
}

// The up projections with the rotary embedding and the query's, key's and value's
// assembly: what training.recompute_modules' mla_up_proj runs again before the
// attention's backward (Megatron-Core's CheckpointWithoutOutput: the outputs are dropped
// once the attention has run; the latents they came from are kept).
uint32_t StageBuilder::mla_up(int32_t L, Phase ph, uint32_t q, uint32_t kv) {
  const MlaConfig& a = m_.mla;
  const int64_t n = m_.heads / t_, qk = a.qk_head_dim + a.rope_head_dim;
  if (a.q_lora_rank > 0)
    q = sp_gemm("allgather-q-up-input", "q-up", ph, L, latent_norm("q-layernorm", ph, L, q, a.q_lora_rank), n * qk,
                a.q_lora_rank);
  else
    q = sp_gemm("allgather-q-input", "q-proj", ph, L, q, n * qk, m_.hidden);
  kv = sp_gemm("allgather-kv-up-input", "kv-up", ph, L, latent_norm("kv-layernorm", ph, L, kv, a.kv_lora_rank),
               n * (a.qk_head_dim + a.v_head_dim), a.kv_lora_rank);
  const double tok = static_cast<double>(tokens_), e = static_cast<double>(e_);
  const double rot = tok * static_cast<double>((n + 1) * a.rope_head_dim);
  uint32_t r =
      add_memory("rotary", ph, L, rope_reads(false) * rot * e, rope_writes(false) * rot * e, 3.0 * rot, deps(q, kv));
  const double query = tok * static_cast<double>(n * qk) * e;
  r = add_memory("mla-query-cat", ph, L, query, query, 0, deps(r));
  r = add_memory("mla-key-cat", ph, L, tok * static_cast<double>(n * a.qk_head_dim + a.rope_head_dim) * e, query, 0,
                 deps(r));
  const double value = tok * static_cast<double>(n * a.v_head_dim) * e;
  return add_memory("mla-value-copy", ph, L, value, value, 0, deps(r));
}

uint32_t StageBuilder::mla_forward(int32_t L, Phase ph, uint32_t ln) {
  const MlaConfig& a = m_.mla;
  const int64_t h = m_.hidden;
  uint32_t q = ln;
  if (a.q_lora_rank > 0) {
    q = sp_gemm("allgather-q-down-input", "q-down", ph, L, ln, a.q_lora_rank / t_, h);
    q = latent_gather("q-down-allgather", "q-down-cat", "q-down-scatter", ph, L, q, a.q_lora_rank, a.q_lora_rank);
  }
  uint32_t kv = sp_gemm("allgather-kv-down-input", "kv-down", ph, L, ln, (a.kv_lora_rank + a.rope_head_dim) / t_, h);
  kv = latent_gather("kv-down-allgather", "kv-down-cat", "kv-down-scatter", ph, L, kv, a.kv_lora_rank + a.rope_head_dim,
                     a.kv_lora_rank);
  return mla_up(L, ph, q, kv);
}

// A column-parallel layer's backward (`in` inputs, `out` outputs on this rank): its data
// gradient reduced over TP (reduce-scatter under SP), its weight gradient on the input
// gathered again under SP, after `after_w`; returns the data gradient, `w` the weight
// gradient's last op.
uint32_t StageBuilder::column_backward(const std::string& nm, int32_t L, uint32_t dy, int64_t in, int64_t out,
                                       uint32_t after_w, uint32_t& w) {
  const Phase b = Phase::Backward;
  const double bytes = static_cast<double>(tokens_ * in * e_);
  uint32_t d = add_gemm((nm + "-dgrad").c_str(), b, L, tokens_, in, out, deps(dy));
  const bool sp = l_.sequence_parallel;
  if (t_ > 1)
    d = add_coll(((sp ? "reduce-scatter-" : "allreduce-") + nm + "-grad").c_str(),
                 sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, GroupKind::TP, tp_, b, L, bytes,
                 deps(d));
  uint32_t x = dy;
  if (t_ > 1 && sp)
    x = add_coll(("allgather-" + nm + "-input-wgrad").c_str(), CollectiveKind::AllGather, GroupKind::TP, tp_, b, L,
                 bytes, deps(dy));
  w = main_grad_add(("grad-accumulate-" + nm).c_str(), L, in, out,
                    add_gemm((nm + "-wgrad").c_str(), b, L, in, out, tokens_, deps(x, after_w)));
  return d;
}

// latent_gather undone in the backward: under SP the rank's tokens of the `kept` columns
// gathered back, then the rank's columns of the whole `width` copied out.
uint32_t StageBuilder::width_gather_backward(const char* ag, const char* split, int32_t L, uint32_t dy, int64_t width,
                                             int64_t kept) {
  if (t_ == 1) return dy;
  const Phase b = Phase::Backward;
  uint32_t x = dy;
  if (l_.sequence_parallel)
    x = add_coll(ag, CollectiveKind::AllGather, GroupKind::TP, tp_, b, L, static_cast<double>(tokens_ * kept * e_),
                 deps(dy));
  const double mine = static_cast<double>(tokens_ * (width / t_) * e_);
  return add_memory(split, b, L, mine, mine, 0, deps(x));
}

// From the attention's input gradients to the layer input's: the assembly's and the
// rotary embedding's backward, then each projection's data gradient (reduced over TP)
// and weight gradient (its input gathered again under SP), the latents' norms, their
// gathers undone. `proj_w`: the output projection's weight gradient, which runs first.
uint32_t StageBuilder::mla_backward(int32_t L, uint32_t dqkv, uint32_t proj_w) {
  const MlaConfig& a = m_.mla;
  const int64_t h = m_.hidden, n = m_.heads / t_, qk = a.qk_head_dim + a.rope_head_dim;
  const Phase b = Phase::Backward;
  const double tok = static_cast<double>(tokens_), e = static_cast<double>(e_);
  const double rot = tok * static_cast<double>((n + 1) * a.rope_head_dim);
  uint32_t r = add_memory("rotary-backward", b, L, rope_reads(true) * rot * e, rope_writes(true) * rot * e, 3.0 * rot,
                          deps(dqkv));
  // The query's split undone (a copy), the shared key's gradient summed over the heads,
  // the key's and value's gradients joined into the up projection's output gradient.
  const double query = tok * static_cast<double>(n * qk) * e;
  const uint32_t dq = add_memory("mla-query-grad-cat", b, L, query, query, 0, deps(r));
  r = add_memory("mla-rope-key-grad-sum", b, L, tok * static_cast<double>(n * a.rope_head_dim) * e,
                 tok * static_cast<double>(a.rope_head_dim) * e, 0, deps(r));
  const double kv_out = tok * static_cast<double>(n * (a.qk_head_dim + a.v_head_dim)) * e;
  const uint32_t dkv = add_memory("mla-kv-grad-cat", b, L, kv_out, kv_out, 0, deps(r));
  uint32_t last_w = proj_w;
  auto linear_backward = [&](const char* name, uint32_t dy, int64_t in, int64_t out) {
    return column_backward(name, L, dy, in, out, last_w, last_w);
  };
  auto latent_scatter = [&](const char* ag, const char* split, uint32_t dy, int64_t width, int64_t kept) {
    return width_gather_backward(ag, split, L, dy, width, kept);
  };
  uint32_t kv = linear_backward("kv-up", dkv, a.kv_lora_rank, n * (a.qk_head_dim + a.v_head_dim));
  kv = latent_norm("kv-layernorm-backward", b, L, kv, a.kv_lora_rank);
  kv = latent_scatter("kv-down-grad-allgather", "kv-down-grad-split", kv, a.kv_lora_rank + a.rope_head_dim,
                      a.kv_lora_rank);
  kv = linear_backward("kv-down", join(kv, r), h, (a.kv_lora_rank + a.rope_head_dim) / t_);
  uint32_t q;
  if (a.q_lora_rank > 0) {
    q = linear_backward("q-up", dq, a.q_lora_rank, n * qk);
    q = latent_norm("q-layernorm-backward", b, L, q, a.q_lora_rank);
    q = latent_scatter("q-down-grad-allgather", "q-down-grad-split", q, a.q_lora_rank, a.q_lora_rank);
    q = linear_backward("q-down", q, h, a.q_lora_rank / t_);
  } else {
    q = linear_backward("q-proj", dq, h, n * qk);
  }
  // The two paths' input gradients summed (autograd's accumulation).
  const double own = static_cast<double>(seq_tokens_ * h * e_);
  return add_memory("mla-input-grad-add", b, L, 2 * own, own, own / e, deps(q, kv, last_w));
}

}  // namespace clustersim
