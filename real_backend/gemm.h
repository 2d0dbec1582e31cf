// GEMMs through cuBLASLt with the op's exact shape and dtype: C[m,n] = A[m,k]·B[k,n]
// (row-major, `batch` independent products), bf16 / fp16 / fp8 (e4m3, Hopper and later)
// with fp32 accumulation, or true fp32. Algorithm choices are cached per shape.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "plan/plan.h"

namespace clustersim::real {

class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // a: m×k, b: k×n, c: m×n, each `batch` times back to back. FP8 runs as Transformer
  // Engine issues it: per-tensor scales of A and B through cuBLASLt's scale pointers (here
  // 1.0 on the device), a BF16 product, and fast accumulation unless `split_accumulator`
  // (TE's recipe: fast for the forward GEMM, split, i.e. periodically promoted to FP32,
  // for dgrad and wgrad).
  void run(DType dtype, int64_t m, int64_t n, int64_t k, int64_t batch, const void* a, const void* b, void* c,
           cudaStream_t stream, bool split_accumulator = false);
  static bool supported(DType dtype, int sm_major);
  static size_t element_bytes(DType dtype);

 private:
  struct Entry {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  Entry& entry(DType dtype, int64_t m, int64_t n, int64_t k, int64_t batch, bool split_accumulator);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  float* one_ = nullptr;  // FP8: the A and B scales, on the device
  size_t workspace_bytes_ = 32u << 20;
  std::map<std::tuple<int, int64_t, int64_t, int64_t, int64_t, bool>, Entry> cache_;
};

}  // namespace clustersim::real
