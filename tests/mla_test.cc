// Multi-head latent attention, multi-token prediction and uneven pipeline splits: the
// shapes, bytes and parameters Megatron-Core's MLASelfAttention and MultiTokenPredictionBlock
// give, and the serving engines' latent cache.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <string>
#include <vector>

#include "plan/serving_plan.h"
#include "plan/training_planner.h"
#include "support/plan_queries.h"
#include "support/temp_scenario.h"

namespace clustersim {
namespace {

using testing::scenario_from_text;

// DeepSeek-V3's shapes at 4 layers (the first dense), 16 experts, on one node.
const std::string kSmall =
    "cluster: {preset: dgx-h100, nodes: 1}\n"
    "model: {preset: deepseek-v3, layers: 4, mtp_layers: MTP, moe: {experts: 16}}\n"
    "parallel: {tp: TP, dp: DP, ep: 4, expert_tp: 1, sequence_parallel: SP, zero_stage: 1}\n"
    "training: {global_batch: 8, rope_fusion: false RECOMPUTE}\n";

std::string with(std::string y, const std::map<std::string, std::string>& v) {
  for (const auto& [k, x] : v) {
    const size_t at = y.find(k);
    if (at != std::string::npos) y.replace(at, k.size(), x);
  }
  return y;
}

std::string small(int tp, int mtp = 0, const std::string& recompute = "") {
  return with(kSmall, {{"MTP", std::to_string(mtp)},
                       {"TP", std::to_string(tp)},
                       {"DP", std::to_string(8 / tp)},
                       {"SP", tp > 1 ? "true" : "false"},
                       {"RECOMPUTE", recompute}});
}

// The ops of rank 0 named `name` in micro-batch 0, layer `layer`, forward or backward.
std::vector<Op> ops_named(const TrainingPlan& tp, const std::string& name, int32_t layer, Phase ph) {
  std::vector<Op> out;
  for (const Op& op : tp.plan.programs[0].ops)
    if (tp.plan.names[op.name] == name && op.layer == layer && op.micro_batch == 0 && op.phase == ph)
      out.push_back(op);
  return out;
}

TEST(Mla, DeepSeekV3HasItsPublishedParameterCount) {
  const ModelConfig& m = *find_model_preset("deepseek-v3");
  ASSERT_TRUE(m.is_mla());
  // q: 7168·1536 + 1536 + 1536·128·192; kv: 7168·576 + 512 + 512·128·256; out: 128·128·7168.
  EXPECT_EQ(m.attention_params(), 187107328);
  // 671B without the MTP module (DeepSeek-AI 2024: 671B total): 3 dense layers of 583,483,392,
  // 58 MoE layers of 11,507,286,016, the embedding and the output layer (2 x 129,280 x 7,168)
  // and the final norm's 2h; the module adds ~11.6B (its layer and projection).
  const int64_t main = m.total_params() - m.mtp_layers * m.mtp_params();
  EXPECT_EQ(main, 3 * int64_t{583483392} + 58 * int64_t{11507286016} + 2 * int64_t{129280} * 7168 + 2 * 7168);
  EXPECT_NEAR(static_cast<double>(main) / 1e9, 671.0, 0.05);
  EXPECT_EQ(m.mtp_params(), 2 * 7168 * 7168 + 3 * 7168 + m.layer_params(60));
  // The attention kernel: 128 heads each with its own key and value, timed at (192 + 128) / 2.
  EXPECT_EQ(m.attn_kv_heads(), 128);
  EXPECT_EQ(m.attn_head_dim(), 160);
  EXPECT_EQ(m.attn_out_width(), 128 * 128);
}

TEST(Mla, ProjectionsGathersAndAttentionAsMegatronCoreRunsThem) {
  const TrainingPlan tp = build_training_plan(scenario_from_text(small(2), "mla"));
  const int64_t s = 4096, t = 2;
  auto gemm = [&](const std::string& name, int64_t n, int64_t k) {
    const auto ops = ops_named(tp, name, 1, Phase::Forward);
    ASSERT_EQ(ops.size(), 1u) << name;
    EXPECT_EQ(ops[0].m, s) << name;
    EXPECT_EQ(ops[0].n, n) << name;
    EXPECT_EQ(ops[0].k, k) << name;
  };
  // Column-parallel down projections split their outputs over TP; the up projections too.
  gemm("q-down", 1536 / t, 7168);
  gemm("kv-down", 576 / t, 7168);
  gemm("q-up", 128 / t * 192, 1536);
  gemm("kv-up", 128 / t * 256, 512);
  gemm("attn-proj", 7168, 128 / t * 128);
  // Each column-parallel layer gathers its own input under SP (the two down projections the
  // same hidden states, twice); the down projections' outputs are gathered along their width.
  auto coll = [&](const std::string& name, double bytes) {
    const auto ops = ops_named(tp, name, 1, Phase::Forward);
    ASSERT_EQ(ops.size(), 1u) << name;
    EXPECT_EQ(ops[0].kind, OpKind::Collective) << name;
    EXPECT_EQ(ops[0].collective, CollectiveKind::AllGather) << name;
    EXPECT_EQ(ops[0].bytes, static_cast<int64_t>(bytes)) << name;
  };
  coll("allgather-q-down-input", s * 7168 * 2.0);
  coll("allgather-kv-down-input", s * 7168 * 2.0);
  coll("q-down-allgather", s * 1536 * 2.0);
  coll("kv-down-allgather", s * 576 * 2.0);
  coll("allgather-q-up-input", s * 1536 * 2.0);
  coll("allgather-kv-up-input", s * 512 * 2.0);
  // The kernel: 64 heads a rank, each its own key and value, at the mean width 160: its
  // products are QK^T at 192 and PV at 128.
  const auto at = ops_named(tp, "attention", 1, Phase::Forward);
  ASSERT_EQ(at.size(), 1u);
  EXPECT_EQ(at[0].heads, 64);
  EXPECT_EQ(at[0].kv_heads, 64);
  EXPECT_EQ(at[0].head_dim, 160);
  // The value made contiguous: one read and one write of s·64·128 elements.
  const auto v = ops_named(tp, "mla-value-copy", 1, Phase::Forward);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].bytes_read, s * 64 * 128 * 2);
  // Backward: every projection's data and weight gradients, the data gradients reduce-scattered.
  for (const char* name : {"q-down", "q-up", "kv-down", "kv-up"}) {
    EXPECT_EQ(ops_named(tp, std::string(name) + "-dgrad", 1, Phase::Backward).size(), 1u) << name;
    EXPECT_EQ(ops_named(tp, std::string(name) + "-wgrad", 1, Phase::Backward).size(), 1u) << name;
    EXPECT_EQ(ops_named(tp, std::string("reduce-scatter-") + name + "-grad", 1, Phase::Backward).size(), 1u) << name;
  }
  // Without TP nothing is gathered and the down projections are whole.
  const TrainingPlan one = build_training_plan(scenario_from_text(small(1), "mla1"));
  EXPECT_TRUE(ops_named(one, "q-down-allgather", 1, Phase::Forward).empty());
  EXPECT_EQ(ops_named(one, "q-down", 1, Phase::Forward).at(0).n, 1536);
}

TEST(Mla, UpProjectionRecomputeTradesMemoryForTheUpProjectionsAgain) {
  const TrainingPlan keep = build_training_plan(scenario_from_text(small(2, 0, ", recompute: none"), "keep"));
  const TrainingPlan again = build_training_plan(
      scenario_from_text(small(2, 0, ", recompute: selective, recompute_modules: [mla_up_proj]"), "again"));
  // The up projections run again before the attention's backward, as recomputed ops; the
  // attention core does not.
  auto recomputed = [&](const TrainingPlan& tp, const std::string& name) {
    for (const Op& op : ops_named(tp, name, 1, Phase::Backward))
      if (op.recompute) return true;
    return false;
  };
  EXPECT_TRUE(recomputed(again, "q-up"));
  EXPECT_TRUE(recomputed(again, "kv-up"));
  EXPECT_FALSE(recomputed(again, "attention"));
  EXPECT_FALSE(recomputed(keep, "q-up"));
  // The query, key and value are not kept: 2·(2·192 + 128) bytes a head and token fewer, on
  // 64 heads of 4096 tokens, per layer held.
  const double per_layer = 4096.0 * 64 * 2 * (2 * 192 + 128);
  const double saved = keep.memory.activations - again.memory.activations;
  EXPECT_GT(saved, per_layer);
  // ... and the model FLOPs do not count the recompute.
  EXPECT_NEAR(keep.model_flops_per_rank, again.model_flops_per_rank, 1e-9 * keep.model_flops_per_rank);
  EXPECT_GT(again.hardware_flops_per_rank, keep.hardware_flops_per_rank);
}

TEST(Mla, RefusedWhereItIsNotModelled) {
  auto refused = [](const std::string& y, const std::string& key) {
    try {
      build_training_plan(scenario_from_text(y, "refused"));
      ADD_FAILURE() << "accepted: " << y;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  refused(with(small(2), {{"global_batch: 8", "global_batch: 8, framework: pytorch-eager"}}), "training.framework");
  refused(with(small(2), {{"deepseek-v3,", "deepseek-v3, dtype: fp8,"}}), "model.dtype");
  refused(with(small(2), {{"rope_fusion: false", "rope_fusion: false, attention: unfused"}}), "training.attention");
  refused(with(small(2), {{"rope_fusion: false", "rope_fusion: false, recompute_modules: [mla_up_proj]"}}),
          "training.recompute: selective");
  refused(with(small(2), {{"deepseek-v3,", "deepseek-v3, mla: {kv_lora_rank: 511},"}}), "kv_lora_rank");
  refused("cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b, layers: 2}\n"
          "training: {global_batch: 8, recompute: selective, recompute_modules: [mla_up_proj]}\n",
          "model.mla");
}

TEST(Mtp, ModuleRunsOnTheLastStageWithItsOwnLossAndParameters) {
  const TrainingPlan none = build_training_plan(scenario_from_text(small(2, 0), "mtp0"));
  const TrainingPlan one = build_training_plan(scenario_from_text(small(2, 1), "mtp1"));
  // The module's layer is numbered after the model's, a MoE layer like the last; its
  // projection takes the two normed halves (2h) to h over TP; its logits are the vocabulary's.
  const int32_t L = 4;
  ASSERT_EQ(ops_named(one, "mtp-proj", L, Phase::Forward).size(), 1u);
  EXPECT_EQ(ops_named(one, "mtp-proj", L, Phase::Forward)[0].k, 2 * 7168);
  EXPECT_EQ(ops_named(one, "mtp-proj", L, Phase::Forward)[0].n, 7168 / 2);
  EXPECT_EQ(ops_named(one, "expert-up", L, Phase::Forward).size(), 1u);
  EXPECT_EQ(ops_named(one, "mtp-logits", L, Phase::Forward).size(), 1u);
  EXPECT_EQ(ops_named(one, "mtp-logits-wgrad", L, Phase::Backward).size(), 1u);
  EXPECT_EQ(ops_named(one, "mtp-embedding-backward", L, Phase::Backward).size(), 1u);
  EXPECT_TRUE(ops_named(none, "mtp-logits", L, Phase::Forward).empty());
  // More work, more weights (the layer, the projection, the norms, the table's copy only
  // where the stage has none: here one stage holds both), more activations.
  EXPECT_GT(one.model_flops_per_rank, none.model_flops_per_rank * 1.2);
  EXPECT_GT(one.memory.weights, none.memory.weights);
  EXPECT_GT(one.memory.activations, none.memory.activations);
}

// Whether op `i` of rank 0's program waits, directly or not, for an op named `name`.
bool waits_for(const TrainingPlan& tp, uint32_t i, const std::string& name) {
  return testing::waits_for(tp, tp.plan.programs[0], i, name);
}

TEST(Moe, SharedExpertsBesideTheDispatchOnlyWhenOverlapped) {
  const std::string y = small(2);
  auto first = [](const TrainingPlan& tp, const std::string& name) {
    const Program& prog = tp.plan.programs[0];
    for (uint32_t i = 0; i < prog.ops.size(); ++i)
      if (tp.plan.names[prog.ops[i].name] == name && prog.ops[i].layer == 3) return i;
    return ~0u;
  };
  for (bool overlap : {false, true}) {
    const TrainingPlan tp = build_training_plan(scenario_from_text(
        with(y, {{"zero_stage: 1", std::string("zero_stage: 1, moe_shared_expert_overlap: ") +
                                       (overlap ? "true" : "false")}}),
        "shared"));
    // Megatron-Core's MoELayer adds shared_experts(input) after the routed experts' combine;
    // with --moe-shared-expert-overlap they run beside the dispatcher's all-to-alls. (Layer 3
    // is the model's only MoE layer: no earlier all-to-all stands behind its input.)
    EXPECT_EQ(waits_for(tp, first(tp, "shared-expert-up"), "moe-combine-alltoall"), !overlap) << overlap;
    EXPECT_EQ(waits_for(tp, first(tp, "shared-expert-down-dgrad"), "moe-dispatch-alltoall-backward"), !overlap)
        << overlap;
  }
}

TEST(Moe, Fp32RouterRunsItsGemmsInFp32WithItsCasts) {
  for (bool fp32 : {false, true}) {
    const TrainingPlan tp = build_training_plan(scenario_from_text(
        with(small(2), {{"moe: {experts: 16}", fp32 ? "moe: {experts: 16, router_dtype: fp32}" : "moe: {experts: 16}"}}),
        "router"));
    for (const char* name : {"moe-router", "moe-router-dgrad", "moe-router-wgrad"}) {
      const Phase ph = std::string(name) == "moe-router" ? Phase::Forward : Phase::Backward;
      const auto ops = ops_named(tp, name, 3, ph);
      ASSERT_EQ(ops.size(), 1u) << name;
      EXPECT_EQ(ops[0].dtype, fp32 ? DType::FP32 : DType::BF16) << name;
      // 4-byte operands under FP32 (the forward: the rank's 2,048 tokens x 7,168 and the 16 x 7,168 weight).
      const Op& g = ops[0];
      EXPECT_EQ(g.bytes_read, (g.m * g.k + g.k * g.n) * (fp32 ? 4 : 2)) << name;
      if (ph == Phase::Forward) {
        EXPECT_EQ(g.m * g.k, 2048 * 7168) << name;
      }
    }
    // The input cast up to FP32 (2 bytes read, 4 written an element), its gradient back down.
    const auto up = ops_named(tp, "moe-router-input-cast", 3, Phase::Forward);
    const auto down = ops_named(tp, "moe-router-grad-cast", 3, Phase::Backward);
    EXPECT_EQ(up.size(), fp32 ? 1u : 0u);
    EXPECT_EQ(down.size(), fp32 ? 1u : 0u);
    if (fp32) {
      EXPECT_EQ(up[0].bytes_read, 2048 * 7168 * 2);
      EXPECT_EQ(up[0].bytes_written, 2048 * 7168 * 4);
      EXPECT_EQ(down[0].bytes_read, 2048 * 7168 * 4);
    }
  }
}

TEST(Moe, AllgatherDispatcherGathersEveryEpRanksTokens) {
  // DeepSeek's shapes at TP 2 with whole experts, EP 4: each rank routes its own 2,048 tokens.
  const std::string y = with(small(2), {{"zero_stage: 1", "zero_stage: 1, moe_dispatcher: allgather"}});
  for (bool fp32 : {false, true}) {
    const TrainingPlan tp = build_training_plan(scenario_from_text(
        fp32 ? with(y, {{"moe: {experts: 16}", "moe: {experts: 16, router_dtype: fp32}"}}) : y, "allgather"));
    const double all = 4 * 2048.0 * 7168;  // the EP group's tokens x h
    const auto ag = ops_named(tp, "moe-dispatch-allgather-ep", 3, Phase::Forward);
    ASSERT_EQ(ag.size(), 1u);
    EXPECT_EQ(ag[0].bytes, static_cast<int64_t>(all * 2));
    // The host reads each local expert's row count before the permute.
    const auto sync = ops_named(tp, "moe-tokens-per-expert-sync", 3, Phase::Forward);
    ASSERT_EQ(sync.size(), 1u);
    EXPECT_EQ(sync[0].access, MemAccess::HostSync);
    // The output reduce-scattered in the router probabilities' type.
    const auto rs = ops_named(tp, "moe-combine-reduce-scatter-ep", 3, Phase::Forward);
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].bytes, static_cast<int64_t>(all * (fp32 ? 4 : 2)));
    EXPECT_EQ(ops_named(tp, "moe-combine-cast", 3, Phase::Forward).size(), fp32 ? 1u : 0u);
    // No all-to-all either way; the backward mirrors it.
    EXPECT_TRUE(ops_named(tp, "moe-dispatch-alltoall", 3, Phase::Forward).empty());
    EXPECT_EQ(ops_named(tp, "moe-combine-allgather-ep-backward", 3, Phase::Backward).size(), 1u);
    EXPECT_EQ(ops_named(tp, "moe-dispatch-reduce-scatter-ep-backward", 3, Phase::Backward).size(), 1u);
    // The experts see the rows the all-to-all would have brought them.
    const TrainingPlan a2a = build_training_plan(scenario_from_text(small(2), "alltoall"));
    EXPECT_EQ(ops_named(tp, "expert-up", 3, Phase::Forward).at(0).m,
              ops_named(a2a, "expert-up", 3, Phase::Forward).at(0).m);
  }
  // Experts split over TP would gather over TP x EP, which is refused.
  try {
    build_training_plan(scenario_from_text(with(y, {{"expert_tp: 1", "expert_tp: 2"}}), "tpep"));
    ADD_FAILURE() << "allgather over TP x EP was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("allgather dispatcher over TP x EP"), std::string::npos) << e.what();
  }
}

// The router's kernels after its GEMM, the balancing loss's collectives and the
// dispatcher's host waits, as Megatron-Core runs them (docs/model.md, "The router's own
// kernels"; counts measured in calibrate/measurements/moe-router-h100-2026-12-06).
// Under FP8 the grouped MLP's rows are padded per expert to a multiple of 16: Transformer
// Engine's Fp8Padding copies the dispatched tokens in, Fp8Unpadding copies FC2's output out,
// and the backward copies the gradients back the other way, each the rows x h in BF16; none
// with the router's own padding or in BF16. The grouped linear's backward is one autograd
// node, so the dispatch's all-to-all backward follows its weight gradient.
TEST(Moe, Fp8GroupedMlpPadsItsRowsAndTheDispatchBackwardFollowsTheWeightGradient) {
  const std::string base =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: mixtral-8x7b, layers: 2, seq_len: 4096, dtype: DT, "
      "moe: {experts: 8, PAD}}\nparallel: {dp: 8, ep: 8}\ntraining: {global_batch: 8}\n";
  const char* pads[] = {"fp8-pad-expert-input", "fp8-unpad-expert-output", "fp8-pad-expert-output-grad",
                        "fp8-unpad-expert-input-grad"};
  const Phase phase[] = {Phase::Forward, Phase::Forward, Phase::Backward, Phase::Backward};
  {
    const TrainingPlan tp =
        build_training_plan(scenario_from_text(with(base, {{"DT", "fp8"}, {"PAD", "top_k: 2"}}), "fp8-pad"));
    const auto up = ops_named(tp, "expert-up", 1, Phase::Forward);
    ASSERT_EQ(up.size(), 1u);
    const int64_t rows = up[0].m * up[0].batch;  // rows an expert x local experts
    EXPECT_EQ(rows, 4096 * 2);
    for (int i = 0; i < 4; ++i) {
      const auto op = ops_named(tp, pads[i], 1, phase[i]);
      ASSERT_EQ(op.size(), 1u) << pads[i];
      EXPECT_EQ(op[0].bytes_read, rows * 4096 * 2) << pads[i];
      EXPECT_EQ(op[0].bytes_written, rows * 4096 * 2) << pads[i];
    }
    const Program& prog = tp.plan.programs[0];
    int checked = 0;
    for (uint32_t i = 0; i < prog.ops.size(); ++i)
      if (tp.plan.names[prog.ops[i].name] == "moe-dispatch-alltoall-backward" && prog.ops[i].layer == 1 &&
          prog.ops[i].micro_batch == 0) {
        EXPECT_TRUE(waits_for(tp, i, "expert-up-wgrad"));
        EXPECT_TRUE(waits_for(tp, i, "fp8-unpad-expert-input-grad"));
        ++checked;
      }
    EXPECT_EQ(checked, 1);
  }
  for (const auto& [dt, pad] : {std::pair<std::string, std::string>{"fp8", "top_k: 2, router_padding_for_fp8: true"},
                                {"bf16", "top_k: 2"}}) {
    const TrainingPlan tp = build_training_plan(scenario_from_text(with(base, {{"DT", dt}, {"PAD", pad}}), "no-pad"));
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(ops_named(tp, pads[i], 1, phase[i]).empty()) << dt << " " << pads[i];
    const Program& prog = tp.plan.programs[0];
    for (uint32_t i = 0; i < prog.ops.size(); ++i) {
      if (tp.plan.names[prog.ops[i].name] == "moe-dispatch-alltoall-backward" && prog.ops[i].layer == 1 &&
          prog.ops[i].micro_batch == 0) {
        EXPECT_TRUE(waits_for(tp, i, "expert-up-wgrad")) << dt;
      }
    }
  }
}

// Aux-loss-free balancing updates the expert bias once a step, after the gradient sync
// (Megatron-Core's _update_router_expert_bias): the stage's MoE layers' counts and biases
// stacked, the counts ([layers, 16] FP32) all-reduced over DP x CP and TP, six kernels of
// arithmetic and two a layer to zero the counts and copy the biases back.
TEST(Moe, ExpertBiasUpdatedOnceAStepOverTpDpCp) {
  auto step_ops = [](const TrainingPlan& tp, const std::string& name) {
    std::vector<Op> out;
    for (const Op& op : tp.plan.programs[0].ops)
      if (tp.plan.names[op.name] == name && op.phase == Phase::Optimizer) out.push_back(op);
    return out;
  };
  for (const int mtp : {0, 1}) {
    const TrainingPlan tp = build_training_plan(scenario_from_text(small(2, mtp), "bias"));
    const int64_t layers = 1 + mtp;  // of 4, the preset's first 3 dense; the prediction module's is MoE
    const int64_t table = layers * 16 * 4;
    const auto stack = step_ops(tp, "expert-bias-stack"), update = step_ops(tp, "expert-bias-update");
    const auto dp = step_ops(tp, "expert-bias-counts-allreduce"), tpr = step_ops(tp, "expert-bias-counts-allreduce-tp");
    ASSERT_EQ(stack.size(), 1u);
    ASSERT_EQ(update.size(), 1u);
    ASSERT_EQ(dp.size(), 1u);
    ASSERT_EQ(tpr.size(), 1u);
    EXPECT_EQ(stack[0].k, 2);
    EXPECT_EQ(stack[0].bytes_read, 2 * table);
    EXPECT_EQ(dp[0].bytes, table);
    EXPECT_EQ(dp[0].group, GroupKind::DP);
    EXPECT_EQ(tpr[0].group, GroupKind::TP);
    EXPECT_EQ(update[0].k, 6 + 2 * layers);
  }
  const TrainingPlan off = build_training_plan(scenario_from_text(
      with(small(2), {{"moe: {experts: 16}", "moe: {experts: 16, expert_bias: false}"}}), "no-bias"));
  EXPECT_TRUE(step_ops(off, "expert-bias-update").empty());
}

TEST(Moe, RouterKernelsBalancingLossAndHostWaitsAsMegatronCoreRunsThem) {
  auto only = [](const std::vector<Op>& ops) {
    EXPECT_EQ(ops.size(), 1u);
    return ops.empty() ? Op{} : ops[0];
  };
  // DeepSeek-V3's router (the preset): sigmoid scores with the expert bias, 4 of 8 groups,
  // scaling, the sequence loss at 1e-4; dropless here (no capacity).
  {
    const TrainingPlan tp = build_training_plan(scenario_from_text(small(2), "deepseek"));
    // Forward: the sigmoid base 22, the bias 4, the groups 11, the scaling 1; the loss 11 + 2.
    EXPECT_EQ(only(ops_named(tp, "moe-route", 3, Phase::Forward)).k, 22 + 4 + 11 + 1);
    EXPECT_EQ(only(ops_named(tp, "moe-aux-loss", 3, Phase::Forward)).k, 11 + 2);
    EXPECT_EQ(only(ops_named(tp, "moe-route-backward", 3, Phase::Backward)).k, 12 + 2 + 1);
    EXPECT_EQ(only(ops_named(tp, "moe-aux-loss-backward", 3, Phase::Backward)).k, 10 + 3);
    // Each kernel moves the rank's [2,048 tokens, 16 experts] in and out (BF16 here).
    EXPECT_EQ(only(ops_named(tp, "moe-route", 3, Phase::Forward)).bytes_read, 38 * 2048 * 16 * 2);
    // The sequence loss gathers every sequence's scores over TP (2 ranks of 2,048 x 16,
    // BF16 sigmoid scores) and reduce-scatters their gradient back.
    EXPECT_EQ(only(ops_named(tp, "moe-aux-scores-allgather-tp", 3, Phase::Forward)).bytes, 2 * 2048 * 16 * 2);
    EXPECT_EQ(only(ops_named(tp, "moe-aux-scores-reduce-scatter-tp", 3, Phase::Backward)).bytes, 2 * 2048 * 16 * 2);
    // Dropless: the counts gathered over EP for the all-to-all's splits, and the
    // permutation's two masked_selects (tokens, probabilities) each a host wait.
    EXPECT_EQ(only(ops_named(tp, "moe-counts-allgather-ep", 3, Phase::Forward)).bytes, 4 * 16 * 8);
    EXPECT_EQ(only(ops_named(tp, "moe-permute-sync", 3, Phase::Forward)).access, MemAccess::HostSync);
    EXPECT_EQ(ops_named(tp, "moe-permute-probs-sync", 3, Phase::Forward).size(), 1u);
    EXPECT_TRUE(ops_named(tp, "moe-unpermute-sync", 3, Phase::Forward).empty());
    const Program& prog = tp.plan.programs[0];
    for (uint32_t i = 0; i < prog.ops.size(); ++i)
      if (tp.plan.names[prog.ops[i].name] == "moe-dispatch-alltoall" && prog.ops[i].layer == 3 &&
          prog.ops[i].micro_batch == 0) {
        EXPECT_TRUE(waits_for(tp, i, "moe-permute-probs-sync"));
      }
  }
  // Padded to capacity: 6 + 1 more kernels, no counts to gather, one wait (the probabilities).
  {
    const TrainingPlan tp = build_training_plan(scenario_from_text(
        with(small(2), {{"moe: {experts: 16}", "moe: {experts: 16, routing: {dist: even, dropless: false}}"}}),
        "padded"));
    EXPECT_EQ(only(ops_named(tp, "moe-route", 3, Phase::Forward)).k, 38 + 6);
    EXPECT_EQ(only(ops_named(tp, "moe-route-backward", 3, Phase::Backward)).k, 15 + 1);
    EXPECT_TRUE(ops_named(tp, "moe-counts-allgather-ep", 3, Phase::Forward).empty());
    EXPECT_EQ(ops_named(tp, "moe-permute-sync", 3, Phase::Forward).size(), 1u);
    EXPECT_TRUE(ops_named(tp, "moe-permute-probs-sync", 3, Phase::Forward).empty());
  }
  // Megatron-Core's default router (softmax, no loss: coefficient 0), core_r0.10's
  // masked_select permutation: the switch loss at 0.01 adds 8 + 8 kernels and the counts'
  // all-reduce over TP; masked_select waits in the permutation and the unpermutation.
  {
    const std::string soft = "moe: {experts: 16, score_function: softmax, expert_bias: false, groups: 0, "
                             "group_topk: 0, topk_scaling: 0, load_balancing: aux_loss, aux_loss_coeff: COEFF, "
                             "routing: {dist: even, dropless: false}}";
    for (const char* coeff : {"0", "0.01"}) {
      const bool aux = std::string(coeff) != "0";
      const TrainingPlan tp = build_training_plan(scenario_from_text(
          with(small(2), {{"moe: {experts: 16}", with(soft, {{"COEFF", coeff}})},
                          {"rope_fusion: false", "rope_fusion: false, moe_permute: masked-select"}}),
          "softmax"));
      EXPECT_EQ(only(ops_named(tp, "moe-route", 3, Phase::Forward)).k, 15 + 6);
      EXPECT_EQ(only(ops_named(tp, "moe-route-backward", 3, Phase::Backward)).k, 8 + 1);
      EXPECT_EQ(ops_named(tp, "moe-aux-loss", 3, Phase::Forward).size(), aux ? 1u : 0u);
      EXPECT_EQ(ops_named(tp, "moe-aux-counts-allreduce-tp", 3, Phase::Forward).size(), aux ? 1u : 0u);
      if (aux) {
        EXPECT_EQ(only(ops_named(tp, "moe-aux-loss", 3, Phase::Forward)).k, 8);
        EXPECT_EQ(only(ops_named(tp, "moe-aux-counts-allreduce-tp", 3, Phase::Forward)).bytes, 16 * 8);
      }
      EXPECT_EQ(ops_named(tp, "moe-permute-sync", 3, Phase::Forward).size(), 1u);
      EXPECT_EQ(ops_named(tp, "moe-unpermute-sync", 3, Phase::Forward).size(), 1u);
    }
  }
  // Transformer Engine's fused permutation: no index kernels and, padded, no wait.
  {
    const TrainingPlan tp = build_training_plan(scenario_from_text(
        with(small(2), {{"moe: {experts: 16}", "moe: {experts: 16, routing: {dist: even, dropless: false}}"},
                        {"rope_fusion: false", "rope_fusion: false, moe_permute: fused"}}),
        "fused"));
    EXPECT_TRUE(ops_named(tp, "moe-permute-indices", 3, Phase::Forward).empty());
    EXPECT_TRUE(ops_named(tp, "moe-permute-sync", 3, Phase::Forward).empty());
    EXPECT_TRUE(ops_named(tp, "moe-permute-indices-backward", 3, Phase::Backward).empty());
  }
  // Refused: groups without their top-k, or ones that do not fit; a bias on softmax scores.
  for (const auto& [change, key] : std::vector<std::pair<std::string, std::string>>{
           {"moe: {experts: 16, group_topk: 0}", "model.moe.groups"},
           {"moe: {experts: 16, groups: 3}", "model.moe.groups"},
           {"moe: {experts: 16, score_function: softmax}", "model.moe.expert_bias"}}) {
    try {
      build_training_plan(scenario_from_text(with(small(2), {{"moe: {experts: 16}", change}}), "bad"));
      ADD_FAILURE() << change << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}

TEST(Pipeline, FirstAndLastStagesOfTheirOwnSize) {
  TrainingLayout l;
  l.pp = 16;
  // DeepSeek-V3's recipe: 61 layers, the first stage 3, the last 2, fourteen of 4.
  l.first_stage_layers = 3;
  l.last_stage_layers = 2;
  EXPECT_EQ(stage_layers(l, 61, 0), (std::pair<int64_t, int64_t>{0, 3}));
  EXPECT_EQ(stage_layers(l, 61, 1), (std::pair<int64_t, int64_t>{3, 4}));
  EXPECT_EQ(stage_layers(l, 61, 14), (std::pair<int64_t, int64_t>{55, 4}));
  EXPECT_EQ(stage_layers(l, 61, 15), (std::pair<int64_t, int64_t>{59, 2}));
  // With two chunks a stage each stage's layers split over its chunks: chunk c of stage st is
  // virtual stage c·pp + st.
  TrainingLayout v;
  v.pp = 4;
  v.virtual_stages = 2;
  v.first_stage_layers = 2;
  v.last_stage_layers = 4;
  // 26 layers: 2, 10, 10, 4 a stage; 1, 5, 5, 2 a chunk.
  int64_t sum = 0;
  for (int64_t vs = 0; vs < 8; ++vs) {
    const auto [first, count] = stage_layers(v, 26, vs);
    EXPECT_EQ(first, sum) << vs;
    const std::array<int64_t, 4> per_chunk = {1, 5, 5, 2};
    EXPECT_EQ(count, per_chunk[static_cast<size_t>(vs % 4)]) << vs;
    sum += count;
  }
  EXPECT_EQ(sum, 26);
  // A split that leaves the middle stages uneven is refused, with the numbers.
  try {
    build_training_plan(scenario_from_text(
        "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b, layers: 30}\n"
        "parallel: {pp: 4, dp: 2, first_stage_layers: 3, last_stage_layers: 2}\ntraining: {global_batch: 8}\n",
        "uneven"));
    ADD_FAILURE() << "an uneven middle was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("leave 25 of 30"), std::string::npos) << e.what();
  }
}

TEST(Mla, ServedFromALatentCache) {
  ServingShape sh;
  sh.model = *find_model_preset("deepseek-v3");
  sh.tp = 8;
  // Every TP rank caches the whole latent and rotary key: 576 elements a token and layer.
  EXPECT_DOUBLE_EQ(sh.kv_layer_bytes(), 576 * 2.0);
  IterationBatch decode;
  decode.tokens = decode.emitting = 32;
  decode.decode_context = 32 * 2000;
  decode.decode_seqs = 32;
  const Plan p = build_iteration_plan(sh, decode, true);
  std::map<std::string, const Op*> first;
  for (const Op& op : p.programs[0].ops)
    if (op.layer == 3 && !first.count(p.names[op.name])) first[p.names[op.name]] = &op;
  // A decode absorbs the query into the latent space and the output out of it, per head.
  ASSERT_TRUE(first.count("q_absorb") && first.count("v_absorb"));
  EXPECT_EQ(first["q_absorb"]->batch, 16);
  EXPECT_EQ(first["q_absorb"]->n, 512);
  EXPECT_EQ(first["q_absorb"]->k, 128);
  EXPECT_FALSE(first.count("kv_up"));
  // The decode kernel streams the latent cache.
  ASSERT_TRUE(first.count("decode_attention"));
  EXPECT_EQ(first["decode_attention"]->bytes_read, static_cast<int64_t>(32 * 2000 * 576 * 2.0));
  // A prefill up-projects its context to every head's key and value.
  IterationBatch prefill;
  prefill.tokens = prefill.emitting = 1000;
  prefill.prefill = {{1000, 0}};
  const Plan q = build_iteration_plan(sh, prefill, true);
  bool kv_up = false;
  for (const Op& op : q.programs[0].ops)
    if (q.names[op.name] == "kv_up" && op.layer == 3) {
      kv_up = true;
      EXPECT_EQ(op.m, 1000);
      EXPECT_EQ(op.n, 16 * 256);
      EXPECT_EQ(op.k, 512);
    }
  EXPECT_TRUE(kv_up);
}

}  // namespace
}  // namespace clustersim
