// StageBuilder (plan/stage_builder.h): the MLP, dense or a mixture of experts with its router's
// kernels and the token dispatcher.
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

// The MLP from its (sequence-parallel) input to its reduced output.
uint32_t StageBuilder::mlp_forward(int32_t L, Phase ph, uint32_t ln) {
  const int64_t h = m_.hidden;
  const bool swiglu = m_.ffn_type == FfnType::Swiglu;
  if (!m_.moe_layer(L)) {
    uint32_t up = ag_then_gemm("allgather-mlp-input", "mlp-up", ph, L, ln, mlp_in_, h);
    const double f = static_cast<double>(tokens_ * (m_.ffn_hidden / t_) * e_);
    uint32_t a = add_memory(swiglu ? "swiglu" : "bias-gelu", ph, L, swiglu ? 2 * f : f, f,
                            8.0 * f / static_cast<double>(e_), deps(up));
    // Megatron-LM's own layer: bias_gelu, a TorchScript-fused kernel whose tanh GeLU costs
    // arithmetic beyond its stream (MemAccess::TanhGelu).
    if (l_.local_impl && !swiglu) a = accessed(a, MemAccess::TanhGelu, f / static_cast<double>(e_));
    // Megatron-Core's MLP runs the activation itself, between Transformer Engine's
    // LayerNormLinear (FC1) and Linear (FC2): its BF16 output is cast by FC2's Linear.
    a = fp8_cast("fp8-cast-mlp-act", ph, L, tokens_, m_.ffn_hidden / t_, a);
    return gemm_then_reduce("mlp-down", "tp-allreduce-mlp", "reduce-scatter-mlp", ph, L, deps(a), h,
                            m_.ffn_hidden / t_);
  }
  if (moe_sp()) return moe_forward(L, ph, ln);
  return tp_reduce("tp-allreduce-mlp", "reduce-scatter-mlp", ph, L, moe_forward(L, ph, ln));
}

StageBuilder::ExpertLoad StageBuilder::expert_load(int32_t L, bool forward) {
  const MoeConfig& moe = m_.moe;
  const int64_t routed = moe_rows_tokens() * l_.ep * moe.top_k;
  const double even = static_cast<double>(routed) / static_cast<double>(moe.experts);
  ExpertLoad e;
  if (moe.routing.dist == "even") {
    e.per_expert = static_cast<int64_t>(std::ceil(even * moe.capacity_factor));
    e.useful = 1.0 / moe.capacity_factor;
    return e;
  }
  const double hot = moe_hot_rank_load(moe, routed, l_.ep, L, mb_);
  if (forward) {
    load_sum_ += hot;
    ++load_count_;
  }
  e.per_expert = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(even * hot)));
  e.a2a_scale = hot;
  // The hot rank's rows set the time; the model's FLOPs are the mean rank's, its even share
  // (MFU counts the work the model asks for, not what the skew piles on one rank).
  e.useful = std::min(1.0, even / static_cast<double>(e.per_expert));
  return e;
}

// An FP32 router (--moe-router-dtype fp32; core_r0.12.0 router.py `gating`): the input
// cast up to FP32 for the GEMM (and its gradient back down in the backward), and the
// three GEMMs in FP32, priced at the FP32 peak (PyTorch leaves TF32 off for matmuls).
uint32_t StageBuilder::router_cast(const char* name, Phase ph, int32_t L, int64_t rows, uint32_t after) {
  if (!m_.moe.router_fp32) return after;
  const double x = static_cast<double>(rows * m_.hidden);
  const bool up = ph == Phase::Forward || recomputing_;
  return add_memory(name, ph, L, x * (up ? e_ : 4), x * (up ? 4 : e_), 0, deps(after));
}

void StageBuilder::router_in_fp32(uint32_t gemm) {
  if (!m_.moe.router_fp32) return;
  Op& op = p_.ops[gemm];
  op.dtype = DType::FP32;
  op.bytes_read = (op.m * op.k + op.k * op.n) * 4;
  op.bytes_written = op.m * op.n * 4;
}

StageBuilder::RouteKernels StageBuilder::route_kernels() const {
  const MoeConfig& moe = m_.moe;
  RouteKernels k;
  // Measured: softmax after the top-k (the top-k's select and sort, the softmax and its
  // casts, the gates and the routing map scattered, cast and summed): 15 forward, 8
  // backward. The sigmoid path's base is what DeepSeek-V3's router launched (57 and 29)
  // less the enumerated kernels of its bias (the bias added for the choice, the chosen
  // scores gathered, the counts summed and added: 4, and the gather's backward 2), its
  // groups (the groups' top-2 and their sum, the top groups, the mask built, cast,
  // inverted, applied, the masked top-k: 11), its scaling (1 and 1), its capacity and its
  // sequence loss (below).
  if (moe.score_sigmoid) {
    k.fwd = 22, k.bwd = 12;
    if (moe.expert_bias) k.fwd += 4, k.bwd += 2;
  } else {
    k.fwd = 15, k.bwd = 8;
  }
  if (moe.groups > 0) k.fwd += 11;
  if (moe.topk_scaling > 0) ++k.fwd, ++k.bwd;
  // Measured: the capacity's top-k over the tokens, its mask scattered and cast, the gates
  // masked (6), and the mask's product in the backward (1).
  if (!moe.routing.dropless) k.fwd += 6, ++k.bwd;
  if (moe_aux_loss()) {
    // The switch loss over softmax scores, measured: 8 forward (its softmax and cast, the
    // sums and products, the tracker's add) and 8 backward. The sequence loss, enumerated:
    // the map's counts over the sequence, the scores' mean, their product and means, the
    // coefficient, the tracker (11 forward, 10 backward). Sigmoid scores for the loss take
    // the sigmoid and its normalization (2 more forward, 3 backward).
    const bool seq = moe.load_balancing == "seq_aux_loss";
    k.aux_fwd = seq ? 11 : 8, k.aux_bwd = seq ? 10 : 8;
    if (moe.score_sigmoid) k.aux_fwd += 2, k.aux_bwd += 3;
  }
  return k;
}

uint32_t StageBuilder::route_op(const char* name, Phase ph, int32_t L, int64_t kernels, int64_t own, uint32_t after) {
  if (kernels <= 0) return after;
  const double b = route_bytes(own) * static_cast<double>(kernels);
  const uint32_t op = add_memory(name, ph, L, b, b, 0, deps(after));
  p_.ops[op].k = kernels;
  return op;
}

// A collective over TP x CP, Megatron-Core's sequence-partition group for the balancing
// loss: run over TP, then over CP (the same sum, or the same gathered whole).
uint32_t StageBuilder::tp_cp_coll(const char* tp_name, const char* cp_name, CollectiveKind kind, Phase ph, int32_t L,
                                  double bytes, uint32_t after) {
  uint32_t x = after;
  const bool reduce = kind == CollectiveKind::AllReduce;
  const double over_tp = reduce ? bytes : bytes * static_cast<double>(t_);
  if (moe_sp()) x = add_coll(tp_name, kind, GroupKind::TP, tp_, ph, L, over_tp, deps(x));
  if (l_.cp > 1) {
    if (cp_ == 0xff) cp_ = p_.stream("cp");
    const double over_cp = reduce ? bytes : (moe_sp() ? over_tp : bytes) * static_cast<double>(l_.cp);
    x = add_coll(cp_name, kind, GroupKind::CP, cp_, ph, L, over_cp, deps(x));
  }
  return x;
}

double StageBuilder::aux_score_bytes(int64_t own) const {
  const double b = m_.moe.router_fp32 || !m_.moe.score_sigmoid ? 4.0 : static_cast<double>(e_);
  return static_cast<double>(own * m_.moe.experts) * b;
}

// The forward from the router's GEMM to the routing map and probabilities.
uint32_t StageBuilder::route_forward(int32_t L, Phase ph, uint32_t router, int64_t own) {
  const RouteKernels k = route_kernels();
  uint32_t x = route_op("moe-route", ph, L, k.fwd, own, router);
  if (k.aux_fwd == 0) return x;
  if (m_.moe.load_balancing == "seq_aux_loss")  // every sequence's scores
    x = tp_cp_coll("moe-aux-scores-allgather-tp", "moe-aux-scores-allgather-cp", CollectiveKind::AllGather, ph, L,
                   aux_score_bytes(own), x);
  else  // the experts' token counts (int64)
    x = tp_cp_coll("moe-aux-counts-allreduce-tp", "moe-aux-counts-allreduce-cp", CollectiveKind::AllReduce, ph, L,
                   8.0 * static_cast<double>(m_.moe.experts), x);
  return route_op("moe-aux-loss", ph, L, k.aux_fwd, own, x);
}

uint32_t StageBuilder::route_backward(int32_t L, uint32_t g, int64_t own) {
  const RouteKernels k = route_kernels();
  const Phase b = Phase::Backward;
  uint32_t x = route_op("moe-aux-loss-backward", b, L, k.aux_bwd, own, g);
  if (k.aux_bwd > 0 && m_.moe.load_balancing == "seq_aux_loss")
    x = tp_cp_coll("moe-aux-scores-reduce-scatter-tp", "moe-aux-scores-reduce-scatter-cp",
                   CollectiveKind::ReduceScatter, b, L, aux_score_bytes(own), x);
  return route_op("moe-route-backward", b, L, k.bwd, own, x);
}

// The all-to-all dispatcher's index bookkeeping and host waits around its permutations
// (training.moe_permute). `masked_select` sizes its output on the host: a wait for the GPU
// each time (and the select's kernel launched from the emptied queue).
//   unfused (core_r0.12.0): a padded router's rows sorted on the device (int8 map,
//     transpose, argsort, slice) and the probabilities masked_select-ed (one wait); dropless,
//     the tokens and the probabilities masked_select-ed (two), the experts' counts
//     all-gathered over TP x EP for the all-to-all's splits, whose own wait falls after them.
//   masked-select (core_r0.10.0): the tokens masked_select-ed in the permutation and the
//     probabilities in the unpermutation (two waits), padded or not; dropless, the counts
//     gathered and a wait for them before the permutation.
//   fused (Transformer Engine's permute): no bookkeeping; dropless, the counts and their wait.
// Kernels beside the permutation's and unpermutation's own, measured on one H100 over both
// paths, forward and backward together: unfused padded 23, masked_select 31 (of which 6 and
// 9 in the backward, enumerated: the index gradients' zeros and adds, the masked scatter).
bool StageBuilder::permute_masked_select() const {
  return l_.moe_permute == "masked-select" || (l_.moe_permute == "unfused" && m_.moe.routing.dropless);
}

uint32_t StageBuilder::dispatch_bookkeeping(int32_t L, Phase ph, uint32_t routed, int64_t own) {
  uint32_t x = routed;
  const bool dropless = m_.moe.routing.dropless && (l_.ep > 1 || moe_tp_gather());
  if (dropless) {
    const double counts = 8.0 * static_cast<double>(m_.moe.experts);
    if (l_.ep > 1)
      x = add_coll("moe-counts-allgather-ep", CollectiveKind::AllGather, GroupKind::EP, ep_stream(), ph, L,
                   counts * static_cast<double>(l_.ep), deps(x));
    if (moe_tp_gather())
      x = add_coll("moe-counts-allgather-tp", CollectiveKind::AllGather, GroupKind::TP, tp_, ph, L,
                   counts * static_cast<double>(l_.ep * t_), deps(x));
  }
  if (l_.moe_permute == "fused") return dropless ? host_wait("moe-splits-sync", ph, L, x, 1, 1) : x;
  if (l_.moe_permute == "masked-select" && dropless) x = host_wait("moe-splits-sync", ph, L, x, 1, 1);
  x = route_op("moe-permute-indices", ph, L, permute_masked_select() ? 22 : 17, own, x);
  x = host_wait("moe-permute-sync", ph, L, x, 1, 1);
  if (l_.moe_permute == "unfused" && m_.moe.routing.dropless) x = host_wait("moe-permute-probs-sync", ph, L, x, 1, 1);
  return x;
}

uint32_t StageBuilder::unpermute_bookkeeping(int32_t L, Phase ph, uint32_t combined) {
  return l_.moe_permute == "masked-select" ? host_wait("moe-unpermute-sync", ph, L, combined, 1, 1) : combined;
}

uint32_t StageBuilder::permute_bookkeeping_backward(int32_t L, uint32_t g, int64_t own) {
  if (l_.moe_permute == "fused") return g;
  return route_op("moe-permute-indices-backward", Phase::Backward, L, permute_masked_select() ? 9 : 6, own, g);
}

StageBuilder::MoeShape StageBuilder::moe_shape(int32_t L, bool forward) {
  const ExpertLoad load = expert_load(L, forward);
  MoeShape x;
  x.local = m_.moe.experts / l_.ep;
  x.per_expert = load.per_expert;
  x.fe = m_.moe.expert_ffn_hidden / l_.expert_tp();
  x.own = moe_sp() ? seq_tokens_ : tokens_;
  x.cap = 1.0 / load.useful;
  x.permuted = static_cast<double>(x.own * m_.moe.top_k * m_.hidden * e_);
  x.a2a = x.permuted * load.a2a_scale;
  x.gathered = x.a2a * static_cast<double>(moe_tp_gather() ? t_ : 1);
  return x;
}

uint32_t StageBuilder::allgather_dispatch(int32_t L, Phase ph, uint32_t router, int64_t rows, int64_t own) {
  const double h = static_cast<double>(m_.hidden), e = static_cast<double>(e_);
  uint32_t x = router;
  if (l_.ep > 1)
    x = add_coll("moe-dispatch-allgather-ep", CollectiveKind::AllGather, GroupKind::EP, ep_stream(), ph, L,
                 gathered_tokens(own) * h * e, deps(x));
  x = host_wait("moe-tokens-per-expert-sync", ph, L, x);
  const double r = static_cast<double>(rows) * h * e;
  return add_memory("moe-permute", ph, L, r, r, 0, deps(x));
}

uint32_t StageBuilder::allgather_combine(int32_t L, Phase ph, uint32_t experts, int64_t rows, int64_t own) {
  const double h = static_cast<double>(m_.hidden), e = static_cast<double>(e_);
  const double all = gathered_tokens(own) * h;
  uint32_t x = add_memory("moe-unpermute", ph, L, static_cast<double>(rows) * h * e, 2 * all * e, 0, deps(experts));
  if (l_.ep == 1) return x;
  const double pb = probs_bytes();
  if (pb != e) x = add_memory("moe-combine-cast", ph, L, all * e, all * pb, 0, deps(x));
  x = add_coll("moe-combine-reduce-scatter-ep", CollectiveKind::ReduceScatter, GroupKind::EP, ep_stream(), ph, L,
               all * pb, deps(x));
  if (pb != e) {
    const double mine = static_cast<double>(own) * h;
    x = add_memory("moe-combine-cast-back", ph, L, mine * pb, mine * e, 0, deps(x));
  }
  return x;
}

uint32_t StageBuilder::allgather_combine_backward(int32_t L, uint32_t dy, int64_t rows, int64_t own) {
  const double h = static_cast<double>(m_.hidden), e = static_cast<double>(e_);
  const Phase b = Phase::Backward;
  const double all = gathered_tokens(own) * h;
  uint32_t x = dy;
  if (l_.ep > 1)
    x = add_coll("moe-combine-allgather-ep-backward", CollectiveKind::AllGather, GroupKind::EP, ep_stream(), b, L,
                 all * probs_bytes(), deps(x));
  const double r = static_cast<double>(rows) * h * e;
  return add_memory("moe-unpermute-backward", b, L, r, r, 0, deps(x));
}

uint32_t StageBuilder::allgather_dispatch_backward(int32_t L, uint32_t dx, int64_t rows, int64_t own) {
  const double h = static_cast<double>(m_.hidden), e = static_cast<double>(e_);
  const Phase b = Phase::Backward;
  const double all = gathered_tokens(own) * h;
  uint32_t x = add_memory("moe-permute-backward", b, L, static_cast<double>(rows) * h * e, 2 * all * e, 0, deps(dx));
  if (l_.ep > 1)
    x = add_coll("moe-dispatch-reduce-scatter-ep-backward", CollectiveKind::ReduceScatter, GroupKind::EP, ep_stream(),
                 b, L, all * e, deps(x));
  return x;
}

uint32_t StageBuilder::moe_forward(int32_t L, Phase ph, uint32_t in) {
  const int64_t h = m_.hidden;
  const bool swiglu = m_.ffn_type == FfnType::Swiglu;
  const MoeConfig& moe = m_.moe;
  const auto [local, per_expert, fe, own, cap, a2a, gathered, permuted] = moe_shape(L, true);
  uint32_t router = add_gemm("moe-router", ph, L, own, moe.experts, h,
                             deps(router_cast("moe-router-input-cast", ph, L, own, in)), 1, 1.0, act_dtype_);
  router_in_fp32(router);
  router = route_forward(L, ph, router, own);
  uint32_t disp;
  if (l_.moe_allgather) {
    disp = allgather_dispatch(L, ph, router, per_expert * local, own);
  } else {
    disp = add_memory("moe-permute", ph, L, permuted, permuted, 0, deps(dispatch_bookkeeping(L, ph, router, own)));
    if (l_.ep > 1)
      disp = add_coll("moe-dispatch-alltoall", CollectiveKind::AllToAll, GroupKind::EP, ep_stream(), ph, L, a2a,
                      deps(disp));
  }
  // Overlapped (--moe-shared-expert-overlap, the all-to-all dispatcher), the shared experts'
  // up projection is issued while the dispatch is in flight and their down projection while
  // the combine is (token_dispatcher.py: linear_fc1_forward_and_act after the dispatch's
  // all-to-all, linear_fc2_forward after the combine's): issued here, they run beside them.
  const bool shared_beside = moe.shared_experts > 0 && l_.shared_expert_overlap && !l_.moe_allgather;
  const uint32_t shared_act = shared_beside ? shared_expert_up(L, ph, in) : kNone;
  if (moe_tp_gather())
    disp =
        add_coll("moe-dispatch-allgather", CollectiveKind::AllGather, GroupKind::TP, tp_, ph, L, gathered, deps(disp));
  // The experts' linear layers are Transformer Engine Linears fed BF16 (the dispatched
  // tokens, the activation's output): under FP8 each casts its input, and the backward
  // each gradient entering it.
  disp = fp8_expert_padding("fp8-pad-expert-input", ph, L, per_expert * local, disp);
  disp = fp8_cast("fp8-cast-expert-input", ph, L, per_expert * local, h, disp);
  uint32_t up = add_gemm("expert-up", ph, L, per_expert, (swiglu ? 2 : 1) * fe, h, deps(disp), local, 1.0 / cap);
  const double f = static_cast<double>(per_expert * local * fe * e_);
  uint32_t a = add_memory(swiglu ? "expert-swiglu" : "expert-gelu", ph, L, swiglu ? 2 * f : f, f,
                          8.0 * f / static_cast<double>(e_), deps(up));
  a = fp8_cast("fp8-cast-expert-act", ph, L, per_expert * local, fe, a);
  uint32_t comb = add_gemm("expert-down", ph, L, per_expert, h, fe, deps(a), local, 1.0 / cap);
  comb = fp8_expert_padding("fp8-unpad-expert-output", ph, L, per_expert * local, comb);
  if (moe_tp_gather())
    comb = add_coll("moe-combine-reduce-scatter", CollectiveKind::ReduceScatter, GroupKind::TP, tp_, ph, L, gathered,
                    deps(comb));
  uint32_t out = kNone;
  if (l_.moe_allgather) {
    out = allgather_combine(L, ph, comb, per_expert * local, own);
  } else {
    if (l_.ep > 1)
      comb = add_coll("moe-combine-alltoall", CollectiveKind::AllToAll, GroupKind::EP, ep_stream(), ph, L, a2a,
                      deps(comb));
  }
  const uint32_t shared_out = shared_beside ? shared_expert_down(L, ph, shared_act) : kNone;
  if (!l_.moe_allgather)
    out = add_memory("moe-unpermute", ph, L, permuted, permuted / static_cast<double>(moe.top_k), 0,
                     deps(unpermute_bookkeeping(L, ph, comb)));
  if (moe.shared_experts > 0) {
    // Not overlapped, after the routed experts' combine on the same stream (Megatron-Core's
    // MoELayer: output + shared_experts(input)); with the all-gather dispatcher, from the
    // layer's input after the routed path.
    const uint32_t sd = shared_beside
                            ? shared_out
                            : shared_expert_down(L, ph, shared_expert_up(L, ph, l_.shared_expert_overlap ? in : out));
    const double merged = static_cast<double>(own * h * e_);
    out = add_memory("moe-merge", ph, L, 2 * merged, merged, 0, deps(out, sd));
  }
  return out;
}

uint32_t StageBuilder::shared_expert_up(int32_t L, Phase ph, uint32_t from) {
  const bool swiglu = m_.ffn_type == FfnType::Swiglu;
  const int64_t fs = m_.moe.shared_experts * m_.moe.expert_ffn_hidden / t_;
  uint32_t x = moe_sp() ? tp_gather("allgather-shared-expert-input", ph, L, from) : from;
  x = fp8_cast("fp8-cast-shared-expert-input", ph, L, tokens_, m_.hidden, x);
  const uint32_t up = add_gemm("shared-expert-up", ph, L, tokens_, (swiglu ? 2 : 1) * fs, m_.hidden, deps(x));
  const double f = static_cast<double>(tokens_ * fs) * static_cast<double>(e_);
  const uint32_t a = add_memory(swiglu ? "shared-expert-swiglu" : "shared-expert-gelu", ph, L, swiglu ? 2 * f : f, f,
                                8.0 * f / static_cast<double>(e_), deps(up));
  return fp8_cast("fp8-cast-shared-expert-act", ph, L, tokens_, fs, a);
}

uint32_t StageBuilder::shared_expert_down(int32_t L, Phase ph, uint32_t act) {
  const int64_t fs = m_.moe.shared_experts * m_.moe.expert_ffn_hidden / t_;
  const uint32_t down = add_gemm("shared-expert-down", ph, L, tokens_, m_.hidden, fs, deps(act));
  return moe_sp() ? tp_reduce("", "reduce-scatter-shared-expert", ph, L, down) : down;
}

uint32_t StageBuilder::shared_expert_down_backward(int32_t L, uint32_t from, uint32_t& down_wgrad) {
  const bool swiglu = m_.ffn_type == FfnType::Swiglu;
  const int64_t fs = m_.moe.shared_experts * m_.moe.expert_ffn_hidden / t_, h = m_.hidden;
  const Phase b = Phase::Backward;
  uint32_t g = moe_sp() ? tp_gather("allgather-shared-expert-grad", b, L, from) : from;
  g = fp8_cast("fp8-cast-shared-expert-grad", b, L, tokens_, h, g);
  const uint32_t dd = add_gemm("shared-expert-down-dgrad", b, L, tokens_, fs, h, deps(g));
  down_wgrad = add_gemm("shared-expert-down-wgrad", b, L, fs, h, tokens_, deps(g));
  const double f = static_cast<double>(tokens_ * fs) * static_cast<double>(e_);
  const uint32_t ab = add_memory("shared-expert-act-backward", b, L, swiglu ? 3 * f : 2 * f, swiglu ? 2 * f : f,
                                 10.0 * f / static_cast<double>(e_), deps(dd));
  return fp8_cast("fp8-cast-shared-expert-act-grad", b, L, tokens_, (swiglu ? 2 : 1) * fs, ab);
}

uint32_t StageBuilder::shared_expert_up_backward(int32_t L, uint32_t act_grad, uint32_t down_wgrad,
                                                 uint32_t& up_wgrad) {
  const bool swiglu = m_.ffn_type == FfnType::Swiglu;
  const int64_t fs = m_.moe.shared_experts * m_.moe.expert_ffn_hidden / t_, h = m_.hidden;
  const Phase b = Phase::Backward;
  const uint32_t ud = add_gemm("shared-expert-up-dgrad", b, L, tokens_, h, (swiglu ? 2 : 1) * fs, deps(act_grad));
  up_wgrad = add_gemm("shared-expert-up-wgrad", b, L, h, (swiglu ? 2 : 1) * fs, tokens_, deps(act_grad, down_wgrad));
  return moe_sp() ? tp_reduce("", "reduce-scatter-shared-expert-grad", b, L, ud) : ud;
}

// The MLP's backward from the output gradient (sequence-parallel) to the reduced input
// gradient; `wgrad` is set to the op the up projection's weight gradient waits for.
// Dense: `up_wgrad` is set to the up projection's weight-gradient op, which runs beside
// the input gradient's reduction (gemm_then_reduce), its input all-gathered beside the
// data-gradient GEMM.
uint32_t StageBuilder::mlp_backward(int32_t L, uint32_t g, uint32_t& wgrad, uint32_t& up_wgrad) {
  const int64_t h = m_.hidden;
  const bool swiglu = m_.ffn_type == FfnType::Swiglu;
  if (!m_.moe_layer(L)) {
    const uint32_t g8 = fp8_cast("fp8-cast-mlp-grad", Phase::Backward, L, seq_tokens_, m_.hidden, g, 0, true);
    uint32_t down_d =
        ag_then_gemm("allgather-mlp-grad", "mlp-down-dgrad", Phase::Backward, L, g8, m_.ffn_hidden / t_, h);
    uint32_t down_w =
        main_grad_add("grad-accumulate-mlp-down", L, m_.ffn_hidden / t_, h,
                      add_gemm("mlp-down-wgrad", Phase::Backward, L, m_.ffn_hidden / t_, h, tokens_, deps(gathered_)));
    const double f = static_cast<double>(tokens_ * (m_.ffn_hidden / t_) * e_);
    uint32_t act_b =
        add_memory(swiglu ? "swiglu-backward" : "gelu-backward", Phase::Backward, L, swiglu ? 3 * f : 2 * f,
                   swiglu ? 2 * f : f, 10.0 * f / static_cast<double>(e_), deps(down_d));
    if (l_.local_impl && !swiglu) act_b = accessed(act_b, MemAccess::TanhGelu, f / static_cast<double>(e_));
    // Megatron-Core's MLP adds FC1's bias inside the fused activation (skip_bias_add: TE
    // returns the bias unapplied), whose backward hands the same gradient back for the bias
    // (GeLUFunction: `return tmp, tmp`): autograd reduces it over the tokens, a kernel of
    // its own. Megatron-LM's own layer sums it in bias-grad-sums below.
    if (m_.biases && !l_.local_impl && !l_.plan_before_2026_12_05) {
      const double width = swiglu ? 2.0 : 1.0;  // SwiGLU's FC1 has two halves, each with its bias
      const double cols = width * static_cast<double>(m_.ffn_hidden / t_);
      act_b = add_memory("bias-grad-fc1", Phase::Backward, L, width * f, cols * static_cast<double>(e_),
                         width * f / static_cast<double>(e_), deps(act_b));
    }
    act_b = fp8_cast("fp8-cast-mlp-act-grad", Phase::Backward, L, tokens_, mlp_in_, act_b);
    mlp_input_ready_ = act_b;
    wgrad = down_w;
    const uint32_t x2 = tp_gather("allgather-mlp-input-wgrad", Phase::Backward, L, act_b, l_.tp_overlap_fc1_dgrad_sms);
    return gemm_then_reduce("mlp-up-dgrad", "tp-allreduce-mlp-grad", "reduce-scatter-mlp-grad", Phase::Backward, L,
                            deps(act_b), h, mlp_in_, [&] {
                              up_wgrad = main_grad_add(
                                  "grad-accumulate-mlp-up", L, h, mlp_in_,
                                  add_gemm("mlp-up-wgrad", Phase::Backward, L, h, mlp_in_, tokens_, deps(x2, down_w)));
                              return up_wgrad;
                            });
  }
  if (moe_sp()) return moe_backward(L, g, wgrad);
  return tp_reduce("tp-allreduce-mlp-grad", "reduce-scatter-mlp-grad", Phase::Backward, L, moe_backward(L, g, wgrad));
}

uint32_t StageBuilder::moe_backward(int32_t L, uint32_t dy, uint32_t& wgrad) {
  const int64_t h = m_.hidden;
  const bool swiglu = m_.ffn_type == FfnType::Swiglu;
  const MoeConfig& moe = m_.moe;
  const auto [local, per_expert, fe, own, cap, a2a, gathered, permuted] = moe_shape(L, false);
  const double unpermuted = permuted / static_cast<double>(moe.top_k);
  uint32_t comb;
  if (l_.moe_allgather) {
    comb = allgather_combine_backward(L, dy, per_expert * local, own);
  } else {
    comb = add_memory("moe-unpermute-backward", Phase::Backward, L, unpermuted, permuted, 0, deps(dy));
    if (l_.ep > 1)
      comb = add_coll("moe-combine-alltoall-backward", CollectiveKind::AllToAll, GroupKind::EP, ep_stream(),
                      Phase::Backward, L, a2a, deps(comb));
  }
  // Overlapped, the shared experts' backward runs beside the all-to-alls' as their forward
  // did: the down projection's beside the combine's backward, the up projection's beside
  // the dispatch's.
  const bool shared_beside = moe.shared_experts > 0 && l_.shared_expert_overlap && !l_.moe_allgather;
  uint32_t shared_down_w = kNone, shared_up_w = kNone;
  const uint32_t shared_act_grad = shared_beside ? shared_expert_down_backward(L, dy, shared_down_w) : kNone;
  if (moe_tp_gather())
    comb = add_coll("moe-combine-allgather-backward", CollectiveKind::AllGather, GroupKind::TP, tp_, Phase::Backward, L,
                    gathered, deps(comb));
  comb = fp8_expert_padding("fp8-pad-expert-output-grad", Phase::Backward, L, per_expert * local, comb);
  comb = fp8_cast("fp8-cast-expert-grad", Phase::Backward, L, per_expert * local, h, comb);
  uint32_t dd = add_gemm("expert-down-dgrad", Phase::Backward, L, per_expert, fe, h, deps(comb), local, 1.0 / cap);
  uint32_t dw = add_gemm("expert-down-wgrad", Phase::Backward, L, fe, h, per_expert, deps(comb), local, 1.0 / cap);
  const double f = static_cast<double>(per_expert * local * fe * e_);
  uint32_t ab = add_memory("expert-act-backward", Phase::Backward, L, swiglu ? 3 * f : 2 * f, swiglu ? 2 * f : f,
                           10.0 * f / static_cast<double>(e_), deps(dd));
  ab = fp8_cast("fp8-cast-expert-act-grad", Phase::Backward, L, per_expert * local, (swiglu ? 2 : 1) * fe, ab);
  add_gemm("expert-up-dgrad", Phase::Backward, L, per_expert, h, (swiglu ? 2 : 1) * fe, deps(ab), local, 1.0 / cap);
  uint32_t uw = add_gemm("expert-up-wgrad", Phase::Backward, L, h, (swiglu ? 2 : 1) * fe, per_expert, deps(ab, dw),
                         local, 1.0 / cap);
  // The grouped linear's backward is one autograd node (Transformer Engine's
  // _GroupedLinear.backward: the data gradient, then the weight gradient): the nodes after
  // it (the padding's backward, the dispatch's gather and all-to-all backward) are issued
  // once both are queued, so they wait for the weight gradient too.
  uint32_t disp = fp8_expert_padding("fp8-unpad-expert-input-grad", Phase::Backward, L, per_expert * local, uw);
  if (moe_tp_gather())
    disp = add_coll("moe-dispatch-reduce-scatter-backward", CollectiveKind::ReduceScatter, GroupKind::TP, tp_,
                    Phase::Backward, L, gathered, deps(disp));
  if (l_.moe_allgather) {
    disp = allgather_dispatch_backward(L, disp, per_expert * local, own);
  } else {
    if (l_.ep > 1)
      disp = add_coll("moe-dispatch-alltoall-backward", CollectiveKind::AllToAll, GroupKind::EP, ep_stream(),
                      Phase::Backward, L, a2a, deps(disp));
  }
  const uint32_t shared_grad =
      shared_beside ? shared_expert_up_backward(L, shared_act_grad, shared_down_w, shared_up_w) : kNone;
  if (!l_.moe_allgather) {
    disp = add_memory("moe-permute-backward", Phase::Backward, L, permuted, permuted, 0, deps(disp));
    disp = permute_bookkeeping_backward(L, disp, own);
  }
  disp = route_backward(L, disp, own);
  uint32_t rd = add_gemm("moe-router-dgrad", Phase::Backward, L, own, h, moe.experts, deps(disp), 1, 1.0, act_dtype_);
  router_in_fp32(rd);
  rd = router_cast("moe-router-grad-cast", Phase::Backward, L, own, rd);
  uint32_t rw =
      add_gemm("moe-router-wgrad", Phase::Backward, L, moe.experts, h, own, deps(disp, uw), 1, 1.0, act_dtype_);
  router_in_fp32(rw);
  uint32_t out = rd;
  wgrad = rw;
  if (moe.shared_experts > 0) {
    // Not overlapped, autograd reaches them after the routed path's backward (the add's
    // other branch) on the same stream.
    uint32_t sud = shared_grad;
    if (!shared_beside) {
      const uint32_t ab = shared_expert_down_backward(L, l_.shared_expert_overlap ? dy : rd, shared_down_w);
      sud = shared_expert_up_backward(L, ab, shared_down_w, shared_up_w);
    }
    const double merged = static_cast<double>(own * h * e_);
    out = add_memory("moe-merge-backward", Phase::Backward, L, 2 * merged, merged, 0, deps(rd, sud));
    wgrad = add_memory("moe-wgrad-join", Phase::Backward, L, 0, 0, 0, deps(rw, shared_up_w));
  }
  mlp_input_ready_ = out;
  return out;
}

uint8_t StageBuilder::ep_stream() {
  if (ep_ == 0xff) ep_ = p_.stream("ep");
  return ep_;
}

}  // namespace clustersim
