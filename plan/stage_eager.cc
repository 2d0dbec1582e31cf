// StageBuilder (plan/stage_builder.h): a layer as plain PyTorch runs it under torch.autocast.
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

uint32_t StageBuilder::eager_weight_cast(const char* name, Phase ph, int32_t L, double params, uint32_t after) {
  // FSDP with a 16-bit param_dtype hands the layers 16-bit weights: autocast has nothing
  // to cast.
  if (l_.zero_stage >= 3 && l_.fsdp_param_dtype != DType::FP32) return after;
  return add_memory(name, ph, L, 4.0 * params, static_cast<double>(e_) * params, 0, deps(after));
}

// A linear layer's weight as its GEMM takes it. Under autocast, the FP32 weight's BF16
// copy (above). Under Transformer Engine's fp8_autocast (model.dtype fp8), te.Linear
// casts the weight to FP8 with its transpose for the dgrad at every forward (nothing
// tells it a later micro-batch could reuse the first one's cast), reading the weight in
// the type the layer holds it.
uint32_t StageBuilder::eager_linear_weight(const char* autocast_name, const char* te_name, Phase ph, int32_t L,
                                           int64_t in, int64_t out, uint32_t after) {
  if (!l_.fp8) return eager_weight_cast(autocast_name, ph, L, linear_params(in, out), after);
  const double held = l_.zero_stage >= 3 ? dtype_bits(l_.fsdp_param_dtype) / 8.0 : 4.0;
  return fp8_cast(te_name, ph, L, out, in, after, held);
}

uint32_t StageBuilder::eager_grad_accumulate(const char* name, int32_t L, double params, uint32_t after) {
  const double cast_r = static_cast<double>(e_) * params, cast_w = 4.0 * params;
  const uint32_t op = mb_ == 0 ? add_memory(name, Phase::Backward, L, cast_r, cast_w, 0, deps(after))
                               : add_memory(name, Phase::Backward, L, cast_r + 8.0 * params, cast_w + 4.0 * params,
                                            params, deps(after));
  return accessed(op, MemAccess::DynamicCast, params);
}

uint32_t StageBuilder::eager_bias_grad(const char* name, int32_t L, int64_t width, uint32_t after) {
  if (!m_.biases) return after;
  return add_memory(name, Phase::Backward, L, static_cast<double>(tokens_ * width * e_),
                    static_cast<double>(width * e_), static_cast<double>(tokens_ * width), deps(after));
}

double StageBuilder::linear_params(int64_t in, int64_t out) const {
  return static_cast<double>(in * out + (m_.biases ? out : 0));
}

// An FP32 norm and the cast of its output for the linear it feeds.
uint32_t StageBuilder::eager_norm(const char* norm, const char* cast, Phase ph, int32_t L, uint32_t after) {
  const double a32 = eager_act32();
  const uint32_t n = add_memory(norm, ph, L, a32, a32, 8.0 * static_cast<double>(tokens_ * m_.hidden), deps(after));
  return add_memory(cast, ph, L, a32, eager_act16(), 0, deps(n));
}

// A linear's backward (`name` in -> out): the input gradient from `dy`, the weight
// gradient after the previous linear's accumulation `acc`, its bias gradient and its
// FP32 accumulation, which `acc` moves on to. Returns the input gradient.
uint32_t StageBuilder::eager_linear_backward(const std::string& name, int32_t L, int64_t in, int64_t out, uint32_t dy,
                                             uint32_t& acc) {
  // te.Linear's backward casts the incoming gradient to FP8 with its transpose (wgrad), and
  // with a bias the same kernel sums the bias gradient (grad_output_preprocess:
  // fp8_cast_transpose_bgrad_fused), so no reduction of its own follows.
  dy = fp8_cast(("te-cast-" + name + "-grad").c_str(), Phase::Backward, L, tokens_, out, dy);
  const uint32_t dgrad = add_gemm((name + "-dgrad").c_str(), Phase::Backward, L, tokens_, in, out, deps(dy));
  uint32_t w = add_gemm((name + "-wgrad").c_str(), Phase::Backward, L, in, out, tokens_, deps(dy, acc));
  if (!l_.fp8) w = eager_bias_grad((name + "-bias-grad").c_str(), L, out, w);
  acc = eager_grad_accumulate(("grad-accumulate-" + name).c_str(), L, linear_params(in, out), w);
  return dgrad;
}

// A norm's backward from its linear's BF16 input gradient: cast to FP32, the input
// gradient, the weight gradient, then the residual stream's sum (after `also`).
uint32_t StageBuilder::eager_norm_backward(const char* cast, const char* norm, const char* weight, const char* residual,
                                           int32_t L, uint32_t dx, uint32_t also, uint32_t also2) {
  const double a32 = eager_act32(), th = static_cast<double>(tokens_ * m_.hidden);
  uint32_t x =
      accessed(add_memory(cast, Phase::Backward, L, eager_act16(), a32, 0, deps(dx)), MemAccess::DynamicCast, th);
  x = add_memory(norm, Phase::Backward, L, 2 * a32, a32, 10.0 * th, deps(x));
  x = add_memory(weight, Phase::Backward, L, 2 * a32, 0, 0, deps(x));
  return add_memory(residual, Phase::Backward, L, 2 * a32, a32, th, deps(x, also, also2));
}

// Rotary embedding as the reference writes it (x·cos + cat(-x2, x1)·sin) on [b, h, s, d]
// views of the QKV output: five kernels over q and over k, strided and broadcast, so not
// vectorized. Their kernels' sum on one H200 is what a copy of 29 elements per element
// takes forward and 33.5 backward (calibrate/measurements/rope-h200-2026-12-03), where
// their bytes alone would be about 10; the op carries those copy-rate passes.
uint32_t StageBuilder::eager_rotary(Phase ph, int32_t L, uint32_t after) {
  if (m_.learned_positions) return after;
  const double elems = static_cast<double>(tokens_ * (m_.heads + m_.kv_heads) * m_.head_dim());
  const bool backward = ph == Phase::Backward && !recomputing_;
  return add_memory(backward ? "rotary-backward" : "rotary", ph, L, (backward ? 18.5 : 16.0) * elems * e_,
                    (backward ? 15.0 : 13.0) * elems * e_, 3.0 * elems, deps(after));
}

// flash-attn's bert_padding around its variable-length kernel, as MPT's flash path calls
// it (docs/model.md, "Padding around the kernel"). unpad_input on q, k and v: the mask's
// sum, nonzero and max().item(), two host synchronizations a call, then a row gather
// (index_first_axis); pad_input on the output: zeros, then index_put of the rows. Their
// backwards: zeros and a scatter_ of each gradient, a row gather of the output's.
double StageBuilder::unpad_qkv_bytes() const {
  return static_cast<double>(tokens_ * (m_.heads + 2 * m_.kv_heads) * m_.head_dim() * e_);
}

uint32_t StageBuilder::unpad_qkv(Phase ph, int32_t L, uint32_t after) {
  if (!l_.attention_unpad) return after;
  const uint32_t mask = host_wait("unpad-mask", ph, L, after, 6);
  return add_memory("unpad-qkv", ph, L, unpad_qkv_bytes(), unpad_qkv_bytes(), 0, deps(mask));
}

uint32_t StageBuilder::pad_output(Phase ph, int32_t L, uint32_t after) {
  if (!l_.attention_unpad) return after;
  const double o = pad_out_bytes();
  return accessed(add_memory("pad-output", ph, L, o, 2 * o, 0, deps(after)), MemAccess::IndexPut,
                  o / static_cast<double>(e_));
}

uint32_t StageBuilder::layer_forward_eager(int32_t L, uint32_t x, Phase ph) {
  const int64_t h = m_.hidden;
  const double a32 = eager_act32(), a16 = eager_act16();
  const int64_t attn_out = m_.heads * m_.head_dim();
  const int64_t f = m_.ffn_hidden;
  // Recomputed under TorchTitan's op policy (op_policy_), the matmuls and the attention
  // kernel are saved but every second matmul of the layer, counted in the order the
  // Llama block calls them (wq, wk, wv, wo, w1, w3, w2): wk, wo and SwiGLU's w3 run
  // again, with every op that is no matmul.
  const bool op_policy = recomputing_ && op_policy_;
  // Under model.dtype fp8 each linear is a te.Linear: its BF16 input is cast to FP8 with
  // the transpose its wgrad reads (fp8_cast), and its weight as eager_linear_weight says.
  uint32_t n1 = eager_norm("layernorm-1", "autocast-cast-qkv-input", ph, L, x);
  n1 = fp8_cast("te-cast-qkv-input", ph, L, tokens_, h, n1);
  const int64_t qkv_width = op_policy ? m_.kv_heads * m_.head_dim() / t_ : qkv_;  // wk alone
  uint32_t qkv =
      add_gemm("qkv", ph, L, tokens_, qkv_width, h,
               deps(eager_linear_weight("autocast-cast-qkv-weight", "te-cast-qkv-weight", ph, L, h, qkv_, n1)));
  qkv = unpad_qkv(ph, L, eager_rotary(ph, L, qkv));
  uint32_t at =
      pad_output(ph, L, op_policy ? qkv : add_attention("attention", ph, L, m_.seq_len, m_.seq_len, deps(qkv)));
  at = fp8_cast("te-cast-proj-input", ph, L, tokens_, attn_out, at);
  uint32_t proj =
      add_gemm("attn-proj", ph, L, tokens_, h, attn_out,
               deps(eager_linear_weight("autocast-cast-proj-weight", "te-cast-proj-weight", ph, L, attn_out, h, at)));
  const double th = static_cast<double>(tokens_ * h);
  uint32_t r1 =
      accessed(add_memory("residual-add-attn", ph, L, a32 + a16, a32, th, deps(proj, x)), MemAccess::DynamicCast, th);
  uint32_t n2 = eager_norm("layernorm-2", "autocast-cast-mlp-input", ph, L, r1);
  n2 = fp8_cast("te-cast-up-input", ph, L, tokens_, h, n2);
  const bool gated = m_.ffn_type == FfnType::Swiglu;
  uint32_t up =
      op_policy && !gated
          ? n2  // the up projection is the fifth matmul, kept
          : add_gemm("mlp-up", ph, L, tokens_, op_policy ? mlp_in_ / 2 : mlp_in_, h,  // w3 alone under the policy
                     deps(eager_linear_weight("autocast-cast-up-weight", "te-cast-up-weight", ph, L, h, mlp_in_, n2)));
  const double f16 = static_cast<double>(tokens_ * f * e_);
  uint32_t act;
  if (gated) {
    act = add_memory("silu", ph, L, f16, f16, 4.0 * f16 / static_cast<double>(e_), deps(up));
    act = add_memory("swiglu-mul", ph, L, 2 * f16, f16, f16 / static_cast<double>(e_), deps(act));
  } else {
    act = add_memory("gelu", ph, L, f16, f16, 8.0 * f16 / static_cast<double>(e_), deps(up));
  }
  // PyTorch's non-reentrant checkpoint stops recomputing once every tensor the backward
  // saved is back (torch.utils.checkpoint's early stop, on by default): the last is the
  // down projection's input, so neither that plain linear's GEMM nor the residual add
  // after it runs again. A te.Linear (FP8) is one autograd function whose saved tensors
  // come at its end, so its GEMM does; the reentrant checkpoint reruns the layer whole.
  if (recomputing_ && !l_.fp8 && !l_.checkpoint_reentrant) return act;
  act = fp8_cast("te-cast-down-input", ph, L, tokens_, f, act);
  uint32_t down =
      add_gemm("mlp-down", ph, L, tokens_, h, f,
               deps(eager_linear_weight("autocast-cast-down-weight", "te-cast-down-weight", ph, L, f, h, act)));
  return accessed(add_memory("residual-add-mlp", ph, L, a32 + a16, a32, th, deps(down, r1)), MemAccess::DynamicCast,
                  th);
}

// One layer's backward from the FP32 gradient of its output; returns the FP32 gradient
// of its input.
uint32_t StageBuilder::layer_backward_eager(int32_t L, uint32_t g, bool last_micro_batch) {
  const int64_t h = m_.hidden;
  const double a32 = eager_act32(), a16 = eager_act16();
  const int64_t attn_out = m_.heads * m_.head_dim();
  const int64_t f = m_.ffn_hidden;
  const double f16 = static_cast<double>(tokens_ * f * e_);
  // MLP.
  uint32_t acc = kNone;
  uint32_t c = add_memory("autocast-cast-mlp-grad", Phase::Backward, L, a32, a16, 0, deps(g));
  const uint32_t dd = eager_linear_backward("mlp-down", L, f, h, c, acc);
  uint32_t ab;
  if (m_.ffn_type == FfnType::Swiglu) {
    ab = add_memory("swiglu-mul-backward", Phase::Backward, L, 4 * f16, 2 * f16, 2 * f16 / static_cast<double>(e_),
                    deps(dd));
    ab = add_memory("silu-backward", Phase::Backward, L, 2 * f16, f16, 6 * f16 / static_cast<double>(e_), deps(ab));
    ab = add_memory("swiglu-grad-cat", Phase::Backward, L, 2 * f16, 2 * f16, 0, deps(ab));
  } else {
    ab = add_memory("gelu-backward", Phase::Backward, L, 2 * f16, f16, 10 * f16 / static_cast<double>(e_), deps(dd));
  }
  const uint32_t ud = eager_linear_backward("mlp-up", L, h, mlp_in_, ab, acc);
  const uint32_t r = eager_norm_backward("autocast-cast-mlp-input-grad", "layernorm-2-backward",
                                         "layernorm-2-weight-grad", "residual-grad-add-mlp", L, ud, kNone);
  // Attention.
  c = add_memory("autocast-cast-attn-grad", Phase::Backward, L, a32, a16, 0, deps(r));
  uint32_t pd = eager_linear_backward("attn-proj", L, attn_out, h, c, acc);
  if (l_.attention_unpad)
    pd = add_memory("pad-output-backward", Phase::Backward, L, pad_out_bytes(), pad_out_bytes(), 0, deps(pd));
  uint32_t at = add_attention("attention-backward", Phase::Backward, L, m_.seq_len, m_.seq_len, deps(pd));
  if (l_.attention_unpad)
    at = accessed(
        add_memory("unpad-qkv-backward", Phase::Backward, L, unpad_qkv_bytes(), 2 * unpad_qkv_bytes(), 0, deps(at)),
        MemAccess::Scatter, unpad_qkv_bytes() / static_cast<double>(e_));
  at = eager_rotary(Phase::Backward, L, at);
  const double qkv16 = static_cast<double>(tokens_ * qkv_ * e_);
  at = add_memory("qkv-grad-cat", Phase::Backward, L, qkv16, qkv16, 0, deps(at));
  const uint32_t qd = eager_linear_backward("qkv", L, h, qkv_, at, acc);
  g = eager_norm_backward("autocast-cast-qkv-input-grad", "layernorm-1-backward", "layernorm-1-weight-grad",
                          "residual-grad-add-attn", L, qd, r, acc);
  if (last_micro_batch || (l_.zero_stage >= 3 && !l_.zero3_grad_once)) add_grads(L, layer_dense_params(L), 0, g);
  return g;
}

}  // namespace clustersim
