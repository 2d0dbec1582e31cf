// One simulated training run, end to end: scenario -> topology -> plan -> executor ->
// timeline and metrics. Output files are written only after the run succeeded.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plan/timeline.h"
#include "plan/training_planner.h"
#include "reports/summary.h"
#include "scenarios/scenario.h"
#include "sim/executor.h"
#include "sim/faults.h"
#include "sim/variability.h"
#include "topology/topology.h"

namespace clustersim {

struct RunOptions {
  bool simulate_all_ranks = false;  // ignore the symmetry shortcut (for checks)
  bool progress = false;            // a progress bar on stderr for long runs
  bool record_link_usage = true;    // link utilization over time (for output.sqlite and reports)
  bool keep_spans = true;           // the op-by-op timeline (false: metrics only)
  bool solo_steps = true;           // flow network: ExecOptions::solo_steps
  bool check_memory = true;         // refuse a layout that does not fit (accuracy reports it instead)
  // false: dropout is costed without its random draws, in fused attention and in the
  // standalone and fused dropout kernels alike (validate against the real backend, whose
  // kernels draw none).
  bool attention_dropout = true;
  // true: kernels cost as timed between their own events (ExecOptions::timed_kernels): the
  // real backend's step, which brackets every op so (validate against it).
  bool timed_kernels = false;
};

struct RunOutcome {
  Scenario scenario;
  std::unique_ptr<Topology> topology;
  TrainingPlan plan;
  ExecResult exec;
  Metrics metrics;  // in a fixed order; the --json fields
  VariabilityDraw variability;           // this run's draw (empty without variability:)
  std::optional<GoodputReport> goodput;  // with faults:
  std::vector<SampleValue> samples;      // run_samples
};

// The scenario's training plan: the planner's, or its Chakra traces' (workload.chakra).
TrainingPlan scenario_plan(const Scenario& s, const PlannerOptions& opt = {});
RunOutcome run_training(const Scenario& s, const RunOptions& opt = {});
// Host and framework work per iteration that the GPUs wait for (training.step_overhead;
// the default's derivation is in docs/model.md).
inline constexpr double kDefaultStepOverheadS = 3e-3;
double step_overhead_seconds(const Scenario& s);
// Loads the scenario's calibration profile, when it names one, over the defaults.
void apply_calibration(const Scenario& s, ComputeProfile& compute, NetworkProfile& network);

// The capped FLOP rate of the job's expected slowest board against the nominal one:
// 1 − cluster.board_spread · E[max of n standard normals], n the GPUs that meet at the
// job's collectives (a serving replica's tp × pp); ComputeProfile::slowest_board.
double slowest_board(const Scenario& s);
// The same for `meet` GPUs meeting at the collectives (a Chakra workload's ranks, one job of
// a jobs: run).
double slowest_board(const Scenario& s, int64_t meet);
// The factor a training plan runs at: the cluster's GPUs', or a Chakra workload's ranks'.
double plan_board(const Scenario& s, const Plan& plan);
// The scenario's collective algorithm, protocol and network model, as executor options.
void collective_options(const Scenario& s, ExecOptions& eo);
// Runs `n` seeded draws of the scenario's variability: the first is `run` itself (seed
// stream 0 of the scenario's seed), the others go on `jobs` threads, each with its own
// topology; the plan is shared. Adds `samples` and the p5 / p50 / p95 and mean of
// iteration time, MFU and tokens/s (and goodput, with faults:) to run.metrics. The
// same seed gives the same bytes whatever `jobs` is.
void run_samples(RunOutcome& run, int64_t n, int jobs, const RunOptions& opt = {});
// Adds `samples` and, for each key, the p5 / p50 / p95 and mean of its values over the
// draws to `m`; one SampleValue per draw and key to `out` (draw i's seed stream_seed(seed, i)).
void add_sample_statistics(const std::vector<std::string>& keys, const std::vector<std::vector<double>>& values,
                           uint64_t seed, Metrics& m, std::vector<SampleValue>& out);
// The p-th quantile (0..1) of `v`, linear between order statistics (v is sorted here).
double quantile(std::vector<double> v, double p);
// The run as a Timeline; it borrows the run's link usage, so it must not outlive `run`.
Timeline make_timeline(const RunOutcome& run);
// Writes output.sqlite and output.trace when the scenario names them.
void write_outputs(const RunOutcome& run);
std::string summary_table(const RunOutcome& run);
std::string summary_json_line(const RunOutcome& run);

}  // namespace clustersim
