// Roofline compute model: an op takes the longer of its math time and its memory
// time, plus a fixed per-kernel launch gap.
//
//   t = max(flops / (peak(dtype) · eff · wave), bytes / (hbm_bw · mem_eff)) + launch
//
// `wave` is GEMM wave quantization: a GEMM runs as ceil(m/Tm)·ceil(n/Tn)·batch output
// tiles over the SMs, and the last, partial wave leaves SMs idle:
//   wave = tiles / (ceil(tiles / SMs) · SMs).
// The efficiencies are what large, well-shaped kernels reach on the GPU; they are
// measured by calibration and the defaults below are documented starting points.
#pragma once

#include "plan/plan.h"
#include "topology/gpu.h"

namespace clustersim {

struct ComputeProfile {
  double gemm_efficiency = 0.80;       // large bf16 GEMMs: ~790 of 989 TFLOP/s on H200
  double attention_efficiency = 0.55;  // fused (FlashAttention-2 style) kernels
  double memory_efficiency = 0.90;     // device copy: ~4.3 of 4.8 TB/s on H200
  double launch_overhead_s = 2.0e-6;   // back-to-back kernel gap
  int gemm_tile_m = 128;
  int gemm_tile_n = 256;
};

// Seconds for a GEMM, attention or memory op on one GPU. Collectives and p2p are the
// network's business and return 0 here.
double compute_seconds(const Op& op, const GpuSpec& gpu, const ComputeProfile& profile);
double gemm_wave_efficiency(const Op& op, const GpuSpec& gpu, const ComputeProfile& profile);

}  // namespace clustersim
