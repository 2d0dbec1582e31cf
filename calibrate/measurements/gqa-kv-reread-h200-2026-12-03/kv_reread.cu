// Decode attention's K/V traffic when several thread blocks serve the query heads of one
// K/V head (GQA): does the second block's read of the same K/V come from L2 or from HBM?
//
// Each block streams the K and V of one (K/V head, sequence) pair, head dim 128, FP16, the
// whole context, with 16-byte loads, and folds them into one dot-product-like sum per
// thread (a decode kernel's arithmetic is small beside its loads). The grid is laid out as
// LMDeploy's TurboMind v0.1.0a1 decode kernel's: grid (query heads / heads_per_block,
// batch), so the blocks that share a K/V head are neighbours in x and start together.
// `per_kv` = group / heads_per_block blocks read each K/V head. The same K/V bytes are
// read once per block; the question is how many times HBM serves them.
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); std::exit(1); } } while (0)

__global__ void decode_like(const int4* kv, int ctx, int kv_heads, int per_kv, bool distinct, float* out) {
  const int q_block = blockIdx.x;            // query-head block
  const int kvh = q_block / per_kv;          // its K/V head
  const int seq = blockIdx.y;
  // K then V of (seq, kvh): ctx x 128 halves each = ctx x 16 int4 each. `distinct`: each
  // block reads a copy of its own (the same bytes from HBM per block, no sharing).
  const size_t pair = distinct ? (size_t(seq) * kv_heads * per_kv + q_block) : (size_t(seq) * kv_heads + kvh);
  const size_t base = pair * size_t(ctx) * 32;
  float acc = 0.f;
  for (int i = threadIdx.x; i < ctx * 32; i += blockDim.x) {
    const int4 v = kv[base + i];
    const half2* h = reinterpret_cast<const half2*>(&v);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __half22float2(h[j]);
      acc += f.x * 1.0001f + f.y;
    }
  }
  if (acc == 123.456f) out[0] = acc;  // keeps the loads
}

int main() {
  // Llama 2 70B at TP 4: 2 K/V heads per GPU, group 8. P blocks read each K/V head
  // (TurboMind v0.1.0a1: 8 / heads_per_block 4 = 2). shared: the P blocks read the same
  // K/V; distinct: each reads its own copy. Equal times mean HBM served every read.
  const int batch = 64, kv_heads = 2;
  float* out;
  CK(cudaMalloc(&out, sizeof(float)));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const size_t flush_n = size_t(256) << 20;
  char* flush;
  CK(cudaMalloc(&flush, flush_n));
  std::printf("ctx,blocks_per_kv_head,mode,kv_MiB_read,us_median,GBps_of_reads\n");
  for (int ctx : {512, 1152, 2048, 4096}) {
    for (int P : {1, 2, 4, 8}) {
      for (bool distinct : {false, true}) {
        if (P == 1 && distinct) continue;
        const size_t n = size_t(batch) * kv_heads * (distinct ? P : 1) * ctx * 32;  // int4s
        int4* kv;
        CK(cudaMalloc(&kv, n * sizeof(int4)));
        CK(cudaMemset(kv, 0x3c, n * sizeof(int4)));
        dim3 grid(kv_heads * P, batch);
        std::vector<float> t;
        for (int r = 0; r < 21; ++r) {
          CK(cudaMemsetAsync(flush, r, flush_n));
          CK(cudaEventRecord(e0));
          decode_like<<<grid, 256>>>(kv, ctx, kv_heads, P, distinct, out);
          CK(cudaEventRecord(e1));
          CK(cudaEventSynchronize(e1));
          float ms = 0;
          CK(cudaEventElapsedTime(&ms, e0, e1));
          t.push_back(ms * 1000.f);
        }
        std::sort(t.begin(), t.end());
        const double us = t[t.size() / 2];
        const double read = double(batch) * kv_heads * P * ctx * 32 * sizeof(int4);  // what the blocks read
        std::printf("%d,%d,%s,%.1f,%.2f,%.1f\n", ctx, P, distinct ? "distinct" : "shared", read / (1 << 20), us,
                    read / (us * 1e3));
        CK(cudaFree(kv));
      }
    }
  }
  return 0;
}
