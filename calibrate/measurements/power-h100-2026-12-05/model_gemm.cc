// The model's GEMM times beside measured ones: for each line "dtype m n k" on standard input, the uncalibrated
// model's burst time (compute_seconds, cost_models/compute.cc) and its time at the power cap when the GEMM runs
// back to back for a whole window (apply_power_cap over 1,000 copies in one phase), on the GPU preset named.
// A line "dtype m n k bytes" runs each GEMM followed by a stream of that many bytes (half read, half written),
// as power.py's mixes do, and reports the pair's time and the GEMM's FLOPs over it.
//   L=../../../build; g++ -std=c++20 -O2 -I../../.. model_gemm.cc $L/libclustersim_lib.a
//       $L/libclustersim_plan.a $L/libclustersim_lib.a -o /tmp/model_gemm      (one line)
//   printf 'bf16 8192 8192 8192\n' | /tmp/model_gemm h100-sxm
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cost_models/compute.h"
#include "cost_models/power_cap.h"
#include "topology/gpu.h"

int main(int argc, char** argv) {
  using namespace clustersim;
  const GpuSpec* gpu = find_gpu_preset(argc > 1 ? argv[1] : "h100-sxm");
  if (!gpu) {
    std::fprintf(stderr, "unknown GPU preset\n");
    return 2;
  }
  const ComputeProfile profile;
  std::string dt;
  int64_t m, n, k;
  std::printf("%-5s %6s %6s %6s %10s %10s %10s %10s\n", "dtype", "m", "n", "k", "burst_us", "capped_us",
              "burst_TF", "capped_TF");
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    int64_t stream_bytes = 0;
    if (!(in >> dt >> m >> n >> k)) continue;
    in >> stream_bytes;
    Op op;
    op.kind = OpKind::Gemm;
    op.phase = Phase::Forward;
    if (!parse_dtype(dt, op.dtype)) {
      std::fprintf(stderr, "unknown dtype %s\n", dt.c_str());
      return 2;
    }
    op.m = m, op.n = n, op.k = k;
    const int64_t operand = op.dtype == DType::FP8 ? 1 : 2;
    op.bytes_read = (m * k + n * k) * operand;
    op.bytes_written = m * n * 2;
    op.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    Op stream;
    stream.kind = OpKind::Memory;
    stream.phase = Phase::Forward;
    stream.bytes_read = stream_bytes / 2;
    stream.bytes_written = stream_bytes - stream_bytes / 2;
    std::vector<Op> ops;
    for (int i = 0; i < 1000; ++i) {
      ops.push_back(op);
      if (stream_bytes > 0) ops.push_back(stream);
    }
    std::vector<double> seconds;
    for (const Op& o : ops) seconds.push_back(compute_seconds(o, *gpu, profile));
    const size_t per = stream_bytes > 0 ? 2 : 1;
    double burst = 0, capped = 0;
    for (size_t i = 0; i < per; ++i) burst += seconds[i];
    apply_power_cap(ops, seconds, profile.launch_overhead_s, *gpu, profile);
    for (size_t i = 0; i < per; ++i) capped += seconds[500 * per + i];
    std::printf("%-5s %6lld %6lld %6lld %10.2f %10.2f %10.1f %10.1f%s\n", dt.c_str(), static_cast<long long>(m),
                static_cast<long long>(n), static_cast<long long>(k), burst * 1e6, capped * 1e6,
                op.flops / burst / 1e12, op.flops / capped / 1e12, stream_bytes > 0 ? "  (with the stream)" : "");
  }
  return 0;
}
