// The training layouts against their documented formulas: communication volumes, memory,
// the model's shapes and the shipped examples.
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

// Per layer and micro-batch (b·s·h elements of e bytes): pipeline sends one activation
// forward and one gradient back per stage boundary; DP reduces every local parameter's
// fp32 gradient once; ZeRO-3 gathers each layer's parameters before forward and backward.
TEST(Volumes, PipelineDataParallelAndZero) {
  const Scenario s = scenario_from_text(
      std::string(kTiny) + "parallel: {pp: 2, dp: 8, micro_batch: 2}\ntraining: {global_batch: 64}\n", "vol-pp");
  const TrainingPlan tp = build_training_plan(s);
  const double act = 2.0 * 2048 * 2048 * 2;  // b·s·h·bytes
  const int64_t M = 4;
  // Beside them, once a step, each end stage sends its copy of the tied embedding's FP32
  // gradient (vocab 51,200 x h) to the other (finalize_model_grads).
  const double embedding = 51200.0 * 2048 * 4;
  EXPECT_DOUBLE_EQ(sum_bytes(tp.plan, 0, OpKind::Send, GroupKind::PP, CollectiveKind::AllReduce),
                   M * act + embedding);  // stage 0: activations
  EXPECT_DOUBLE_EQ(sum_bytes(tp.plan, 1, OpKind::Send, GroupKind::PP, CollectiveKind::AllReduce),
                   M * act + embedding);  // stage 1: gradients
  // DP: every parameter of the stage, 4 bytes each, once per iteration.
  MemoryInputs in;
  in.pp = 2;
  in.first_layer = 0;
  in.end_layer = 4;
  in.output = false;
  const double stage0 = stage_params(s.model, in).dense;
  EXPECT_NEAR(sum_bytes(tp.plan, 0, OpKind::Collective, GroupKind::DP, CollectiveKind::AllReduce), 4 * stage0, 8.0);

  Scenario z3 = s;
  z3.parallel.zero_stage = 3;
  const TrainingPlan t3 = build_training_plan(z3);
  // Gathers: 2 per layer per micro-batch (forward, backward), each the layer's bf16 weights,
  // and the embedding table before each micro-batch's lookup (its backward reads none).
  const double layer = static_cast<double>(s.model.attention_params() + s.model.dense_mlp_params()) + 4.0 * 2048;
  const double table = 51200.0 * 2048 * 2;
  EXPECT_NEAR(sum_bytes(t3.plan, 0, OpKind::Collective, GroupKind::DP, CollectiveKind::AllGather),
              2.0 * M * 4 * layer * 2 + M * table, 64.0 * M);
  EXPECT_NEAR(sum_bytes(t3.plan, 0, OpKind::Collective, GroupKind::DP, CollectiveKind::ReduceScatter),
              M * 4 * layer * 4 + 4 * (stage0 - 4 * layer), 64.0 * M);

  Scenario z1 = s;
  z1.parallel.zero_stage = 1;
  const TrainingPlan t1 = build_training_plan(z1);
  // ZeRO-1 (distributed optimizer): reduce-scatter the fp32 gradients, all-gather bf16 weights.
  EXPECT_NEAR(sum_bytes(t1.plan, 0, OpKind::Collective, GroupKind::DP, CollectiveKind::ReduceScatter), 4 * stage0, 8.0);
  EXPECT_NEAR(sum_bytes(t1.plan, 0, OpKind::Collective, GroupKind::DP, CollectiveKind::AllGather), 2 * stage0, 8.0);
}

// ZeRO 3 under gradient accumulation (M micro-batches of a stage with n layers, each of
// P parameters): per micro-batch it gathers 2·M·n·P·2 bytes and reduce-scatters M·n·P·4;
// gathering once, n·P·2 (the first forward only); syncing once, n·P·4 (the last
// backward only). Memory: gathering once holds the stage's weights unsharded, syncing
// once (of more than one micro-batch) its gradients.
TEST(Volumes, Zero3GatherAndGradientSyncOncePerStep) {
  const std::string base = std::string(kTiny) + "parallel: {dp: 16, micro_batch: 1, zero_stage: 3";
  auto plan = [&](const std::string& extra) {
    return build_training_plan(scenario_from_text(base + extra + "}\ntraining: {global_batch: 64}\n", "z3"));
  };
  const TrainingPlan per_mb = plan(""), gather_once = plan(", zero3_param_gather: step"),
                     both_once = plan(", zero3_param_gather: step, zero3_grad_sync: step");
  const Scenario s = scenario_from_text(base + "}\n", "z3");
  const double layer = static_cast<double>(s.model.attention_params() + s.model.dense_mlp_params()) + 4.0 * 2048;
  const double M = 4, n = 8;
  auto gathered = [](const TrainingPlan& t) {
    return sum_bytes(t.plan, 0, OpKind::Collective, GroupKind::DP, CollectiveKind::AllGather);
  };
  auto scattered = [](const TrainingPlan& t) {
    return sum_bytes(t.plan, 0, OpKind::Collective, GroupKind::DP, CollectiveKind::ReduceScatter);
  };
  // And the tied vocabulary table: before each forward (embedding and output layer alike)
  // and before each output-layer backward, or once.
  const double table = 51200.0 * 2048 * 2;
  EXPECT_NEAR(gathered(per_mb), 2 * M * n * layer * 2 + 2 * M * table, 64 * M);
  EXPECT_NEAR(gathered(gather_once), n * layer * 2 + table, 64);
  EXPECT_NEAR(gathered(both_once), n * layer * 2 + table, 64);
  // The layers' gradients; the embedding and output layer's are reduced once in both.
  const double rest = scattered(both_once) - n * layer * 4;
  EXPECT_GT(rest, 0.0);
  EXPECT_NEAR(scattered(per_mb), M * n * layer * 4 + rest, 64 * M);
  EXPECT_NEAR(scattered(gather_once), M * n * layer * 4 + rest, 64 * M);

  EXPECT_NEAR(gather_once.memory.weights, 16 * per_mb.memory.weights, 16.0);
  EXPECT_DOUBLE_EQ(gather_once.memory.gradients, per_mb.memory.gradients);
  EXPECT_NEAR(both_once.memory.gradients, 16 * per_mb.memory.gradients, 16.0);
  // One micro-batch a step accumulates nothing: syncing once holds no unsharded buffer.
  auto one = [&](const std::string& extra) {
    return build_training_plan(scenario_from_text(base + extra + "}\ntraining: {global_batch: 16}\n", "z3"));
  };
  EXPECT_DOUBLE_EQ(one(", zero3_grad_sync: step").memory.gradients, one("").memory.gradients);
  // Fewer collectives on the DP stream: the step is no slower.
  EXPECT_LE(run_training(scenario_from_text(base + ", zero3_param_gather: step}\ntraining: {global_batch: 64}\n", "z3"))
                .exec.makespan,
            run_training(scenario_from_text(base + "}\ntraining: {global_batch: 64}\n", "z3")).exec.makespan);
}

// FSDP's dtypes and SHARD_GRAD_OP. Plain PyTorch FSDP gathers the FP32 parameters
// (4 bytes) that autocast casts at every linear; a 16-bit param_dtype gathers 2 bytes and
// leaves autocast nothing to cast; reduce_dtype sets the reduce-scatter's bytes.
// SHARD_GRAD_OP (zero3_param_gather: forward) gathers before each forward only: M·n·P.
TEST(Volumes, FsdpDtypesAndShardGradOp) {
  const std::string base = std::string(kTiny) +
                           "training: {global_batch: 64, framework: pytorch-eager}\n"
                           "parallel: {dp: 16, micro_batch: 1, zero_stage: 3";
  auto plan = [&](const std::string& extra) {
    return build_training_plan(scenario_from_text(base + extra + "}\n", "fsdp"));
  };
  auto gathered = [](const TrainingPlan& t) {
    return sum_bytes(t.plan, 0, OpKind::Collective, GroupKind::DP, CollectiveKind::AllGather);
  };
  auto scattered = [](const TrainingPlan& t) {
    return sum_bytes(t.plan, 0, OpKind::Collective, GroupKind::DP, CollectiveKind::ReduceScatter);
  };
  auto casts = [](const TrainingPlan& t) {
    int n = 0;
    for (const Op& op : t.plan.programs[0].ops) {
      const std::string& name = t.plan.names[op.name];
      n += name.rfind("autocast-cast-", 0) == 0 && name.find("weight") != std::string::npos;
    }
    return n;
  };
  const TrainingPlan fp32 = plan(""), bf16 = plan(", fsdp_param_dtype: bf16"),
                     reduce16 = plan(", fsdp_reduce_dtype: bf16"), sgo = plan(", zero3_param_gather: forward");
  EXPECT_NEAR(gathered(fp32), 2 * gathered(bf16), 64.0);
  EXPECT_NEAR(scattered(fp32), 2 * scattered(reduce16), 64.0);
  EXPECT_DOUBLE_EQ(gathered(reduce16), gathered(fp32));
  EXPECT_GT(casts(fp32), 0);
  EXPECT_EQ(casts(bf16), 0);
  EXPECT_NEAR(2 * gathered(sgo), gathered(fp32), 64.0);  // forward gathers only
  EXPECT_DOUBLE_EQ(scattered(sgo), scattered(fp32));
  EXPECT_GT(sgo.memory.weights, fp32.memory.weights);  // held from forward to backward

  // The keys shape ZeRO 3 only.
  EXPECT_THROW(build_training_plan(scenario_from_text(
                   std::string(kTiny) + "parallel: {dp: 16, zero_stage: 1, fsdp_reduce_dtype: bf16}\n", "fsdp")),
               InputError);
  EXPECT_THROW(build_training_plan(scenario_from_text(
                   std::string(kTiny) + "parallel: {dp: 16, zero3_param_gather: step}\n", "fsdp")),
               InputError);
}

// When FSDP issues the backward's gather of the next layer down (docs/model.md, "ZeRO 3
// backward prefetch"). Every gather and reduce-scatter is on the one DP stream, in program
// order. pre (BACKWARD_PRE, Megatron-FSDP) and post (BACKWARD_POST) issue the gather of layer
// L-1 from L's backward hooks, which the host runs ahead of the GPU: it goes on the stream
// ahead of L's reduce-scatter, waiting for no kernel of L, the same plan either way. none
// issues it when L-1's backward begins, behind L's reduce-scatter. So layer L-1's backward
// waits for RS(L+1) and AG(L-1) beside L's kernels (pre, post), or for RS(L) then AG(L-1)
// after them (none).
TEST(Overlap, Zero3BackwardPrefetchDecidesWhatTheBackwardWaitsFor) {
  const std::string base = std::string(kTiny) + "parallel: {dp: 16, micro_batch: 1, zero_stage: 3";
  auto text = [&](const std::string& mode) {
    return base + ", zero3_backward_prefetch: " + mode + "}\ntraining: {global_batch: 64}\n";
  };
  struct Order {
    size_t gather = 0, scatter = 0;  // program positions: AG(L-1) of the backward, RS(L)
    bool waits = false;              // whether AG(L-1) depends on an op of layer L (never: the host issues it)
  };
  auto order = [](const TrainingPlan& t, int32_t L) {
    const Program& pr = t.plan.programs[0];
    Order o;
    bool gather = false, scatter = false;
    // The first micro-batch's backward: its first gather of L-1 and first reduce-scatter of L.
    for (size_t i = 0; i < pr.ops.size(); ++i) {
      const Op& op = pr.ops[i];
      const std::string& name = t.plan.names[op.name];
      if (!gather && name == "zero3-param-allgather-bwd" && op.layer == L - 1) {
        gather = true;
        o.gather = i;
        for (uint32_t d = op.dep_begin; d < op.dep_begin + op.dep_count; ++d)
          o.waits = o.waits || pr.ops[pr.deps[d]].layer == L;
      }
      if (!scatter && name == "zero3-grad-reduce-scatter" && op.layer == L) {
        scatter = true;
        o.scatter = i;
      }
    }
    EXPECT_TRUE(gather && scatter);
    return o;
  };
  const TrainingPlan pre = build_training_plan(scenario_from_text(text("pre"), "z3")),
                     post = build_training_plan(scenario_from_text(text("post"), "z3")),
                     none = build_training_plan(scenario_from_text(text("none"), "z3"));
  const Order a = order(pre, 5), b = order(post, 5), c = order(none, 5);
  EXPECT_LT(a.gather, a.scatter);
  EXPECT_FALSE(a.waits);
  EXPECT_EQ(b.gather, a.gather);
  EXPECT_EQ(b.scatter, a.scatter);
  EXPECT_FALSE(b.waits);
  EXPECT_GT(c.gather, c.scatter);
  EXPECT_FALSE(c.waits);
  // The same collectives in every mode; each backward gather issued once.
  auto count = [](const TrainingPlan& t) {
    int n = 0;
    for (const Op& op : t.plan.programs[0].ops) n += t.plan.names[op.name] == "zero3-param-allgather-bwd";
    return n;
  };
  EXPECT_EQ(count(pre), count(none));
  EXPECT_EQ(count(post), count(none));
  EXPECT_EQ(count(none), 4 * 8);  // 4 micro-batches x 8 layers
  // What the backward waits for shrinks from RS + AG to nothing beside the kernels.
  const double t_pre = run_training(scenario_from_text(text("pre"), "z3")).exec.exposed_comm_s,
               t_post = run_training(scenario_from_text(text("post"), "z3")).exec.exposed_comm_s,
               t_none = run_training(scenario_from_text(text("none"), "z3")).exec.exposed_comm_s;
  EXPECT_DOUBLE_EQ(t_pre, t_post);
  EXPECT_LT(t_pre, t_none);
  // The key shapes ZeRO 3 only.
  EXPECT_THROW(build_training_plan(scenario_from_text(
                   std::string(kTiny) + "parallel: {dp: 16, zero_stage: 1, zero3_backward_prefetch: post}\n", "z3")),
               InputError);
}

// PyTorch FSDP's post-backward hook around each layer's reduce-scatter (pytorch-eager,
// zero_stage 3): the unsharded gradient cast to reduce_dtype when it differs from the dtype
// the layer computed in, divided by the pre-divide factor (the largest power of two f with
// n/f > f: 4 of n = 16, 2 of n = 2), reduce-scattered; the shard divided by n/f when that
// is > 1, cast to the FP32 parameter's dtype when reduced in 16 bits, and added into the
// saved shard from the second micro-batch. Per layer of P parameters and micro-batch.
TEST(Volumes, FsdpPostBackwardPassesAroundTheReduceScatter) {
  const std::string base = std::string(kTiny) + "training: {global_batch: 64, framework: pytorch-eager}\n"
                                                "parallel: {micro_batch: 1, zero_stage: 3";
  auto plan = [&](const std::string& extra) {
    return build_training_plan(scenario_from_text(base + extra + "}\n", "fsdp"));
  };
  struct Pass {
    int count = 0;
    double read = 0, written = 0;
  };
  auto pass = [](const TrainingPlan& t, const std::string& name, int32_t layer) {
    Pass p;
    for (const Op& op : t.plan.programs[0].ops)
      if (t.plan.names[op.name] == name && op.layer == layer) {
        ++p.count;
        p.read = static_cast<double>(op.bytes_read);
        p.written = static_cast<double>(op.bytes_written);
      }
    return p;
  };
  const Scenario s = scenario_from_text(base + ", dp: 16}\n", "fsdp");
  const double P = static_cast<double>(s.model.attention_params() + s.model.dense_mlp_params()) + 4.0 * 2048;
  const double M = 4, n = 16, shard = P / n;
  const TrainingPlan fp32 = plan(", dp: 16"), bf16 = plan(", dp: 16, fsdp_param_dtype: bf16"),
                     r16 = plan(", dp: 16, fsdp_param_dtype: bf16, fsdp_reduce_dtype: bf16"),
                     two = build_training_plan(scenario_from_text(
                         "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 2}\n"
                         "model: {preset: gpt3-1.3b, layers: 8}\n"
                         "training: {global_batch: 8, framework: pytorch-eager}\n"
                         "parallel: {micro_batch: 1, zero_stage: 3, dp: 2}\n",
                         "fsdp"));
  const int32_t L = 3;
  // FP32 parameters, FP32 reduction: no cast; pre-divide by 4, post-divide by 4.
  EXPECT_EQ(pass(fp32, "fsdp-grad-cast", L).count, 0);
  EXPECT_EQ(pass(fp32, "fsdp-grad-predivide", L).count, M);
  EXPECT_NEAR(pass(fp32, "fsdp-grad-predivide", L).read, 4 * P, 64);
  EXPECT_NEAR(pass(fp32, "fsdp-grad-postdivide", L).written, 4 * shard, 64);
  EXPECT_EQ(pass(fp32, "fsdp-grad-shard-cast", L).count, 0);
  EXPECT_EQ(pass(fp32, "fsdp-grad-accumulate", L).count, M - 1);
  EXPECT_NEAR(pass(fp32, "fsdp-grad-accumulate", L).read, 8 * shard, 64);
  // BF16 compute, FP32 reduction: the unsharded cast, 2 bytes in, 4 out.
  EXPECT_EQ(pass(bf16, "fsdp-grad-cast", L).count, M);
  EXPECT_NEAR(pass(bf16, "fsdp-grad-cast", L).read, 2 * P, 64);
  EXPECT_NEAR(pass(bf16, "fsdp-grad-cast", L).written, 4 * P, 64);
  // BF16 reduction: no unsharded cast, the shard cast back to FP32.
  EXPECT_EQ(pass(r16, "fsdp-grad-cast", L).count, 0);
  EXPECT_NEAR(pass(r16, "fsdp-grad-predivide", L).read, 2 * P, 64);
  EXPECT_EQ(pass(r16, "fsdp-grad-shard-cast", L).count, M);
  EXPECT_NEAR(pass(r16, "fsdp-grad-shard-cast", L).written, 4 * shard, 64);
  // Two ranks: the pre-divide takes the whole factor, no post-divide.
  EXPECT_EQ(pass(two, "fsdp-grad-predivide", L).count, M);
  EXPECT_EQ(pass(two, "fsdp-grad-postdivide", L).count, 0);
  // Megatron's ZeRO 3 has none of them.
  const TrainingPlan megatron = build_training_plan(scenario_from_text(
      std::string(kTiny) + "parallel: {dp: 16, micro_batch: 1, zero_stage: 3}\ntraining: {global_batch: 64}\n", "z3"));
  EXPECT_EQ(pass(megatron, "fsdp-grad-predivide", L).count, 0);
}

// Without sequence parallelism every TP rank holds the whole activation; Megatron's
// scatter-gather sends each rank's 1/tp slice (b·s·h·e / tp bytes) and all-gathers the
// slices on the receiving stage (b·s·h·e over the TP group). With SP the activation is
// already 1/tp per rank: nothing to gather. Off: the whole tensor from every rank.
TEST(Volumes, PipelineScatterGather) {
  const std::string base = std::string(kTiny) + "training: {global_batch: 32}\nparallel: {pp: 2, tp: 2, dp: 4";
  auto volumes = [&](const std::string& extra) {
    const TrainingPlan tp = build_training_plan(scenario_from_text(base + extra + "}\n", "pp-sg"));
    const Program& prog = tp.plan.programs[tp.plan.rank_program[0]];  // stage 0: sends activations
    double send = 0, gathers = 0;
    for (const Op& op : prog.ops) {
      if (op.kind == OpKind::Send && op.group == GroupKind::PP && op.phase == Phase::Forward)
        send = static_cast<double>(op.bytes);
      if (op.kind == OpKind::Collective && op.collective == CollectiveKind::AllGather &&
          tp.plan.names[op.name].starts_with("pp-")) gathers += static_cast<double>(op.bytes);
    }
    return std::pair{send, gathers};
  };
  const double act = 2048.0 * 2048 * 2;  // seq 2048, hidden 2048, bf16, micro-batch 1
  const auto sg = volumes("");
  EXPECT_DOUBLE_EQ(sg.first, act / 2);
  EXPECT_DOUBLE_EQ(sg.second, 8 * act);  // stage 0 receives 8 gradients (32 sequences over DP 4), each gathered
  const auto whole = volumes(", pp_scatter_gather: false");
  EXPECT_DOUBLE_EQ(whole.first, act);
  EXPECT_DOUBLE_EQ(whole.second, 0.0);
  const auto sp = volumes(", sequence_parallel: true");
  EXPECT_DOUBLE_EQ(sp.first, act / 2);
  EXPECT_DOUBLE_EQ(sp.second, 0.0);
}

TEST(Volumes, ContextParallelRing) {
  const Scenario s = scenario_from_text(
      "cluster: {preset: dgx-h100}\nmodel: {preset: llama3-8b, layers: 2}\nparallel: {tp: 2, cp: 4, dp: 1}\ntraining: "
      "{global_batch: 1}\n",
      "vol-cp");
  const TrainingPlan tp = build_training_plan(s);
  const double block = 2.0 * 1 * (8192 / 4) * (8 / 2) * 128 * 2;
  EXPECT_DOUBLE_EQ(
      sum_bytes(tp.plan, 0, OpKind::Send, GroupKind::CP, CollectiveKind::AllReduce, 0, Phase::Forward, false),
      3 * block);
  EXPECT_DOUBLE_EQ(
      sum_bytes(tp.plan, 0, OpKind::Send, GroupKind::CP, CollectiveKind::AllReduce, 0, Phase::Backward, false),
      3 * 2 * block);
  const RunOutcome out = run_training(s);
  EXPECT_GT(out.exec.events, 0u);
}

// Expert parallelism: per MoE layer and micro-batch, dispatch and combine all-to-alls of
// tokens·top_k·h elements, forward and backward.
TEST(Volumes, ExpertParallelAllToAll) {
  const Scenario s = scenario_from_text(
      "cluster: {preset: dgx-h100}\nmodel: {preset: mixtral-8x7b, layers: 2}\nparallel: {dp: 8, ep: 4}\ntraining: "
      "{global_batch: 8}\n",
      "vol-ep");
  const TrainingPlan tp = build_training_plan(s);
  const double a2a = 4096.0 * 2 * 4096 * 2;  // tokens·top_k·h·bytes
  EXPECT_DOUBLE_EQ(sum_bytes(tp.plan, 0, OpKind::Collective, GroupKind::EP, CollectiveKind::AllToAll, 0), 4 * a2a);
  // Expert gradients go over the expert-data-parallel group (dp/ep = 2 ranks).
  EXPECT_GT(sum_bytes(tp.plan, 0, OpKind::Collective, GroupKind::EDP, CollectiveKind::AllReduce), 0.0);
  const RunOutcome out = run_training(s);
  EXPECT_GT(out.metrics[0].second, 0.0);
}

// Experts are carved out of DP x CP, as Megatron-Core lays them out (CP innermost, then DP):
// at CP 2, DP 2, EP 4 one EP group holds all four ranks, CP peers included, and each expert's
// gradients have no one to be reduced with.
TEST(Volumes, ExpertParallelSpansContextParallelRanks) {
  const Scenario s = scenario_from_text(
      "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 4}\nmodel: {preset: mixtral-8x7b, layers: 2, seq_len: "
      "8192}\nparallel: {cp: 2, dp: 2, ep: 4}\ntraining: {global_batch: 2}\n",
      "vol-ep-cp");
  const TrainingPlan tp = build_training_plan(s);
  int ep_groups = 0, edp_groups = 0;
  for (const auto& g : tp.plan.groups) {
    if (g.kind == GroupKind::EP) {
      ++ep_groups;
      EXPECT_EQ(g.ranks, (std::vector<int32_t>{0, 1, 2, 3}));
    }
    edp_groups += g.kind == GroupKind::EDP;
  }
  EXPECT_EQ(ep_groups, 1);
  EXPECT_EQ(edp_groups, 0);
  EXPECT_EQ(sum_bytes(tp.plan, 0, OpKind::Collective, GroupKind::EDP, CollectiveKind::AllReduce), 0.0);
}

// The optimizer steps the parameters the rank holds state for: the dense ones over DP x CP
// and its experts over the ranks holding the same experts (DP x CP x TP / expert TP, over EP)
// under the distributed optimizer, its own without it. So the step writes exactly the
// optimizer state the memory model keeps (12 bytes a parameter, Adam), whatever EP, TP and
// expert TP; it had stepped ep times the experts under ZeRO 0 and tp times them under expert TP 1.
TEST(Volumes, OptimizerStepWritesTheStateTheRankHolds) {
  const std::string y =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: mixtral-8x7b, layers: 2}\n"
      "parallel: {tp: TP, sequence_parallel: true, dp: DP, ep: EP, expert_tp: ETP, zero_stage: Z}\n"
      "training: {global_batch: 8}\n";
  for (const auto& [tp, dp, ep, etp, z] :
       {std::tuple{"1", "8", "2", "1", "0"}, std::tuple{"1", "8", "8", "1", "0"}, std::tuple{"1", "8", "8", "1", "1"},
        std::tuple{"2", "4", "8", "1", "1"}, std::tuple{"4", "2", "8", "1", "1"}, std::tuple{"2", "4", "4", "2", "1"},
        std::tuple{"4", "2", "8", "1", "0"}}) {
    const TrainingPlan p = build_training_plan(
        scenario_from_text(filled(y, {{"TP", tp}, {"DP", dp}, {"EP", ep}, {"ETP", etp}, {"Z", z}}), "opt-shard"));
    double written = 0;
    for (const Op& op : p.plan.programs[0].ops)
      if (p.plan.names[op.name] == "optimizer-step") written += static_cast<double>(op.bytes_written);
    EXPECT_NEAR(written, p.memory.optimizer, 1e-6 * p.memory.optimizer)
        << "tp " << tp << " dp " << dp << " ep " << ep << " expert_tp " << etp << " zero " << z;
  }
}

// ZeRO 3 shards the vocabulary tables with the layers, so it gathers them as it gathers a
// layer: the input embedding before its lookup, the output layer before its GEMM and again
// before its data-gradient GEMM (per micro-batch gathering); a tied table once a forward.
// They had been sharded in memory and never gathered, so ZeRO 3 moved less than ZeRO 0.
TEST(Volumes, Zero3GathersTheVocabularyTables) {
  const std::string y =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b, layers: 2, tied_embeddings: TIED}\n"
      "parallel: {dp: 8, zero_stage: 3}\ntraining: {global_batch: 8, framework: FW}\n";
  for (const char* fw : {"megatron", "pytorch-eager"})
    for (const char* tied : {"false", "true"}) {
      const TrainingPlan p =
          build_training_plan(scenario_from_text(filled(y, {{"TIED", tied}, {"FW", fw}}), "z3-vocab"));
      int fwd = 0, bwd = 0;
      for (const Op& op : p.plan.programs[0].ops) {
        const std::string& n = p.plan.names[op.name];
        if (n != "zero3-vocab-allgather" && n != "zero3-vocab-allgather-bwd") continue;
        (n == "zero3-vocab-allgather" ? fwd : bwd) += 1;
        // The whole table, in the gathered parameters' type: BF16, FP32 under FSDP without a policy.
        EXPECT_EQ(op.bytes, 128256LL * 4096 * (std::string(fw) == "megatron" ? 2 : 4)) << fw << " " << tied;
      }
      EXPECT_EQ(fwd, std::string(tied) == "true" ? 1 : 2) << fw << " " << tied;
      EXPECT_EQ(bwd, 1) << fw << " " << tied;
    }
}

// The optimizer's state as the stack keeps it (training.optimizer_state): Megatron's FP32
// moments and master (12 bytes a parameter of the shard), Apex's DistributedFusedAdam beside
// BF16 parameters with FP32 moments and the master's 16-bit remainders (10), or its BF16 state
// (4, no master: NeMo stores none when optim.dtype is the model's); Apex's step updates the BF16
// parameters itself, so no copy follows it. And ZeRO 2 shards the gradients only where nothing
// accumulates: over several micro-batches its distributed optimizers hold the whole buffer
// until the last one's reduce-scatter.
TEST(Volumes, OptimizerStateAsTheStackKeepsIt) {
  const std::string y =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b, layers: 2}\n"
      "parallel: {dp: 8, zero_stage: 2}\ntraining: {global_batch: GB, optimizer_state: STATE}\n";
  const TrainingPlan one = build_training_plan(scenario_from_text(filled(y, {{"GB", "8"}, {"STATE", "fp32"}}), "o"));
  const double per_param = one.memory.optimizer / 12.0;  // the shard's parameters
  for (const auto& [state, bytes, copies] :
       {std::tuple{"fp32", 12.0, 1}, std::tuple{"fp32-remainders", 10.0, 0}, std::tuple{"bf16", 4.0, 0}}) {
    const TrainingPlan p = build_training_plan(scenario_from_text(filled(y, {{"GB", "8"}, {"STATE", state}}), "o"));
    EXPECT_NEAR(p.memory.optimizer, bytes * per_param, 1e-6 * p.memory.optimizer) << state;
    int copy = 0;
    for (const Op& op : p.plan.programs[0].ops) copy += p.plan.names[op.name] == "main-param-copy";
    EXPECT_EQ(copy, copies) << state;
  }
  // One micro-batch: each bucket reduce-scattered as its backward ends, the gradients sharded;
  // four: the whole FP32 buffer accumulates.
  const TrainingPlan four = build_training_plan(scenario_from_text(filled(y, {{"GB", "32"}, {"STATE", "fp32"}}), "o"));
  EXPECT_NEAR(four.memory.gradients, 8 * one.memory.gradients, 1e-6 * four.memory.gradients);
  try {
    build_training_plan(scenario_from_text(
        filled(y, {{"GB", "8"}, {"STATE", "bf16"}}).replace(y.find("layers: 2"), 9, "layers: 2, dtype: fp16"), "o"));
    ADD_FAILURE() << "BF16 optimizer state beside FP16 parameters accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("expected model.dtype bf16"), std::string::npos) << e.what();
  }
}

// Shared experts are a dense MLP on every token: their up projection, its activation (SwiGLU:
// 2·f read, f written a row of width f) and the down projection, and the activation's backward
// (3·f read, 2·f written). Overlapped (--moe-shared-expert-overlap), Megatron issues the up
// projection while the dispatch's all-to-all is in flight and the down projection while the
// combine's is, so they hide those all-to-alls; they had been issued after the combine on the
// in-order compute stream, where the flag changed nothing.
TEST(Volumes, SharedExpertsRunTheirActivationAndHideTheAllToAllsWhenOverlapped) {
  const std::string y =
      "cluster: {preset: dgx-h100, nodes: 2, power_cap: false}\n"
      "model: {preset: mixtral-8x7b, layers: 4, seq_len: 4096, moe: {experts: 16, shared_experts: 1}}\n"
      "parallel: {dp: 16, ep: 16, zero_stage: 1, moe_shared_expert_overlap: OVERLAP}\n"
      "training: {global_batch: 16}\n";
  RunOutcome runs[2];
  for (int overlap = 0; overlap < 2; ++overlap) {
    const Scenario s = scenario_from_text(filled(y, {{"OVERLAP", overlap ? "true" : "false"}}), "shared");
    const TrainingPlan tp = build_training_plan(s);
    const Program& prog = tp.plan.programs[0];
    const double f = 4096.0 * 14336 * 2;  // a micro-batch's rows x the shared expert's width, BF16
    int act = 0, act_bwd = 0;
    uint32_t shared_up = ~0u, expert_up = ~0u, unpermute = ~0u;
    for (uint32_t i = 0; i < prog.ops.size(); ++i) {
      const Op& op = prog.ops[i];
      if (op.layer != 0 || op.micro_batch != 0) continue;
      const std::string& n = tp.plan.names[op.name];
      if (n == "shared-expert-swiglu" && op.phase == Phase::Forward) {
        ++act;
        EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_read), 2 * f);
        EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_written), f);
      }
      if (n == "shared-expert-act-backward") {
        ++act_bwd;
        EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_read), 3 * f);
        EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_written), 2 * f);
      }
      if (op.phase != Phase::Forward) continue;
      if (n == "shared-expert-up") shared_up = std::min(shared_up, i);
      if (n == "expert-up") expert_up = std::min(expert_up, i);
      if (n == "moe-unpermute") unpermute = std::min(unpermute, i);
    }
    EXPECT_EQ(act, 1);
    EXPECT_EQ(act_bwd, 1);
    // The compute stream runs in issue order: overlapped, the shared up projection comes
    // before the routed experts'; else after the combine's unpermutation.
    if (overlap)
      EXPECT_LT(shared_up, expert_up);
    else
      EXPECT_GT(shared_up, unpermute);
    runs[overlap] = run_training(s);
  }
  EXPECT_LT(runs[1].exec.exposed_comm_s, 0.5 * runs[0].exec.exposed_comm_s);
  EXPECT_LT(runs[1].exec.makespan.seconds(), 0.95 * runs[0].exec.makespan.seconds());
}

// parallel.expert_tp 1 under TP 2 (Megatron-Core's --expert-tensor-parallel-size 1): whole
// experts on every rank, EP carved out of TP x DP, each rank's own tokens straight into the
// EP all-to-all and no gather over TP.
TEST(Volumes, WholeExpertsOnEveryRank) {
  const std::string y =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: mixtral-8x7b, layers: 2}\n"
      "parallel: {tp: 2, sequence_parallel: SP, dp: 4, ep: EP, expert_tp: ETP}\ntraining: {global_batch: 4}\n";
  auto text = [&](const std::string& sp, const std::string& etp, const std::string& ep = "8") {
    return filled(y, {{"SP", sp}, {"EP", ep}, {"ETP", etp}});
  };
  const TrainingPlan tp = build_training_plan(scenario_from_text(text("true", "1"), "etp"));
  int ep_groups = 0;
  for (const auto& g : tp.plan.groups) {
    if (g.kind == GroupKind::EP) {
      ++ep_groups;
      EXPECT_EQ(g.ranks.size(), 8u);
    }
  }
  EXPECT_EQ(ep_groups, 1);
  const double own = 4096.0 / 2 * 2 * 4096 * 2;  // the rank's tokens·top_k·h·bytes
  EXPECT_DOUBLE_EQ(sum_bytes(tp.plan, 0, OpKind::Collective, GroupKind::EP, CollectiveKind::AllToAll, 0), 4 * own);
  for (const Op& op : tp.plan.programs[0].ops) {
    const std::string& name = tp.plan.names[op.name];
    EXPECT_EQ(name.find("moe-dispatch-allgather"), std::string::npos);
    if (name == "expert-up" && op.layer == 0 && op.micro_batch == 0) {
      EXPECT_EQ(op.n, 2 * 14336);         // the whole expert, SwiGLU's two halves
      EXPECT_EQ(op.m, 2048 * 8 * 2 / 8);  // own tokens · ep · top_k / experts
      EXPECT_EQ(op.batch, 1);             // one local expert
    }
  }
  // Shared experts stay split over the dense TP group.
  const Scenario shared = scenario_from_text(
      filled(y, {{"SP", "true"}, {"EP", "8"}, {"ETP", "1"}}).replace(y.find("layers: 2"), 9,
                                                                     "layers: 2, moe: {shared_experts: 1}"),
      "etp");
  const TrainingPlan with_shared = build_training_plan(shared);
  bool shared_up = false;
  for (const Op& op : with_shared.plan.programs[0].ops) {
    if (with_shared.plan.names[op.name] == "shared-expert-up" && op.layer == 0 && op.micro_batch == 0) {
      shared_up = true;
      EXPECT_EQ(op.n, 2 * 14336 / 2);  // SwiGLU's two halves over TP 2
      EXPECT_EQ(op.m, 4096);           // the TP group's tokens, gathered
    }
  }
  EXPECT_TRUE(shared_up);
  // One whole expert a rank holds as many expert weights as half of each of two under
  // expert_tp = tp (ep 4: the experts carved out of DP alone).
  const TrainingPlan split = build_training_plan(scenario_from_text(text("true", "2", "4"), "etp"));
  EXPECT_NEAR(tp.memory.weights, split.memory.weights, 0.05 * split.memory.weights);
  for (const auto& [sp, etp, want] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"false", "1", "sequence_parallel"}, {"true", "3", "expected 1 or tp"}}) {
    try {
      build_training_plan(scenario_from_text(text(sp, etp), "etp"));
      ADD_FAILURE() << "expert_tp " << etp << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

// Megatron-Core's all-to-all dispatcher under TP and SP: the MoE layer takes the rank's own
// 1/tp of the tokens (no all-gather of its input); the EP all-to-alls move those tokens'
// top_k rows, and the TP group all-gathers what its ranks received before the experts and
// reduce-scatters it after, forward and backward.
TEST(Volumes, MoeDispatchUnderSequenceParallelism) {
  const Scenario s = scenario_from_text(
      "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: mixtral-8x7b, layers: 2}\n"
      "parallel: {tp: 2, sequence_parallel: true, dp: 8, ep: 4}\ntraining: {global_batch: 8}\n",
      "vol-ep-sp");
  const TrainingPlan tp = build_training_plan(s);
  const double own = 4096.0 / 2 * 2 * 4096 * 2;  // (tokens / tp)·top_k·h·bytes
  EXPECT_DOUBLE_EQ(sum_bytes(tp.plan, 0, OpKind::Collective, GroupKind::EP, CollectiveKind::AllToAll, 0), 4 * own);
  std::map<std::string, double> bytes;
  for (const Op& op : tp.plan.programs[0].ops)
    if (op.layer == 0 && op.micro_batch == 0) bytes[tp.plan.names[op.name]] += static_cast<double>(op.bytes);
  for (const char* name : {"moe-dispatch-allgather", "moe-combine-reduce-scatter", "moe-combine-allgather-backward",
                           "moe-dispatch-reduce-scatter-backward"})
    EXPECT_DOUBLE_EQ(bytes[name], 2 * own) << name;  // the TP group's tokens·top_k·h·bytes
  EXPECT_EQ(bytes.count("allgather-mlp-input"), 0u);
  EXPECT_EQ(bytes.count("reduce-scatter-mlp"), 0u);
  EXPECT_EQ(bytes.count("allgather-mlp-grad"), 0u);
  EXPECT_EQ(bytes.count("moe-permute"), 1u);
  EXPECT_EQ(bytes.count("moe-unpermute"), 1u);
  // The router scores the rank's own tokens: 4096 / tp of them.
  for (const Op& op : tp.plan.programs[0].ops) {
    if (tp.plan.names[op.name] == "moe-router") {
      EXPECT_EQ(op.m, 2048);
    }
  }
  // Under FP8 the experts' Linears cast what they are fed: the gathered tokens (rows: the TP
  // group's tokens·top_k) and the activation's output forward, the two gradients backward;
  // each a cast-transpose, 2 bytes read and 2 written an element.
  const Scenario s8 = scenario_from_text(
      "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: mixtral-8x7b, layers: 2, dtype: fp8}\n"
      "parallel: {tp: 2, sequence_parallel: true, dp: 8, ep: 4}\ntraining: {global_batch: 8}\n",
      "vol-ep-sp-fp8");
  const TrainingPlan t8 = build_training_plan(s8);
  std::map<std::string, double> moved;
  for (const Op& op : t8.plan.programs[0].ops)
    if (op.layer == 0 && op.micro_batch == 0)
      moved[t8.plan.names[op.name]] += static_cast<double>(op.bytes_read + op.bytes_written);
  const double rows = 4096.0 * 2, h = 4096, fe = 14336.0 / 2;
  EXPECT_DOUBLE_EQ(moved["fp8-cast-expert-input"], rows * h * 4);
  EXPECT_DOUBLE_EQ(moved["fp8-cast-expert-act"], rows * fe * 4);
  EXPECT_DOUBLE_EQ(moved["fp8-cast-expert-grad"], rows * h * 4);
  EXPECT_DOUBLE_EQ(moved["fp8-cast-expert-act-grad"], rows * 2 * fe * 4);
  EXPECT_EQ(bytes.count("fp8-cast-expert-input"), 0u);  // none in BF16
}

// Memory: ZeRO shards optimizer state (1), gradients (2) and weights (3) over DP; 1F1B
// holds pp micro-batches of activations on the first stage, GPipe all m.
TEST(Memory, ZeroStagesAndPipelineInFlight) {
  auto mem = [&](const std::string& extra) {
    return build_training_plan(scenario_from_text(std::string(kTiny) + extra, "mem")).memory;
  };
  const MemoryBreakdown z0 = mem("parallel: {dp: 16}\n");
  const MemoryBreakdown z1 = mem("parallel: {dp: 16, zero_stage: 1}\n");
  const MemoryBreakdown z2 = mem("parallel: {dp: 16, zero_stage: 2}\n");
  const MemoryBreakdown z3 = mem("parallel: {dp: 16, zero_stage: 3}\n");
  EXPECT_NEAR(z1.optimizer, z0.optimizer / 16, 1.0);
  EXPECT_DOUBLE_EQ(z1.gradients, z0.gradients);
  EXPECT_NEAR(z2.gradients, z0.gradients / 16, 1.0);
  EXPECT_NEAR(z3.weights, z0.weights / 16, 1.0);
  auto first_stage = [&](const std::string& extra) {
    return build_training_plan(scenario_from_text(std::string(kTiny) + extra, "mem")).stage_memory[0];
  };
  const MemoryBreakdown f1b = first_stage("parallel: {pp: 4, dp: 4, schedule: 1f1b}\ntraining: {global_batch: 64}\n");
  const MemoryBreakdown gp = first_stage("parallel: {pp: 4, dp: 4, schedule: gpipe}\ntraining: {global_batch: 64}\n");
  // 16 micro-batches: GPipe holds 16, 1F1B 4, of 2 layers each on the first stage.
  const double layer = 2048.0 * 2048 * (10 + 24.0);
  EXPECT_NEAR(gp.activations - f1b.activations, (16 - 4) * 2 * layer, 1e6);
  // Full recompute keeps each layer's input (2·s·b·h bytes) plus one layer's worth.
  const MemoryBreakdown full = mem("parallel: {dp: 16}\ntraining: {recompute: full}\n");
  const double logits = 2048.0 * 51200 * (2 + 4);
  EXPECT_NEAR(full.activations - logits, 8 * 2 * 2048.0 * 2048 + layer, 1e6);
  EXPECT_NEAR(z0.activations - logits, 8 * layer, 1e6);
}

// A MoE layer keeps what Megatron-Core's experts save: per rank the rows routed to it (top_k a
// token, capacity-padded unless dropless) as FC1's input, all of its TP group's; their FC1
// output and FC2 input at 1/t of the expert's width; the experts' outputs for the unpermute's
// probability gradient. Mixtral 8x7B (h 4096, experts of 14336, top 2, SwiGLU) at TP 2 under SP,
// one layer, one micro-batch of 4096 tokens in flight.
TEST(Memory, MoeLayerKeepsTheRoutedRows) {
  auto act = [&](const std::string& moe) {
    return build_training_plan(
               scenario_from_text("cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: mixtral-8x7b, layers: 1" +
                                      moe + "}\nparallel: {tp: 2, sequence_parallel: true, dp: 4, ep: 4}\n"
                                            "training: {global_batch: 4}\n",
                                  "mem-moe"))
        .memory.activations;
  };
  const double sbh = 4096.0 * 4096, t = 2, fe = 14336.0 / 4096;
  const double logits = 4096.0 * 32000 / t * (2 + 4);
  // Norms 4, QKV and MLP inputs 2 + 2, Q 2, K and V 4·(8/32), proj input 2 (all / t under SP).
  const double dense_part = (4 + 2 + 2 + 2 + 1 + 2) / t;
  const double moe = (2 * (2 * fe * 2 + 2 * fe) + 2 * 2) / t + 2 * 2;  // rows 2: expert outputs, then FC1 input
  EXPECT_NEAR(act("") - logits, sbh * (dense_part + moe), 1e3);
  // Capacity-padded (not dropless) at 1.5: 1.5 times the rows through the experts.
  const double padded = (3 * (2 * fe * 2 + 2 * fe) + 2 * 2) / t + 3 * 2;
  EXPECT_NEAR(act(", moe: {capacity_factor: 1.5, routing: {dropless: false}}") - logits, sbh * (dense_part + padded),
              1e3);
}

// Skewed routing makes the hot rank's experts take more rows, and so the step longer, but
// the model's FLOPs stay the mean rank's: MFU falls with the skew (it had risen with it, the
// hot rank's extra rows counted as model FLOPs).
TEST(Model, SkewedRoutingSlowsTheStepAndKeepsTheModelsFlops) {
  auto plan = [&](const std::string& routing) {
    return build_training_plan(scenario_from_text(
        "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: mixtral-8x7b, layers: 2, moe: {routing: " + routing +
            "}}\nparallel: {tp: 2, sequence_parallel: true, ep: 8}\ntraining: {global_batch: 16}\n",
        "skew"));
  };
  const TrainingPlan even = plan("{dist: even}"), skewed = plan("{dist: zipf, alpha: 0.5}");
  EXPECT_GT(skewed.moe_hot_rank_load, 1.2);
  EXPECT_GT(skewed.hardware_flops_per_rank, 1.1 * even.hardware_flops_per_rank) << "the hot rank's rows";
  EXPECT_NEAR(skewed.model_flops_per_rank, even.model_flops_per_rank, 1e-3 * even.model_flops_per_rank);
}

// model.head_dim: heads whose width is not hidden / heads (Qwen3 30B-A3B: hidden 2048, 32
// query heads and 4 KV heads of 128). QKV projects h to (32 + 2·4)·128, the output
// projection 32·128 back to h; the parameters and the saved Q, K, V follow.
TEST(Model, HeadDimApartFromHidden) {
  const std::string y =
      "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 2}\nmodel: {preset: llama3-8b, layers: 2, hidden: 2048, "
      "heads: 32, kv_heads: 4, HEAD ffn_hidden: 6144, seq_len: 4096}\nparallel: {tp: 2}\ntraining: {global_batch: 1}\n";
  const Scenario s = scenario_from_text(filled(y, {{"HEAD", "head_dim: 128,"}}), "hd");
  EXPECT_EQ(s.model.head_dim(), 128);
  EXPECT_EQ(s.model.attention_params(), 2048 * (32 + 8) * 128 + 32 * 128 * 2048);
  const TrainingPlan tp = build_training_plan(s);
  bool qkv = false, proj = false;
  for (const Op& op : tp.plan.programs[0].ops) {
    const std::string& name = tp.plan.names[op.name];
    if (name == "qkv") {
      qkv = true;
      EXPECT_EQ(op.n, (32 + 8) * 128 / 2);
      EXPECT_EQ(op.k, 2048);
    }
    if (name == "attn-proj") {
      proj = true;
      EXPECT_EQ(op.n, 2048);
      EXPECT_EQ(op.k, 32 * 128 / 2);
    }
  }
  EXPECT_TRUE(qkv && proj);
  // Without it the same model has heads of 64 and a smaller QKV; its saved activations are smaller.
  const Scenario narrow = scenario_from_text(filled(y, {{"HEAD", ""}}), "hd");
  EXPECT_EQ(narrow.model.head_dim(), 64);
  EXPECT_GT(tp.memory.activations, build_training_plan(narrow).memory.activations);
  // Heads that do not divide the hidden size need it, and the error says so.
  try {
    scenario_from_text(filled(y, {{"HEAD", "heads: 24,"}}).replace(y.find("heads: 32, "), 11, ""), "hd");
    ADD_FAILURE() << "hidden 2048 over 24 heads was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.head_dim"), std::string::npos) << e.what();
  }
}

// The shipped GPT-3 175B example lands where Megatron-LM's measurements do.
TEST(Examples, Gpt3On1024A100HasPlausibleMfu) {
  Scenario s =
      load_scenario(std::string(CLUSTERSIM_SOURCE_DIR) + "/scenarios/examples/training/gpt3-175b-1024xa100.yaml");
  s.network_model = "analytic";
  const RunOutcome out = run_training(s);
  double mfu = 0;
  for (const auto& [k, v] : out.metrics)
    if (k == "mfu") mfu = v;
  EXPECT_GT(mfu, 0.30);
  EXPECT_LT(mfu, 0.60);
}

// parallel.fp8_param_gather (Megatron-Core's --fp8-param-gather; Megatron-Bridge's FP8 recipes set
// it): the linear weights are FP8 tensors, so the distributed optimizer's parameter all-gather
// moves 1 byte a weight (the embedding and output layer keep their 16 bits), the optimizer casts
// its FP32 shard to FP8 (4 bytes read, 1 written) in place of the 16-bit copy, the once-a-step
// 16-bit-to-FP8 weight cast is gone (TE builds each gathered weight's transpose: 1 + 1 bytes),
// and a weight takes 2 bytes of memory (FP8 and its transpose) instead of 3 (BF16 and FP8).
TEST(Volumes, Fp8ParamGatherMovesOneByteAWeight) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b, layers: 2, dtype: fp8}\n"
      "parallel: {dp: 8, zero_stage: 1, overlap_param_gather: OVERLAP, fp8_param_gather: FP8P}\n"
      "training: {global_batch: 8}\n";
  auto plan = [&](const std::string& fp8p, const std::string& overlap = "true") {
    return build_training_plan(scenario_from_text(filled(y, {{"OVERLAP", overlap}, {"FP8P", fp8p}}), "fp8p"));
  };
  const TrainingPlan bf16 = plan("false"), fp8 = plan("true");
  const Scenario s = scenario_from_text(filled(y, {{"OVERLAP", "true"}, {"FP8P", "false"}}), "fp8p");
  const double all = static_cast<double>(s.model.total_params());
  const double layers = static_cast<double>(s.model.layers * s.model.layer_params());
  const double emb = all - layers;  // the embedding, the untied output layer and the final norm
  const double tol = all * 1e-5;
  auto named = [](const TrainingPlan& tp, const std::string& name, bool coll) {
    double b = 0;
    for (const Op& op : tp.plan.programs[0].ops)
      if (tp.plan.names[op.name] == name)
        b += coll ? static_cast<double>(op.bytes) : static_cast<double>(op.bytes_read + op.bytes_written);
    return b;
  };
  for (const std::string overlap : {"true", "false"}) {
    EXPECT_NEAR(named(plan("false", overlap), "zero-param-allgather", true), 2 * all, tol) << overlap;
    EXPECT_NEAR(named(plan("true", overlap), "zero-param-allgather", true), layers + 2 * emb, tol) << overlap;
  }
  EXPECT_GT(named(bf16, "fp8-weight-cast", false), 0);
  EXPECT_EQ(named(fp8, "fp8-weight-cast", false), 0);
  EXPECT_NEAR(named(fp8, "fp8-weight-transpose", false), 2 * layers, tol);
  EXPECT_NEAR(named(fp8, "fp8-param-shard-cast", false), 5 * layers / 8, tol);
  // 3 -> 2 bytes a layer's weight; the vocabulary tables (and the final norm), which have no
  // FP8 copy, 2 bytes either way.
  EXPECT_NEAR((bf16.memory.weights - fp8.memory.weights) / layers, 1.0, 1e-6);
  // Refused where there are no FP8 weights to gather: a BF16 model, or no sharded optimizer.
  EXPECT_THROW(build_training_plan(scenario_from_text(
                   "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b, layers: 2}\n"
                   "parallel: {dp: 8, zero_stage: 1, fp8_param_gather: true}\ntraining: {global_batch: 8}\n", "fp8p")),
               InputError);
  EXPECT_THROW(build_training_plan(scenario_from_text(
                   "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b, layers: 2, dtype: fp8}\n"
                   "parallel: {dp: 8, fp8_param_gather: true}\ntraining: {global_batch: 8}\n", "fp8p")),
               InputError);
}

}  // namespace
}  // namespace clustersim
