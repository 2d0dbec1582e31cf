// Microbenchmark suites for calibration: the real backend's own kernels (cuBLASLt GEMMs,
// the fused attention, the memory-bound kernel) timed with CUDA events over shape grids.
// Each measurement is the median of `reps` batched samples after `warmup` runs, the GPU
// kept busy (see time_median in microbench.cc); each point's value is the median of its
// measurements in `passes` passes over the whole grid.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace clustersim::real {

struct GemmSample {
  std::string dtype;  // "bf16", "fp16", "fp8"
  int64_t m, n, k;
  double seconds;
};
struct AttentionSample {
  bool backward;
  int64_t head_dim, seq, batch_heads;
  bool causal;
  double seconds;
  int64_t group;             // query heads per K/V head
  std::string backend = {};  // attention_backend_name() of the kernels timed ("" for rows taken from elsewhere)
};
struct MemorySample {
  int64_t bytes;  // read + written
  double seconds;
  double read_share;  // bytes read / bytes
};

// The reads' shares of a memory-bound kernel's bytes that the memory suite measures.
inline constexpr int64_t kAttentionGroups[] = {1, 4, 8, 16};
inline constexpr double kMemoryReadShares[] = {0.0, 0.25, 1.0 / 3, 0.5, 2.0 / 3, 0.75, 1.0};

struct MicrobenchResult {
  std::string gpu, driver, cuda, nccl;
  std::vector<GemmSample> gemm;
  std::vector<AttentionSample> attention;  // bf16
  // Which kernels the attention rows timed (cuDNN's fused attention where it loads and runs
  // the shape, else the own kernel; cudnn_attention.h), for compute.attention_backend.
  std::string attention_backend;
  std::vector<MemorySample> memory;
  double launch_gap_s = 0;
  // The same small kernels back to back from a full queue, no events between them: their
  // time each (compute.queue_interval), and what each with its gap took less between events
  // (compute.queue_saving; docs/model.md, "Kernels from a full queue").
  double queue_interval_s = 0;
  double queue_saving_s = 0;
};

struct MicrobenchOptions {
  bool gemm = true, attention = true, memory = true, launch = true;
  int warmup = 2, reps = 5;
  // Each point is measured once per pass, the passes one after another over the whole
  // grid; the profile takes each point's median over them.
  int passes = 3;
  // Called after each measurement: (done, total, what).
  std::function<void(int, int, const std::string&)> progress;
  // Resuming: a measurement found here (by key, e.g. "gemm bf16 4096 2048 2048") is not
  // taken again; each new one is handed to `record` as soon as it is taken.
  std::function<bool(const std::string& key, double& seconds)> cached;
  std::function<void(const std::string& key, double seconds)> record;
};

// The grids: bf16 GEMMs with m in {64 … 131072}, n and k in {256 … 32768}, each at powers
// of two and about halfway between (1.4·2^i rounded to 64), at most 2^42 FLOPs; fp16 and
// fp8 (Hopper and later) at the powers of two only;
// FLOPs each; attention lengths 256 … 8192 (×2), head dims 64 and 128, causal, batch ×
// heads 8 … 128 (×2, from the group size up), GQA groups of kAttentionGroups (query
// heads per K/V head: 1 for MHA; 4, 8 and 16 are what Llama 3 8B/70B/405B keep per GPU
// at TP 1–8); memory 4 KiB … 4 GiB (×2) at each read
// share of kMemoryReadShares.
// The GPU's name and the CUDA driver API, runtime and NCCL versions; no measurements.
MicrobenchResult describe_device();
MicrobenchResult run_microbenchmarks(const MicrobenchOptions& opt);

}  // namespace clustersim::real
