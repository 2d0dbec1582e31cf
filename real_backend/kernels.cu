#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "real_backend/check.h"
#include "real_backend/kernels.h"

namespace clustersim::real {
namespace {

using namespace nvcuda;

constexpr int kTile = 64;   // queries per block (forward), keys per block (backward)
constexpr int kWarps = 4;   // 16 rows each
constexpr float kLog2e = 1.4426950408889634f;
// Shared-memory row strides padded past a multiple of 128 bytes, so the rows of a
// tensor-core fragment load fall in different banks.
constexpr int kPadH = 8;                 // 16-bit elements
constexpr int kPS = kTile + kPadH;       // P tiles (16-bit)
constexpr int kSS = kTile + 4;           // S tiles (fp32)

template <typename T>
__device__ float to_f(T x);
template <>
__device__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <>
__device__ float to_f(__half x) { return __half2float(x); }
template <typename T>
__device__ T from_f(float x);
template <>
__device__ __nv_bfloat16 from_f(float x) { return __float2bfloat16(x); }
template <>
__device__ __half from_f(float x) { return __float2half(x); }

// Copies a rows×D tile (row stride D) into shared memory, zero past `valid` rows.
template <typename T, int D>
__device__ void load_tile(T* dst, const T* src, int valid) {
  // 16-byte vectors: 8 elements at a time, rows of D in global, D + kPadH in shared.
  for (int i = threadIdx.x; i < kTile * D / 8; i += blockDim.x) {
    const int r = (i * 8) / D, c = (i * 8) % D;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < valid) v = *reinterpret_cast<const uint4*>(src + static_cast<int64_t>(r) * D + c);
    *reinterpret_cast<uint4*>(dst + r * (D + kPadH) + c) = v;
  }
}

// ---- forward ----------------------------------------------------------------------
// Each block: 64 queries of one (batch, head); each warp 16 of them, their Q fragments,
// S = Q·K^T and the output O held in tensor-core registers. For every 64-key tile:
// S (tensor cores), online softmax on the registers (running max m and sum l per row;
// O rescaled by exp(m_old - m_new)), P to shared memory in 16 bits, O += P·V.
//
// Accumulator element layout (the mma.m16n8k16 layout, which WMMA uses on sm_80 and
// later): element i of a 16×16 float fragment sits at row (lane / 4) + 8·((i / 2) % 2),
// column 2·(lane % 4) + (i % 2) + 8·(i / 4). The kernel's check against the reference
// attention covers it.
__device__ __forceinline__ int frag_row(int lane, int i) { return (lane >> 2) + 8 * ((i >> 1) & 1); }
__device__ __forceinline__ int frag_col(int lane, int i) { return ((lane & 3) << 1) + (i & 1) + 8 * (i >> 2); }

template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32) flash_fwd(const T* __restrict__ Q, const T* __restrict__ K,
                                                         const T* __restrict__ V, T* __restrict__ O,
                                                         float* __restrict__ LSE, AttentionShape s, float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int DS = D + kPadH;
  T* Qs = reinterpret_cast<T*>(smem);
  T* Ks = Qs + kTile * DS;
  T* Vs = Ks + kTile * DS;
  T* Ps = Vs + kTile * DS;  // [warps][16][kPS]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = blockIdx.y, b = bh / s.heads, h = bh % s.heads;
  const int hk = h / (s.heads / s.kv_heads);
  const int q0 = blockIdx.x * kTile;
  const T* k = K + (static_cast<int64_t>(b) * s.kv_heads + hk) * s.kv_len * D;
  const T* v = V + (static_cast<int64_t>(b) * s.kv_heads + hk) * s.kv_len * D;
  load_tile<T, D>(Qs, Q + (static_cast<int64_t>(bh) * s.q_len + q0) * D, min(kTile, s.q_len - q0));
  __syncthreads();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qf[D / 16];
  for (int kd = 0; kd < D / 16; ++kd) wmma::load_matrix_sync(qf[kd], Qs + (warp * 16) * DS + kd * 16, DS);
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> o[D / 16];
  for (int dt = 0; dt < D / 16; ++dt) wmma::fill_fragment(o[dt], 0.f);
  T* Pw = Ps + warp * 16 * kPS;
  const int r0 = lane >> 2;  // this thread's rows: r0 and r0 + 8 of the warp's 16
  const int qa = q0 + warp * 16 + r0, qb = qa + 8;
  const int offset = s.kv_len - s.q_len;  // causal: query i sees keys <= i + offset
  float ma = -INFINITY, mb = -INFINITY, la = 0.f, lb = 0.f;  // per row; l partial over this thread's columns
  const float sl2 = scale * kLog2e;
  int tiles = (s.kv_len + kTile - 1) / kTile;
  if (s.causal) tiles = min(tiles, (q0 + kTile - 1 + offset) / kTile + 1);
  for (int t = 0; t < tiles; ++t) {
    const int k0 = t * kTile;
    __syncthreads();
    load_tile<T, D>(Ks, k + static_cast<int64_t>(k0) * D, min(kTile, s.kv_len - k0));
    load_tile<T, D>(Vs, v + static_cast<int64_t>(k0) * D, min(kTile, s.kv_len - k0));
    __syncthreads();
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> sf[kTile / 16];
    for (int n = 0; n < kTile / 16; ++n) {
      wmma::fill_fragment(sf[n], 0.f);
      for (int kd = 0; kd < D / 16; ++kd) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bk;
        wmma::load_matrix_sync(bk, Ks + (n * 16) * DS + kd * 16, DS);
        wmma::mma_sync(sf[n], qf[kd], bk, sf[n]);
      }
    }
    const bool mask = s.causal ? (k0 + kTile - 1 > q0 + warp * 16 + offset) || k0 + kTile > s.kv_len : k0 + kTile > s.kv_len;
    float ta = -INFINITY, tb = -INFINITY;
    for (int n = 0; n < kTile / 16; ++n)
      for (int i = 0; i < sf[n].num_elements; ++i) {
        const int row = frag_row(lane, i), kj = k0 + n * 16 + frag_col(lane, i);
        const int qi = row < 8 ? qa : qb;
        float x = sf[n].x[i] * sl2;
        if (mask && (kj >= s.kv_len || (s.causal && kj > qi + offset))) x = -INFINITY;
        sf[n].x[i] = x;
        if (row < 8) ta = fmaxf(ta, x);
        else tb = fmaxf(tb, x);
      }
    for (int o2 = 1; o2 <= 2; o2 <<= 1) {
      ta = fmaxf(ta, __shfl_xor_sync(0xffffffff, ta, o2));
      tb = fmaxf(tb, __shfl_xor_sync(0xffffffff, tb, o2));
    }
    const float na = fmaxf(ma, ta), nb = fmaxf(mb, tb);
    const float ra = na == -INFINITY ? 0.f : na, rb = nb == -INFINITY ? 0.f : nb;
    const float aa = exp2f(ma - ra), ab = exp2f(mb - rb);
    ma = na;
    mb = nb;
    float sa = 0.f, sb = 0.f;
    for (int n = 0; n < kTile / 16; ++n)
      for (int i = 0; i < sf[n].num_elements; ++i) {
        const int row = frag_row(lane, i);
        const float p = exp2f(sf[n].x[i] - (row < 8 ? ra : rb));
        if (row < 8) sa += p;
        else sb += p;
        Pw[row * kPS + n * 16 + frag_col(lane, i)] = from_f<T>(p);
      }
    la = la * aa + sa;
    lb = lb * ab + sb;
    for (int dt = 0; dt < D / 16; ++dt)
      for (int i = 0; i < o[dt].num_elements; ++i) o[dt].x[i] *= frag_row(lane, i) < 8 ? aa : ab;
    __syncwarp();
    for (int kk = 0; kk < kTile / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pa;
      wmma::load_matrix_sync(pa, Pw + kk * 16, kPS);
      for (int dt = 0; dt < D / 16; ++dt) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bv;
        wmma::load_matrix_sync(bv, Vs + (kk * 16) * DS + dt * 16, DS);
        wmma::mma_sync(o[dt], pa, bv, o[dt]);
      }
    }
    __syncwarp();
  }
  for (int o2 = 1; o2 <= 2; o2 <<= 1) {
    la += __shfl_xor_sync(0xffffffff, la, o2);
    lb += __shfl_xor_sync(0xffffffff, lb, o2);
  }
  const float ia = la > 0.f ? 1.f / la : 0.f, ib = lb > 0.f ? 1.f / lb : 0.f;
  for (int dt = 0; dt < D / 16; ++dt)
    for (int i = 0; i < o[dt].num_elements; ++i) {
      const int row = frag_row(lane, i), qi = row < 8 ? qa : qb;
      if (qi < s.q_len)
        O[(static_cast<int64_t>(bh) * s.q_len + qi) * D + dt * 16 + frag_col(lane, i)] = from_f<T>(o[dt].x[i] * (row < 8 ? ia : ib));
    }
  if ((lane & 3) == 0) {
    if (qa < s.q_len) LSE[static_cast<int64_t>(bh) * s.q_len + qa] = la > 0.f ? ma + log2f(la) : -INFINITY;
    if (qb < s.q_len) LSE[static_cast<int64_t>(bh) * s.q_len + qb] = lb > 0.f ? mb + log2f(lb) : -INFINITY;
  }
}

// Delta_i = sum_d dO[i,d]·O[i,d], one warp per row.
template <typename T, int D>
__global__ void attention_delta(const T* O, const T* dO, float* delta, int64_t rows) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float acc = 0.f;
  for (int c = lane; c < D; c += 32) acc += to_f(O[row * D + c]) * to_f(dO[row * D + c]);
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffff, acc, o);
  if (lane == 0) delta[row] = acc;
}

// ---- backward (FlashAttention-2 style) ------------------------------------------------
// Each block owns 64 keys of one (batch, query head); each warp 16 of them, with its dK
// and dV rows in tensor-core accumulators. It walks the query tiles that can see its
// keys: S^T = K_w·Q^T, P^T = exp(S^T - lse), dP^T = V_w·dO^T, dS^T = P^T∘(dP^T - Delta);
// dV_w += P^T·dO, dK_w += dS^T·Q, dQ += dS·K_w (shared-memory sum, then global atomics).
// dK and dV are summed over the query heads of a KV group with global atomics.
template <typename T, int D>
__global__ void flash_bwd(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                          const T* __restrict__ dO, const float* __restrict__ LSE, const float* __restrict__ Delta,
                          float* __restrict__ dQ, float* __restrict__ dK, float* __restrict__ dV, AttentionShape s,
                          float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int DS = D + kPadH;
  T* Ks = reinterpret_cast<T*>(smem);
  T* Vs = Ks + kTile * DS;
  T* Qs = Vs + kTile * DS;
  T* dOs = Qs + kTile * DS;
  T* Pt = dOs + kTile * DS;                // [warps][16][kPS]  P^T
  T* dSt = Pt + kWarps * 16 * kPS;         // [warps][16][kPS]  dS^T
  float* St = reinterpret_cast<float*>(dSt + kWarps * 16 * kPS);  // [warps][16][kSS]
  float* scratch = St + kWarps * 16 * kSS;  // [warps][16][16]
  float* lse_s = scratch + kWarps * 256;    // [64]
  float* delta_s = lse_s + kTile;           // [64]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = blockIdx.y, b = bh / s.heads, h = bh % s.heads;
  const int hk = h / (s.heads / s.kv_heads);
  const int k0 = blockIdx.x * kTile;
  const int64_t kv_base = (static_cast<int64_t>(b) * s.kv_heads + hk) * s.kv_len;
  load_tile<T, D>(Ks, K + (kv_base + k0) * D, min(kTile, s.kv_len - k0));
  load_tile<T, D>(Vs, V + (kv_base + k0) * D, min(kTile, s.kv_len - k0));
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dk[D / 16], dv[D / 16];
  for (int i = 0; i < D / 16; ++i) {
    wmma::fill_fragment(dk[i], 0.f);
    wmma::fill_fragment(dv[i], 0.f);
  }
  float* Sw = St + warp * 16 * kSS;
  T* Pw = Pt + warp * 16 * kPS;
  T* dSw = dSt + warp * 16 * kPS;
  const int r = lane / 2, half = lane % 2;  // row r of the warp's 16 keys, columns by half
  const int kj = k0 + warp * 16 + r;
  const int offset = s.kv_len - s.q_len;
  const float sl2 = scale * kLog2e;
  const int qtiles = (s.q_len + kTile - 1) / kTile;
  const int first = s.causal ? max(0, (k0 - offset) / kTile) : 0;
  const int64_t q_base = static_cast<int64_t>(bh) * s.q_len;
  for (int t = first; t < qtiles; ++t) {
    const int q0 = t * kTile;
    __syncthreads();
    load_tile<T, D>(Qs, Q + (q_base + q0) * D, min(kTile, s.q_len - q0));
    load_tile<T, D>(dOs, dO + (q_base + q0) * D, min(kTile, s.q_len - q0));
    for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
      lse_s[i] = q0 + i < s.q_len ? LSE[q_base + q0 + i] : INFINITY;
      delta_s[i] = q0 + i < s.q_len ? Delta[q_base + q0 + i] : 0.f;
    }
    __syncthreads();
    // S^T = K_w · Q^T (16 keys × 64 queries).
    for (int n = 0; n < kTile / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      for (int kd = 0; kd < D / 16; ++kd) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bq;
        wmma::load_matrix_sync(a, Ks + (warp * 16) * DS + kd * 16, DS);
        wmma::load_matrix_sync(bq, Qs + (n * 16) * DS + kd * 16, DS);
        wmma::mma_sync(acc, a, bq, acc);
      }
      wmma::store_matrix_sync(Sw + n * 16, acc, kSS, wmma::mem_row_major);
    }
    __syncwarp();
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const int qi = q0 + c;
      float p = 0.f;
      if (qi < s.q_len && kj < s.kv_len && !(s.causal && kj > qi + offset)) p = exp2f(Sw[r * kSS + c] * sl2 - lse_s[c]);
      Pw[r * kPS + c] = from_f<T>(p);
    }
    __syncwarp();
    // dP^T = V_w · dO^T.
    for (int n = 0; n < kTile / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      for (int kd = 0; kd < D / 16; ++kd) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bo;
        wmma::load_matrix_sync(a, Vs + (warp * 16) * DS + kd * 16, DS);
        wmma::load_matrix_sync(bo, dOs + (n * 16) * DS + kd * 16, DS);
        wmma::mma_sync(acc, a, bo, acc);
      }
      wmma::store_matrix_sync(Sw + n * 16, acc, kSS, wmma::mem_row_major);
    }
    __syncwarp();
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const float p = to_f(Pw[r * kPS + c]);
      dSw[r * kPS + c] = from_f<T>(p * (Sw[r * kSS + c] - delta_s[c]));
    }
    __syncwarp();
    // dV_w += P^T · dO; dK_w += dS^T · Q (scaled at the end).
    for (int dt = 0; dt < D / 16; ++dt)
      for (int kk = 0; kk < kTile / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> p, ds;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bo, bq;
        wmma::load_matrix_sync(p, Pw + kk * 16, kPS);
        wmma::load_matrix_sync(bo, dOs + (kk * 16) * DS + dt * 16, DS);
        wmma::mma_sync(dv[dt], p, bo, dv[dt]);
        wmma::load_matrix_sync(ds, dSw + kk * 16, kPS);
        wmma::load_matrix_sync(bq, Qs + (kk * 16) * DS + dt * 16, DS);
        wmma::mma_sync(dk[dt], ds, bq, dk[dt]);
      }
    // dQ rows [16·warp, 16·warp + 16) += dS (16 × 64 keys, read from every warp's dS^T)
    // · K (64 × D); fp32 atomics into global memory (other blocks add their keys' share).
    __syncthreads();
    float* sc = scratch + warp * 256;
    for (int dt = 0; dt < D / 16; ++dt) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      for (int kk = 0; kk < kTile / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major> ds;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bk;
        wmma::load_matrix_sync(ds, dSt + kk * 16 * kPS + warp * 16, kPS);
        wmma::load_matrix_sync(bk, Ks + (kk * 16) * DS + dt * 16, DS);
        wmma::mma_sync(acc, ds, bk, acc);
      }
      for (int i = 0; i < acc.num_elements; ++i) {
        const int qi = q0 + warp * 16 + frag_row(lane, i);
        if (qi < s.q_len) atomicAdd(&dQ[(q_base + qi) * D + dt * 16 + frag_col(lane, i)], acc.x[i] * scale);
      }
    }
    (void)sc;
  }
  __syncthreads();
  // The warp's dK and dV rows, summed over the query heads that share this KV head.
  float* sc = scratch + warp * 256;
  for (int dt = 0; dt < D / 16; ++dt)
    for (int which = 0; which < 2; ++which) {
      wmma::store_matrix_sync(sc, which == 0 ? dk[dt] : dv[dt], 16, wmma::mem_row_major);
      __syncwarp();
      for (int i = lane; i < 256; i += 32) {
        const int key = k0 + warp * 16 + i / 16;
        if (key < s.kv_len) {
          float* dst = which == 0 ? dK : dV;
          atomicAdd(&dst[(kv_base + key) * D + dt * 16 + i % 16], which == 0 ? sc[i] * scale : sc[i]);
        }
      }
      __syncwarp();
    }
}

template <typename T>
__global__ void to_elem(const float* in, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(in[i]);
}

size_t fwd_smem(int D, size_t elem) { return (3 * kTile * (D + kPadH) + kWarps * 16 * kPS) * elem; }
size_t bwd_smem(int D, size_t elem) {
  return (4 * kTile * (D + kPadH) + 2 * kWarps * 16 * kPS) * elem + (kWarps * 16 * kSS + kWarps * 256 + 2 * kTile) * sizeof(float);
}

template <typename T, int D>
void fwd(const AttentionShape& s, const void* q, const void* k, const void* v, void* o, float* lse, cudaStream_t st) {
  const size_t sm = fwd_smem(D, sizeof(T));
  CS_CUDA(cudaFuncSetAttribute(flash_fwd<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sm)));
  dim3 grid((s.q_len + kTile - 1) / kTile, s.batch * s.heads);
  flash_fwd<T, D><<<grid, kWarps * 32, sm, st>>>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                                                 static_cast<T*>(o), lse, s, 1.f / std::sqrt(static_cast<float>(D)));
  CS_CUDA(cudaGetLastError());
}

template <typename T, int D>
void bwd(const AttentionShape& s, const void* q, const void* k, const void* v, const void* o, const void* dout,
         const float* lse, float* delta, float* dq, float* dk, float* dv, void* dq16, void* dk16, void* dv16,
         cudaStream_t st) {
  const int64_t qn = static_cast<int64_t>(s.batch) * s.heads * s.q_len;
  const int64_t kn = static_cast<int64_t>(s.batch) * s.kv_heads * s.kv_len;
  CS_CUDA(cudaMemsetAsync(dq, 0, qn * D * sizeof(float), st));
  CS_CUDA(cudaMemsetAsync(dk, 0, kn * D * sizeof(float), st));
  CS_CUDA(cudaMemsetAsync(dv, 0, kn * D * sizeof(float), st));
  attention_delta<T, D><<<static_cast<unsigned>((qn * 32 + 255) / 256), 256, 0, st>>>(
      static_cast<const T*>(o), static_cast<const T*>(dout), delta, qn);
  const size_t sm = bwd_smem(D, sizeof(T));
  CS_CUDA(cudaFuncSetAttribute(flash_bwd<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sm)));
  dim3 grid((s.kv_len + kTile - 1) / kTile, s.batch * s.heads);
  flash_bwd<T, D><<<grid, kWarps * 32, sm, st>>>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                                                 static_cast<const T*>(dout), lse, delta, dq, dk, dv, s,
                                                 1.f / std::sqrt(static_cast<float>(D)));
  CS_CUDA(cudaGetLastError());
  to_elem<T><<<1024, 256, 0, st>>>(dq, static_cast<T*>(dq16), qn * D);
  to_elem<T><<<1024, 256, 0, st>>>(dk, static_cast<T*>(dk16), kn * D);
  to_elem<T><<<1024, 256, 0, st>>>(dv, static_cast<T*>(dv16), kn * D);
  CS_CUDA(cudaGetLastError());
}

// ---- memory-bound op ------------------------------------------------------------------
__global__ void memory_kernel(const float4* in, float4* out, int64_t nr, int64_t nw) {
  float acc = 0.f;
  const int64_t n = nr > nw ? nr : nw;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float4 v = i < nr ? in[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    if (i < nw) out[i] = make_float4(v.x * 1.0001f, v.y, v.z, v.w + 1.f);
    else acc += v.x + v.y + v.z + v.w;
  }
  // Keeps the reads of a kernel that writes nothing (never true in practice; `out` is
  // always a valid region, the real backend's output pool or the calibration's buffer).
  if (acc == 1.2345e-38f) out[0].x = acc;
}

__device__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

template <typename T>
__global__ void fill_kernel(T* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = from_f<T>(scale * (static_cast<float>(mix64(seed ^ static_cast<uint64_t>(i)) >> 40) / 8388608.f - 1.f));
}
__global__ void fill_f32(float* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = scale * (static_cast<float>(mix64(seed ^ static_cast<uint64_t>(i)) >> 40) / 8388608.f - 1.f);
}

// ---- references -----------------------------------------------------------------------
template <typename T>
__global__ void ref_gemm(int m, int n, int k, const T* a, const T* b, float* c) {
  const int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m || j >= n) return;
  float acc = 0.f;
  for (int x = 0; x < k; ++x) acc += to_f(a[static_cast<int64_t>(i) * k + x]) * to_f(b[static_cast<int64_t>(x) * n + j]);
  c[static_cast<int64_t>(i) * n + j] = acc;
}

// One thread per (b, h, query): two passes over the keys (max, then sum and output).
template <typename T>
__global__ void ref_attention(AttentionShape s, const T* Q, const T* K, const T* V, float* O) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t total = static_cast<int64_t>(s.batch) * s.heads * s.q_len;
  if (idx >= total) return;
  const int D = s.head_dim;
  const int qi = static_cast<int>(idx % s.q_len), bh = static_cast<int>(idx / s.q_len);
  const int b = bh / s.heads, h = bh % s.heads, hk = h / (s.heads / s.kv_heads);
  const T* q = Q + idx * D;
  const T* k = K + (static_cast<int64_t>(b) * s.kv_heads + hk) * s.kv_len * D;
  const T* v = V + (static_cast<int64_t>(b) * s.kv_heads + hk) * s.kv_len * D;
  const float scale = rsqrtf(static_cast<float>(D));
  const int last = s.causal ? min(s.kv_len - 1, qi + s.kv_len - s.q_len) : s.kv_len - 1;
  float mx = -INFINITY;
  for (int j = 0; j <= last; ++j) {
    float dot = 0.f;
    for (int d = 0; d < D; ++d) dot += to_f(q[d]) * to_f(k[static_cast<int64_t>(j) * D + d]);
    mx = fmaxf(mx, dot * scale);
  }
  float* o = O + idx * D;
  for (int d = 0; d < D; ++d) o[d] = 0.f;
  float sum = 0.f;
  for (int j = 0; j <= last; ++j) {
    float dot = 0.f;
    for (int d = 0; d < D; ++d) dot += to_f(q[d]) * to_f(k[static_cast<int64_t>(j) * D + d]);
    const float p = expf(dot * scale - mx);
    sum += p;
    for (int d = 0; d < D; ++d) o[d] += p * to_f(v[static_cast<int64_t>(j) * D + d]);
  }
  for (int d = 0; d < D; ++d) o[d] /= sum;
}

// Gradients from the definition, one thread per (b, h, query): dQ directly, dK and dV
// with atomics. P = softmax(S), dP = dO·V^T, dS = P∘(dP - rowsum(dP∘P)).
template <typename T>
__global__ void ref_attention_bwd(AttentionShape s, const T* Q, const T* K, const T* V, const T* dO, float* dQ, float* dK,
                                  float* dV) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t total = static_cast<int64_t>(s.batch) * s.heads * s.q_len;
  if (idx >= total) return;
  const int D = s.head_dim;
  const int qi = static_cast<int>(idx % s.q_len), bh = static_cast<int>(idx / s.q_len);
  const int b = bh / s.heads, h = bh % s.heads, hk = h / (s.heads / s.kv_heads);
  const int64_t kvb = (static_cast<int64_t>(b) * s.kv_heads + hk) * s.kv_len;
  const T* q = Q + idx * D;
  const T* go = dO + idx * D;
  const float scale = rsqrtf(static_cast<float>(D));
  const int last = s.causal ? min(s.kv_len - 1, qi + s.kv_len - s.q_len) : s.kv_len - 1;
  float mx = -INFINITY;
  for (int j = 0; j <= last; ++j) {
    float dot = 0.f;
    for (int d = 0; d < D; ++d) dot += to_f(q[d]) * to_f(K[(kvb + j) * D + d]);
    mx = fmaxf(mx, dot * scale);
  }
  float sum = 0.f;
  for (int j = 0; j <= last; ++j) {
    float dot = 0.f;
    for (int d = 0; d < D; ++d) dot += to_f(q[d]) * to_f(K[(kvb + j) * D + d]);
    sum += expf(dot * scale - mx);
  }
  float rowdot = 0.f;  // sum_j P_j · dP_j
  for (int j = 0; j <= last; ++j) {
    float dot = 0.f, dp = 0.f;
    for (int d = 0; d < D; ++d) {
      dot += to_f(q[d]) * to_f(K[(kvb + j) * D + d]);
      dp += to_f(go[d]) * to_f(V[(kvb + j) * D + d]);
    }
    rowdot += expf(dot * scale - mx) / sum * dp;
  }
  float* dq = dQ + idx * D;
  for (int d = 0; d < D; ++d) dq[d] = 0.f;
  for (int j = 0; j <= last; ++j) {
    float dot = 0.f, dp = 0.f;
    for (int d = 0; d < D; ++d) {
      dot += to_f(q[d]) * to_f(K[(kvb + j) * D + d]);
      dp += to_f(go[d]) * to_f(V[(kvb + j) * D + d]);
    }
    const float p = expf(dot * scale - mx) / sum;
    const float ds = p * (dp - rowdot);
    for (int d = 0; d < D; ++d) {
      dq[d] += ds * scale * to_f(K[(kvb + j) * D + d]);
      atomicAdd(&dK[(kvb + j) * D + d], ds * scale * to_f(q[d]));
      atomicAdd(&dV[(kvb + j) * D + d], p * to_f(go[d]));
    }
  }
}

template <typename F>
void dispatch(Elem e, F&& f) {
  if (e == Elem::BF16) f(__nv_bfloat16{});
  else f(__half{});
}

}  // namespace

bool attention_supported(int head_dim) { return head_dim == 64 || head_dim == 128; }

void attention_forward(Elem e, const AttentionShape& s, const void* q, const void* k, const void* v, void* o, float* lse,
                       cudaStream_t st) {
  if (!attention_supported(s.head_dim) || s.heads % s.kv_heads != 0)
    throw RealBackendError("attention: head_dim must be 64 or 128 and kv_heads divide heads (got head_dim " +
                           std::to_string(s.head_dim) + ") while running " + context());
  dispatch(e, [&](auto t) {
    using T = decltype(t);
    if (s.head_dim == 64) fwd<T, 64>(s, q, k, v, o, lse, st);
    else fwd<T, 128>(s, q, k, v, o, lse, st);
  });
}

void attention_backward(Elem e, const AttentionShape& s, const void* q, const void* k, const void* v, const void* o,
                        const void* dout, const float* lse, float* delta, float* dq, float* dk, float* dv, void* dq16,
                        void* dk16, void* dv16, cudaStream_t st) {
  if (!attention_supported(s.head_dim) || s.heads % s.kv_heads != 0)
    throw RealBackendError("attention backward: head_dim must be 64 or 128 while running " + context());
  dispatch(e, [&](auto t) {
    using T = decltype(t);
    if (s.head_dim == 64) bwd<T, 64>(s, q, k, v, o, dout, lse, delta, dq, dk, dv, dq16, dk16, dv16, st);
    else bwd<T, 128>(s, q, k, v, o, dout, lse, delta, dq, dk, dv, dq16, dk16, dv16, st);
  });
}

// One 32 x 32 tile per block of 32 x 8 threads: each thread casts four elements of its
// column, the tile goes through shared memory (padded against bank conflicts) so the
// transposed writes are coalesced too, and the block's max |x| reaches *amax with one
// atomic (non-negative floats order as their bit patterns).
__global__ void fp8_cast_transpose_kernel(const __nv_bfloat16* in, int64_t rows, int64_t cols, float scale,
                                          __nv_fp8_storage_t* out, __nv_fp8_storage_t* out_t, float* amax) {
  __shared__ __nv_fp8_storage_t tile[32][33];
  __shared__ float block_max[8];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 32, c0 = static_cast<int64_t>(blockIdx.x) * 32;
  float local = 0.f;
  for (int i = threadIdx.y; i < 32; i += 8) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) {
      const float x = __bfloat162float(in[r * cols + c]);
      local = fmaxf(local, fabsf(x));
      const __nv_fp8_storage_t q = __nv_cvt_float_to_fp8(x * scale, __NV_SATFINITE, __NV_E4M3);
      out[r * cols + c] = q;
      tile[i][threadIdx.x] = q;
    }
  }
  for (int o = 16; o > 0; o /= 2) local = fmaxf(local, __shfl_xor_sync(0xffffffffu, local, o));
  if (threadIdx.x == 0) block_max[threadIdx.y] = local;
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += 8) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < rows && c < cols) out_t[c * rows + r] = tile[threadIdx.x][i];
  }
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    float m = 0.f;
    for (float v : block_max) m = fmaxf(m, v);
    atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
  }
}

// The vectorized form, for rows and cols multiples of 8 on 16-byte aligned pointers: a
// 64 x 64 tile per block of 256 threads, 16-byte loads of eight BF16 values, 8-byte stores
// of eight FP8 bytes both ways.
__global__ void fp8_cast_transpose_vec_kernel(const __nv_bfloat16* in, int64_t rows, int64_t cols, float scale,
                                              uint8_t* out, uint8_t* out_t, float* amax) {
  __shared__ uint8_t tile[64][72];
  __shared__ float warp_max[8];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 64, c0 = static_cast<int64_t>(blockIdx.x) * 64;
  const int t = threadIdx.x;
  float local = 0.f;
  for (int k = 0; k < 2; ++k) {
    const int row = (t >> 3) + 32 * k, col = (t & 7) * 8;
    const int64_t r = r0 + row, c = c0 + col;
    if (r < rows && c < cols) {
      const uint4 v = *reinterpret_cast<const uint4*>(in + r * cols + c);
      const __nv_bfloat16* x = reinterpret_cast<const __nv_bfloat16*>(&v);
      uint8_t q[8];
      for (int j = 0; j < 8; ++j) {
        const float f = __bfloat162float(x[j]);
        local = fmaxf(local, fabsf(f));
        q[j] = __nv_cvt_float_to_fp8(f * scale, __NV_SATFINITE, __NV_E4M3);
        tile[row][col + j] = q[j];
      }
      *reinterpret_cast<uint2*>(out + r * cols + c) = *reinterpret_cast<const uint2*>(q);
    }
  }
  for (int o = 16; o > 0; o /= 2) local = fmaxf(local, __shfl_xor_sync(0xffffffffu, local, o));
  if ((t & 31) == 0) warp_max[t >> 5] = local;
  __syncthreads();
  for (int k = 0; k < 2; ++k) {
    const int col = (t >> 3) + 32 * k, row = (t & 7) * 8;  // an output row (input column), eight input rows
    const int64_t c = c0 + col, r = r0 + row;
    if (r < rows && c < cols) {
      uint8_t q[8];
      for (int j = 0; j < 8; ++j) q[j] = tile[row + j][col];
      *reinterpret_cast<uint2*>(out_t + c * rows + r) = *reinterpret_cast<const uint2*>(q);
    }
  }
  if (t == 0) {
    float m = 0.f;
    for (float v : warp_max) m = fmaxf(m, v);
    atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
  }
}

void fp8_cast_transpose_amax(const void* in, int64_t rows, int64_t cols, float scale, void* out, void* out_t,
                             float* amax, cudaStream_t st) {
  if (rows <= 0 || cols <= 0) return;
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (rows % 8 == 0 && cols % 8 == 0 && aligned(in) && aligned(out) && aligned(out_t)) {
    const dim3 grid(static_cast<unsigned>((cols + 63) / 64), static_cast<unsigned>((rows + 63) / 64));
    if (grid.y > 65535) throw RealBackendError("fp8 cast-transpose: " + std::to_string(rows) + " rows is past 65535 tiles");
    fp8_cast_transpose_vec_kernel<<<grid, 256, 0, st>>>(static_cast<const __nv_bfloat16*>(in), rows, cols, scale,
                                                        static_cast<uint8_t*>(out), static_cast<uint8_t*>(out_t), amax);
    CS_CUDA(cudaGetLastError());
    return;
  }
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32));
  if (grid.y > 65535) throw RealBackendError("fp8 cast-transpose: " + std::to_string(rows) + " rows is past 65535 tiles");
  fp8_cast_transpose_kernel<<<grid, dim3(32, 8), 0, st>>>(static_cast<const __nv_bfloat16*>(in), rows, cols, scale,
                                                           static_cast<__nv_fp8_storage_t*>(out),
                                                           static_cast<__nv_fp8_storage_t*>(out_t), amax);
  CS_CUDA(cudaGetLastError());
}

void memory_op(const void* in, void* out, int64_t read_bytes, int64_t write_bytes, cudaStream_t st) {
  const int64_t nr = read_bytes / 16, nw = write_bytes / 16;
  if (nr + nw == 0) return;
  memory_kernel<<<132 * 8, 256, 0, st>>>(static_cast<const float4*>(in), static_cast<float4*>(out), nr, nw);
  CS_CUDA(cudaGetLastError());
}

__global__ void spin_kernel(uint64_t ns) {
  uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

void spin(double seconds, cudaStream_t st) {
  spin_kernel<<<1, 1, 0, st>>>(static_cast<uint64_t>(seconds * 1e9));
  CS_CUDA(cudaGetLastError());
}

void fill_random(Elem e, void* p, int64_t n, uint64_t seed, float scale, cudaStream_t st) {
  dispatch(e, [&](auto t) {
    using T = decltype(t);
    fill_kernel<T><<<1024, 256, 0, st>>>(static_cast<T*>(p), n, seed, scale);
  });
  CS_CUDA(cudaGetLastError());
}

void fill_random_f32(float* p, int64_t n, uint64_t seed, float scale, cudaStream_t st) {
  fill_f32<<<1024, 256, 0, st>>>(p, n, seed, scale);
  CS_CUDA(cudaGetLastError());
}

void reference_gemm(Elem e, int m, int n, int k, const void* a, const void* b, float* c, cudaStream_t st) {
  dispatch(e, [&](auto t) {
    using T = decltype(t);
    dim3 block(16, 16), grid((n + 15) / 16, (m + 15) / 16);
    ref_gemm<T><<<grid, block, 0, st>>>(m, n, k, static_cast<const T*>(a), static_cast<const T*>(b), c);
  });
  CS_CUDA(cudaGetLastError());
}

void reference_attention(Elem e, const AttentionShape& s, const void* q, const void* k, const void* v, float* o,
                         cudaStream_t st) {
  const int64_t total = static_cast<int64_t>(s.batch) * s.heads * s.q_len;
  dispatch(e, [&](auto t) {
    using T = decltype(t);
    ref_attention<T><<<static_cast<unsigned>((total + 127) / 128), 128, 0, st>>>(s, static_cast<const T*>(q), static_cast<const T*>(k),
                                                                                static_cast<const T*>(v), o);
  });
  CS_CUDA(cudaGetLastError());
}

void reference_attention_backward(Elem e, const AttentionShape& s, const void* q, const void* k, const void* v,
                                  const void* dout, float* dq, float* dk, float* dv, cudaStream_t st) {
  const int64_t total = static_cast<int64_t>(s.batch) * s.heads * s.q_len;
  const int64_t kn = static_cast<int64_t>(s.batch) * s.kv_heads * s.kv_len * s.head_dim;
  CS_CUDA(cudaMemsetAsync(dk, 0, kn * sizeof(float), st));
  CS_CUDA(cudaMemsetAsync(dv, 0, kn * sizeof(float), st));
  dispatch(e, [&](auto t) {
    using T = decltype(t);
    ref_attention_bwd<T><<<static_cast<unsigned>((total + 127) / 128), 128, 0, st>>>(
        s, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<const T*>(dout), dq, dk, dv);
  });
  CS_CUDA(cudaGetLastError());
}

double max_relative_error(Elem e, const void* a, const float* b, int64_t n, double eps) {
  std::vector<uint16_t> ha(static_cast<size_t>(n));
  std::vector<float> hb(static_cast<size_t>(n));
  CS_CUDA(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
  CS_CUDA(cudaMemcpy(hb.data(), b, n * 4, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    float x;
    if (e == Elem::BF16) {
      const uint32_t bits = static_cast<uint32_t>(ha[static_cast<size_t>(i)]) << 16;
      std::memcpy(&x, &bits, 4);
    } else {
      x = __half2float(*reinterpret_cast<const __half*>(&ha[static_cast<size_t>(i)]));
    }
    worst = std::max(worst, std::fabs(x - hb[static_cast<size_t>(i)]) / (std::fabs(hb[static_cast<size_t>(i)]) + eps));
  }
  return worst;
}

double max_abs_error_f32(const float* a, const float* b, int64_t n) {
  std::vector<float> ha(static_cast<size_t>(n)), hb(static_cast<size_t>(n));
  CS_CUDA(cudaMemcpy(ha.data(), a, n * 4, cudaMemcpyDeviceToHost));
  CS_CUDA(cudaMemcpy(hb.data(), b, n * 4, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, static_cast<double>(std::fabs(ha[static_cast<size_t>(i)] - hb[static_cast<size_t>(i)])));
  return worst;
}

}  // namespace clustersim::real
