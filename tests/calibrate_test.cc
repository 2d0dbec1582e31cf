#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <tuple>
#include <vector>

#include "calibrate/profile.h"
#include "cost_models/compute.h"
#include "support/attention_op.h"
#include "support/temp_scenario.h"
#include "topology/gpu.h"

namespace clustersim {
namespace {

const std::string kDefaults = std::string(CLUSTERSIM_SOURCE_DIR) + "/calibrate/profiles/defaults.yaml";

// The shipped defaults file spells out exactly the built-in constants.
TEST(Profile, DefaultsFileEqualsTheBuiltInValues) {
  const CalibrationProfile p = load_profile(kDefaults);
  const ComputeProfile c;
  const NetworkProfile n;
  EXPECT_DOUBLE_EQ(p.compute.gemm_efficiency, c.gemm_efficiency);
  EXPECT_DOUBLE_EQ(p.compute.attention_efficiency, c.attention_efficiency);
  EXPECT_DOUBLE_EQ(p.compute.memory_efficiency, c.memory_efficiency);
  EXPECT_DOUBLE_EQ(p.compute.fp8_gemm_efficiency, c.fp8_gemm_efficiency);
  EXPECT_DOUBLE_EQ(p.compute.kernel_latency_s, c.kernel_latency_s);
  EXPECT_DOUBLE_EQ(p.compute.launch_overhead_s, c.launch_overhead_s);
  EXPECT_DOUBLE_EQ(p.compute.queue_saving_s, c.queue_saving_s);
  EXPECT_DOUBLE_EQ(p.compute.queue_interval_s, c.queue_interval_s);
  EXPECT_EQ(p.compute.gemm_stream_k, c.gemm_stream_k);
  EXPECT_DOUBLE_EQ(p.compute.dynamic_cast_ops_per_element, c.dynamic_cast_ops_per_element);
  EXPECT_DOUBLE_EQ(p.compute.dropout_rng_ops_per_element, c.dropout_rng_ops_per_element);
  EXPECT_DOUBLE_EQ(p.compute.multi_tensor_efficiency, c.multi_tensor_efficiency);
  EXPECT_DOUBLE_EQ(p.compute.multi_tensor_ops_per_byte, c.multi_tensor_ops_per_byte);
  EXPECT_DOUBLE_EQ(p.compute.broadcast_loop_ops_per_element, c.broadcast_loop_ops_per_element);
  EXPECT_DOUBLE_EQ(p.compute.strided_copy_ops_per_element, c.strided_copy_ops_per_element);
  EXPECT_DOUBLE_EQ(p.compute.cat_copy_ops_per_element, c.cat_copy_ops_per_element);
  EXPECT_DOUBLE_EQ(p.compute.tanh_gelu_ops_per_element, c.tanh_gelu_ops_per_element);
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = 0; j < 3; ++j) EXPECT_DOUBLE_EQ(p.compute.overlap_slowdown[i][j], c.overlap_slowdown[i][j]);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(p.network.link_efficiency[i], n.link_efficiency[i], 1e-12);
    EXPECT_DOUBLE_EQ(p.network.protocols[i].bandwidth_efficiency, n.protocols[i].bandwidth_efficiency);
    EXPECT_EQ(p.network.protocols[i].chunk_bytes, n.protocols[i].chunk_bytes);
    for (size_t j = 0; j < 3; ++j) EXPECT_NEAR(p.network.base_latency[i][j], n.base_latency[i][j], 1e-15);
    for (size_t f = 0; f < 2; ++f)
      for (size_t j = 0; j < 3; ++j) EXPECT_NEAR(p.network.hop_latency[i][f][j], n.hop_latency[i][f][j], 1e-15);
  }
  EXPECT_DOUBLE_EQ(p.network.nvls_efficiency, n.nvls_efficiency);
}

// A batched GEMM under a measured table (the unfused attention's per-head products, MoE's
// experts: one strided-batched launch) runs its batch's tiles together, so it takes the ratio
// of a GEMM of batch × m rows, not that of one member alone, which leaves most SMs idle. A table
// whose 512-row GEMMs run at 4x their ideal and 32,768-row ones at 1.25x: 64 x 512 x 512 x 4,096
// is priced as 32,768 x 512 x 4,096 is, at 1.25x.
TEST(Profile, BatchedGemmTakesTheRatioOfItsStackedRows) {
  const GpuSpec& gpu = *find_gpu_preset("h200-sxm");
  const double peak = gpu.peak_flops(DType::BF16);
  auto tables = std::make_shared<MeasuredTables>();
  for (int64_t m : {512, 32768})
    for (int64_t n : {512, 1024})
      for (int64_t k : {4096, 8192})
        tables->gemm.push_back(GemmPoint{DType::BF16, m, n, k, (m == 512 ? 4.0 : 1.25) * 2.0 * m * n * k / peak});
  ComputeProfile prof;
  prof.measured = tables;
  auto gemm = [](int64_t m, int64_t n, int64_t k, int64_t batch) {
    Op op;
    op.kind = OpKind::Gemm;
    op.m = m, op.n = n, op.k = k, op.batch = batch;
    op.flops = 2.0 * m * n * k * batch;
    op.bytes_read = (m * k + k * n) * batch * 2;
    op.bytes_written = m * n * batch * 2;
    return op;
  };
  const Op batched = gemm(512, 512, 4096, 64), stacked = gemm(32768, 512, 4096, 1), one = gemm(512, 512, 4096, 1);
  EXPECT_NEAR(compute_seconds(batched, gpu, prof) / (batched.flops / peak), 1.25, 1e-9);
  EXPECT_NEAR(compute_seconds(batched, gpu, prof), compute_seconds(stacked, gpu, prof), 1e-12);
  EXPECT_NEAR(compute_seconds(one, gpu, prof) / (one.flops / peak), 4.0, 1e-9);
}

// Attention tables are interpolated over length and batch × heads (bilinear in logs) and
// over the GQA group size: at the log-midpoint of each axis, the geometric mean of the
// measured ratios to the ideal time.
TEST(Profile, AttentionTablesInterpolateLengthHeadsAndGroups) {
  const GpuSpec& gpu = *find_gpu_preset("h200-sxm");
  auto ideal = [&](int64_t seq, int64_t bh) {
    Op probe;
    probe.batch = bh;
    probe.heads = 1;
    probe.q_len = probe.kv_len = seq;
    probe.head_dim = 128;
    probe.causal = true;
    return attention_flops(probe) / gpu.peak_flops(DType::BF16);
  };
  auto tables = std::make_shared<MeasuredTables>();
  const std::map<std::pair<int64_t, int64_t>, double> ratio = {
      {{1024, 16}, 2.0}, {{4096, 16}, 3.0}, {{1024, 64}, 4.0}, {{4096, 64}, 6.0}};
  for (int64_t g : {1, 4})
    for (const auto& [at, r] : ratio)
      tables->attention.push_back(AttentionPoint{false, true, 128, at.first, at.second,
                                                 (g == 4 ? 2.0 : 1.0) * r * ideal(at.first, at.second), g});
  ComputeProfile prof;
  prof.measured = tables;
  Op op = testing::causal_attention(1, 32, 2048, 128);
  const double t_ideal = op.flops / gpu.peak_flops(DType::BF16);
  EXPECT_NEAR(compute_seconds(op, gpu, prof) / t_ideal, std::pow(2.0 * 3 * 4 * 6, 0.25), 1e-9);
  op.kv_heads = 16;  // group 2: halfway (in log) between the group-1 and group-4 grids
  EXPECT_NEAR(compute_seconds(op, gpu, prof) / t_ideal, std::pow(2.0 * 3 * 4 * 6, 0.25) * std::sqrt(2.0), 1e-9);
  op.heads = 8;  // below the grid's batch × heads: clamped to 16
  op.kv_heads = 8;
  op.flops = attention_flops(op);
  EXPECT_NEAR(compute_seconds(op, gpu, prof) / (op.flops / gpu.peak_flops(DType::BF16)), std::sqrt(2.0 * 3), 1e-9);
}

std::string profile_error(const std::string& yaml) {
  const std::string path = testing::temp_dir("profile") + "/p.yaml";
  std::ofstream(path) << yaml;
  try {
    load_profile(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Profile, BadProfilesAreRejectedWithTheirPosition) {
  EXPECT_NE(profile_error("compute: {gemm_eficiency: 0.7}\n")
                .find("p.yaml:1:11: error: unknown key 'profile.compute.gemm_eficiency'"),
            std::string::npos);
  EXPECT_NE(profile_error("compute:\n  gemm_efficiency: 1.7\n").find("p.yaml:2:20: error:"), std::string::npos);
  EXPECT_NE(profile_error("network:\n  hop_latency: {nvlink: {ring: {LL: 3}}}\n").find("has no unit"),
            std::string::npos);
  EXPECT_NE(profile_error("network: [1, 2]\n").find("must be a mapping"), std::string::npos);
  EXPECT_NE(profile_error("sm_clock_mhz: fast\n").find("p.yaml:1:"), std::string::npos);
  // A kernel cannot run faster beside an NCCL kernel than alone.
  EXPECT_NE(profile_error("compute:\n  overlap_slowdown: {p2p: {gemm: 0.5}}\n").find("p.yaml:2:"), std::string::npos);
  EXPECT_NE(profile_error("compute:\n  overlap_slowdown: {nvls: {gemm: 1.2}}\n").find("unknown key"),
            std::string::npos);
  {
    const std::string path = testing::temp_dir("overlap") + "/p.yaml";
    std::ofstream(path) << "compute:\n  overlap_slowdown: {collective: {attention: 1.2}}\n";
    const CalibrationProfile p = load_profile(path);
    EXPECT_DOUBLE_EQ(p.compute.overlap_slowdown[1][1], 1.2);
    EXPECT_DOUBLE_EQ(p.compute.overlap_slowdown[0][1], 0.0);  // not set: derived from NCCL's channels
  }
  try {
    load_profile("/nonexistent/p.yaml");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos);
  }
}

TEST(Profile, OverridesOnlyWhatItNames) {
  const std::string path = testing::temp_dir("profile-partial") + "/p.yaml";
  std::ofstream(path) << "gpu: h200-sxm\nsm_clock_mhz: 1980\ncompute: {gemm_efficiency: 0.7}\n"
                         "network: {link_efficiency: {network: 0.8}}\n";
  const CalibrationProfile p = load_profile(path);
  EXPECT_EQ(p.gpu, "h200-sxm");
  EXPECT_DOUBLE_EQ(p.sm_clock_mhz, 1980);
  EXPECT_DOUBLE_EQ(load_profile(kDefaults).sm_clock_mhz, 0);  // unknown
  EXPECT_DOUBLE_EQ(p.compute.gemm_efficiency, 0.7);
  EXPECT_DOUBLE_EQ(p.compute.memory_efficiency, ComputeProfile{}.memory_efficiency);
  EXPECT_DOUBLE_EQ(p.network.link_efficiency[2], 0.8);
  EXPECT_DOUBLE_EQ(p.network.link_efficiency[0], NetworkProfile{}.link_efficiency[0]);
}

}  // namespace
}  // namespace clustersim

namespace clustersim {
namespace {

// A measured table drives the compute model: a GEMM grid on which every shape took
// exactly 1.25x its roofline time predicts 1.25x for a shape between grid points (the
// reference has no wave steps: the library picks its own tile per shape); memory
// time follows the measured bandwidth past the largest measurement.
TEST(Profile, MeasuredTablesAreInterpolated) {
  const GpuSpec& gpu = *find_gpu_preset("h200-sxm");
  ComputeProfile base;
  auto ideal = [&](int64_t m, int64_t n, int64_t k) {
    Op op;
    op.kind = OpKind::Gemm;
    op.m = m;
    op.n = n;
    op.k = k;
    op.flops = gemm_flops(op);
    op.bytes_read = (m * k + k * n) * 2;
    op.bytes_written = m * n * 2;
    // The roofline at efficiency 1: the longer of FLOPs at peak and bytes at HBM bandwidth.
    return std::pair{op, std::max(op.flops / gpu.peak_flops(DType::BF16),
                                  static_cast<double>(op.bytes_read + op.bytes_written) / gpu.hbm_bandwidth)};
  };
  auto tables = std::make_shared<MeasuredTables>();
  for (int64_t m : {1024, 4096})
    for (int64_t n : {1024, 2048})
      for (int64_t k : {1024, 2048})
        tables->gemm.push_back(GemmPoint{DType::BF16, m, n, k, 1.25 * ideal(m, n, k).second});
  tables->memory = {{1e6, 1e-5}, {1e9, 1e-3}};  // 1 TB/s at the top
  base.measured = tables;
  const auto [op, t_ideal] = ideal(3000, 1500, 1200);
  EXPECT_NEAR(compute_seconds(op, gpu, base), 1.25 * t_ideal, 1e-3 * t_ideal);
  Op mem;
  mem.kind = OpKind::Memory;
  mem.bytes_read = mem.bytes_written = 5e9;  // 10 GB: ten times past the top
  EXPECT_NEAR(compute_seconds(mem, gpu, base), 1e-2, 1e-6);
  // 100 MB: seconds per byte interpolated log-log between 1e-11 (1 MB) and 1e-12 (1 GB),
  // two thirds of the way: 1e-11 · 10^(-2/3) s/B.
  mem.bytes_read = mem.bytes_written = 5e7;
  EXPECT_NEAR(compute_seconds(mem, gpu, base), 1e-11 * std::pow(10.0, -2.0 / 3.0) * 1e8, 1e-9);
}

// Table rows are read without the YAML parser's node graph: a profile must read the
// same whichever way its rows are written, and errors in a row keep their file:line:col.
TEST(Profile, TableRowsReadTheSameAsTheYamlParserReadsThem) {
  const std::string dir = testing::temp_dir("rows");
  const std::string flow = dir + "/flow.yaml", block = dir + "/block.yaml", quoted = dir + "/quoted.yaml";
  std::ofstream(flow) << "gpu: x\ncompute:\n  gemm_table:  # [dtype, m, n, k, seconds]\n"
                         "    - [bf16, 1024, 1024, 1024, 2.5e-06]\n    - [bf16, 2048, 1024, 1024, 5.0e-06]  # note\n"
                         "\n    - [fp8, 1024, 1024, 1024, 1.5e-06]\n"
                         "  attention_table:\n    - [forward, 128, true, 1024, 8, 1.0e-05, 4]\n"
                         "  launch_overhead: 2us\n";
  std::ofstream(block) << "gpu: x\ncompute:\n  gemm_table:\n"
                          "    - - bf16\n      - 1024\n      - 1024\n      - 1024\n      - 2.5e-06\n"
                          "    - - bf16\n      - 2048\n      - 1024\n      - 1024\n      - 5.0e-06\n"
                          "    - [fp8, 1024, 1024, 1024, 1.5e-06]\n"
                          "  attention_table: [[forward, 128, true, 1024, 8, 1.0e-05, 4]]\n"
                          "  launch_overhead: 2us\n";
  std::ofstream(quoted) << "gpu: x\ncompute:\n  gemm_table:\n    - [\"bf16\", 1024, 1024, 1024, 2.5e-06]\n"
                           "    - [bf16, 2048, 1024, 1024, 5.0e-06]\n    - [fp8, 1024, 1024, 1024, 1.5e-06]\n"
                           "  attention_table:\n    - [forward, 128, true, 1024, 8, 1.0e-05, 4]\n"
                           "  launch_overhead: 2us\n";
  auto rows = [](const CalibrationProfile& p) {
    std::vector<std::tuple<int, int64_t, int64_t, int64_t, double>> out;
    for (const GemmPoint& g : p.compute.measured->gemm)
      out.emplace_back(static_cast<int>(g.dtype), g.m, g.n, g.k, g.seconds);
    return out;
  };
  const CalibrationProfile a = load_profile(flow), b = load_profile(block), c = load_profile(quoted);
  ASSERT_TRUE(a.compute.measured && b.compute.measured && c.compute.measured);
  EXPECT_EQ(rows(a).size(), 3u);
  EXPECT_EQ(rows(a), rows(b));
  EXPECT_EQ(rows(a), rows(c));
  EXPECT_EQ(a.compute.measured->attention.size(), 1u);
  EXPECT_EQ(a.compute.measured->attention[0].group, 4);
  EXPECT_DOUBLE_EQ(a.compute.launch_overhead_s, 2e-6);
  // A bad cell in a row read directly: its own line and column.
  const std::string bad = dir + "/bad.yaml";
  std::ofstream(bad) << "compute:\n  gemm_table:\n    - [bf16, 64, 64, 64, 1e-6]\n    - [bf16, 64, x64, 64, 1e-6]\n";
  // A profile refused with a message holding `says`.
  auto refused = [](const std::string& path, const std::string& says) {
    try {
      load_profile(path);
      ADD_FAILURE() << path << " was read";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(bad, bad + ":4:18");
  // A row a line does not hold is the parser's, and its errors are the parser's.
  const std::string split = dir + "/split.yaml";
  std::ofstream(split) << "compute:\n  gemm_table:\n    - [bf16, 64, 64,\n       64, 1e-6]\n";
  EXPECT_EQ(load_profile(split).compute.measured->gemm.size(), 1u);
  // A GQA group must divide the batch's query heads: 16 query heads a K/V head among 8 is
  // no measurement, refused at its cell.
  const std::string gqa = dir + "/gqa.yaml";
  std::ofstream(gqa) << "compute:\n  attention_table:\n    - [forward, 64, true, 256, 8, 1e-5, 16]\n";
  refused(gqa, gqa + ":3:41: error: profile.compute.attention_table: a GQA group of 16");
}

// Memory-bound kernels measured at several shares of reads: between two measured shares
// the seconds per byte are interpolated linearly in the share (in log space); outside
// the measured shares the nearest holds. Rows of two values are read at a share of one
// half, rows of three carry their share.
TEST(Profile, MemoryTableInterpolatesTheReadShare) {
  const GpuSpec& gpu = *find_gpu_preset("h200-sxm");
  const std::string path = testing::temp_dir("memory-shares") + "/p.yaml";
  std::ofstream(path) << "compute:\n  memory_table:\n"
                         "    - [1000000, 4.0e-6]\n"
                         "    - [1000000000, 4.0e-4, 0.5]\n"
                         "    - [1000000, 1.0e-6, 1]\n"
                         "    - [1000000000, 1.0e-4, 1]\n";
  const CalibrationProfile p = load_profile(path);
  ASSERT_TRUE(p.compute.measured);
  ASSERT_EQ(p.compute.measured->memory.size(), 4u);
  EXPECT_DOUBLE_EQ(p.compute.measured->memory[1].read_share, 0.5);
  Op mem;
  mem.kind = OpKind::Memory;
  auto at = [&](int64_t read, int64_t written) {
    mem.bytes_read = read;
    mem.bytes_written = written;
    return compute_seconds(mem, gpu, p.compute);
  };
  EXPECT_NEAR(at(500000, 500000), 4.0e-6, 1e-12);  // a half: the two-value rows
  EXPECT_NEAR(at(1000000, 0), 1.0e-6, 1e-12);      // reads only
  // Three quarters read: halfway between 4e-12 and 1e-12 s/B in log space, 2e-12 s/B.
  EXPECT_NEAR(at(750000, 250000), 2.0e-6, 1e-12);
  // A third read: below the lowest measured share, whose curve holds.
  EXPECT_NEAR(at(1000000, 2000000), 3e6 * 4e-12 * std::pow(3.0, -1.0 / 3), 1e-9);
  EXPECT_NE(profile_error("compute:\n  memory_table:\n    - [1000, 1e-6, 1.5]\n").find("p.yaml:3:"), std::string::npos);
}

}  // namespace
}  // namespace clustersim

#include "calibrate/fit.h"
#include "cost_models/tuner.h"
#include "topology/presets.h"

namespace clustersim {
namespace {

// t = α + β·bytes is recovered from noiseless samples; weights are relative, so a
// 2 % error on one large size moves the fit little and shows in the residual.
TEST(Fit, RecoversLatencyAndBandwidth) {
  std::vector<CollectiveSample> s;
  for (double b = 1024; b <= 1e9; b *= 4) s.push_back({"all-reduce", "ring", "Simple", 8, b, 20e-6 + b / 300e9});
  const auto fits = fit_collectives(s);
  ASSERT_EQ(fits.size(), 1u);
  EXPECT_NEAR(fits[0].alpha_s, 20e-6, 1e-9);
  EXPECT_NEAR(fits[0].beta_s_per_byte, 1 / 300e9, 1e-15);
  EXPECT_LT(fits[0].rms_rel_residual, 1e-9);
  s.back().seconds *= 1.02;
  const auto noisy = fit_collectives(s);
  EXPECT_GT(noisy[0].rms_rel_residual, 1e-3);
  EXPECT_NEAR(noisy[0].alpha_s, 20e-6, 1e-6);
}

// A profile's fitted collective replaces the model inside a node, for the tuner and for
// the analytic time; groups across nodes keep the model.
TEST(Fit, ProfileFitsDriveCollectivesInsideANode) {
  const std::string path = testing::temp_dir("fits") + "/p.yaml";
  std::ofstream(path) << "network:\n  collective_table:\n    - [all-reduce, ring, Simple, 8, 1.0e-5, 2.5e-12, 0.01]\n";
  const CalibrationProfile p = load_profile(path);
  ASSERT_TRUE(p.network.collective_fits);
  ClusterSpec c;
  c.node = *find_node_preset("dgx-h100");
  Topology one(c);
  std::vector<int32_t> g = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_DOUBLE_EQ(measured_collective_seconds(p.network, CollectiveKind::AllReduce, Algorithm::Ring, Protocol::Simple,
                                               layout_of(one, g), 1e9),
                   1.0e-5 + 2.5e-3);
  EXPECT_LT(measured_collective_seconds(p.network, CollectiveKind::AllGather, Algorithm::Ring, Protocol::Simple,
                                        layout_of(one, g), 1e9),
            0);
  c.nodes = 2;
  Topology two(c);
  std::vector<int32_t> across = {0, 8, 1, 9, 2, 10, 3, 11};
  EXPECT_LT(measured_collective_seconds(p.network, CollectiveKind::AllReduce, Algorithm::Ring, Protocol::Simple,
                                        layout_of(two, across), 1e9),
            0);
}

// Measured sizes are interpolated linearly in bytes (exact between two sizes on one
// line), held at the smallest size's time below it and carried on by the last segment
// above; leave-one-size-out predicts each interior size from its neighbours.
TEST(Fit, MeasuredPointsInterpolateAndHoldOut) {
  const std::string path = testing::temp_dir("points") + "/p.yaml";
  std::ofstream(path) << "network:\n  collective_table:\n    - [all-gather, ring, LL, 2, 1.0e-5, 1.0e-11, 0.1]\n"
                         "  collective_points:\n"
                         "    - [all-gather, ring, LL, 2, 1024, 1.0e-5]\n"
                         "    - [all-gather, ring, LL, 2, 4096, 2.0e-5]\n"
                         "    - [all-gather, ring, LL, 2, 16384, 8.0e-5]\n"
                         "    - [send-recv, p2p, LL, 2, 1024, 4.0e-5]\n"
                         "    - [send-recv, p2p, Simple, 2, 1024, 3.0e-5]\n"
                         "    - [all-reduce, nccl, auto, 2, 1024, 7.0e-6]\n"
                         "    - [all-reduce, nccl, auto, 2, 2048, 9.0e-6]\n";
  const CalibrationProfile p = load_profile(path);
  ASSERT_TRUE(p.network.collective_fits);
  ClusterSpec c;
  c.node = *find_node_preset("dgx-h200");
  Topology topo(c);
  const std::vector<int32_t> g = {0, 1};
  const GroupLayout l = layout_of(topo, g);
  auto ag = [&](double b) {
    return measured_collective_seconds(p.network, CollectiveKind::AllGather, Algorithm::Ring, Protocol::LL, l, b);
  };
  EXPECT_DOUBLE_EQ(ag(512), 1.0e-5);
  EXPECT_DOUBLE_EQ(ag(2560), 1.5e-5);
  EXPECT_DOUBLE_EQ(ag(10240), 5.0e-5);
  EXPECT_DOUBLE_EQ(ag(16384 * 2), 8.0e-5 + 6.0e-5 / 12288 * 16384);
  // send/recv: the fastest measured protocol when NCCL's own choice was not measured.
  EXPECT_DOUBLE_EQ(measured_p2p_seconds(p.network, l, 1024), 3.0e-5);
  // NCCL's own choice drives `auto`; a fixed algorithm keeps its own series (none here).
  AnalyticNetwork net(topo, p.network);
  const CollectiveChoice a =
      choose_collective(CollectiveKind::AllReduce, 1536, l, g, net, p.network, std::nullopt, std::nullopt);
  EXPECT_TRUE(a.measured);
  EXPECT_DOUBLE_EQ(a.predicted_s, 8.0e-6);
  const CollectiveChoice r =
      choose_collective(CollectiveKind::AllReduce, 1536, l, g, net, p.network, Algorithm::Ring, std::nullopt);
  EXPECT_FALSE(r.measured);

  std::vector<CollectiveSample> s;
  for (double b = 1024; b <= 1 << 20; b *= 2) s.push_back({"all-reduce", "ring", "Simple", 2, b, 10e-6 + b / 100e9});
  const auto held = leave_one_size_out(s);
  ASSERT_EQ(held.size(), s.size() - 2);
  for (const HeldOutError& e : held) EXPECT_NEAR(e.error, 0, 1e-12);
  s[5].seconds *= 1.3;  // one slow size shows in its own held-out error
  const auto bumped = leave_one_size_out(s);
  EXPECT_NEAR(bumped[4].error, 1 / 1.3 - 1, 1e-9);
}

// Sizes of a series must ascend; a malformed row names its place.
TEST(Fit, MalformedPointsAreInputErrors) {
  const std::string path = testing::temp_dir("points-bad") + "/p.yaml";
  std::ofstream(path) << "network:\n  collective_points:\n    - [all-gather, ring, LL, 2, 4096, 2.0e-5]\n"
                         "    - [all-gather, ring, LL, 2, 1024, 1.0e-5]\n";
  try {
    load_profile(path);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("p.yaml:4:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ascend"), std::string::npos) << e.what();
  }
  std::ofstream(path) << "network:\n  collective_points:\n    - [all-gather, ring, LL, 2, 4096]\n";
  EXPECT_THROW(load_profile(path), InputError);
}

}  // namespace
}  // namespace clustersim
