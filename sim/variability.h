// The draws of a scenario's `variability:` block for one sample: a speed factor per GPU,
// a bandwidth factor per link, the named stragglers, and the seed of each kernel's
// jitter (docs/model.md, "Variability").
//
// Symmetry still pays: the executor simulates one rank for each set of ranks that mirror
// it, and that rank runs at the slowest of its set. A synchronous step waits for its
// slowest member at every collective, so this is exact wherever the ranks a simulated rank
// stands for meet at a collective between any two of its kernels (data, tensor, context
// and expert parallel ranks); across pipeline stages of different data-parallel
// replicas it is an upper bound (`--simulate-all-ranks` simulates every rank with its own
// draw). Kernel jitter is drawn per simulated rank and kernel.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "plan/plan.h"
#include "plan/rng.h"
#include "scenarios/scenario.h"
#include "topology/topology.h"

namespace clustersim {

struct VariabilityDraw {
  std::vector<double> gpu_slowdown;   // per GPU: how many times longer its kernels take
  std::vector<double> rank_slowdown;  // per rank: what the executor applies to the rank it simulates
  std::vector<std::pair<uint32_t, double>> link_bandwidth;  // links whose bandwidth this draw changes
  double kernel_jitter = 0;
  uint64_t jitter_seed = 0;
};

// One draw, seeded by `seed`. `all_ranks`: every rank carries its own GPU's slowdown
// (the executor simulates them all); otherwise a simulated rank carries the largest of
// the ranks that mirror it. Throws InputError for a straggler link the topology lacks.
VariabilityDraw draw_variability(const Scenario& s, const Plan& plan, const Topology& topo, uint64_t seed,
                                 bool all_ranks);

// Each GPU's slowdown for one draw: 1 / its drawn speed, times the stragglers naming it or
// its node.
std::vector<double> draw_gpu_slowdowns(const Scenario& s, const Topology& topo, uint64_t seed);

// The link ids a straggler's `link:` names ("A->B": that direction; "A<->B": both).
std::vector<uint32_t> find_links(const Topology& topo, const std::string& name);

// A speed factor drawn from `d` (median 1; normal is cut at 0.1 so no GPU stops).
double draw_speed(const SpreadDist& d, Rng& rng);

// The multiplier of one kernel's time: lognormal with mean 1 and coefficient of
// variation `cv`, a fixed function of (seed, rank, op) so any thread draws the same.
double kernel_jitter_factor(double cv, uint64_t seed, int32_t rank, uint32_t op);

}  // namespace clustersim
