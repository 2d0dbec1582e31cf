// Fidelity of the rest of each stack's step: rotary embeddings, context parallelism, dropout's
// random numbers, training metrics, unpadding, Megatron's own layer and its gradient checks.
#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "plan/training_planner.h"
#include "sim/executor.h"
#include "sim/run.h"
#include "support/plan_queries.h"
#include "support/temp_scenario.h"
#include "support/training_helpers.h"

namespace clustersim {
namespace {

using testing::scenario_from_text;

// Rotary models run the rotary embedding between the QKV GEMM and attention on each TP
// rank's query and key heads: Transformer Engine's fused kernel reads and writes each
// element once, the unfused chain its measured copy-rate passes; GQA copies the query out of the
// grouped layout first; the backward runs the same passes on the gradients and then
// concatenates the three QKV gradients. A learned position table runs none of it.
TEST(Fidelity, RotaryEmbeddingRunsOnTheQueryAndKeyHeads) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: M, layers: 2, seq_len: 4096}\n"
      "parallel: {tp: 4, dp: 2}\ntraining: {global_batch: 2, rope_fusion: F}\n";
  struct Seen {
    double rotary_read = 0, rotary_written = 0, backward_read = 0, reshape = 0, cat = 0;
    int rotary = 0, backward = 0;
  };
  auto seen = [](const TrainingPlan& p) {
    Seen s;
    for (const Op& op : p.plan.programs[0].ops) {
      if (op.layer != 0) continue;
      const std::string& name = p.plan.names[op.name];
      if (name == "rotary") {
        ++s.rotary;
        s.rotary_read = static_cast<double>(op.bytes_read);
        s.rotary_written = static_cast<double>(op.bytes_written);
      }
      if (name == "rotary-backward") {
        ++s.backward;
        s.backward_read = static_cast<double>(op.bytes_read);
      }
      if (name == "query-reshape") s.reshape = static_cast<double>(op.bytes_written);
      if (name == "qkv-grad-cat") s.cat = static_cast<double>(op.bytes_written);
    }
    return s;
  };
  // Llama 3 70B: 64 query heads and 8 K/V heads of 128, 16 and 2 on each of 4 TP ranks;
  // 4,096 tokens a micro-batch in BF16.
  const double tokens = 4096, d = 128, q = tokens * 16 * d * 2, k = tokens * 2 * d * 2;
  const Scenario fused = scenario_from_text(filled(y, {{"M", "llama3-70b"}, {"F", "true"}}), "fused");
  const Seen f = seen(build_training_plan(fused));
  EXPECT_EQ(f.rotary, 1);
  EXPECT_EQ(f.backward, 1);
  EXPECT_DOUBLE_EQ(f.rotary_read, q + k);
  EXPECT_DOUBLE_EQ(f.rotary_written, q + k);
  EXPECT_DOUBLE_EQ(f.backward_read, q + k);
  EXPECT_NEAR(f.reshape, 2.3 * q, 1.0);  // GQA: the query gathered out of the grouped layout, 2.3 copies' time
  EXPECT_DOUBLE_EQ(f.cat, q + 2 * k);    // dQ, dK, dV into one QKV gradient
  const Seen u = seen(build_training_plan(scenario_from_text(filled(y, {{"M", "llama3-70b"}, {"F", "false"}}), "u")));
  // Unfused: the chain's measured time as copy-rate passes, 28.5 forward and 30 backward.
  EXPECT_DOUBLE_EQ(u.rotary_read + u.rotary_written, 28.5 * (q + k));
  EXPECT_DOUBLE_EQ(u.backward_read, 16.5 * (q + k));
  // Full recompute runs the forward's rotary again in the backward.
  const Seen r = seen(build_training_plan(scenario_from_text(
      filled(y, {{"M", "llama3-70b"}, {"F", "true"}, {"global_batch: 2", "global_batch: 2, recompute: full"}}), "r")));
  EXPECT_EQ(r.rotary, 2);
  // Multi-head attention needs no reshape copy; a learned position table, no rotary.
  const Seen mha =
      seen(build_training_plan(scenario_from_text(filled(y, {{"M", "llama3-8b, kv_heads: 32"}, {"F", "true"}}), "m")));
  EXPECT_EQ(mha.rotary, 1);
  EXPECT_EQ(mha.reshape, 0);
  const Seen gpt = seen(build_training_plan(scenario_from_text(filled(y, {{"M", "gpt3-1.3b"}, {"F", "true"}}), "g")));
  EXPECT_EQ(gpt.rotary + gpt.backward, 0);
  EXPECT_EQ(gpt.cat, 0);
}

// Context parallelism as Transformer Engine's P2P ring runs it: K and V packed for the ring
// (and, forward, the halves the load-balanced split leaves each step copied), the
// per-step outputs corrected into one, and in the backward each block's gradients
// concatenated and accumulated before the next send. Bytes in the rank's Q and K+V units.
TEST(Fidelity, ContextParallelRingPacksCorrectsAndAccumulates) {
  const Scenario s = scenario_from_text(
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b, layers: 2, seq_len: 8192}\n"
      "parallel: {tp: 2, cp: 4, dp: 1}\ntraining: {global_batch: 1}\n",
      "cp");
  const TrainingPlan p = build_training_plan(s);
  // 2,048 tokens a rank; 16 query heads and 4 K/V heads of 128 a TP rank; BF16.
  const double Q = 2048.0 * 16 * 128 * 2, KV = 2 * 2048.0 * 4 * 128 * 2, c = 3;
  std::vector<std::pair<double, double>> pack, acc;
  double merge_read = -1, merge_written = -1;
  for (const Op& op : p.plan.programs[0].ops) {
    if (op.layer != 0) continue;
    const std::string& name = p.plan.names[op.name];
    const auto rw = std::make_pair(static_cast<double>(op.bytes_read), static_cast<double>(op.bytes_written));
    if (name == "cp-kv-pack") pack.push_back(rw);
    if (name == "cp-grad-accumulate") acc.push_back(rw);
    if (name == "attention-merge") merge_read = rw.first, merge_written = rw.second;
  }
  ASSERT_EQ(pack.size(), 2u);  // forward and backward
  EXPECT_NEAR(pack[0].first, KV + 0.25 * c * (Q + KV), 1);
  EXPECT_NEAR(pack[1].first, KV, 1);
  const double corr = 1 + 0.75 * c;  // whole-query corrections
  EXPECT_NEAR(merge_read, 2 * corr * Q, 1);
  EXPECT_NEAR(merge_written, (corr + 1) * Q, 1);
  ASSERT_EQ(acc.size(), 4u);  // one per block of the backward ring
  EXPECT_NEAR(acc[0].first, 2 * KV + Q, 1);
  for (size_t i = 1; i < acc.size(); ++i) {
    EXPECT_NEAR(acc[i].first, 2.5 * KV + 2.25 * Q, 1);
    EXPECT_NEAR(acc[i].second, 1.75 * KV + 1.5 * Q, 1);
  }
}

// parallel.cp_comm: all-gather gathers K and V over the CP group and runs one attention
// of the rank's s/cp queries over all s keys, with the same score pairs as the ring's cp
// blocks; the backward gathers again and reduce-scatters the K/V gradients. No ring sends.
TEST(Fidelity, AllGatherContextParallelGathersKvOnceAndMatchesTheRingsWork) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b, layers: 2, seq_len: 8192}\n"
      "parallel: {tp: 2, cp: 4, dp: 1, cp_comm: C}\ntraining: {global_batch: 1}\n";
  struct Seen {
    double attention_flops = 0, gathered = 0, scattered = 0;
    int attention = 0, sends = 0, gathers = 0;
  };
  auto seen = [](const TrainingPlan& p) {
    Seen s;
    for (const Op& op : p.plan.programs[0].ops) {
      if (op.layer != 0) continue;
      const std::string& name = p.plan.names[op.name];
      if (op.kind == OpKind::Attention && op.phase == Phase::Forward) {
        ++s.attention;
        s.attention_flops += op.flops;
      }
      if (op.kind == OpKind::Send) ++s.sends;
      if (op.kind == OpKind::Collective && op.group == GroupKind::CP && op.collective == CollectiveKind::AllGather) {
        ++s.gathers;
        s.gathered = static_cast<double>(op.bytes);
      }
      if (name == "cp-dkv-reduce-scatter") s.scattered = static_cast<double>(op.bytes);
    }
    return s;
  };
  const Seen ring = seen(build_training_plan(scenario_from_text(filled(y, {{"C", "p2p"}}), "ring")));
  const Seen ag = seen(build_training_plan(scenario_from_text(filled(y, {{"C", "all-gather"}}), "ag")));
  EXPECT_EQ(ring.attention, 4);  // cp blocks
  EXPECT_GT(ring.sends, 0);
  EXPECT_EQ(ring.gathers, 0);
  EXPECT_EQ(ag.attention, 1);
  EXPECT_EQ(ag.sends, 0);
  EXPECT_EQ(ag.gathers, 2);  // forward, and again in the backward
  EXPECT_NEAR(ag.attention_flops, ring.attention_flops, 1e-6 * ring.attention_flops);
  const double kv = 2.0 * 2048 * 4 * 128 * 2;  // a rank's K and V: 2,048 tokens, 4 K/V heads of 128, BF16
  EXPECT_DOUBLE_EQ(ag.gathered, 4 * kv);
  EXPECT_DOUBLE_EQ(ag.scattered, 4 * kv);
  EXPECT_THROW(build_training_plan(scenario_from_text(filled(y, {{"C", "ulysses"}}), "bad")), InputError);
}

// Unfused attention's dropout is PyTorch's native_dropout: its forward draws Philox
// numbers per score element, 31 FP32-op slots each beyond its stream (measured on an
// H200), so on an A100 it takes its bytes' time plus the draws at the A100's FP32 rate;
// the backward only streams.
TEST(Fidelity, UnfusedAttentionDropoutDrawsItsRandomNumbersPerElement) {
  const Scenario s = scenario_from_text(
      "name: t\ncluster: {preset: dgx-a100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, layers: 1, "
      "dtype: fp16}\ntraining: {global_batch: 1, attention: unfused}\n",
      "d");
  const TrainingPlan p = build_training_plan(s);
  const GpuSpec& a100 = *find_gpu_preset("a100-sxm-80gb");
  const ComputeProfile prof;
  int forward = 0, backward = 0;
  for (const Op& op : p.plan.programs[0].ops) {
    const std::string& name = p.plan.names[op.name];
    if (name == "attention-dropout") {
      ++forward;
      const double scores = 16.0 * 2048 * 2048;  // one sequence, 16 heads, 2,048 x 2,048
      EXPECT_EQ(op.access, MemAccess::RandomMask);
      EXPECT_DOUBLE_EQ(static_cast<double>(op.m), scores);
      Op stream = op;
      stream.access = MemAccess::Streaming;
      EXPECT_NEAR(compute_seconds(op, a100, prof) - compute_seconds(stream, a100, prof),
                  scores * prof.dropout_rng_ops_per_element / a100.alu_slot_rate(), 1e-12);
    }
    if (name == "attention-dropout-backward") {
      ++backward;
      EXPECT_EQ(op.access, MemAccess::Streaming);
    }
  }
  EXPECT_EQ(forward, 1);
  EXPECT_EQ(backward, 1);
  // The hidden dropouts, fused into the residual adds, draw theirs too: one per element of
  // the layer's 2,048 x 2,048 activations, twice a layer.
  int hidden = 0;
  for (const Op& op : p.plan.programs[0].ops) {
    const std::string& name = p.plan.names[op.name];
    if (name != "residual-layernorm-2" && name != "residual-add") continue;
    ++hidden;
    EXPECT_EQ(op.access, MemAccess::RandomMask) << name;
    EXPECT_DOUBLE_EQ(static_cast<double>(op.m), 2048.0 * 2048) << name;
  }
  EXPECT_EQ(hidden, 2);
  // Without dropout nothing is drawn.
  const Scenario none = scenario_from_text(
      "name: t\ncluster: {preset: dgx-a100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, layers: 1, "
      "dtype: fp16, dropout: 0}\ntraining: {global_batch: 1, attention: unfused}\n",
      "n");
  const TrainingPlan quiet = build_training_plan(none);  // named: a range-for over a temporary's member dangles
  for (const Op& op : quiet.plan.programs[0].ops) EXPECT_NE(op.access, MemAccess::RandomMask);
}

// Composer updates MPT's two training metrics after each micro-batch's backward, each a
// cross-entropy under autocast over the logits: log_softmax on the BF16 logits with an FP32
// output, measured at 5.19 ms for 24,576 x 50,368 logits on one H200
// (calibrate/measurements/train-metrics-h200-2026-12-04), after the backward and once a metric.
TEST(Fidelity, TrainMetricsRunACrossEntropyOverTheLogitsAfterEachBackward) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h200, nodes: 1, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, layers: 1, "
      "hidden: 2048, heads: 16, ffn_hidden: 8192, vocab: 50368, seq_len: 2048, dropout: 0}\n"
      "parallel: {micro_batch: 12}\ntraining: {global_batch: 24, framework: F, train_metrics: N}\n";
  const TrainingPlan p = build_training_plan(scenario_from_text(filled(y, {{"F", "pytorch-eager"}, {"N", "2"}}), "m"));
  const GpuSpec& h200 = *find_gpu_preset("h200-sxm");
  const ComputeProfile prof;
  const auto& ops = p.plan.programs[0].ops;
  int softmax = 0;
  size_t last_backward = 0, first_metric = ops.size();
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::string& name = p.plan.names[ops[i].name];
    if (ops[i].phase == Phase::Backward) last_backward = i;
    if (name != "metric-log-softmax") continue;
    ++softmax;
    first_metric = std::min(first_metric, i);
    EXPECT_EQ(ops[i].access, MemAccess::MixedSoftmax);
    const double logits = 24576.0 * 50432;  // the vocabulary padded to a multiple of 128
    EXPECT_DOUBLE_EQ(static_cast<double>(ops[i].bytes_read), logits * 2 * 3);
    EXPECT_DOUBLE_EQ(static_cast<double>(ops[i].bytes_written), logits * 4);
    EXPECT_NEAR(compute_seconds(ops[i], h200, prof), 5.19e-3, 0.1 * 5.19e-3);
  }
  EXPECT_EQ(softmax, 4);                   // two metrics, two micro-batches
  EXPECT_LT(first_metric, last_backward);  // the first micro-batch's come before the second's backward
  bool after_own_backward = false;
  for (size_t i = first_metric; i-- > 0;)
    if (ops[i].phase == Phase::Backward) {
      after_own_backward = true;
      break;
    }
  EXPECT_TRUE(after_own_backward);
  EXPECT_THROW(build_training_plan(scenario_from_text(filled(y, {{"F", "megatron"}, {"N", "2"}}), "bad")), InputError);
}

// Once a batch Composer computes each training metric, and torchmetrics syncs each of its
// states over every rank: a barrier (an all-reduce and a host wait), n fills, an all-gather
// of n elements and n copies, the fills and copies dispatched one by one by the host
// (compute.host_op, 12 us: calibrate/measurements/metric-sync-h200-2026-12-04). MPT's two
// metrics hold two states each, so a step pays 4 x 2n dispatches: 49 ms at 512 ranks.
TEST(Fidelity, TrainMetricsSyncEachStateOverEveryRankOnceAStep) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: NODES}\nmodel: {preset: gpt3-1.3b, layers: 1, hidden: 2048, "
      "heads: 16, ffn_hidden: 8192, vocab: 50368, seq_len: 2048, dropout: 0}\n"
      "parallel: {dp: DP, zero_stage: 3, micro_batch: 4}\ntraining: {global_batch: GB, framework: pytorch-eager, "
      "train_metrics: N}\n";
  auto scenario = [&](int dp, int n) {
    return scenario_from_text(filled(y, {{"NODES", std::to_string(dp / 8)},
                                         {"DP", std::to_string(dp)},
                                         {"GB", std::to_string(4 * dp)},
                                         {"N", std::to_string(n)}}),
                              "metrics");
  };
  const GpuSpec& h100 = *find_gpu_preset("h100-sxm");
  const ComputeProfile prof;
  const TrainingPlan p = build_training_plan(scenario(512, 2));
  int barriers = 0, gathers = 0, dispatches = 0;
  for (const Op& op : p.plan.programs[0].ops) {
    const std::string& name = p.plan.names[op.name];
    if (name == "metric-barrier") ++barriers;
    if (name == "metric-allgather") {
      ++gathers;
      EXPECT_EQ(op.collective, CollectiveKind::AllGather);
      EXPECT_EQ(op.bytes, 4 * 512);
    }
    if (name == "metric-gather-fills" || name == "metric-gather-copies") {
      ++dispatches;
      EXPECT_EQ(op.access, MemAccess::HostSync);
      EXPECT_EQ(op.k, 512);
      EXPECT_DOUBLE_EQ(compute_seconds(op, h100, prof), 512 * 12e-6);
    }
  }
  EXPECT_EQ(barriers, 4);
  EXPECT_EQ(gathers, 4);
  EXPECT_EQ(dispatches, 8);
  // From 64 to 512 ranks the step grows by the 8 x 448 more dispatches (43 ms: the copies
  // outlast the all-gather they follow), give or take the collectives' latency and the
  // gradient traffic the metrics' update hides; without metrics nothing is synced.
  auto step = [&](int dp, int n) { return run_training(scenario(dp, n)).exec.makespan.seconds(); };
  const double grow_with = step(512, 2) - step(64, 2), grow_without = step(512, 0) - step(64, 0);
  EXPECT_NEAR(grow_with - grow_without, 8 * 448 * 12e-6, 5e-3);
  const TrainingPlan off = build_training_plan(scenario(8, 0));
  for (const Op& op : off.plan.programs[0].ops)
    EXPECT_EQ(off.plan.names[op.name].rfind("metric-", 0), std::string::npos);
}

// MPT's flash path wraps the variable-length kernel in flash-attn's bert_padding: three
// unpad_input calls (two host synchronizations each, then a row gather of q, k and v),
// pad_input on the output (zeros, index_put), and in the backward a row gather of the
// output's gradient and zeros + scatter_ of q, k and v's. At MPT-1B's shape on an H200
// (12 x 2,048 tokens, 16 heads of 128) the parts measured 1.39 ms a layer, forward and
// backward, and the layer step grew by 1.36 ms (calibrate/measurements/mpt-unpad-h200-2026-12-04).
TEST(Fidelity, UnpadAroundFlashAttentionGathersScattersAndSynchronizes) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h200, nodes: 1, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, layers: 1, "
      "hidden: 2048, heads: 16, ffn_hidden: 8192, seq_len: 2048, dropout: 0}\nparallel: {micro_batch: 12}\n"
      "training: {global_batch: 12, framework: F, attention: A, attention_padding: P}\n";
  const TrainingPlan p = build_training_plan(
      scenario_from_text(filled(y, {{"F", "pytorch-eager"}, {"A", "flash2"}, {"P", "unpad"}}), "unpad"));
  const GpuSpec& h200 = *find_gpu_preset("h200-sxm");
  const ComputeProfile prof;
  const double u = 12.0 * 2048 * 2048 * 2;  // one of q, k, v or the output: 100.7 MB in BF16
  std::map<std::string, const Op*> ops;
  double added = 0;
  for (const Op& op : p.plan.programs[0].ops) {
    const std::string& name = p.plan.names[op.name];
    if (name.rfind("unpad-", 0) != 0 && name.rfind("pad-output", 0) != 0) continue;
    EXPECT_EQ(ops.count(name), 0u) << name;
    ops[name] = &op;
    added += compute_seconds(op, h200, prof);
  }
  ASSERT_EQ(ops.size(), 5u);
  EXPECT_EQ(ops["unpad-mask"]->access, MemAccess::HostSync);
  EXPECT_EQ(ops["unpad-mask"]->m, 6);
  EXPECT_DOUBLE_EQ(compute_seconds(*ops["unpad-mask"], h200, prof), 6 * prof.host_sync_s);
  EXPECT_DOUBLE_EQ(static_cast<double>(ops["unpad-qkv"]->bytes_read), 3 * u);
  EXPECT_DOUBLE_EQ(static_cast<double>(ops["unpad-qkv"]->bytes_written), 3 * u);
  EXPECT_EQ(ops["pad-output"]->access, MemAccess::IndexPut);
  EXPECT_DOUBLE_EQ(static_cast<double>(ops["pad-output"]->bytes_written), 2 * u);
  EXPECT_DOUBLE_EQ(static_cast<double>(ops["pad-output"]->m), u / 2);
  EXPECT_DOUBLE_EQ(static_cast<double>(ops["pad-output-backward"]->bytes_read), u);
  EXPECT_EQ(ops["unpad-qkv-backward"]->access, MemAccess::Scatter);
  EXPECT_DOUBLE_EQ(static_cast<double>(ops["unpad-qkv-backward"]->bytes_written), 6 * u);
  EXPECT_DOUBLE_EQ(static_cast<double>(ops["unpad-qkv-backward"]->m), 3 * u / 2);
  EXPECT_NEAR(added, 1.36e-3, 0.15 * 1.36e-3);
  // The step grows by the added ops' time: they sit on the layer's one stream. (On an A100,
  // which has no power model: on an H200 the host's waits also let the capped clock rise.)
  const std::string a100 = filled(y, {{"dgx-h200", "dgx-a100"}, {"F", "pytorch-eager"}, {"A", "flash2"}});
  const TrainingPlan pa = build_training_plan(scenario_from_text(filled(a100, {{"P", "unpad"}}), "a100"));
  double added_a100 = 0;
  for (const Op& op : pa.plan.programs[0].ops) {
    const std::string& name = pa.plan.names[op.name];
    if (name.rfind("unpad-", 0) == 0 || name.rfind("pad-output", 0) == 0)
      added_a100 += compute_seconds(op, *find_gpu_preset("a100-sxm-80gb"), prof);
  }
  const double grown = iteration_s(filled(a100, {{"P", "unpad"}})) - iteration_s(filled(a100, {{"P", "none"}}));
  EXPECT_NEAR(grown, added_a100, 0.01 * added_a100);
  // bert_padding is called from PyTorch around a FlashAttention kernel, nowhere else.
  for (auto [f, a] : {std::pair{"megatron", "flash"}, std::pair{"pytorch-eager", "unfused"}})
    EXPECT_THROW(build_training_plan(scenario_from_text(filled(y, {{"F", f}, {"A", a}, {"P", "unpad"}}), "bad")),
                 InputError);
}

// Megatron-LM's own layer of 2021-22 (training.transformer_impl: local) runs kernels that
// Transformer Engine's modules fuse away: the attention context made contiguous after its
// permute (and its gradient before the batched GEMMs), the QKV gradient concatenated from its
// strided parts, each bias gradient a sum over the tokens, and the GeLU as a TorchScript-fused
// tanh kernel whose arithmetic costs beyond its stream. At GPT-1.3B (h 2,048, 16 heads of 128)
// with one sequence of 2,048 tokens and TP 2: per GPU 2,048 x 1,024 context elements, 2,048 x
// 3,072 QKV gradient elements, 2,048 x 4,096 GeLU elements.
TEST(Fidelity, MegatronLocalLayerCopiesItsStridedTensorsAndSumsItsBiasGradients) {
  auto text = [](const char* impl) {
    return std::string(
               "name: t\ncluster: {preset: dgx-a100, nodes: 1, gpus_per_node: 2}\nmodel: {preset: gpt3-1.3b, "
               "layers: 1, dtype: fp16}\nparallel: {tp: 2}\ntraining: {global_batch: 1, attention: unfused, "
               "recompute: full, transformer_impl: ") +
           impl + "}\n";
  };
  const TrainingPlan local = build_training_plan(scenario_from_text(text("local"), "l"));
  const GpuSpec& a100 = *find_gpu_preset("a100-sxm-80gb");
  const ComputeProfile prof;
  std::map<std::string, int> count;
  const double tokens = 2048, ctx = tokens * 1024, qkv = tokens * 3072, gelu = tokens * 4096;
  for (const Op& op : local.plan.programs[0].ops) {
    const std::string& name = local.plan.names[op.name];
    ++count[name];
    Op stream = op;
    stream.access = MemAccess::Streaming;
    const double extra = compute_seconds(op, a100, prof) - compute_seconds(stream, a100, prof);
    if (name == "context-permute" || name == "context-permute-backward") {
      EXPECT_EQ(op.access, MemAccess::StridedCopy);
      EXPECT_DOUBLE_EQ(static_cast<double>(op.m), ctx);
      EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_read), 2 * ctx);
      EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_written), 2 * ctx);
      EXPECT_NEAR(extra, ctx * prof.strided_copy_ops_per_element / a100.alu_slot_rate(), 1e-12);
    }
    if (name == "qkv-split-backward") {
      EXPECT_EQ(op.access, MemAccess::CatCopy);
      EXPECT_DOUBLE_EQ(static_cast<double>(op.m), qkv);
      EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_read + op.bytes_written), 4 * qkv);
      EXPECT_NEAR(extra, qkv * prof.cat_copy_ops_per_element / a100.alu_slot_rate(), 1e-12);
    }
    if (name == "bias-gelu" || name == "gelu-backward") {
      EXPECT_EQ(op.access, MemAccess::TanhGelu);
      EXPECT_DOUBLE_EQ(static_cast<double>(op.m), gelu);
      EXPECT_NEAR(extra, gelu * prof.tanh_gelu_ops_per_element / a100.alu_slot_rate(), 1e-12);
    }
    if (name == "bias-grad-sums") {
      // QKV's 1,536 and FC1's 4,096 columns a GPU, the projection's and FC2's 2,048 rows each
      // (no sequence parallelism), over 2,048 tokens, 2 bytes each.
      EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_read), tokens * (3072 + 4096 + 2 * 2048) * 2);
      EXPECT_EQ(op.access, MemAccess::Streaming);
    }
  }
  // The forward's permute runs twice (the forward and its recompute), the rest once a layer.
  EXPECT_EQ(count["context-permute"], 2);
  EXPECT_EQ(count["context-permute-backward"], 1);
  EXPECT_EQ(count["qkv-split-backward"], 1);
  EXPECT_EQ(count["bias-grad-sums"], 1);
  EXPECT_EQ(count["bias-gelu"], 2);
  // Transformer Engine's modules have none of these, and its GeLU streams.
  const TrainingPlan te = build_training_plan(scenario_from_text(text("transformer-engine"), "t"));
  for (const Op& op : te.plan.programs[0].ops) {
    const std::string& name = te.plan.names[op.name];
    EXPECT_TRUE(name != "context-permute" && name != "context-permute-backward" && name != "qkv-split-backward" &&
                name != "bias-grad-sums")
        << name;
    if (name == "bias-gelu") {
      EXPECT_EQ(op.access, MemAccess::Streaming);
    }
  }
  EXPECT_GT(run_training(scenario_from_text(text("local"), "l")).exec.makespan,
            run_training(scenario_from_text(text("transformer-engine"), "t")).exec.makespan);
  // The local layer has no FP8, and PyTorch eager has no Megatron layer.
  std::string fp8 = text("local");
  fp8.replace(fp8.find("fp16"), 4, "fp8");
  EXPECT_THROW(build_training_plan(scenario_from_text(fp8, "f")), InputError);
}

// Megatron-Core's check_for_nan_in_grad (training.grad_nan_check): before each gradient
// bucket's DP collective, the bucket's norm on the compute stream and the host's wait for it
// (`assert not norm.isnan()`), in the last micro-batch's backward only. GPT-1.3B at 2 layers
// and 100 M parameters a bucket on 2 GPUs: every bucket is checked once a step.
TEST(Fidelity, GradNanCheckNormsEachBucketAndWaitsBeforeItsCollective) {
  const std::string base =
      "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 2, power_cap: false}\n"
      "model: {preset: gpt3-1.3b, layers: 2}\nparallel: {dp: 2, micro_batch: 1, "
      "bucket_size: 100000000}\ntraining: {global_batch: 8";
  auto named = [](const TrainingPlan& tp, const std::string& name) {
    std::vector<uint32_t> found;
    const Program& prog = tp.plan.programs[0];
    for (uint32_t i = 0; i < prog.ops.size(); ++i)
      if (tp.plan.names[prog.ops[i].name] == name) found.push_back(i);
    return found;
  };
  const TrainingPlan on = build_training_plan(scenario_from_text(base + "}\n", "on"));  // auto: loss_sync checks
  const Program& prog = on.plan.programs[0];
  const auto norms = named(on, "grad-nan-norm"), waits = named(on, "grad-nan-wait");
  const auto colls = named(on, "dp-grad-allreduce");
  ASSERT_FALSE(colls.empty());
  ASSERT_EQ(norms.size(), colls.size());  // one check a bucket, once a step (4 micro-batches)
  ASSERT_EQ(waits.size(), colls.size());
  double checked = 0;
  for (size_t b = 0; b < norms.size(); ++b) {
    const Op& norm = prog.ops[norms[b]];
    const Op& wait = prog.ops[waits[b]];
    EXPECT_EQ(norm.stream, 0);  // the compute stream: the backward after it waits too
    EXPECT_EQ(norm.phase, Phase::Backward);
    checked += static_cast<double>(norm.bytes_read);
    EXPECT_EQ(wait.access, MemAccess::HostSync);
    EXPECT_EQ(wait.m, 1);
    // The collective waits for the host's wait, which waits for the norm.
    const auto dep_of = [&](uint32_t op, uint32_t on_op) {
      const Op& o = prog.ops[op];
      for (uint32_t d = 0; d < o.dep_count; ++d)
        if (prog.deps[o.dep_begin + d] == on_op) return true;
      return false;
    };
    EXPECT_TRUE(dep_of(waits[b], norms[b]));
    EXPECT_TRUE(dep_of(colls[b], waits[b]));
  }
  // Every parameter's FP32 main gradient is read once (the buckets hold them all).
  double reduced = 0;
  for (uint32_t c : colls) reduced += static_cast<double>(prog.ops[c].bytes);
  EXPECT_DOUBLE_EQ(checked, reduced);
  // Off: no check; auto follows the loss check; ZeRO 3 has no such buckets.
  for (const char* off : {", grad_nan_check: false}\n", ", loss_sync: allreduce}\n"}) {
    const TrainingPlan p = build_training_plan(scenario_from_text(base + off, "off"));
    EXPECT_TRUE(named(p, "grad-nan-norm").empty()) << off;
    EXPECT_TRUE(named(p, "grad-nan-wait").empty()) << off;
  }
  EXPECT_EQ(
      named(build_training_plan(scenario_from_text(base + ", loss_sync: allreduce, grad_nan_check: true}\n", "forced")),
            "grad-nan-wait")
          .size(),
      colls.size());
  EXPECT_THROW(build_training_plan(scenario_from_text(
                   "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 2}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
                   "parallel: {dp: 2, zero_stage: 3}\ntraining: {global_batch: 2, grad_nan_check: true}\n",
                   "z3")),
               InputError);
  // The step pays each check's wait and norm.
  const double t_on = run_training(scenario_from_text(base + "}\n", "t1")).exec.makespan.seconds();
  const double t_off =
      run_training(scenario_from_text(base + ", grad_nan_check: false}\n", "t0")).exec.makespan.seconds();
  EXPECT_GT(t_on - t_off, static_cast<double>(norms.size()) * ComputeProfile{}.host_sync_s);
}

// Megatron-Core builds the projection, FC1 and FC2 with skip_bias_add: Transformer Engine
// returns their bias unapplied and Megatron adds it in the fused activation or the fused
// bias-dropout-add, whose backwards leave the bias gradient to a reduction over the tokens
// (GeLUFunction's `return tmp, tmp`, the compiled bias-dropout-add's sum). QKV's bias stays
// in TE's wgrad epilogue. A model without linear biases has none; Megatron-LM's own layer
// sums all four in bias-grad-sums instead.
TEST(Fidelity, MegatronCoreBiasGradientsAreReducedOutsideTransformerEngine) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 2}\nmodel: {preset: PRESET, layers: 2}\n"
      "parallel: {tp: 2, sequence_parallel: true, micro_batch: 1}\ntraining: {global_batch: 3, transformer_impl: "
      "IMPL}\n";
  auto plan = [&](const std::string& preset, const std::string& impl) {
    return build_training_plan(scenario_from_text(filled(y, {{"PRESET", preset}, {"IMPL", impl}}), "bias"));
  };
  const TrainingPlan gpt = plan("gpt3-1.3b", "transformer-engine");
  const Scenario s = scenario_from_text(filled(y, {{"PRESET", "gpt3-1.3b"}, {"IMPL", "transformer-engine"}}), "b");
  const double tokens = static_cast<double>(s.model.seq_len), e = 2;
  const OpTotals fc1 = op_totals(gpt, "bias-grad-fc1"), fc2 = op_totals(gpt, "bias-grad-fc2"),
                 proj = op_totals(gpt, "bias-grad-proj");
  EXPECT_EQ(fc1.count, 2 * 3);  // a layer, a micro-batch
  EXPECT_EQ(fc2.count, 2 * 3);
  EXPECT_EQ(proj.count, 2 * 3);
  EXPECT_NEAR(fc1.read / 6, tokens * static_cast<double>(s.model.ffn_hidden / 2) * e, 1);  // TP 2: its columns
  EXPECT_NEAR(fc1.written / 6, static_cast<double>(s.model.ffn_hidden / 2) * e, 1);
  EXPECT_NEAR(fc2.read / 6, tokens / 2 * static_cast<double>(s.model.hidden) * e, 1);  // sequence-parallel rows
  EXPECT_EQ(op_totals(gpt, "bias-grad-sums").count, 0);
  const TrainingPlan llama = plan("llama3-8b", "transformer-engine");
  EXPECT_EQ(op_totals(llama, "bias-grad-fc1").count + op_totals(llama, "bias-grad-fc2").count +
                op_totals(llama, "bias-grad-proj").count,
            0);
  const TrainingPlan local = plan("gpt3-1.3b", "local");
  EXPECT_EQ(op_totals(local, "bias-grad-fc1").count, 0);
  EXPECT_EQ(op_totals(local, "bias-grad-sums").count, 2 * 3);
}

// With hidden dropout, each bias-dropout-add's backward multiplies the dropped branch's
// gradient by the mask, a kernel reading the gradient and the 1-byte mask and writing the
// gradient; the LayerNorm backwards no longer carry the mask. Without dropout, no kernel.
TEST(Fidelity, HiddenDropoutBackwardIsAKernelOfItsOwn) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\n"
      "model: {preset: gpt3-1.3b, layers: 2, dropout: P}\nparallel: {micro_batch: 1}\ntraining: {global_batch: 2}\n";
  const TrainingPlan with = build_training_plan(scenario_from_text(filled(y, {{"P", "0.1"}}), "d"));
  const TrainingPlan without = build_training_plan(scenario_from_text(filled(y, {{"P", "0"}}), "d"));
  const Scenario s = scenario_from_text(filled(y, {{"P", "0.1"}}), "d");
  const double act = static_cast<double>(s.model.seq_len * s.model.hidden) * 2;
  for (const char* name : {"dropout-backward-attn", "dropout-backward-mlp"}) {
    const OpTotals t = op_totals(with, name);
    EXPECT_EQ(t.count, 2 * 2) << name;
    EXPECT_NEAR(t.read / 4, act * 1.5, 1) << name;  // the gradient and a byte of mask an element
    EXPECT_NEAR(t.written / 4, act, 1) << name;
    EXPECT_EQ(op_totals(without, name).count, 0) << name;
  }
  EXPECT_NEAR(op_totals(with, "layernorm-2-backward").read / 4, 3 * act, 1);
  const double slower = iteration_s(filled(y, {{"P", "0.1"}})) - iteration_s(filled(y, {{"P", "0"}}));
  EXPECT_GT(slower, 0);
}

// Megatron's DDP hook adds every gradient the wgrad GEMMs did not accumulate themselves
// into its FP32 main gradient after each micro-batch's backward: a GPT layer's two
// LayerNorms (gain and bias) and four linear biases, eight small kernels; a Llama layer's
// two RMSNorm gains, two. Each further kernel pays a floor and a launch gap; the embedding
// table's add runs PyTorch's mixed-dtype loop.
TEST(Fidelity, DdpAddsEachUnfusedParameterGradientIntoTheMainGradient) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: PRESET, layers: 2}\n"
      "parallel: {micro_batch: 1}\ntraining: {global_batch: 3, plan_revision: REV}\n";
  auto plan = [&](const std::string& preset, const std::string& rev = "current") {
    return build_training_plan(scenario_from_text(filled(y, {{"PRESET", preset}, {"REV", rev}}), "ddp"));
  };
  auto kernels = [](const TrainingPlan& tp, const std::string& name) {
    int64_t k = 0;
    for (const Op& op : tp.plan.programs[0].ops)
      if (tp.plan.names[op.name] == name) {
        k += op.k;
        EXPECT_EQ(op.access, MemAccess::DynamicCast) << name;
      }
    return k;
  };
  const TrainingPlan gpt = plan("gpt3-1.3b"), llama = plan("llama3-8b");
  EXPECT_EQ(kernels(gpt, "main-grad-add-small-params"), 8 * 2 * 3);  // a layer, a micro-batch
  EXPECT_EQ(kernels(llama, "main-grad-add-small-params"), 2 * 2 * 3);
  EXPECT_EQ(kernels(plan("gpt3-1.3b", "2026-12-04"), "main-grad-add-small-params"), 0);
  Op one;
  for (const Op& op : gpt.plan.programs[0].ops)
    if (gpt.plan.names[op.name] == "main-grad-add-small-params") one = op;
  const Scenario s = scenario_from_text(filled(y, {{"PRESET", "gpt3-1.3b"}, {"REV", "current"}}), "ddp");
  const int64_t h = s.model.hidden;
  EXPECT_EQ(one.m, 4 * h + 3 * h + h + s.model.ffn_hidden + h);  // norms, QKV, projection, FC1, FC2
  ComputeProfile p;
  p.power_cap = false;
  const GpuSpec& h100 = *find_gpu_preset("h100-sxm");
  Op single = one;
  single.k = 1;
  EXPECT_NEAR(compute_seconds(one, h100, p) - compute_seconds(single, h100, p),
              7 * (p.kernel_latency_s + p.launch_overhead_s), 1e-12);
  for (const Op& op : gpt.plan.programs[0].ops)
    if (gpt.plan.names[op.name] == "embedding-backward") {
      EXPECT_EQ(op.access, MemAccess::DynamicCast);
      EXPECT_EQ(op.m, s.model.vocab * h);
    }
}

}  // namespace
}  // namespace clustersim
