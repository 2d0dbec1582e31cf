// StageBuilder (plan/stage_builder.h): Megatron-Core's multi-token prediction block.
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

// ---- multi-token prediction (Megatron-Core's MultiTokenPredictionBlock) ------------

// On the last stage, after the last layer, each module k (its layer numbered layers + k):
// the next token's embedding looked up (the stage's own copy of the table, its partial
// sums reduced over TP), the two norms (that embedding's and the hidden state's), their
// concatenation projected back to h (a column-parallel TE Linear: input gathered under
// SP, output gathered along its width and the rank's tokens taken again), a transformer
// layer like the model's last, and its own final norm, logits over the shared output
// layer and loss, which joins the model's loss (MTPLossAutoScaler). docs/model.md.
uint32_t StageBuilder::mtp_forward(uint32_t x) {
  if (m_.mtp_layers == 0) return x;
  const double act = act_bytes(), e = static_cast<double>(e_);
  const int64_t h = m_.hidden;
  uint32_t hid = x, losses = x;
  for (int64_t k = 0; k < m_.mtp_layers; ++k) {
    const auto L = static_cast<int32_t>(m_.layers + k);
    uint32_t emb = add_memory("mtp-embedding", Phase::Forward, L, full_act_bytes() + static_cast<double>(tokens_ * 8),
                              full_act_bytes(), 0, deps(hid));
    emb = tp_reduce("mtp-embedding-allreduce", "mtp-embedding-reduce-scatter", Phase::Forward, L, emb);
    uint32_t c = add_memory("mtp-norms", Phase::Forward, L, 2 * act, 2 * act, 16.0 * act / e, deps(emb, hid));
    c = add_memory("mtp-concat", Phase::Forward, L, 2 * act, 2 * act, 0, deps(c));
    c = sp_gemm("allgather-mtp-proj-input", "mtp-proj", Phase::Forward, L, c, h / t_, 2 * h);
    c = latent_gather("mtp-proj-allgather", "mtp-proj-cat", "mtp-proj-scatter", Phase::Forward, L, c, h, h);
    const uint32_t g = zero3_gather(Phase::Forward, L, c);
    hid = layer_forward(L, g == c ? c : join(c, g), Phase::Forward);
    losses = logits_and_loss(hid, L, "mtp-");
  }
  return join(x, losses);
}

// The modules' backward, last first, from the main model's final-norm gradient `g`: each
// module's loss, output layer (its weight gradient into the shared one's), final norm,
// layer, projection, norms and embedding; the hidden state's gradient added into the
// main one's.
uint32_t StageBuilder::mtp_backward(uint32_t g, bool last_micro_batch) {
  if (m_.mtp_layers == 0) return g;
  const double act = act_bytes(), e = static_cast<double>(e_);
  const int64_t h = m_.hidden;
  const Phase b = Phase::Backward;
  uint32_t d = g;
  for (int64_t k = m_.mtp_layers - 1; k >= 0; --k) {
    const auto L = static_cast<int32_t>(m_.layers + k);
    const double lg = static_cast<double>(tokens_ * vocab_local_);
    const bool fused = l_.fused_cross_entropy;
    d = add_memory("mtp-cross-entropy-backward", b, L, lg * (fused ? 4.0 : 8.0), lg * ((fused ? 0.0 : 4.0) + e),
                   3.0 * lg, deps(d));
    if (!fused) d = accessed(d, MemAccess::BroadcastLoop, lg);
    const uint32_t dg = add_gemm("mtp-logits-dgrad", b, L, tokens_, h, vocab_local_, deps(d), 1, 1.0, act_dtype_);
    const uint32_t x = tp_gather("allgather-mtp-logits-input-wgrad", b, L, d);
    const uint32_t w =
        main_grad_add("grad-accumulate-logits", L, vocab_local_, h,
                      add_gemm("mtp-logits-wgrad", b, L, vocab_local_, h, tokens_, deps(d, x), 1, 1.0, act_dtype_));
    d = tp_reduce("mtp-logits-grad-allreduce", "mtp-logits-grad-reduce-scatter", b, L, dg);
    d = add_memory("mtp-final-layernorm-backward", b, L, 2 * act, act, 10.0 * act / e, deps(d, w));
    d = layer_backward(L, d, last_micro_batch);
    // The projection: the width gather and the rank's tokens undone, its data gradient
    // reduced over TP, its weight gradient on the input gathered again.
    const uint32_t pj = width_gather_backward("mtp-proj-grad-allgather", "mtp-proj-grad-split", L, d, h, h);
    uint32_t pw = kNone;
    const uint32_t pd = column_backward("mtp-proj", L, pj, 2 * h, h / t_, kNone, pw);
    // The two norms' backward; the embedding's gradient scattered into the stage's table.
    uint32_t nb = add_memory("mtp-norms-backward", b, L, 6 * act, 4 * act, 24.0 * act / e, deps(pd, pw));
    const uint32_t eg = tp_gather("mtp-embedding-grad-allgather", b, L, nb);
    const double table = static_cast<double>(vocab_local_ * h);
    const double ge = dtype_bits(grad_dtype_) / 8.0;
    const uint32_t emb = add_memory("mtp-embedding-backward", b, L, 2 * full_act_bytes() + table * (e + ge),
                                    full_act_bytes() + table * (e + ge), 0, deps(eg));
    if (last_micro_batch) add_grads(L, static_cast<double>(2 * h * (h / t_) + 3 * h) + table, 0, emb);
    d = add_memory("mtp-hidden-grad-add", b, L, 2 * act, act, act / e, deps(nb, emb));
  }
  return join(g, d);
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

// A multi-token prediction module's own weights beside its layer: the projection (2h x
// h over TP) and its three norms (the embedding's copy it reads: embedding_params).
double StageBuilder::mtp_extra_params() const {
  const double h = static_cast<double>(m_.hidden);
  return 2.0 * h * h / static_cast<double>(t_) + 3.0 * h;
}

double StageBuilder::embedding_params_local() const {
  double p = 0;
  for (int64_t c = 0; c < l_.virtual_stages; ++c) p += embedding_params(first_virtual(c), last_virtual(c));
  return p;
}

}  // namespace clustersim
