// Every CUDA, cuBLAS and NCCL call is checked; a failure becomes a RealBackendError that
// names the call, the error, and the op it served (set by the executor as it issues ops).
#pragma once

#include <stdexcept>
#include <string>

namespace clustersim::real {

class RealBackendError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the calling thread is doing, for error messages ("rank 3 op 17 'qkv' (gemm)").
void set_context(const std::string& what);
const std::string& context();

[[noreturn]] void fail_cuda(int code, const char* name, const char* call, const char* file, int line);
[[noreturn]] void fail_cublas(int code, const char* call, const char* file, int line);
[[noreturn]] void fail_nccl(int code, const char* name, const char* call, const char* file, int line);

}  // namespace clustersim::real

#define CS_CUDA(call)                                                                             \
  do {                                                                                            \
    cudaError_t cs_e_ = (call);                                                                   \
    if (cs_e_ != cudaSuccess)                                                                     \
      ::clustersim::real::fail_cuda(cs_e_, cudaGetErrorString(cs_e_), #call, __FILE__, __LINE__); \
  } while (0)
#define CS_CUBLAS(call)                                                                                    \
  do {                                                                                                     \
    cublasStatus_t cs_s_ = (call);                                                                         \
    if (cs_s_ != CUBLAS_STATUS_SUCCESS) ::clustersim::real::fail_cublas(cs_s_, #call, __FILE__, __LINE__); \
  } while (0)
#define CS_NCCL(call)                                                                             \
  do {                                                                                            \
    ncclResult_t cs_r_ = (call);                                                                  \
    if (cs_r_ != ncclSuccess && cs_r_ != ncclInProgress)                                          \
      ::clustersim::real::fail_nccl(cs_r_, ncclGetErrorString(cs_r_), #call, __FILE__, __LINE__); \
  } while (0)
