// StageBuilder (plan/stage_builder.h): communication beside the layers: Megatron-Core's TP overlap,
// ZeRO 3's per-layer gathers and scatters, the data-parallel gradient buckets and the distributed
// optimizer's parameter gathers.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "plan/stage_builder.h"

namespace clustersim {

// ---- TP communication overlap (Megatron-Core --tp-comm-overlap, TE userbuffers) ----

// All-gather then a column-parallel GEMM. Overlapped (ring exchange): the GEMM runs on
// the tp chunks of the sequence one at a time, starting on the rank's own chunk while
// the next arrives from the ring predecessor; tp - 1 sends of one chunk each, the
// all-gather's bytes. `gathered_` is the op after which the whole input is here (the
// weight-gradient GEMM of the backward reads it).
uint32_t StageBuilder::ag_then_gemm(const char* ag, const char* gemm, Phase ph, int32_t L, uint32_t in, int64_t n,
                                    int64_t k, const std::vector<uint32_t>& extra) {
  if (!l_.tp_comm_overlap) {
    gathered_ = tp_gather(ag, ph, L, in);
    std::vector<uint32_t> after = deps(gathered_);
    after.insert(after.end(), extra.begin(), extra.end());
    return add_gemm(gemm, ph, L, tokens_, n, k, after);
  }
  uint32_t have = in, last = kNone;
  for (int64_t i = 0; i < t_; ++i) {
    if (i > 0) {
      add_p2p("tp-overlap-send", OpKind::Send, GroupKind::TP, 1, "tp-send", ph, L, act_bytes(), deps(have), true);
      have = add_p2p("tp-overlap-recv", OpKind::Recv, GroupKind::TP, static_cast<int32_t>(t_ - 1), "tp-recv", ph, L,
                     act_bytes(), deps(have), true);
    }
    std::vector<uint32_t> after = deps(have, last);
    if (i == 0) after.insert(after.end(), extra.begin(), extra.end());
    last = add_gemm(gemm, ph, L, seq_tokens_, n, k, after);
  }
  gathered_ = have;
  return last;
}

// A row-parallel GEMM then its all-reduce (reduce-scatter under SP). Overlapped
// (pipelined reduce-scatter): the GEMM runs chunk by chunk, each chunk's partial sums
// leave for the ring successor as soon as they exist, and the last step adds the
// partials that arrived; tp - 1 sends of one chunk each. In the forward these are
// Transformer Engine's `pipeline` overlaps (proj_fprop, fc2_fprop), whose kernels hold
// SMs beside the chunks (Op::holds_sms); the backward's are its `bulk` overlaps.
// `then` (the backward only), when given, adds the weight-gradient GEMM after the data-gradient
// GEMM in the compute stream's order and returns the op it ends with. Megatron's and
// Transformer Engine's linear layers reduce the data gradient while computing the
// weights' (parallel.tp_async_grad_reduce); Megatron-LM before 2021-09 reduced it in the
// backward of the identity before the layer, once both GEMMs were done.
uint32_t StageBuilder::gemm_then_reduce(const char* gemm, const char* ar, const char* rs, Phase ph, int32_t L,
                                        const std::vector<uint32_t>& after, int64_t n, int64_t k,
                                        const std::function<uint32_t()>& then) {
  if (!l_.tp_comm_overlap) {
    const uint32_t g = add_gemm(gemm, ph, L, tokens_, n, k, after);
    if (!then) return tp_reduce(ar, rs, ph, L, g);
    if (!l_.tp_async_grad_reduce) return tp_reduce(ar, rs, ph, L, join(g, then()));
    const uint32_t red = tp_reduce(ar, rs, ph, L, g);
    then();
    return red;
  }
  // The backward's (the QKV and MLP-up input gradients) are TE's bulk overlaps: the data
  // gradient's GEMM whole, then one reduce-scatter kernel holding its configured SMs (no
  // margin) beside the weight-gradient GEMM, which runs at the factor for those SMs while
  // the reduce-scatter lasts (the executor retimes it when that ends).
  if (ph == Phase::Backward) {
    const uint32_t g = add_gemm(gemm, ph, L, tokens_, n, k, after);
    const uint32_t red =
        bulk(add_coll(rs, CollectiveKind::ReduceScatter, GroupKind::TP, tp_, ph, L, full_act_bytes(), deps(g)),
             std::string_view(gemm) == "qkv-dgrad" ? l_.tp_overlap_qkv_wgrad_sms : l_.tp_overlap_fc1_wgrad_sms);
    if (then) then();
    return red;
  }
  // The forward's `pipeline` kernels hold their SMs; a `ring_exchange` reduce-scatter
  // (parallel.tp_overlap_reduce_scatter) sends by copy engine and holds none.
  const bool held = !l_.tp_overlap_rs_ring;
  // The kernel's SMs (TE's num_sm for proj_fprop or fc2_fprop) and the GEMMs' margin.
  const auto sms =
      static_cast<uint16_t>(std::string_view(gemm) == "attn-proj" ? l_.tp_overlap_proj_sms : l_.tp_overlap_fc2_sms);
  auto mark = [&](uint32_t op) {
    p_.ops[op].held_sms = sms;
    p_.ops[op].sm_margin = l_.tp_overlap_sm_margin;
    return op;
  };
  uint32_t last = kNone, arrived = kNone;
  for (int64_t i = 0; i < t_; ++i) {
    last = add_gemm(gemm, ph, L, seq_tokens_, n, k, i == 0 ? after : deps(last));
    // Every chunk after the first runs beside the previous chunk's send.
    if (i > 0 && held) p_.ops[mark(last)].beside_sms = true;
    if (i + 1 < t_) {
      const uint32_t send = add_p2p("tp-overlap-send", OpKind::Send, GroupKind::TP, 1, "tp-send", ph, L, act_bytes(),
                                    deps(last, arrived), true, held);
      arrived = add_p2p("tp-overlap-recv", OpKind::Recv, GroupKind::TP, static_cast<int32_t>(t_ - 1), "tp-recv", ph, L,
                        act_bytes(), deps(arrived == kNone ? last : arrived), true, held);
      if (held) {
        mark(send);
        mark(arrived);
      }
    }
  }
  return add_memory(rs, ph, L, 2 * act_bytes(), act_bytes(), act_bytes() / static_cast<double>(e_),
                    deps(last, arrived));
}

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
  // Under full recompute each layer is one checkpoint node; its ops record none.
  const bool checkpointed = l_.recompute == "full";
  std::vector<std::pair<int32_t, uint32_t>> ops;  // (layer, name) of each forward computation
  for (size_t i = first; i < p_.ops.size(); ++i) {
    const Op& op = p_.ops[i];
    const bool comm = op.kind == OpKind::Collective || op.kind == OpKind::Send || op.kind == OpKind::Recv;
    // (the pipeline's device synchronize is the host's wait, no node of the graph)
    if (op.phase == Phase::Forward && !comm && op.name != device_sync_name_ && !(checkpointed && op.layer >= 0))
      ops.emplace_back(op.layer, op.name);
  }
  std::sort(ops.begin(), ops.end());
  int64_t nodes = (checkpointed ? chunk_layers(chunk) : 0) +
                  static_cast<int64_t>(std::unique(ops.begin(), ops.end()) - ops.begin());
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

// ---- ZeRO-3 parameter gathers and gradient scatters, per layer ----------------------

// Whether each backward gathers its layer's parameters again (ZeRO 3 per micro-batch).
bool StageBuilder::zero3_backward_gathers() const {
  return l_.zero_stage >= 3 && l_.dp * l_.cp > 1 && !l_.zero3_gather_once && !l_.zero3_keep_for_backward;
}

// The backward's gather for layer L: the one prefetched for it, else issued now.
uint32_t StageBuilder::zero3_backward_gather(int32_t L, uint32_t after) {
  if (prefetched_layer_ == L) {
    prefetched_layer_ = -1;
    return prefetched_gather_;
  }
  return zero3_gather(Phase::Backward, L, after);
}

// At the start of layer `L`'s backward, `below` next: with a backward prefetch the gather
// of `below` goes on the DP stream now, ahead of L's reduce-scatter and behind the layer
// above's, waiting for no kernel, so it runs beside L's backward. BACKWARD_PRE issues it
// from L's pre-backward hook and BACKWARD_POST from its post-backward hook; both hooks run
// on the host as autograd reaches them, ahead of the GPU, so the stream gets the same
// order either way (docs/model.md, "ZeRO 3 backward prefetch").
void StageBuilder::zero3_prefetch_below(int32_t below) {
  if (below < 0 || !zero3_backward_gathers() || !l_.zero3_prefetch) return;
  prefetched_gather_ = zero3_gather(Phase::Backward, below, kNone);
  prefetched_layer_ = below;
}

uint32_t StageBuilder::zero3_gather(Phase ph, int32_t L, uint32_t after) {
  if (l_.zero_stage < 3 || l_.dp * l_.cp == 1) return after;
  // Gathered once: what the first micro-batch's forward gathered stays until the step
  // ends (torch.distributed.pipelining turns FSDP's reshard off for all but the last
  // backward).
  if (l_.zero3_gather_once && (ph != Phase::Forward || mb_ > 0)) return after;
  // Kept for the backward (SHARD_GRAD_OP): gathered before each forward only.
  if (l_.zero3_keep_for_backward && ph != Phase::Forward) return after;
  const double pe = dtype_bits(l_.fsdp_param_dtype) / 8.0;
  // Prefetched: the gather for this layer is issued on the DP stream as soon as the
  // previous gather finished, and the layer's first op waits for it.
  uint32_t g = add_coll(ph == Phase::Forward ? "zero3-param-allgather" : "zero3-param-allgather-bwd",
                        CollectiveKind::AllGather, GroupKind::DP, dp_, ph, L, layer_dense_params(L) * pe, {});
  if (layer_expert_params(L) > 0 && expert_dp() > 1)
    g = add_coll("zero3-expert-allgather", CollectiveKind::AllGather, GroupKind::EDP, dp_, ph, L,
                 layer_expert_params(L) * pe, {});
  (void)after;
  return g;
}

// ---- data-parallel gradient buckets -------------------------------------------------

// Megatron-Core's finish_embedding_wgrad_compute: after the last backward, the output
// layer's deferred weight gradients, one GEMM per deferred micro-batch, each on its
// input all-gathered again under SP; then its gradient joins the buckets.
void StageBuilder::drain_deferred_wgrads() {
  if (deferred_wgrads_ == 0) return;
  const int64_t h = m_.hidden;
  for (int64_t i = 0; i < deferred_wgrads_; ++i) {
    const uint32_t x = tp_gather("allgather-logits-input-wgrad", Phase::Backward, -1, prev_);
    prev_ = main_grad_add(
        "grad-accumulate-logits", -1, vocab_local_, h,
        add_gemm("logits-wgrad", Phase::Backward, -1, vocab_local_, h, tokens_, deps(x, prev_), 1, 1.0, act_dtype_));
  }
  if (deferred_embedding_params_ > 0) add_grads(-1, deferred_embedding_params_, 0, prev_);
  deferred_wgrads_ = 0;
  deferred_embedding_params_ = 0;
}

void StageBuilder::add_grads(int32_t L, double dense, double expert, uint32_t ready) {
  const double gb = dtype_bits(l_.zero_stage >= 3 ? l_.fsdp_reduce_dtype : grad_dtype_) / 8.0;
  if (l_.zero_stage >= 3) {
    // ZeRO-3 reduce-scatters each layer's gradients every micro-batch (step sync: once,
    // in the last micro-batch's backward, from the unsharded accumulation buffer).
    if (l_.dp * l_.cp > 1 && dense > 0) {
      if (l_.eager) {
        fsdp_reduce_scatter(L, dense, ready);
      } else {
        grad_ops_.push_back(add_grad_coll("zero3-grad-reduce-scatter", CollectiveKind::ReduceScatter, GroupKind::DP, L,
                                          dense * gb, ready));
      }
    }
    if (expert_dp() > 1 && expert > 0)
      grad_ops_.push_back(add_grad_coll("zero3-expert-grad-reduce-scatter", CollectiveKind::ReduceScatter,
                                        GroupKind::EDP, L, expert * gb, ready));
    return;
  }
  bucket_dense_ += dense;
  bucket_gather_ += dense * gathered_bytes(L);
  bucket_expert_ += expert;
  bucket_ready_ = ready;
  bucket_layer_ = L;
  if (bucket_dense_ + bucket_expert_ >= static_cast<double>(l_.bucket_params)) flush_buckets(ready);
}

// PyTorch FSDP's post-backward hook on a layer's FlatParameter (torch/distributed/fsdp/
// _runtime_utils.py, _post_backward_hook, and default_hooks.reduce_scatter_hook): the
// unsharded gradient, in the dtype the layer computed in, is cast to reduce_dtype, divided
// by the pre-divide factor, reduce-scattered, and its shard divided by the rest of the
// world size, cast back to the FP32 parameter's dtype and added into the saved shard
// (from the second micro-batch). The unsharded passes run as the layer's gradients land,
// before the next layer's kernels get the SMs (compute stream); the shard's, after the
// reduce-scatter (DP stream). docs/model.md, "ZeRO 3 backward prefetch".
void StageBuilder::fsdp_reduce_scatter(int32_t L, double params, uint32_t ready) {
  const double n = static_cast<double>(l_.dp * l_.cp);
  const double ep = dtype_bits(l_.fsdp_param_dtype) / 8.0, er = dtype_bits(l_.fsdp_reduce_dtype) / 8.0;
  double pre = 1;  // _get_gradient_predivide_factor
  while (std::fmod(n, pre) == 0 && n / pre > pre) pre *= 2;
  uint32_t r = ready;
  if (ep != er) r = add_memory("fsdp-grad-cast", Phase::Backward, L, params * ep, params * er, 0, deps(r));
  if (pre > 1) r = add_memory("fsdp-grad-predivide", Phase::Backward, L, params * er, params * er, params, deps(r));
  uint32_t g =
      add_grad_coll("zero3-grad-reduce-scatter", CollectiveKind::ReduceScatter, GroupKind::DP, L, params * er, r);
  const double shard = params / n;
  const Phase b = Phase::Backward;
  if (n / pre > 1) g = add_memory("fsdp-grad-postdivide", b, L, shard * er, shard * er, shard, deps(g), dp_);
  if (er != 4) g = add_memory("fsdp-grad-shard-cast", b, L, shard * er, shard * 4, 0, deps(g), dp_);
  if (mb_ > 0) g = add_memory("fsdp-grad-accumulate", b, L, 8 * shard, 4 * shard, shard, deps(g), dp_);
  grad_ops_.push_back(g);
}

uint32_t StageBuilder::add_grad_coll(const char* name, CollectiveKind kind, GroupKind group, int32_t L, double bytes,
                                     uint32_t ready) {
  Op op = base(name, OpKind::Collective, Phase::Backward, L, dp_);
  op.collective = kind;
  op.group = group;
  op.dtype = grad_dtype_;
  op.bytes = static_cast<int64_t>(bytes);
  op.micro_batch = -1;
  return p_.add(op, deps(ready));
}

void StageBuilder::flush_buckets(uint32_t ready) {
  if (defer_grads_) {
    if (bucket_dense_ + bucket_expert_ > 0)
      deferred_.push_back(Bucket{bucket_dense_, bucket_expert_, bucket_layer_, bucket_gather_});
    bucket_dense_ = bucket_expert_ = bucket_gather_ = 0;
    return;
  }
  if (ready == kNone) ready = bucket_ready_;
  const double gb = dtype_bits(grad_dtype_) / 8.0;
  // Megatron-Core's check_for_nan_in_grad: start_grad_sync takes the bucket's norm on the
  // compute stream and asserts it is not NaN, so the host waits for it before it issues
  // the bucket's collective and goes on with the backward.
  if (l_.grad_nan_check && bucket_dense_ + bucket_expert_ > 0) {
    const double bytes = (bucket_dense_ + bucket_expert_) * gb;
    ready = add_memory("grad-nan-norm", Phase::Backward, bucket_layer_, bytes, 4, bytes / gb, deps(ready));
    ready = host_wait("grad-nan-wait", Phase::Backward, bucket_layer_, ready);
  }
  const bool sharded = l_.zero_stage >= 1;
  const CollectiveKind kind = sharded ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
  if (bucket_dense_ > 0 && l_.dp * l_.cp > 1) {
    grad_ops_.push_back(add_grad_coll(sharded ? "dp-grad-reduce-scatter" : "dp-grad-allreduce", kind, GroupKind::DP,
                                      bucket_layer_, bucket_dense_ * gb, ready));
    if (sharded && !l_.overlap_param_gather) gather_buckets_.push_back(bucket_gather_);
  }
  if (bucket_expert_ > 0 && expert_dp() > 1) {
    grad_ops_.push_back(add_grad_coll(sharded ? "expert-grad-reduce-scatter" : "expert-grad-allreduce", kind,
                                      GroupKind::EDP, bucket_layer_, bucket_expert_ * gb, ready));
  }
  bucket_dense_ = bucket_expert_ = bucket_gather_ = 0;
}

// ---- distributed optimizer: parameter gathers overlapped with the next forward ----

// Megatron-Core with --overlap-param-gather all-gathers each bucket's updated
// parameters as the forward reaches it. The buckets are those the backward fills
// (layers last to first); the gathers are issued in forward order at the start of the
// step, and a layer's first forward op waits for its bucket.
void StageBuilder::plan_param_gathers() {
  if (!(l_.zero_stage >= 1 && l_.zero_stage <= 2 && l_.dp * l_.cp > 1 && l_.overlap_param_gather)) return;
  struct Gather {
    double params = 0, bytes = 0;
    std::vector<int32_t> layers;
  };
  std::vector<Gather> buckets(1);
  auto add = [&](int32_t L, double params) {
    buckets.back().params += params;
    buckets.back().bytes += params * gathered_bytes(L);
    buckets.back().layers.push_back(L);
    if (buckets.back().params >= static_cast<double>(l_.bucket_params)) buckets.emplace_back();
  };
  for (int64_t c = l_.virtual_stages - 1; c >= 0; --c) {
    for (int64_t i = chunk_layers(c) - 1; i >= 0; --i) add(layer_of(c, i), layer_dense_params(layer_of(c, i)));
    if (first_virtual(c) || last_virtual(c)) add(-1, embedding_params(first_virtual(c), last_virtual(c)));
  }
  for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) {
    if (it->params <= 0) continue;
    const uint32_t g = add_coll("zero-param-allgather", CollectiveKind::AllGather, GroupKind::DP, dp_, Phase::Forward,
                                -1, it->bytes, {});
    for (int32_t L : it->layers) param_gather_[L] = g;
  }
}

uint32_t StageBuilder::param_gather_for(int32_t L) const {
  auto it = param_gather_.find(L);
  return it == param_gather_.end() ? kNone : it->second;
}

// One transformer layer's backward (Megatron path or eager), from its output gradient
// to its input's; its gradients join the buckets in the last micro-batch.
uint32_t StageBuilder::layer_backward(int32_t L, uint32_t g, bool last_micro_batch) {
  const double act = act_bytes();
  const int64_t h = m_.hidden;
  if (l_.eager) {
    if (l_.recompute == "full") {
      recomputing_ = true;
      g = layer_forward_eager(L, g, Phase::Backward);
      recomputing_ = false;
    }
    g = layer_backward_eager(L, g, last_micro_batch);
    return g;
  }
  if (l_.recompute == "full") {
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
    if (zg != g) g = join(g, zg);
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

}  // namespace clustersim
