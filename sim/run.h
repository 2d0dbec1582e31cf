// One simulated training run, end to end: scenario -> topology -> plan -> executor ->
// timeline and metrics. Output files are written only after the run succeeded.
#pragma once

#include <memory>
#include <string>

#include "plan/training_planner.h"
#include "reports/summary.h"
#include "reports/timeline.h"
#include "scenarios/scenario.h"
#include "sim/executor.h"
#include "topology/topology.h"

namespace clustersim {

struct RunOptions {
  bool simulate_all_ranks = false;  // ignore the symmetry shortcut (for checks)
  bool progress = false;            // a progress bar on stderr for long runs
  bool record_link_usage = true;    // link utilization over time (for output.sqlite and reports)
  bool keep_spans = true;           // the op-by-op timeline (false: metrics only)
};

struct RunOutcome {
  Scenario scenario;
  std::unique_ptr<Topology> topology;
  TrainingPlan plan;
  ExecResult exec;
  Metrics metrics;  // in a fixed order; the --json fields
};

RunOutcome run_training(const Scenario& s, const RunOptions& opt = {});
// Host and framework work per iteration that the GPUs wait for (training.step_overhead;
// the default's derivation is in docs/model.md).
inline constexpr double kDefaultStepOverheadS = 3e-3;
double step_overhead_seconds(const Scenario& s);
// A path the scenario names: as written when it exists, else relative to the scenario
// file (like include:).
std::string scenario_relative_path(const Scenario& s, const std::string& path);
// Loads the scenario's calibration profile, when it names one, over the defaults.
void apply_calibration(const Scenario& s, ComputeProfile& compute, NetworkProfile& network);
// The scenario's collective algorithm, protocol and network model, as executor options.
void collective_options(const Scenario& s, ExecOptions& eo);
Timeline make_timeline(const RunOutcome& run);
// Writes output.sqlite and output.trace when the scenario names them.
void write_outputs(const RunOutcome& run);
std::string summary_table(const RunOutcome& run);
std::string summary_json_line(const RunOutcome& run);

}  // namespace clustersim
