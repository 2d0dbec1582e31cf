// The real backend's own CUDA kernels: a FlashAttention-style fused attention (forward
// and backward, tiled, online softmax, causal mask, GQA; tensor cores through WMMA), a
// memory-bound kernel that reads and writes exactly an op's bytes, random fills, and
// naive reference kernels that tests check the fast ones against.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace clustersim::real {

enum class Elem { BF16, FP16 };

struct AttentionShape {
  int batch = 1, heads = 1, kv_heads = 1, q_len = 1, kv_len = 1, head_dim = 128;
  bool causal = true;
};

// Q [b, h, q, d], K/V [b, hkv, kv, d], O [b, h, q, d], lse [b, h, q] (log2 domain).
// head_dim must be 64 or 128.
void attention_forward(Elem e, const AttentionShape& s, const void* q, const void* k, const void* v, void* o,
                       float* lse, cudaStream_t stream);
// dq/dk/dv are fp32 accumulators (zeroed here), then converted into dq16/dk16/dv16.
void attention_backward(Elem e, const AttentionShape& s, const void* q, const void* k, const void* v, const void* o,
                        const void* dout, const float* lse, float* delta, float* dq, float* dk, float* dv, void* dq16,
                        void* dk16, void* dv16, cudaStream_t stream);
bool attention_supported(int head_dim);

// Where the i-th user of a region places its operand: a multiple of 256 B below `region`,
// scattered (a fixed hash of i), so consecutive users sit at unrelated addresses as a
// model's tensors do.
inline size_t scattered_offset(uint64_t i, size_t region) {
  const uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ULL;
  return static_cast<size_t>((h >> 20) % (region / 256)) * 256;
}

// Transformer Engine's FP8 cast-transpose: a rows × cols BF16 matrix `in` scaled by
// `scale` into E4M3 (saturating), row-major into `out` and transposed (cols × rows) into
// `out_t`, and max |in| folded into *amax (which the caller zeroes first). rows and cols
// any size; 32 × 32 tiles through shared memory.
void fp8_cast_transpose_amax(const void* in, int64_t rows, int64_t cols, float scale, void* out, void* out_t,
                             float* amax, cudaStream_t stream);

// Reads `read_bytes` from `in` and writes `write_bytes` to `out` (16-byte vectors).
void memory_op(const void* in, void* out, int64_t read_bytes, int64_t write_bytes, cudaStream_t stream);

// One thread that keeps the stream busy for `seconds` of GPU wall time (%globaltimer),
// holding a single SM's slot: a peer made late on purpose.
void spin(double seconds, cudaStream_t stream);

// Deterministic pseudo-random values in [-1, 1) (scaled) for `n` elements.
void fill_random(Elem e, void* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream);
void fill_random_f32(float* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream);

// References (fp32 math, one thread per output): C[m,n] = sum_k A[m,k]·B[k,n] with A
// row-major m×k and B row-major k×n; attention output (and, when dout is given, the
// input gradients) straight from the definition.
void reference_gemm(Elem e, int m, int n, int k, const void* a, const void* b, float* c, cudaStream_t stream);
void reference_attention(Elem e, const AttentionShape& s, const void* q, const void* k, const void* v, float* o,
                         cudaStream_t stream);
void reference_attention_backward(Elem e, const AttentionShape& s, const void* q, const void* k, const void* v,
                                  const void* dout, float* dq, float* dk, float* dv, cudaStream_t stream);
// Largest |a - b| / (|b| + eps) over n values; a in the element type, b fp32.
double max_relative_error(Elem e, const void* a, const float* b, int64_t n, double eps);
double max_abs_error_f32(const float* a, const float* b, int64_t n);

}  // namespace clustersim::real
