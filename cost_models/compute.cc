#include "cost_models/compute.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
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

// The grid values of an axis (sorted and made unique here) that bracket x, and the
// fraction of the way from lo to hi in log space; clamped to the axis's ends (t = 0).
void bracket(std::vector<double>& v, double x, double& lo, double& hi, double& t) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  t = 0;
  if (x <= v.front()) {
    lo = hi = v.front();
    return;
  }
  if (x >= v.back()) {
    lo = hi = v.back();
    return;
  }
  auto it = std::upper_bound(v.begin(), v.end(), x);
  hi = *it;
  lo = *(it - 1);
  t = (std::log(x) - std::log(lo)) / (std::log(hi) - std::log(lo));
}

double gemm_measured(const Op& op, const GpuSpec& gpu, const std::vector<GemmPoint>& pts) {
  // Ratio of measured to ideal (the roofline at efficiency 1) at the grid points around
  // the shape in log2(m, n, k). The ideal leaves out wave quantization: the library picks
  // its tile (and split) per shape, so a fixed tile's waves would put steps into the
  // ratio that the measured times do not have. Held out on the H200 grid (each interior
  // point from its two neighbours along an axis), that halves the p95 error.
  const double lm = std::log2(static_cast<double>(op.m)), ln = std::log2(static_cast<double>(op.n)),
               lk = std::log2(static_cast<double>(op.k));
  std::vector<std::pair<double, double>> near;  // (distance², log ratio)
  std::vector<double> near_ratio;               // log ratio per point of this dtype, in order
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
    const double ideal = roofline(probe, gpu, 1.0, 1.0, 1.0);
    const double dm = std::log2(static_cast<double>(g.m)) - lm, dn = std::log2(static_cast<double>(g.n)) - ln,
                 dk = std::log2(static_cast<double>(g.k)) - lk;
    near.emplace_back(dm * dm + dn * dn + dk * dk, std::log(g.seconds / ideal));
    near_ratio.push_back(near.back().second);
  }
  if (near.empty()) return -1;
  // On a regular grid: trilinear interpolation of the log ratio between the 8 corners
  // that enclose the shape (clamped at the grid's edges).
  {
    std::vector<double> am, an, ak;
    std::map<std::tuple<int64_t, int64_t, int64_t>, double> at;
    size_t idx = 0;
    for (const GemmPoint& g : pts) {
      if (g.dtype != op.dtype) continue;
      am.push_back(static_cast<double>(g.m));
      an.push_back(static_cast<double>(g.n));
      ak.push_back(static_cast<double>(g.k));
      at[{g.m, g.n, g.k}] = idx++;
    }
    double m0, m1, tm, n0, n1, tn, k0, k1, tk;
    bracket(am, static_cast<double>(op.m), m0, m1, tm);
    bracket(an, static_cast<double>(op.n), n0, n1, tn);
    bracket(ak, static_cast<double>(op.k), k0, k1, tk);
    double acc = 0;
    bool complete = true;
    for (int c = 0; c < 8 && complete; ++c) {
      const double mm = c & 1 ? m1 : m0, nn = c & 2 ? n1 : n0, kk = c & 4 ? k1 : k0;
      const double w = (c & 1 ? tm : 1 - tm) * (c & 2 ? tn : 1 - tn) * (c & 4 ? tk : 1 - tk);
      auto it = at.find({static_cast<int64_t>(mm), static_cast<int64_t>(nn), static_cast<int64_t>(kk)});
      if (it == at.end()) {
        complete = w == 0.0;
        continue;
      }
      acc += w * near_ratio[static_cast<size_t>(it->second)];
    }
    if (complete) return std::exp(acc) * roofline(op, gpu, 1.0, 1.0, 1.0);
  }
  std::sort(near.begin(), near.end());
  if (near.size() > 8) near.resize(8);
  if (near[0].first < 1e-12) return std::exp(near[0].second) * roofline(op, gpu, 1.0, 1.0, 1.0);
  double wsum = 0, acc = 0;
  for (auto [d2, lr] : near) {
    const double w = 1.0 / (d2 * d2);
    wsum += w;
    acc += w * lr;
  }
  return std::exp(acc / wsum) * roofline(op, gpu, 1.0, 1.0, 1.0);
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
  // log(measured / (FLOPs / peak)) on the measured grid of (length, batch × heads) for
  // each GQA group size; bilinear in (log length, log batch × heads) inside the group
  // sizes around the op's, then linear in log group size between them (clamped at the
  // grid's edges). Batch × heads matters: the kernel's thread blocks are batch × heads ×
  // query tiles, and how they fill the SMs' waves moves the rate by ±20 %.
  const bool bwd = op.phase == Phase::Backward;
  std::map<std::tuple<int64_t, int64_t, int64_t>, double> at;  // (group, seq, bh) -> log ratio
  std::vector<double> groups, seqs, bhs;
  for (const AttentionPoint& a : pts) {
    if (a.backward != bwd || a.head_dim != op.head_dim || a.causal != op.causal) continue;
    Op probe;
    probe.batch = a.batch_heads;
    probe.heads = 1;
    probe.q_len = probe.kv_len = a.seq;
    probe.head_dim = a.head_dim;
    probe.causal = a.causal;
    const double flops = attention_flops(probe) * (bwd ? 2.5 : 1.0);
    at[{a.group, a.seq, a.batch_heads}] = std::log(a.seconds / (flops / gpu.peak_flops(op.dtype)));
    groups.push_back(static_cast<double>(a.group));
    seqs.push_back(static_cast<double>(a.seq));
    bhs.push_back(static_cast<double>(a.batch_heads));
  }
  if (at.empty()) return -1;
  const double seq = std::sqrt(static_cast<double>(op.q_len) * static_cast<double>(op.kv_len));
  const double bh = static_cast<double>(std::max<int64_t>(1, op.batch) * std::max<int64_t>(1, op.heads));
  const double group = static_cast<double>(std::max<int64_t>(1, op.heads / std::max<int64_t>(1, op.kv_heads)));
  double g0, g1, tg, s0, s1, ts, b0, b1, tb;
  bracket(groups, group, g0, g1, tg);
  bracket(seqs, seq, s0, s1, ts);
  bracket(bhs, bh, b0, b1, tb);
  double acc = 0;
  for (int c = 0; c < 8; ++c) {
    const double w = (c & 1 ? tg : 1 - tg) * (c & 2 ? ts : 1 - ts) * (c & 4 ? tb : 1 - tb);
    if (w == 0) continue;
    auto it = at.find({static_cast<int64_t>(c & 1 ? g1 : g0), static_cast<int64_t>(c & 2 ? s1 : s0),
                       static_cast<int64_t>(c & 4 ? b1 : b0)});
    if (it == at.end()) return -1;  // not a grid: leave it to the model
    acc += w * it->second;
  }
  return std::exp(acc) * op.flops / gpu.peak_flops(op.dtype);
}

double memory_measured(const Op& op, const std::vector<MemoryPoint>& pts) {
  if (pts.empty()) return -1;
  const double bytes = static_cast<double>(op.bytes_read + op.bytes_written);
  const double share = bytes > 0 ? static_cast<double>(op.bytes_read) / bytes : 0.5;
  // Measured shares in thousandths (a hand-written 0.333 and a computed 1/3 are one).
  auto bin = [](double s) { return std::llround(s * 1000); };
  std::vector<long long> shares;
  for (const MemoryPoint& m : pts) shares.push_back(bin(m.read_share));
  std::sort(shares.begin(), shares.end());
  shares.erase(std::unique(shares.begin(), shares.end()), shares.end());
  // Seconds per byte (log-log) along bytes at one measured share: past the largest
  // measurement the bandwidth stays that of the largest, so time keeps growing with bytes.
  auto along_bytes = [&](long long at) {
    std::vector<std::pair<double, double>> curve;
    for (const MemoryPoint& m : pts)
      if (bin(m.read_share) == at) curve.emplace_back(m.bytes, std::log(m.seconds / m.bytes));
    std::sort(curve.begin(), curve.end());
    return interpolate(curve, bytes);
  };
  // Then linear in the read share between the two measured shares around the op's (the
  // nearest one outside the measured range).
  const double want = share * 1000;
  auto hi = std::lower_bound(shares.begin(), shares.end(), want,
                             [](long long s, double w) { return static_cast<double>(s) < w; });
  if (hi == shares.end()) return std::exp(along_bytes(shares.back())) * bytes;
  if (hi == shares.begin() || static_cast<double>(*hi) == want) return std::exp(along_bytes(*hi)) * bytes;
  const long long lo = *(hi - 1);
  const double t = (want - static_cast<double>(lo)) / static_cast<double>(*hi - lo);
  return std::exp((1 - t) * along_bytes(lo) + t * along_bytes(*hi)) * bytes;
}

}  // namespace

namespace {
double compute_seconds_streaming(const Op& op, const GpuSpec& gpu, const ComputeProfile& p);
}

double compute_seconds(const Op& op, const GpuSpec& gpu, const ComputeProfile& p) {
  const double t = compute_seconds_streaming(op, gpu, p);
  if (op.kind != OpKind::Memory || t == 0) return t;
  switch (op.access) {
    case MemAccess::Streaming:
      return t;
    case MemAccess::DynamicCast:
      return t + static_cast<double>(op.m) * p.dynamic_cast_ops_per_element / gpu.peak_fp32;
    case MemAccess::MultiTensor:
      return t / p.multi_tensor_efficiency;
  }
  return t;
}

namespace {
double compute_seconds_streaming(const Op& op, const GpuSpec& gpu, const ComputeProfile& p) {
  const double bytes = static_cast<double>(op.bytes_read + op.bytes_written);
  // An op with nothing to read, write or compute only joins dependencies: no kernel.
  if (op.kind == OpKind::Memory && bytes == 0 && op.flops == 0) return 0;
  if (p.measured) {
    double t = -1;
    if (op.kind == OpKind::Gemm)
      t = gemm_measured(op, gpu, p.measured->gemm);
    else if (op.kind == OpKind::Attention)
      t = attention_measured(op, gpu, p.measured->attention);
    else if (op.kind == OpKind::Memory)
      t = memory_measured(op, p.measured->memory);
    if (t >= 0) return t;
  }
  // Uncalibrated: a kernel's floor plus the longer of its math and its memory time.
  const double mem = bytes / (gpu.hbm_bandwidth * p.memory_efficiency);
  switch (op.kind) {
    case OpKind::Gemm:
      return gemm_default_seconds(op, gpu, p);
    case OpKind::Attention: {
      // Fused attention: query tiles of 128 rows walk the keys; short sequences spend
      // more of each tile in its prologue and epilogue (and, causal, in its ragged
      // diagonal), so the rate rises as L / (L + L½). Head dim 64 moves half the bytes
      // per FLOP of 128 through the same pipeline at a lower rate ((d/128)^0.6). The
      // backward pass runs its 2.5x FLOPs at 0.86 of the forward rate (measured
      // backward/forward time 2.5-3.3x). Sources: docs/model.md.
      const double seq = std::sqrt(static_cast<double>(op.q_len) * static_cast<double>(op.kv_len));
      const bool fa2_on_hopper = p.flash2 && gpu.peak_fp8 > 0;  // Hopper and later have FP8 tensor cores
      double eff = (fa2_on_hopper ? p.flash2_hopper_efficiency : p.attention_efficiency) * seq / (seq + p.attention_seq_half);
      if (op.head_dim > 0 && op.head_dim < 128) eff *= std::pow(static_cast<double>(op.head_dim) / 128.0, 0.6);
      if (op.phase == Phase::Backward) eff *= 0.86;
      return p.kernel_latency_s + std::max(op.flops / (gpu.peak_flops(op.dtype) * eff), mem);
    }
    case OpKind::Memory:
      return p.kernel_latency_s + std::max(op.flops / gpu.peak_fp32, mem);
    case OpKind::Collective:
    case OpKind::Send:
    case OpKind::Recv:
      return 0;
  }
  return 0;
}
}  // namespace

double gemm_default_seconds(const Op& op, const GpuSpec& gpu, const ComputeProfile& p) {
  // A GEMM runs as output tiles (tm x tn) over the SMs in waves; each tile's main loop
  // streams k in steps, and short loops spend a larger share in prologue and epilogue:
  // a tile of depth kk runs at kk / (kk + k½) of its peak rate. The library picks the
  // tile and the split of k that finish first (split-K adds the partial sums' traffic).
  // A wave costs the padded tile's FLOPs whatever the real rows, so time never falls as
  // m, n or k grow. Smaller tiles reuse operands less: their peak is lower.
  struct Tile {
    int64_t m, n;
    double eff;
  };
  static constexpr Tile kTiles[] = {{128, 256, 1.0}, {256, 128, 1.0}, {128, 128, 0.92}, {64, 128, 0.80}, {64, 64, 0.65}};
  const bool fp8 = (op.dtype == DType::FP8 && gpu.peak_fp8 > 0) || op.dtype == DType::INT8;
  const double peak = gpu.peak_flops(op.dtype) * (fp8 ? p.fp8_gemm_efficiency : p.gemm_efficiency);
  const double k_half = p.gemm_k_half * (fp8 ? 2.0 : 1.0);
  const double sms = static_cast<double>(std::max(1, gpu.sm_count));
  const double bytes = static_cast<double>(op.bytes_read + op.bytes_written);
  const double batch = static_cast<double>(std::max<int64_t>(1, op.batch));
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  double best = -1;
  for (const Tile& t : kTiles) {
    for (int64_t split = 1; split <= 8; split *= 2) {
      if (split > 1 && op.k / split < 256) break;
      const double kk = static_cast<double>(ceil_div(op.k, split));
      const double tiles = static_cast<double>(ceil_div(op.m, t.m) * ceil_div(op.n, t.n)) * batch * split;
      const double waves = std::ceil(tiles / sms);
      const double tile_flops = 2.0 * static_cast<double>(t.m * t.n) * kk;
      const double math = waves * sms * tile_flops / (peak * t.eff * kk / (kk + k_half));
      // Split-K writes fp32 partial sums and reads them back to add them.
      const double partial = split > 1 ? 8.0 * static_cast<double>(split) * static_cast<double>(op.m * op.n) * batch : 0;
      const double mem = (bytes + partial) / (gpu.hbm_bandwidth * p.memory_efficiency);
      const double t_all = std::max(math, mem);
      if (best < 0 || t_all < best) best = t_all;
    }
  }
  return p.kernel_latency_s + best;
}

}  // namespace clustersim
