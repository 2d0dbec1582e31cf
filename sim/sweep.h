// Sweeps: every point of a scenario's `sweep:` block (the cartesian product of its lists,
// the last key varying fastest), each run as its own scenario on a pool of threads with
// nothing shared but the work counter and the result sink. Points that cannot run (a
// layout that does not divide, a model that does not fit) are kept with their reason.
// Results go to the `sweep_results` table as each point finishes, keyed by the scenario's
// fingerprint and the point's settings, so a second run skips what is already there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reports/sqlite_writer.h"
#include "reports/summary.h"
#include "scenarios/scenario.h"

namespace clustersim {

struct SweepPoint {
  int64_t index = 0;
  std::vector<std::pair<std::string, YNode>> overrides;  // key -> value, marks from the sweep block
  std::string settings;                                  // "parallel.tp=2, parallel.pp=4"
};

struct SweepPointResult {
  int64_t index = 0;
  std::string settings;
  std::string status;   // ok | invalid | error
  std::string reason;   // why it is invalid (FILE:LINE:COL: error: ...) or failed
  Metrics metrics;      // the run's --json metrics when ok
  bool reused = false;  // taken from the database, not run again
};

// The most points one sweep runs (a sweep past it is refused before any point is made).
inline constexpr size_t kMaxSweepPoints = 100'000;
inline constexpr size_t kMaxSweepPointsLarge = 100'000'000;  // with --allow-large: still counted, never unbounded

struct SweepOptions {
  int jobs = 1;
  std::vector<std::string> sets;  // --set overrides under every point
  std::string database;           // sweep_results go here ("" = none)
  std::string rank_by;            // "" = iteration_time_s (training) or goodput_requests_per_s (inference)
  bool progress = true;
  bool allow_large = false;  // past the budgets: points and each point's (--allow-large)
  // Run only the points `only` names (MPI: this rank's share), when restrict_points.
  bool restrict_points = false;
  std::vector<int64_t> only;
};

struct SweepReport {
  std::string name;
  std::string fingerprint;
  std::string objective;
  bool higher_is_better = false;
  int64_t points = 0;
  std::vector<SweepPointResult> results;  // by point index (only the points run when `only` is set)
};

// The points of `base`'s sweep block, in order.
std::vector<SweepPoint> sweep_points(const Scenario& base, size_t max_points = kMaxSweepPoints);
// FNV-1a of the scenario without its sweep block: what a point's settings apply to.
std::string scenario_fingerprint(const Scenario& base);
// Whether larger is better for a metric (throughputs, MFU, attainment) or smaller (times).
bool higher_is_better(const std::string& metric);

// Runs one point (no output files); never throws for a bad point.
SweepPointResult run_sweep_point(const std::string& path, const std::vector<std::string>& sets, const SweepPoint& p,
                                 bool allow_large = false);

// Throws InputError when the scenario itself is bad or has no sweep block.
SweepReport run_sweep(const std::string& path, const SweepOptions& opt);

// A result read back from the database (reused, not run again).
SweepPointResult reused_result(const SweepPoint& p, const SweepRow& row);
// The database row of a result.
SweepRow sweep_row(const SweepReport& rep, const SweepPointResult& r);

// Valid points best first (ties by index), then the invalid ones with their reasons.
std::string sweep_table(const SweepReport& r);
std::string sweep_json(const SweepReport& r);

// Metrics as one flat JSON object, and back.
std::string metrics_json(const Metrics& m);
Metrics parse_metrics_json(const std::string& text);

}  // namespace clustersim
