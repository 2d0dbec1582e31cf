// A GEMM beside a kernel that holds k SMs and streams HBM, as an NCCL or userbuffers
// kernel does beside the GEMMs it overlaps. One GPU: the copy kernel's blocks (one per
// SM, 512 threads, as an NCCL channel) read and write device memory at a set pace.
//
// For each GEMM shape and k it times, interleaved over rounds (medians):
//   alone          the GEMM on every SM
//   target         the GEMM told to use 132 - k SMs (cuBLASLt SM_COUNT_TARGET, as
//                  Transformer Engine sets it beside userbuffers), nothing beside it
//   target+copy    the same, with the copy kernel on k SMs
//   copy           the GEMM with no target, the copy kernel on k SMs (a plain matmul
//                  beside an NCCL kernel)
// and prints the copy kernel's achieved bytes/s.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)
#define CL(x)                                                             \
  do {                                                                    \
    cublasStatus_t s_ = (x);                                              \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                    \
      std::fprintf(stderr, "%s:%d cublas %d\n", __FILE__, __LINE__, (int)s_); \
      std::exit(1);                                                       \
    }                                                                     \
  } while (0)

// Each block copies 64 KiB chunks of its own slice, pausing `pause_ns` after each, until
// *stop; counts the bytes it moved.
__global__ void __launch_bounds__(512) copy_kernel(const int4* __restrict__ src, int4* __restrict__ dst, size_t per_block,
                                                   const volatile int* stop, unsigned pause_ns,
                                                   unsigned long long* moved) {
  extern __shared__ char hold[];  // only to keep one block per SM
  __shared__ int done;
  const int4* s = src + blockIdx.x * per_block;
  int4* d = dst + blockIdx.x * per_block;
  constexpr size_t kChunk = 4096;  // int4s: 64 KiB
  size_t at = 0;
  unsigned long long bytes = 0;
  if (threadIdx.x == 0) hold[0] = 0;
  for (;;) {
    for (size_t j = threadIdx.x; j < kChunk; j += blockDim.x) d[at + j] = s[at + j];
    bytes += 2 * kChunk * sizeof(int4);  // read and written
    at = (at + kChunk) % per_block;
    if (pause_ns) __nanosleep(pause_ns);
    if ((at / kChunk) % 16 == 0) {  // the stop flag, in device memory, every 1 MiB
      if (threadIdx.x == 0) done = *stop;
      __syncthreads();
      if (done) break;
      __syncthreads();
    }
  }
  if (threadIdx.x == 0) atomicAdd(moved, bytes);
}

struct Gemm {
  int m, n, k;
  const char* name;
};

// overlap_sm [70b|405b] [bf16|fp8]: the forward GEMMs of one layer at TP 8 and 8,192
// tokens (FP8: E4M3 inputs, BF16 output, A transposed as cuBLASLt's FP8 kernels need).
int main(int argc, char** argv) {
  const std::string model = argc > 1 ? argv[1] : "70b";
  const bool fp8 = argc > 2 && std::string(argv[2]) == "fp8";
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cublasLtHandle_t lt;
  CL(cublasLtCreate(&lt));
  const size_t ws_bytes = 64 << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  // The copy kernel's buffers: 48 MiB per block, well past L2.
  const size_t per_block = (size_t{48} << 20) / sizeof(int4);
  const int kmax = 40;
  int4 *src, *dst;
  CK(cudaMalloc(&src, per_block * kmax * sizeof(int4)));
  CK(cudaMalloc(&dst, per_block * kmax * sizeof(int4)));
  CK(cudaMemset(src, 1, per_block * kmax * sizeof(int4)));
  // The stop flag lives in device memory and is set by a copy on a third stream (a flag
  // in mapped host memory, polled by every block, held the copy to about 135 GB/s).
  int* stop_d;
  CK(cudaMalloc(&stop_d, sizeof(int)));
  int* one_h;
  CK(cudaMallocHost(&one_h, sizeof(int)));
  *one_h = 1;
  unsigned long long* moved;
  CK(cudaMalloc(&moved, sizeof(unsigned long long)));
  const int hold_bytes = 120 << 10;
  CK(cudaFuncSetAttribute(copy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, hold_bytes));
  cudaStream_t sg, sc, sf;
  CK(cudaStreamCreateWithFlags(&sg, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&sc, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&sf, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  // Llama 3 70B at TP 8 with sequence parallelism, 8,192 tokens: the forward GEMMs of a
  // layer (QKV, projection, FC1, FC2); and 8192^3.
  std::vector<Gemm> gemms = {{1280, 8192, 8192, "qkv"},
                             {8192, 8192, 1024, "proj"},
                             {7168, 8192, 8192, "fc1"},
                             {8192, 8192, 3584, "fc2"},
                             {8192, 8192, 8192, "8192^3"}};
  std::vector<int> ks = {8, 16, 24, 32};
  std::vector<unsigned> pauses = {0, 4000};
  if (model == "405b") {  // hidden 16,384, FFN 53,248, 128 heads of 128, 8 KV heads
    gemms = {{2304, 8192, 16384, "qkv"}, {16384, 8192, 2048, "proj"}, {13312, 8192, 16384, "fc1"},
             {16384, 8192, 6656, "fc2"}};
  }
  if (model == "405b" || fp8) {
    ks = {16, 24};
    pauses = {0};
  }
  if (argc > 3) {  // a list of block counts, e.g. "1,2,4": the SMs an NCCL send or receive holds
    ks.clear();
    for (std::string list = argv[3]; !list.empty();) {
      const size_t comma = list.find(',');
      ks.push_back(std::stoi(list.substr(0, comma)));
      list = comma == std::string::npos ? "" : list.substr(comma + 1);
    }
    pauses = {0};
  }
  const size_t eb = fp8 ? 1 : 2;  // input bytes per element
  std::printf("sms %d\n", sms);
  std::printf("shape,k,pause_ns,mode,ms_median,tflops,copy_GBps\n");
  for (const Gemm& g : gemms) {
    __nv_bfloat16 *a, *b, *c;
    CK(cudaMalloc(&a, size_t(g.m) * g.k * eb));
    CK(cudaMalloc(&b, size_t(g.k) * g.n * eb));
    CK(cudaMalloc(&c, size_t(g.m) * g.n * 2));
    CK(cudaMemset(a, fp8 ? 0x38 : 0x3c, size_t(g.m) * g.k * eb));  // ~1.0 (bf16) / 1.0 (e4m3)
    CK(cudaMemset(b, fp8 ? 0x38 : 0x3c, size_t(g.k) * g.n * eb));
    // One plan per SM target (0: none).
    auto plan = [&](int target, cublasLtMatmulDesc_t& desc, cublasLtMatrixLayout_t* lay,
                    cublasLtMatmulAlgo_t& algo) {
      CL(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      if (target > 0)
        CL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &target, sizeof target));
      if (fp8) {
        const cublasOperation_t t = CUBLAS_OP_T;
        CL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
        CL(cublasLtMatrixLayoutCreate(&lay[0], CUDA_R_8F_E4M3, g.k, g.m, g.k));
        CL(cublasLtMatrixLayoutCreate(&lay[1], CUDA_R_8F_E4M3, g.k, g.n, g.k));
      } else {
        CL(cublasLtMatrixLayoutCreate(&lay[0], CUDA_R_16BF, g.m, g.k, g.m));
        CL(cublasLtMatrixLayoutCreate(&lay[1], CUDA_R_16BF, g.k, g.n, g.k));
      }
      CL(cublasLtMatrixLayoutCreate(&lay[2], CUDA_R_16BF, g.m, g.n, g.m));
      cublasLtMatmulPreference_t pref;
      CL(cublasLtMatmulPreferenceCreate(&pref));
      CL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                              sizeof ws_bytes));
      cublasLtMatmulHeuristicResult_t res;
      int found = 0;
      CL(cublasLtMatmulAlgoGetHeuristic(lt, desc, lay[0], lay[1], lay[2], lay[2], pref, 1, &res, &found));
      if (!found) std::exit(2);
      algo = res.algo;
      cublasLtMatmulPreferenceDestroy(pref);
    };
    const float alpha = 1, beta = 0;
    auto run = [&](cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t* lay, cublasLtMatmulAlgo_t& algo, int reps) {
      for (int r = 0; r < reps; ++r)
        CL(cublasLtMatmul(lt, desc, &alpha, a, lay[0], b, lay[1], &beta, c, lay[2], c, lay[2], &algo, ws, ws_bytes, sg));
    };
    const double flops = 2.0 * g.m * g.n * g.k;
    const int reps = std::max(4, int(2e12 / flops));  // about 4-8 ms of GEMMs a sample
    cublasLtMatmulDesc_t d_all;
    cublasLtMatrixLayout_t l_all[3];
    cublasLtMatmulAlgo_t a_all;
    plan(0, d_all, l_all, a_all);
    run(d_all, l_all, a_all, 3 * reps);  // warm
    CK(cudaStreamSynchronize(sg));
    for (int k : ks) {
      cublasLtMatmulDesc_t d_t;
      cublasLtMatrixLayout_t l_t[3];
      cublasLtMatmulAlgo_t a_t;
      plan(sms - k, d_t, l_t, a_t);
      for (unsigned pause : pauses) {
        // modes: 0 alone, 1 target, 2 target+copy, 3 copy
        std::vector<std::vector<double>> ms(4), gbps(4);
        for (int round = 0; round < 7; ++round)
          for (int mode = 0; mode < 4; ++mode) {
            const bool copy = mode >= 2;
            const bool target = mode == 1 || mode == 2;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the board's power settles
            if (copy) {
              CK(cudaMemsetAsync(stop_d, 0, sizeof(int), sc));
              CK(cudaMemsetAsync(moved, 0, sizeof(unsigned long long), sc));
              copy_kernel<<<k, 512, hold_bytes, sc>>>(src, dst, per_block, stop_d, pause, moved);
              CK(cudaGetLastError());
              std::this_thread::sleep_for(std::chrono::milliseconds(2));  // resident before the GEMMs
            }
            const auto t0 = std::chrono::steady_clock::now();
            CK(cudaEventRecord(e0, sg));
            if (target)
              run(d_t, l_t, a_t, reps);
            else
              run(d_all, l_all, a_all, reps);
            CK(cudaEventRecord(e1, sg));
            CK(cudaEventSynchronize(e1));
            const auto t1 = std::chrono::steady_clock::now();
            float t = 0;
            CK(cudaEventElapsedTime(&t, e0, e1));
            ms[mode].push_back(t / reps);
            if (copy) {
              CK(cudaMemcpyAsync(stop_d, one_h, sizeof(int), cudaMemcpyHostToDevice, sf));
              CK(cudaStreamSynchronize(sc));
              unsigned long long b = 0;
              CK(cudaMemcpy(&b, moved, sizeof b, cudaMemcpyDeviceToHost));
              // Bytes over the copy's whole life: from its launch to the stop (about 2 ms
              // alone before the GEMMs), so an estimate of its pace beside them.
              const double life = std::chrono::duration<double>(t1 - t0).count() + 2e-3;
              gbps[mode].push_back(double(b) / life / 1e9);
            }
          }
        const char* names[] = {"alone", "target", "target+copy", "copy"};
        for (int mode = 0; mode < 4; ++mode) {
          auto v = ms[mode];
          std::sort(v.begin(), v.end());
          const double med = v[v.size() / 2];
          double bw = 0;
          if (!gbps[mode].empty()) {
            auto w = gbps[mode];
            std::sort(w.begin(), w.end());
            bw = w[w.size() / 2];
          }
          std::printf("%s,%d,%u,%s,%.4f,%.1f,%.0f\n", g.name, k, pause, names[mode], med, flops / med / 1e9, bw);
        }
        std::fflush(stdout);
      }
    }
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
  }
  return 0;
}
