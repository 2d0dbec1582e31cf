// The training planner: model + parallel layout -> Plan. One iteration of a
// decoder-only transformer under DP and TP (with optional Megatron sequence
// parallelism): forward and backward GEMMs, fused attention, memory-bound elementwise
// ops, TP collectives, per-layer DP gradient all-reduces overlapped with the backward
// pass of earlier layers, and the optimizer step.
//
// Layout checks happen here, with the scenario's marks, so an impossible layout is a
// FILE:LINE:COL error before anything runs.
#pragma once

#include <cstdint>

#include "plan/memory.h"
#include "plan/plan.h"
#include "scenarios/scenario.h"

namespace clustersim {

struct TrainingLayout {
  int64_t dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;
  int64_t micro_batch = 1;
  int64_t micro_batches = 1;  // per DP rank per iteration
  int64_t global_batch = 1;
  bool sequence_parallel = false;
};

struct TrainingPlan {
  Plan plan;
  TrainingLayout layout;
  MemoryBreakdown memory;              // per rank
  double model_flops_per_rank = 0;     // one iteration, no recompute (MFU numerator)
  double hardware_flops_per_rank = 0;  // everything the GPU executes
};

struct PlannerOptions {
  bool use_symmetry = true;  // mark mirror ranks when the layout makes them provably identical
};

TrainingPlan build_training_plan(const Scenario& s, const PlannerOptions& opt = {});

}  // namespace clustersim
