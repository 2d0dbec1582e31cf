// Topology files: parsing and its FILE:LINE:COL errors, mixed GPU models through the
// planner and executor, mesh nodes' ring search.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "cost_models/network.h"
#include "cost_models/tuner.h"
#include "scenarios/error.h"
#include "scenarios/scenario.h"
#include "scenarios/topology_file.h"
#include "sim/run.h"
#include "topology/presets.h"
#include "topology/topology.h"
#include "support/temp_scenario.h"

#ifndef CLUSTERSIM_SOURCE_DIR
#define CLUSTERSIM_SOURCE_DIR "."
#endif

namespace clustersim {
namespace {

namespace fs = std::filesystem;

// Each test writes its files into a directory of its own (support/temp_scenario.h).
class TopologyFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir(std::string("topofile-") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  std::string write(const std::string& rel, const std::string& text) {
    const fs::path p = fs::path(dir_) / rel;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  // The "FILE:LINE:COL: message" of the error loading `path` throws, or "".
  static std::string topology_error(const std::string& path) {
    try {
      (void)load_topology_file(path, SourceMark{});
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
  std::string dir_;
};

const std::string kExamples = std::string(CLUSTERSIM_SOURCE_DIR) + "/scenarios/examples/clusters/";

TEST_F(TopologyFile, MixedGenerationsKeepEachNodesGpu) {
  const ClusterSpec c = load_topology_file(kExamples + "h100-beside-a100.topology.yaml", SourceMark{});
  ASSERT_EQ(c.nodes, 8);
  ASSERT_EQ(c.node_specs.size(), 8u);
  EXPECT_FALSE(c.uniform());
  EXPECT_FALSE(c.one_gpu_model());
  const Topology topo(c);
  ASSERT_EQ(topo.num_gpus(), 64);
  EXPECT_EQ(topo.gpu_models().size(), 2u);
  EXPECT_EQ(topo.gpu_of(31).name, "h100-sxm");
  EXPECT_EQ(topo.gpu_of(32).name, "a100-sxm-80gb");
  // Each NIC's cable at its own rate: NDR on the H100 nodes, HDR on the A100s.
  std::set<double> nic_rates;
  for (const Link& l : topo.links())
    if (topo.vertex(l.src).kind == VertexKind::Nic && topo.vertex(l.dst).kind == VertexKind::Switch)
      nic_rates.insert(l.bandwidth);
  EXPECT_EQ(nic_rates, (std::set<double>{25e9, 50e9}));
  EXPECT_EQ(describe(c), "4 x dgx-h100 (8 x h100-sxm) + 4 x dgx-a100 (8 x a100-sxm-80gb), fat-tree fabric");
}

// Mixed nodes on a generated fabric take the pruned search; it finds the plain search's
// routes, link for link, on every fabric kind.
TEST_F(TopologyFile, MixedNodesPrunedSearchEqualsThePlainOne) {
  for (const char* fabric : {"fat-tree", "rail-optimized", "switch", "ring", "torus"}) {
    const std::string path = write("f.yaml", std::string("nodes:\n  - {preset: dgx-h100, count: 3}\n  - {preset: "
                                                         "dgx-a100, count: 3}\nfabric: {topology: ") +
                                                 fabric + ", nics_per_leaf: 8}\n");
    Topology topo(load_topology_file(path, SourceMark{}));
    for (int a = 0; a < topo.num_gpus(); a += 3)
      for (int b = 1; b < topo.num_gpus(); b += 5) {
        if (a == b) continue;
        const auto fast = topo.route(a, b);
        EXPECT_EQ(std::vector<uint32_t>(fast.begin(), fast.end()), topo.route_by_search(a, b))
            << fabric << " " << a << " -> " << b;
      }
    EXPECT_TRUE(topo.pruned_search()) << fabric;
  }
}

TEST_F(TopologyFile, NodesAlikeKeepTheStructuredRouting) {
  const ClusterSpec c = load_topology_file(write("t.yaml", "nodes:\n  - {preset: dgx-h100, count: 4}\n"), SourceMark{});
  EXPECT_TRUE(c.uniform());
  EXPECT_EQ(c.nodes, 4);
  Topology topo(c);
  (void)topo.route(0, 31);
  EXPECT_TRUE(topo.pruned_search() || topo.two_tier_routing());
}

TEST_F(TopologyFile, ErrorsPointIntoTheFile) {
  struct Case {
    std::string text, where, what;
  };
  const std::vector<Case> cases = {
      {"nodes:\n  - {preset: dgx-h100, colour: red}\n", ":2:24", "unknown key 'colour'"},
      {"nodes:\n  - {preset: dgx-h100}\n  - {preset: dgx-gb200-nvl72}\n", ":3:5", "72 GPUs per node, expected 8"},
      {"nodes:\n  - {preset: dgx-h100, count: 2}\nswitches: [s0]\nlinks:\n  - {between: [node0/nic0, s1], "
       "bandwidth: 400Gbps}\n",
       ":5:28", "no switch or NIC named 's1'"},
      {"nodes:\n  - {preset: dgx-h100, count: 2}\nswitches: [s0]\nlinks:\n  - {between: [node0/nic9, s0], "
       "bandwidth: 400Gbps}\n",
       ":5:16", "node 0 has 8 NICs"},
      {"nodes:\n  - {preset: dgx-h100, count: 3}\nswitches: [s0]\nlinks:\n  - {between: [node0/nic0, s0], "
       "bandwidth: 400Gbps}\n  - {between: [node1/nic0, s0], bandwidth: 400Gbps}\n",
       ":4:1", "node 2 is not joined to node 0"},
      {"nodes:\n  - {preset: dgx-h100, count: 2}\nfabric: {topology: fat-tree}\nswitches: [s0]\nlinks: []\n", ":3:1",
       "fabric: does not go with switches"},
      {"nodes:\n  - gpus: 4\n    gpu_links:\n      - {between: [0, 4], bandwidth: 50GB/s}\n", ":4:23",
       "expected at most 3"},
      {"nodes:\n  - gpus: 4\n    gpu_links:\n      - {between: [0, 1], bandwidth: 50GB/s}\n      - {between: [1, 0], "
       "bandwidth: 50GB/s}\n",
       ":5:19", "linked twice"},
      {"nodes: []\n", ":1:8", "nodes: is empty"},
      {"nodes:\n  - preset: dgx-h100\n    gpu_spec: {power_limit: 900, capped_bf16_tflops: 0}\n", ":3:15",
       "power model is incomplete"},
  };
  for (const Case& c : cases) {
    const std::string path = write("bad.yaml", c.text);
    const std::string err = topology_error(path);
    EXPECT_NE(err.find(path + c.where), std::string::npos) << c.text << "\n -> " << err;
    EXPECT_NE(err.find(c.what), std::string::npos) << c.text << "\n -> " << err;
  }
}

// A node's GPU carries its preset's power model; gpu_spec's power keys amend it, as
// cluster.gpu_spec's do (docs/model.md, "Clocks under the power cap").
TEST_F(TopologyFile, GpuSpecCarriesAPowerModel) {
  const ClusterSpec c = load_topology_file(
      write("power.yaml",
            "nodes:\n  - {preset: dgx-h100, count: 1}\n  - preset: dgx-a100\n    count: 1\n"
            "    gpu_spec: {power_limit: 400, idle_power: 60, stream_power: 300, capped_bf16_tflops: 257}\n"),
      SourceMark{});
  ASSERT_EQ(c.node_specs.size(), 2u);
  EXPECT_EQ(c.node_specs[0].gpu.power_limit_w, 700);  // the h100-sxm preset's
  EXPECT_EQ(c.node_specs[1].gpu.power_limit_w, 400);
  EXPECT_EQ(c.node_specs[1].gpu.capped_bf16_flops, 257e12);
  EXPECT_EQ(c.node_specs[1].gpu.stream_power_w, 300);
}

TEST_F(TopologyFile, ScenarioRefusesPresetKeysBesideTheFile) {
  write("t.yaml", "nodes:\n  - {preset: dgx-h100, count: 2}\n");
  const std::string s = write("s.yaml",
                              "cluster:\n  topology_file: t.yaml\n  nodes: 2\nmodel: {preset: gpt3-1.3b}\n"
                              "parallel: {dp: 16}\ntraining: {global_batch: 16}\n");
  try {
    (void)load_scenario(s, {});
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(s + ":3:3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not go with cluster.topology_file"), std::string::npos) << e.what();
  }
}

// The slower GPUs' stages are the slow ones, and a data-parallel rank standing for an
// H100 and an A100 runs at the A100's pace.
TEST_F(TopologyFile, MixedClusterStagesAndMirrors) {
  const Scenario mixed = load_scenario(kExamples + "llama3-70b-h100-beside-a100.yaml", {"parallel.pp=4", "parallel.dp=2"});
  const RunOutcome run = run_training(mixed);
  auto metric = [&](const RunOutcome& r, const std::string& k) {
    for (const auto& [key, v] : r.metrics)
      if (key == k) return v;
    ADD_FAILURE() << "no metric " << k;
    return 0.0;
  };
  const double h100 = metric(run, "stage_0_compute_busy_s"), a100 = metric(run, "stage_3_compute_busy_s");
  EXPECT_GT(a100, 2.5 * h100);  // BF16 peaks 312 vs 989 TFLOP/s
  EXPECT_LT(a100, 3.5 * h100);

  // DP across the two generations: every rank waits for the A100s.
  write("two.yaml", "nodes:\n  - {preset: dgx-h100}\n  - {preset: dgx-a100}\n");
  write("a100s.yaml", "nodes:\n  - {preset: dgx-a100, count: 2}\n");
  write("h100s.yaml", "nodes:\n  - {preset: dgx-h100, count: 2}\n");
  auto step = [&](const std::string& topo, bool all_ranks) {
    const std::string s = write("dp-" + topo, "cluster: {topology_file: " + topo +
                                                  "}\nmodel: {preset: gpt3-1.3b}\nparallel: {dp: 16, micro_batch: 2}\n"
                                                  "training: {global_batch: 64}\n");
    RunOptions o;
    o.simulate_all_ranks = all_ranks;
    return metric(run_training(load_scenario(s, {}), o), "iteration_time_s");
  };
  const double both = step("two.yaml", false), a100s = step("a100s.yaml", false), h100s = step("h100s.yaml", false);
  EXPECT_NEAR(both, a100s, 0.05 * a100s);
  EXPECT_GT(both, 2.0 * h100s);
  // Simulating every rank with its own GPU gives the same step: they meet at every all-reduce.
  EXPECT_NEAR(step("two.yaml", true), both, 0.01 * both);
}

TEST_F(TopologyFile, MemoryIsCheckedOnEachRanksGpu) {
  // Stage 1 on A100 40 GB: the layout that fits on H100s does not fit there.
  write("t.yaml", "nodes:\n  - {preset: dgx-h100}\n  - {preset: dgx-a100, gpu: a100-sxm-40gb}\n");
  const std::string s = write("s.yaml",
                              "cluster: {topology_file: t.yaml}\nmodel: {preset: llama3-8b}\n"
                              "parallel: {tp: 4, pp: 2, dp: 2, micro_batch: 3}\ntraining: {global_batch: 12}\n");
  try {
    (void)run_training(load_scenario(s, {}));
    FAIL() << "expected the A100 40 GB stage to be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("a100-sxm-40gb"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("stage 1"), std::string::npos) << e.what();
  }
}

// DGX-1's hybrid cube mesh: rings over the 48 directed NVLink lanes, the first all
// on double links, no hop without a link, no lane used twice.
TEST_F(TopologyFile, MeshNodeRingsFollowTheLinks) {
  const Topology topo(load_topology_file(kExamples + "dgx1-hybrid-cube-mesh.topology.yaml", SourceMark{}));
  const std::vector<int32_t> gpus = {0, 1, 2, 3, 4, 5, 6, 7};
  const GroupLayout l = layout_of(topo, gpus);
  // Six rings take all 48 lanes (8 hops each).
  ASSERT_EQ(l.mesh_rings.size(), 6u);
  std::map<std::pair<int, int>, int> used;
  for (const auto& ring : l.mesh_rings) {
    ASSERT_EQ(ring.size(), 8u);
    for (size_t i = 0; i < ring.size(); ++i) {
      const int a = ring[i], b = ring[(i + 1) % ring.size()];
      EXPECT_GT(topo.gpu_link_bandwidth(a, b), 0) << a << "->" << b;
      ++used[{a, b}];
    }
  }
  for (const auto& [hop, n] : used) EXPECT_LE(n, topo.gpu_link_bandwidth(hop.first, hop.second) / 25e9);
  for (size_t i = 0; i < 8; ++i) {
    const int a = l.mesh_rings[0][i], b = l.mesh_rings[0][(i + 1) % 8];
    EXPECT_EQ(topo.gpu_link_bandwidth(a, b), 50e9) << a << "->" << b;
  }
}

// MI300X is a full mesh of 64 GB/s Infinity Fabric links: a pair moves at one link's
// rate, eight GPUs' rings use all seven links of each GPU, and an all-to-all (or any direct
// exchange) runs on every link at once.
TEST(MeshPresets, Mi300xIsAFullMesh) {
  ClusterSpec c;
  c.node = *find_node_preset("mi300x-8gpu");
  Topology topo(c);
  EXPECT_FALSE(c.node.nvswitch);
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b) {
      if (a != b) {
        EXPECT_EQ(topo.gpu_link_bandwidth(a, b), 64e9);
      }
    }
  const std::vector<int32_t> gpus = {0, 1, 2, 3, 4, 5, 6, 7};
  const GroupLayout l = layout_of(topo, gpus);
  // 56 directed links, 8 a ring: seven rings use them all (a decomposition Tillson's
  // theorem says exists for 8 GPUs).
  EXPECT_EQ(l.mesh_rings.size(), 7u);
  NetworkProfile prof;
  AnalyticNetwork net(topo, prof);
  const double bytes = 256.0 * (1 << 20);
  const double pair = net.run(expand_sendrecv(2, bytes, Protocol::Simple, prof), std::vector<int32_t>{0, 1}).seconds;
  EXPECT_GE(pair, bytes / 64e9);
  const double a2a =
      net.run(expand_collective(CollectiveRequest{CollectiveKind::AllToAll, Algorithm::Direct, Protocol::Simple, bytes, 0},
                                l, prof),
              gpus)
          .seconds;
  EXPECT_LT(a2a, 2.0 * bytes * 7 / 8 / (7 * 64e9));  // the seven links at once, not one after another
  // A direct reduce-scatter or all-gather sends each peer the same share as the all-to-all,
  // so it takes the same time on the mesh (it ran shift by shift, 7x as long); an
  // all-reduce is the two.
  auto direct = [&](CollectiveKind op) {
    return net
        .run(expand_collective(CollectiveRequest{op, Algorithm::Direct, Protocol::Simple, bytes, 0}, l, prof), gpus)
        .seconds;
  };
  EXPECT_DOUBLE_EQ(direct(CollectiveKind::ReduceScatter), a2a);
  EXPECT_DOUBLE_EQ(direct(CollectiveKind::AllGather), a2a);
  EXPECT_NEAR(direct(CollectiveKind::AllReduce), 2 * a2a, 0.02 * a2a);  // one base latency, not two
}

// Explicit links may funnel traffic through one: network_model auto takes the flow network
// there (it took the analytic one, which saw a 400 Gb/s leaf-to-leaf link as uncontended).
TEST_F(TopologyFile, ExplicitLinksTakeTheFlowNetworkByDefault) {
  std::string links;
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 8; ++k)
      links += "  - {between: [node" + std::to_string(n) + "/nic" + std::to_string(k) + ", leaf" + std::to_string(n) +
               "], bandwidth: 400Gbps}\n";
  write("thin.yaml", "nodes:\n  - {preset: dgx-h100, count: 2}\nswitches: [leaf0, leaf1]\nlinks:\n" + links +
                         "  - {between: [leaf0, leaf1], bandwidth: 400Gbps}\n");
  const std::string body =
      "cluster: {topology_file: thin.yaml}\nmodel: {preset: gpt3-1.3b}\n"
      "parallel: {tp: 8, dp: 2}\ntraining: {global_batch: 16}\n";
  const Scenario s = load_scenario(write("s.yaml", body));
  EXPECT_EQ(s.network_model, "flow");
  EXPECT_EQ(load_scenario(write("a.yaml", body + "network_model: analytic\n")).network_model, "analytic");
}

}  // namespace
}  // namespace clustersim
