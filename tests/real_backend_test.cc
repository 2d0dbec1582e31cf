// GPU tests of the real backend. Each skips itself where no GPU is present (CI).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "plan/training_planner.h"
#include "real_backend/check.h"
#include "real_backend/cudnn_attention.h"
#include "real_backend/gemm.h"
#include "real_backend/gpu_monitor.h"
#include "real_backend/kernels.h"
#include "real_backend/real_executor.h"
#include "support/temp_scenario.h"

namespace clustersim::real {
namespace {

#define REQUIRE_GPU()                                                  \
  do {                                                                 \
    if (device_count() == 0) GTEST_SKIP() << "no GPU on this machine"; \
  } while (0)

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { CS_CUDA(cudaMalloc(&p, bytes)); }
  ~DeviceBuffer() { cudaFree(p); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Milliseconds one call of `fn` takes on the GPU: three warm-up calls, then the mean of
// `reps` back to back between two events.
template <typename Fn>
double gpu_ms_per_call(int reps, Fn&& fn) {
  for (int i = 0; i < 3; ++i) fn();
  cudaEvent_t s, e;
  CS_CUDA(cudaEventCreate(&s));
  CS_CUDA(cudaEventCreate(&e));
  CS_CUDA(cudaEventRecord(s));
  for (int i = 0; i < reps; ++i) fn();
  CS_CUDA(cudaEventRecord(e));
  CS_CUDA(cudaEventSynchronize(e));
  float ms = 0;
  CS_CUDA(cudaEventElapsedTime(&ms, s, e));
  cudaEventDestroy(s);
  cudaEventDestroy(e);
  return ms / reps;
}

// cuBLASLt against a naive fp32 GEMM on random data.
TEST(RealBackend, GemmMatchesTheReference) {
  REQUIRE_GPU();
  for (DType d : {DType::BF16, DType::FP16}) {
    const int m = 320, n = 192, k = 256;
    DeviceBuffer a(m * k * 2), b(k * n * 2), c(m * n * 2), ref(m * n * 4);
    const Elem e = d == DType::BF16 ? Elem::BF16 : Elem::FP16;
    fill_random(e, a.p, m * k, 11, 1.f, nullptr);
    fill_random(e, b.p, k * n, 12, 1.f, nullptr);
    Gemm g;
    g.run(d, m, n, k, 1, a.p, b.p, c.p, nullptr);
    reference_gemm(e, m, n, k, a.p, b.p, ref.as<float>(), nullptr);
    CS_CUDA(cudaDeviceSynchronize());
    // Sums of 256 products of values in [-1, 1): typical magnitude ~9; bf16 keeps 8 bits.
    EXPECT_LT(max_relative_error(e, c.p, ref.as<float>(), m * n, 1.0), d == DType::BF16 ? 2e-2 : 4e-3) << to_string(d);
  }
}

// FP8 as Transformer Engine issues it (per-tensor scale pointers; fast accumulation in
// the forward, split in the backward): both give the exact product, at FP8's rates.
TEST(RealBackend, Fp8GemmWithScalesAndBothAccumulators) {
  REQUIRE_GPU();
  cudaDeviceProp prop{};
  CS_CUDA(cudaGetDeviceProperties(&prop, 0));
  if (!Gemm::supported(DType::FP8, prop.major)) GTEST_SKIP() << "no FP8 tensor cores";
  const int64_t n = 8192;
  DeviceBuffer a(n * n), b(n * n), c(n * n * 2);
  // Bytes below 0x70 in both nibble halves are finite E4M3 values (no NaN encodings).
  CS_CUDA(cudaMemset(a.p, 0x38, n * n));  // 1.0
  CS_CUDA(cudaMemset(b.p, 0x30, n * n));  // 0.5
  Gemm g;
  auto rate = [&](DType d, bool split) {
    const double ms = gpu_ms_per_call(20, [&] { g.run(d, n, n, n, 1, a.p, b.p, c.p, nullptr, split); });
    return 2.0 * n * n * n / (ms * 1e-3) / 1e12;
  };
  const double fast = rate(DType::FP8, false), split = rate(DType::FP8, true);
  // 1.0 * 0.5 summed over 8192 products: every output is 4096, exact in BF16.
  uint16_t out = 0;
  CS_CUDA(cudaMemcpy(&out, c.p, sizeof out, cudaMemcpyDeviceToHost));
  EXPECT_EQ(out, 0x4580) << "bf16 4096 is 0x4580";
  std::printf("fp8 8192^3: fast accumulation %.0f TFLOP/s, split accumulator %.0f TFLOP/s\n", fast, split);
  EXPECT_GT(fast, 1000);
  EXPECT_GT(split, 800);
  EXPECT_GE(fast, split * 0.97);
}

// E4M3 of a value exactly representable (or past 448, saturated): sign, exponent bias 7,
// three mantissa bits.
uint8_t e4m3(float v) {
  if (v == 0) return 0;
  const uint8_t sign = v < 0 ? 0x80 : 0;
  float a = std::fabs(v);
  if (a >= 448) return sign | 0x7E;
  const int e = static_cast<int>(std::floor(std::log2(a)));
  const int m = static_cast<int>((a / std::ldexp(1.f, e) - 1) * 8);
  return sign | static_cast<uint8_t>(((e + 7) << 3) | m);
}

uint16_t bf16_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return static_cast<uint16_t>(u >> 16);
}

// Transformer Engine's cast-transpose: every element's E4M3 byte, row-major and
// transposed, and the amax, on a shape of partial tiles; then its rate against a plain
// stream of the same bytes.
TEST(RealBackend, Fp8CastTransposeAndAmax) {
  REQUIRE_GPU();
  const int64_t rows = 100, cols = 70;
  std::vector<uint16_t> host(rows * cols);
  std::vector<uint8_t> want(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = (r == 37 && c == 5) ? -1000.f : static_cast<float>((r * 7 + c * 3) % 17 - 8) * 0.25f;
      host[r * cols + c] = bf16_bits(v);
      want[r * cols + c] = e4m3(v);
    }
  DeviceBuffer in(rows * cols * 2), out(rows * cols), out_t(rows * cols), amax(4);
  CS_CUDA(cudaMemcpy(in.p, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  CS_CUDA(cudaMemset(amax.p, 0, 4));
  fp8_cast_transpose_amax(in.p, rows, cols, 1.f, out.p, out_t.p, amax.as<float>(), nullptr);
  std::vector<uint8_t> got(rows * cols), got_t(rows * cols);
  float got_amax = 0;
  CS_CUDA(cudaMemcpy(got.data(), out.p, got.size(), cudaMemcpyDeviceToHost));
  CS_CUDA(cudaMemcpy(got_t.data(), out_t.p, got_t.size(), cudaMemcpyDeviceToHost));
  CS_CUDA(cudaMemcpy(&got_amax, amax.p, 4, cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      wrong += got[r * cols + c] != want[r * cols + c];
      wrong += got_t[c * rows + r] != want[r * cols + c];
    }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(got_amax, 1000.f);
  // The vectorized path (rows and cols multiples of 8): the same bytes on 96 x 72.
  {
    const int64_t vr = 96, vc = 72;
    std::vector<uint16_t> vin(vr * vc);
    std::vector<uint8_t> vwant(vr * vc), vgot(vr * vc), vgot_t(vr * vc);
    for (int64_t i = 0; i < vr * vc; ++i) {
      const float v = i == 1234 ? 600.f : static_cast<float>(i % 13 - 6) * 0.25f;
      vin[i] = bf16_bits(v);
      vwant[i] = e4m3(v);
    }
    CS_CUDA(cudaMemcpy(in.p, vin.data(), vin.size() * 2, cudaMemcpyHostToDevice));
    CS_CUDA(cudaMemset(amax.p, 0, 4));
    fp8_cast_transpose_amax(in.p, vr, vc, 1.f, out.p, out_t.p, amax.as<float>(), nullptr);
    CS_CUDA(cudaMemcpy(vgot.data(), out.p, vgot.size(), cudaMemcpyDeviceToHost));
    CS_CUDA(cudaMemcpy(vgot_t.data(), out_t.p, vgot_t.size(), cudaMemcpyDeviceToHost));
    CS_CUDA(cudaMemcpy(&got_amax, amax.p, 4, cudaMemcpyDeviceToHost));
    int vwrong = 0;
    for (int64_t r = 0; r < vr; ++r)
      for (int64_t c = 0; c < vc; ++c)
        vwrong += (vgot[r * vc + c] != vwant[r * vc + c]) + (vgot_t[c * vr + r] != vwant[r * vc + c]);
    EXPECT_EQ(vwrong, 0);
    EXPECT_EQ(got_amax, 600.f);
  }
  // Rate: 8192 x 8192 (128 MiB read, 128 MiB written).
  const int64_t n = 8192;
  DeviceBuffer big(n * n * 2), big_out(n * n * 2);
  fill_random(Elem::BF16, big.p, n * n, 5, 1.f, nullptr);
  const double cast = gpu_ms_per_call(10, [&] {
    fp8_cast_transpose_amax(big.p, n, n, 1.f, big_out.p, static_cast<char*>(big_out.p) + n * n, amax.as<float>(), nullptr);
  });
  const double stream = gpu_ms_per_call(10, [&] { memory_op(big.p, big_out.p, n * n * 2, n * n * 2, nullptr); });
  const double bytes = 4.0 * n * n;
  std::printf("fp8 cast-transpose 8192^2: %.1f us, %.0f GB/s; a stream of the same bytes %.1f us, %.0f GB/s\n",
              cast * 1e3, bytes / (cast * 1e-3) / 1e9, stream * 1e3, bytes / (stream * 1e-3) / 1e9);
  EXPECT_LT(cast, 2 * stream);
}

// The vendor library's rate for an 8192^3 bf16 GEMM: about 770-800 TFLOP/s on an H200.
TEST(RealBackend, Gemm8192Rate) {
  REQUIRE_GPU();
  const int64_t n = 8192;
  DeviceBuffer a(n * n * 2), b(n * n * 2), c(n * n * 2);
  fill_random(Elem::BF16, a.p, n * n, 1, 1.f, nullptr);
  fill_random(Elem::BF16, b.p, n * n, 2, 1.f, nullptr);
  Gemm g;
  for (int i = 0; i < 3; ++i) g.run(DType::BF16, n, n, n, 1, a.p, b.p, c.p, nullptr);
  cudaEvent_t s, e;
  CS_CUDA(cudaEventCreate(&s));
  CS_CUDA(cudaEventCreate(&e));
  const int reps = 20;
  CS_CUDA(cudaEventRecord(s));
  for (int i = 0; i < reps; ++i) g.run(DType::BF16, n, n, n, 1, a.p, b.p, c.p, nullptr);
  CS_CUDA(cudaEventRecord(e));
  CS_CUDA(cudaEventSynchronize(e));
  float ms = 0;
  CS_CUDA(cudaEventElapsedTime(&ms, s, e));
  const double tflops = 2.0 * n * n * n * reps / (ms * 1e-3) / 1e12;
  cudaDeviceProp prop{};
  CS_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("gemm 8192^3 bf16 on %s: %.1f TFLOP/s\n", prop.name, tflops);
  RecordProperty("gemm_8192_bf16_tflops", std::to_string(tflops));
  const std::string name = prop.name;
  if (name.find("H200") != std::string::npos || name.find("H100") != std::string::npos) {
    EXPECT_GT(tflops, 0.9 * 770);
  }
}

// The fused attention kernel against the definition: ragged lengths (not multiples of
// the 64 tile), GQA, causal and not, head dims 64 and 128; forward and backward.
TEST(RealBackend, AttentionMatchesTheReference) {
  REQUIRE_GPU();
  for (int d : {64, 128})
    for (bool causal : {true, false}) {
      AttentionShape s{2, 4, 2, 200, 200, d, causal};
      const size_t qn = static_cast<size_t>(s.batch * s.heads * s.q_len * d);
      const size_t kn = static_cast<size_t>(s.batch * s.kv_heads * s.kv_len * d);
      const size_t rows = static_cast<size_t>(s.batch * s.heads * s.q_len);
      DeviceBuffer q(qn * 2), k(kn * 2), v(kn * 2), o(qn * 2), dout(qn * 2), lse(rows * 4), delta(rows * 4);
      DeviceBuffer dq(qn * 4), dk(kn * 4), dv(kn * 4), dq16(qn * 2), dk16(kn * 2), dv16(kn * 2);
      DeviceBuffer ro(qn * 4), rdq(qn * 4), rdk(kn * 4), rdv(kn * 4);
      fill_random(Elem::BF16, q.p, static_cast<int64_t>(qn), 1, 1.f, nullptr);
      fill_random(Elem::BF16, k.p, static_cast<int64_t>(kn), 2, 1.f, nullptr);
      fill_random(Elem::BF16, v.p, static_cast<int64_t>(kn), 3, 1.f, nullptr);
      fill_random(Elem::BF16, dout.p, static_cast<int64_t>(qn), 4, 1.f, nullptr);
      attention_forward(Elem::BF16, s, q.p, k.p, v.p, o.p, lse.as<float>(), nullptr);
      reference_attention(Elem::BF16, s, q.p, k.p, v.p, ro.as<float>(), nullptr);
      attention_backward(Elem::BF16, s, q.p, k.p, v.p, o.p, dout.p, lse.as<float>(), delta.as<float>(), dq.as<float>(),
                         dk.as<float>(), dv.as<float>(), dq16.p, dk16.p, dv16.p, nullptr);
      reference_attention_backward(Elem::BF16, s, q.p, k.p, v.p, dout.p, rdq.as<float>(), rdk.as<float>(),
                                   rdv.as<float>(), nullptr);
      CS_CUDA(cudaDeviceSynchronize());
      const std::string what = "d=" + std::to_string(d) + (causal ? " causal" : "");
      EXPECT_LT(max_relative_error(Elem::BF16, o.p, ro.as<float>(), static_cast<int64_t>(qn), 0.25), 3e-2) << what;
      EXPECT_LT(max_abs_error_f32(dq.as<float>(), rdq.as<float>(), static_cast<int64_t>(qn)), 8e-2) << what;
      EXPECT_LT(max_abs_error_f32(dk.as<float>(), rdk.as<float>(), static_cast<int64_t>(kn)), 8e-2) << what;
      EXPECT_LT(max_abs_error_f32(dv.as<float>(), rdv.as<float>(), static_cast<int64_t>(kn)), 8e-2) << what;
    }
}

// A small GPT, TP1 DP1 on one GPU.
constexpr const char* kSmallGpt =
    "cluster: {preset: dgx-h200, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, layers: 2, seq_len: 1024}\n"
    "parallel: {dp: 1, micro_batch: 2}\ntraining: {global_batch: 4}\n";

// The plan of a scenario given as text (every rank its own), run on the GPUs: three timed
// iterations after one warm-up.
std::pair<RealResult, TrainingPlan> run_scenario_text(const char* yaml, bool op_events = true) {
  const Scenario s = testing::scenario_from_text(yaml, "real-small");
  PlannerOptions po;
  po.use_symmetry = false;
  TrainingPlan tp = build_training_plan(s, po);
  RealOptions ro;
  ro.iterations = 3;
  ro.warmup = 1;
  ro.op_events = op_events;
  RealResult r = run_plan(tp.plan, ro);
  return {std::move(r), std::move(tp)};
}

// A small GPT trained TP1 DP1 on one GPU: every op runs, spans are ordered and timed.
TEST(RealBackend, RunsASmallTrainingPlan) {
  REQUIRE_GPU();
  const auto [r, tp] = run_scenario_text(kSmallGpt);
  ASSERT_EQ(r.spans.size(), tp.plan.programs[0].ops.size());
  EXPECT_EQ(r.iteration_s.size(), 3u);
  EXPECT_GT(r.median_iteration_s, 0.0);
  std::set<int> kinds;
  for (const SpanRecord& sp : r.spans) {
    EXPECT_LE(sp.start_ps, sp.end_ps);
    kinds.insert(static_cast<int>(tp.plan.programs[0].ops[sp.op].kind));
  }
  EXPECT_TRUE(kinds.count(static_cast<int>(OpKind::Gemm)) && kinds.count(static_cast<int>(OpKind::Attention)) &&
              kinds.count(static_cast<int>(OpKind::Memory)));
  // The GPU's clock and power over the timed iterations, where the driver's NVML is.
  ASSERT_EQ(r.clocks.size(), 1u);
  if (r.clocks[0].available) {
    EXPECT_GT(r.clocks[0].samples, 0);
    EXPECT_GT(r.clocks[0].sm_mhz_median, 100.0);
    EXPECT_LE(r.clocks[0].sm_mhz_median, r.clocks[0].sm_mhz_max);
    EXPECT_GT(r.clocks[0].power_w_mean, 10.0);
    EXPECT_GE(r.clocks[0].power_capped_fraction, 0.0);
    EXPECT_LE(r.clocks[0].power_capped_fraction, 1.0);
  }
}

// A memory op that stands for k small kernels (the router's, the small gradient adds) runs
// as k kernels, each its share of the bytes: the same bytes in 64 kernels take longer than
// in one by at least a microsecond a further kernel (each launch's ramp and tail), as the
// simulator charges a floor and a gap each.
TEST(RealBackend, MemoryOpOfKKernelsRunsEachKernel) {
  REQUIRE_GPU();
  Plan plan;
  plan.world_size = 1;
  plan.rank_program = {0};
  plan.rank_gpu = {0};
  plan.rank_groups.resize(1);
  plan.rank_groups[0].fill(-1);
  plan.mirror_of = {0};
  Program prog;
  prog.name = "k-kernels";
  prog.streams = {"compute"};
  for (const int64_t k : {1, 64}) {
    Op op = plan.make_op(k == 1 ? "one-kernel" : "sixty-four-kernels", OpKind::Memory, Phase::Forward, 0, 0, 0,
                         DType::BF16);
    op.bytes_read = op.bytes_written = int64_t{1} << 20;
    op.k = k;
    EXPECT_EQ(memory_kernels(op), k);
    prog.add(op, {});
  }
  plan.programs.push_back(std::move(prog));
  RealOptions ro;
  ro.iterations = 5;
  ro.warmup = 2;
  const RealResult r = run_plan(plan, ro);
  ASSERT_EQ(r.spans.size(), 2u);
  double seconds[2] = {0, 0};
  for (const SpanRecord& sp : r.spans) seconds[sp.op] = static_cast<double>(sp.end_ps - sp.start_ps) * 1e-12;
  EXPECT_GT(seconds[1], seconds[0] + 63 * 1e-6) << seconds[0] << " s for one kernel, " << seconds[1] << " for 64";
}

// --timing stream: no event between ops, each stream's end timed. The step has no spans
// and is no longer than with an event pair around every op (the events only add; 5 % for
// the board's noise).
TEST(RealBackend, StreamTimingRunsThePlanWithoutOpEvents) {
  REQUIRE_GPU();
  const auto [ops, plan] = run_scenario_text(kSmallGpt);
  const auto [stream, same] = run_scenario_text(kSmallGpt, false);
  EXPECT_EQ(ops.spans.size(), plan.plan.total_ops());
  EXPECT_TRUE(stream.spans.empty());
  ASSERT_EQ(stream.iteration_s.size(), 3u);
  EXPECT_GT(stream.median_iteration_s, 0.0);
  EXPECT_LT(stream.median_iteration_s, 1.05 * ops.median_iteration_s);
}

// On two GPUs the DP stream's all-reduces wait on the compute stream through untimed
// events, and the step still finishes.
TEST(RealBackend, StreamTimingWaitsAcrossStreamsOnTwoGpus) {
  if (device_count() < 2) GTEST_SKIP() << "fewer than two GPUs on this machine";
  const auto [dp, two] = run_scenario_text(
      "cluster: {preset: dgx-h200, gpus_per_node: 2}\nmodel: {preset: gpt3-1.3b, layers: 2, seq_len: 1024}\n"
      "parallel: {dp: 2, micro_batch: 2}\ntraining: {global_batch: 8}\n",
      false);
  EXPECT_TRUE(dp.spans.empty());
  EXPECT_GT(dp.median_iteration_s, 0.0);
  EXPECT_EQ(two.plan.world_size, 2);
}

// Without the driver's NVML (or without a GPU) the monitor has no samples and says so.
TEST(GpuMonitor, NoSamplesIsNotAnError) {
  GpuMonitor m({0}, 0.001);
  m.mark_begin();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  m.mark_end();
  const auto s = m.summary();
  ASSERT_EQ(s.size(), 1u);
  if (!s[0].available) {
    EXPECT_EQ(s[0].samples, 0);
  }
  if (device_count() == 0) {
    EXPECT_FALSE(s[0].available);
  }
}

// More ranks than GPUs is an error that says what to do, not a hang.
TEST(RealBackend, RefusesMoreRanksThanGpus) {
  REQUIRE_GPU();
  const int have = device_count();
  const Scenario s = testing::scenario_from_text(
      "cluster: {preset: dgx-h200, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 2}\nparallel: {dp: 16}\n",
      "real-too-many");
  if (have >= 16) GTEST_SKIP() << "this machine has 16 GPUs";
  PlannerOptions po;
  po.use_symmetry = false;
  const TrainingPlan tp = build_training_plan(s, po);
  try {
    run_plan(tp.plan, RealOptions{});
    FAIL();
  } catch (const RealBackendError& e) {
    EXPECT_NE(std::string(e.what()).find("16 ranks"), std::string::npos);
  }
}

}  // namespace
}  // namespace clustersim::real

namespace clustersim::real {
namespace {

// The attention kernels' rate on a training shape (GPT-3 1.3B, micro-batch 2): printed
// for docs/performance.md; the simulator's default assumes 55 % of peak.
TEST(RealBackend, AttentionRate) {
  REQUIRE_GPU();
  AttentionShape s{2, 16, 16, 2048, 2048, 128, true};
  const size_t qn = static_cast<size_t>(s.batch * s.heads * s.q_len * s.head_dim), kn = qn;
  const size_t rows = static_cast<size_t>(s.batch * s.heads * s.q_len);
  DeviceBuffer q(qn * 2), k(kn * 2), v(kn * 2), o(qn * 2), dout(qn * 2), lse(rows * 4), delta(rows * 4);
  DeviceBuffer dq(qn * 4), dk(kn * 4), dv(kn * 4), dq16(qn * 2), dk16(kn * 2), dv16(kn * 2);
  for (void* p : {q.p, k.p, v.p, dout.p}) fill_random(Elem::BF16, p, static_cast<int64_t>(qn), 5, 1.f, nullptr);
  cudaEvent_t a, b, c;
  CS_CUDA(cudaEventCreate(&a));
  CS_CUDA(cudaEventCreate(&b));
  CS_CUDA(cudaEventCreate(&c));
  const int reps = 5;
  attention_forward(Elem::BF16, s, q.p, k.p, v.p, o.p, lse.as<float>(), nullptr);
  CS_CUDA(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) attention_forward(Elem::BF16, s, q.p, k.p, v.p, o.p, lse.as<float>(), nullptr);
  CS_CUDA(cudaEventRecord(b));
  for (int i = 0; i < reps; ++i)
    attention_backward(Elem::BF16, s, q.p, k.p, v.p, o.p, dout.p, lse.as<float>(), delta.as<float>(), dq.as<float>(),
                       dk.as<float>(), dv.as<float>(), dq16.p, dk16.p, dv16.p, nullptr);
  CS_CUDA(cudaEventRecord(c));
  CS_CUDA(cudaEventSynchronize(c));
  float fwd_ms = 0, bwd_ms = 0;
  CS_CUDA(cudaEventElapsedTime(&fwd_ms, a, b));
  CS_CUDA(cudaEventElapsedTime(&bwd_ms, b, c));
  const double flops = 4.0 * s.batch * s.heads * static_cast<double>(s.q_len) * s.kv_len * s.head_dim / 2;  // causal
  std::printf(
      "attention b2 h16 s2048 d128 causal: forward %.3f ms (%.1f TFLOP/s), backward %.3f ms (%.1f TFLOP/s at 2.5x)\n",
      fwd_ms / reps, flops / (fwd_ms / reps * 1e-3) / 1e12, bwd_ms / reps, 2.5 * flops / (bwd_ms / reps * 1e-3) / 1e12);
  EXPECT_GT(fwd_ms, 0.f);
}

}  // namespace
}  // namespace clustersim::real

namespace clustersim::real {
namespace {

std::string shell(const std::string& cmd, int& code) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

// mpirun that works here (installed, and allowed to start processes as this user).
bool have_mpirun(std::string& launcher) {
  launcher = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe";
  int code = 0;
  shell(launcher + " -n 1 true", code);
  return code == 0;
}

// The clustersim binary the MPI tests launch: CLUSTERSIM_TEST_BINARY where set (a copy carried
// to a GPU machine without the build tree, beside its clustersim-real), else the build's own.
std::string clustersim_binary() {
  const char* env = std::getenv("CLUSTERSIM_TEST_BINARY");
  return env && *env ? env : CLUSTERSIM_BINARY;
}

std::string small_scenario() {
  const std::string path = testing::temp_dir("mpi") + "/s.yaml";
  std::ofstream(path)
      << "cluster: {preset: dgx-h200, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, layers: 2, seq_len: 1024}\n"
         "parallel: {dp: 1}\ntraining: {global_batch: 2}\n";
  return path;
}

// The MPI launch refuses a process count that does not match the plan, cleanly (no hang),
// with or without a GPU.
TEST(RealBackendMpi, WrongProcessCountIsAnError) {
#ifndef CLUSTERSIM_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#endif
  std::string mpirun;
  if (!have_mpirun(mpirun)) GTEST_SKIP() << "mpirun cannot start processes here";
  int code = 0;
  const std::string out =
      shell("timeout 120 " + mpirun + " -n 2 " + clustersim_binary() + " real " + small_scenario() + " --mpi", code);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("the plan has 1 ranks but mpirun started 2 processes"), std::string::npos) << out;
}

// One process per GPU: as far as one GPU allows, a one-rank plan through the MPI path.
TEST(RealBackendMpi, RunsUnderMpirun) {
  REQUIRE_GPU();
#ifndef CLUSTERSIM_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#endif
  std::string mpirun;
  if (!have_mpirun(mpirun)) GTEST_SKIP() << "mpirun cannot start processes here";
  int code = 0;
  const std::string out = shell("timeout 300 " + mpirun + " -n 1 " + clustersim_binary() + " real " + small_scenario() +
                                    " --mpi --iterations 2 --warmup 1 --json",
                                code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("\"iteration_time_s\""), std::string::npos) << out;
}

}  // namespace
}  // namespace clustersim::real

namespace clustersim::real {
namespace {

// What the input values do to a GEMM's rate (power draw sets the clocks): printed for
// the calibration notes.
TEST(RealBackend, GemmRateByInputScale) {
  REQUIRE_GPU();
  const int64_t m = 4096, n = 2048, k = 2048;
  DeviceBuffer a(m * k * 2), b(k * n * 2), c(m * n * 2);
  Gemm g;
  for (float scale : {1.0f, 0.5f, 0.05f, 0.0f}) {
    fill_random(Elem::BF16, a.p, m * k, 1, scale, nullptr);
    fill_random(Elem::BF16, b.p, k * n, 2, scale, nullptr);
    for (int i = 0; i < 20; ++i) g.run(DType::BF16, m, n, k, 1, a.p, b.p, c.p, nullptr);
    cudaEvent_t s, e;
    CS_CUDA(cudaEventCreate(&s));
    CS_CUDA(cudaEventCreate(&e));
    CS_CUDA(cudaEventRecord(s));
    for (int i = 0; i < 200; ++i) g.run(DType::BF16, m, n, k, 1, a.p, b.p, c.p, nullptr);
    CS_CUDA(cudaEventRecord(e));
    CS_CUDA(cudaEventSynchronize(e));
    float ms = 0;
    CS_CUDA(cudaEventElapsedTime(&ms, s, e));
    std::printf("gemm 4096x2048x2048 inputs scale %.2f: %.1f us, %.1f TFLOP/s\n", scale, ms * 1e3 / 200,
                2.0 * m * n * k * 200 / (ms * 1e-3) / 1e12);
  }
}

}  // namespace
}  // namespace clustersim::real

namespace clustersim::real {
namespace {

// A library path that does not exist: the loader says so (no throw, no crash), with or
// without a GPU, and with or without cuDNN's headers at build time.
TEST(CudnnAttention, LoaderFailsCleanlyWithoutTheLibrary) {
  const CudnnLoad l = probe_cudnn_library("/nonexistent/clustersim/libcudnn.so.9");
  EXPECT_FALSE(l.available);
  EXPECT_FALSE(l.reason.empty());
  EXPECT_EQ(l.version, 0u);
  std::printf("cuDNN from a missing path: %s\n", l.reason.c_str());
  // A file that is not cuDNN: loads (or not) but lacks the entry points.
  const CudnnLoad m = probe_cudnn_library("libm.so.6");
  EXPECT_FALSE(m.available);
  EXPECT_FALSE(m.reason.empty());
}

// Every tensor and operation of the forward and backward graphs finalizes, where cuDNN
// loads (no GPU needed: only the operation graph takes a handle).
TEST(CudnnAttention, OperationsFinalize) {
  const CudnnLoad& l = cudnn_library();
  if (!l.available) GTEST_SKIP() << "no cuDNN here: " << l.reason;
  std::printf("cuDNN %s\n", l.version_text.c_str());
  for (bool backward : {false, true})
    for (const AttentionShape& s :
         {AttentionShape{2, 8, 2, 256, 256, 128, true}, AttentionShape{1, 4, 4, 128, 128, 64, false}})
      EXPECT_EQ(cudnn_attention_check_operations(Elem::BF16, s, backward), "") << (backward ? "backward" : "forward");
}

TEST(CudnnAttention, ChoiceNames) {
  AttentionChoice c = AttentionChoice::Auto;
  EXPECT_TRUE(parse_attention_choice("own", c));
  EXPECT_EQ(c, AttentionChoice::Own);
  EXPECT_TRUE(parse_attention_choice("cudnn", c));
  EXPECT_EQ(c, AttentionChoice::Cudnn);
  EXPECT_TRUE(parse_attention_choice("auto", c));
  EXPECT_EQ(c, AttentionChoice::Auto);
  EXPECT_FALSE(parse_attention_choice("flash", c));
  EXPECT_EQ(attention_backend_name(AttentionBackend::Own).rfind("clustersim", 0), 0u);  // profile_warning's key
}

// ‖a − ref‖ / ‖ref‖ of n values, a in the element type (poisoned values give NaN: fail).
double rel_l2(Elem e, const void* a, const float* ref, size_t n) {
  std::vector<uint16_t> ha(n);
  std::vector<float> hr(n);
  CS_CUDA(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
  CS_CUDA(cudaMemcpy(hr.data(), ref, n * 4, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    float x;
    if (e == Elem::BF16) {
      const uint32_t bits = static_cast<uint32_t>(ha[i]) << 16;
      std::memcpy(&x, &bits, 4);
    } else {  // IEEE half, by hand
      const uint32_t h = ha[i], sign = (h >> 15) & 1, ex = (h >> 10) & 31, man = h & 1023;
      const float mag = ex == 0    ? std::ldexp(static_cast<float>(man), -24)
                        : ex == 31 ? (man ? std::nanf("") : INFINITY)
                                   : std::ldexp(static_cast<float>(man | 1024), static_cast<int>(ex) - 25);
      x = sign ? -mag : mag;
    }
    num += (static_cast<double>(x) - hr[i]) * (static_cast<double>(x) - hr[i]);
    den += static_cast<double>(hr[i]) * hr[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

#define REQUIRE_CUDNN()                                                                          \
  do {                                                                                           \
    REQUIRE_GPU();                                                                               \
    if (!cudnn_library().available) GTEST_SKIP() << "no cuDNN here: " << cudnn_library().reason; \
  } while (0)

// cuDNN's fused attention against the definition: MHA and GQA, head dims 64 and 128,
// causal and not, bf16 (and fp16 once); forward output and dQ, dK, dV, every output
// poisoned first. Through the dispatchers too: they pick cuDNN for both directions.
TEST(CudnnAttention, MatchesTheReference) {
  REQUIRE_CUDNN();
  std::printf("cuDNN %s from %s\n", cudnn_library().version_text.c_str(),
              std::getenv("CLUSTERSIM_CUDNN_LIBRARY") ? std::getenv("CLUSTERSIM_CUDNN_LIBRARY") : "libcudnn.so.9");
  struct Case {
    Elem e;
    AttentionShape s;
  };
  std::vector<Case> cases;
  for (int d : {64, 128}) {
    cases.push_back({Elem::BF16, {2, 4, 4, 256, 256, d, true}});
    cases.push_back({Elem::BF16, {1, 8, 2, 384, 384, d, true}});   // GQA, group 4
    cases.push_back({Elem::BF16, {2, 4, 1, 256, 256, d, false}});  // MQA, no mask
  }
  cases.push_back({Elem::FP16, {1, 8, 2, 256, 256, 128, true}});
  cases.push_back({Elem::BF16, {2, 4, 2, 200, 200, 64, true}});  // not a multiple of the tile: may be unsupported
  int ran = 0;
  for (const auto& [e, s] : cases) {
    const std::string what = std::string(e == Elem::BF16 ? "bf16" : "fp16") + " b" + std::to_string(s.batch) + " h" +
                             std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " s" +
                             std::to_string(s.q_len) + " d" + std::to_string(s.head_dim) + (s.causal ? " causal" : "");
    std::string why;
    const auto t0 = std::chrono::steady_clock::now();
    const bool supported = cudnn_attention_supported(e, s, &why);  // builds both plans
    const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!supported) {
      std::printf("%s: cuDNN does not run it: %s\n", what.c_str(), why.c_str());
      // Say what the other graph variant gives, for diagnosis.
      set_cudnn_graph_variant(1);
      std::printf("  with variant 1: forward %s\n  backward %s\n", cudnn_attention_plan_info(e, s, false).c_str(),
                  cudnn_attention_plan_info(e, s, true).c_str());
      set_cudnn_graph_variant(0);
      if (s.q_len % 64 == 0) ADD_FAILURE() << what << ": " << why;
      continue;
    }
    std::printf("%s: forward and backward plans built in %.1f ms\n  forward: %s\n  backward: %s\n", what.c_str(),
                build_ms, cudnn_attention_plan_info(e, s, false).c_str(),
                cudnn_attention_plan_info(e, s, true).c_str());
    const size_t qn = static_cast<size_t>(s.batch) * s.heads * s.q_len * s.head_dim;
    const size_t kn = static_cast<size_t>(s.batch) * s.kv_heads * s.kv_len * s.head_dim;
    const size_t rows = static_cast<size_t>(s.batch) * s.heads * s.q_len;
    DeviceBuffer q(qn * 2), k(kn * 2), v(kn * 2), o(qn * 2), dout(qn * 2), stats(rows * 4), rowsum(rows * 4);
    DeviceBuffer dq(qn * 4), dk(kn * 4), dv(kn * 4), dq16(qn * 2), dk16(kn * 2), dv16(kn * 2);
    DeviceBuffer ro(qn * 4), rdq(qn * 4), rdk(kn * 4), rdv(kn * 4);
    const uint64_t seed = 100 + static_cast<uint64_t>(ran) * 7;
    fill_random(e, q.p, static_cast<int64_t>(qn), seed, 1.f, nullptr);
    fill_random(e, k.p, static_cast<int64_t>(kn), seed + 1, 1.f, nullptr);
    fill_random(e, v.p, static_cast<int64_t>(kn), seed + 2, 1.f, nullptr);
    fill_random(e, dout.p, static_cast<int64_t>(qn), seed + 3, 1.f, nullptr);
    reference_attention(e, s, q.p, k.p, v.p, ro.as<float>(), nullptr);
    reference_attention_backward(e, s, q.p, k.p, v.p, dout.p, rdq.as<float>(), rdk.as<float>(), rdv.as<float>(),
                                 nullptr);
    for (int via_dispatch = 0; via_dispatch < 2; ++via_dispatch) {
      CS_CUDA(cudaMemset(o.p, 0xff, qn * 2));  // NaN in bf16 and fp16
      CS_CUDA(cudaMemset(dq16.p, 0xff, qn * 2));
      CS_CUDA(cudaMemset(dk16.p, 0xff, kn * 2));
      CS_CUDA(cudaMemset(dv16.p, 0xff, kn * 2));
      CS_CUDA(cudaMemset(stats.p, 0xff, rows * 4));
      if (via_dispatch) {
        set_attention_choice(AttentionChoice::Auto);
        EXPECT_EQ(run_attention_forward(e, s, q.p, k.p, v.p, o.p, stats.as<float>(), nullptr), AttentionBackend::Cudnn);
        EXPECT_EQ(
            run_attention_backward(e, s, q.p, k.p, v.p, o.p, dout.p, stats.as<float>(), rowsum.as<float>(),
                                   dq.as<float>(), dk.as<float>(), dv.as<float>(), dq16.p, dk16.p, dv16.p, nullptr),
            AttentionBackend::Cudnn);
      } else {
        ASSERT_TRUE(cudnn_attention_forward(e, s, q.p, k.p, v.p, o.p, stats.as<float>(), nullptr, &why)) << why;
        ASSERT_TRUE(cudnn_attention_backward(e, s, q.p, k.p, v.p, o.p, dout.p, stats.as<float>(), rowsum.as<float>(),
                                             dq.as<float>(), dq16.p, dk16.p, dv16.p, nullptr, &why))
            << why;
      }
      CS_CUDA(cudaDeviceSynchronize());
      const double eo = rel_l2(e, o.p, ro.as<float>(), qn), edq = rel_l2(e, dq16.p, rdq.as<float>(), qn),
                   edk = rel_l2(e, dk16.p, rdk.as<float>(), kn), edv = rel_l2(e, dv16.p, rdv.as<float>(), kn);
      std::printf("  %s: |err|/|ref| O %.2e dQ %.2e dK %.2e dV %.2e\n", via_dispatch ? "dispatch" : "direct", eo, edq,
                  edk, edv);
      const double tol = e == Elem::BF16 ? 2e-2 : 5e-3;
      EXPECT_LT(eo, tol) << what;
      EXPECT_LT(edq, 2 * tol) << what;
      EXPECT_LT(edk, 2 * tol) << what;
      EXPECT_LT(edv, 2 * tol) << what;
      EXPECT_LT(max_relative_error(e, o.p, ro.as<float>(), static_cast<int64_t>(qn), 0.25), 3e-2) << what;
    }
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

// cuDNN's rate on the shape RealBackend.AttentionRate times the own kernel on.
TEST(CudnnAttention, Rate) {
  REQUIRE_CUDNN();
  for (int d : {128, 64}) {
    AttentionShape s{2, 16, 16, 2048, 2048, d, true};
    std::string why;
    if (!cudnn_attention_supported(Elem::BF16, s, &why)) {
      ADD_FAILURE() << why;
      continue;
    }
    const size_t qn = static_cast<size_t>(s.batch * s.heads * s.q_len * s.head_dim), kn = qn;
    const size_t rows = static_cast<size_t>(s.batch * s.heads * s.q_len);
    DeviceBuffer q(qn * 2), k(kn * 2), v(kn * 2), o(qn * 2), dout(qn * 2), lse(rows * 4), rowsum(rows * 4);
    DeviceBuffer dq(qn * 4), dq16(qn * 2), dk16(kn * 2), dv16(kn * 2);
    for (void* p : {q.p, k.p, v.p, dout.p}) fill_random(Elem::BF16, p, static_cast<int64_t>(qn), 5, 1.f, nullptr);
    auto fwd = [&] { cudnn_attention_forward(Elem::BF16, s, q.p, k.p, v.p, o.p, lse.as<float>(), nullptr, &why); };
    auto bwd = [&] {
      cudnn_attention_backward(Elem::BF16, s, q.p, k.p, v.p, o.p, dout.p, lse.as<float>(), rowsum.as<float>(),
                               dq.as<float>(), dq16.p, dk16.p, dv16.p, nullptr, &why);
    };
    fwd();
    bwd();
    cudaEvent_t a, b, c;
    CS_CUDA(cudaEventCreate(&a));
    CS_CUDA(cudaEventCreate(&b));
    CS_CUDA(cudaEventCreate(&c));
    const int reps = 20;
    CS_CUDA(cudaEventRecord(a));
    for (int i = 0; i < reps; ++i) fwd();
    CS_CUDA(cudaEventRecord(b));
    for (int i = 0; i < reps; ++i) bwd();
    CS_CUDA(cudaEventRecord(c));
    CS_CUDA(cudaEventSynchronize(c));
    float fwd_ms = 0, bwd_ms = 0;
    CS_CUDA(cudaEventElapsedTime(&fwd_ms, a, b));
    CS_CUDA(cudaEventElapsedTime(&bwd_ms, b, c));
    const double flops = 4.0 * s.batch * s.heads * static_cast<double>(s.q_len) * s.kv_len * s.head_dim / 2;
    std::printf(
        "cuDNN attention b2 h16 s2048 d%d causal: forward %.3f ms (%.1f TFLOP/s), backward %.3f ms "
        "(%.1f TFLOP/s at 2.5x)\n",
        d, fwd_ms / reps, flops / (fwd_ms / reps * 1e-3) / 1e12, bwd_ms / reps,
        2.5 * flops / (bwd_ms / reps * 1e-3) / 1e12);
    EXPECT_GT(flops / (fwd_ms / reps * 1e-3) / 1e12, 150.0);  // the own kernel reaches ~58
  }
}

}  // namespace
}  // namespace clustersim::real
