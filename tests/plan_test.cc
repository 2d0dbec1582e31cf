#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <tuple>

#include "cost_models/compute.h"
#include "plan/chakra.h"
#include "plan/memory.h"
#include "plan/plan_io.h"
#include "plan/serving_plan.h"
#include "plan/training_planner.h"
#include "scenarios/model.h"
#include "support/temp_scenario.h"

namespace clustersim {
namespace {

using testing::scenario_from_text;

TEST(Model, PresetParameterCountsMatchThePublishedSizes) {
  // GPT-3 175B: 12·l·h² + 13·l·h + V·h + s·h (Brown et al.); Llama 3 8B / 70B model cards.
  EXPECT_NEAR(find_model_preset("gpt3-175b")->total_params() / 1e9, 174.6, 0.1);
  EXPECT_NEAR(find_model_preset("gpt3-1.3b")->total_params() / 1e9, 1.32, 0.02);
  EXPECT_NEAR(find_model_preset("llama3-8b")->total_params() / 1e9, 8.03, 0.01);
  EXPECT_NEAR(find_model_preset("llama3-70b")->total_params() / 1e9, 70.55, 0.05);
  EXPECT_NEAR(find_model_preset("llama3-405b")->total_params() / 1e9, 405.8, 0.5);
}

TEST(Memory, ShardsOverTensorParallelism) {
  const ModelConfig& m = *find_model_preset("llama3-8b");
  const int64_t p1 = params_per_rank(m, 1), p8 = params_per_rank(m, 8);
  EXPECT_NEAR(static_cast<double>(p1), static_cast<double>(m.total_params()), 0.001 * static_cast<double>(p1));
  EXPECT_LT(p8, p1 / 7);
  MemoryInputs in;
  in.tp = 8;
  in.in_flight_layers = 32;  // one micro-batch through all 32 layers
  const MemoryBreakdown b = training_memory(m, in);
  EXPECT_DOUBLE_EQ(b.weights, static_cast<double>(p8) * 2);
  EXPECT_DOUBLE_EQ(b.gradients, static_cast<double>(p8) * 4);
  EXPECT_DOUBLE_EQ(b.optimizer, static_cast<double>(p8) * 12);
  // Tensor by tensor, in s·b·h units: replicated without SP the norms' inputs (4), the
  // QKV and MLP inputs (2 + 2), no dropout masks (Llama); sharded Q (2), K and V
  // (4 · 8/32 under GQA), the projection's input (2), SwiGLU's two up outputs
  // (2 · 2 · 3.5) and the down input (2 · 3.5): 8 + 26/t; plus the logits.
  const double sbh = 8192.0 * 4096;
  const double logits = 8192.0 * padded_vocab(m, 8) / 8 * (2 + 4);
  EXPECT_DOUBLE_EQ(b.activations, sbh * (8 + 26.0 / 8) * 32 + logits);
  in.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(training_memory(m, in).activations, sbh * 34.0 / 8 * 32 + logits);

  // Under FP8 a layer's weight is 3 bytes (BF16 and its FP8 copy), but the vocabulary
  // tables and the final norm keep 2 (no FP8 copy: the lookup and the logits run in 16
  // bits), and the logits are 16-bit: the same 2 + 4 bytes an entry.
  ModelConfig m8 = m;
  m8.dtype = DType::FP8;
  MemoryInputs in8 = in;
  in8.fp8 = true;
  in8.sequence_parallel = false;
  const MemoryBreakdown b8 = training_memory(m8, in8);
  const double vocab = vocab_params(m, 8, true, true, 0);
  EXPECT_NEAR(b8.weights, 3.0 * (static_cast<double>(p8) - vocab) + 2.0 * vocab, 1.0);
  MemoryInputs no_output8 = in8;
  no_output8.output = false;
  EXPECT_DOUBLE_EQ(b8.activations - training_memory(m8, no_output8).activations, logits);  // the logits' share

  // A GPT layer (MHA, 4h GELU MLP, dropout 0.1) is Korthikanti et al.'s 10 + 24/t.
  const ModelConfig& g = *find_model_preset("gpt3-1.3b");
  MemoryInputs gi;
  gi.tp = 8;
  gi.in_flight_layers = 24;
  gi.output = false;
  const double gsbh = 2048.0 * 2048;
  EXPECT_DOUBLE_EQ(training_memory(g, gi).activations, gsbh * (10 + 24.0 / 8) * 24);
  gi.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(training_memory(g, gi).activations, gsbh * 34.0 / 8 * 24);
  // Unfused attention keeps the scores: Korthikanti's 5·a·s/h more per layer.
  gi.unfused_scores = true;
  EXPECT_DOUBLE_EQ(training_memory(g, gi).activations, gsbh * (34.0 + 5.0 * 16 * 2048 / 2048) / 8 * 24);
}

TEST(Memory, PartialFullRecomputeKeepsTheLayersItLeavesOut) {
  // 32 layers in flight at the peak, 12 of them past recompute_num_layers of their chunk:
  // those keep all of a layer (34/t s·b·h under SP), the 20 recomputed keep their input
  // (2/t s·b·h), and one layer's worth is live while its forward runs again.
  const ModelConfig& m = *find_model_preset("llama3-8b");
  MemoryInputs in;
  in.tp = 8;
  in.sequence_parallel = true;
  in.output = false;
  in.in_flight_layers = 32;
  in.full_recompute = true;
  in.in_flight_kept_layers = 12;
  const double sbh = 8192.0 * 4096;
  EXPECT_DOUBLE_EQ(training_memory(m, in).activations, sbh * (34.0 * 12 + 2.0 * 20 + 34.0) / 8);
  // Every layer kept: nothing is recomputed, nothing extra is live.
  in.in_flight_kept_layers = 32;
  EXPECT_DOUBLE_EQ(training_memory(m, in).activations, sbh * 34.0 / 8 * 32);
}

TEST(Planner, PartialFullRecomputeRunsTheFirstLayersOfEachChunkAgain) {
  // Megatron-Core's --recompute-method block: the first N layers of each model chunk.
  // Stage 0 of an interleaved pipeline of 2 stages x 2 chunks over 8 layers holds layers
  // 0-1 (chunk 0) and 4-5 (chunk 1); with N = 1 only layers 0 and 4 run again.
  const std::string base =
      "cluster: {preset: dgx-h100, nodes: 1}\n"
      "model: {preset: gpt3-1.3b, layers: 8}\n"
      "parallel: {dp: 4, pp: 2, virtual_stages: 2, schedule: interleaved-1f1b}\n";
  auto plan = [&](const std::string& training) {
    return build_training_plan(scenario_from_text(base + "training: {global_batch: 16" + training + "}\n", "rc"));
  };
  const TrainingPlan one = plan(", recompute: full, recompute_num_layers: 1");
  std::set<int32_t> recomputed;
  for (const Op& op : one.plan.programs[0].ops)
    if (op.recompute) recomputed.insert(op.layer);
  EXPECT_EQ(recomputed, (std::set<int32_t>{0, 4}));
  // None of a chunk's layers: the plan and memory of no recompute; all of them: of full.
  const TrainingPlan none = plan(""), zero = plan(", recompute: full, recompute_num_layers: 0");
  EXPECT_EQ(plan_to_json(zero.plan), plan_to_json(none.plan));
  EXPECT_DOUBLE_EQ(zero.memory.activations, none.memory.activations);
  const TrainingPlan full = plan(", recompute: full"), two = plan(", recompute: full, recompute_num_layers: 2");
  EXPECT_EQ(plan_to_json(two.plan), plan_to_json(full.plan));
  EXPECT_DOUBLE_EQ(two.memory.activations, full.memory.activations);
  EXPECT_LT(full.memory.activations, one.memory.activations);
  EXPECT_LT(one.memory.activations, none.memory.activations);
  // A multi-token prediction layer is recomputed only when every layer is (Megatron-Core's
  // MultiTokenPredictionLayer skips the block method).
  auto mtp_recomputed = [&](const std::string& n) {
    const TrainingPlan tp = build_training_plan(scenario_from_text(
        "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 4, mtp_layers: 1}\n"
        "parallel: {dp: 8}\ntraining: {recompute: full, recompute_num_layers: " +
            n + ", global_batch: 8}\n",
        "rc-mtp"));
    std::set<int32_t> layers;
    for (const Op& op : tp.plan.programs[0].ops)
      if (op.recompute) layers.insert(op.layer);
    return layers;
  };
  EXPECT_EQ(mtp_recomputed("1"), (std::set<int32_t>{0}));
  EXPECT_EQ(mtp_recomputed("all"), (std::set<int32_t>{0, 1, 2, 3, 4}));
  // The count means nothing without full recompute: an error at its own line.
  try {
    plan(",\n  recompute: selective, recompute_num_layers: 1");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("s.yaml:5:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected training.recompute: full"), std::string::npos) << e.what();
  }
}

// The ops of rank 0's program in `ph` that are recomputed (or not), by name, with each
// one's GEMM FLOPs summed.
std::map<std::string, double> recomputed_ops(const TrainingPlan& tp, bool recomputed = true) {
  std::map<std::string, double> out;
  for (const Op& op : tp.plan.programs[0].ops)
    if (op.recompute == recomputed && op.phase == Phase::Backward && op.layer == 0)
      out[tp.plan.names[op.name]] += op.kind == OpKind::Gemm ? gemm_flops(op) : 0.0;
  return out;
}

constexpr const char* kEager = R"(
cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}
model: {preset: llama3-8b, layers: 2, seq_len: 1024, vocab: 32000}
parallel: {micro_batch: 1}
training: {framework: pytorch-eager, global_batch: 1, recompute: )";

TEST(Planner, EagerRecomputeStopsOnceTheSavedTensorsAreBack) {
  // torch.utils.checkpoint (non-reentrant, early stop on): the last tensor a Llama block's
  // backward saved is the down projection's input, so neither that GEMM nor the residual
  // add after it runs again. Megatron's checkpoint reruns the whole layer.
  const auto eager = recomputed_ops(build_training_plan(scenario_from_text(std::string(kEager) + "full}\n", "early")));
  EXPECT_TRUE(eager.count("qkv") && eager.count("attention") && eager.count("mlp-up") && eager.count("swiglu-mul"));
  EXPECT_FALSE(eager.count("mlp-down"));
  EXPECT_FALSE(eager.count("residual-add-mlp"));
  // The reentrant checkpoint (use_reentrant=True) reruns the layer whole.
  const auto reentrant = recomputed_ops(build_training_plan(
      scenario_from_text(std::string(kEager) + "full, checkpoint_reentrant: true}\n", "early-reentrant")));
  EXPECT_TRUE(reentrant.count("mlp-down") && reentrant.count("residual-add-mlp"));
  const auto megatron = recomputed_ops(build_training_plan(scenario_from_text(
      "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: llama3-8b, layers: 2, seq_len: 1024}\n"
      "training: {recompute: full, global_batch: 1}\n",
      "early-megatron")));
  EXPECT_TRUE(megatron.count("mlp-down"));
}

TEST(Planner, TorchTitansOpPolicyRunsEverySecondMatmulAgain) {
  // Llama's matmuls in call order are wq, wk, wv, wo, w1, w3, w2; the policy keeps the odd
  // ones and the attention kernel's output, so wk, wo and w3 run again with every op that
  // is no matmul, up to the down projection's input.
  const Scenario s = scenario_from_text(std::string(kEager) + "op}\n", "op-policy");
  const auto op = recomputed_ops(build_training_plan(s));
  const ModelConfig& m = s.model;
  const double tokens = 1024, h = static_cast<double>(m.hidden);
  const double kv = static_cast<double>(m.kv_heads * m.head_dim()), f = static_cast<double>(m.ffn_hidden);
  EXPECT_DOUBLE_EQ(op.at("qkv"), 2 * tokens * kv * h);       // wk alone
  EXPECT_DOUBLE_EQ(op.at("attn-proj"), 2 * tokens * h * h);  // wo
  EXPECT_DOUBLE_EQ(op.at("mlp-up"), 2 * tokens * f * h);     // w3 alone
  EXPECT_FALSE(op.count("attention"));
  EXPECT_FALSE(op.count("mlp-down"));
  for (const char* kernel : {"layernorm-1", "rotary", "residual-add-attn", "layernorm-2", "silu", "swiglu-mul"})
    EXPECT_TRUE(op.count(kernel)) << kernel;
  // Its memory: the layer's input, Q, V, the attention output, w1's and w2's outputs a
  // layer (2 + 2 + 2/4 + 2 + 2·3.5 + 2 s·b·h for Llama 3 8B), between none and full.
  auto activations = [&](const char* recompute) {
    return build_training_plan(scenario_from_text(std::string(kEager) + recompute + "}\n", "op-mem"))
        .memory.activations;
  };
  const double none = activations("none"), full = activations("full"), pol = activations("op");
  EXPECT_LT(full, pol);
  EXPECT_LT(pol, none);
  const double sbh = tokens * h, kept = 2 + 2 + 2 * kv / h + 2 + 2 * f / h + 2;
  MemoryInputs in;
  in.in_flight_layers = 2;
  in.output = false;
  in.op_recompute = true;
  MemoryInputs all = in;
  all.op_recompute = false;
  const double full_layer = training_memory(m, all).activations / 2;
  EXPECT_NEAR(training_memory(m, in).activations, 2 * sbh * kept + (full_layer - sbh * kept), 1.0);
  // The policy is PyTorch's, over matmuls: not Megatron's, not FP8's linears.
  EXPECT_THROW(build_training_plan(scenario_from_text(
                   "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: llama3-8b, layers: 2}\n"
                   "training: {recompute: op, global_batch: 1}\n",
                   "op-megatron")),
               InputError);
}

TEST(Planner, Fsdp2CopiesEachGatherOutIntoTheParameters) {
  // fully_shard: after each all-gather (the forward's and the backward's again), the
  // compute stream copies the layer's gathered BF16 bytes out, read and written once.
  const std::string base =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b, layers: 2, seq_len: 1024, vocab: 32000}\n"
      "parallel: {dp: 8, zero_stage: 3, fsdp_param_dtype: bf16";
  auto copies = [&](const std::string& version) {
    const TrainingPlan tp = build_training_plan(
        scenario_from_text(base + version + "}\ntraining: {framework: pytorch-eager, global_batch: 8}\n", "fsdp2"));
    std::vector<double> bytes;
    for (const Op& op : tp.plan.programs[0].ops)
      if (tp.plan.names[op.name] == "fsdp2-copy-out" && op.layer == 0) bytes.push_back(op.bytes_read);
    return bytes;
  };
  EXPECT_TRUE(copies("").empty());
  const std::vector<double> two = copies(", fsdp_version: 2");
  ASSERT_EQ(two.size(), 2u);
  const ModelConfig& m = *find_model_preset("llama3-8b");
  const double layer = static_cast<double>(m.attention_params()) + 3.0 * static_cast<double>(m.hidden * m.ffn_hidden) +
                       2.0 * static_cast<double>(m.hidden);
  EXPECT_DOUBLE_EQ(two[0], 2 * layer);
  EXPECT_THROW(build_training_plan(
                   scenario_from_text(base + ", fsdp_version: 2}\ntraining: {global_batch: 8}\n", "fsdp2-megatron")),
               InputError);
}

constexpr const char* kBase = R"(
cluster: {preset: dgx-h100, nodes: 2}
model: {preset: gpt3-1.3b}
parallel: {tp: 2, dp: 8, micro_batch: 2, bucket_size: 1}
training: {global_batch: 32}
)";

int count_ops(const Plan& p, OpKind kind, CollectiveKind c, GroupKind g) {
  int n = 0;
  for (const Op& op : p.programs[0].ops)
    n += op.kind == kind && (kind != OpKind::Collective || (op.collective == c && op.group == g));
  return n;
}

// GEMM FLOPs of one iteration on one rank: forward 2·tokens·(weights of the matmuls)
// and backward twice that, i.e. 6·tokens·(l·12h² + V·h) / tp for a GPT layer.
TEST(Planner, GemmFlopsAreSixTimesTokensTimesMatmulWeights) {
  const Scenario s = scenario_from_text(kBase, "flops");
  const TrainingPlan tp = build_training_plan(s);
  double gemm = 0;
  for (const Op& op : tp.plan.programs[0].ops)
    if (op.kind == OpKind::Gemm) gemm += op.flops;
  const double h = 2048, l = 24, V = padded_vocab(s.model, 2);
  const double tokens_per_rank = 2048.0 * 32 / 8;  // global batch split over DP
  EXPECT_NEAR(gemm, 6 * tokens_per_rank * (l * 12 * h * h + V * h) / 2, 1.0);
}

TEST(Planner, TensorParallelCollectivesPerLayer) {
  const Scenario s = scenario_from_text(kBase, "tpcoll");
  const TrainingPlan tp = build_training_plan(s);
  const int mbs = 2, layers = 24;
  EXPECT_EQ(tp.layout.micro_batches, mbs);
  // Megatron: 2 all-reduces forward + 2 backward per layer per micro-batch, plus the
  // embedding, the logits gradient and the vocab-parallel cross-entropy reductions; per
  // step one more on each group for the gradient norm.
  EXPECT_EQ(count_ops(tp.plan, OpKind::Collective, CollectiveKind::AllReduce, GroupKind::TP),
            mbs * (4 * layers + 3) + 1);
  EXPECT_EQ(count_ops(tp.plan, OpKind::Collective, CollectiveKind::AllReduce, GroupKind::DP), layers + 1 + 1);
  for (const Op& op : tp.plan.programs[0].ops) {
    if (op.kind == OpKind::Collective && op.group == GroupKind::TP && op.layer >= 0) {
      EXPECT_EQ(op.bytes, 2LL * 2048 * 2048 * 2);  // b·s·h in bf16
    }
  }

  Scenario sp = s;
  sp.parallel.sequence_parallel = true;
  const TrainingPlan t2 = build_training_plan(sp);
  // SP: each all-reduce becomes reduce-scatter + all-gather, and backward re-gathers
  // the inputs of the column-parallel weight gradients.
  // Cross-entropy, and per step the gradient norm and the norms' gradients (each TP rank's
  // sum over its own tokens: finalize_model_grads).
  EXPECT_EQ(count_ops(t2.plan, OpKind::Collective, CollectiveKind::AllReduce, GroupKind::TP), mbs + 2);
  EXPECT_EQ(count_ops(t2.plan, OpKind::Collective, CollectiveKind::ReduceScatter, GroupKind::TP),
            mbs * (4 * layers + 2));
  EXPECT_EQ(count_ops(t2.plan, OpKind::Collective, CollectiveKind::AllGather, GroupKind::TP), mbs * (6 * layers + 1));
  EXPECT_LT(t2.memory.activations, tp.memory.activations);
}

TEST(Planner, GroupsAndSymmetryFollowThePlacement) {
  Scenario s = scenario_from_text(kBase, "groups");
  const TrainingPlan tp = build_training_plan(s);
  const Plan& p = tp.plan;
  EXPECT_EQ(p.world_size, 16);
  EXPECT_EQ(p.programs.size(), 1u);  // symmetric ranks share one program
  EXPECT_EQ(p.groups[static_cast<size_t>(p.group_of(5, GroupKind::TP))].ranks, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(p.groups[static_cast<size_t>(p.group_of(5, GroupKind::DP))].ranks,
            (std::vector<int32_t>{1, 3, 5, 7, 9, 11, 13, 15}));
  EXPECT_EQ(p.representatives(), (std::vector<int32_t>{0, 1}));

  s.parallel.placement = "dp-tp-cp-ep-pp";  // TP strided across nodes: no provable symmetry
  const TrainingPlan t2 = build_training_plan(s);
  EXPECT_EQ(t2.plan.groups[static_cast<size_t>(t2.plan.group_of(0, GroupKind::TP))].ranks,
            (std::vector<int32_t>{0, 8}));
  EXPECT_EQ(t2.plan.representatives().size(), 16u);
}

TEST(Planner, ImpossibleLayoutsAreRejectedWithTheirPosition) {
  auto error_of = [](const std::string& yaml) {
    try {
      build_training_plan(scenario_from_text(yaml, "bad-layout"));
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("cluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b}\nparallel: {tp: 2, dp: 3}\n")
                .find("s.yaml:3:23: error: dp·tp·pp·cp = 3·2·1·1 = 6 but the cluster has 8 GPUs"),
            std::string::npos);
  EXPECT_NE(error_of("cluster: {preset: dgx-h100, nodes: 4}\nmodel: {preset: llama3-8b}\nparallel:\n  tp: 16\n")
                .find("s.yaml:4:7: error: tp = 16 does not divide model.kv_heads = 8"),
            std::string::npos);
  EXPECT_NE(error_of("cluster: {preset: dgx-h100, nodes: 3}\nmodel: {preset: llama3-8b}\nparallel: {tp: 3}\n")
                .find("tp = 3 does not divide model.heads = 32"),
            std::string::npos);
  EXPECT_NE(error_of("cluster: {preset: dgx-a100, nodes: 8}\nmodel: {preset: gpt3-175b}\nparallel: {tp: 1}\n")
                .find("layout does not fit in memory"),
            std::string::npos);
  EXPECT_NE(error_of("cluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b, layers: 4}\nparallel: {pp: 8}\n")
                .find("pp·virtual_stages = 8 is more than model.layers + 2 = 6"),
            std::string::npos);
  EXPECT_NE(error_of("cluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b}\nparallel: {ep: 2}\n")
                .find("needs a mixture-of-experts"),
            std::string::npos);
  EXPECT_NE(error_of("cluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b}\ntraining: {global_batch: 12}\n")
                .find("not a multiple of dp·micro_batch = 8"),
            std::string::npos);
}

}  // namespace
}  // namespace clustersim

namespace clustersim {
namespace {

std::string plan_error(const std::string& json);

// Op names are interned once each, by an index (a trace can give each of its nodes a name of
// its own), which also finds names a reader wrote into the table directly.
TEST(PlanNames, InternFindsEveryNameOnce) {
  Plan p;
  EXPECT_EQ(p.intern("a"), 0u);
  EXPECT_EQ(p.intern("b"), 1u);
  EXPECT_EQ(p.intern("a"), 0u);
  p.names.push_back("c");  // as plan_from_json fills the table
  EXPECT_EQ(p.intern("c"), 2u);
  EXPECT_EQ(p.intern("d"), 3u);
  const Plan copy = p;
  Plan q = copy;
  EXPECT_EQ(q.intern("b"), 1u);
  EXPECT_EQ(q.intern("e"), 4u);
  for (int i = 0; i < 100000; ++i) p.intern("node-" + std::to_string(i));
  EXPECT_EQ(p.names.size(), 100004u);
  EXPECT_EQ(p.intern("node-99999"), 100003u);
}

TEST(PlanIo, RoundTripsExactly) {
  const TrainingPlan tp = build_training_plan(scenario_from_text(kBase, "plan-io"));
  const std::string json = plan_to_json(tp.plan);
  const Plan back = plan_from_json(json, "plan.json");
  EXPECT_EQ(plan_to_json(back), json);
  EXPECT_EQ(back.world_size, tp.plan.world_size);
  EXPECT_EQ(back.rank_groups, tp.plan.rank_groups);
  ASSERT_EQ(back.programs[0].ops.size(), tp.plan.programs[0].ops.size());
  EXPECT_EQ(back.programs[0].deps, tp.plan.programs[0].deps);
  // Recomputed ops and in-kernel dropout travel with the plan.
  const TrainingPlan rc = build_training_plan(scenario_from_text(
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2, dropout: 0.1}\n"
      "training: {recompute: full}\n", "plan-io-rc"));
  const Plan rb = plan_from_json(plan_to_json(rc.plan), "plan.json");
  int recomputed = 0, dropout = 0;
  for (size_t i = 0; i < rc.plan.programs[0].ops.size(); ++i) {
    const Op& a = rc.plan.programs[0].ops[i];
    const Op& b = rb.programs[0].ops[i];
    EXPECT_EQ(a.recompute, b.recompute) << i;
    EXPECT_EQ(a.dropout, b.dropout) << i;
    recomputed += b.recompute;
    dropout += b.dropout;
  }
  EXPECT_GT(recomputed, 10);
  EXPECT_EQ(dropout, 3 * 2);  // forward, recomputed forward and backward of two layers
  // So do userbuffers kernels' SMs and the GEMMs' margin (Op::held_sms, Op::sm_margin).
  const TrainingPlan ub = build_training_plan(scenario_from_text(
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 1}\n"
      "parallel: {tp: 8, sequence_parallel: true, tp_comm_overlap: true, tp_overlap_fc2_sms: 8, "
      "tp_overlap_sm_margin: true}\n", "plan-io-ub"));
  const Plan ubb = plan_from_json(plan_to_json(ub.plan), "plan.json");
  int held = 0;
  for (size_t i = 0; i < ub.plan.programs[0].ops.size(); ++i) {
    const Op& a = ub.plan.programs[0].ops[i];
    const Op& b = ubb.programs[0].ops[i];
    EXPECT_EQ(a.held_sms, b.held_sms) << i;
    EXPECT_EQ(a.sm_margin, b.sm_margin) << i;
    held += b.held_sms == 8 && b.sm_margin;
  }
  EXPECT_GT(held, 0);
  // And a grouped GEMM's routing (Op::group_*), here a MoE serving iteration's.
  ServingShape sh;
  sh.model = *find_model_preset("mixtral-8x7b");
  sh.model.layers = 1;
  IterationBatch ib;
  ib.tokens = ib.emitting = 48;
  ib.decode_context = 4800;
  const Plan moe = build_iteration_plan(sh, ib, true);
  const std::string moe_json = plan_to_json(moe);
  const Plan mb = plan_from_json(moe_json, "plan.json");
  EXPECT_EQ(plan_to_json(mb), moe_json);
  int routed = 0;
  for (size_t i = 0; i < moe.programs[0].ops.size(); ++i) {
    const Op& a = moe.programs[0].ops[i];
    const Op& b = mb.programs[0].ops[i];
    EXPECT_EQ(std::tuple(a.group_experts, a.group_top_k, a.group_tokens),
              std::tuple(b.group_experts, b.group_top_k, b.group_tokens))
        << i;
    routed += b.group_experts == 8 && b.group_top_k == 2 && b.group_tokens == 48;
  }
  EXPECT_EQ(routed, 2);
  EXPECT_NE(plan_error(std::regex_replace(moe_json, std::regex(",\"group_top_k\":2"), "")).find("group_top_k"),
            std::string::npos);
}

std::string plan_error(const std::string& json) {
  try {
    plan_from_json(json, "p.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// Every memory-access class a planner emits travels with the plan, in its JSON and in its
// Chakra traces, with the element counts it is costed by.
TEST(PlanIo, CarriesEveryMemoryAccessClass) {
  const char* eager =
      "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, layers: 1, dtype: D, "
      "dropout: 0}\ntraining: {global_batch: 1, framework: pytorch-eager, attention: flash2, attention_padding: P, "
      "train_metrics: 2}\n";
  const std::vector<std::string> scenarios = {
      std::regex_replace(std::regex_replace(eager, std::regex("D"), "bf16"), std::regex("P"), "unpad"),
      std::regex_replace(std::regex_replace(eager, std::regex("D"), "fp8"), std::regex("P"), "none"),
      "cluster: {preset: dgx-a100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, layers: 1, dtype: fp16, "
      "dropout: 0.1}\ntraining: {global_batch: 1, attention: unfused, transformer_impl: local}\n",
      // Two ranks: the training metrics' sync once a step (host waits and dispatches).
      "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 2}\nmodel: {preset: gpt3-1.3b, layers: 1, dropout: 0}\n"
      "parallel: {dp: 2}\ntraining: {global_batch: 2, framework: pytorch-eager, train_metrics: 2}\n"};
  std::set<MemAccess> seen;
  int relaunches = 0;  // the Megatron step's loss checks (training.loss_sync)
  int dispatches = 0;  // the training metrics' fills and copies (training.train_metrics)
  for (const std::string& y : scenarios) {
    const TrainingPlan tp = build_training_plan(scenario_from_text(y, "access"));
    const Plan back = plan_from_json(plan_to_json(tp.plan), "plan.json");
    const std::vector<ChakraFile> files =
        plan_to_chakra(tp.plan, "a", program_compute_seconds(tp.plan, *find_gpu_preset("h100-sxm"), ComputeProfile{}));
    const ChakraTrace trace = decode_chakra(files[0].bytes);
    std::vector<const ChakraNode*> memory;
    for (const ChakraNode& n : trace.nodes)
      if (n.op_kind == "memory") memory.push_back(&n);
    size_t k = 0;
    for (size_t i = 0; i < tp.plan.programs[0].ops.size(); ++i) {
      const Op& a = tp.plan.programs[0].ops[i];
      const Op& b = back.programs[0].ops[i];
      if (a.kind != OpKind::Memory) continue;
      seen.insert(a.access);
      EXPECT_EQ(b.access, a.access) << i;
      if (a.access != MemAccess::MultiTensor) {
        EXPECT_EQ(b.m, a.m) << i;
      }
      EXPECT_EQ(b.n, a.n) << i;  // a cast-transpose's columns, a host wait's relaunched backwards
      EXPECT_EQ(b.k, a.k) << i;  // the small ops a host wait dispatches
      ASSERT_LT(k, memory.size());
      EXPECT_EQ(memory[k]->shape.access, a.access) << i;
      EXPECT_EQ(memory[k]->shape.n, a.n) << i;
      EXPECT_EQ(memory[k]->shape.k, a.k) << i;
      dispatches += a.access == MemAccess::HostSync && b.k > 0;
      relaunches += a.access == MemAccess::HostSync && b.n == 1;
      ++k;
    }
    EXPECT_EQ(k, memory.size());
  }
  // A serving iteration's decode attention on CUDA cores: its grid and heads travel too.
  ServingShape sh;
  sh.model = *find_model_preset("llama3-70b");
  sh.tp = 4;
  sh.turbomind_decode = true;
  IterationBatch ib;
  ib.tokens = ib.emitting = 8;
  ib.decode_context = 8 * 1500;
  ib.decode_seqs = 8;
  ib.decode_max_context = 2000;
  const Plan it = build_iteration_plan(sh, ib, true);
  const Plan it_back = plan_from_json(plan_to_json(it), "plan.json");
  const ChakraTrace it_trace = decode_chakra(
      plan_to_chakra(it, "a", program_compute_seconds(it, *find_gpu_preset("a100-sxm-80gb"), ComputeProfile{}))[0]
          .bytes);
  int decodes = 0;
  for (size_t i = 0; i < it.programs[0].ops.size(); ++i) {
    const Op& a = it.programs[0].ops[i];
    if (a.access != MemAccess::CudaCoreDecode) continue;
    seen.insert(a.access);
    ++decodes;
    const Op& b = it_back.programs[0].ops[i];
    EXPECT_EQ(b.access, a.access);
    for (const auto& [x, y] : {std::pair{a.heads, b.heads}, {a.kv_heads, b.kv_heads}, {a.head_dim, b.head_dim},
                               {a.k, b.k}, {a.n, b.n}, {a.q_len, b.q_len}, {a.kv_len, b.kv_len}})
      EXPECT_EQ(x, y) << i;
  }
  EXPECT_EQ(decodes, sh.model.layers);
  int chakra_decodes = 0;
  for (const ChakraNode& n : it_trace.nodes)
    if (n.shape.access == MemAccess::CudaCoreDecode) {
      ++chakra_decodes;
      EXPECT_EQ(n.shape.kv_len, 8 * 1500);
      EXPECT_EQ(n.shape.q_len, 1024);  // TurboMind's slice: 2 slices of the 2,000-token context, 2 blocks
      EXPECT_EQ(n.shape.k, 4);         // 16 query heads, 2 KV heads a GPU: groups of 8, 4 heads a block
      EXPECT_EQ(n.shape.n, 16 / 4 * 8 * 2);
    }
  EXPECT_EQ(chakra_decodes, sh.model.layers);
  EXPECT_EQ(seen.size(), static_cast<size_t>(kLastMemAccess) + 1);
  EXPECT_EQ(relaunches, 1);
  EXPECT_EQ(dispatches, 8);  // 2 metrics x 2 states x (fills, copies)
}

TEST(PlanIo, RejectsBrokenPlansWithTheirPosition) {
  const std::string head =
      "{\"format\":\"clustersim-plan\",\"version\":1,\"world_size\":1,\"names\":[\"a\"],\"rank_program\":[0],"
      "\"rank_gpu\":[0],\"mirror_of\":[0],\"groups\":[],\n\"programs\":[{\"name\":\"p\",\"streams\":[\"compute\"],"
      "\"ops\":[\n";
  EXPECT_NE(plan_error(head + "{\"kind\":\"memory\",\"name\":0,\"stream\":0,\"deps\":[0]}]}]}").find("p.json:3:"),
            std::string::npos);
  EXPECT_NE(plan_error(head + "{\"kind\":\"memory\",\"name\":0,\"stream\":0},{\"kind\":\"memory\",\"name\":0,"
                              "\"stream\":0,\"deps\":[1]}]}]}")
                .find("must name an earlier op"),
            std::string::npos);
  EXPECT_NE(plan_error(head + "{\"kind\":\"teleport\",\"name\":0,\"stream\":0}]}]}").find("unknown op kind 'teleport'"),
            std::string::npos);
  EXPECT_NE(plan_error(head + "{\"kind\":\"memory\",\"name\":0,\"stream\":3}]}]}").find("stream = 3 is out of range"),
            std::string::npos);
  EXPECT_NE(plan_error("{\"format\": \"something else\"}").find("not a clustersim plan"), std::string::npos);
  EXPECT_NE(plan_error("{\"format\": [").find("malformed plan"), std::string::npos);
}

}  // namespace
}  // namespace clustersim
