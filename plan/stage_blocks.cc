// StageBuilder (plan/stage_builder.h): the schedule's forward and backward blocks and the layers
// in them, the logits and loss, and the small per-layer kernels around them.
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

// The backward of Megatron's bias-dropout-add (bias_dropout_add_fused_train under
// jit_fuser) for one branch of the residual stream, from its output gradient `g`: with
// hidden dropout, the dropped branch's gradient is `g` times the mask and 1 / (1 - p), a
// kernel of its own (the gradient and the 1-byte mask read, the gradient written); with
// linear biases under Transformer Engine (skip_bias_add: the projection and FC2 return
// their bias for this op to add), the bias gradient is that gradient summed over the
// (sequence-parallel) tokens, a reduction. The residual's gradient passes through.
uint32_t StageBuilder::bias_dropout_add_backward(const char* drop_name, const char* bias_name, int32_t L, uint32_t g,
                                                 bool biased) {
  if (l_.plan_before_2026_12_05) return g;
  const double act = act_bytes(), elems = act / static_cast<double>(e_);
  if (m_.dropout > 0) g = add_memory(drop_name, Phase::Backward, L, act + elems, act, elems, deps(g));
  if (biased && m_.biases && !l_.local_impl)
    g = add_memory(bias_name, Phase::Backward, L, act, static_cast<double>(m_.hidden) * static_cast<double>(e_), elems,
                   deps(g));
  return g;
}

// The nodes loss.backward() walks before its first one runs (autograd's dependency count
// over the graph from the loss down to this chunk's input): one a forward computation
// planned since the chunk began (`first`; a GEMM split into chunks beside its
// communication is one op of its module, and communication records none), one a parameter
// tensor of its layers and of the embedding or output layer it holds (their AccumulateGrad
// nodes). A floor: the views and splits a framework records between its kernels add more
// (docs/model.md, "Each micro-batch's loss"). A chunk's graph ends at its input: a
// received activation is a leaf.
int64_t StageBuilder::autograd_nodes(int64_t chunk, uint32_t first) const {
  // Under full recompute each recomputed layer is one checkpoint node; its ops record none.
  std::vector<std::pair<int32_t, uint32_t>> ops;  // (layer, name) of each forward computation
  for (size_t i = first; i < p_.ops.size(); ++i) {
    const Op& op = p_.ops[i];
    const bool comm = is_comm(op.kind);
    // (the pipeline's device synchronize is the host's wait, no node of the graph)
    if (op.phase == Phase::Forward && !comm && op.name != device_sync_name_ &&
        !(op.layer >= 0 && full_recompute(op.layer)))
      ops.emplace_back(op.layer, op.name);
  }
  std::sort(ops.begin(), ops.end());
  int64_t nodes = static_cast<int64_t>(std::unique(ops.begin(), ops.end()) - ops.begin());
  for (int64_t i = 0; i < chunk_layers(chunk); ++i) nodes += full_recompute(layer_of(chunk, i)) ? 1 : 0;
  for (int64_t i = 0; i < chunk_layers(chunk); ++i) nodes += layer_param_tensors(layer_of(chunk, i));
  if (first_virtual(chunk)) nodes += m_.learned_positions ? 2 : 1;  // the token (and position) tables
  if (last_virtual(chunk)) nodes += (m_.biases ? 2 : 1) + (m_.tied_embeddings && l_.pp == 1 ? 0 : 1);
  return nodes;
}

// A layer's parameter tensors: two norms' gains (and biases), the QKV and projection
// weights (and biases), then FC1 and FC2 (and biases), or a router and each local
// expert's two.
int64_t StageBuilder::layer_param_tensors(int32_t L) const {
  int64_t n = m_.biases ? 8 : 4;
  if (m_.moe_layer(L))
    n += 1 + 2 * (m_.moe.experts / l_.ep);
  else
    n += m_.biases ? 4 : 2;
  return n;
}

// Megatron's DDP adds each parameter's gradient into its FP32 main gradient from a hook
// after every micro-batch's backward (`param.main_grad.add_(param.grad.data)`), except
// where the wgrad GEMM accumulated it there already (gradient-accumulation fusion, or the
// main_grad_add ops below): the LayerNorm gains and biases and the linear biases, one
// small kernel each, 16-bit into the main gradient's type (FP32: a dynamic-cast loop).
// `k` counts the kernels.
uint32_t StageBuilder::small_param_grad_adds(int32_t L, uint32_t g) {
  if (l_.plan_before_2026_12_05) return g;
  const int64_t h = m_.hidden;
  int64_t kernels = m_.biases ? 4 : 2, elements = kernels * h;  // two norms: gains (and biases)
  if (m_.biases) {  // QKV and projection biases; FC1's and FC2's in a dense layer
    kernels += 2, elements += qkv_ + h;
    if (!m_.moe_layer(L)) kernels += 2, elements += (m_.ffn_type == FfnType::Swiglu ? 2 : 1) * (m_.ffn_hidden / t_) + h;
  }
  const double n = static_cast<double>(elements), ge = dtype_bits(grad_dtype_) / 8.0;
  uint32_t op = add_memory("main-grad-add-small-params", Phase::Backward, L, n * (ge + static_cast<double>(e_)), n * ge,
                           n, deps(g));
  if (ge != static_cast<double>(e_)) op = accessed(op, MemAccess::DynamicCast, n);
  p_.ops[op].k = kernels;
  return op;
}

// One transformer layer's backward (Megatron path or eager), from its output gradient
// to its input's; its gradients join the buckets in the last micro-batch.
uint32_t StageBuilder::layer_backward(int32_t L, uint32_t g, bool last_micro_batch) {
  const double act = act_bytes();
  const int64_t h = m_.hidden;
  if (l_.eager) {
    if (full_recompute(L) || l_.recompute == "op") {
      recomputing_ = true;
      op_policy_ = l_.recompute == "op";
      g = layer_forward_eager(L, g, Phase::Backward);
      recomputing_ = op_policy_ = false;
    }
    g = layer_backward_eager(L, g, last_micro_batch);
    return g;
  }
  if (full_recompute(L)) {
    // Full recompute: the layer's forward runs again from its stored input.
    recomputing_ = true;
    g = layer_forward(L, g, Phase::Backward);
    recomputing_ = false;
  }
  // MLP: row-parallel down projection, then column-parallel up projection whose
  // input-gradient reduction overlaps its weight-gradient GEMM.
  uint32_t mlp_w = kNone, up_w = kNone;
  uint32_t red = mlp_backward(
      L, bias_dropout_add_backward("dropout-backward-mlp", "bias-grad-fc2", L, g, !m_.moe_layer(L)), mlp_w, up_w);
  if (m_.moe_layer(L)) {
    tp_gather("allgather-mlp-input-wgrad", Phase::Backward, L, mlp_input_ready_);
    up_w = mlp_w;
  }
  // Before 2026-12-05 the dropout's mask was read by the LayerNorm backwards instead.
  const double mask = l_.plan_before_2026_12_05 && m_.dropout > 0 ? act / static_cast<double>(e_) : 0.0;
  uint32_t ln2 = add_memory("layernorm-2-backward", Phase::Backward, L, 3 * act + mask, 2 * act,
                            12.0 * act / static_cast<double>(e_), deps(red, up_w));
  ln2 = bias_dropout_add_backward("dropout-backward-attn", "bias-grad-proj", L, ln2);
  const int64_t attn_out = m_.attn_out_width() / t_;
  ln2 = fp8_cast("fp8-cast-attn-grad", Phase::Backward, L, seq_tokens_, m_.hidden, ln2, 0, true);
  uint32_t proj_d = ag_then_gemm("allgather-attn-grad", "attn-proj-dgrad", Phase::Backward, L, ln2, attn_out, h);
  uint32_t proj_w =
      main_grad_add("grad-accumulate-attn-proj", L, h, attn_out,
                    add_gemm("attn-proj-wgrad", Phase::Backward, L, h, attn_out, tokens_, deps(gathered_)));
  // Selective recompute under a fused kernel: Megatron-Core checkpoints the core
  // attention (`checkpoint_core_attention`), so its forward kernel, ring exchange
  // included, runs again once the output gradient arrives, before its backward.
  if (l_.mla_up_recompute) {
    recomputing_ = true;
    proj_d = join(proj_d, mla_up(L, Phase::Backward, proj_d, proj_d));
    recomputing_ = false;
  }
  if (l_.recompute_core_attn && l_.flash_attention) {
    recomputing_ = true;
    proj_d = join(proj_d, ring_attention(L, Phase::Backward, proj_d, true));
    recomputing_ = false;
  }
  uint32_t red1 = kNone, qkv_w = kNone;
  if (m_.is_mla()) {
    red1 = mla_backward(L, ring_attention(L, Phase::Backward, proj_d), proj_w);
  } else {
    uint32_t at = rope_backward(L, ring_attention(L, Phase::Backward, proj_d));
    at = fp8_cast("fp8-cast-qkv-grad", Phase::Backward, L, tokens_, qkv_, at);
    // The input's all-gather (for the weight gradient) runs beside the data-gradient GEMM,
    // the data gradient's reduce-scatter beside the weight-gradient GEMM: Megatron's
    // LinearWithGradAccumulationAndAsyncCommunication and TE's bulk overlaps alike.
    // Without TP the order stays: TE's _Linear.backward runs the data gradient first.
    uint32_t x1 = tp_gather("allgather-qkv-input-wgrad", Phase::Backward, L, at, l_.tp_overlap_qkv_dgrad_sms);
    auto qkv_wgrad = [&] {
      qkv_w = main_grad_add("grad-accumulate-qkv", L, h, qkv_,
                            add_gemm("qkv-wgrad", Phase::Backward, L, h, qkv_, tokens_, deps(x1, proj_w)));
      return qkv_w;
    };
    red1 = gemm_then_reduce("qkv-dgrad", "tp-allreduce-qkv-grad", "reduce-scatter-qkv-grad", Phase::Backward, L,
                            deps(at), h, qkv_, qkv_wgrad);
    // Megatron-LM's own layer: each bias gradient is a sum of the output gradient over the
    // tokens, a reduction kernel of its own (TE's kernels reduce them as they go): QKV and
    // FC1 over their TP columns, the projection and FC2 biases over the (sequence-parallel)
    // hidden rows.
    if (l_.local_impl && m_.biases && !m_.moe_layer(L)) {
      const double cols = static_cast<double>(tokens_ * (qkv_ + m_.ffn_hidden / t_));
      const double rows = 2.0 * static_cast<double>(seq_tokens_ * h);
      red1 = add_memory("bias-grad-sums", Phase::Backward, L, (cols + rows) * static_cast<double>(e_),
                        static_cast<double>((qkv_ + m_.ffn_hidden / t_ + 2 * h) * 4), cols + rows, deps(red1));
    }
  }
  g = add_memory("layernorm-1-backward", Phase::Backward, L, 3 * act + mask, 2 * act,
                 12.0 * act / static_cast<double>(e_), deps(red1, qkv_w));
  g = small_param_grad_adds(L, g);
  if (last_micro_batch || (l_.zero_stage >= 3 && !l_.zero3_grad_once))
    add_grads(L, layer_dense_params(L), layer_expert_params(L), g);
  return g;
}

void StageBuilder::backward_block(int64_t chunk, bool last_micro_batch) {
  const double act = act_bytes();
  const int64_t h = m_.hidden;
  uint32_t g;
  if (last_virtual(chunk) && l_.eager) {
    // nll_loss and log_softmax backward on a zero-filled FP32 gradient, cast to BF16 for
    // the logits' GEMMs; the logits' weight gradient is cast and accumulated in FP32.
    const double lg = static_cast<double>(tokens_ * vocab_local_);
    const double a32 = eager_act32();
    if (l_.fused_cross_entropy) {
      // The gradient softmax − one-hot, from the logits and the saved log-sum-exp, written
      // in the logits' type: one read and one write.
      g = add_memory("cross-entropy-fused-backward", Phase::Backward, -1, lg * static_cast<double>(e_) + tokens_ * 12.0,
                     lg * static_cast<double>(e_), 3.0 * lg, deps(prev_));
    } else {
      g = add_memory("nll-loss-backward", Phase::Backward, -1, static_cast<double>(tokens_) * 8, lg * 4, 0,
                     deps(prev_));
      g = add_memory("log-softmax-backward", Phase::Backward, -1, lg * 12, lg * 4, 3.0 * lg, deps(g));
      g = add_memory("logits-grad-cast", Phase::Backward, -1, lg * 4, lg * static_cast<double>(e_), 0, deps(g));
    }
    g = zero3_vocab_gather(Phase::Backward, g);
    uint32_t dgrad =
        add_gemm("logits-dgrad", Phase::Backward, -1, tokens_, h, vocab_local_, deps(g), 1, 1.0, act_dtype_);
    uint32_t wgrad =
        add_gemm("logits-wgrad", Phase::Backward, -1, vocab_local_, h, tokens_, deps(g), 1, 1.0, act_dtype_);
    wgrad = eager_grad_accumulate("grad-accumulate-logits", -1, static_cast<double>(vocab_local_ * h), wgrad);
    g = accessed(add_memory("autocast-cast-logits-input-grad", Phase::Backward, -1, eager_act16(), a32, 0, deps(dgrad)),
                 MemAccess::DynamicCast, static_cast<double>(tokens_ * h));
    g = add_memory("final-layernorm-backward", Phase::Backward, -1, 2 * a32, a32,
                   10.0 * static_cast<double>(tokens_ * h), deps(g));
    g = add_memory("final-layernorm-weight-grad", Phase::Backward, -1, 2 * a32, 0, 0, deps(g, wgrad));
  } else if (last_virtual(chunk)) {
    const double lg = static_cast<double>(tokens_ * vocab_local_);
    // Fused: the saved softmax read once, the gradient written in the logits' type.
    const bool fused = l_.fused_cross_entropy;
    // Unfused, the softmax is scaled by the loss gradient broadcast across each row
    // (grad_input.mul_(grad_output.unsqueeze(-1))): one broadcast pass, lg elements.
    g = add_memory("cross-entropy-backward", Phase::Backward, -1, lg * (fused ? 4.0 : 8.0),
                   lg * ((fused ? 0.0 : 4.0) + static_cast<double>(e_)), 3.0 * lg, deps(prev_));
    if (!fused) g = accessed(g, MemAccess::BroadcastLoop, lg);
    g = zero3_vocab_gather(Phase::Backward, g);
    uint32_t dgrad =
        add_gemm("logits-dgrad", Phase::Backward, -1, tokens_, h, vocab_local_, deps(g), 1, 1.0, act_dtype_);
    // Deferred (training.defer_embedding_wgrad): the weight gradient waits for the end of
    // the step (drain_deferred_wgrads); the first wgrad_deferral_limit micro-batches' only.
    uint32_t wgrad = kNone;
    if (l_.defer_embedding_wgrad && (l_.wgrad_deferral_limit == 0 || deferred_wgrads_ < l_.wgrad_deferral_limit)) {
      ++deferred_wgrads_;
    } else {
      wgrad = main_grad_add(
          "grad-accumulate-logits", -1, vocab_local_, h,
          add_gemm("logits-wgrad", Phase::Backward, -1, vocab_local_, h, tokens_, deps(g), 1, 1.0, act_dtype_));
    }
    uint32_t d = tp_reduce("logits-grad-allreduce", "logits-grad-reduce-scatter", Phase::Backward, -1, dgrad);
    g = add_memory("final-layernorm-backward", Phase::Backward, -1, 2 * act, act, 10.0 * act / static_cast<double>(e_),
                   deps(d, wgrad));
    g = mtp_backward(g, last_micro_batch);
  } else {
    const uint32_t recv =
        add_p2p("pp-recv-grad", OpKind::Recv, GroupKind::PP, static_cast<int32_t>((stage_ + 1) % l_.pp), "pp-recv-bwd",
                Phase::Backward, layer_of(chunk, chunk_layers(chunk) - 1), pp_bytes(), p2p_posted(false), false, false,
                l_.overlap_p2p);
    const uint32_t in = pp_gather("pp-grad-allgather", Phase::Backward, layer_of(chunk, chunk_layers(chunk) - 1), recv);
    g = add_memory("pp-grad-in", Phase::Backward, layer_of(chunk, chunk_layers(chunk) - 1), 0, 0, 0,
                   deps(in, after_sends()));
    if (l_.p2p_device_sync)
      g = device_sync("pp-device-sync", Phase::Backward, layer_of(chunk, chunk_layers(chunk) - 1), g,
                      chunk_nodes_[static_cast<size_t>(chunk)]);
  }
  for (int64_t i = chunk_layers(chunk) - 1; i >= 0; --i) {
    const int32_t L = layer_of(chunk, i);
    const uint32_t zg = zero3_backward_gather(L, g);
    if (zg != g) g = zero3_copy_out(Phase::Backward, L, join(g, zg));
    zero3_prefetch_below(i > 0 ? layer_of(chunk, i - 1) : -1);
    g = layer_backward(L, g, last_micro_batch);
  }
  if (first_virtual(chunk) && l_.eager) {
    // embedding_dense_backward: the token ids sorted, the FP32 rows summed per id into a
    // zero-filled FP32 table; tied to the logits, that table is added to their gradient.
    const double table = static_cast<double>(vocab_local_ * m_.hidden) * 4;
    g = add_memory("embedding-backward", Phase::Backward, -1, 2 * eager_act32(), eager_act32() + table, 0, deps(g));
    if (m_.tied_embeddings || mb_ > 0)
      g = add_memory("grad-accumulate-embedding", Phase::Backward, -1, 2 * table, table, table / 4, deps(g));
    if (m_.learned_positions)
      g = add_memory("position-grad", Phase::Backward, -1, eager_act32(),
                     static_cast<double>(m_.seq_len * m_.hidden) * 4, 0, deps(g));
  } else if (first_virtual(chunk)) {
    // The embedding's weight gradient is dense (vocab x h per TP rank): zero-filled,
    // scatter-added per token, then accumulated into the FP32 main gradient.
    const double table = static_cast<double>(vocab_local_ * m_.hidden);
    const double ge = dtype_bits(grad_dtype_) / 8.0;
    g = add_memory("embedding-backward", Phase::Backward, -1, 2 * full_act_bytes() + table * (e_ + ge),
                   full_act_bytes() + table * (e_ + ge), 0, deps(g));
    // The table's 16-bit gradient added into an FP32 main gradient: mixed dtypes, PyTorch's
    // dynamic-cast loop (DDP's hook, main_grad.add_(grad)).
    if (ge != static_cast<double>(e_) && !l_.plan_before_2026_12_05) g = accessed(g, MemAccess::DynamicCast, table);
  } else {
    sent(add_p2p("pp-send-grad", OpKind::Send, GroupKind::PP, static_cast<int32_t>((stage_ + l_.pp - 1) % l_.pp),
                 "pp-send-bwd", Phase::Backward, layer_of(chunk, 0), pp_bytes(), deps(g), false, false,
                 l_.overlap_p2p));
  }
  if (last_micro_batch && (first_virtual(chunk) || last_virtual(chunk))) {
    // With deferred output-layer weight gradients, its gradient is final only once they
    // are drained at the end of the step.
    if (last_virtual(chunk) && deferred_wgrads_ > 0 && !l_.eager)
      deferred_embedding_params_ = embedding_params(first_virtual(chunk), last_virtual(chunk));
    else
      add_grads(-1, embedding_params(first_virtual(chunk), last_virtual(chunk)), 0, g);
  }
  if (last_micro_batch) flush_buckets(g);
  if (last_virtual(chunk) && l_.train_metrics > 0) train_metrics(g);
  // Parameters the optimizer updates on this stage.
  if (last_micro_batch) {
    for (int64_t i = 0; i < chunk_layers(chunk); ++i) {
      params_dense_ += layer_dense_params(layer_of(chunk, i));
      params_expert_ += layer_expert_params(layer_of(chunk, i));
    }
    params_dense_ += embedding_params(first_virtual(chunk), last_virtual(chunk));
  }
  prev_ = g;
  bwd_ends_.push_back(g);
}

int32_t StageBuilder::layer_of(int64_t chunk, int64_t i) const {
  return static_cast<int32_t>(stage_layers(l_, m_.layers, chunk * l_.pp + stage_).first + i);
}

int64_t StageBuilder::chunk_layers(int64_t chunk) const {
  return stage_layers(l_, m_.layers, chunk * l_.pp + stage_).second;
}

// Megatron-Core's block method checkpoints the first recompute_num_layers layers of each
// model chunk (TransformerBlock._checkpointed_forward); a multi-token prediction layer is
// checkpointed only when every layer is (MultiTokenPredictionLayer skips the block method).
bool StageBuilder::full_recompute(int32_t L) const {
  if (l_.recompute != "full") return false;
  if (l_.recompute_num_layers < 0) return true;
  for (int64_t c = 0; c < l_.virtual_stages; ++c) {
    const int32_t first = layer_of(c, 0);
    if (L >= first && L < first + chunk_layers(c)) return recomputed_layers(l_, L - first + 1) > L - first;
  }
  return false;
}

double StageBuilder::layer_dense_params(int32_t L) const {
  const double t = static_cast<double>(t_), h = static_cast<double>(m_.hidden);
  double p = static_cast<double>(m_.attention_params()) / t + (m_.biases ? 4 * h : 2 * h);
  if (m_.moe_layer(L))
    p += h * static_cast<double>(m_.moe.experts) + static_cast<double>(m_.moe.shared_experts * m_.expert_params()) / t;
  else
    p += static_cast<double>(m_.dense_mlp_params()) / t;
  return p;
}

double StageBuilder::layer_expert_params(int32_t L) const {
  if (!m_.moe_layer(L)) return 0;
  return static_cast<double>(m_.moe.experts / l_.ep * m_.expert_params()) / static_cast<double>(l_.expert_tp());
}

// One transformer layer forward; returns its last op.
uint32_t StageBuilder::layer_forward(int32_t L, uint32_t x, Phase ph) {
  if (l_.eager) return layer_forward_eager(L, x, ph);
  const double act = act_bytes();
  const int64_t h = m_.hidden;
  const uint32_t pg = ph == Phase::Forward && mb_ == 0 ? param_gather_for(L) : kNone;
  // Hidden dropout (fused with the bias and residual adds) writes a 1-byte mask and draws
  // a Philox number per element, as PyTorch's dropout does (MemAccess::RandomMask).
  const double mask = m_.dropout > 0 ? act / static_cast<double>(e_) : 0.0;
  auto drawn = [&](uint32_t op) { return mask > 0 ? accessed(op, MemAccess::RandomMask, mask) : op; };
  uint32_t ln = add_memory("layernorm-1", ph, L, act, act, 8.0 * act / static_cast<double>(e_),
                           pg == kNone ? deps(x) : deps(x, pg));
  ln = fp8_quantize_fused("fp8-quantize-qkv-input", ph, L, seq_tokens_, h, ln, true);
  uint32_t qkv = m_.is_mla() ? mla_forward(L, ph, ln)
                             : rope_forward(ph, L, ag_then_gemm("allgather-qkv-input", "qkv", ph, L, ln, qkv_, h));
  uint32_t at;
  // Recomputed (full recompute), the forward's attention runs again whole: under context
  // parallelism its ring exchange (or K/V all-gather) and every block, not the rank's own
  // diagonal block alone.
  at = ring_attention(L, recomputing_ ? ph : Phase::Forward, qkv, true);
  const int64_t attn_out = m_.attn_out_width() / t_;
  at = fp8_cast("fp8-cast-attn-out", ph, L, tokens_, attn_out, at);
  uint32_t red =
      gemm_then_reduce("attn-proj", "tp-allreduce-attn", "reduce-scatter-attn", ph, L, deps(at), h, attn_out);
  uint32_t ln2 = drawn(add_memory("residual-layernorm-2", ph, L, 2 * act, 2 * act + mask,
                                  10.0 * act / static_cast<double>(e_), deps(red)));
  if (!m_.moe_layer(L)) ln2 = fp8_quantize_fused("fp8-quantize-mlp-input", ph, L, seq_tokens_, h, ln2, true);
  uint32_t red2 = mlp_forward(L, ph, ln2);
  return drawn(add_memory("residual-add", ph, L, 2 * act, act + mask, act / static_cast<double>(e_), deps(red2)));
}

void StageBuilder::forward_block(int64_t chunk) {
  chunk_begin_ = static_cast<uint32_t>(p_.ops.size());
  uint32_t x = prev_;
  if (first_virtual(chunk)) {
    const bool waited = pending_send_ != kNone;
    prev_ = x = after_sends();
    if (waited && l_.p2p_device_sync) prev_ = x = device_sync("pp-device-sync", Phase::Forward, -1, x, -1);
    // Vocab-parallel embedding: each TP rank looks up its slice, then partial sums meet.
    prev_ = x = zero3_vocab_gather(Phase::Forward, x);
    const uint32_t pg = mb_ == 0 ? param_gather_for(-1) : kNone;
    if (l_.eager) {
      // FP32 table: an FP32 gather, and (GPT) the FP32 position rows added.
      x = add_memory("embedding", Phase::Forward, -1, eager_act32() + static_cast<double>(tokens_ * 8), eager_act32(),
                     0, pg == kNone ? deps(prev_) : deps(prev_, pg));
      if (m_.learned_positions)
        x = add_memory("position-add", Phase::Forward, -1, 2 * eager_act32(), eager_act32(),
                       static_cast<double>(tokens_ * m_.hidden), deps(x));
    } else
      x = add_memory("embedding", Phase::Forward, -1, full_act_bytes() + static_cast<double>(tokens_ * 8),
                     full_act_bytes(), 0, pg == kNone ? deps(prev_) : deps(prev_, pg));
    x = tp_reduce("embedding-allreduce", "embedding-reduce-scatter", Phase::Forward, -1, x);
  } else {
    const uint32_t recv = add_p2p("pp-recv-activation", OpKind::Recv, GroupKind::PP,
                                  static_cast<int32_t>((stage_ + l_.pp - 1) % l_.pp), "pp-recv-fwd", Phase::Forward,
                                  layer_of(chunk, 0), pp_bytes(), p2p_posted(true), false, false, l_.overlap_p2p);
    const uint32_t in = pp_gather("pp-activation-allgather", Phase::Forward, layer_of(chunk, 0), recv);
    x = add_memory("pp-activation-in", Phase::Forward, layer_of(chunk, 0), 0, 0, 0, deps(in, after_sends()));
    if (l_.p2p_device_sync) x = device_sync("pp-device-sync", Phase::Forward, layer_of(chunk, 0), x, -1);
  }
  for (int64_t i = 0; i < chunk_layers(chunk); ++i) {
    const int32_t L = layer_of(chunk, i);
    const uint32_t g = zero3_gather(Phase::Forward, L, x);
    x = layer_forward(L, g == x ? x : zero3_copy_out(Phase::Forward, L, join(x, g)), Phase::Forward);
  }
  if (l_.p2p_device_sync && chunk_nodes_[static_cast<size_t>(chunk)] < 0)
    chunk_nodes_[static_cast<size_t>(chunk)] = autograd_nodes(chunk, chunk_begin_);
  if (last_virtual(chunk) && l_.eager) {
    // FP32 norm, its cast, the logits' weight cast, then F.cross_entropy(logits.float()):
    // the FP32 copy, log_softmax and nll_loss, each a kernel.
    uint32_t ln = eager_norm("final-layernorm", "autocast-cast-logits-input", Phase::Forward, -1, x);
    if (!vocab_gathered_with_embedding(chunk)) ln = zero3_vocab_gather(Phase::Forward, ln);
    const double table = static_cast<double>(vocab_local_ * m_.hidden);
    ln = eager_weight_cast("autocast-cast-logits-weight", Phase::Forward, -1, table, ln);
    uint32_t logits =
        add_gemm("logits", Phase::Forward, -1, tokens_, vocab_local_, m_.hidden, deps(ln), 1, 1.0, act_dtype_);
    const double lg = static_cast<double>(tokens_ * vocab_local_);
    if (l_.fused_cross_entropy) {
      // One kernel on the 16-bit logits (FlashAttention's xentropy, after apex's): per row
      // a pass for the max and one for the sum of exponentials; the loss and the
      // log-sum-exp out, 8 bytes a row.
      x = add_memory("cross-entropy-fused", Phase::Forward, -1, lg * 2 * static_cast<double>(e_) + tokens_ * 8.0,
                     tokens_ * 8.0, 3.0 * lg, deps(logits));
    } else {
      x = accessed(
          add_memory("logits-float", Phase::Forward, -1, lg * static_cast<double>(e_), lg * 4, 0, deps(logits)),
          MemAccess::DynamicCast, lg);
      // A vocabulary row is longer than a thread block holds: log_softmax reads it once
      // per pass (max, sum of exponentials, output), its backward twice and the output
      // once (PyTorch's cunn_SoftMaxForward / cunn_SoftMaxBackward).
      x = add_memory("log-softmax", Phase::Forward, -1, lg * 12, lg * 4, 5.0 * lg, deps(x));
      x = add_memory("nll-loss", Phase::Forward, -1, static_cast<double>(tokens_) * 12, 4, 0, deps(x));
    }
  } else if (last_virtual(chunk)) {
    x = logits_and_loss(mtp_forward(x), -1, "");
    x = loss_sync(x, chunk);
  } else {
    sent(add_p2p("pp-send-activation", OpKind::Send, GroupKind::PP, static_cast<int32_t>((stage_ + 1) % l_.pp),
                 "pp-send-fwd", Phase::Forward, layer_of(chunk, chunk_layers(chunk) - 1), pp_bytes(), deps(x), false,
                 false, l_.overlap_p2p));
  }
  prev_ = x;
  fwd_ends_.push_back(x);
}

// The final norm, the vocab-parallel output layer and the loss over its logits: the
// model's (`L` -1) or a multi-token prediction module's (its layer, names `pre`-fixed).
uint32_t StageBuilder::logits_and_loss(uint32_t x, int32_t L, const std::string& pre) {
  {
    const double act = act_bytes();
    uint32_t ln = add_memory((pre + "final-layernorm").c_str(), Phase::Forward, L, act, act,
                             8.0 * act / static_cast<double>(e_), deps(x));
    uint32_t in = tp_gather((pre + "allgather-logits-input").c_str(), Phase::Forward, L, ln);
    if (L < 0 && !vocab_gathered_with_embedding(l_.virtual_stages - 1)) in = zero3_vocab_gather(Phase::Forward, in);
    const uint32_t pg = L < 0 ? param_gather_for(-1) : kNone;
    uint32_t logits = add_gemm((pre + "logits").c_str(), Phase::Forward, L, tokens_, vocab_local_, m_.hidden,
                               pg == kNone ? deps(in) : deps(in, pg), 1, 1.0, act_dtype_);
    const double lg = static_cast<double>(tokens_ * vocab_local_);
    // Megatron's vocab-parallel cross-entropy on logits.float(): the cast, max, shift,
    // exp, sum and softmax passes over the FP32 logits. Fused (--cross-entropy-loss-fusion,
    // NeMo's and Megatron-Bridge's default), its three jit-fused steps: the cast with the
    // max (reads e, writes 4), the shift, exponential and sum (reads and writes 4), the
    // division into the softmax it keeps (reads and writes 4).
    // Unfused, the shift by the row's maximum and the division by its sum read a per-row
    // scalar broadcast across the row: PyTorch's loop for those two passes is not
    // vectorized and is bound by the SMs (MemAccess::BroadcastLoop, 2 lg elements).
    const bool fused = l_.fused_cross_entropy;
    x = add_memory((pre + "cross-entropy").c_str(), Phase::Forward, L,
                   lg * (static_cast<double>(e_) + (fused ? 8.0 : 20.0)), lg * (fused ? 12.0 : 16.0), 5.0 * lg,
                   deps(logits));
    if (!fused) x = accessed(x, MemAccess::BroadcastLoop, 2.0 * lg);
    if (t_ > 1)  // vocab-parallel cross-entropy: max, sum of exponentials and target logit
      x = add_coll((pre + "cross-entropy-allreduce").c_str(), CollectiveKind::AllReduce, GroupKind::TP, tp_,
                   Phase::Forward, L, 3.0 * static_cast<double>(tokens_) * 4, deps(x));
  }
  return x;
}

}  // namespace clustersim
