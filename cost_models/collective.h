// Collective algorithms as data: an algorithm turns (operation, group size, bytes)
// into steps of point-to-point transfers between group positions; the network model
// (cost_models/network.h) executes the steps over topology routes. Each algorithm's
// closed-form α-β cost lives beside it, and tests check the two agree on an
// uncontended network.
//
// Bytes follow nccl-tests: S is the full array for all-reduce, the gathered array for
// all-gather and reduce-scatter, and the whole send buffer of one rank for all-to-all.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "plan/plan.h"

namespace clustersim {

enum class Algorithm : uint8_t { Ring, Direct };
std::string_view to_string(Algorithm a);
bool parse_algorithm(std::string_view s, Algorithm& out);

struct CollectiveStep {
  std::vector<std::pair<int32_t, int32_t>> transfers;  // (src, dst) positions in the group
  double bytes = 0;                                    // per transfer
  int64_t repeat = 1;                                  // identical consecutive steps
};

// Throws std::invalid_argument for an (operation, algorithm) pair that has no expansion.
std::vector<CollectiveStep> expand_collective(CollectiveKind op, Algorithm algo, int ranks, double bytes);

// Closed form for a uniform network: α per step (route latency), B the per-link
// bandwidth each transfer gets. Ring all-reduce: 2(p−1)·α + 2(p−1)/p·S/B
// (Patarasuk & Yuan 2009); ring all-gather / reduce-scatter: (p−1)·α + (p−1)/p·S/B;
// direct all-to-all: (p−1)·α + (p−1)/p·S/B.
double closed_form_seconds(CollectiveKind op, Algorithm algo, int ranks, double bytes, double alpha, double bandwidth);

// nccl-tests busbw = algbw × factor (doc/PERFORMANCE.md).
double busbw_factor(CollectiveKind op, int ranks);

}  // namespace clustersim
