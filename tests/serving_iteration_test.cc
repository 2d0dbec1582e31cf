// Serving iterations and their placement: disaggregated prefill, pipeline replicas, the
// iteration's plan and its cost, TurboMind's decode kernel, and decode time against batch.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <tuple>

#include "cost_models/power_cap.h"
#include "scenarios/error.h"
#include "sim/executor.h"
#include "sim/run.h"
#include "sim/serving.h"
#include "support/serving_helpers.h"
#include "support/temp_scenario.h"
#include "topology/topology.h"

namespace clustersim {
namespace {

using testing::scenario_from_text;

// Disaggregation: prefill and decode pools with the KV cache sent between them. Every
// request still finishes once with all its tokens; decodes no longer wait behind
// prefills (lower tail TPOT than colocated replicas); a KV cache that crosses nodes
// takes longer than one that stays on NVLink.
ServingResult serve_on(int nodes, int tp, const std::string& inference, const std::string& preset = "dgx-h100") {
  return run_serving(scenario_from_text("name: d\ncluster: {preset: " + preset + ", nodes: " + std::to_string(nodes) +
                                            "}\nmodel: {preset: llama3-70b}\nparallel: {tp: " + std::to_string(tp) +
                                            "}\ninference:\n" + inference,
                                        "serving"));
}

TEST(Serving, Disaggregation) {
  const std::string base = load("vllm", 6, 1500);
  // H200s: 70B at tp 2 leaves room for the decode pool's KV caches.
  const ServingResult split =
      serve_on(1, 2, base + "  disaggregation: {prefill_replicas: 2, decode_replicas: 2}\n", "dgx-h200");
  const ServingResult coloc = serve_on(1, 2, base + "  replicas: 4\n", "dgx-h200");
  EXPECT_EQ(metric(split, "preemptions"), 0);
  ASSERT_EQ(split.requests.size(), 1500u);
  double asked = 0;
  for (const ServedRequest& q : split.requests) {
    EXPECT_GE(q.finish, q.first_token);
    EXPECT_GE(q.replica, 2) << "decodes run on the decode pool";
    asked += static_cast<double>(q.output);
  }
  EXPECT_NEAR(metric(split, "throughput_tokens_per_s") * (split.makespan_s - split.requests.front().arrival), asked,
              1e-6 * asked);
  EXPECT_LT(metric(split, "tpot_s_p99"), 0.8 * metric(coloc, "tpot_s_p99"));
  EXPECT_GT(metric(split, "kv_transfer_s_mean"), 0);
  EXPECT_EQ(metric(coloc, "kv_transfer_s_mean"), 0);
  // Two nodes, tp 8: prefill replica on node 0, decode replica on node 1 (NICs).
  const ServingResult cross = serve_on(2, 8, base + "  disaggregation: {prefill_replicas: 1, decode_replicas: 1}\n");
  const ServingResult local = serve_on(1, 4, base + "  disaggregation: {prefill_replicas: 1, decode_replicas: 1}\n");
  const double per_byte_cross = metric(cross, "kv_transfer_s_mean") / metric(cross, "kv_transfer_bytes") * 8;
  const double per_byte_local = metric(local, "kv_transfer_s_mean") / metric(local, "kv_transfer_bytes") * 4;
  EXPECT_GT(per_byte_cross, 4 * per_byte_local);  // 50 GB/s of NIC per GPU against 450 GB/s of NVLink
}

// TensorRT-LLM without context chunking schedules a context whole inside max_num_tokens: a
// prompt longer than the budget could never run, and is refused where the budget is set; one
// as long as the budget runs once no decode holds any of it.
TEST(Serving, TrtllmWithoutChunkingRefusesAPromptOverItsBudget) {
  const std::string base =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: llama3-8b}\n"
      "inference:\n  scheduler: trtllm\n  requests: 8\n  arrivals: {process: closed, concurrency: 4}\n"
      "  prompt_tokens: {dist: fixed, value: 512}\n  output_tokens: {dist: fixed, value: 8}\n";
  try {
    run_serving(scenario_from_text(base + "  max_batch_tokens: 511\n", "serving"));
    ADD_FAILURE() << "a 512-token prompt over a 511-token budget ran";
  } catch (const InputError& e) {
    EXPECT_NE(
        std::string(e.what()).find(":10:21: error: request 0's prompt of 512 tokens is longer than max_num_tokens"),
        std::string::npos)
        << e.what();
  }
  const ServingResult chunked =
      run_serving(scenario_from_text(base + "  max_batch_tokens: 511\n  chunked_context: true\n", "serving"));
  EXPECT_EQ(chunked.requests.size(), 8u);
  // At the budget: the four first contexts run one at a time (each needs all 512 tokens),
  // each after the one before has finished decoding.
  const ServingResult whole = run_serving(scenario_from_text(base + "  max_batch_tokens: 512\n", "serving"));
  ASSERT_EQ(whole.requests.size(), 8u);
  for (size_t i = 1; i < whole.requests.size(); ++i)
    EXPECT_GE(whole.requests[i].first_token, whole.requests[i - 1].finish) << i;
}

// KV transfers contend like any other flow. Eight TP-1 prefill replicas on node 0 hand
// their KV to eight decode replicas on node 1 through one NIC per node: on the flow
// network concurrent transfers share it (processor sharing at ~60% load: about 2.5x the
// lone transfer), while the analytic network gives each transfer the whole NIC. With a
// NIC per GPU nothing is shared and the two agree.
TEST(Serving, KvTransfersContendOnTheFlowNetwork) {
  auto run = [](const std::string& model, int nics) {
    return run_serving(scenario_from_text(
        "name: t\ncluster: {preset: dgx-h100, nodes: 2, scale_out: {nics_per_node: " + std::to_string(nics) +
            "}}\nmodel: {preset: llama3-8b}\nnetwork_model: " + model +
            "\ninference:\n  scheduler: vllm\n  requests: 1500\n"
            "  arrivals: {process: poisson, rate_per_s: 60, seed: 4}\n"
            "  prompt_tokens: {dist: fixed, value: 4096}\n  output_tokens: {dist: fixed, value: 16}\n"
            "  disaggregation: {prefill_replicas: 8, decode_replicas: 8}\n",
        "serving"));
  };
  const double flow1 = metric(run("flow", 1), "kv_transfer_s_mean");
  const double analytic1 = metric(run("analytic", 1), "kv_transfer_s_mean");
  // 4096 tokens × 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 bytes over one 400 Gb/s NIC.
  const double lone = 4096.0 * 32 * 8 * 128 * 2 * 2 / 50e9;
  EXPECT_GT(analytic1, lone);
  EXPECT_LT(analytic1, 1.3 * lone);
  EXPECT_GT(flow1, 1.5 * analytic1);
  const double flow8 = metric(run("flow", 8), "kv_transfer_s_mean");
  const double analytic8 = metric(run("analytic", 8), "kv_transfer_s_mean");
  EXPECT_NEAR(flow8, analytic8, 0.05 * analytic8);
}

// Disaggregated pools of pipeline-parallel replicas: each stage's GPUs send the KV of their
// layers to the same stage of the decode replica, so the bytes sent are the whole
// prompt's KV, whatever the layout (Llama 3 70B: 80 layers × 8 KV heads × 128 × K, V ×
// 2 bytes per token).
TEST(Serving, DisaggregatedPipelineReplicasSendEveryLayersKv) {
  const std::string inference = load("vllm", 4, 300) + "  disaggregation: {prefill_replicas: 1, decode_replicas: 1}\n";
  double prompts = 0;
  for (const auto& [tp, pp] : {std::pair{8, 1}, std::pair{4, 2}}) {
    const ServingResult r = run_serving(scenario_from_text(
        "name: t\ncluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: llama3-70b}\nparallel: {tp: " +
            std::to_string(tp) + ", pp: " + std::to_string(pp) + "}\nnetwork_model: flow\ninference:\n" + inference,
        "serving"));
    ASSERT_EQ(r.requests.size(), 300u);
    prompts = 0;
    for (const ServedRequest& q : r.requests) {
      EXPECT_EQ(q.replica, 1) << "decodes run on the decode replica";
      prompts += static_cast<double>(q.prompt);
    }
    EXPECT_DOUBLE_EQ(metric(r, "kv_transfer_bytes"), prompts * 80 * 8 * 128 * 2 * 2) << "tp " << tp << " pp " << pp;
  }
}

// Pipeline-parallel replicas run pp virtual engines (pp batches in flight). A balanced
// pipeline serves like pp data-parallel replicas (plus the stage sends) while each GPU
// holds 1/pp of the weights: Llama 3 405B fits on TP 8 × PP 2 H100s, not on TP 8.
TEST(Serving, PipelineParallelReplicas) {
  const auto on = [](int pp, int replicas, const std::string& model) {
    return run_serving(scenario_from_text("name: p\ncluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: " + model +
                                              "}\nparallel: {tp: 8, pp: " + std::to_string(pp) +
                                              "}\ninference:\n  replicas: " + std::to_string(replicas) + "\n" +
                                              load("vllm", 8, 1500),
                                          "serving"));
  };
  const ServingResult pp2 = on(2, 1, "llama3-70b"), dp2 = on(1, 2, "llama3-70b");
  EXPECT_NEAR(metric(pp2, "throughput_tokens_per_s"), metric(dp2, "throughput_tokens_per_s"),
              0.03 * metric(dp2, "throughput_tokens_per_s"));
  EXPECT_GT(metric(pp2, "tpot_s_p50"), metric(dp2, "tpot_s_p50"));  // the stage-to-stage sends
  EXPECT_LT(metric(pp2, "tpot_s_p50"), 1.1 * metric(dp2, "tpot_s_p50"));
  EXPECT_GT(metric(pp2, "kv_blocks_per_replica"), metric(dp2, "kv_blocks_per_replica"));  // per engine: weights halved
  for (const ServedRequest& q : pp2.requests) EXPECT_EQ(q.replica, 0);
  EXPECT_THROW(on(1, 1, "llama3-405b"), InputError);
  EXPECT_NO_THROW(on(2, 1, "llama3-405b"));
}

// output.trace: one process per replica, an event per iteration, a KV counter; the same
// run gives the same bytes.
TEST(Serving, TraceHasAnEventPerIteration) {
  const std::string dir = testing::temp_dir("serving-trace-out");
  Scenario s = scenario_from_text(serving_yaml("  replicas: 2\n" + load("orca", 20, 300)), "serving");
  s.output_trace = dir + "/a.json";
  const ServingResult r = run_serving(s, true);
  write_serving_outputs(s, r);
  std::ifstream in(s.output_trace);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t events = 0, counters = 0;
  for (size_t at = 0; (at = text.find("\"name\":\"iteration\"", at)) != std::string::npos; ++at) ++events;
  for (size_t at = 0; (at = text.find("\"name\":\"kv_blocks_used\"", at)) != std::string::npos; ++at) ++counters;
  EXPECT_EQ(events, static_cast<size_t>(r.iterations));
  EXPECT_EQ(counters, events);
  EXPECT_NE(text.find("\"replica 1\""), std::string::npos);
  EXPECT_EQ(text.substr(text.size() - 4), "\n]}\n");
  s.output_trace = dir + "/b.json";
  write_serving_outputs(s, run_serving(s, true));
  std::ifstream in2(s.output_trace);
  const std::string again((std::istreambuf_iterator<char>(in2)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, again);
}

// The iteration-cost memo is what makes 100,000 requests cheap: most iterations repeat
// a batch signature already costed.
TEST(Serving, IterationCostsAreMemoized) {
  const ServingResult r = serve(load("vllm", 20, 3000));
  EXPECT_GT(r.memo_hits, 2 * r.memo_misses);
}

// An iteration is a Plan: every layer's kernels on every stage, two TP all-reduces per
// layer, a logits gather, one activation send per stage boundary; GEMM FLOPs are
// 2 · tokens · (the layers' weights) plus the logits.
TEST(Serving, IterationPlanHasEveryLayersKernels) {
  const ModelConfig& m = *find_model_preset("llama3-70b");
  ServingShape sh;
  sh.model = m;
  sh.tp = 4;
  sh.pp = 2;
  IterationBatch b;
  b.tokens = 300;
  b.emitting = 44;
  b.prefill = {{256, 0}};
  b.decode_context = 43 * 1000;
  const Plan plan = build_iteration_plan(sh, b, true);
  ASSERT_EQ(plan.world_size, 8);
  ASSERT_EQ(plan.programs.size(), 2u);
  int64_t all_reduces = 0, gathers = 0, sends = 0, recvs = 0, attention = 0, decode = 0;
  double gemm = 0;
  for (const Program& p : plan.programs)
    for (const Op& op : p.ops) {
      if (op.kind == OpKind::Collective) (op.collective == CollectiveKind::AllReduce ? all_reduces : gathers) += 1;
      sends += op.kind == OpKind::Send;
      recvs += op.kind == OpKind::Recv;
      attention += op.kind == OpKind::Attention;
      decode += plan.names[op.name] == "decode_attention";
      if (op.kind == OpKind::Gemm) gemm += op.flops;
    }
  EXPECT_EQ(all_reduces, 2 * m.layers);
  EXPECT_EQ(gathers, 1);
  EXPECT_EQ(sends, 1);
  EXPECT_EQ(recvs, 1);
  EXPECT_EQ(attention, m.layers);
  EXPECT_EQ(decode, m.layers);
  const double layer_weights = static_cast<double>(m.hidden * (m.heads + 2 * m.kv_heads) * m.head_dim() +
                                                   m.heads * m.head_dim() * m.hidden + 3 * m.hidden * m.ffn_hidden);
  const double expected = 2.0 * 300 * static_cast<double>(m.layers) * layer_weights / 4 +
                          2.0 * 44 * static_cast<double>(m.vocab * m.hidden) / 4;
  EXPECT_NEAR(gemm, expected, 1e-9 * expected);  // one GPU per stage, both stages
}

// A prefill chunk's queries are the last of its keys: query i sees the cached past and the
// chunk's first i + 1 tokens, so the chunk's score pairs are q · (past + q / 2), and a long
// prompt prefilled in chunks does all of a whole prefill's attention (and never less).
TEST(Serving, PrefillChunkAttendsToItsWholePast) {
  ServingShape sh;
  sh.model.layers = 32;
  sh.model.hidden = 4096;
  sh.model.heads = 32;
  sh.model.kv_heads = 8;
  sh.model.ffn_hidden = 14336;
  sh.model.vocab = 128256;
  sh.model.dtype = DType::BF16;
  sh.tp = 1;
  sh.kv_dtype = DType::BF16;
  auto flops = [&](int64_t tokens, int64_t past) {
    IterationBatch b;
    b.tokens = tokens;
    b.prefill.push_back(PrefillChunk{tokens, past});
    return iteration_attention_ops(sh, b).at(0).flops;
  };
  const double per_pair = 4.0 * 32 * 128;  // QK^T and PV: 2 · 2 FLOPs a head-dim element, 32 heads
  EXPECT_DOUBLE_EQ(flops(8192, 0), per_pair * 8192 * 4096);
  EXPECT_DOUBLE_EQ(flops(512, 65024), per_pair * 512 * (65024 + 256));
  double chunked = 0;
  for (int64_t past = 0; past < 65536; past += 8192) chunked += flops(8192, past);
  EXPECT_DOUBLE_EQ(chunked, flops(65536, 0));
}

// TurboMind v0.1.0a1's decode attention does QKᵀ and PV on CUDA cores. Per element (query
// head x cached token x dimension) it spends 4 FP32 operations, 4.5 issue slots and 31 more
// shared by a block's query heads, over the grid on every SM or over its longest block at
// 0.6 of one SM, after 9 µs of latency; and never less than its K/V stream. Against the kernel
// itself on one H200 (calibrate/measurements/decode-attention-turbomind-h200-2026-12-04, µs):
// Llama 2 70B at TP 4 (4 query heads a block) is bound by its math from batch 16 up and by
// its slices at batch 1; Llama 2 7B (MHA, 1 a block) by its stream.
TEST(Serving, TurboMindsDecodeKernelIsBoundByItsMathUnderGqa) {
  const GpuSpec& h200 = *find_gpu_preset("h200-sxm");
  const GpuSpec& a100 = *find_gpu_preset("a100-sxm-80gb");
  ModelConfig l70;
  l70.layers = 80;
  l70.hidden = 8192;
  l70.heads = 64;
  l70.kv_heads = 8;
  l70.ffn_hidden = 28672;
  l70.vocab = 32000;
  l70.dtype = DType::FP16;
  ModelConfig l7 = l70;
  l7.layers = 32;
  l7.hidden = 4096;
  l7.heads = l7.kv_heads = 32;
  auto decode_op = [](const ModelConfig& m, int64_t tp, int64_t batch, int64_t context, bool turbomind) {
    ServingShape sh;
    sh.model = m;
    sh.tp = tp;
    sh.kv_dtype = m.dtype;
    sh.turbomind_decode = turbomind;
    IterationBatch b;
    b.tokens = b.emitting = batch;
    b.decode_context = batch * (context + 1);
    b.decode_seqs = batch;
    b.decode_max_context = context + 1;
    return iteration_attention_ops(sh, b).at(0);
  };
  const ComputeProfile p;
  auto us = [&](const Op& op, const GpuSpec& g) { return compute_seconds(op, g, p) * 1e6; };
  struct Point {
    const ModelConfig* m;
    int64_t tp, batch, context;
    double measured_us;
  };
  for (const Point& x :
       {Point{&l70, 4, 1, 1152, 34.66}, Point{&l70, 4, 1, 3072, 35.46}, Point{&l70, 4, 16, 1152, 38.30},
        Point{&l70, 4, 32, 3072, 84.70}, Point{&l70, 4, 64, 3072, 108.64}, Point{&l70, 4, 128, 3072, 209.18},
        Point{&l7, 1, 64, 3072, 728.54}, Point{&l7, 1, 128, 3072, 1436.32}})
    EXPECT_NEAR(us(decode_op(*x.m, x.tp, x.batch, x.context, true), h200), x.measured_us, 0.12 * x.measured_us)
        << "batch " << x.batch << " context " << x.context;
  // The grid as TurboMind launches it: 4 heads a block under groups of 8; at batch 1 the
  // 3,073-token context in 4 slices of 1,024, one block each; from batch 16 up no split.
  const Op one = decode_op(l70, 4, 1, 3072, true);
  EXPECT_EQ(one.access, MemAccess::CudaCoreDecode);
  EXPECT_EQ(one.k, 4);
  EXPECT_EQ(one.n, 4 * 1 * 4);
  EXPECT_EQ(one.q_len, 1024);
  const Op many = decode_op(l70, 4, 64, 1152, true);
  EXPECT_EQ(many.n, 4 * 64);
  EXPECT_EQ(many.q_len, 1153);
  // On an A100 the 70B's math takes twice its stream (its FMAs at half Hopper's lanes an
  // SM); the 7B streams; the default kernel is its stream alone.
  const Op stream70 = decode_op(l70, 4, 64, 1152, false), stream7 = decode_op(l7, 1, 64, 1152, false);
  EXPECT_EQ(stream70.access, MemAccess::Streaming);
  EXPECT_GT(us(many, a100), 1.8 * us(stream70, a100));
  EXPECT_DOUBLE_EQ(us(decode_op(l7, 1, 64, 1152, true), a100), us(stream7, a100));
  // The math: 64 x 16 x 1,153 x 128 elements at 4 / 128 + (4.5 + 31 / 4) / 256 SM cycles
  // each (the A100's 19.5 TFLOP/s over 108 SMs at 1.41 GHz: 128 FP32 operations a cycle),
  // over 108 SMs at 1.41 GHz, after 9 µs.
  const double cycles = 4.0 / (a100.peak_fp32 / (108 * 1.41e9)) + (4.5 + 31.0 / 4) / 256;
  EXPECT_NEAR(cuda_core_decode_seconds(many, a100, p), 9e-6 + 64.0 * 16 * 1153 * 128 * cycles / (108 * 1.41e9), 1e-9);
}

// The engine's iteration time (memoized attention-free plan + attention kernels) is the
// whole plan's time on the executor, for TP, PP and a mixed batch; also where the power
// cap binds (a long prefill), the iteration being one window of the controller.
TEST(Serving, IterationTimeIsThePlansTime) {
  for (const auto& [tp, pp, prefill] : {std::tuple{1, 1, 256}, std::tuple{8, 1, 256}, std::tuple{2, 2, 256},
                                        std::tuple{8, 1, 8192}, std::tuple{2, 2, 4096}}) {
    const Scenario s = scenario_from_text(
        "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-70b}\nparallel: {tp: " +
            std::to_string(tp) + ", pp: " + std::to_string(pp) + "}\ninference: {requests: 1}\n",
        "serving");
    IterationBatch b;
    b.tokens = 2 * prefill + 37;
    b.emitting = 38;
    b.prefill = {{prefill, 0}, {prefill, 1024}};
    b.decode_context = 37 * 8000;
    ServingShape sh;
    sh.model = s.model;
    sh.tp = tp;
    sh.pp = pp;
    sh.weight_dtype = sh.kv_dtype = s.model.dtype;
    sh.sampler = ServingShape::Sampler::VllmV0;  // the default scheduler's (vllm), inference.sampler auto
    Topology topo(s.cluster);
    ExecOptions eo;
    apply_calibration(s, eo.compute, eo.network);  // the engine's profile: its replica's slowest board
    eo.timed_kernels = true;                       // and its kernel costs (sim/serving.cc)
    const ExecResult r = execute_plan(build_iteration_plan(sh, b, true), topo, eo);
    const double whole = r.makespan.seconds();
    const double engine = serving_iteration_seconds(s, b);
    // With stages, the engine takes one clock for all stages' kernels together, the executor one
    // per stage's GPU: where the cap binds they part by what the first stage's embedding and
    // the last one's output layer change in each mix.
    const double tolerance = pp > 1 ? 1e-5 : 1e-9;
    EXPECT_NEAR(engine, whole, 1e-9 + tolerance * whole) << "tp " << tp << " pp " << pp << " prefill " << prefill;
    if (prefill == 8192) {
      EXPECT_LT(r.power_clock, 0.95);  // the cap binds, and both apply it alike
    }
    // Attention is a real part of it: leaving it out is measurably faster.
    const double dense = execute_plan(build_iteration_plan(sh, b, false), topo, eo).makespan.seconds();
    if (prefill == 256) {
      EXPECT_LT(dense, 0.9 * whole);
    }
  }
}

// A decode iteration never gets faster as its batch grows (Llama 3 70B, TP 8, defaults):
// one more request adds a GEMM row, its KV reads and its logits, never fewer tile waves.
TEST(Serving, DecodeIterationTimeIsMonotonicInBatchSize) {
  const Scenario s = scenario_from_text(
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-70b}\nparallel: {tp: 8}\n"
      "inference: {requests: 1}\n",
      "serving");
  double prev = 0;
  for (int64_t batch = 1; batch <= 300; ++batch) {
    IterationBatch b;
    b.tokens = b.emitting = batch;
    b.decode_context = batch * 2048;
    const double t = serving_iteration_seconds(s, b);
    ASSERT_GE(t, prev) << "batch " << batch;
    prev = t;
  }
}

}  // namespace
}  // namespace clustersim
