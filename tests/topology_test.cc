#include "topology/topology.h"

#include <gtest/gtest.h>

#include <set>

#include "topology/presets.h"

namespace clustersim {
namespace {

ClusterSpec cluster(const char* preset, int nodes, FabricKind fabric = FabricKind::FatTree) {
  ClusterSpec c;
  c.node = *find_node_preset(preset);
  c.nodes = nodes;
  c.fabric.kind = fabric;
  return c;
}

TEST(Topology, DgxH100NodeRoutesOverNvlink) {
  Topology t(cluster("dgx-h100", 1));
  EXPECT_EQ(t.num_gpus(), 8);
  auto r = t.route(0, 5);
  ASSERT_EQ(r.size(), 2u);  // GPU -> NVSwitch -> GPU, never over PCIe
  for (uint32_t l : r) EXPECT_EQ(t.links()[l].cls, LinkClass::NvLink);
  EXPECT_DOUBLE_EQ(t.route_bandwidth(r), 450e9);
  EXPECT_DOUBLE_EQ(t.route_latency(r), 0.5e-6);
  EXPECT_TRUE(t.route(3, 3).empty());
}

TEST(Topology, LinksAreDirectedPairsWithEqualCapacity) {
  Topology t(cluster("dgx-h100", 4));
  const auto& links = t.links();
  ASSERT_EQ(links.size() % 2, 0u);
  for (size_t i = 0; i < links.size(); i += 2) {
    EXPECT_EQ(links[i].src, links[i + 1].dst);
    EXPECT_EQ(links[i].dst, links[i + 1].src);
    EXPECT_EQ(links[i].bandwidth, links[i + 1].bandwidth);
  }
}

TEST(Topology, InterNodeRouteCrossesNicsAndIsBottleneckedByThem) {
  Topology t(cluster("dgx-h100", 2, FabricKind::Switch));
  auto r = t.route(2, 8 + 2);
  // gpu -> pcie switch -> nic -> switch -> nic -> pcie switch -> gpu
  ASSERT_EQ(r.size(), 6u);
  EXPECT_DOUBLE_EQ(t.route_bandwidth(r), 50e9);
  for (size_t i = 1; i + 1 < r.size(); ++i)  // GPUs are endpoints only
    EXPECT_NE(t.vertex(t.links()[r[i]].src).kind, VertexKind::Gpu);
}

TEST(Topology, FatTreeEcmpSpreadsPairsOverSpinesDeterministically) {
  ClusterSpec c = cluster("dgx-h100", 16);
  c.fabric.nics_per_leaf = 32;  // 4 nodes per leaf, 4 leaves, 32 spines
  Topology a(c), b(c);
  std::set<uint32_t> spines_used;
  for (int g = 0; g < 8; ++g) {
    auto r = a.route(g, 64 + g);  // node 0 -> node 8: different leaves
    auto r2 = b.route(g, 64 + g);
    ASSERT_EQ(std::vector<uint32_t>(r.begin(), r.end()), std::vector<uint32_t>(r2.begin(), r2.end()));
    for (uint32_t l : r)
      if (a.vertex(a.links()[l].dst).name.rfind("spine", 0) == 0) spines_used.insert(a.links()[l].dst);
  }
  EXPECT_GT(spines_used.size(), 1u);  // equal-cost paths are not all piled on one spine
}

TEST(Topology, OversubscriptionSetsSpineCount) {
  ClusterSpec c = cluster("dgx-h100", 8);
  c.fabric.nics_per_leaf = 16;
  c.fabric.oversubscription = 4.0;
  Topology t(c);
  int spines = 0;
  for (size_t v = 0; v < boost::num_vertices(t.graph()); ++v)
    if (t.vertex(static_cast<uint32_t>(v)).name.rfind("spine", 0) == 0) ++spines;
  EXPECT_EQ(spines, 4);  // 16 down-links : 4 up-links
}

TEST(Topology, RailOptimizedKeepsSameRailTrafficOnOneLeaf) {
  Topology t(cluster("dgx-h100", 4, FabricKind::RailOptimized));
  auto r = t.route(3, 8 + 3);
  int network = 0;
  for (uint32_t l : r) network += t.links()[l].cls == LinkClass::Network;
  EXPECT_EQ(network, 2);  // NIC -> rail-3 leaf -> NIC
}

TEST(Topology, PcieServerCrossesTheCpuBetweenSwitches) {
  Topology t(cluster("pcie-8gpu", 1));
  auto same = t.route(0, 1);
  auto cross = t.route(0, 5);
  EXPECT_EQ(same.size(), 2u);
  EXPECT_EQ(cross.size(), 4u);
  for (uint32_t l : cross) EXPECT_EQ(t.links()[l].cls, LinkClass::Pcie);
}

TEST(Topology, RingAndTorusFabricsRouteEveryPair) {
  for (FabricKind f : {FabricKind::Ring, FabricKind::Torus}) {
    Topology t(cluster("dgx-a100", 6, f));
    for (int n = 1; n < 6; ++n) EXPECT_FALSE(t.route(0, 8 * n).empty());
  }
}

}  // namespace
}  // namespace clustersim

namespace clustersim {
namespace {

// The structured fast path (node templates + switch-level trees) chooses exactly the
// links the plain search chooses, on every fabric where it applies.
TEST(Topology, FastRoutingEqualsTheSearch) {
  struct Case {
    const char* preset;
    int nodes;
    FabricKind fabric;
    int nics_per_leaf;
    double oversub;
  };
  for (const Case& c :
       {Case{"dgx-h100", 12, FabricKind::FatTree, 32, 1.0}, Case{"dgx-h100", 9, FabricKind::FatTree, 16, 2.0},
        Case{"dgx-a100", 5, FabricKind::Switch, 32, 1.0}, Case{"pcie-8gpu", 8, FabricKind::FatTree, 4, 1.0},
        Case{"dgx-h100", 6, FabricKind::FatTree, 12, 1.0}, Case{"dgx-h100", 12, FabricKind::RailOptimized, 4, 1.0},
        Case{"dgx-h100", 9, FabricKind::RailOptimized, 2, 2.0}, Case{"dgx-a100", 6, FabricKind::Ring, 32, 1.0},
        Case{"dgx-h100", 12, FabricKind::Torus, 32, 1.0}, Case{"pcie-8gpu", 6, FabricKind::RailOptimized, 2, 1.0},
        Case{"dgx-h100", 32, FabricKind::RailOptimized, 8, 1.0}}) {
    ClusterSpec spec = cluster(c.preset, c.nodes, c.fabric);
    spec.fabric.nics_per_leaf = c.nics_per_leaf;
    spec.fabric.oversubscription = c.oversub;
    Topology t(spec);
    for (int a = 0; a < t.num_gpus(); a += 3)
      for (int b = 0; b < t.num_gpus(); b += 5) {
        auto fast = t.route(a, b);
        EXPECT_EQ(std::vector<uint32_t>(fast.begin(), fast.end()), t.route_by_search(a, b))
            << c.preset << " " << c.nodes << " " << a << "->" << b;
      }
    // The same local GPU on every other node: on a rail-optimized fabric, the pairs the
    // rail shortcut takes (same rail, on one leaf and across the spines).
    const int g = t.gpus_per_node();
    for (int a = 0; a < g; ++a)
      for (int n = 1; n < c.nodes; ++n) {
        auto fast = t.route(a, n * g + a);
        EXPECT_EQ(std::vector<uint32_t>(fast.begin(), fast.end()), t.route_by_search(a, n * g + a))
            << c.preset << " " << c.nodes << " " << a << "->" << n * g + a;
      }
    // A route appended for a caller that keeps it (not kept by the topology when it is
    // structured) is the same route, with route_info's latency and class.
    Topology fresh(spec);
    for (int a = 0; a < fresh.num_gpus(); a += 3)
      for (int b = 0; b < fresh.num_gpus(); b += 7) {
        std::vector<uint32_t> links = {7};  // appended after what is there
        const Route r = fresh.append_route(a, b, links);
        EXPECT_TRUE(r.links.empty());
        links.erase(links.begin());
        EXPECT_EQ(links, t.route_by_search(a, b)) << c.preset << " " << c.nodes << " " << a << "->" << b;
        const Route kept = t.route_info(a, b);
        EXPECT_EQ(r.latency, kept.latency);
        EXPECT_EQ(r.cls, kept.cls);
      }
    // Fat-trees of several leaves holding whole nodes (where the fast path applies) and
    // rail-optimized fabrics (between GPUs of one rail) take the two-tier shortcut, so the
    // comparisons above cover it; a single switch never leaves its switch, and fat-tree
    // leaves that split a node keep the search.
    const int nics = find_node_preset(c.preset)->nics;
    const bool shortcut =
        (c.fabric == FabricKind::FatTree && c.nodes * nics > c.nics_per_leaf && c.nics_per_leaf % nics == 0) ||
        c.fabric == FabricKind::RailOptimized;
    EXPECT_EQ(t.two_tier_routing(), shortcut) << c.preset << " " << c.nodes;
    // Every fabric prunes its search between nodes (third nodes' NICs, and on leaf-spine
    // fabrics the leaves neither end uses); the comparison above is what holds it exact.
    EXPECT_TRUE(t.pruned_search()) << c.preset << " " << c.nodes << " " << to_string(c.fabric);
  }
}

TEST(Topology, RailPairsAcrossSpinesAreStructuredWhereNicsTie) {
  // On a DGX board two NICs share each PCIe switch, so across the spines a GPU's own NIC
  // ties with its neighbour's (four fabric links either way). The structured route follows
  // the search's tie-break (the spine's equal leaves, chosen by the destination's NIC)
  // instead of handing every such pair to the search.
  for (int nics_per_leaf : {2, 4, 8}) {
    ClusterSpec spec = cluster("dgx-h100", 24, FabricKind::RailOptimized);
    spec.fabric.nics_per_leaf = nics_per_leaf;
    Topology t(spec);
    const int g = t.gpus_per_node();
    int across = 0;
    for (int a = 0; a < g; ++a)
      for (int n = 1; n < spec.nodes; ++n) {
        const int b = n * g + a;
        auto fast = t.route(a, b);
        const auto search = t.route_by_search(a, b);
        EXPECT_EQ(std::vector<uint32_t>(fast.begin(), fast.end()), search) << a << "->" << b;
        EXPECT_TRUE(t.structured_route(a, b)) << nics_per_leaf << " " << a << "->" << b;
        int fabric_links = 0;
        for (uint32_t l : search) fabric_links += t.links()[l].cls == LinkClass::Network;
        across += fabric_links == 4;
      }
    EXPECT_GT(across, 0) << nics_per_leaf;
    // A pair on different rails keeps the search (a costlier exit can save fabric links).
    EXPECT_FALSE(t.structured_route(0, g * 9 + 3));
  }
}

}  // namespace
}  // namespace clustersim
