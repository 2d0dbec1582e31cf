#include "calibrate/profile_check.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "cost_models/compute.h"

namespace clustersim {

namespace {

// The op a GEMM table row timed: A (m x k) times B (k x n) read, C (m x n) written, in its type.
Op gemm_op(const GemmPoint& g) {
  Op op;
  op.kind = OpKind::Gemm;
  op.dtype = g.dtype;
  op.m = g.m;
  op.n = g.n;
  op.k = g.k;
  op.flops = gemm_flops(op);
  const int64_t e = dtype_bits(g.dtype) / 8;
  op.bytes_read = (g.m * g.k + g.k * g.n) * e;
  op.bytes_written = g.m * g.n * e;
  return op;
}

}  // namespace

HeldOutError gemm_held_out_error(const CalibrationProfile& profile, const GpuSpec& gpu) {
  HeldOutError out;
  if (!profile.compute.measured) return out;
  const auto& all = profile.compute.measured->gemm;
  if (all.empty()) return out;
  // Kept: shapes whose m, n and k are all powers of two. Held out: shapes with n and k
  // powers of two and m off them (the calibration's in-between points): each is
  // predicted from the kept grid alone.
  auto pow2 = [](int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
  auto kept = std::make_shared<MeasuredTables>();
  std::vector<GemmPoint> held;
  int64_t mmax = 0;
  for (const GemmPoint& g : all)
    if (pow2(g.m)) mmax = std::max(mmax, g.m);
  for (const GemmPoint& g : all) {
    if (!pow2(g.n) || !pow2(g.k)) continue;
    if (pow2(g.m))
      kept->gemm.push_back(g);
    else if (g.m < mmax)
      held.push_back(g);
  }
  ComputeProfile cp = profile.compute;
  cp.measured = kept;
  std::vector<double> err;
  for (const GemmPoint& g : held) {
    err.push_back(std::fabs(compute_seconds(gemm_op(g), gpu, cp) - g.seconds) / g.seconds);
  }
  if (err.empty()) return out;
  std::sort(err.begin(), err.end());
  out.points = static_cast<int>(err.size());
  out.median = err[err.size() / 2];
  out.p95 = err[std::min(err.size() - 1, static_cast<size_t>(0.95 * static_cast<double>(err.size())))];
  out.worst = err.back();
  return out;
}

namespace {

ModelVsTable summarize(std::vector<double> ratios) {
  ModelVsTable out;
  if (ratios.empty()) return out;
  std::sort(ratios.begin(), ratios.end());
  auto at = [&](double q) {
    return ratios[std::min(ratios.size() - 1, static_cast<size_t>(q * static_cast<double>(ratios.size())))];
  };
  out.points = static_cast<int>(ratios.size());
  out.median = at(0.5), out.p10 = at(0.1), out.p90 = at(0.9);
  std::vector<double> dev;
  for (const double r : ratios) dev.push_back(std::fabs(r - 1));
  std::sort(dev.begin(), dev.end());
  out.median_abs = dev[dev.size() / 2];
  return out;
}

}  // namespace

ModelVsTables builtin_vs_measured(const CalibrationProfile& profile, const GpuSpec& gpu) {
  ModelVsTables out;
  if (!profile.compute.measured) return out;
  ComputeProfile cp = profile.compute;
  cp.measured = nullptr;
  std::vector<double> gemm, fwd, bwd;
  static constexpr double kFill[] = {0.6, 0.75, 0.9, 0.97, 1.0 + 1e-9};
  static constexpr const char* kFillLabel[] = {"< 0.6", "0.6-0.75", "0.75-0.9", "0.9-0.97", ">= 0.97"};
  std::vector<double> by_fill[5], flipped[5];
  ComputeProfile other = cp;
  other.gemm_stream_k = !cp.gemm_stream_k;
  const double sms = static_cast<double>(std::max(1, gpu.sm_count));
  for (const GemmPoint& g : profile.compute.measured->gemm) {
    if (g.seconds <= 0) continue;
    const double r = compute_seconds(gemm_op(g), gpu, cp) / g.seconds;
    gemm.push_back(r);
    if (g.m < 1024 || g.n < 1024 || g.k < 1024) continue;
    const double tiles = std::ceil(static_cast<double>(g.m) / 128) * std::ceil(static_cast<double>(g.n) / 256);
    const double fill = tiles / (std::ceil(tiles / sms) * sms);
    for (size_t b = 0; b < 5; ++b)
      if (fill < kFill[b]) {
        by_fill[b].push_back(r);
        flipped[b].push_back(compute_seconds(gemm_op(g), gpu, other) / g.seconds);
        break;
      }
  }
  for (size_t b = 0; b < 5; ++b)
    if (!by_fill[b].empty())
      out.gemm_by_last_wave.push_back(
          {kFillLabel[b], summarize(std::move(by_fill[b])), summarize(std::move(flipped[b]))});
  for (const AttentionPoint& a : profile.compute.measured->attention) {
    if (a.seconds <= 0 || a.seq <= 0 || a.batch_heads <= 0) continue;
    // One sequence of batch_heads query heads over batch_heads / group K/V heads, 16-bit.
    Op op;
    op.kind = OpKind::Attention;
    op.dtype = DType::BF16;
    op.phase = a.backward ? Phase::Backward : Phase::Forward;
    op.batch = 1;
    op.heads = a.batch_heads;
    op.kv_heads = std::max<int64_t>(1, a.batch_heads / std::max<int64_t>(1, a.group));
    op.q_len = op.kv_len = a.seq;
    op.head_dim = a.head_dim;
    op.causal = a.causal;
    op.flops = attention_flops(op) * (a.backward ? 2.5 : 1.0);
    const int64_t q = a.batch_heads * a.seq * a.head_dim * 2, kv = op.kv_heads * a.seq * a.head_dim * 2;
    op.bytes_read = a.backward ? 3 * q + 2 * kv : q + 2 * kv;
    op.bytes_written = a.backward ? q + 2 * kv : q;
    // The row timed one library call between two events, its kernels back to back inside:
    // each kernel the model counts beyond the first runs from that queue (docs/model.md,
    // "Kernels from a full queue").
    const double inner = static_cast<double>(std::max(0, timed_kernel_count(op, gpu, cp) - 1)) * cp.queue_saving_s;
    (a.backward ? bwd : fwd).push_back((compute_seconds(op, gpu, cp) - inner) / a.seconds);
  }
  out.gemm = summarize(std::move(gemm));
  out.attention_forward = summarize(std::move(fwd));
  out.attention_backward = summarize(std::move(bwd));
  return out;
}

}  // namespace clustersim
