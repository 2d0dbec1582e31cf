#include "calibrate/profile_check.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "cost_models/compute.h"

namespace clustersim {

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
    err.push_back(std::fabs(compute_seconds(op, gpu, cp) - g.seconds) / g.seconds);
  }
  if (err.empty()) return out;
  std::sort(err.begin(), err.end());
  out.points = static_cast<int>(err.size());
  out.median = err[err.size() / 2];
  out.p95 = err[std::min(err.size() - 1, static_cast<size_t>(0.95 * static_cast<double>(err.size())))];
  out.worst = err.back();
  return out;
}

}  // namespace clustersim
