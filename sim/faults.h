// Failures, restarts and checkpoints over a training job's wall-clock duration, and the
// goodput they leave (docs/model.md, "Failures and goodput").
//
// Failures arrive as a Poisson process of rate 1/M, M the system MTBF (every GPU, node
// and scale-out cable failing independently at its own MTBF). The job checkpoints after
// every τ of useful work, writing for δ = checkpoint bytes / storage bandwidth; a
// failure loses the work since the last checkpoint and costs R (detection, restart,
// reload; plus waiting for a repair when no spare node is left). The expected wall time
// to finish one segment of τ + δ, failures during restarts included, is (Daly 2006)
//     T(τ) = M · e^{R/M} · (e^{(τ+δ)/M} − 1),
// so the expected goodput is G(τ) = τ / T(τ). Its maximum lies near Young's (1974)
// τ* = √(2δM) when δ ≪ M; `auto` takes the exact maximum of G.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "scenarios/scenario.h"
#include "topology/topology.h"

namespace clustersim {

struct FaultParams {
  double mtbf_s = 0;          // the system's; 0: no random failures (a trace only)
  double node_share = 0;      // fraction of failures that take a node out (GPU, node): they need a spare
  double restart_s = 0;       // R
  double checkpoint_s = 0;    // δ
  double checkpoint_bytes = 0;
  int64_t nodes = 0;
  int64_t hot_spares = -1;    // -1: unlimited
  double repair_s = 0;
  std::vector<double> trace_s;  // failures at given times
  int64_t gpus = 0, links = 0;  // counted for naming the failed part
  int gpus_per_node = 1;
};

// The parameters a scenario gives: its failure rates over its topology's parts, and the
// checkpoint its model and optimizer write.
FaultParams fault_params(const Scenario& s, const Topology& topo);

// Expected goodput of checkpointing after every `interval_s` of useful work.
double expected_goodput(const FaultParams& p, double interval_s);
// The interval of highest expected goodput (golden-section search on G), and Young's.
double optimal_interval(const FaultParams& p);
inline double young_interval(const FaultParams& p) { return std::sqrt(2 * p.checkpoint_s * p.mtbf_s); }
// The restart time a failure costs on average: R, plus the wait for a repaired node when
// the spares run out (repairs as an infinite-server queue: the nodes away at a failure are
// Poisson with mean node-failure rate × repair time).
double effective_restart(const FaultParams& p);

struct FaultEvent {
  double start_s = 0, end_s = 0;
  std::string kind;       // failure | restart | checkpoint | lost
  std::string component;  // the failed part ("gpu 17", "node 3", "link 12", "trace"); else empty
};

struct FaultTimeline {
  std::vector<FaultEvent> events;
  double useful_s = 0, checkpoint_s = 0, restart_s = 0, lost_s = 0;  // their sum is the duration
  int64_t failures = 0;
  double goodput() const;
};

// One seeded realization over `duration_s`: failures drawn at the MTBF (and those of
// the trace), checkpoints every `interval_s` of useful work, restarts waiting for a spare
// node when none is left. Useful work still unsaved at the end counts as done.
// `record`: keep the events (a long run for statistics needs only the totals).
FaultTimeline simulate_faults(const FaultParams& p, double interval_s, double duration_s, uint64_t seed,
                              bool record = true);

struct GoodputReport {
  double goodput = 0;                 // useful fraction of the wall-clock duration
  double checkpoint_interval_s = 0;   // of useful work, whole iterations
  double optimal_interval_s = 0, young_interval_s = 0;
  double system_mtbf_s = 0, checkpoint_write_s = 0, checkpoint_bytes = 0;
  double expected_failures = 0;
  double useful_iterations_per_hour = 0;
  double lost_checkpoint_s = 0, lost_restart_s = 0, lost_rework_s = 0;  // over the duration
  FaultTimeline timeline;             // the seeded realization written to SQLite and the trace
};

// How a report is drawn: the run's own (draw 0), or one of run --samples' later draws, which
// share the failures a short run's mean may draw and report a draw longer than the duration
// as goodput 0 rather than refuse it.
struct GoodputDraw {
  bool sample = false;
  double failure_budget = 1e7;  // failures a short run's realizations may draw in all
};

// Goodput of the scenario's job, whose iterations take `iteration_s`: expected (Daly's
// G) when failures are random, from the realization when a trace is given.
GoodputReport goodput_report(const Scenario& s, const Topology& topo, double iteration_s, uint64_t seed,
                             const GoodputDraw& draw = {});

}  // namespace clustersim
