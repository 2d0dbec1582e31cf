// Models given as lists of blocks (`model.blocks`, docs/model.md "Models as lists of
// blocks"): attention, MLP, MoE, convolution, norm and embedding layers of any shape,
// trained with data parallelism, pipeline stages (a component per stage: a diffusion
// model's text encoder, UNet and VAE) and, on one sample, the tensors' rows split over
// parallel.tp GPUs with an all-to-all where the axis changes (FastFold's dynamic axial
// parallelism for an AlphaFold trunk).
#pragma once

#include "plan/training_planner.h"
#include "scenarios/scenario.h"

namespace clustersim {

// The blocks' stage for pipeline stage count `pp`: each block's `stage` where any block
// gives one (a block without takes the stage of the block before it, the first stage 0),
// else contiguous runs of about equal forward FLOPs.
std::vector<int64_t> block_stages(const std::vector<BlockSpec>& blocks, int64_t pp);

// Throws InputError (at the scenario key concerned) for what block models do not run.
TrainingPlan build_block_plan(const Scenario& s, const PlannerOptions& opt);

}  // namespace clustersim
