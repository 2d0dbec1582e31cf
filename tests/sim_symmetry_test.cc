// The TP ranks of a stage folded onto its first (sim/executor_symmetry.cc): the folded run
// gives the run that simulates every TP rank to the bit, and ranks the network tells apart
// are not folded.
#include <gtest/gtest.h>

#include <string>

#include "sim/run.h"
#include "support/temp_scenario.h"

namespace clustersim {
namespace {

using testing::scenario_from_text;

double metric(const Metrics& m, const std::string& k) {
  for (const auto& [key, v] : m)
    if (key == k) return v;
  return -1;
}

// The run with TP folding (nothing to record) and the one without (recording link usage).
struct Pair {
  Metrics folded, whole;
};
Pair both(const std::string& yaml, const std::string& tag) {
  const Scenario s = scenario_from_text(yaml, tag);
  RunOptions fold, keep;
  fold.record_link_usage = false;
  fold.keep_spans = false;
  keep.record_link_usage = true;
  return {run_training(s, fold).metrics, run_training(s, keep).metrics};
}

void expect_same(const Pair& p, const std::string& what) {
  ASSERT_EQ(p.folded.size(), p.whole.size()) << what;
  for (size_t i = 0; i < p.folded.size(); ++i) {
    const auto& [k, v] = p.folded[i];
    if (k == "simulated_ranks" || k == "events") continue;
    EXPECT_EQ(k, p.whole[i].first) << what;
    EXPECT_EQ(v, p.whole[i].second) << what << ": " << k;  // to the bit
  }
}

TEST(Symmetry, FoldedTensorParallelRanksGiveTheWholeRunToTheBit) {
  const std::string base = "cluster: {preset: dgx-h100, nodes: 2}\n";
  const struct {
    const char* what;
    std::string yaml;
    int tp;
  } cases[] = {
      {"TP overlap's ring of sends inside the group, interleaved pipeline",
       base + "model: {preset: llama3-8b, layers: 8}\nparallel: {tp: 8, pp: 2, sequence_parallel: true, "
              "tp_comm_overlap: true, schedule: interleaved-1f1b, virtual_stages: 2, zero_stage: 1}\n"
              "training: {global_batch: 16}\n",
       8},
      {"context parallelism's ring",
       base + "model: {preset: llama3-8b, layers: 4, seq_len: 16384}\nparallel: {tp: 4, cp: 4, "
              "sequence_parallel: true}\ntraining: {global_batch: 4}\n",
       4},
      {"experts split over TP, all-to-all over EP",
       base + "model: {preset: mixtral-8x7b, layers: 2}\nparallel: {tp: 2, ep: 8, sequence_parallel: true, "
              "zero_stage: 1}\ntraining: {global_batch: 16}\n",
       2},
      {"ZeRO 3 with blocking launches",
       base + "model: {preset: gpt3-1.3b, layers: 4}\nparallel: {tp: 2, zero_stage: 3}\n"
              "training: {global_batch: 16, launch_blocking: true}\n",
       2},
  };
  for (const auto& c : cases) {
    const Pair p = both(c.yaml, "sym");
    expect_same(p, c.what);
    EXPECT_EQ(metric(p.folded, "simulated_ranks") * c.tp, metric(p.whole, "simulated_ranks")) << c.what;
  }
}

TEST(Symmetry, RanksTheNetworkTellsApartAreNotFolded) {
  // Leaves of 12 NICs split the second node's eight: GPU 0's DP ring stays under one leaf
  // where GPU 4's leaves it (over the spine, or over NVLink to a NIC on GPU 0's leaf), so
  // their costs differ and nothing is folded. (On four such nodes every ring crosses the
  // spine three times: alike, and folded.)
  const Pair leaves = both(
      "cluster: {preset: dgx-h100, nodes: 2, scale_out: {nics_per_leaf: 12}}\nnetwork_model: analytic\n"
      "model: {preset: gpt3-1.3b, layers: 4}\nparallel: {tp: 8, dp: 2}\ntraining: {global_batch: 16}\n",
      "sym-leaves");
  expect_same(leaves, "uneven leaves");
  EXPECT_EQ(metric(leaves.folded, "simulated_ranks"), metric(leaves.whole, "simulated_ranks"));
  // Whole experts on every TP rank: the EP group holds both TP places, a group shared as the
  // world's is, and the places hold experts of one load (one program): folded, to the bit.
  const Pair experts = both(
      "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: mixtral-8x7b, layers: 2}\n"
      "parallel: {tp: 2, ep: 8, expert_tp: 1, sequence_parallel: true}\ntraining: {global_batch: 16}\n",
      "sym-experts");
  expect_same(experts, "whole experts");
  EXPECT_EQ(metric(experts.folded, "simulated_ranks") * 2, metric(experts.whole, "simulated_ranks"));
}

// A node wired GPU by GPU (the DGX-1's NVLink mesh) gives its DP replicas unlike TP links:
// the planner mirrors none of them, and the run is the one that simulates every rank.
TEST(Symmetry, AMeshNodesReplicasAreNotMirrored) {
  const std::string yaml = std::string("cluster: {topology_file: ") + CLUSTERSIM_SOURCE_DIR +
                           "/scenarios/examples/clusters/dgx1-hybrid-cube-mesh.topology.yaml}\n"
                           "model: {preset: gpt3-1.3b, layers: 2, dtype: fp16}\nparallel: {tp: 2, dp: 8}\n"
                           "training: {global_batch: 16}\n";
  const Scenario s = scenario_from_text(yaml, "sym-mesh");
  RunOptions all;
  all.simulate_all_ranks = true;
  const Metrics some = run_training(s).metrics, every = run_training(s, all).metrics;
  EXPECT_EQ(metric(some, "iteration_time_s"), metric(every, "iteration_time_s"));
  EXPECT_EQ(metric(some, "exposed_comm_dp_s"), metric(every, "exposed_comm_dp_s"));
  EXPECT_EQ(metric(some, "simulated_ranks"), 16);
}

}  // namespace
}  // namespace clustersim
