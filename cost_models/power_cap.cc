#include "cost_models/power_cap.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <vector>

namespace clustersim {

double expected_max_normal(int64_t n) {
  if (n <= 1) return 0;
  // E[max] = ∫ z · n φ(z) Φ(z)^(n−1) dz, by the trapezoid rule on [−8, 8] (the integrand
  // is below 1e-13 outside it for any n up to 2^31).
  constexpr int kSteps = 8000;
  constexpr double lo = -8, hi = 8, h = (hi - lo) / kSteps;
  const double log_n = std::log(static_cast<double>(n));
  double sum = 0;
  for (int i = 0; i <= kSteps; ++i) {
    const double z = lo + h * i;
    const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
    if (cdf <= 0) continue;
    const double log_f =
        log_n - 0.5 * z * z - 0.5 * std::log(2 * std::numbers::pi) + static_cast<double>(n - 1) * std::log(cdf);
    sum += (i == 0 || i == kSteps ? 0.5 : 1.0) * z * std::exp(log_f);
  }
  return sum * h;
}

bool power_model_active(const GpuSpec& gpu, const ComputeProfile& p) {
  return p.power_cap && gpu.power_limit_w > gpu.idle_power_w && gpu.capped_bf16_flops > 0;
}

// Board power over a window of busy time T: the idle floor, plus each kernel's energy. A
// math-bound kernel spends an energy per tensor FLOP that falls with the clock, as
// s_i(x)^-δ with s_i(x) = a_i/x + 1 − a_i its time at clock x over its burst time; a
// memory-bound one draws the streaming power for its bytes' time. The SM clock x (a
// fraction of boost) settles where the average meets the limit:
// E(x) + P_idle·T(x) = P_limit·T(x), with T(x) = Σ t_i·s_i(x) + gaps.
double PowerMix::add(const Op& op, double t, double gap_s, const GpuSpec& gpu, const ComputeProfile& p) {
  if (t <= 0 || op.fixed_seconds > 0 || !power_model_active(gpu, p)) return 0;
  // A GEMM planned beside an SM-holding kernel runs its FLOPs (the same energy) over the
  // userbuffers slowdown's longer time: the window's power is the lower for it.
  const double t_run =
      op.beside_sms && op.kind == OpKind::Gemm ? t * beside_userbuffers(op.kind, gpu, p, op.held_sms, op.sm_margin) : t;
  // The job's slowest board sets the pace: its capped rate, the nominal one times
  // slowest_board, is a higher energy per FLOP under the same limit.
  const double joule_per_flop = (gpu.power_limit_w - gpu.idle_power_w) / (gpu.capped_bf16_flops * p.slowest_board);
  const double stream_w = std::max(0.0, gpu.stream_power_w - gpu.idle_power_w);
  const double bytes = static_cast<double>(op.bytes_read + op.bytes_written);
  const double t_bytes = bytes / (gpu.hbm_bandwidth * p.memory_efficiency);
  double t_math = 0, a = 0, e_flop = joule_per_flop, delta = 0;
  if (op.kind == OpKind::Gemm || op.kind == OpKind::Attention) {
    const bool fp8 = (op.dtype == DType::FP8 && gpu.peak_fp8 > 0) || op.dtype == DType::INT8;
    const double peak = gpu.peak_flops(op.dtype);
    const double eff = op.kind == OpKind::Attention ? p.attention_efficiency * (fp8 ? p.fp8_attention_efficiency : 1.0)
                       : fp8                        ? p.fp8_gemm_efficiency
                                                    : p.gemm_efficiency;
    t_math = op.flops / (peak * eff);
    a = op.kind == OpKind::Attention ? p.clock_share_attention : p.clock_share_gemm;
    // Energy per FLOP follows the tensor cores' rate: FP8 measured apart, other types by
    // their peak against BF16's.
    e_flop *= fp8 ? gpu.fp8_energy_ratio : gpu.peak_bf16 / peak;
    if (op.kind == OpKind::Attention) e_flop *= p.attention_energy_ratio[backward_kernel(op) ? 1 : 0];
    // Those energies were measured back to back at the cap, on the 8192^3 product and on
    // cuDNN's causal attention over 8 x 32 heads of 4,096 x 128, each at the clock the cap
    // left it: the anchor's time there over its burst time, s_ref = E / ((P_limit − P_idle)·t).
    // At the boost clock a FLOP costs boost_energy_ratio times that; between the two, the
    // energy falls as s(x)^-δ with the kernel's slowdown, δ = ln ratio / ln s_ref.
    Op anchor = op;
    anchor.beside_sms = false;
    anchor.group_experts = 0, anchor.group_top_k = 0, anchor.group_tokens = 0;  // one plain product
    if (op.kind == OpKind::Gemm) {
      anchor.m = anchor.n = anchor.k = 8192;
      anchor.batch = 1;
      anchor.flops = 2.0 * 8192.0 * 8192.0 * 8192.0;
      anchor.bytes_read = 2 * 8192LL * 8192 * dtype_bits(op.dtype) / 8;
      anchor.bytes_written = 8192LL * 8192 * 2;
    } else {  // the same kernel (forward or backward, its type) at the measured shape
      anchor.batch = 8;
      anchor.heads = anchor.kv_heads = 32;
      anchor.q_len = anchor.kv_len = 4096;
      anchor.head_dim = 128;
      anchor.causal = true;
      anchor.dropout = false;
      const bool bwd = backward_kernel(op);
      anchor.flops = attention_flops(anchor) * (bwd ? 2.5 : 1.0);
      const int64_t q = 8LL * 32 * 4096 * 128 * dtype_bits(op.dtype) / 8;
      anchor.bytes_read = bwd ? 5 * q : 3 * q;
      anchor.bytes_written = bwd ? 3 * q : q;
    }
    const double t_anchor = anchor.flops > 0 ? compute_seconds(anchor, gpu, p) : 0;
    if (t_anchor > 0) {
      // A GEMM draws its power for as long as its SMs are busy, whatever rate its tiles
      // reach: the energy per FLOP measured on the 8192^3 product, times this one's burst
      // time per FLOP over that product's. Twelve Llama layer shapes on an H100 settle under
      // the cap at 0.856-0.866 of their own burst rates in BF16, burst rates 754-822 TFLOP/s
      // (0.835-0.866 in FP8), not at one rate (calibrate/measurements/power-h100-2026-12-05).
      const double s_ref = e_flop * anchor.flops / ((gpu.power_limit_w - gpu.idle_power_w) * t_anchor);
      if (op.kind == OpKind::Gemm && op.flops > 0)
        e_flop *= std::clamp((t / op.flops) / (t_anchor / anchor.flops), 0.5, 1.5);
      const double r = p.boost_energy_ratio[op.kind == OpKind::Attention ? 1 : 0];
      if (s_ref > 1 + 1e-9 && r > 1) {
        e_flop *= r;
        // rounded, so that kernels of one kind share one term of the mix (PowerMix::add_clocked)
        delta = std::round(std::log(r) / std::log(s_ref) * 1e9) / 1e9;
      }
    }
  }
  // Dropout's Philox draws: energy per element drawn, whichever way the kernel is bound.
  if (op.kind == OpKind::Attention && attention_dropout_seconds(op, gpu, p) > 0)
    energy += p.attention_dropout_energy[backward_kernel(op) ? 1 : 0] * attention_dropout_scores(op);
  if (op.kind == OpKind::Memory && op.access == MemAccess::RandomMask && p.dropout_rng_ops_per_element > 0)
    energy += p.dropout_rng_energy * static_cast<double>(op.m);
  // A fused attention backward's two small kernels stream at HBM's pace inside its time.
  const double t_aux = std::min(t_run, attention_aux_in_op(op, gpu, p));
  if (t_aux > 0) energy += stream_w * attention_backward_aux_bytes(op) / (gpu.hbm_bandwidth * p.memory_efficiency);
  if (t_math > 0 && t_math >= t_bytes) {
    // math-bound: its clock-bound share stretches, its energy at the boost clock falls with it
    if (delta > 0)
      add_clocked(a, delta, e_flop * op.flops);
    else
      energy += e_flop * op.flops;
  } else {
    energy += stream_w * std::min(t, t_bytes);  // memory-bound: HBM sets its pace, not the clock
    a = 0;
  }
  bound += (t_run - t_aux) * a;
  fixed += (t_run - t_aux) * (1 - a) + t_aux + gap_s;
  return a;
}

void PowerMix::add_clocked(double a, double delta, double e) {
  Clocked* nearest = nullptr;
  for (Clocked& c : clocked) {
    if (c.energy == 0 || (c.a == a && c.delta == delta)) {
      c.a = a;
      c.delta = delta;
      c.energy += e;
      return;
    }
    if (c.a == a && (!nearest || std::fabs(c.delta - delta) < std::fabs(nearest->delta - delta))) nearest = &c;
  }
  if (nearest) {  // more kinds than slots: the nearest power of the same share takes it
    nearest->energy += e;
    return;
  }
  clocked.back().energy += e;
}

double PowerMix::energy_at(double x) const {
  double e = energy;
  for (const Clocked& c : clocked)
    if (c.energy > 0) e += c.energy * std::pow(c.a / x + 1 - c.a, -c.delta);
  return e;
}

PowerMix& PowerMix::operator+=(const PowerMix& o) {
  energy += o.energy;
  bound += o.bound;
  fixed += o.fixed;
  for (const Clocked& c : o.clocked)
    if (c.energy > 0) add_clocked(c.a, c.delta, c.energy);
  return *this;
}

PowerMix PowerMix::scaled(double k) const {
  PowerMix m{energy * k, bound * k, fixed * k, clocked};
  for (Clocked& c : m.clocked) c.energy *= k;
  return m;
}

double power_clock(const PowerMix& mix, const GpuSpec& gpu, const ComputeProfile& p) {
  if (!power_model_active(gpu, p) || mix.bound <= 0) return 1.0;
  const double budget = gpu.power_limit_w - gpu.idle_power_w;
  // Over the limit at clock x: the energy falls with x, the time grows; the excess falls
  // monotonically, so the highest clock that meets the limit is found by bisection.
  auto over = [&](double x) { return mix.energy_at(x) - budget * (mix.bound / x + mix.fixed); };
  if (over(1.0) <= 0) return 1.0;
  double lo = 0.2, hi = 1.0;
  if (over(lo) > 0) return lo;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (over(mid) > 0 ? hi : lo) = mid;
  }
  return lo;
}

double power_capped_seconds(double burst_s, const PowerMix& mix, const GpuSpec& gpu, const ComputeProfile& p) {
  return burst_s + mix.bound * (1.0 / power_clock(mix, gpu, p) - 1.0);
}

double apply_power_cap(const std::vector<Op>& ops, std::vector<double>& seconds, double gap_s, const GpuSpec& gpu,
                       const ComputeProfile& p) {
  if (!power_model_active(gpu, p)) return 1.0;
  constexpr size_t kWindows = 4;  // one per Phase
  std::array<PowerMix, kWindows> mix{};
  std::vector<double> share(ops.size(), 0.0);
  for (size_t i = 0; i < ops.size(); ++i)
    share[i] = mix[static_cast<size_t>(ops[i].phase)].add(ops[i], seconds[i], gap_s, gpu, p);
  std::array<double, kWindows> clock{};
  double lowest = 1.0;
  for (size_t w = 0; w < kWindows; ++w) {
    clock[w] = power_clock(mix[w], gpu, p);
    lowest = std::min(lowest, clock[w]);
  }
  for (size_t i = 0; i < ops.size(); ++i)
    if (share[i] > 0) seconds[i] *= share[i] / clock[static_cast<size_t>(ops[i].phase)] + 1 - share[i];
  return lowest;
}

}  // namespace clustersim
