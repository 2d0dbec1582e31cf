// Times TurboMind's decode-attention kernel of LMDeploy v0.1.0a1 (decoder_multihead_attention,
// the arch >= 80 instantiation: 4 warps, 32 keys an iteration, 1,024-token slices, 5 stages,
// split-k) over batch, context and head layout, launched as TurboMind launches it
// (invokeDecoderMultiheadAttention: grid query heads / HeadPerCta x batch x split, split =
// min(ceil(16 / batch), slices); the split-k reduction when split > 1). The kernel's headers
// come from an lmdeploy checkout at v0.1.0a1 (-I $LMDEPLOY_SRC); this file is only the driver.
// Paged K/V cache in 128-token blocks (cache_block_seq_len 128), one layer, FP16, head dim 128.
// L2 is flushed before every timed launch: in a real step each layer's cache is cold.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "src/turbomind/kernels/decoder_multihead_attention/decoder_multihead_attention_template.h"

using namespace turbomind;

#define CHECK(x)                                                                         \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

constexpr int kHeadDim = 128, kBlock = 128, kMaxSplitK = 16;

template <int HPC>
float run(int heads, int kv_heads, int batch, int ctx, int* split_out, void* flush, size_t flush_bytes) {
  using Attn = DecoderMultiHeadAttentionKernel<half, half, HPC, kHeadDim, 32, kHeadDim, 1024, 5, true>;
  const int seq = ctx + 1;
  const int nblk = (seq + kBlock - 1) / kBlock;
  const size_t blk_elems = size_t(kv_heads) * kBlock * kHeadDim;
  half *kc, *vc, *qkv, *out;
  CHECK(cudaMalloc(&kc, size_t(batch) * nblk * blk_elems * sizeof(half)));
  CHECK(cudaMalloc(&vc, size_t(batch) * nblk * blk_elems * sizeof(half)));
  CHECK(cudaMemset(kc, 0, size_t(batch) * nblk * blk_elems * sizeof(half)));
  CHECK(cudaMemset(vc, 0, size_t(batch) * nblk * blk_elems * sizeof(half)));
  const int stride = (heads + 2 * kv_heads) * kHeadDim;
  CHECK(cudaMalloc(&qkv, size_t(batch) * stride * sizeof(half)));
  CHECK(cudaMemset(qkv, 0, size_t(batch) * stride * sizeof(half)));
  CHECK(cudaMalloc(&out, size_t(batch) * heads * kHeadDim * sizeof(half)));
  std::vector<void*> kp(size_t(batch) * nblk + 1), vp(size_t(batch) * nblk + 1);
  for (size_t i = 0; i + 1 < kp.size(); ++i) {
    kp[i] = kc + i * blk_elems;
    vp[i] = vc + i * blk_elems;
  }
  std::vector<int> cu(batch + 1), len(batch, ctx);
  for (int b = 0; b <= batch; ++b) cu[b] = b * nblk;
  void **dkp, **dvp;
  int *dcu, *dlen;
  bool* dfin;
  CHECK(cudaMalloc(&dkp, kp.size() * sizeof(void*)));
  CHECK(cudaMalloc(&dvp, vp.size() * sizeof(void*)));
  CHECK(cudaMemcpy(dkp, kp.data(), kp.size() * sizeof(void*), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dvp, vp.data(), vp.size() * sizeof(void*), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&dcu, cu.size() * sizeof(int)));
  CHECK(cudaMalloc(&dlen, len.size() * sizeof(int)));
  CHECK(cudaMemcpy(dcu, cu.data(), cu.size() * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dlen, len.data(), len.size() * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&dfin, batch));
  CHECK(cudaMemset(dfin, 0, batch));
  float* work;
  const size_t part = size_t(batch) * heads * kMaxSplitK;
  CHECK(cudaMalloc(&work, part * (kHeadDim + 2) * sizeof(float)));

  DecoderMultiHeadAttentionParams<half> p{};
  p.out = out;
  p.q = qkv;
  p.k = p.q + heads * kHeadDim;
  p.v = p.k + kv_heads * kHeadDim;
  p.stride = stride;
  p.per_sample_length = dlen;
  p.finished = dfin;
  p.k_cache_block_ptrs = dkp;
  p.v_cache_block_ptrs = dvp;
  p.cu_block_cnts = dcu;
  p.kv_cache_block_size = kBlock;
  p.layer_offset = 0;
  p.batch_size = batch;
  p.max_seq_len = seq;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.size_per_head = kHeadDim;
  p.inv_sqrt_dh = 1.f / std::sqrt(float(kHeadDim));
  p.rotary_embedding_dim = kHeadDim;
  p.rotary_embedding_base = 10000.f;
  p.max_position_embeddings = 4096;
  p.partial_O = work;
  p.partial_M = work + part * kHeadDim;
  p.partial_L = p.partial_M + part;
  p.max_split_k = std::max(1, int(std::ceil(float(kMaxSplitK) / float(batch))));  // avg batch = batch
  p.arch = 90;

  const size_t smem = Attn::GetDynamicSmemSize();
  CHECK(cudaFuncSetAttribute(decoder_multihead_attention<Attn>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const int slices = (p.max_seq_len + Attn::kSliceLen - 1) / Attn::kSliceLen;
  const int split = std::min(p.max_split_k, std::max(1, slices));
  *split_out = split;
  dim3 block(Attn::kWarpCount * 32), grid(heads / HPC, batch, split);
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> ts;
  for (int it = 0; it < 23; ++it) {
    CHECK(cudaMemsetAsync(flush, it & 0xff, flush_bytes));
    CHECK(cudaEventRecord(a));
    decoder_multihead_attention<Attn><<<grid, block, smem>>>(p);
    if (split > 1) decoder_multihead_attention_reduce<Attn><<<dim3(heads, batch), block>>>(p);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaGetLastError());
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    if (it >= 3) ts.push_back(ms * 1000.f);
  }
  std::sort(ts.begin(), ts.end());
  for (void* x : {(void*)kc, (void*)vc, (void*)qkv, (void*)out, (void*)dkp, (void*)dvp, (void*)dcu, (void*)dlen,
                  (void*)dfin, (void*)work})
    CHECK(cudaFree(x));
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return ts[ts.size() / 2];
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::fprintf(stderr, "%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const size_t flush_bytes = size_t(512) << 20;
  void* flush;
  CHECK(cudaMalloc(&flush, flush_bytes));
  std::printf("layout,heads,kv_heads,heads_per_cta,batch,context,split,blocks,us_median,kv_MB,kv_GBps\n");
  struct L {
    const char* name;
    int heads, kv, hpc;
  };
  // Llama 2 70B at TP 4 (TurboMind: group 8 -> 4 heads a block), the same with 2 and 1 heads a
  // block (the math per K/V byte halves each time), and Llama 2 7B at TP 1 (MHA, 1 a block).
  for (const L l : {L{"70b-tp4", 16, 2, 4}, L{"70b-tp4", 16, 2, 2}, L{"70b-tp4", 16, 2, 1}, L{"7b-tp1", 32, 32, 1}})
    for (int batch : {1, 4, 16, 32, 64, 128})
      for (int ctx : {128, 1152, 3072}) {
        int split = 1;
        float us = l.hpc == 4   ? run<4>(l.heads, l.kv, batch, ctx, &split, flush, flush_bytes)
                   : l.hpc == 2 ? run<2>(l.heads, l.kv, batch, ctx, &split, flush, flush_bytes)
                                : run<1>(l.heads, l.kv, batch, ctx, &split, flush, flush_bytes);
        const double kv = double(batch) * l.kv * (ctx + 1) * kHeadDim * 2 * 2;  // K and V, FP16
        std::printf("%s,%d,%d,%d,%d,%d,%d,%d,%.2f,%.2f,%.1f\n", l.name, l.heads, l.kv, l.hpc, batch, ctx, split,
                    l.heads / l.hpc * batch * split, us, kv / 1e6, kv / (us * 1e-6) / 1e9);
        std::fflush(stdout);
      }
  return 0;
}
