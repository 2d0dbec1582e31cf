// Clocks under the board's power cap (docs/model.md, "Clocks under the power cap"): the
// energy a window of kernels draws, the SM clock at which its average power meets the
// board's limit, and the kernel times at that clock.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "cost_models/compute.h"
#include "plan/plan.h"
#include "topology/gpu.h"

namespace clustersim {

// Clocks under the power cap (docs/model.md, "Clocks under the power cap"). A window of
// kernels as the board's controller sees it: their energy above the idle floor (J), the
// clock-bound share of their burst time (s) and the rest, launch gaps included (s).
struct PowerMix {
  // energy: what does not follow the SM clock (streams, dropout's draws); clocked: the
  // math-bound kernels' energy at the boost clock, by their clock-bound share a and the
  // power δ of their slowdown s(x) = a/x + 1 − a by which it falls (energy_at).
  struct Clocked {
    double a = 0, delta = 0, energy = 0;
  };
  double energy = 0, bound = 0, fixed = 0;
  std::array<Clocked, 8> clocked{};
  // Adds kernel `op` of burst time `t` and the launch gap after it; returns the share of
  // its time that scales with the clock (0 for memory-bound kernels, or without a power model).
  double add(const Op& op, double t, double gap_s, const GpuSpec& gpu, const ComputeProfile& profile);
  // The window's energy above the idle floor at SM clock x (a fraction of boost).
  double energy_at(double x) const;
  PowerMix& operator+=(const PowerMix& o);
  PowerMix scaled(double k) const;  // the same mix k times over

 private:
  void add_clocked(double a, double delta, double e);
};
bool power_model_active(const GpuSpec& gpu, const ComputeProfile& profile);

// E[max of n independent standard normals] (0 for n <= 1): the slowest of n boards, in
// standard deviations below their mean.
double expected_max_normal(int64_t n);
// The SM clock, as a fraction of boost, at which the window's average power meets the
// board's limit (1 where it stays under it).
double power_clock(const PowerMix& mix, const GpuSpec& gpu, const ComputeProfile& profile);
// A serial window's time at that clock: its burst time plus the clock-bound part's stretch.
double power_capped_seconds(double burst_s, const PowerMix& mix, const GpuSpec& gpu, const ComputeProfile& profile);

// The power cap on a program's kernels: `seconds[i]` is op i's burst-rate kernel time (0
// where it has no kernel), `gap_s` the launch gap after each kernel. Each phase (forward,
// backward, optimizer, other) is one window: the board's controller settles within 0.1 s,
// quicker than a phase lasts, so each phase runs at the clock its own mix allows. The
// clock-bound share of each math-bound kernel's time is stretched in place; returns the
// lowest clock of the windows as a fraction of the boost clock (1: the cap never binds).
double apply_power_cap(const std::vector<Op>& ops, std::vector<double>& seconds, double gap_s, const GpuSpec& gpu,
                       const ComputeProfile& profile);

}  // namespace clustersim
