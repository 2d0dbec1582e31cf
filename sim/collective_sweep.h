// `clustersim collective`: one collective (or K concurrent copies of it on disjoint
// groups) over a preset cluster, for each size from min to max, doubling, reported
// like nccl-tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cost_models/collective.h"
#include "cost_models/protocol.h"
#include "plan/plan.h"
#include "topology/topology.h"

namespace clustersim {

enum class SweepOp : uint8_t { Collective, SendRecv };

struct CollectiveSweepConfig {
  SweepOp kind = SweepOp::Collective;
  CollectiveKind op = CollectiveKind::AllReduce;
  std::optional<Algorithm> algorithm;  // empty: auto
  std::optional<Protocol> protocol;    // empty: auto
  bool flow = false;                   // network model
  int gpus = 8;                        // ranks in one group
  int concurrent = 1;                  // groups at once: group j holds ranks j, j+K, j+2K, ...
  int nodes = 1;
  ClusterSpec cluster;  // node preset and fabric; nodes and GPUs per node are set from the fields above
  NetworkProfile profile;
  int64_t min_bytes = 1024;
  int64_t max_bytes = int64_t{1} << 30;
  int64_t step_factor = 2;
};

struct CollectiveRow {
  int64_t bytes = 0;
  double time_s = 0;  // until the last of the concurrent groups finished
  double algbw_GBps = 0;
  double busbw_GBps = 0;
  Algorithm algo = Algorithm::Ring;
  Protocol proto = Protocol::Simple;
};

std::string sweep_op_name(const CollectiveSweepConfig& cfg);
// Throws std::invalid_argument when the algorithm cannot run the operation on the group.
std::vector<CollectiveRow> run_collective_sweep(const CollectiveSweepConfig& cfg);
std::string format_collective_table(const CollectiveSweepConfig& cfg, const std::vector<CollectiveRow>& rows);
std::string format_collective_json(const CollectiveSweepConfig& cfg, const std::vector<CollectiveRow>& rows);

}  // namespace clustersim
