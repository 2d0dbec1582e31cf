#include <gtest/gtest.h>

#include <cmath>
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
// With NCCL's protocol figures the same form holds with alpha = 0.5 us + the Simple
// NVLink ring step latency (3.4 us), B = 450 GB/s x 370.8/450, plus the 8.4 us base.
TEST(Collectives, RingAllReduceOnOneDgxH100MatchesClosedForm) {
  Topology topo(cluster("dgx-h100", 1));
  const int p = 8;
  for (bool nccl : {false, true}) {
    const NetworkProfile prof = nccl ? NetworkProfile{} : ideal();
    AnalyticNetwork net(topo, prof);
    const double alpha = 0.5e-6 + (nccl ? 3.4e-6 : 0.0);
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
    return net.run(expand(CollectiveKind::AllReduce, Algorithm::Nvls, Protocol::Simple, topo, 16, S, prof),
                   first_gpus(16))
        .seconds;
  };
  const double nvlink = find_node_preset("dgx-h100")->nvlink_bandwidth;
  const double switch_bound = S / (nvlink * NetworkProfile{}.nvls_efficiency);
  EXPECT_NEAR(seconds(50e9), switch_bound, 0.01 * switch_bound);       // 400 Gb/s NICs: S/8 at 50 GB/s is faster
  EXPECT_NEAR(seconds(12.5e9), S / 8 / 12.5e9, 0.01 * S / 8 / 12.5e9);  // 100 Gb/s NICs bind
  // Auto takes it for a large message on two full nodes, not for one GPU a node.
  Topology topo(cluster("dgx-h100", 2));
  const NetworkProfile prof;
  AnalyticNetwork net(topo, prof);
  const auto all = first_gpus(16);
  EXPECT_EQ(choose_collective(CollectiveKind::AllReduce, S, layout_of(topo, all), all, net, prof, std::nullopt,
                              std::nullopt)
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
      const CollectiveChoice c = choose_collective(CollectiveKind::AllToAll, S, l, gpus, net, prof, std::nullopt, asked);
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
  EXPECT_LT(t(Protocol::LL, 1024), t(Protocol::Simple, 1024));              // small: LL's latency wins
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
  EXPECT_THROW(expand_collective(CollectiveRequest{CollectiveKind::AllReduce, Algorithm::Nvls, Protocol::LL, 1e6, 0},
                                 l, prof),
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
Op gemm_op(int64_t m, int64_t n, int64_t k, DType d = DType::BF16) {
  Op g;
  g.kind = OpKind::Gemm;
  g.phase = Phase::Forward;
  g.m = m;
  g.n = n;
  g.k = k;
  g.dtype = d;
  g.flops = gemm_flops(g);
  const int64_t e = d == DType::FP8 ? 1 : 2;
  g.bytes_read = (m * k + k * n) * e;
  g.bytes_written = m * n * 2;
  return g;
}

TEST(Compute, GemmsAsWavesOfPaddedTilesAndMemoryOpsOnAFloor) {
  const GpuSpec& h200 = *find_gpu_preset("h200-sxm");
  ComputeProfile prof;
  auto gemm = [](int64_t m, int64_t n, int64_t k, DType d = DType::BF16) { return gemm_op(m, n, k, d); };
  // 8192^3: 128x256 tiles, 64 x 32 = 2048 tiles = 15.5 waves of 132 -> 16 waves; each
  // wave 2·128·256·8192 FLOPs per SM at 0.8 · 989.5 TFLOP/s · 8192 / (8192 + 128).
  const Op big = gemm(8192, 8192, 8192);
  const double wave = 2.0 * 128 * 256 * 8192 * 132 / (989.5e12 * 0.8 * 8192.0 / (8192 + 128));
  EXPECT_NEAR(compute_seconds(big, h200, prof), 4.4e-6 + 16 * wave, 1e-12);
  // With compute.gemm_stream_k on a GPU whose library runs persistent stream-K kernels, the
  // 68 tiles left over share their depth out over the 132 SMs, each a depth of
  // 68 · 8192 / 132 at that depth's rate, where the padded 16th wave costs a whole one.
  ComputeProfile stream_k;
  stream_k.gemm_stream_k = true;
  const double kr = 68.0 * 8192 / 132;
  const double rest = 2.0 * 128 * 256 * kr * 132 / (989.5e12 * 0.8 * kr / (kr + 128));
  EXPECT_NEAR(compute_seconds(big, h200, stream_k), 4.4e-6 + 15 * wave + rest, 1e-12);
  EXPECT_LT(rest, 0.55 * wave);
  GpuSpec ampere_library = h200;  // a library without persistent kernels pads, whatever the key
  ampere_library.gemm_stream_k = false;
  EXPECT_NEAR(compute_seconds(big, ampere_library, stream_k), 4.4e-6 + 16 * wave, 1e-12);
  // About 780 TFLOP/s, as cuBLAS measures there (772).
  EXPECT_NEAR(big.flops / compute_seconds(big, h200, prof) / 1e12, 745, 40);

  // A copy of 2 GiB: the floor plus the bytes at 0.88 of 4.8 TB/s.
  Op copy;
  copy.kind = OpKind::Memory;
  copy.bytes_read = copy.bytes_written = 1LL << 30;
  EXPECT_NEAR(compute_seconds(copy, h200, prof), 4.4e-6 + 2.0 * (1LL << 30) / (4800e9 * 0.88), 1e-12);
  // 1 MiB moves at a small share of the bandwidth: the floor dominates.
  copy.bytes_read = copy.bytes_written = 1LL << 19;
  EXPECT_LT((1 << 20) / compute_seconds(copy, h200, prof), 300e9);

  // A skinny GEMM is memory-bound: 16 x 8192 x 8192 reads the 128 MiB weight once.
  const Op skinny = gemm(16, 8192, 8192);
  const double mem = static_cast<double>(skinny.bytes_read + skinny.bytes_written) / (4800e9 * 0.88);
  EXPECT_NEAR(compute_seconds(skinny, h200, prof), 4.4e-6 + mem, 1e-12);

  // Short k runs below peak: 8192 x 8192 x 256 reaches kk / (kk + 128) = 2/3 of the rate.
  const Op shallow = gemm(8192, 8192, 256);
  EXPECT_LT(shallow.flops / compute_seconds(shallow, h200, prof), 0.70 * 0.8 * 989.5e12);

  // FP8 GEMMs run at their own efficiency on FP8 peak (0.796 at burst against BF16's 0.80),
  // their k-depth term at 256: 2 · 0.796/0.80 · (8192/8448)/(8192/8320) = 1.96 at burst, below 2x.
  // (Measured bursts of 8192^3: 1,471-1,482 against 795-806 TFLOP/s, 1.84-1.85; the cap, which
  // holds FP8 at 0.55 of a BF16 FLOP's energy, brings it to ~1.8 back to back.)
  const double fp8_speedup = compute_seconds(big, h200, prof) / compute_seconds(gemm(8192, 8192, 8192, DType::FP8), h200, prof);
  EXPECT_NEAR(fp8_speedup, 2.0 * 0.796 / 0.80 * (8192.0 / 8448.0) / (8192.0 / 8320.0), 0.02);
  EXPECT_LT(fp8_speedup, 2.0);
}

// A GEMM's time never falls as a dimension grows: one more row costs a padded tile row
// at most (decode batches 128 and 129 on Llama 3 70B's TP-8 QKV projection); with the
// stream-K candidate too (compute.gemm_stream_k).
TEST(Compute, GemmTimeIsMonotonicInEveryDimension) {
  const GpuSpec& h100 = *find_gpu_preset("h100-sxm");
  for (const bool stream_k : {false, true}) {
    ComputeProfile prof;
    prof.gemm_stream_k = stream_k;
    for (int64_t n : {1280, 1024, 3584, 8192})
      for (int64_t k : {1024, 8192}) {
        double prev = 0;
        for (int64_t m = 1; m <= 1100; ++m) {
          const double t = compute_seconds(gemm_op(m, n, k), h100, prof);
          ASSERT_GE(t, prev) << m << "x" << n << "x" << k << (stream_k ? ", stream-K" : "");
          prev = t;
        }
      }
  }
}

TEST(Compute, Fp8FallsBackToBf16WhereTheGpuHasNoFp8) {
  EXPECT_DOUBLE_EQ(find_gpu_preset("a100-sxm-80gb")->peak_flops(DType::FP8), 312e12);
  EXPECT_DOUBLE_EQ(find_gpu_preset("h100-sxm")->peak_flops(DType::FP8), 1979e12);
}

// A GPU's memory is what CUDA reports as its total, the figure frameworks budget from: one
// H200 measured 139.80 GiB (calibrate/measurements/hbm-capacity-h200-2026-12-04), which is
// 150.1 GB where the datasheet's "141GB" read as 10^9 bytes is 141.0; an H100 80GB 79.10 GiB
// (TensorRT-LLM's log), short of the 80 GiB a binary reading of its datasheet gives.
TEST(Compute, GpuMemoryIsWhatCudaReports) {
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  EXPECT_NEAR(find_gpu_preset("h200-sxm")->hbm_bytes / GiB, 139.80, 1e-9);
  EXPECT_GT(find_gpu_preset("h200-sxm")->hbm_bytes, 150e9);
  EXPECT_NEAR(find_gpu_preset("h100-sxm")->hbm_bytes / GiB, 79.10, 1e-9);
  EXPECT_LT(find_gpu_preset("h100-sxm")->hbm_bytes, 80 * GiB);
  EXPECT_NEAR(find_gpu_preset("b200")->hbm_bytes / GiB, 178.35, 1e-9);  // "180GB": 191.5 GB
}


// ---- clocks under the power cap (docs/model.md, "Clocks under the power cap") ----------
Op power_gemm(int64_t m, int64_t n, int64_t k, DType d = DType::BF16) { return gemm_op(m, n, k, d); }
Op power_stream(int64_t bytes, Phase ph = Phase::Forward) {
  Op c;
  c.kind = OpKind::Memory;
  c.phase = ph;
  c.bytes_read = c.bytes_written = bytes / 2;
  return c;
}
std::vector<double> burst(const std::vector<Op>& ops, const GpuSpec& gpu, const ComputeProfile& p) {
  std::vector<double> t;
  for (const Op& op : ops) t.push_back(compute_seconds(op, gpu, p));
  return t;
}

// Back to back, the 8192^3 product settles at the capped FLOP rate, and every other GEMM
// shape at that rate scaled by its own burst rate over the product's: a GEMM draws its power
// for as long as its SMs are busy, so its energy is e·F·(t/F)/(t_8192/F_8192), and under the
// cap T = E / (P_limit − P_idle). Twelve Llama layer shapes on an H100 settle at 0.856-0.866
// of their own burst rates (754-822 TFLOP/s at burst), not at one rate.
TEST(PowerCap, AGemmDrawsPowerForTheTimeItsSmsAreBusy) {
  const GpuSpec& h200 = *find_gpu_preset("h200-sxm");
  ComputeProfile prof;
  const Op cube = power_gemm(8192, 8192, 8192);
  const double cube_burst = cube.flops / compute_seconds(cube, h200, prof);
  std::vector<double> ratio;
  for (const Op& g : {cube, power_gemm(8192, 28672, 4096), power_gemm(4096, 8192, 2048), power_gemm(8192, 4096, 14336)}) {
    std::vector<Op> ops(10, g);
    std::vector<double> t = burst(ops, h200, prof);
    const double burst_rate = g.flops / t[0];
    ASSERT_GT(burst_rate, 660e12);
    const double x = apply_power_cap(ops, t, 0.0, h200, prof);
    const double capped = 10 * g.flops / std::accumulate(t.begin(), t.end(), 0.0);
    EXPECT_NEAR(capped, 660e12 * burst_rate / cube_burst, 1e7) << g.m << "x" << g.n << "x" << g.k;
    ratio.push_back(capped / burst_rate);
    // The clock the window settles at stretches the clock-bound half: t/t0 = 0.5/x + 0.5.
    EXPECT_NEAR(t[0] * burst_rate / g.flops, 0.5 / x + 0.5, 1e-9);
    EXPECT_LT(x, 0.9);
  }
  for (double r : ratio) EXPECT_NEAR(r, ratio[0], 1e-6);  // one ratio whatever the shape
  EXPECT_LT(ratio[2], 1.0);
  // The shallow product (k = 2,048) is slower at burst than the cube and so settles lower.
  const Op shallow = power_gemm(4096, 8192, 2048);
  EXPECT_LT(shallow.flops / compute_seconds(shallow, h200, prof), cube_burst);
  // FP8 FLOPs cost 0.55 of BF16's: FP8 8192^3 back to back settles at 660 / 0.55 = 1,200.
  std::vector<Op> fp8(4, power_gemm(8192, 8192, 8192, DType::FP8));
  std::vector<double> t8 = burst(fp8, h200, prof);
  if (fp8[0].flops / t8[0] > 1200e12) {
    apply_power_cap(fp8, t8, 0.0, h200, prof);
    EXPECT_NEAR(4 * fp8[0].flops / std::accumulate(t8.begin(), t8.end(), 0.0), 660e12 / 0.55, 1e6);
  }
}

// Dropout's Philox draws cost energy per element drawn, which the kernels' FLOPs and bytes
// do not count: back to back at the cap, cuDNN's attention forward with dropout 0.1 drew the
// 700 W the board allows at 1,815 MHz, and PyTorch's dropout kernel 608 W where a copy at its
// byte rate draws 496 (one H100, calibrate/measurements/power-dropout-h100-2026-12-06). Per
// element, above the idle floor: 0.288 nJ in the attention forward, 0.155 nJ in its backward
// (what the energy measured at the cap leaves beside the FLOPs' at the clock each ran at),
// 0.339 nJ in the dropout kernel.
TEST(PowerCap, DropoutsDrawsCostEnergyPerElement) {
  const GpuSpec& h100 = *find_gpu_preset("h100-sxm");
  ComputeProfile prof;
  ComputeProfile no_draw_energy = prof;
  no_draw_energy.attention_dropout_energy = {0, 0};
  no_draw_energy.dropout_rng_energy = 0;
  Op a = testing::causal_attention(8, 32, 4096, 128);
  a.dropout = true;
  const double scores = 8.0 * 32 * 4096 * 4096 / 2;
  const double t = compute_seconds(a, h100, prof);
  PowerMix with, without;
  with.add(a, t, 0, h100, prof);
  without.add(a, t, 0, h100, no_draw_energy);
  EXPECT_NEAR(with.energy - without.energy, 0.288e-9 * scores, 1e-9);
  Op b = a;
  b.phase = Phase::Backward;
  b.flops = 2.5 * attention_flops(a);
  PowerMix bw, bw0;
  bw.add(b, compute_seconds(b, h100, prof), 0, h100, prof);
  bw0.add(b, compute_seconds(b, h100, no_draw_energy), 0, h100, no_draw_energy);
  EXPECT_NEAR(bw.energy - bw0.energy, 0.155e-9 * scores, 1e-9);
  // At the clock the cap leaves the kernel back to back, the model's energy a FLOP is the
  // one measured there: 1.949 pJ with dropout, 1.100 without, above the idle floor.
  Op plain = a;
  plain.dropout = false;
  for (const auto& [op, pj] : {std::pair{a, 1.949e-12}, std::pair{plain, 1.100e-12}}) {
    PowerMix m;
    m.add(op, compute_seconds(op, h100, prof), 0, h100, prof);
    EXPECT_NEAR(m.energy_at(power_clock(m, h100, prof)) / op.flops, pj, 0.05 * pj) << op.dropout;
  }
  // PyTorch's dropout over 512 Mi 16-bit elements: 5 bytes an element, its draws on top; it
  // stays under the cap as measured (608 W at 1,980 MHz), and the kernel's mean power is
  // within 5 % of that.
  Op d;
  d.kind = OpKind::Memory;
  d.phase = Phase::Forward;
  d.access = MemAccess::RandomMask;
  d.m = 512LL << 20;
  d.bytes_read = 2 * d.m;
  d.bytes_written = 3 * d.m;
  const double td = compute_seconds(d, h100, prof);
  PowerMix dm;
  dm.add(d, td, 0, h100, prof);
  EXPECT_NEAR(h100.idle_power_w + dm.energy / td, 608.1, 0.05 * 608.1);
  std::vector<Op> drops(4, d);
  std::vector<double> tdrop = burst(drops, h100, prof);
  EXPECT_EQ(apply_power_cap(drops, tdrop, 2e-6, h100, prof), 1.0);
  // No draws (validate against the real backend, whose kernels draw none): no energy for them.
  ComputeProfile real = prof;
  real.attention_dropout_ops = {0, 0};
  real.dropout_rng_ops_per_element = 0;
  PowerMix r, r0;
  r.add(a, compute_seconds(a, h100, real), 0, h100, real);
  r0.add(a, compute_seconds(a, h100, real), 0, h100, no_draw_energy);
  EXPECT_DOUBLE_EQ(r.energy, r0.energy);
}

// A FLOP costs more energy at the boost clock than at the clock the cap leaves (the voltage
// the clock needs): in 20-40 ms bursts under the board's one-second average, one H100 ran
// 8192^3 at 784.8 TFLOP/s drawing 1.04 pJ a FLOP above the floor, against 0.837 back to back
// at the cap (691.7 TFLOP/s), and cuDNN's causal attention forward (8 x 32 heads of
// 4,096 x 128) 1.368 pJ at 602.7 against 1.085 at 526.5: 1.24 and 1.26 times
// (calibrate/measurements/power-dropout-h100-2026-12-06, duty_cycle.py).
TEST(PowerCap, AFlopCostsMoreEnergyAtTheBoostClock) {
  const GpuSpec& h100 = *find_gpu_preset("h100-sxm");
  ComputeProfile prof;
  EXPECT_NEAR(prof.boost_energy_ratio[0], 1.04 / 0.837, 0.01);
  EXPECT_NEAR(prof.boost_energy_ratio[1], 1.368 / 1.085, 0.01);
  const Op g = power_gemm(8192, 8192, 8192);
  const Op a = testing::causal_attention(8, 32, 4096, 128);
  for (const auto& [op, ratio] : {std::pair{g, 1.24}, std::pair{a, 1.26}}) {
    PowerMix m;
    m.add(op, compute_seconds(op, h100, prof), 0, h100, prof);
    const double x = power_clock(m, h100, prof);
    ASSERT_LT(x, 1.0);
    // The anchors themselves: back to back they settle where their energy is the cap's,
    // and at the boost clock it is the ratio's.
    const double at_boost = m.energy_at(1.0), at_cap = m.energy_at(x);
    EXPECT_NEAR(at_boost / at_cap, ratio, 1e-9) << to_string(op.kind);
    EXPECT_NEAR(at_cap, (700.0 - 124.0) * (m.bound / x + m.fixed), 1e-9 * at_cap);
    // In the model's units: the cap's energy a FLOP, 576 W over 660 TFLOP/s (1.28x for attention).
    const double cap_pj = (700.0 - 124.0) / 660e12 * (op.kind == OpKind::Attention ? 1.28 : 1.0);
    EXPECT_NEAR(at_cap / op.flops, cap_pj, 1e-6 * cap_pj) << to_string(op.kind);
  }
  // Ratios of 1: one energy a FLOP at every clock.
  ComputeProfile flat = prof;
  flat.boost_energy_ratio = {1, 1};
  PowerMix f;
  f.add(g, compute_seconds(g, h100, flat), 0, h100, flat);
  EXPECT_DOUBLE_EQ(f.energy_at(1.0), f.energy_at(0.7));
}

// Boards of one SKU settle at different rates under the cap (seven H200 boards: 668 TFLOP/s
// for 8192^3, coefficient of variation 1.48 %), and a synchronous job runs at its slowest:
// E[max of n standard normals] below the mean. 1/sqrt(pi) for two boards, 1.4236 for
// eight, 3.2414 for a thousand; a job of n boards settles at 660 · (1 − 0.0148 · E_n).
TEST(PowerCap, AJobRunsAtItsSlowestBoardsCappedRate) {
  EXPECT_EQ(expected_max_normal(1), 0.0);
  EXPECT_NEAR(expected_max_normal(2), 1 / std::sqrt(std::numbers::pi), 1e-6);
  EXPECT_NEAR(expected_max_normal(8), 1.4236, 1e-4);
  EXPECT_NEAR(expected_max_normal(1000), 3.2414, 1e-4);
  const GpuSpec& h200 = *find_gpu_preset("h200-sxm");
  for (int64_t n : {1, 8, 64, 16384}) {
    ComputeProfile prof;
    prof.slowest_board = 1 - 0.0148 * expected_max_normal(n);
    std::vector<Op> ops(10, power_gemm(8192, 8192, 8192));
    std::vector<double> t = burst(ops, h200, prof);
    apply_power_cap(ops, t, 0.0, h200, prof);
    EXPECT_NEAR(10 * ops[0].flops / std::accumulate(t.begin(), t.end(), 0.0), 660e12 * prof.slowest_board, 1e6)
        << n;
  }
  // Kernels under the limit keep their burst rates on any board.
  ComputeProfile slow;
  slow.slowest_board = 0.95;
  Op copy;
  copy.kind = OpKind::Memory;
  copy.bytes_read = copy.bytes_written = int64_t{1} << 30;
  std::vector<Op> mem(10, copy);
  std::vector<double> tm = burst(mem, h200, slow);
  const double before = tm[0];
  EXPECT_EQ(apply_power_cap(mem, tm, 0.0, h200, slow), 1.0);
  EXPECT_EQ(tm[0], before);
}

// Blackwell: the B200's 8192^3 at the measured plateau (1,420 TFLOP/s at 1,000 W); the
// GB200, the same dies, at B200's energy per FLOP and B200's sustained rate, as every
// published GB200 run has it (topology/gpu.cc), not the 1,765 its 1,200 W rating would buy.
TEST(PowerCap, BlackwellBoardsShareOneEnergyPerFlop) {
  ComputeProfile prof;
  const GpuSpec& b200 = *find_gpu_preset("b200");
  const GpuSpec& gb200 = *find_gpu_preset("gb200");
  EXPECT_NEAR((b200.power_limit_w - b200.idle_power_w) / b200.capped_bf16_flops,
              (gb200.power_limit_w - gb200.idle_power_w) / gb200.capped_bf16_flops, 1e-3 * 0.58e-12);
  for (const GpuSpec* g : {&b200, &gb200}) {
    std::vector<Op> ops(10, power_gemm(8192, 8192, 8192));
    std::vector<double> t = burst(ops, *g, prof);
    ASSERT_GT(ops[0].flops / t[0], g->capped_bf16_flops) << g->name;  // burst above the cap
    EXPECT_LT(apply_power_cap(ops, t, 0.0, *g, prof), 1.0) << g->name;
    EXPECT_NEAR(10 * ops[0].flops / std::accumulate(t.begin(), t.end(), 0.0), g->capped_bf16_flops, 1e6)
        << g->name;
  }
  EXPECT_EQ(gb200.capped_bf16_flops, b200.capped_bf16_flops);
  EXPECT_EQ(gb200.power_limit_w, b200.power_limit_w);
  EXPECT_GT(gb200.peak_bf16, b200.peak_bf16);  // the datasheet's burst rates stay its own
}

// Below the cap nothing changes: streams (640 W < 700 W), GEMMs whose burst rate is under
// the capped one, GPUs without a power model, and runs that turn the cap off.
TEST(PowerCap, KernelsUnderTheLimitKeepTheirBurstRates) {
  const GpuSpec& h200 = *find_gpu_preset("h200-sxm");
  ComputeProfile prof;
  std::vector<Op> streams(5, power_stream(1LL << 30));
  std::vector<double> t = burst(streams, h200, prof);
  const std::vector<double> t0 = t;
  EXPECT_EQ(apply_power_cap(streams, t, 1e-6, h200, prof), 1.0);
  EXPECT_EQ(t, t0);
  std::vector<Op> shallow(5, power_gemm(4096, 4096, 32));  // k = 32: its bytes take longer than its FLOPs
  t = burst(shallow, h200, prof);
  ASSERT_LT(shallow[0].flops / t[0], 660e12);
  const std::vector<double> s0 = t;
  EXPECT_EQ(apply_power_cap(shallow, t, 0.0, h200, prof), 1.0);
  EXPECT_EQ(t, s0);
  std::vector<Op> big(5, power_gemm(8192, 8192, 8192));
  const GpuSpec& a100 = *find_gpu_preset("a100-sxm-80gb");
  t = burst(big, a100, prof);
  const std::vector<double> b0 = t;
  EXPECT_EQ(apply_power_cap(big, t, 0.0, a100, prof), 1.0);
  EXPECT_EQ(t, b0);
  ComputeProfile off;
  off.power_cap = false;
  t = burst(big, h200, off);
  const std::vector<double> o0 = t;
  EXPECT_EQ(apply_power_cap(big, t, 0.0, h200, off), 1.0);
  EXPECT_EQ(t, o0);
}

// A mix: memory-bound kernels and launch gaps draw less than the limit, so the GEMMs
// beside them may draw more. T(x) = t_g·(a/x + 1 − a) + t_m + gaps meets
// T = (e·F + (P_stream − P_idle)·t_bytes) / (P_limit − P_idle). Measured on an H200:
// 8192^3 then a 1 GiB add, 517 TFLOP/s over the pair (model 521).
TEST(PowerCap, MemoryKernelsAndGapsLetTheGemmsBesideThemDrawMore) {
  const GpuSpec& h200 = *find_gpu_preset("h200-sxm");
  ComputeProfile prof;
  const Op g = power_gemm(8192, 8192, 8192);
  const Op add = power_stream(2LL << 30);
  const std::vector<Op> ops = {g, add, g, add};
  std::vector<double> t = burst(ops, h200, prof);
  const double tg = t[0], tm = t[1], gap = 2e-6;
  const double x = apply_power_cap(ops, t, gap, h200, prof);
  const double e = (700.0 - 124.0) / 660e12;
  const double t_bytes = static_cast<double>(add.bytes_read + add.bytes_written) / (4800e9 * prof.memory_efficiency);
  // The GEMM's energy at clock x: e·F at the cap's slowdown s_ref (its burst rate over
  // 660), r·e·F at the boost clock, and between them (s_ref / s(x))^δ with δ = ln r / ln s_ref,
  // s(x) = 0.5/x + 0.5 its time's stretch.
  const double s_ref = g.flops / tg / 660e12, sx = 0.5 / x + 0.5;
  const double d = std::log(prof.boost_energy_ratio[0]) / std::log(s_ref);
  const double energy = e * g.flops * std::pow(s_ref / sx, d) + (640.0 - 124.0) * t_bytes;  // per pair
  EXPECT_NEAR(t[0] + t[1] + 2 * gap, energy / (700.0 - 124.0), 1e-9 * energy);
  EXPECT_NEAR(t[0], tg * sx, 1e-15);
  EXPECT_EQ(t[1], tm);  // the stream keeps its time
  // Alone, the GEMMs settle lower: the mix runs them faster than back to back.
  std::vector<Op> alone(2, g);
  std::vector<double> ta = burst(alone, h200, prof);
  apply_power_cap(alone, ta, gap, h200, prof);
  EXPECT_LT(t[0], ta[0]);
  EXPECT_GT(t[0], tg);
}

// A stream's power follows the bytes it moves: the H100's HBM3 moves 0.71 of the H200's
// bytes a second and draws 505 W streaming, not 640 (two H100 boards, 498-513 W;
// calibrate/measurements/power-h100-2026-12-05). The 8192^3 and 1 GiB add pair: at the cap's
// energy a FLOP its burst time would already meet the limit, but at the boost clock the GEMM
// draws up to 1.24 times more a FLOP, so the pair throttles, as measured (495.8 TFLOP/s over the pair
// at 1,515 MHz); the model gives it within 5 %. At the H200's 640 W it throttles more.
TEST(PowerCap, TheH100sStreamsDrawForTheBytesTheyMove) {
  const GpuSpec& h100 = *find_gpu_preset("h100-sxm");
  const GpuSpec& h200 = *find_gpu_preset("h200-sxm");
  EXPECT_LT(h100.stream_power_w, h200.stream_power_w);
  // Above the idle floor, one energy per byte streamed on both boards, within 10 %.
  const double h100_per_byte = (h100.stream_power_w - h100.idle_power_w) / (h100.hbm_bandwidth * 0.90);
  const double h200_per_byte = (h200.stream_power_w - h200.idle_power_w) / (h200.hbm_bandwidth * 0.89);
  EXPECT_NEAR(h100_per_byte / h200_per_byte, 1.0, 0.10);
  ComputeProfile prof;
  const Op g = power_gemm(8192, 8192, 8192);
  const Op add = power_stream(2LL << 30);
  const std::vector<Op> ops = {g, add, g, add};
  std::vector<double> t = burst(ops, h100, prof);
  const double pair = t[0] + t[1] + 2 * 2e-6;
  const double e = (700.0 - 124.0) / 660e12;
  const double t_bytes = static_cast<double>(add.bytes_read + add.bytes_written) / (3350e9 * prof.memory_efficiency);
  ASSERT_GT(pair, (e * g.flops + (505.0 - 124.0) * t_bytes) / (700.0 - 124.0));
  const std::vector<double> t0 = t;
  const double x = apply_power_cap(ops, t, 2e-6, h100, prof);
  EXPECT_LT(x, 1.0);
  EXPECT_NEAR(2 * g.flops / (t[0] + t[1] + t[2] + t[3]), 495.8e12, 0.05 * 495.8e12);
  EXPECT_EQ(t[1], t0[1]);
  GpuSpec h100_at_h200_power = h100;
  h100_at_h200_power.stream_power_w = h200.stream_power_w;
  std::vector<double> th = t0;
  EXPECT_LT(apply_power_cap(ops, th, 2e-6, h100_at_h200_power, prof), x);
  // With one energy a FLOP at every clock (ratios of 1) the pair stays at the boost clock.
  ComputeProfile flat = prof;
  flat.boost_energy_ratio = {1, 1};
  std::vector<double> tf = t0;
  EXPECT_EQ(apply_power_cap(ops, tf, 2e-6, h100, flat), 1.0);
}

// A GEMM chunk planned beside userbuffers' SM-holding kernel spends its energy over the
// slowdown's longer time (1.37 x its burst time): the window draws less and settles at
// a higher clock, T(x) = Σ t_run·(a/x + 1 − a) with t_run = 1.37·t for the chunks beside.
TEST(PowerCap, GemmsBesideHeldSmsDrawLessAndRaiseTheClock) {
  const GpuSpec& h100 = *find_gpu_preset("h100-sxm");
  ComputeProfile prof;
  std::vector<Op> plain(8, power_gemm(8192, 8192, 8192));
  std::vector<Op> beside = plain;
  for (const size_t i : {size_t{1}, size_t{3}}) {  // as a pipelined reduce-scatter's chunks (NeMo's 16 SMs, margin set)
    beside[i].beside_sms = true;
    beside[i].held_sms = 16;
    beside[i].sm_margin = true;
  }
  std::vector<double> tp = burst(plain, h100, prof), tb = burst(beside, h100, prof);
  const double t = tp[0];
  const double xp = apply_power_cap(plain, tp, 0.0, h100, prof);
  const double xb = apply_power_cap(beside, tb, 0.0, h100, prof);
  EXPECT_GT(xb, xp);
  ASSERT_LT(xb, 1.0);  // still capped: the equation below holds
  const double e = (700.0 - 124.0) / 660e12;
  const double s_ref = plain[0].flops / t / 660e12, sx = 0.5 / xb + 0.5;
  const double d = std::log(prof.boost_energy_ratio[0]) / std::log(s_ref);
  const double energy = 8 * e * plain[0].flops * std::pow(s_ref / sx, d);
  const double run = (6 + 2 * 1.37) * t;  // the window's burst-clock time
  EXPECT_NEAR(run * sx, energy / (700.0 - 124.0), 1e-12);
  // The kernels' own times stretch by the clock alone; the executor applies the 1.37
  // when they start beside the held SMs.
  EXPECT_NEAR(tb[1], t * (0.5 / xb + 0.5), 1e-15);
}

// Each phase is its own window: a memory-bound optimizer step does not cool the forward
// pass's GEMMs, and the forward's GEMMs do not slow the optimizer's streams.
TEST(PowerCap, EachPhaseRunsAtItsOwnClock) {
  const GpuSpec& h100 = *find_gpu_preset("h100-sxm");
  ComputeProfile prof;
  const Op g = power_gemm(8192, 8192, 8192);
  std::vector<Op> fwd(4, g);
  std::vector<double> tf = burst(fwd, h100, prof);
  apply_power_cap(fwd, tf, 0.0, h100, prof);
  std::vector<Op> both = fwd;
  for (int i = 0; i < 8; ++i) both.push_back(power_stream(4LL << 30, Phase::Optimizer));
  std::vector<double> tb = burst(both, h100, prof);
  const double opt0 = tb.back();
  apply_power_cap(both, tb, 0.0, h100, prof);
  EXPECT_DOUBLE_EQ(tb[0], tf[0]);
  EXPECT_DOUBLE_EQ(tb.back(), opt0);
  // Attention spends more energy per FLOP, the backward's most: at one burst rate a
  // backward attention window settles lower than a forward one.
  Op a;
  a.kind = OpKind::Attention;
  a.q_len = a.kv_len = 8192;
  a.head_dim = 128;
  a.heads = a.kv_heads = 32;
  a.flops = 4.0 * 32 * 8192.0 * 8192 * 128;
  a.bytes_read = 3LL * 32 * 8192 * 128 * 2;
  a.bytes_written = 32LL * 8192 * 128 * 2;
  std::vector<Op> af(4, a), ab(4, a);
  for (Op& o : ab) o.phase = Phase::Backward;
  std::vector<double> t1(4, a.flops / 600e12), t2(4, a.flops / 600e12);  // cuDNN forward: ~600 TFLOP/s burst
  const double xf = apply_power_cap(af, t1, 0.0, h100, prof);
  const double xb = apply_power_cap(ab, t2, 0.0, h100, prof);
  EXPECT_LT(xb, xf);
  EXPECT_LT(xf, 1.0);
}

// Per-element work beyond a kernel's bytes (PyTorch's dynamic-cast loop, Philox draws,
// scatters, the softmax's exponentials) is integer, conversion and special-function work:
// Ampere has half Hopper's FP32 lanes an SM but the same INT32 lanes and SFUs, so it is
// priced at the SMs' issue slots (SMs x clock x 256), not at the FP32 peak. PyTorch's
// dynamic-cast BF16 -> FP32 copy of 67,108,864 elements took 362.46 us on an A100 (PR
// #195542's control column, mean of 200): the model gives it within 10 % on the SXM 80 GB,
// where the FP32 peak priced it 52 % too slow.
TEST(ComputeModel, PerElementWorkTakesTheSmsIssueSlotsNotTheFp32Peak) {
  const GpuSpec& a100 = *find_gpu_preset("a100-sxm-80gb");
  const GpuSpec& h200 = *find_gpu_preset("h200-sxm");
  EXPECT_NEAR(a100.alu_slot_rate(), 108 * 1.41e9 * 256, 1e6);
  EXPECT_NEAR(a100.alu_slot_rate() / a100.peak_fp32, 2.0, 0.01);  // 64 FP32 lanes an SM, not 128
  EXPECT_NEAR(h200.alu_slot_rate() / h200.peak_fp32, 1.0, 0.002);  // the unit the H200 constants were measured in
  ComputeProfile p;
  p.power_cap = false;
  Op cast;
  cast.kind = OpKind::Memory;
  cast.m = 67108864;
  cast.bytes_read = 2 * cast.m;
  cast.bytes_written = 4 * cast.m;
  cast.access = MemAccess::DynamicCast;
  EXPECT_NEAR(compute_seconds(cast, a100, p), 362.46e-6, 0.1 * 362.46e-6);
  Op stream = cast;
  stream.access = MemAccess::Streaming;
  const double extra = compute_seconds(cast, a100, p) - compute_seconds(stream, a100, p);
  EXPECT_NEAR(extra, static_cast<double>(cast.m) * p.dynamic_cast_ops_per_element / a100.alu_slot_rate(), 1e-12);
  // A GPU given no clock prices it at its FP32 peak.
  GpuSpec custom = a100;
  custom.sm_clock_hz = 0;
  EXPECT_DOUBLE_EQ(custom.alu_slot_rate(), a100.peak_fp32);
}

// PyTorch's elementwise loop over an operand broadcast along the row is not vectorized and
// runs at its SMs' rate whatever the HBM: Megatron's cross entropy divides, shifts and
// scales FP32 logits by per-row scalars at ~300 G elements/s on an H100 (293-302) and an
// H200 (290-323; calibrate/measurements/mcore-step-h200/step-1.7b.json, the four 537 M-element
// passes, and megatron2021-step-h200-2026-12-05/step-legacy.json, 1.68 G elements). An A100's
// slots (0.58 of a Hopper's) leave it slower than its stream too; where the stream is the
// longer, the class costs nothing more.
TEST(ComputeModel, BroadcastLoopIsBoundByTheSmsNotTheHbm) {
  ComputeProfile p;
  p.power_cap = false;
  Op pass;
  pass.kind = OpKind::Memory;
  pass.m = 536870912;  // 4,096 tokens x 131,072 logits
  pass.bytes_read = 4 * pass.m;
  pass.bytes_written = 4 * pass.m;
  pass.access = MemAccess::BroadcastLoop;
  Op stream = pass;
  stream.access = MemAccess::Streaming;
  const GpuSpec& h100 = *find_gpu_preset("h100-sxm");
  const GpuSpec& h200 = *find_gpu_preset("h200-sxm");
  const GpuSpec& a100 = *find_gpu_preset("a100-sxm-80gb");
  const double m = static_cast<double>(pass.m);
  // The same element rate on the H100 and the H200 (their SMs and clocks are alike) ...
  const double rate100 = m / compute_seconds(pass, h100, p), rate200 = m / compute_seconds(pass, h200, p);
  EXPECT_NEAR(rate100 / rate200, 1.0, 0.01);
  EXPECT_NEAR(rate100, 300e9, 0.04 * 300e9);  // measured 293-302 (H100), 290-323 (H200)
  // ... where their streams differ by their bandwidths.
  EXPECT_NEAR(compute_seconds(stream, h100, p) / compute_seconds(stream, h200, p), 4800.0 / 3350.0, 0.01);
  EXPECT_GT(compute_seconds(pass, h200, p), 1.5 * compute_seconds(stream, h200, p));
  EXPECT_NEAR(m / compute_seconds(pass, a100, p), a100.alu_slot_rate() / 220, 0.01 * a100.alu_slot_rate() / 220);
  // A GPU whose stream is the longer (half an H100's bandwidth) pays only its stream.
  GpuSpec slow = h100;
  slow.hbm_bandwidth /= 2;
  EXPECT_DOUBLE_EQ(compute_seconds(pass, slow, p), compute_seconds(stream, slow, p));
}

// Multi-tensor-apply kernels (fused Adam, foreach norm, scale and copy) pay a cost per byte
// in the SMs beyond their stream: fitted on the H200 (3.37-3.39 TB/s against a 4.39 TB/s
// copy), it gives the H100, whose SMs are the H200's with 0.70 of its bandwidth, 2.51 TB/s
// where its step measured 2.58-2.73 (held out); a fixed share of the stream gave 2.27.
TEST(ComputeModel, MultiTensorKernelsPayPerByteInTheSms) {
  ComputeProfile p;
  p.power_cap = false;
  Op adam;
  adam.kind = OpKind::Memory;
  adam.bytes_read = int64_t{16} << 30;
  adam.bytes_written = int64_t{12} << 30;
  adam.access = MemAccess::MultiTensor;
  const double bytes = static_cast<double>(adam.bytes_read + adam.bytes_written);
  const double tb200 = bytes / compute_seconds(adam, *find_gpu_preset("h200-sxm"), p) / 1e12;
  const double tb100 = bytes / compute_seconds(adam, *find_gpu_preset("h100-sxm"), p) / 1e12;
  EXPECT_NEAR(tb200, 3.38, 0.03);
  EXPECT_NEAR(tb100, 2.51, 0.03);
  // A profile's measured multi_tensor_efficiency still scales the stream's rate.
  Op stream = adam;
  stream.access = MemAccess::Streaming;
  p.multi_tensor_efficiency = 0.5;
  const GpuSpec& h100 = *find_gpu_preset("h100-sxm");
  EXPECT_DOUBLE_EQ(compute_seconds(adam, h100, p), compute_seconds(stream, h100, p) / 0.5);
}

// Dropout inside a fused attention kernel: the mask is drawn per score element (the causal
// half of the square) in the forward and again in the backward, integer work beside the
// tensor cores at the GPU's ALU rate: ops · scores / peak_fp32 on top of the kernel. On an
// H200 cuDNN's forward at 4,096 tokens, 16 heads measured 0.181 ms without dropout and
// 0.360 ms with 0.1 (calibrate/measurements/attention-dropout-h200-2026-12-03).
TEST(ComputeModel, FusedAttentionDropoutDrawsItsMaskPerScoreElement) {
  const GpuSpec& h200 = *find_gpu_preset("h200-sxm");
  ComputeProfile p;
  p.power_cap = false;
  Op a = testing::causal_attention(1, 16, 4096, 128);
  const double plain = compute_seconds(a, h200, p);
  Op d = a;
  d.dropout = true;
  const double scores = 16.0 * 4096 * 4096 / 2;
  EXPECT_NEAR(compute_seconds(d, h200, p) - plain, scores * p.attention_dropout_ops[0] / h200.alu_slot_rate(), 1e-12);
  EXPECT_NEAR(compute_seconds(d, h200, p) / plain, 0.360 / 0.181, 0.2);  // as measured
  d.phase = a.phase = Phase::Backward;
  d.flops = a.flops = 2.5 * attention_flops(a);
  EXPECT_NEAR(compute_seconds(d, h200, p) - compute_seconds(a, h200, p),
              scores * p.attention_dropout_ops[1] / h200.alu_slot_rate(), 1e-12);
  // FlashAttention-2 pays in its backward; a non-causal square draws twice the elements.
  p.flash2 = true;
  EXPECT_NEAR(attention_dropout_seconds(d, h200, p), scores * p.flash2_dropout_ops[1] / h200.alu_slot_rate(), 1e-15);
  d.causal = false;
  EXPECT_NEAR(attention_dropout_seconds(d, h200, p), 2 * scores * p.flash2_dropout_ops[1] / h200.alu_slot_rate(),
              1e-15);
  // No dropout, no cost; and a GEMM never carries it.
  EXPECT_EQ(attention_dropout_seconds(a, h200, p), 0.0);
  Op g;
  g.kind = OpKind::Gemm;
  g.dropout = true;
  EXPECT_EQ(attention_dropout_seconds(g, h200, p), 0.0);
}

// FlashAttention in Triton (training.attention: triton): FlashAttention-2's work at
// triton_attention_factor its time, forward and backward, at head dim 128; at head dim 64 the
// same FLOP rate as at 128, where FlashAttention-2 runs (64/128)^0.6 slower
// (docs/model.md, "FlashAttention in Triton").
TEST(ComputeModel, TritonAttentionIsFlashAttention2AtItsFactorWhateverTheHeadDim) {
  for (const char* name : {"a100-sxm-80gb", "h100-sxm"}) {
    const GpuSpec& gpu = *find_gpu_preset(name);
    ComputeProfile fa2;
    fa2.power_cap = false;
    fa2.flash2 = true;
    ComputeProfile triton = fa2;
    triton.triton_attention = true;
    for (const Phase phase : {Phase::Forward, Phase::Backward}) {
      const Op a = testing::causal_attention(3, 16, 8192, 128, phase);
      const double k = triton.triton_attention_factor;
      // The factor is the main kernel's; the backward's two small kernels are the same streams.
      const double aux = attention_backward_aux_seconds(a, gpu, fa2);
      EXPECT_EQ(aux > 0, phase == Phase::Backward);
      EXPECT_NEAR(compute_seconds(a, gpu, triton) - aux, k * (compute_seconds(a, gpu, fa2) - aux), 1e-12) << name;
      // Head dim 64, twice the heads: the same FLOPs; FlashAttention-2's rate is (1/2)^0.6 of
      // its rate at 128 (the tiles double with the heads, so the comparison is at the plateau),
      // the Triton kernel's is its rate at 128.
      Op h = a;
      h.heads = h.kv_heads = 32;
      h.head_dim = 64;
      h.flops = a.flops;
      const double floor = fa2.kernel_latency_s;
      EXPECT_DOUBLE_EQ(attention_backward_aux_seconds(h, gpu, fa2), aux);  // the same elements of Q
      const double fa2_64 = compute_seconds(h, gpu, fa2) - aux;
      EXPECT_NEAR(((compute_seconds(h, gpu, triton) - aux) / k - floor) / (fa2_64 - floor), std::pow(0.5, 0.6), 1e-9)
          << name;
      EXPECT_GT(fa2_64, 1.4 * (compute_seconds(a, gpu, fa2) - aux)) << name;
    }
  }
}

// cuDNN's fused attention at head dim 64 runs (1/2)^0.50 of its rate at 128 forward and
// (1/2)^0.40 backward: measured on SDPA's queued tables of an H100 and an H200 (0.71 and 0.76 at
// 2,048-8,192 tokens; calibrate/measurements/pytorch/run6). At the plateau (thousands of tiles
// an SM, so the tail term is 1 within 1e-3) and for the same FLOPs, the main kernel's time at
// 64 over its time at 128 is 2^x.
TEST(ComputeModel, FusedAttentionAtHeadDim64RunsAtItsMeasuredShareOf128PerPass) {
  const GpuSpec& gpu = *find_gpu_preset("h100-sxm");
  ComputeProfile p;
  p.power_cap = false;
  for (const Phase phase : {Phase::Forward, Phase::Backward}) {
    const Op a = testing::causal_attention(64, 32, 8192, 128, phase);
    Op h = a;
    h.heads = h.kv_heads = 64;
    h.head_dim = 64;
    h.flops = a.flops;
    const double aux = attention_backward_aux_seconds(a, gpu, p), floor = p.kernel_latency_s;
    const double x = p.attention_head_dim_exponent[phase == Phase::Backward ? 1 : 0];
    EXPECT_DOUBLE_EQ(x, phase == Phase::Backward ? 0.40 : 0.50);
    const double t64 = compute_seconds(h, gpu, p) - aux - floor, t128 = compute_seconds(a, gpu, p) - aux - floor;
    EXPECT_NEAR(t64 / t128, std::pow(2.0, x), 2e-3);
  }
}

// Kernels from a full queue (docs/model.md, "Kernels from a full queue"): an op of n kernels,
// each costed as timed between its own events (floor + work, and the gap g after it), takes
//   q = max(n · i, t + g - n · s) - g
// from a framework's queue (s = queue_saving, i = queue_interval). n counts the kernels the
// op's cost has a floor for: 1 a GEMM or a memory kernel, k for a memory op of k kernels,
// 3 for a fused attention backward with its two small kernels, none for a host wait or a
// recorded time.
TEST(ComputeModel, QueuedKernelsSaveWhatTheirTimingEventsCost) {
  const GpuSpec& gpu = *find_gpu_preset("h100-sxm");
  ComputeProfile p;
  EXPECT_DOUBLE_EQ(p.queue_saving_s, 3.25e-6);
  EXPECT_DOUBLE_EQ(p.queue_interval_s, 1.97e-6);
  Op gemm;
  gemm.kind = OpKind::Gemm;
  gemm.dtype = DType::BF16;
  gemm.m = gemm.n = gemm.k = 4096;
  EXPECT_EQ(timed_kernel_count(gemm, gpu, p), 1);
  Op mem;
  mem.kind = OpKind::Memory;
  mem.bytes_read = 1 << 20;
  EXPECT_EQ(timed_kernel_count(mem, gpu, p), 1);
  mem.k = 5;
  EXPECT_EQ(timed_kernel_count(mem, gpu, p), 5);
  Op wait = mem;
  wait.access = MemAccess::HostSync;
  EXPECT_EQ(timed_kernel_count(wait, gpu, p), 0);
  // Where op.k means something else (tensors of a multi-tensor apply, query heads a block
  // of a decode kernel), one kernel: the real backend runs what memory_kernels says too.
  for (const MemAccess a : {MemAccess::MultiTensor, MemAccess::BroadcastLoop, MemAccess::CudaCoreDecode}) {
    Op one_kernel = mem;
    one_kernel.access = a;
    EXPECT_EQ(memory_kernels(one_kernel), 1);
    EXPECT_EQ(timed_kernel_count(one_kernel, gpu, p), 1);
  }
  EXPECT_EQ(memory_kernels(mem), 5);
  EXPECT_EQ(memory_kernels(wait), 0);
  Op recorded = gemm;
  recorded.fixed_seconds = 1e-3;
  EXPECT_EQ(timed_kernel_count(recorded, gpu, p), 0);
  EXPECT_EQ(queued_seconds(recorded, 1e-3, 2e-6, gpu, p), 1e-3);
  EXPECT_EQ(timed_kernel_count(testing::causal_attention(8, 32, 2048, 128, Phase::Forward), gpu, p), 1);
  EXPECT_EQ(timed_kernel_count(testing::causal_attention(8, 32, 2048, 128, Phase::Backward), gpu, p), 3);
  const double g = 2e-6;
  EXPECT_NEAR(queued_seconds(gemm, 100e-6, g, gpu, p), 100e-6 - 3.25e-6, 1e-15);
  EXPECT_NEAR(queued_seconds(mem, 40e-6, g, gpu, p), 40e-6 - 5 * 3.25e-6, 1e-15);
  // Short kernels: the front end's rate, never less (here above the gap of a calibration, 1.28 µs).
  Op one = mem;
  one.k = 1;
  EXPECT_NEAR(queued_seconds(one, 1e-6, 1.28e-6, gpu, p), 1.97e-6 - 1.28e-6, 1e-15);
  EXPECT_NEAR(queued_seconds(mem, 10e-6, 1.28e-6, gpu, p), 5 * 1.97e-6 - 1.28e-6, 1e-15);
  EXPECT_GT(queued_seconds(one, 1e-6, g, gpu, p), 0);  // under the gap: still a kernel
}

// A kernel beside an NCCL kernel of c channels (one thread block on one SM each):
// GEMMs of 2-SM clusters (Hopper) at the measured steps 1.077 (1-2), 1.145 (3-8),
// 1.29 (9-24), 1.45 (25-32), then N / (N - 2c); other GEMMs and attention N / (N - c);
// memory-bound kernels 1. Collectives hold nccl_channels (16), sends and receives to a
// network peer nccl_net_peer_channels (2), to a GPU of the node nccl_channels; a measured
// factor in the profile wins; the SMs lost never reach N.
TEST(ComputeModel, NcclChannelsHoldSms) {
  const ComputeProfile p;
  const GpuSpec& h100 = *find_gpu_preset("h100-sxm");
  const GpuSpec& a100 = *find_gpu_preset("a100-sxm-80gb");
  EXPECT_EQ(p.nccl_channels, 16);
  EXPECT_EQ(p.nccl_net_peer_channels, 2);
  EXPECT_DOUBLE_EQ(beside_blocks(OpKind::Gemm, h100, 1), 1.077);
  EXPECT_DOUBLE_EQ(beside_blocks(OpKind::Gemm, h100, 2), 1.077);
  EXPECT_DOUBLE_EQ(beside_blocks(OpKind::Gemm, h100, 4), 1.145);
  EXPECT_DOUBLE_EQ(beside_blocks(OpKind::Gemm, h100, 16), 1.29);
  EXPECT_DOUBLE_EQ(beside_blocks(OpKind::Gemm, h100, 32), 1.45);
  EXPECT_DOUBLE_EQ(beside_blocks(OpKind::Gemm, h100, 40), 132.0 / 52.0);
  EXPECT_DOUBLE_EQ(beside_blocks(OpKind::Gemm, h100, 100), 132.0);  // one SM left, never none
  EXPECT_DOUBLE_EQ(beside_blocks(OpKind::Attention, h100, 16), 132.0 / 116.0);
  EXPECT_DOUBLE_EQ(beside_blocks(OpKind::Memory, h100, 16), 1.0);
  EXPECT_DOUBLE_EQ(beside_blocks(OpKind::Gemm, a100, 16), 108.0 / 92.0);
  EXPECT_DOUBLE_EQ(beside_blocks(OpKind::Gemm, h100, 0), 1.0);
  EXPECT_DOUBLE_EQ(beside_collective(OpKind::Gemm, h100, p), 1.29);
  EXPECT_DOUBLE_EQ(beside_p2p(OpKind::Gemm, h100, p, true), 1.077);
  EXPECT_DOUBLE_EQ(beside_p2p(OpKind::Gemm, h100, p, false), 1.29);
  EXPECT_DOUBLE_EQ(beside_p2p(OpKind::Attention, h100, p, true), 132.0 / 130.0);
  ComputeProfile measured = p;
  measured.overlap_slowdown[1] = {1.25, 1.1, 1.05};
  measured.overlap_slowdown[0] = {1.5, 1.2, 1.0};
  EXPECT_DOUBLE_EQ(beside_collective(OpKind::Gemm, h100, measured), 1.25);
  EXPECT_DOUBLE_EQ(beside_collective(OpKind::Memory, h100, measured), 1.05);
  EXPECT_DOUBLE_EQ(beside_p2p(OpKind::Gemm, h100, measured, true), 1.5);
}

}  // namespace
}  // namespace clustersim
