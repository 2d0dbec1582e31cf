// StageBuilder (plan/stage_builder.h): communication beside the layers: the pipeline's sends and
// receives, TP collectives and Megatron-Core's TP overlap, ZeRO 3's per-layer gathers and scatters,
// the data-parallel gradient buckets and the distributed optimizer's parameter gathers.
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

uint32_t StageBuilder::pp_gather(const char* name, Phase ph, int32_t layer, uint32_t recv) {
  if (!pp_scatter()) return recv;
  return add_coll(name, CollectiveKind::AllGather, GroupKind::TP, tp_, ph, layer, full_act_bytes(), deps(recv));
}

// Activations leaving a row-parallel layer: all-reduce, or reduce-scatter under SP.
uint32_t StageBuilder::tp_reduce(const char* ar, const char* rs, Phase ph, int32_t layer, uint32_t after) {
  if (t_ == 1) return after;
  return add_coll(l_.sequence_parallel ? rs : ar,
                  l_.sequence_parallel ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, GroupKind::TP, tp_,
                  ph, layer, full_act_bytes(), deps(after));
}

// Activations entering a column-parallel layer under SP: all-gather the sequence.
// `bulk_sms`: under the TP overlap, the backward's all-gather of a weight gradient's input
// is a userbuffers bulk overlap whose kernel holds that many SMs beside the data-gradient
// GEMM (TE's qkv_dgrad / fc1_dgrad num_sm, no margin), not an NCCL collective's channels.
uint32_t StageBuilder::tp_gather(const char* name, Phase ph, int32_t layer, uint32_t after, int bulk_sms) {
  if (t_ == 1 || !l_.sequence_parallel) return after;
  const uint32_t op =
      add_coll(name, CollectiveKind::AllGather, GroupKind::TP, tp_, ph, layer, full_act_bytes(), deps(after));
  return l_.tp_comm_overlap && bulk_sms > 0 ? bulk(op, bulk_sms) : op;
}

// A TE userbuffers bulk overlap: one comm kernel holding `sms` SMs, no margin (TE's
// default and every configuration's set_sm_margin for bulk overlaps).
uint32_t StageBuilder::bulk(uint32_t op, int sms) {
  p_.ops[op].holds_sms = true;
  p_.ops[op].held_sms = static_cast<uint16_t>(sms);
  p_.ops[op].sm_margin = false;
  return op;
}

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
  // the reduce-scatter lasts (the executor retimes it when that ends). A forward run again
  // in the backward (full recompute) is the forward's module call: its pipelined overlap.
  if (ph == Phase::Backward && !recomputing_) {
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

// fully_shard's unshard ends on the compute stream (FSDPParamGroup.wait_for_unshard ->
// foreach_all_gather_copy_out): the all-gather's output is one flat buffer, and
// split_with_sizes_copy copies it out into each parameter's unsharded tensor, reading and
// writing the layer's gathered bytes before its first kernel.
uint32_t StageBuilder::zero3_copy_out(Phase ph, int32_t L, uint32_t joined) {
  if (!l_.fsdp2) return joined;
  const double bytes = layer_dense_params(L) * dtype_bits(l_.fsdp_param_dtype) / 8.0;
  return add_memory("fsdp2-copy-out", ph, L, bytes, bytes, 0, deps(joined));
}

// The vocabulary tables under ZeRO 3, sharded with the rest: the input embedding gathered
// before its lookup, the output layer before its GEMM, each as a layer's parameters are
// (once a step, or before each forward, per zero3_param_gather), and the output layer again
// before its data-gradient GEMM where the layers gather again for the backward (the
// embedding's backward, a scatter of its rows' gradients, reads no weights).
uint32_t StageBuilder::zero3_vocab_gather(Phase ph, uint32_t after) {
  if (!zero3_gathers_in(ph)) return after;
  const double pe = dtype_bits(l_.fsdp_param_dtype) / 8.0;
  const double table = static_cast<double>(vocab_local_) * static_cast<double>(m_.hidden);
  const uint32_t g = add_coll(ph == Phase::Forward ? "zero3-vocab-allgather" : "zero3-vocab-allgather-bwd",
                              CollectiveKind::AllGather, GroupKind::DP, dp_, ph, -1, table * pe, {});
  return join(after, g);
}

// A tied output layer on the stage that looks its tokens up is the table the embedding's
// gather brought: one gather serves both.
bool StageBuilder::vocab_gathered_with_embedding(int64_t chunk) const {
  return m_.tied_embeddings && first_virtual(0) && last_virtual(chunk);
}

// Whether ZeRO 3 gathers parameters at this point of the step: in every forward and
// backward, but gathered once, only in the first micro-batch's forward (what it gathered
// stays until the step ends: torch.distributed.pipelining turns FSDP's reshard off for all
// but the last backward), and kept for the backward (SHARD_GRAD_OP), before each forward only.
bool StageBuilder::zero3_gathers_in(Phase ph) const {
  if (l_.zero_stage < 3 || l_.dp * l_.cp == 1) return false;
  if (l_.zero3_gather_once && (ph != Phase::Forward || mb_ > 0)) return false;
  return !(l_.zero3_keep_for_backward && ph != Phase::Forward);
}

uint32_t StageBuilder::zero3_gather(Phase ph, int32_t L, uint32_t after) {
  if (!zero3_gathers_in(ph)) return after;
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

// Pipeline sends and receives (parallel.overlap_p2p_comm). Overlapped, a receive is
// posted ahead on its own stream and a send runs beside the next chunk. Blocking (Megatron's
// p2p_communication with wait_on_reqs): the stage posts a block's receive together with
// the previous block's send once its compute reaches them, as one batch, and computes on
// only when both are done, so a send also waits for its receiver to reach the matching
// receive. The interleaved schedule batches up to four transfers of two chunks at once
// (send_forward_backward_recv_forward_backward), which block-by-block posting cannot
// pair without a cycle: there the receives stay posted ahead and only the sends block.
//
// Overlapped, Megatron posts a block's receive with the send that follows the previous
// block of the same direction (forward_backward_pipelining_with_interleaving, core_r0.8 to
// core_r0.15: send_forward_recv_forward after each forward step, send_backward_recv_backward
// after each backward step; the first backward's receive after the warm-up's last forward),
// and ProcessGroupNCCL makes its stream wait for the kernels issued before the post: so
// the receive starts when that block's compute has finished, not as soon as its stream is
// free. The first forward's receive is posted at the step's start.
std::vector<uint32_t> StageBuilder::p2p_posted(bool forward) const {
  if (l_.overlap_p2p) {
    if (forward) return fwd_ends_.empty() ? std::vector<uint32_t>{} : deps(fwd_ends_.back());
    if (!bwd_ends_.empty()) return deps(bwd_ends_.back());
    const size_t w = std::min(warm_forwards_, fwd_ends_.size());
    return w == 0 ? std::vector<uint32_t>{} : deps(fwd_ends_[w - 1]);
  }
  if (l_.virtual_stages > 1 || prev_ == kNone) return {};
  return deps(prev_);
}

void StageBuilder::sent(uint32_t send) {
  if (!l_.overlap_p2p) pending_send_ = join(pending_send_, send);
}

uint32_t StageBuilder::after_sends() {
  const uint32_t s = pending_send_;
  pending_send_ = kNone;
  return s == kNone ? prev_ : join(prev_, s);
}

}  // namespace clustersim
