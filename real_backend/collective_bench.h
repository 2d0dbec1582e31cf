// The collectives and p2p calibration suites: NCCL collectives timed on 2..N local GPUs
// (one thread per GPU), for each operation × algorithm (NCCL_ALGO) × protocol
// (NCCL_PROTO) that NCCL can run × group size × message size (doubling), each operation
// also with NCCL's own choice (algo "nccl", proto "auto"), and send/recv between two GPUs.
// All-to-all is grouped send/recv, so it has no algorithm ("direct"). NVLink multicast is
// never turned on here (NCCL_NVLS_ENABLE is left as the machine sets it).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace clustersim::real {

struct CollectiveMeasurement {
  std::string op, algo, proto;  // "all-reduce" …; "ring" / "tree" / "direct" / "p2p" / "nccl"; "LL" / … / "auto"
  int ranks = 2;
  int64_t bytes = 0;
  double seconds = 0;  // slowest rank, median of the samples
};

struct CollectiveBenchOptions {
  bool collectives = true, p2p = true;
  int64_t min_bytes = 1024, max_bytes = int64_t{8} << 30;  // ×2 steps
  int warmup = 3, reps = 5;
  std::function<void(int, int, const std::string&)> progress;
  std::function<bool(const std::string& key, double& seconds)> cached;
  std::function<void(const std::string& key, double seconds)> record;
};

// Throws RealBackendError on a machine with fewer than two GPUs.
std::vector<CollectiveMeasurement> run_collective_bench(const CollectiveBenchOptions& opt);

// How much a compute kernel slows while an NCCL kernel sits on the same GPU: GPU 0 runs
// a kernel back to back, alone and then while a receive (`p2p`) or an all-reduce
// (`collective`) waits on GPU 0 for GPU 1, which a spin kernel holds back. The NCCL kernel
// is resident the whole time, its thread blocks holding SMs, as a pipeline's early-posted
// receive or a bucketed gradient reduction is. Kernels: a bf16 GEMM of 8192³, the fused
// causal attention forward (32 heads, 4,096 tokens, head dim 128), the memory-bound
// kernel over 1 GiB.
struct OverlapMeasurement {
  std::string comm;                  // "p2p" / "collective"
  std::string kernel;                // "gemm" / "attention" / "memory"
  double alone_s = 0, shared_s = 0;  // per kernel, median
};
std::vector<OverlapMeasurement> run_overlap_bench(int warmup, int reps);

}  // namespace clustersim::real
