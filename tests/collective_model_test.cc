// The collective algorithms against their closed forms: ring, tree, hierarchical, NVLS and
// point-to-point under NCCL's protocols, and transfers sharing a link.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>
#include <tuple>

#include "cost_models/collective.h"
#include "cost_models/compute.h"
#include "cost_models/flow_network.h"
#include "cost_models/network.h"
#include "cost_models/power_cap.h"
#include "cost_models/tuner.h"
#include "support/attention_op.h"
#include "support/clusters.h"
#include "topology/presets.h"

namespace clustersim {
namespace {

ClusterSpec cluster(const char* preset, int nodes) { return testing::preset_cluster(preset, nodes); }
using testing::first_gpus;

// A profile with no protocol overheads: α is the physical route latency and B the line
// rate, so the textbook closed forms apply unchanged.
NetworkProfile ideal() {
  NetworkProfile p;
  for (auto& f : p.base_latency) f.fill(0.0);
  for (auto& c : p.hop_latency)
    for (auto& f : c) f.fill(0.0);
  p.figure_route_latency.fill(0.0);
  p.link_efficiency.fill(1.0);
  return p;
}

Expansion expand(CollectiveKind op, Algorithm a, Protocol proto, const Topology& topo, int p, double S,
                 const NetworkProfile& prof) {
  return expand_collective(CollectiveRequest{op, a, proto, S, 0}, layout_of(topo, first_gpus(p)), prof);
}

// Ring all-reduce on one DGX H100: p = 8 GPUs, each step a GPU sends S/p to its
// successor over GPU -> NVSwitch -> GPU (alpha = 2 hops x 0.25 us, B = 450 GB/s):
//   T = 2(p-1)·alpha + 2(p-1)/p · S/B
// With NCCL's protocol figures the same form holds with alpha = the Simple NVLink ring
// step latency (3.4 us, which holds the route's own 0.5 us), B = 450 GB/s x 370.8/450,
// plus the 8.4 us base.
TEST(Collectives, RingAllReduceOnOneDgxH100MatchesClosedForm) {
  Topology topo(cluster("dgx-h100", 1));
  const int p = 8;
  for (bool nccl : {false, true}) {
    const NetworkProfile prof = nccl ? NetworkProfile{} : ideal();
    AnalyticNetwork net(topo, prof);
    const double alpha = nccl ? 3.4e-6 : 0.5e-6;
    const double B = nccl ? 370.8e9 : 450e9;
    const double base = nccl ? 8.4e-6 : 0.0;
    for (double S : {1024.0, 1e6, 64e6, 1024.0 * 1024 * 1024}) {
      const double sim =
          net.run(expand(CollectiveKind::AllReduce, Algorithm::Ring, Protocol::Simple, topo, p, S, prof), first_gpus(p))
              .seconds;
      const double closed = base + 2.0 * (p - 1) * alpha + 2.0 * (p - 1) / p * S / B;
      EXPECT_NEAR(sim, closed, 0.01 * closed) << "S=" << S << " nccl=" << nccl;
      EXPECT_NEAR(base + closed_form_seconds(CollectiveKind::AllReduce, Algorithm::Ring, p, S, alpha, B), closed,
                  1e-15);
    }
  }
}

// NCCL's per-step latencies were measured over a route through one switch, so that route
// is not counted again; a route's further hops, and links slower than the defaults, are.
// Small all-reduces then take NCCL's own estimates (src/graph/tuning.cc): tree
// base + 2·((g−1)·intra + log2(n)·inter), ring base + 2(p−1)·intra; published with NCCL
// 2.26 on 2 × 8 and 4 × 8 H100 (NVIDIA/nccl-tests#309): 25 µs and 35 µs for 16 to 128 B.
TEST(Collectives, RouteLatencyBeyondNcclsFigureRoute) {
  const NetworkProfile prof;
  auto small = [&](const ClusterSpec& c, int p, Algorithm a) {
    Topology topo(c);
    AnalyticNetwork net(topo, prof);
    return net.run(expand(CollectiveKind::AllReduce, a, Protocol::LL, topo, p, 16, prof), first_gpus(p)).seconds;
  };
  EXPECT_NEAR(small(cluster("dgx-h100", 1), 8, Algorithm::Ring), 6.6e-6 + 14 * 0.6e-6, 0.05e-6);
  EXPECT_NEAR(small(cluster("dgx-h100", 2), 16, Algorithm::Tree), 6.8e-6 + 2 * (7 * 0.6e-6 + 5.0e-6), 0.05e-6);
  EXPECT_NEAR(small(cluster("dgx-h100", 4), 32, Algorithm::Tree), 6.8e-6 + 2 * (7 * 0.6e-6 + 2 * 5.0e-6), 0.05e-6);
  // Scale-out links of 2 µs instead of 0.5: each of the two network steps (up, then down)
  // crosses NIC-leaf-NIC, 2 × 1.5 µs more than the figure's route.
  ClusterSpec slow = cluster("dgx-h100", 2);
  slow.fabric.latency = 2e-6;
  EXPECT_NEAR(small(slow, 16, Algorithm::Tree), 6.8e-6 + 2 * (7 * 0.6e-6 + 5.0e-6 + 3e-6), 0.05e-6);
  // A slower NVLink hop shows inside a node too: 1 µs a link, 1.5 µs more a step.
  ClusterSpec far = cluster("dgx-h100", 1);
  far.node.nvlink_latency = 1e-6;
  EXPECT_NEAR(small(far, 8, Algorithm::Ring), 6.6e-6 + 14 * (0.6e-6 + 1.5e-6), 0.05e-6);
}

// Two GPUs of a node talk over the widest path inside it (NCCL's search takes bandwidth
// before the kind of path): with an NVLink slower than PCIe the ring goes over PCIe, and a
// faster NVLink never makes it slower (by least cost alone, 32 GB/s NVLink beat a 64 GB/s
// PCIe path: 30 GB/s took PCIe and ran the ring at 50 GB/s, 32 took NVLink at 26).
TEST(Collectives, ARingInsideANodeTakesItsWidestPath) {
  double last = std::numeric_limits<double>::infinity();
  for (double nvlink : {10e9, 30e9, 32e9, 60e9, 64e9, 70e9, 100e9, 450e9}) {
    ClusterSpec c = cluster("dgx-h100", 1);
    c.node.nvlink_bandwidth = nvlink;
    Topology topo(c);
    const NetworkProfile prof;
    AnalyticNetwork net(topo, prof);
    const double t =
        net.run(expand(CollectiveKind::AllGather, Algorithm::Ring, Protocol::Simple, topo, 8, 1e9, prof), first_gpus(8))
            .seconds;
    EXPECT_LE(t, last * (1 + 1e-9)) << nvlink;
    if (nvlink > c.node.pcie_bandwidth) {
      EXPECT_EQ(topo.route(0, 1).size(), 2u) << nvlink;  // GPU -> NVSwitch -> GPU
    }
    last = t;
  }
}

// Flat algorithms on one node of 8: ring and direct all-gather / reduce-scatter and
// direct all-to-all (p-1)·alpha + (p-1)/p·S/B; direct all-reduce twice that;
// halving-doubling all-reduce 2·lg p·alpha + 2(p-1)/p·S/B, all-gather lg p·alpha + ...
TEST(Collectives, FlatAlgorithmsMatchTheirClosedForms) {
  Topology topo(cluster("dgx-h100", 1));
  const NetworkProfile prof = ideal();
  AnalyticNetwork net(topo, prof);
  const double alpha = 0.5e-6, B = 450e9, S = 256e6;
  for (int p : {2, 4, 8}) {
    for (auto [op, algo] : {std::pair{CollectiveKind::AllGather, Algorithm::Ring},
                            {CollectiveKind::ReduceScatter, Algorithm::Ring},
                            {CollectiveKind::AllToAll, Algorithm::Direct},
                            {CollectiveKind::AllGather, Algorithm::Direct},
                            {CollectiveKind::AllReduce, Algorithm::Direct},
                            {CollectiveKind::AllReduce, Algorithm::HalvingDoubling},
                            {CollectiveKind::AllGather, Algorithm::HalvingDoubling},
                            {CollectiveKind::ReduceScatter, Algorithm::HalvingDoubling},
                            {CollectiveKind::Broadcast, Algorithm::HalvingDoubling}}) {
      const double sim = net.run(expand(op, algo, Protocol::Simple, topo, p, S, prof), first_gpus(p)).seconds;
      const double closed = closed_form_seconds(op, algo, p, S, alpha, B);
      EXPECT_NEAR(sim, closed, 0.01 * closed) << to_string(op) << " " << to_string(algo) << " p=" << p;
    }
  }
}

// A pipelined chain (the tree inside one node, or a ring broadcast): depth D = p-1,
// C = S / chunk chunks, each link carrying one chunk per step:
//   all-reduce 2·(D + C - 1)·(alpha + c/B); broadcast (D + C - 1)·(alpha + c/B).
TEST(Collectives, PipelinedChainsMatchTheirClosedForm) {
  Topology topo(cluster("dgx-h100", 1));
  const NetworkProfile prof = ideal();
  AnalyticNetwork net(topo, prof);
  const double chunk = static_cast<double>(prof.protocol(Protocol::Simple).chunk_bytes);
  for (double S : {64.0 * 1024, 64e6}) {
    const int64_t C = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(S / chunk)));
    const double tree =
        net.run(expand(CollectiveKind::AllReduce, Algorithm::Tree, Protocol::Simple, topo, 8, S, prof), first_gpus(8))
            .seconds;
    // A chain of 8 through the switch: reduce up and broadcast down at once, 14 deep; a
    // middle GPU's link carries its chunk up and its chunk down.
    EXPECT_NEAR(tree, closed_form_pipelined(14, C, S / C, 2, 0.5e-6, 450e9), 1e-9 + 0.01 * tree) << S;
  }
}

// Across 16 nodes, one GPU each, the double binary tree: depth D of the deeper tree,
// k = the most chunks any GPU link carries per step (children over both trees).
TEST(Collectives, DoubleBinaryTreeMatchesItsClosedForm) {
  ClusterSpec c = cluster("dgx-h100", 16);
  c.node.gpus = 1;
  c.node.nics = 1;
  Topology topo(c);
  const NetworkProfile prof = ideal();
  AnalyticNetwork net(topo, prof);
  std::vector<int32_t> a, b;
  double_binary_tree(16, a, b);
  int depth = 0, load = 0;
  std::vector<int> children(16, 0), parents(16, 0);
  for (const auto* parent : {&a, &b})
    for (int i = 0; i < 16; ++i) {
      int d = 0;
      for (int v = i; (*parent)[static_cast<size_t>(v)] >= 0; v = (*parent)[static_cast<size_t>(v)]) ++d;
      depth = std::max(depth, d);
      if ((*parent)[static_cast<size_t>(i)] >= 0) {
        ++parents[static_cast<size_t>(i)];
        load = std::max(load, ++children[static_cast<size_t>((*parent)[static_cast<size_t>(i)])]);
      }
    }
  // Every rank is an inner node of at most one tree: at most 2 children in all.
  EXPECT_LE(load, 2);
  // Up and down at once: a node's link carries a chunk to each parent and to each child.
  load = 0;
  for (int i = 0; i < 16; ++i)
    load = std::max(load, parents[static_cast<size_t>(i)] + children[static_cast<size_t>(i)]);
  const auto inter = topo.route(0, 1);
  const double alpha = topo.route_latency(inter), B = topo.route_bandwidth(inter);
  const double S = 256e6;
  const double chunk = static_cast<double>(prof.protocol(Protocol::Simple).chunk_bytes);
  const int64_t C = static_cast<int64_t>(std::ceil(S / 2 / chunk));
  const double sim =
      net.run(expand(CollectiveKind::AllReduce, Algorithm::Tree, Protocol::Simple, topo, 16, S, prof), first_gpus(16))
          .seconds;
  EXPECT_NEAR(sim, closed_form_pipelined(2 * depth, C, S / 2 / C, load, alpha, B), 0.01 * sim);
}

// Hierarchical all-reduce on 16 x 8: intra-node ring reduce-scatter (NVLink), 8
// concurrent inter-node rings on S/8 (each GPU's own NIC), intra-node all-gather. One
// big switch, so no two rings can meet on a hashed spine link.
TEST(Collectives, HierarchicalMatchesItsClosedForm) {
  ClusterSpec c = cluster("dgx-h100", 16);
  c.fabric.kind = FabricKind::Switch;
  Topology topo(c);
  const NetworkProfile prof = ideal();
  AnalyticNetwork net(topo, prof);
  const double S = 1e9;
  const double sim =
      net.run(expand(CollectiveKind::AllReduce, Algorithm::Hierarchical, Protocol::Simple, topo, 128, S, prof),
              first_gpus(128))
          .seconds;
  const auto inter = topo.route(0, 8);
  const double closed =
      closed_form_hierarchical(8, 16, S, 0.5e-6, 450e9, topo.route_latency(inter), topo.route_bandwidth(inter));
  EXPECT_NEAR(sim, closed, 0.01 * closed);
}

// NVLS all-reduce: each GPU pushes S up and pulls S down through the switch at once:
// alpha + S/B, against the ring's 2(p-1)/p·S/B.
TEST(Collectives, InSwitchReductionHalvesTheRingsTraffic) {
  Topology topo(cluster("dgx-h100", 1));
  const NetworkProfile prof = ideal();
  AnalyticNetwork net(topo, prof);
  const double S = 1e9;
  const double nvls =
      net.run(expand(CollectiveKind::AllReduce, Algorithm::Nvls, Protocol::Simple, topo, 8, S, prof), first_gpus(8))
          .seconds;
  // NCCL's one-node NVLS all-reduce is a three-stage pipeline of rounds over 16 channels x
  // 8 heads: 1 GB is under 64 rounds of 128 KiB chunks, so its chunk is 64 KiB, its round
  // 128 x 64 KiB = 8 MiB, 120 rounds (the last partial), and the fill and drain two more
  // whole rounds' data.
  EXPECT_EQ(nvls_chunk_bytes(S, 128), 65536.0);
  const double round = 128 * 65536.0;
  EXPECT_EQ(std::ceil(S / round), 120);
  EXPECT_NEAR(nvls, 0.25e-6 + (S + 2 * round) / (450e9 * prof.nvls_efficiency), 1e-9);
  EXPECT_THROW(expand_collective(CollectiveRequest{CollectiveKind::AllReduce, Algorithm::Nvls, Protocol::Simple, S, 0},
                                 layout_of(Topology(cluster("pcie-8gpu", 1)), first_gpus(8)), prof),
               std::invalid_argument);
}

// Across nodes NVLS is NCCL's NVLS tree: the switch reduces and multicasts inside each node
// while the nodes' GPUs of one local index exchange their 1/g shares over their own NICs,
// at once. So a large all-reduce runs at the slower of the switch's rate (S through each
// GPU's NVLink at the in-switch efficiency) and the NICs' (S/g each way through each NIC).
TEST(Collectives, NvlsTreeRunsAtTheSlowerOfTheSwitchAndTheNics) {
  const double S = 16.0 * (1 << 30);
  auto seconds = [&](double nic_bytes_per_s) {
    ClusterSpec c = cluster("dgx-h100", 2);
    c.node.nic_bandwidth = nic_bytes_per_s;
    Topology topo(c);
    const NetworkProfile prof = ideal();
    AnalyticNetwork net(topo, prof);
    return net
        .run(expand(CollectiveKind::AllReduce, Algorithm::Nvls, Protocol::Simple, topo, 16, S, prof), first_gpus(16))
        .seconds;
  };
  const double nvlink = find_node_preset("dgx-h100")->nvlink_bandwidth;
  const double switch_bound = S / (nvlink * NetworkProfile{}.nvls_efficiency);
  EXPECT_NEAR(seconds(50e9), switch_bound, 0.01 * switch_bound);        // 400 Gb/s NICs: S/8 at 50 GB/s is faster
  EXPECT_NEAR(seconds(12.5e9), S / 8 / 12.5e9, 0.01 * S / 8 / 12.5e9);  // 100 Gb/s NICs bind
  // Auto takes it for a large message on two full nodes, not for one GPU a node.
  Topology topo(cluster("dgx-h100", 2));
  const NetworkProfile prof;
  AnalyticNetwork net(topo, prof);
  const auto all = first_gpus(16);
  EXPECT_EQ(
      choose_collective(CollectiveKind::AllReduce, S, layout_of(topo, all), all, net, prof, std::nullopt, std::nullopt)
          .algo,
      Algorithm::Nvls);
  const std::vector<int32_t> one_a_node{0, 8};
  EXPECT_NE(choose_collective(CollectiveKind::AllReduce, S, layout_of(topo, one_a_node), one_a_node, net, prof,
                              std::nullopt, std::nullopt)
                .algo,
            Algorithm::Nvls);
}

// NCCL shrinks the NVLS chunk with the message (src/enqueue.cc): 128 KiB from 64 rounds of
// it up, then 64, 32 and 16 KiB below 64, 8 and 2 rounds of the chunk before.
TEST(Collectives, NvlsChunkFollowsNcclsRule) {
  const int ops = 16 * 8;
  const double K = 1024;
  EXPECT_EQ(nvls_chunk_bytes(64 * ops * 128 * K, ops), 128 * K);
  EXPECT_EQ(nvls_chunk_bytes(64 * ops * 128 * K - 1, ops), 64 * K);
  EXPECT_EQ(nvls_chunk_bytes(8 * ops * 64 * K, ops), 64 * K);
  EXPECT_EQ(nvls_chunk_bytes(8 * ops * 64 * K - 1, ops), 32 * K);
  EXPECT_EQ(nvls_chunk_bytes(2 * ops * 32 * K - 1, ops), 16 * K);
  EXPECT_EQ(nvls_chunk_bytes(1, ops), 16 * K);
}

// The pipeline's fill makes NVLS ramp slowly with size: on 8 H100s with NCCL's Hopper
// constants, ~350 GB/s busbw at 64 MiB (NVIDIA/nccl-tests#212 and its maintainers: 256 MiB
// is too small for the peak) and the measured ~480 at 16 GiB; busbw never falls as the
// message grows within one chunk size.
TEST(Collectives, NvlsBandwidthRampsWithTheMessage) {
  Topology topo(cluster("dgx-h100", 1));
  const NetworkProfile prof;
  AnalyticNetwork net(topo, prof);
  auto busbw = [&](double S) {
    const double t =
        net.run(expand(CollectiveKind::AllReduce, Algorithm::Nvls, Protocol::Simple, topo, 8, S, prof), first_gpus(8))
            .seconds;
    return 2.0 * 7 / 8 * S / t / 1e9;
  };
  EXPECT_NEAR(busbw(64.0 * (1 << 20)), 350, 15);
  EXPECT_NEAR(busbw(16.0 * (1 << 30)), 480, 5);
  EXPECT_LT(busbw(256.0 * (1 << 20)), 0.95 * busbw(16.0 * (1 << 30)));
  double last = 0;
  for (double S = 128.0 * (1 << 20); S < 1024.0 * (1 << 20); S *= 1.25) {
    EXPECT_GE(busbw(S), last * 0.999) << S;
    last = busbw(S);
  }
}

// NCCL's one-node NVLS all-gather and reduce-scatter pass each chunk through two warp groups
// (multicast then copy out; scatter then reduce), the all-reduce through three: the first
// adds one round of each direction's bytes, the second two. 64 MiB on 8 H100s runs 64 KiB
// chunks over 16 channels x 8 heads, a round of 8 MiB; 16 GiB runs 128 KiB, 16 MiB.
TEST(Collectives, NvlsGatherAndScatterFillOneRoundAllReduceTwo) {
  Topology topo(cluster("dgx-h100", 1));
  const NetworkProfile prof;
  auto bytes = [&](CollectiveKind op, double S, bool up) {
    const Expansion e = expand(op, Algorithm::Nvls, Protocol::Simple, topo, 8, S, prof);
    for (const CollectiveStep& st : e.steps)
      for (const Transfer& t : st.transfers)
        if (up ? (t.src == 0 && t.dst == kSwitch) : (t.src == kSwitch && t.dst == 0)) return t.bytes;
    return -1.0;
  };
  const double mib = 1 << 20, S = 64 * mib, big = 16384 * mib;
  EXPECT_DOUBLE_EQ(bytes(CollectiveKind::AllGather, S, true), S / 8 * (1 + 8 * mib / S));
  EXPECT_DOUBLE_EQ(bytes(CollectiveKind::AllGather, S, false), S * 7 / 8 * (1 + 8 * mib / S));
  EXPECT_DOUBLE_EQ(bytes(CollectiveKind::ReduceScatter, S, true), S * 7 / 8 * (1 + 8 * mib / S));
  EXPECT_DOUBLE_EQ(bytes(CollectiveKind::ReduceScatter, S, false), S / 8 * (1 + 8 * mib / S));
  EXPECT_DOUBLE_EQ(bytes(CollectiveKind::AllReduce, S, true), S + 2 * 8 * mib);
  EXPECT_DOUBLE_EQ(bytes(CollectiveKind::AllGather, big, false), big * 7 / 8 * (1 + 16 * mib / big));
  // A message of one round or less pays a whole message more (a 1 MiB gather, 16 KiB chunks).
  EXPECT_DOUBLE_EQ(bytes(CollectiveKind::AllGather, mib, true), mib / 8 * 2);
}

// NVLS's time never falls as the message grows, across its rounds' edges and its chunk
// sizes: one byte past a whole round adds a partial round, it does not halve the fill.
TEST(Collectives, NvlsTimeIsMonotonicInTheMessage) {
  Topology topo(cluster("dgx-h100", 1));
  const NetworkProfile prof;
  AnalyticNetwork net(topo, prof);
  auto t = [&](double S, CollectiveKind op = CollectiveKind::AllReduce) {
    return net.run(expand(op, Algorithm::Nvls, Protocol::Simple, topo, 8, S, prof), first_gpus(8)).seconds;
  };
  for (const CollectiveKind op :
       {CollectiveKind::AllReduce, CollectiveKind::AllGather, CollectiveKind::ReduceScatter}) {
    double last = 0;
    for (double S = 64.0 * 1024; S <= 80.0 * (1 << 20); S += 16.0 * 1024) {
      const double now = t(S, op);
      ASSERT_GE(now, last) << S << " " << static_cast<int>(op);
      last = now;
    }
  }
  // 2 MiB on 8 H100s is one round of 16 KiB chunks (16 channels x 8 heads); a 16 KiB more
  // is a second, nearly empty round: the fill stays two whole rounds.
  const double mib2 = 2.0 * (1 << 20);
  EXPECT_GT(t(mib2 + 16 * 1024), t(mib2));
  EXPECT_LT(t(mib2 + 16 * 1024), 1.01 * t(mib2));
}

// Point-to-point runs NCCL's own protocol rule: LL while a peer's bytes fit 16 KiB on each
// of the pair's channels (16 inside a node, 2 across), Simple above, never LL128, and an
// all-to-all (grouped send/recv) takes it whatever protocol was asked for.
TEST(Collectives, PointToPointFollowsNcclsProtocolRule) {
  EXPECT_EQ(nccl_p2p_protocol(256 * 1024, false), Protocol::LL);
  EXPECT_EQ(nccl_p2p_protocol(256 * 1024 + 1, false), Protocol::Simple);
  EXPECT_EQ(nccl_p2p_protocol(32 * 1024, true), Protocol::LL);
  EXPECT_EQ(nccl_p2p_protocol(32 * 1024 + 1, true), Protocol::Simple);
  Topology topo(cluster("dgx-h100", 1));
  const NetworkProfile prof;
  AnalyticNetwork net(topo, prof);
  const auto gpus = first_gpus(8);
  const GroupLayout l = layout_of(topo, gpus);
  for (double S : {64.0 * 1024, 8.0 * (1 << 20), 1.0 * (1 << 30)})
    for (Protocol asked : {Protocol::LL, Protocol::LL128, Protocol::Simple}) {
      const CollectiveChoice c =
          choose_collective(CollectiveKind::AllToAll, S, l, gpus, net, prof, std::nullopt, asked);
      EXPECT_EQ(c.proto, nccl_p2p_protocol(S / 8, false)) << S << " " << to_string(asked);
    }
}

// Protocols: LL moves 3 wire-time bytes per payload byte (the measured third of Simple's
// rate); LL128 128 per 120.
TEST(Collectives, ProtocolsTradeLatencyForBandwidth) {
  Topology topo(cluster("dgx-h100", 1));
  NetworkProfile prof;
  AnalyticNetwork net(topo, prof);
  auto t = [&](Protocol proto, double S) {
    return net.run(expand(CollectiveKind::AllReduce, Algorithm::Ring, proto, topo, 8, S, prof), first_gpus(8)).seconds;
  };
  EXPECT_LT(t(Protocol::LL, 1024), t(Protocol::Simple, 1024));                      // small: LL's latency wins
  EXPECT_NEAR(t(Protocol::LL, 1 << 30) / t(Protocol::Simple, 1 << 30), 3.0, 0.05);  // large: LL runs at a third
  EXPECT_NEAR(t(Protocol::LL128, 1 << 30) / t(Protocol::Simple, 1 << 30), 128.0 / 120.0, 0.01);
}

TEST(Collectives, UnsupportedCombinationsSayWhy) {
  GroupLayout six{{0, 0, 0, 0, 0, 0}, true, true, {}, {}, 16};
  EXPECT_NE(unsupported_reason(CollectiveKind::AllReduce, Algorithm::HalvingDoubling, six).find("power-of-two"),
            std::string::npos);
  EXPECT_NE(unsupported_reason(CollectiveKind::AllGather, Algorithm::Tree, six).find("all-reduce only"),
            std::string::npos);
  EXPECT_NE(unsupported_reason(CollectiveKind::AllReduce, Algorithm::Hierarchical, six).find("two or more nodes"),
            std::string::npos);
  EXPECT_NE(unsupported_reason(CollectiveKind::AllToAll, Algorithm::Ring, six).find("direct"), std::string::npos);
  EXPECT_TRUE(unsupported_reason(CollectiveKind::AllReduce, Algorithm::Nvls, six).empty());
  // DGX A100's NVSwitch (second generation) has no in-switch reduction: NVLS is H100 and later.
  GroupLayout a100{{0, 0, 0, 0, 0, 0, 0, 0}, true, false, {}, {}, 16};
  EXPECT_NE(unsupported_reason(CollectiveKind::AllReduce, Algorithm::Nvls, a100).find("in-switch"), std::string::npos);
  EXPECT_FALSE(find_node_preset("dgx-a100")->nvls);
  EXPECT_TRUE(find_node_preset("dgx-h100")->nvls);
  EXPECT_FALSE(find_node_preset("mi300x-8gpu")->nvls);
  EXPECT_FALSE(find_node_preset("pcie-8gpu")->nvls);
  // NCCL runs NVLS under Simple only; auto never picks it under LL or LL128.
  EXPECT_NE(unsupported_protocol_reason(Algorithm::Nvls, Protocol::LL).find("Simple"), std::string::npos);
  EXPECT_NE(unsupported_protocol_reason(Algorithm::Nvls, Protocol::LL128).find("Simple"), std::string::npos);
  EXPECT_TRUE(unsupported_protocol_reason(Algorithm::Nvls, Protocol::Simple).empty());
  EXPECT_TRUE(unsupported_protocol_reason(Algorithm::Ring, Protocol::LL).empty());
  Topology topo(cluster("dgx-h100", 1));
  const NetworkProfile prof;
  AnalyticNetwork net(topo, prof);
  const auto gpus = first_gpus(8);
  const GroupLayout l = layout_of(topo, gpus);
  for (double S = 1024; S <= 1 << 30; S *= 2) {
    const CollectiveChoice c =
        choose_collective(CollectiveKind::AllReduce, S, l, gpus, net, prof, std::nullopt, std::nullopt);
    EXPECT_TRUE(c.algo != Algorithm::Nvls || c.proto == Protocol::Simple) << S;
  }
  EXPECT_THROW(
      expand_collective(CollectiveRequest{CollectiveKind::AllReduce, Algorithm::Nvls, Protocol::LL, 1e6, 0}, l, prof),
      std::invalid_argument);
}

TEST(Collectives, BusBandwidthFactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::AllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::AllGather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::ReduceScatter, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::Broadcast, 8), 1.0);
}

// Capacity is conserved in the analytic model: seven GPUs sending to GPU 0 in one step
// share its NVSwitch down-link, each getting B/7.
TEST(Network, TransfersSharingALinkSplitItsBandwidth) {
  Topology topo(cluster("dgx-h100", 1));
  const NetworkProfile prof = ideal();
  AnalyticNetwork net(topo, prof);
  Expansion e;
  CollectiveStep step;
  for (int i = 1; i < 8; ++i) step.transfers.push_back(Transfer{i, 0, 45e6});
  e.steps.push_back(step);
  const auto cost = net.run(e, first_gpus(8));
  EXPECT_NEAR(cost.seconds, 0.5e-6 + 7 * 45e6 / 450e9, 1e-12);
  double max_bytes = 0;
  for (auto [l, b] : cost.link_bytes) max_bytes = std::max(max_bytes, b);
  EXPECT_DOUBLE_EQ(max_bytes, 7 * 45e6);
}

TEST(Collectives, AllToAllvMovesEachPairsBytes) {
  Topology topo(cluster("dgx-h100", 1));
  const NetworkProfile prof = ideal();
  AnalyticNetwork net(topo, prof);
  // Rank 0 sends 90 MB to rank 1, everyone else 9 MB to everyone: rank 0's step to rank
  // 1 is the long pole, 0.5 us + 90 MB / 450 GB/s, plus the other steps.
  std::vector<std::vector<double>> m(4, std::vector<double>(4, 9e6));
  m[0][1] = 90e6;
  const double t = net.run(expand_all_to_allv(m, Protocol::Simple, prof), first_gpus(4)).seconds;
  EXPECT_NEAR(t, (0.5e-6 + 90e6 / 450e9) + 2 * (0.5e-6 + 9e6 / 450e9), 1e-12);
}

// Roofline: an 8192^3 bf16 GEMM on H200 is compute-bound at peak x efficiency:
//   t = 2·8192^3 / (989.5e12 · 0.80)  (8192/128 · 8192/256 = 2048 tiles, 15.5 waves
//   of 132 SMs: wave efficiency 2048/(16·132) = 0.97)
// Uncalibrated kernels by shape: a floor t0 = 4.4 us plus the longer of the math (whole
// waves of padded tiles at eff · kk / (kk + 128)) and the bytes at 0.88 of HBM bandwidth.
// A forward GEMM m x n x k of `d` inputs (FP8 one byte, else two) writing 16-bit output.

}  // namespace
}  // namespace clustersim
