#include "cost_models/compute.h"

#include <algorithm>
#include <cmath>

namespace clustersim {

double gemm_wave_efficiency(const Op& op, const GpuSpec& gpu, const ComputeProfile& p) {
  if (gpu.sm_count <= 0) return 1.0;
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const int64_t tiles = ceil_div(op.m, p.gemm_tile_m) * ceil_div(op.n, p.gemm_tile_n) * std::max<int64_t>(1, op.batch);
  const int64_t waves = ceil_div(tiles, gpu.sm_count);
  return static_cast<double>(tiles) / static_cast<double>(waves * gpu.sm_count);
}

double compute_seconds(const Op& op, const GpuSpec& gpu, const ComputeProfile& p) {
  const double bytes = static_cast<double>(op.bytes_read + op.bytes_written);
  // An op with nothing to read, write or compute only joins dependencies: no kernel.
  if (op.kind == OpKind::Memory && bytes == 0 && op.flops == 0) return 0;
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
  return std::max(math, mem) + p.launch_overhead_s;
}

}  // namespace clustersim
