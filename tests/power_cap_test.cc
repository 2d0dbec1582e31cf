// Clocks under the power cap (docs/model.md, "Clocks under the power cap"): each kernel's energy,
// the board's limit, the slowest board of a job and each phase at its own clock.
#include "cost_models/power_cap.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <numeric>
#include <tuple>

#include "cost_models/collective.h"
#include "cost_models/compute.h"
#include "cost_models/flow_network.h"
#include "cost_models/network.h"
#include "cost_models/tuner.h"
#include "support/attention_op.h"
#include "support/clusters.h"
#include "support/gemm_op.h"
#include "topology/presets.h"

namespace clustersim {
namespace {

using testing::gemm_op;

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
  for (const Op& g :
       {cube, power_gemm(8192, 28672, 4096), power_gemm(4096, 8192, 2048), power_gemm(8192, 4096, 14336)}) {
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
    EXPECT_NEAR(10 * ops[0].flops / std::accumulate(t.begin(), t.end(), 0.0), 660e12 * prof.slowest_board, 1e6) << n;
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
    EXPECT_NEAR(10 * ops[0].flops / std::accumulate(t.begin(), t.end(), 0.0), g->capped_bf16_flops, 1e6) << g->name;
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

}  // namespace
}  // namespace clustersim
