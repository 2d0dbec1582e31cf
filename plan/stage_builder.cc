// StageBuilder (plan/stage_builder.h): the step around the blocks (the gradient buffer, the sync and
// the optimizer after them, the loss and metrics syncs), the op primitives, the host's waits, weight
// gradients into the main gradient buffer and Transformer Engine's FP8 casts.
#include "plan/stage_builder.h"

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

namespace clustersim {

StageBuilder::StageBuilder(Plan& plan, Program& prog, const ModelConfig& m, const TrainingLayout& l, int64_t stage,
                           bool adam)
    : plan_(plan), p_(prog), m_(m), l_(l), stage_(stage), adam_(adam) {
  compute_ = p_.stream("compute");
  tp_ = p_.stream("tp");
  dp_ = p_.stream("dp");
  // Transformer Engine's FP8 recipe: the linear layers' GEMMs take FP8 operands, and
  // everything between them (activations, attention, norms) stays in BF16.
  act_dtype_ = l.fp8 ? DType::BF16 : m.dtype;
  lin_dtype_ = m.dtype;
  attn_dtype_ = l.fp8 && !l.fp8_attention ? DType::BF16 : m.dtype;
  e_ = dtype_bits(act_dtype_) / 8;
  t_ = l.tp;
  tokens_ = l.micro_batch * m.seq_len / l.cp;
  seq_tokens_ = l.sequence_parallel ? tokens_ / t_ : tokens_;
  vocab_local_ = padded_vocab(m, t_) / t_;
  mlp_in_ = m.mlp_matrices() == 3 ? 2 * m.ffn_hidden / t_ : m.ffn_hidden / t_;
  qkv_ = (m.heads + 2 * m.kv_heads) * m.head_dim() / t_;

  grad_dtype_ = l.grad_dtype;  // fp32 main grads for bf16 unless asked (Megatron)
  chunk_nodes_.assign(static_cast<size_t>(l.virtual_stages), -1);
}

void StageBuilder::build() {
  const auto order =
      pipeline_schedule(l_.schedule, l_.pp, l_.virtual_stages, l_.micro_batches, stage_, l_.microbatch_group);
  last_mb_.assign(static_cast<size_t>(l_.virtual_stages), -1);
  // The warm-up: the leading forward blocks, less the steady state's first where a backward
  // follows the forwards' run before the forwards are all done.
  size_t forwards = 0;
  for (const PipelineBlock& b : order) forwards += b.forward;
  while (warm_forwards_ < order.size() && order[warm_forwards_].forward) ++warm_forwards_;
  if (warm_forwards_ < forwards) --warm_forwards_;
  for (const PipelineBlock& b : order)
    last_mb_[static_cast<size_t>(b.chunk)] = std::max(last_mb_[static_cast<size_t>(b.chunk)], b.micro_batch);
  const double gb = dtype_bits(grad_dtype_) / 8.0;
  const double local = local_params(false) + local_params(true);
  // Per step, before the first micro-batch: the gradient buffer is zeroed (Megatron's
  // zero_grad_buffer), and under FP8 each linear weight is cast once (with its
  // transpose) and kept for every micro-batch.
  // (PyTorch's zero_grad sets the gradients to None: nothing to zero.)
  if (!l_.eager) prev_ = add_memory("zero-grad-buffer", Phase::Other, -1, 0, local * gb, 0, {});
  // (Eager PyTorch's te.Linear casts its weight at every forward instead: eager_linear_weight.)
  if (l_.fp8 && !l_.eager && !l_.fp8_params) {
    const double linear = local - embedding_params_local();
    // Current scaling reads each weight once more for its amax before the cast.
    const double amax_read = l_.fp8_current_scaling ? linear * 2 : 0;
    prev_ =
        add_memory("fp8-weight-cast", Phase::Forward, -1, linear * 2 + amax_read, linear * 2, linear * 2, deps(prev_));
  }
  // FP8 weights (parallel.fp8_param_gather) arrive from the gather without the transpose
  // the backward's data-gradient GEMM reads: TE builds it once per step
  // (post_all_gather_processing), 1 byte read and 1 written a weight.
  if (l_.fp8_params) {
    const double linear = local - embedding_params_local();
    prev_ = add_memory("fp8-weight-transpose", Phase::Forward, -1, linear, linear, 0, deps(prev_));
  }
  plan_param_gathers();
  defer_grads_ = !l_.overlap_grad_reduce;
  for (const PipelineBlock& b : order) {
    mb_ = static_cast<int32_t>(b.micro_batch);
    if (b.forward)
      forward_block(b.chunk);
    else
      backward_block(b.chunk, b.micro_batch == last_mb_[static_cast<size_t>(b.chunk)]);
  }
  mb_ = -1;
  prev_ = after_sends();
  drain_deferred_wgrads();
  flush_buckets(prev_);
  // Without --overlap-grad-reduce the buckets are reduced after the whole backward.
  defer_grads_ = false;
  for (const Bucket& b : deferred_) {
    bucket_dense_ = b.dense;
    bucket_expert_ = b.expert;
    bucket_layer_ = b.layer;
    bucket_gather_ = b.gather_bytes;
    flush_buckets(prev_);
  }
  std::vector<uint32_t> after = grad_ops_;
  if (prev_ != kNone) after.push_back(prev_);
  after = finalize_model_grads(after, gb);
  // Optimizer step on the local (ZeRO-sharded) parameters: reads weights, fp32 grads
  // and state; writes weights and state. The distributed optimizer shards the dense
  // parameters over DP x CP and the rank's experts over the ranks holding the same experts
  // (expert_dp: DP x CP x TP / expert TP, over EP), as the memory model does; without it
  // each rank steps its own parameters, its experts only.
  const double shard = l_.zero_stage >= 1 ? static_cast<double>(l_.dp * l_.cp) : 1.0;
  const double expert_shard = l_.zero_stage >= 1 ? std::max<double>(1.0, static_cast<double>(expert_dp())) : 1.0;
  const double params = params_dense_ / shard + params_expert_ / expert_shard;
  // The state the step reads and writes a parameter: the moments and the master weights
  // (training.optimizer_state). Apex's DistributedFusedAdam beside BF16 parameters (state
  // other than fp32) updates the 16-bit parameter in its own kernel, with the remainders that
  // complete it to FP32 where it keeps them, and reads the gradients in their own type.
  const bool in_place = l_.master_bytes < 4;
  const double state = (adam_ ? 2.0 : 1.0) * l_.moment_bytes + l_.master_bytes + (in_place ? e_ : 0.0);
  const double grad_read = in_place ? gb : 4.0;
  // Gradient clipping: the norm of the local gradient shard (one read), summed over
  // the data- and model-parallel groups (a 4-byte all-reduce each: latency only).
  uint32_t norm = add_memory("grad-norm", Phase::Optimizer, -1, params * gb, 0, params * 2, after);
  if (l_.eager) {
    // clip_grad_norm_ (foreach norm, then every gradient scaled: torch multiplies by
    // min(1, max_norm / norm) unconditionally), then fused AdamW on FP32 parameters,
    // gradients and two moments: read 16, write 12 bytes per parameter (SGD: 12, 8).
    // FSDP's norm is a sum over the shards: a 4-byte all-reduce.
    accessed(norm, MemAccess::MultiTensor);
    if (l_.zero_stage >= 1 && l_.dp > 1)
      norm = add_coll("grad-norm-allreduce", CollectiveKind::AllReduce, GroupKind::DP, dp_, Phase::Optimizer, -1, 4,
                      deps(norm));
    norm = accessed(add_memory("grad-clip-scale", Phase::Optimizer, -1, params * 4, params * 4, params, deps(norm)),
                    MemAccess::MultiTensor);
    const uint32_t opt = accessed(add_memory("optimizer-step", Phase::Optimizer, -1, params * (adam_ ? 16 : 12),
                                             params * (adam_ ? 12 : 8), params * 12, deps(norm)),
                                  MemAccess::MultiTensor);
    train_metrics_sync(opt);
    return;
  }
  if (l_.dp * l_.cp > 1)
    norm = add_coll("grad-norm-allreduce", CollectiveKind::AllReduce, GroupKind::DP, dp_, Phase::Optimizer, -1, 4,
                    deps(norm));
  if (t_ > 1)
    norm = add_coll("grad-norm-allreduce-tp", CollectiveKind::AllReduce, GroupKind::TP, tp_, Phase::Optimizer, -1, 4,
                    deps(norm));
  // A 16-bit gradient buffer is copied into the FP32 main gradients the optimizer reads
  // (Megatron's _copy_model_grads_to_main_grads).
  if (gb < 4 && !in_place)
    norm = add_memory("main-grad-copy", Phase::Optimizer, -1, params * gb, params * 4, 0, deps(norm));
  // FP16 runs under a loss scale: the FP32 main gradients are unscaled and checked for
  // inf/NaN in one pass (Megatron's _unscale_main_grads_and_check_for_nan:
  // torch._amp_foreach_non_finite_check_and_unscale_, 4 bytes read and 4 written a parameter).
  if (m_.dtype == DType::FP16)
    norm = accessed(add_memory("grad-unscale", Phase::Optimizer, -1, params * 4, params * 4, params, deps(norm)),
                    MemAccess::MultiTensor);
  // FP8 weights: the step writes the FP32 master shard, and the linear weights' shard is
  // cast to FP8 into the parameter buffer (Megatron's quantize_param_shard: 4 bytes read,
  // 1 written; current scaling reads the shard once more for its amaxes and all-reduces
  // them, one per weight tensor, over DP), in place of the 16-bit copy.
  const double fp8_shard =
      l_.fp8_params ? (local_params(false) - embedding_params_local()) / shard + local_params(true) / expert_shard : 0;
  // Apex's or Transformer Engine's FusedAdam over the FP32 main parameters, gradients and
  // moments (multi-tensor-apply kernels: MemAccess::MultiTensor), then the updated main
  // parameters copied into the 16-bit model parameters, a pass of its own
  // (_copy_main_params_to_model_params: 4 bytes read, 2 written a parameter).
  uint32_t opt;
  if (l_.plan_before_2026_12_05) {
    opt = add_memory("optimizer-step", Phase::Optimizer, -1, params * (e_ + 4 + state),
                     params * (e_ + state) - fp8_shard * static_cast<double>(e_), params * 12, deps(norm));
  } else {
    opt = accessed(add_memory("optimizer-step", Phase::Optimizer, -1, params * (grad_read + state), params * state,
                              params * 12, deps(norm)),
                   MemAccess::MultiTensor);
  }
  if (params > fp8_shard && e_ < 4 && !l_.plan_before_2026_12_05 && !in_place)
    opt = add_memory("main-param-copy", Phase::Optimizer, -1, (params - fp8_shard) * 4,
                     (params - fp8_shard) * static_cast<double>(e_), 0, deps(opt));
  if (l_.fp8_params) {
    if (l_.fp8_current_scaling) {
      opt = add_memory("fp8-param-shard-amax", Phase::Optimizer, -1, fp8_shard * 4, 0, fp8_shard, deps(opt));
      // One amax a weight tensor: about seven a layer (QKV, projection, FC1, FC2 and
      // their biases or gates), counted as eight.
      int64_t layers = 0;
      for (int64_t c = 0; c < l_.virtual_stages; ++c) layers += chunk_layers(c);
      if (l_.dp * l_.cp > 1)
        opt = add_coll("fp8-param-amax-allreduce", CollectiveKind::AllReduce, GroupKind::DP, dp_, Phase::Optimizer, -1,
                       4.0 * 8.0 * static_cast<double>(layers), deps(opt));
    }
    opt = add_memory("fp8-param-shard-cast", Phase::Optimizer, -1, fp8_shard * 4, fp8_shard, fp8_shard, deps(opt));
  }
  // ZeRO 1/2: the updated shards are all-gathered back into every replica (with
  // --overlap-param-gather, ahead of the next forward instead: plan_param_gathers).
  if (l_.zero_stage >= 1 && l_.zero_stage <= 2 && l_.dp * l_.cp > 1 && !l_.overlap_param_gather) {
    for (double bytes : gather_buckets_)
      add_coll("zero-param-allgather", CollectiveKind::AllGather, GroupKind::DP, dp_, Phase::Optimizer, -1, bytes,
               deps(opt));
  }
}

// Megatron's finalize_model_grads, once every gradient bucket's DP reduction is done
// (finish_grad_sync) and before the optimizer (core_r0.8.0 to core_r0.15.0, and
// Megatron-LM's train_step of 2021-22):
// - with sequence parallelism, each TP rank's norm gradients hold its own tokens' sum:
//   _allreduce_layernorm_grads flattens them into one buffer (a cat), all-reduces it over
//   TP and copies each tensor back (a copy kernel each);
// - with the embedding held by the first and the last stage (the output layer tied to it,
//   or the multi-token prediction modules' copy), _allreduce_word_embedding_grads
//   all-reduces the two copies' main gradients between those two stages, a TP rank's
//   vocabulary share in the gradient's type. Between two ranks the all-reduce is an
//   exchange: each sends its copy and adds the one it receives.
std::vector<uint32_t> StageBuilder::finalize_model_grads(std::vector<uint32_t> after, double gb) {
  if (l_.eager) return after;
  const double h = static_cast<double>(m_.hidden);
  const bool first = first_virtual(0), last = last_virtual(l_.virtual_stages - 1);
  const std::vector<int32_t> layers = held_layers();
  if (t_ > 1 && l_.sequence_parallel) {
    // Two norms a layer (weight, and bias where the model has them), the final norm on
    // the last stage, and each multi-token prediction module's three norms beside its layer's.
    const int64_t per_norm = m_.biases ? 2 : 1;
    const int64_t tensors = per_norm * (2 * static_cast<int64_t>(layers.size()) + (last ? 1 + 3 * m_.mtp_layers : 0));
    const double bytes = static_cast<double>(tensors) * h * gb;
    uint32_t x = add_memory("norm-grads-flatten", Phase::Optimizer, -1, bytes, bytes, 0, after);
    x = add_coll("norm-grads-allreduce-tp", CollectiveKind::AllReduce, GroupKind::TP, tp_, Phase::Optimizer, -1, bytes,
                 deps(x));
    x = add_memory("norm-grads-copy-back", Phase::Optimizer, -1, bytes, bytes, 0, deps(x));
    p_.ops[x].k = tensors;
    after = {x};
  }
  if (l_.pp > 1 && (first || last) && (m_.tied_embeddings || m_.mtp_layers > 0)) {
    const double bytes = static_cast<double>(vocab_local_) * h * gb;
    const auto peer = static_cast<int32_t>(first ? l_.pp - 1 : 0);
    const uint32_t sent = add_p2p("embedding-grad-send", OpKind::Send, GroupKind::PP, peer, "embedding-send",
                                  Phase::Optimizer, -1, bytes, after);
    const uint32_t got = add_p2p("embedding-grad-recv", OpKind::Recv, GroupKind::PP, peer, "embedding-recv",
                                 Phase::Optimizer, -1, bytes, after);
    after = {add_memory("embedding-grad-add", Phase::Optimizer, -1, 2 * bytes, bytes, bytes / gb, deps(sent, got))};
  }
  // Aux-loss-free balancing (model.moe.expert_bias): _update_router_expert_bias stacks the
  // stage's MoE layers' token counts and biases ([layers, experts] FP32, a kernel each),
  // all-reduces the counts over TP x DP x CP (here over DP x CP, then TP: the same sum),
  // takes each layer's mean, the offsets, their sign, scaled by the update rate, added to
  // the biases (six kernels), and zeroes each layer's counts and copies its new bias back
  // (two kernels a layer).
  if (m_.moe.expert_bias) {
    const int64_t moe_layers = std::count_if(layers.begin(), layers.end(), [&](int32_t L) { return m_.moe_layer(L); });
    if (moe_layers > 0) {
      const double table = static_cast<double>(moe_layers * m_.moe.experts) * 4;
      uint32_t x = add_memory("expert-bias-stack", Phase::Optimizer, -1, 2 * table, 2 * table, 0, after);
      p_.ops[x].k = 2;
      if (l_.dp * l_.cp > 1)
        x = add_coll("expert-bias-counts-allreduce", CollectiveKind::AllReduce, GroupKind::DP, dp_, Phase::Optimizer,
                     -1, table, deps(x));
      if (t_ > 1)
        x = add_coll("expert-bias-counts-allreduce-tp", CollectiveKind::AllReduce, GroupKind::TP, tp_, Phase::Optimizer,
                     -1, table, deps(x));
      x = add_memory("expert-bias-update", Phase::Optimizer, -1, 7 * table, 8 * table, 6 * table / 4, deps(x));
      p_.ops[x].k = 6 + 2 * moe_layers;
      after = {x};
    }
  }
  return after;
}

std::vector<uint32_t> StageBuilder::deps(uint32_t a, uint32_t b, uint32_t c) {
  std::vector<uint32_t> d;
  for (uint32_t x : {a, b, c})
    if (x != kNone) d.push_back(x);
  return d;
}

Op StageBuilder::base(const char* name, OpKind kind, Phase phase, int32_t layer, uint8_t stream) {
  Op op = plan_.make_op(name, kind, phase, layer, mb_, stream, act_dtype_);
  op.recompute = recomputing_;
  return op;
}

// A GEMM; `model_share` is the part of its FLOPs that counts as model FLOPs (recompute
// 0, capacity padding excluded).
// `dt`: the operands' type (a linear layer's: FP8 under Transformer Engine's recipe);
// the output is written in the activations' type.
uint32_t StageBuilder::add_gemm(const char* name, Phase ph, int32_t layer, int64_t m, int64_t n, int64_t k,
                                const std::vector<uint32_t>& after, int64_t batch, double model_share, DType dt) {
  Op op = base(name, OpKind::Gemm, ph, layer, compute_);
  op.m = m;
  op.n = n;
  op.k = k;
  op.batch = batch;
  op.dtype = dt == DType::FP32 ? lin_dtype_ : dt;
  op.flops = gemm_flops(op);
  op.bytes_read = (m * k + k * n) * (dtype_bits(op.dtype) / 8) * batch;
  op.bytes_written = m * n * e_ * batch;
  model_flops_ += op.flops * (recomputing_ ? 0.0 : model_share);
  // model_share < 1: an unfused attention product over the whole square under a causal mask.
  if (model_share < 1.0 && !recomputing_) causal_attention_flops_ += op.flops * model_share;
  return p_.add(op, after);
}

uint32_t StageBuilder::add_memory(const char* name, Phase ph, int32_t layer, double read, double written, double flops,
                                  const std::vector<uint32_t>& after, uint8_t stream) {  // 0xff: compute
  Op op = base(name, OpKind::Memory, ph, layer, stream == 0xff ? compute_ : stream);
  op.bytes_read = static_cast<int64_t>(read);
  op.bytes_written = static_cast<int64_t>(written);
  op.flops = flops;
  return p_.add(op, after);
}

uint32_t StageBuilder::add_attention(const char* name, Phase ph, int32_t layer, int64_t q_len, int64_t kv_len,
                                     const std::vector<uint32_t>& after) {
  Op op = base(name, OpKind::Attention, ph, layer, compute_);
  op.batch = l_.micro_batch;
  op.heads = m_.heads / t_;
  op.kv_heads = m_.attn_kv_heads() / t_;
  op.q_len = q_len;
  op.kv_len = kv_len;
  op.head_dim = m_.attn_head_dim();
  op.causal = true;
  op.dropout = m_.dropout > 0 && !l_.eager;  // eager: the reference stack runs no dropout
  op.dtype = attn_dtype_;
  const double fwd = attention_flops(op);
  const int64_t q = l_.micro_batch * q_len * op.heads * op.head_dim * e_;
  const int64_t kv = l_.micro_batch * kv_len * op.kv_heads * op.head_dim * e_;
  // A recomputed forward (Op::recompute) runs the forward kernel inside the backward.
  if (ph == Phase::Forward || recomputing_) {
    op.flops = fwd;
    op.bytes_read = q + 2 * kv;
    op.bytes_written = q;
    model_flops_ += recomputing_ ? 0.0 : fwd;
    if (op.causal && !recomputing_) causal_attention_flops_ += fwd;
  } else {
    // FlashAttention backward: five GEMM-sized products against the forward's two
    // (2.5x), of which the recomputed QK^T (0.5x) is not model FLOPs.
    op.flops = 2.5 * fwd;
    op.bytes_read = 3 * q + 2 * kv;
    op.bytes_written = q + 2 * kv;
    model_flops_ += 2.0 * fwd;
    if (op.causal) causal_attention_flops_ += 2.0 * fwd;
  }
  return p_.add(op, after);
}

uint32_t StageBuilder::add_coll(const char* name, CollectiveKind kind, GroupKind group, uint8_t stream, Phase ph,
                                int32_t layer, double bytes, const std::vector<uint32_t>& after) {
  Op op = base(name, OpKind::Collective, ph, layer, stream);
  op.collective = kind;
  op.group = group;
  op.bytes = static_cast<int64_t>(bytes);
  return p_.add(op, after);
}

uint32_t StageBuilder::add_p2p(const char* name, OpKind kind, GroupKind group, int32_t peer, const char* stream,
                               Phase ph, int32_t layer, double bytes, const std::vector<uint32_t>& after, bool relative,
                               bool holds_sms, bool overlaps_compute) {
  Op op = base(name, kind, ph, layer, p_.stream(stream));
  op.group = group;
  op.peer = peer;
  op.relative_peer = relative;
  op.holds_sms = holds_sms;
  op.overlaps_compute = overlaps_compute;
  op.bytes = static_cast<int64_t>(bytes);
  return p_.add(op, after);
}

// With --gradient-accumulation-fusion the wgrad GEMM adds into the main gradient in its
// epilogue (nothing more to run). Without it, the GEMM writes a 16-bit gradient and a
// hook adds it into the buffer: main_grad.add_(grad) at every micro-batch (Megatron-LM's
// DistributedDataParallel of 2021, megatron/model/distributed.py).
uint32_t StageBuilder::main_grad_add(const char* name, int32_t L, int64_t in, int64_t out, uint32_t wgrad) {
  if (l_.grad_accumulation_fusion || l_.eager) return wgrad;
  const double params = static_cast<double>(in * out), g = dtype_bits(grad_dtype_) / 8.0;
  const uint32_t op = add_memory(name, Phase::Backward, L, params * (e_ + g), params * g, params, deps(wgrad));
  return dtype_bits(grad_dtype_) / 8 == e_ ? op : accessed(op, MemAccess::DynamicCast, params);
}

// Transformer Engine's Fp8Padding and Fp8Unpadding around the grouped MLP under FP8
// (Megatron-Core's TEGroupedMLP, core_r0.10.0 to core_r0.15.0): FP8 GEMMs take each expert's
// rows in multiples of 16, so the dispatched tokens are copied into a buffer with each
// expert's rows padded (tex.fused_multi_row_padding) before FC1, and FC2's output copied
// out of it (fused_multi_row_unpadding); the backward copies the gradients the other way.
// Fp8Padding returns its input untouched only when every count is already a multiple of
// 16, which routing does not leave, so the copies run every layer and micro-batch unless
// the router pads its map instead (model.moe.router_padding_for_fp8).
uint32_t StageBuilder::fp8_expert_padding(const char* name, Phase ph, int32_t L, int64_t rows, uint32_t after) {
  if (!l_.fp8 || m_.moe.router_padding_for_fp8) return after;
  const double bytes = static_cast<double>(rows) * static_cast<double>(m_.hidden) * static_cast<double>(e_);
  return add_memory(name, ph, L, bytes, bytes, 0, deps(after));
}

// A cast-transpose reads the BF16 tensor and writes it twice in FP8 (as is and
// transposed). TE fuses the casts of the LayerNorm outputs (QKV, MLP up) and of the
// GELU output into those kernels; the attention output and every gradient entering a
// linear layer's backward get a kernel of their own.
// Transformer Engine's cast-transpose of a rows × cols activation or gradient: its FP8
// copy and the transpose the next GEMM reads, and the tensor's amax.
// `held`: bytes per element of the tensor read (the activations' type unless given).
//
// Under current scaling (training.fp8_recipe: tensorwise, TE's Float8CurrentScalingQuantizer)
// the scale comes from the tensor itself: a kernel reads it for its amax first
// (nvte_compute_amax), the amax of a sequence-parallel shard is all-reduced over TP
// (`amax_over_tp`), then the cast reads it again. Delayed scaling takes the scale from the
// amax history and records the new amax as the cast writes: one pass.
uint32_t StageBuilder::fp8_cast(const char* name, Phase ph, int32_t L, int64_t rows, int64_t cols, uint32_t after,
                                double held, bool amax_over_tp) {
  if (!l_.fp8) return after;
  const double elements = static_cast<double>(rows) * static_cast<double>(cols);
  const double read = elements * (held > 0 ? held : static_cast<double>(e_));
  if (l_.fp8_current_scaling) {
    after = add_memory((std::string(name) + "-amax").c_str(), ph, L, read, 4, elements, deps(after));
    if (amax_over_tp) after = amax_allreduce(name, ph, L, after);
  }
  return cast_transpose(name, ph, L, rows, cols, read, after);
}

// The cast-transpose kernel itself: `read` bytes in, the FP8 copy and its transpose out.
uint32_t StageBuilder::cast_transpose(const char* name, Phase ph, int32_t L, int64_t rows, int64_t cols, double read,
                                      uint32_t after) {
  const double elements = static_cast<double>(rows) * static_cast<double>(cols);
  const uint32_t c = add_memory(name, ph, L, read, 2.0 * elements, 2.0 * elements, deps(after));
  Op& op = p_.ops[c];
  op.access = MemAccess::Fp8CastTranspose;
  op.m = rows;
  op.n = cols;
  return c;
}

// The 4-byte MAX all-reduce of a sequence-parallel tensor's amax over the TP group, which
// the cast waits for (TE's amax reduction group: the column-parallel inputs and the
// row-parallel output gradients under sequence parallelism).
uint32_t StageBuilder::amax_allreduce(const char* name, Phase ph, int32_t L, uint32_t after) {
  if (!l_.sequence_parallel) return after;
  return add_coll((std::string(name) + "-amax-allreduce").c_str(), CollectiveKind::AllReduce, GroupKind::TP, tp_, ph, L,
                  4, deps(after));
}

// Current scaling cannot scale inside the kernel that produces a tensor: TE's norms and
// activations then write it in BF16 with its amax (Impl::FUSED_NORM_AMAX_FP8 in
// normalization.cpp), and a quantize kernel reads it and writes the FP8 copy and its
// transpose. Under delayed scaling the norm or activation writes FP8 itself: nothing here.
uint32_t StageBuilder::fp8_quantize_fused(const char* name, Phase ph, int32_t L, int64_t rows, int64_t cols,
                                          uint32_t after, bool amax_over_tp) {
  if (!l_.fp8_current_scaling || l_.eager) return after;
  if (amax_over_tp) after = amax_allreduce(name, ph, L, after);
  const double elements = static_cast<double>(rows) * static_cast<double>(cols);
  return cast_transpose(name, ph, L, rows, cols, elements * static_cast<double>(e_), after);
}

// What eager PyTorch launches for the same layer (docs/model.md, "PyTorch eager"): the
// parameters are FP32 and autocast casts each linear's weight (and bias) to BF16 at
// every forward (its cast cache lives for one autocast region: a micro-batch); linear
// inputs that arrive in FP32 are cast too. layer_norm / rms_norm, log_softmax and
// nll_loss run in FP32, so the residual stream after the embedding is FP32 and every
// residual add is FP32 + BF16 -> FP32. Each elementwise op is its own kernel. In the
// backward, each weight gradient leaves its GEMM in BF16, is cast to FP32 and
// accumulated into .grad (a copy for the first micro-batch: zero_grad sets None, an
// add after); bias gradients are a reduction of the output gradient.
uint32_t StageBuilder::accessed(uint32_t op, MemAccess a, double elements) {
  p_.ops[op].access = a;
  p_.ops[op].m = static_cast<int64_t>(elements);
  return op;
}

// The host's own time as an op (compute.host_sync a wait, compute.host_op a small op it
// then dispatches alone): `waits` waits for the GPU, then `ops` ops issued one by one.
uint32_t StageBuilder::host_wait(const char* name, Phase ph, int32_t L, uint32_t after, int64_t waits, int64_t ops) {
  const uint32_t op =
      accessed(add_memory(name, ph, L, 0, 0, 0, deps(after)), MemAccess::HostSync, static_cast<double>(waits));
  p_.ops[op].k = ops;
  return op;
}

// The trainer's training metrics (training.train_metrics), updated after the micro-batch's
// backward from the logits its forward kept: each a cross-entropy under autocast, which runs
// log_softmax on the 16-bit logits with an FP32 output (three reads of each row, one FP32
// write), then nll_loss (Composer's _eval_train_metrics with MPT's LanguageCrossEntropy and
// LanguagePerplexity; docs/model.md, "Training metrics").
void StageBuilder::train_metrics(uint32_t after) {
  const double lg = static_cast<double>(tokens_ * vocab_local_);
  uint32_t x = after;
  for (int k = 0; k < l_.train_metrics; ++k) {
    x = accessed(
        add_memory("metric-log-softmax", Phase::Forward, -1, lg * 3 * static_cast<double>(e_), lg * 4, 0, deps(x)),
        MemAccess::MixedSoftmax, lg);
    x = add_memory("metric-nll-loss", Phase::Forward, -1, static_cast<double>(tokens_) * 12, 4, 0, deps(x));
  }
}

// Once a batch the trainer computes each training metric, and torchmetrics syncs every
// state over all ranks (Composer's _compute_and_log_metrics -> Metric.compute ->
// gather_all_tensors, torchmetrics 0.10-1.3): a barrier (a one-element all-reduce, then the
// host waits for the device), n fills for the outputs, an all-gather of n elements that
// ProcessGroupNCCL copies into them one by one, each fill and copy dispatched by the host
// (compute.host_op) with the device idle after the barrier. MPT's two metrics hold two
// scalar states each (docs/model.md, "Training metrics").
void StageBuilder::train_metrics_sync(uint32_t x) {
  if (l_.train_metrics <= 0 || l_.dp <= 1) return;
  const int64_t n = l_.dp;
  for (int k = 0; k < 2 * l_.train_metrics; ++k) {
    x = add_coll("metric-barrier", CollectiveKind::AllReduce, GroupKind::DP, dp_, Phase::Other, -1, 4, deps(x));
    x = host_wait("metric-barrier-wait", Phase::Other, -1, x);
    const uint32_t fills = host_ops("metric-gather-fills", n, x);
    const uint32_t gather = add_coll("metric-allgather", CollectiveKind::AllGather, GroupKind::DP, dp_, Phase::Other,
                                     -1, 4.0 * static_cast<double>(n), deps(fills));
    x = join(gather, host_ops("metric-gather-copies", n, fills));
  }
}

// `count` small eager ops (a fill, a copy) dispatched one by one by the host, with nothing
// queued ahead of them on the device.
uint32_t StageBuilder::host_ops(const char* name, int64_t count, uint32_t after) {
  return host_wait(name, Phase::Other, -1, after, 0, count);
}

// Megatron-LM's loss_func on the last stage, between a micro-batch's forward and its
// backward (training.loss_sync): the loss and token count (8 bytes) all-reduced over CP
// when cp > 1; the NaN check (check_for_nan_in_loss_and_grad, on by default since
// 2023-09: `assert not loss[0].isnan()`, then the rerun state machine's validate_result),
// a host wait before the backward is launched; the reporting loss all-reduced over DP
// (every micro-batch until 2025-04, then once a step). Synchronous torch.distributed
// calls: the compute stream waits for each.
uint32_t StageBuilder::loss_sync(uint32_t x, int64_t chunk) {
  if (l_.cp > 1 && l_.loss_allreduce) {
    if (cp_ == 0xff) cp_ = p_.stream("cp");
    x = add_coll("loss-cp-allreduce", CollectiveKind::AllReduce, GroupKind::CP, cp_, Phase::Forward, -1, 8, deps(x));
  }
  if (l_.loss_host_syncs > 0) {
    // The wait, then loss.backward() launched from an empty queue, walking the chunk's graph
    // (compute.backward_relaunch, autograd_node).
    // Counted before the check joins the chunk's ops.
    const int64_t nodes = l_.plan_before_2026_12_05 ? 0 : autograd_nodes(chunk, chunk_begin_);
    x = host_wait("loss-nan-check", Phase::Forward, -1, x, l_.loss_host_syncs);
    p_.ops[x].n = 1;
    if (!l_.plan_before_2026_12_05) p_.ops[x].batch = nodes;
  }
  if (l_.dp > 1 && l_.loss_allreduce)
    x = add_coll("loss-dp-allreduce", CollectiveKind::AllReduce, GroupKind::DP, dp_, Phase::Forward, -1, 8, deps(x));
  return x;
}

// Megatron's blocking p2p (batch_p2p_comm, whenever overlap_p2p_comm is off) ends each
// batched send and receive with torch.cuda.synchronize() (batch_p2p_sync, on by default
// through core_r0.15.0; unconditional in the 2021-22 code): the host waits for every op
// issued so far on every stream, the DP bucket reductions in flight included, then issues
// the next kernels into an empty queue; a backward is launched from there, walking the
// chunk's graph (relaunch_nodes >= 0: compute.backward_relaunch and autograd_node a node).
uint32_t StageBuilder::device_sync(const char* name, Phase ph, int32_t L, uint32_t after, int64_t relaunch_nodes) {
  for (; scanned_ < p_.ops.size(); ++scanned_) {
    const size_t st = p_.ops[scanned_].stream;
    if (last_on_stream_.size() <= st) last_on_stream_.resize(st + 1, kNone);
    last_on_stream_[st] = static_cast<uint32_t>(scanned_);
  }
  // The DP stream: the gradient reductions issued so far (its parameter gathers, issued
  // at the step's start in the plan, go out bucket by bucket as the forward reaches them
  // in Megatron, so the host finds only the next one in flight).
  std::vector<uint32_t> d = deps(after);
  for (size_t st = 0; st < last_on_stream_.size(); ++st)
    if (st != compute_ && st != dp_ && last_on_stream_[st] != kNone && last_on_stream_[st] != after)
      d.push_back(last_on_stream_[st]);
  if (!grad_ops_.empty()) d.push_back(grad_ops_.back());
  const uint32_t op = accessed(add_memory(name, ph, L, 0, 0, 0, d), MemAccess::HostSync, 1);
  device_sync_name_ = p_.ops[op].name;
  if (relaunch_nodes >= 0) {
    p_.ops[op].n = 1;
    p_.ops[op].batch = relaunch_nodes;
  }
  return op;
}

uint32_t StageBuilder::join(uint32_t a, uint32_t b) {
  if (a == kNone) return b;
  if (b == kNone) return a;
  return add_memory("wait", Phase::Other, -1, 0, 0, 0, deps(a, b));
}

// The layers the stage holds: its chunks' transformer layers, then on the last stage the
// multi-token prediction modules' (numbered on from m_.layers).
std::vector<int32_t> StageBuilder::held_layers() const {
  std::vector<int32_t> out;
  for (int64_t c = 0; c < l_.virtual_stages; ++c) {
    for (int64_t i = 0; i < chunk_layers(c); ++i) out.push_back(layer_of(c, i));
    if (last_virtual(c))
      for (int64_t k = 0; k < m_.mtp_layers; ++k) out.push_back(static_cast<int32_t>(m_.layers + k));
  }
  return out;
}

// The stage's parameters: dense (expert = false) or expert, over all its chunks.
double StageBuilder::local_params(bool expert) const {
  double p = 0;
  for (int64_t c = 0; c < l_.virtual_stages; ++c) {
    for (int64_t i = 0; i < chunk_layers(c); ++i)
      p += expert ? layer_expert_params(layer_of(c, i)) : layer_dense_params(layer_of(c, i));
    if (!expert) p += embedding_params(first_virtual(c), last_virtual(c));
    if (last_virtual(c))
      for (int64_t k = 0; k < m_.mtp_layers; ++k) {
        const auto L = static_cast<int32_t>(m_.layers + k);
        p += expert ? layer_expert_params(L) : layer_dense_params(L) + mtp_extra_params();
      }
  }
  return p;
}

double StageBuilder::embedding_params_local() const {
  double p = 0;
  for (int64_t c = 0; c < l_.virtual_stages; ++c) p += embedding_params(first_virtual(c), last_virtual(c));
  return p;
}

}  // namespace clustersim
