// The real backend: executes a Plan on local GPUs — every op of every rank, GEMMs through
// cuBLASLt, attention through cuDNN's fused attention where it loads and runs the shape
// (cudnn_attention.h) or else the fused kernels of kernels.cu, memory-bound ops through a
// kernel that moves exactly their bytes, collectives and send/recv through NCCL on one
// communicator per group (ncclCommSplit of the world communicator), streams as CUDA
// streams and dependencies as CUDA events. One thread per local GPU.
//
// Timing: CUDA events around every op (RealOptions::op_events; or only after each stream's
// last op); before each iteration the threads meet at a barrier and record a start event on
// each GPU, and spans are measured from it. Warm-up iterations are dropped; each op's start
// and end are the medians over the timed ones.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "plan/timeline.h"
#include "real_backend/gpu_monitor.h"

namespace clustersim::real {

struct RealOptions {
  int iterations = 5;
  int warmup = 2;
  double timeout_s = 300;  // an iteration not done by then: NCCL communicators are aborted
  // true: CUDA events around every op, so each op has its span (and each kernel pays the
  // events between it and the next); false: the stream as a framework runs it, no timing
  // event between ops (only untimed events where another stream waits on an op, as PyTorch
  // records them), and each stream's last op timed from the iteration's start: iteration
  // times and no spans.
  bool op_events = true;
};

struct RealResult {
  std::vector<SpanRecord> spans;    // every rank, median over the timed iterations (none without op_events)
  std::vector<double> iteration_s;  // each timed iteration: the last op end over ranks
  double median_iteration_s = 0;
  std::string device_name;
  int devices = 0;
  std::vector<GpuClockSummary> clocks;  // per local GPU, over the timed iterations (NVML)
  // The kernels that ran the attention ops, with their op counts over all ranks, e.g.
  // "cudnn-9.19.0 fused flash attention (96 ops)"; "" when the plan has none.
  std::string attention_backend;
};

// How this process takes part: the global ranks it runs (one thread each), their CUDA
// devices, how the world communicator is made (ncclCommInitAll for threads in one
// process; ncclCommInitRank with a unique id broadcast over MPI for one process per GPU)
// and how processes meet between iterations.
struct Launch {
  std::vector<int> ranks;
  std::vector<int> devices;
  std::function<void(std::vector<ncclComm_t>&)> init_world;
  std::function<void()> global_barrier;  // empty: one process
};

int device_count();  // 0 when there is no GPU or no driver
std::string device_name(int device);
void check_gemm_support(const Plan& plan, int device);
// Runs this process's share; the result holds its own ranks' spans and iteration times.
RealResult run_local(const Plan& plan, const RealOptions& opt, Launch launch);
// Throws RealBackendError on any CUDA / cuBLAS / NCCL failure, naming the op it served.
RealResult run_plan(const Plan& plan, const RealOptions& opt);

}  // namespace clustersim::real
