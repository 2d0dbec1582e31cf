// StageBuilder (plan/stage_builder.h): Megatron-Core's multi-token prediction block.
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

// A multi-token prediction module's own weights beside its layer: the projection (2h x
// h over TP) and its three norms (the embedding's copy it reads: embedding_params).
double StageBuilder::mtp_extra_params() const {
  const double h = static_cast<double>(m_.hidden);
  return 2.0 * h * h / static_cast<double>(t_) + 3.0 * h;
}

}  // namespace clustersim
