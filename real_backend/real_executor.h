// The real backend: executes a Plan on local GPUs — every op of every rank, GEMMs through
// cuBLASLt, attention through the fused kernels of kernels.cu, memory-bound ops through a
// kernel that moves exactly their bytes, collectives and send/recv through NCCL on one
// communicator per group (ncclCommSplit of the world communicator), streams as CUDA
// streams and dependencies as CUDA events. One thread per local GPU.
//
// Timing: CUDA events around every op; before each iteration the threads meet at a
// barrier and record a start event on each GPU, and spans are measured from it. Warm-up
// iterations are dropped; each op's start and end are the medians over the timed ones.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "reports/timeline.h"

namespace clustersim::real {

struct RealOptions {
  int iterations = 5;
  int warmup = 2;
  double timeout_s = 300;  // an iteration not done by then: NCCL communicators are aborted
};

struct RealResult {
  std::vector<SpanRecord> spans;       // every rank, median over the timed iterations
  std::vector<double> iteration_s;     // each timed iteration: the last op end over ranks
  double median_iteration_s = 0;
  std::string device_name;
  int devices = 0;
};

int device_count();  // 0 when there is no GPU or no driver
// Throws RealBackendError on any CUDA / cuBLAS / NCCL failure, naming the op it served.
RealResult run_plan(const Plan& plan, const RealOptions& opt);

}  // namespace clustersim::real
