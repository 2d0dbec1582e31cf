#include "real_backend/check.h"

namespace clustersim::real {
namespace {
thread_local std::string g_context;  // per thread: each GPU's thread issues its own ops
}

void set_context(const std::string& what) { g_context = what; }
const std::string& context() { return g_context; }

static std::string where(const char* call, const char* file, int line) {
  return std::string(call) + " at " + file + ":" + std::to_string(line) +
         (g_context.empty() ? "" : " while running " + g_context);
}

void fail_cuda(int code, const char* name, const char* call, const char* file, int line) {
  std::string msg = std::string("CUDA error ") + std::to_string(code) + " (" + name + ") in " + where(call, file, line);
  if (code == 2) msg += ": out of device memory";
  throw RealBackendError(msg);
}

void fail_cublas(int code, const char* call, const char* file, int line) {
  throw RealBackendError("cuBLAS error " + std::to_string(code) + " in " + where(call, file, line));
}

void fail_nccl(int code, const char* name, const char* call, const char* file, int line) {
  throw RealBackendError(std::string("NCCL error ") + std::to_string(code) + " (" + name + ") in " +
                         where(call, file, line));
}

}  // namespace clustersim::real
