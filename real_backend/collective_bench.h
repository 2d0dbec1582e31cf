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

}  // namespace clustersim::real
