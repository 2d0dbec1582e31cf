#include "real_backend/gemm.h"

#include "real_backend/check.h"

namespace clustersim::real {
namespace {

cudaDataType_t in_type(DType d) {
  switch (d) {
    case DType::FP32:
      return CUDA_R_32F;
    case DType::FP16:
      return CUDA_R_16F;
    case DType::FP8:
      return CUDA_R_8F_E4M3;
    default:
      return CUDA_R_16BF;
  }
}

cudaDataType_t out_type(DType d) {
  switch (d) {
    case DType::FP32:
      return CUDA_R_32F;
    case DType::FP16:
      return CUDA_R_16F;
    default:
      return CUDA_R_16BF;  // fp8 products are written in bf16
  }
}

}  // namespace

size_t Gemm::element_bytes(DType d) { return d == DType::FP32 ? 4 : d == DType::FP8 ? 1 : 2; }

bool Gemm::supported(DType d, int sm_major) {
  if (d == DType::INT8 || d == DType::INT4) return false;
  return d != DType::FP8 || sm_major >= 9;
}

Gemm::Gemm() {
  CS_CUBLAS(cublasLtCreate(&handle_));
  CS_CUDA(cudaMalloc(&workspace_, workspace_bytes_));
  CS_CUDA(cudaMalloc(&one_, sizeof(float)));
  const float one = 1.f;
  CS_CUDA(cudaMemcpy(one_, &one, sizeof one, cudaMemcpyHostToDevice));
}

Gemm::~Gemm() {
  for (auto& [key, e] : cache_) {
    cublasLtMatrixLayoutDestroy(e.a);
    cublasLtMatrixLayoutDestroy(e.b);
    cublasLtMatrixLayoutDestroy(e.c);
    cublasLtMatmulDescDestroy(e.desc);
  }
  cudaFree(workspace_);
  cudaFree(one_);
  cublasLtDestroy(handle_);
}

// Row-major C (m×n) is column-major C^T (n×m) = B^T·A^T: cuBLASLt's "A" is our B (n×k,
// leading dimension n) and its "B" is our A (k×m, leading dimension k). FP8 wants the
// first operand transposed ("TN"); its data are random, so only the shape is kept.
Gemm::Entry& Gemm::entry(DType d, int64_t m, int64_t n, int64_t k, int64_t batch, bool split_accumulator) {
  const bool fp8 = d == DType::FP8;
  const auto key = std::make_tuple(static_cast<int>(d), m, n, k, batch, fp8 && split_accumulator);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  Entry e;
  CS_CUBLAS(cublasLtMatmulDescCreate(&e.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = fp8 ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  CS_CUBLAS(cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CS_CUBLAS(cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (fp8) {
    // Per-tensor scaling: cuBLASLt multiplies the product by scale_A · scale_B (TE passes
    // each tensor's scale_inv), and the accumulator mode of TE's recipe for this GEMM.
    const float* scale = one_;
    CS_CUBLAS(cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale, sizeof scale));
    CS_CUBLAS(cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale, sizeof scale));
    const int8_t fast = split_accumulator ? 0 : 1;
    CS_CUBLAS(cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
  }
  CS_CUBLAS(cublasLtMatrixLayoutCreate(&e.a, in_type(d), fp8 ? static_cast<uint64_t>(k) : static_cast<uint64_t>(n),
                                       fp8 ? static_cast<uint64_t>(n) : static_cast<uint64_t>(k), fp8 ? k : n));
  CS_CUBLAS(cublasLtMatrixLayoutCreate(&e.b, in_type(d), static_cast<uint64_t>(k), static_cast<uint64_t>(m), k));
  CS_CUBLAS(cublasLtMatrixLayoutCreate(&e.c, out_type(d), static_cast<uint64_t>(n), static_cast<uint64_t>(m), n));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    const int64_t sa = n * k, sb = k * m, sc = n * m;
    for (auto [layout, stride] : {std::pair{e.a, sa}, {e.b, sb}, {e.c, sc}}) {
      CS_CUBLAS(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      CS_CUBLAS(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                 sizeof stride));
    }
  }
  cublasLtMatmulPreference_t pref;
  CS_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  CS_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                 sizeof workspace_bytes_));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  CS_CUBLAS(cublasLtMatmulAlgoGetHeuristic(handle_, e.desc, e.a, e.b, e.c, e.c, pref, 1, &result, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (found == 0)
    throw RealBackendError("cuBLASLt has no algorithm for a " + std::string(to_string(d)) + " GEMM " +
                           std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " while running " +
                           context());
  e.algo = result.algo;
  return cache_.emplace(key, e).first->second;
}

void Gemm::run(DType d, int64_t m, int64_t n, int64_t k, int64_t batch, const void* a, const void* b, void* c,
               cudaStream_t stream, bool split_accumulator) {
  Entry& e = entry(d, m, n, k, batch, split_accumulator);
  const float alpha = 1.f, beta = 0.f;
  CS_CUBLAS(cublasLtMatmul(handle_, e.desc, &alpha, b, e.a, a, e.b, &beta, c, e.c, c, e.c, &e.algo, workspace_,
                           workspace_bytes_, stream));
}

}  // namespace clustersim::real
