#include <gtest/gtest.h>

#include <numeric>

#include "cost_models/collective.h"
#include "cost_models/compute.h"
#include "cost_models/network.h"
#include "topology/presets.h"

namespace clustersim {
namespace {

ClusterSpec cluster(const char* preset, int nodes) {
  ClusterSpec c;
  c.node = *find_node_preset(preset);
  c.nodes = nodes;
  return c;
}

std::vector<int32_t> first_gpus(int n) {
  std::vector<int32_t> g(static_cast<size_t>(n));
  std::iota(g.begin(), g.end(), 0);
  return g;
}

// Ring all-reduce on one DGX H100: p = 8 GPUs, each step a GPU sends S/p to its
// successor over GPU -> NVSwitch -> GPU, alpha = 2 hops x 0.25 us, B = 450 GB/s:
//   T = 2(p-1)·alpha + 2(p-1)/p · S/B
TEST(Collectives, RingAllReduceOnOneDgxH100MatchesClosedForm) {
  Topology topo(cluster("dgx-h100", 1));
  AnalyticNetwork net(topo);
  const int p = 8;
  const double alpha = topo.route_latency(topo.route(0, 1));
  const double B = topo.route_bandwidth(topo.route(0, 1));
  for (double S : {1024.0, 1e6, 64e6, 1024.0 * 1024 * 1024}) {
    const double sim =
        net.run(expand_collective(CollectiveKind::AllReduce, Algorithm::Ring, p, S), first_gpus(p)).seconds;
    const double closed = 2.0 * (p - 1) * alpha + 2.0 * (p - 1) / p * S / B;
    EXPECT_NEAR(sim, closed, 0.01 * closed) << "S=" << S;
    EXPECT_NEAR(closed_form_seconds(CollectiveKind::AllReduce, Algorithm::Ring, p, S, alpha, B), closed, 1e-15);
  }
}

// All-gather / reduce-scatter ring: (p-1)·alpha + (p-1)/p·S/B; direct all-to-all the
// same on a non-blocking switch (each GPU's up- and down-link carries one transfer).
TEST(Collectives, OtherOperationsMatchTheirClosedForms) {
  Topology topo(cluster("dgx-h100", 1));
  AnalyticNetwork net(topo);
  const double alpha = 0.5e-6, B = 450e9;
  for (int p : {2, 4, 8}) {
    for (auto [op, algo] : {std::pair{CollectiveKind::AllGather, Algorithm::Ring},
                            {CollectiveKind::ReduceScatter, Algorithm::Ring},
                            {CollectiveKind::AllToAll, Algorithm::Direct},
                            {CollectiveKind::AllGather, Algorithm::Direct}}) {
      const double S = 256e6;
      const double sim = net.run(expand_collective(op, algo, p, S), first_gpus(p)).seconds;
      const double closed = (p - 1) * alpha + static_cast<double>(p - 1) / p * S / B;
      EXPECT_NEAR(sim, closed, 0.01 * closed) << to_string(op) << " p=" << p;
      EXPECT_NEAR(closed_form_seconds(op, algo, p, S, alpha, B), closed, 1e-12);
    }
  }
}

// Across 16 nodes the ring's slowest hop is the inter-node one: alpha and B are those
// of a NIC-to-NIC route, and every step waits for it.
TEST(Collectives, RingAcrossSixteenNodesIsBoundByTheInterNodeHop) {
  Topology topo(cluster("dgx-h100", 16));
  AnalyticNetwork net(topo);
  const int p = 128;
  const auto inter = topo.route(7, 8);
  const double alpha = topo.route_latency(inter), B = topo.route_bandwidth(inter);
  EXPECT_DOUBLE_EQ(B, 50e9);
  const double S = 1e9;
  const double sim =
      net.run(expand_collective(CollectiveKind::AllReduce, Algorithm::Ring, p, S), first_gpus(p)).seconds;
  const double closed = 2.0 * (p - 1) * alpha + 2.0 * (p - 1) / p * S / B;
  EXPECT_NEAR(sim, closed, 0.01 * closed);
}

// Capacity is conserved: seven GPUs sending to GPU 0 in one step share its NVSwitch
// down-link, each getting B/7, so the step takes alpha + 7·bytes/B.
TEST(Network, TransfersSharingALinkSplitItsBandwidth) {
  Topology topo(cluster("dgx-h100", 1));
  AnalyticNetwork net(topo);
  CollectiveStep step;
  for (int i = 1; i < 8; ++i) step.transfers.emplace_back(i, 0);
  step.bytes = 45e6;
  const auto cost = net.run({step}, first_gpus(8));
  EXPECT_NEAR(cost.seconds, 0.5e-6 + 7 * 45e6 / 450e9, 1e-12);
  // Bytes accounting: the down-link into GPU 0 carried all seven transfers.
  double max_bytes = 0;
  for (auto [l, b] : cost.link_bytes) max_bytes = std::max(max_bytes, b);
  EXPECT_DOUBLE_EQ(max_bytes, 7 * 45e6);
}

TEST(Collectives, BusBandwidthFactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::AllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::AllGather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::ReduceScatter, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::Broadcast, 8), 1.0);
}

TEST(Collectives, UnsupportedPairsAreRejected) {
  EXPECT_THROW(expand_collective(CollectiveKind::Broadcast, Algorithm::Direct, 4, 1e6), std::invalid_argument);
  EXPECT_TRUE(expand_collective(CollectiveKind::AllReduce, Algorithm::Ring, 1, 1e6).empty());
}

// Roofline: an 8192^3 bf16 GEMM on H200 is compute-bound at peak x efficiency:
//   t = 2·8192^3 / (989.5e12 · 0.80) + 2 us  (8192/128 · 8192/256 = 2048 tiles, 15.5 waves
//   of 132 SMs: wave efficiency 2048/(16·132) = 0.97)
TEST(Compute, RooflineGemmAndMemoryOps) {
  const GpuSpec& h200 = *find_gpu_preset("h200-sxm");
  ComputeProfile prof;
  Op g;
  g.kind = OpKind::Gemm;
  g.m = g.n = g.k = 8192;
  g.dtype = DType::BF16;
  g.flops = gemm_flops(g);
  g.bytes_read = 2 * 8192LL * 8192 * 2;
  g.bytes_written = 8192LL * 8192 * 2;
  const double wave = 2048.0 / (16 * 132);
  EXPECT_DOUBLE_EQ(gemm_wave_efficiency(g, h200, prof), wave);
  EXPECT_NEAR(compute_seconds(g, h200, prof), g.flops / (989.5e12 * 0.8 * wave) + 2e-6, 1e-12);

  Op copy;
  copy.kind = OpKind::Memory;
  copy.bytes_read = copy.bytes_written = 1LL << 30;
  EXPECT_NEAR(compute_seconds(copy, h200, prof), 2.0 * (1LL << 30) / (4800e9 * 0.9) + 2e-6, 1e-12);

  // A skinny GEMM is memory-bound: 16 x 8192 x 8192 reads the 128 MiB weight once.
  Op skinny = g;
  skinny.m = 16;
  skinny.flops = gemm_flops(skinny);
  skinny.bytes_read = (16LL * 8192 + 8192LL * 8192) * 2;
  skinny.bytes_written = 16LL * 8192 * 2;
  const double mem = static_cast<double>(skinny.bytes_read + skinny.bytes_written) / (4800e9 * 0.9);
  EXPECT_NEAR(compute_seconds(skinny, h200, prof), mem + 2e-6, 1e-12);
}

TEST(Compute, Fp8FallsBackToBf16WhereTheGpuHasNoFp8) {
  EXPECT_DOUBLE_EQ(find_gpu_preset("a100-sxm-80gb")->peak_flops(DType::FP8), 312e12);
  EXPECT_DOUBLE_EQ(find_gpu_preset("h100-sxm")->peak_flops(DType::FP8), 1979e12);
}

}  // namespace
}  // namespace clustersim
