// Tokens per expert under a skewed router, and what the slowest expert-parallel rank
// has to process (docs/model.md, "MoE routing skew").
//
// The n = tokens × ep × top_k routing decisions of one EP group in one (layer,
// micro-batch) land on expert e with probability p_e: 1/E (uniform), ∝ k^-α for the
// k-th most popular expert in a per-layer random order (zipf), or a measured histogram.
// Counts are multinomial, drawn by their normal approximation
// c_e = n p_e + √(n p_e (1 − p_e)) Z (n is thousands or more). EP rank r holds experts
// [r·E/ep, (r+1)·E/ep); its load is the sum of their counts (each capped at
// capacity_factor × n/E unless dropless). The all-to-all and the grouped expert GEMMs
// of every rank end when the most-loaded rank's do, so the plan costs the layer at that
// rank's load.
#pragma once

#include <cstdint>

#include "scenarios/model.h"

namespace clustersim {

// The most-loaded EP rank's tokens relative to an even split (1 for `even`), for one
// EP group's (layer, micro-batch).
double moe_hot_rank_load(const MoeConfig& moe, int64_t routed_tokens, int64_t ep, int32_t layer, int32_t micro_batch);

}  // namespace clustersim
