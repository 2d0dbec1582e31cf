#include "cost_models/compute.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace clustersim {

double gemm_wave_efficiency(const Op& op, const GpuSpec& gpu, const ComputeProfile& p) {
  if (gpu.sm_count <= 0) return 1.0;
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const int64_t tiles = ceil_div(op.m, p.gemm_tile_m) * ceil_div(op.n, p.gemm_tile_n) * std::max<int64_t>(1, op.batch);
  const int64_t waves = ceil_div(tiles, gpu.sm_count);
  return static_cast<double>(tiles) / static_cast<double>(waves * gpu.sm_count);
}

namespace {

double roofline(const Op& op, const GpuSpec& gpu, double math_eff, double mem_eff, double wave) {
  const double bytes = static_cast<double>(op.bytes_read + op.bytes_written);
  const double peak = op.kind == OpKind::Memory ? gpu.peak_fp32 : gpu.peak_flops(op.dtype);
  return std::max(op.flops / (peak * math_eff * wave), bytes / (gpu.hbm_bandwidth * mem_eff));
}

double gemm_measured(const Op& op, const GpuSpec& gpu, const ComputeProfile& p, const std::vector<GemmPoint>& pts) {
  // Ratio of measured to ideal (efficiency 1, with wave quantization) at the nearest
  // grid points in log2(m, n, k), inverse-distance weighted.
  const double lm = std::log2(static_cast<double>(op.m)), ln = std::log2(static_cast<double>(op.n)),
               lk = std::log2(static_cast<double>(op.k));
  std::vector<std::pair<double, double>> near;  // (distance², log ratio)
  for (const GemmPoint& g : pts) {
    if (g.dtype != op.dtype) continue;
    Op probe = op;
    probe.m = g.m;
    probe.n = g.n;
    probe.k = g.k;
    probe.batch = 1;
    probe.flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
    const int64_t e = op.bytes_read / std::max<int64_t>(1, (op.m * op.k + op.k * op.n) * op.batch);
    probe.bytes_read = (g.m * g.k + g.k * g.n) * std::max<int64_t>(1, e);
    probe.bytes_written = g.m * g.n * std::max<int64_t>(1, e);
    const double ideal = roofline(probe, gpu, 1.0, 1.0, gemm_wave_efficiency(probe, gpu, p));
    const double dm = std::log2(static_cast<double>(g.m)) - lm, dn = std::log2(static_cast<double>(g.n)) - ln,
                 dk = std::log2(static_cast<double>(g.k)) - lk;
    near.emplace_back(dm * dm + dn * dn + dk * dk, std::log(g.seconds / ideal));
  }
  if (near.empty()) return -1;
  std::sort(near.begin(), near.end());
  if (near.size() > 8) near.resize(8);
  if (near[0].first < 1e-12) return std::exp(near[0].second) * roofline(op, gpu, 1.0, 1.0, gemm_wave_efficiency(op, gpu, p));
  double wsum = 0, acc = 0;
  for (auto [d2, lr] : near) {
    const double w = 1.0 / (d2 * d2);
    wsum += w;
    acc += w * lr;
  }
  return std::exp(acc / wsum) * roofline(op, gpu, 1.0, 1.0, gemm_wave_efficiency(op, gpu, p));
}

// Piecewise linear in log x over sorted (x, y) pairs (y in log space too when `log_y`).
double interpolate(const std::vector<std::pair<double, double>>& xy, double x) {
  if (xy.empty()) return -1;
  if (x <= xy.front().first) return xy.front().second;
  if (x >= xy.back().first) return xy.back().second;
  for (size_t i = 1; i < xy.size(); ++i)
    if (x <= xy[i].first) {
      const double t = (std::log(x) - std::log(xy[i - 1].first)) / (std::log(xy[i].first) - std::log(xy[i - 1].first));
      return xy[i - 1].second + t * (xy[i].second - xy[i - 1].second);
    }
  return xy.back().second;
}

double attention_measured(const Op& op, const GpuSpec& gpu, const std::vector<AttentionPoint>& pts) {
  const bool bwd = op.phase == Phase::Backward;
  std::vector<std::pair<double, double>> curve;  // (seq, log(measured / (flops / peak)))
  for (const AttentionPoint& a : pts) {
    if (a.backward != bwd || a.head_dim != op.head_dim || a.causal != op.causal) continue;
    Op probe;
    probe.batch = a.batch_heads;
    probe.heads = 1;
    probe.q_len = probe.kv_len = a.seq;
    probe.head_dim = a.head_dim;
    probe.causal = a.causal;
    const double flops = attention_flops(probe) * (bwd ? 2.5 : 1.0);
    curve.emplace_back(static_cast<double>(a.seq), std::log(a.seconds / (flops / gpu.peak_flops(op.dtype))));
  }
  if (curve.empty()) return -1;
  std::sort(curve.begin(), curve.end());
  const double seq = std::sqrt(static_cast<double>(op.q_len) * static_cast<double>(op.kv_len));
  return std::exp(interpolate(curve, seq)) * op.flops / gpu.peak_flops(op.dtype);
}

double memory_measured(const Op& op, const std::vector<MemoryPoint>& pts) {
  if (pts.empty()) return -1;
  std::vector<std::pair<double, double>> curve;
  for (const MemoryPoint& m : pts) curve.emplace_back(m.bytes, std::log(m.seconds));
  return std::exp(interpolate(curve, static_cast<double>(op.bytes_read + op.bytes_written)));
}

}  // namespace

double compute_seconds(const Op& op, const GpuSpec& gpu, const ComputeProfile& p) {
  const double bytes = static_cast<double>(op.bytes_read + op.bytes_written);
  // An op with nothing to read, write or compute only joins dependencies: no kernel.
  if (op.kind == OpKind::Memory && bytes == 0 && op.flops == 0) return 0;
  if (p.measured) {
    double t = -1;
    if (op.kind == OpKind::Gemm) t = gemm_measured(op, gpu, p, p.measured->gemm);
    else if (op.kind == OpKind::Attention) t = attention_measured(op, gpu, p.measured->attention);
    else if (op.kind == OpKind::Memory) t = memory_measured(op, p.measured->memory);
    if (t >= 0) return t;
  }
  const double mem = bytes / (gpu.hbm_bandwidth * p.memory_efficiency);
  double math = 0;
  switch (op.kind) {
    case OpKind::Gemm:
      math = op.flops / (gpu.peak_flops(op.dtype) * p.gemm_efficiency * gemm_wave_efficiency(op, gpu, p));
      break;
    case OpKind::Attention:
      math = op.flops / (gpu.peak_flops(op.dtype) * p.attention_efficiency);
      break;
    case OpKind::Memory:
      math = op.flops / gpu.peak_fp32;
      break;
    case OpKind::Collective:
    case OpKind::Send:
    case OpKind::Recv:
      return 0;
  }
  return std::max(math, mem);
}

}  // namespace clustersim
