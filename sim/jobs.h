// Several jobs on one cluster (`jobs:`; docs/model.md, "Jobs sharing a fabric").
//
// Training jobs run together on the shared flow network: their plans are merged into one
// (each job's ranks on its own nodes, its groups and programs renumbered) and executed
// once, so their collectives contend link by link, in time. A shorter job runs as many
// iterations back to back as fit in the longest one's (at most 64), so the contention is
// that of jobs in steady state; its shared value is the mean over them. Each job is also
// executed alone at the same placement; the slowdown is shared / alone.
//
// A serving job has its own event loop. It meets the training jobs through mean rates: its
// KV-cache transfers between pools are a background rate on the links they cross, which the
// training jobs' shared run loses; and the training jobs' mean rate on those links is
// bandwidth the serving job's transfers lose. A serving job whose traffic stays inside
// its nodes (no disaggregation) runs as it would alone.
#pragma once

#include <string>
#include <vector>

#include "scenarios/scenario.h"

namespace clustersim {

struct JobOutcome {
  std::string name, scenario, kind;  // kind: training | serving
  std::vector<int64_t> nodes;        // of the shared cluster
  std::string metric;                // iteration_time_s (training) | e2e_s_p50 (serving)
  double alone = 0, shared = 0;
  double alone_exposed_comm_s = 0, shared_exposed_comm_s = 0;  // training
  int64_t iterations = 1;  // training: iterations it ran beside the longest job (its shared value is their mean)
  double slowdown() const { return alone > 0 ? shared / alone : 1; }
};

struct JobsOutcome {
  std::vector<JobOutcome> jobs;
  int64_t simulated_ranks = 0, events = 0;  // of the shared training runs (events: over all of them)
};

// Throws InputError for a job that does not fit the cluster, overlaps another, or names a
// different node preset.
JobsOutcome run_jobs(const Scenario& s);
std::string jobs_summary_table(const Scenario& s, const JobsOutcome& o);
std::string jobs_summary_json(const Scenario& s, const JobsOutcome& o);

}  // namespace clustersim
