// The model's power windows for a scenario's first program: for each phase (one window of the power
// cap, cost_models/compute.h apply_power_cap), its kernels' burst time, their energy above the idle
// floor at the boost clock, the window's mean board power there, the clock the cap leaves it and the energy at
// that clock; then the
// step-mean clock weighted by each window's capped time. Beside nvidia-smi's median clock over the
// measured steps (summary.py). With --ops first: each kernel name's first op of the program run back to
// back on its own, as power_parts.py runs it (burst time, energy above the floor, board power at full clock,
// and the share of its burst rate it keeps under the cap).
//   L=../../../build; g++ -std=c++20 -O2 -I../../.. power_windows.cc $L/libclustersim_lib.a
//       $L/libclustersim_plan.a $L/libclustersim_lib.a -lyaml-cpp -lsqlite3 -ldl -pthread -o /tmp/power_windows
//   /tmp/power_windows [--ops] ../mcore-step-h200/readme-1.7b-1xh200.yaml cluster.gpu=h100-sxm
#include <array>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "cost_models/compute.h"
#include "cost_models/power_cap.h"
#include "sim/run.h"

int main(int argc, char** argv) {
  using namespace clustersim;
  if (argc < 2) {
    std::fprintf(stderr, "usage: power_windows [--ops] SCENARIO [key=value ...]\n");
    return 2;
  }
  const bool ops = std::string(argv[1]) == "--ops";
  if (ops && argc < 3) return 2;
  std::vector<std::string> sets(argv + 2 + ops, argv + argc);
  const Scenario s = load_scenario(argv[1 + ops], sets);
  const TrainingPlan tp = scenario_plan(s);
  ComputeProfile compute;
  NetworkProfile network;
  apply_calibration(s, compute, network);
  const GpuSpec* gpu = &s.cluster.node.gpu;
  const Program& prog = tp.plan.programs.at(0);
  if (ops) {
    std::set<std::string> seen;
    std::printf("%-34s %10s %10s %9s %8s\n", "kernel (first op of its name)", "burst_us", "energy_mJ", "power_W",
                "capped");
    for (const Op& op : prog.ops) {
      if (op.kind == OpKind::Collective || op.kind == OpKind::Send || op.kind == OpKind::Recv) continue;
      const std::string& name = tp.plan.names.at(op.name);
      const double t = compute_seconds(op, *gpu, compute);
      if (t <= 0 || !seen.insert(name).second) continue;
      PowerMix one;
      one.add(op, t, compute.launch_overhead_s, *gpu, compute);
      const double burst_s = t + compute.launch_overhead_s;
      std::printf("%-34s %10.1f %10.3f %9.1f %8.3f\n", name.c_str(), t * 1e6, one.energy_at(1.0) * 1e3,
                  gpu->idle_power_w + one.energy_at(1.0) / burst_s,
                  burst_s / power_capped_seconds(burst_s, one, *gpu, compute));
    }
    return 0;
  }
  std::array<PowerMix, 4> mix{};
  std::array<double, 4> burst{};
  std::array<double, 3> kind_energy{}, kind_time{};  // gemm, attention, memory
  for (const Op& op : prog.ops) {
    if (op.kind == OpKind::Collective || op.kind == OpKind::Send || op.kind == OpKind::Recv) continue;
    const double t = compute_seconds(op, *gpu, compute);
    const auto w = static_cast<size_t>(op.phase);
    const double before = mix[w].energy_at(1.0);
    mix[w].add(op, t, compute.launch_overhead_s, *gpu, compute);
    const size_t k = op.kind == OpKind::Gemm ? 0 : op.kind == OpKind::Attention ? 1 : 2;
    kind_energy[k] += mix[w].energy_at(1.0) - before;
    kind_time[k] += t;
    if (t > 0) burst[w] += t + compute.launch_overhead_s;
  }
  const char* names[] = {"forward", "backward", "optimizer", "other"};
  double total = 0, weighted = 0;
  std::printf("%-10s %10s %10s %10s %8s %10s\n", "window", "burst_ms", "energy_J", "power_W", "clock", "at_clock_J");
  for (size_t w = 0; w < 4; ++w) {
    if (burst[w] <= 0) continue;
    const double clock = power_clock(mix[w], *gpu, compute);
    const double capped = power_capped_seconds(burst[w], mix[w], *gpu, compute);
    std::printf("%-10s %10.2f %10.3f %10.1f %8.3f %10.3f\n", names[w], burst[w] * 1e3, mix[w].energy_at(1.0),
                gpu->idle_power_w + mix[w].energy_at(1.0) / burst[w], clock, mix[w].energy_at(clock));
    total += capped;
    weighted += capped * clock;
  }
  const char* kinds[] = {"gemm", "attention", "memory"};
  for (size_t k = 0; k < 3; ++k)
    std::printf("%-10s %10.2f ms %10.3f J %8.1f W above idle\n", kinds[k], kind_time[k] * 1e3, kind_energy[k],
                kind_time[k] > 0 ? kind_energy[k] / kind_time[k] : 0.0);
  std::printf("step-mean clock %.3f of %.0f MHz = %.0f MHz\n", weighted / total, gpu->sm_clock_hz / 1e6,
              weighted / total * gpu->sm_clock_hz / 1e6);
}
