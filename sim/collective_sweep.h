// `clustersim collective`: one collective over N GPUs of a preset cluster, for each
// size from min to max (doubling), reported like nccl-tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_models/collective.h"
#include "plan/plan.h"
#include "topology/topology.h"

namespace clustersim {

struct CollectiveSweepConfig {
  CollectiveKind op = CollectiveKind::AllReduce;
  Algorithm algorithm = Algorithm::Ring;
  int gpus = 8;  // ranks in the group, over all nodes
  int nodes = 1;
  ClusterSpec cluster;  // node preset and fabric; nodes and GPUs per node are set from the fields above
  int64_t min_bytes = 1024;
  int64_t max_bytes = int64_t{1} << 30;
  int64_t step_factor = 2;
};

struct CollectiveRow {
  int64_t bytes = 0;
  double time_s = 0;
  double algbw_GBps = 0;
  double busbw_GBps = 0;
};

std::vector<CollectiveRow> run_collective_sweep(const CollectiveSweepConfig& cfg);
std::string format_collective_table(const CollectiveSweepConfig& cfg, const std::vector<CollectiveRow>& rows);
std::string format_collective_json(const CollectiveSweepConfig& cfg, const std::vector<CollectiveRow>& rows);

}  // namespace clustersim
