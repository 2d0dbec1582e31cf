// Test helper: a GEMM op as the planner builds one.
#pragma once

#include <cstdint>

#include "cost_models/compute.h"
#include "plan/plan.h"

namespace clustersim::testing {

// An m x k by k x n GEMM in `d` (its FLOPs, both inputs read, a 16-bit output written).
inline Op gemm_op(int64_t m, int64_t n, int64_t k, DType d = DType::BF16) {
  Op g;
  g.kind = OpKind::Gemm;
  g.phase = Phase::Forward;
  g.m = m;
  g.n = n;
  g.k = k;
  g.dtype = d;
  g.flops = gemm_flops(g);
  const int64_t e = d == DType::FP8 ? 1 : 2;
  g.bytes_read = (m * k + k * n) * e;
  g.bytes_written = m * n * 2;
  return g;
}

}  // namespace clustersim::testing
