// The training layouts against their documented formulas.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <array>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "plan/training_planner.h"
#include "sim/executor.h"
#include "sim/run.h"
#include "support/plan_queries.h"
#include "support/temp_scenario.h"

namespace clustersim {
namespace {

using testing::scenario_from_text;

double sum_bytes(const Plan& p, size_t program, OpKind kind, GroupKind group, CollectiveKind coll, int32_t layer = -2,
                 Phase phase = Phase::Other, bool any_phase = true) {
  double b = 0;
  for (const Op& op : p.programs[program].ops) {
    if (op.kind != kind || op.group != group) continue;
    if (kind == OpKind::Collective && op.collective != coll) continue;
    if (layer != -2 && op.layer != layer) continue;
    if (!any_phase && op.phase != phase) continue;
    b += static_cast<double>(op.bytes);
  }
  return b;
}

// An ideal network: no protocol latency, full line rate.
ExecOptions ideal_network() {
  ExecOptions o;
  for (auto& f : o.network.base_latency) f.fill(0.0);
  for (auto& c : o.network.hop_latency)
    for (auto& f : c) f.fill(0.0);
  o.network.link_efficiency.fill(1.0);
  return o;
}

// Stages of equal cost (big layers, a tiny vocabulary), communication next to nothing:
// 1F1B idles (p-1) micro-batch-stage times per iteration, (p-1)/m of the ideal compute;
// interleaving v chunks divides it by v.
TEST(Pipeline, BubbleIsPMinusOneOverMOfTheIdealCompute) {
  for (const auto& [schedule, v] :
       {std::pair{std::string("1f1b"), 1}, {std::string("gpipe"), 1}, {std::string("interleaved-1f1b"), 2}}) {
    const int p = 4, m = 8;
    const Scenario s = scenario_from_text(
        "cluster: {preset: dgx-h100, gpus_per_node: 4}\n"
        "model: {preset: gpt3-1.3b, layers: 16, vocab: 128, seq_len: 1024, hidden: 4096, heads: 32, ffn_hidden: "
        "16384}\n"
        "parallel: {pp: 4, dp: 1, schedule: " +
            schedule + ", virtual_stages: " + std::to_string(v) +
            "}\n"
            "training: {global_batch: 8, loss_sync: none}\n",  // the schedule alone: no last-stage loss work
        "bubble");
    const TrainingPlan tp = build_training_plan(s);
    Topology topo(s.cluster);
    // The schedule alone: no NCCL kernel waiting for its peer takes SMs from the compute
    // beside it (which slows the blocks a receive is posted beside, and not the others).
    ExecOptions o = ideal_network();
    o.compute.nccl_channels = 0;
    o.compute.nccl_net_peer_channels = 0;
    const ExecResult r = execute_plan(tp.plan, topo, o);
    // Ideal compute: the m micro-batches of one stage (the optimizer step after them is
    // not pipelined), mean over the stages.
    double optimizer = 0;
    for (const SpanRecord& sp : r.spans)
      if (tp.plan.programs[tp.plan.rank_program[static_cast<size_t>(sp.rank)]].ops[sp.op].phase == Phase::Optimizer)
        optimizer += static_cast<double>(sp.end_ps - sp.start_ps) * 1e-12 / p;
    const double compute = r.compute_busy_s - optimizer;
    const double expected = static_cast<double>(p - 1) / (m * v) * compute;
    EXPECT_NEAR(r.bubble_s, expected, 0.06 * expected) << schedule;
    EXPECT_LT(r.exposed_comm_s, 0.02 * compute) << schedule;
  }
}

TEST(Pipeline, SchedulesRunEveryBlockOnceInAValidOrder) {
  for (const std::string sched : {"gpipe", "1f1b", "interleaved-1f1b"}) {
    const int64_t pp = 4, v = sched == "interleaved-1f1b" ? 2 : 1, M = 8;
    for (int64_t stage = 0; stage < pp; ++stage) {
      const auto order = pipeline_schedule(sched, pp, v, M, stage);
      ASSERT_EQ(order.size(), static_cast<size_t>(2 * M * v));
      std::set<std::tuple<bool, int64_t, int64_t>> seen;
      for (const auto& b : order) {
        EXPECT_TRUE(seen.insert({b.forward, b.micro_batch, b.chunk}).second);
        if (!b.forward) {
          EXPECT_TRUE(seen.count({true, b.micro_batch, b.chunk}));  // backward after its forward
        }
      }
    }
    // 1F1B keeps at most pp - stage micro-batches in flight on a stage.
    if (sched == "1f1b") {
      for (int64_t stage = 0; stage < pp; ++stage) {
        int64_t live = 0, peak = 0;
        for (const auto& b : pipeline_schedule(sched, pp, v, M, stage))
          peak = std::max(peak, live += b.forward ? 1 : -1);
        EXPECT_EQ(peak, pp - stage);
      }
    }
  }
}

// `yaml` with each placeholder replaced by its value (defined below).
std::string filled(std::string yaml, const std::vector<std::pair<std::string, std::string>>& values);

constexpr const char* kTiny = "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 8}\n";

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
  // Gathers: 2 per layer per micro-batch (forward, backward), each the layer's bf16 weights.
  const double layer = static_cast<double>(s.model.attention_params() + s.model.dense_mlp_params()) + 4.0 * 2048;
  EXPECT_NEAR(sum_bytes(t3.plan, 0, OpKind::Collective, GroupKind::DP, CollectiveKind::AllGather),
              2.0 * M * 4 * layer * 2, 64.0 * M);
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
// once its gradients.
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
  EXPECT_NEAR(gathered(per_mb), 2 * M * n * layer * 2, 64 * M);
  EXPECT_NEAR(gathered(gather_once), n * layer * 2, 64);
  EXPECT_NEAR(gathered(both_once), n * layer * 2, 64);
  // The layers' gradients; the embedding and output layer's are reduced once in both.
  const double rest = scattered(both_once) - n * layer * 4;
  EXPECT_GT(rest, 0.0);
  EXPECT_NEAR(scattered(per_mb), M * n * layer * 4 + rest, 64 * M);
  EXPECT_NEAR(scattered(gather_once), M * n * layer * 4 + rest, 64 * M);

  EXPECT_NEAR(gather_once.memory.weights, 16 * per_mb.memory.weights, 16.0);
  EXPECT_DOUBLE_EQ(gather_once.memory.gradients, per_mb.memory.gradients);
  EXPECT_NEAR(both_once.memory.gradients, 16 * per_mb.memory.gradients, 16.0);
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

// Uneven pipeline splits leave the short stages at the two ends, first and last first.
TEST(Pipeline, UnevenSplitShortensTheEndStagesFirst) {
  auto sizes = [](int64_t layers, int64_t n) {
    std::vector<int64_t> v;
    int64_t next = 0;
    for (int64_t i = 0; i < n; ++i) {
      const auto [first, count] = virtual_stage_layers(layers, n, i);
      EXPECT_EQ(first, next) << layers << " over " << n << ", stage " << i;
      next = first + count;
      v.push_back(count);
    }
    EXPECT_EQ(next, layers);
    return v;
  };
  std::vector<int64_t> llama(16, 8);
  llama.front() = llama.back() = 7;
  EXPECT_EQ(sizes(126, 16), llama);  // Llama 3 405B (Dubey et al. 2024, 3.3.2)
  EXPECT_EQ(sizes(10, 4), (std::vector<int64_t>{2, 3, 3, 2}));
  EXPECT_EQ(sizes(9, 4), (std::vector<int64_t>{2, 2, 3, 2}));
  EXPECT_EQ(sizes(11, 4), (std::vector<int64_t>{2, 3, 3, 3}));
  EXPECT_EQ(sizes(96, 8), std::vector<int64_t>(8, 12));
  EXPECT_EQ(sizes(3, 5), (std::vector<int64_t>{0, 1, 1, 1, 0}));
}

// Megatron-Core's microbatch_group_size_per_vp_stage (N): each chunk runs N micro-batches
// back to back. Its docstring's example, pp 2, v 2, N 3, M 5: forward order on rank 0 is
// 0 1 2 0 1 2 3 4 3 4 (chunks 0 0 0 1 1 1 0 0 1 1); N = pp is the default schedule; a
// larger N warms up (v − 1)·N blocks and so holds more activations; N outside [pp, M],
// or a last group shorter than pp, is refused.
TEST(Pipeline, MicrobatchGroupRunsNMicroBatchesPerChunk) {
  std::vector<int64_t> mb, chunk;
  for (const PipelineBlock& b : pipeline_schedule("interleaved-1f1b", 2, 2, 5, 0, 3))
    if (b.forward) {
      mb.push_back(b.micro_batch);
      chunk.push_back(b.chunk);
    }
  EXPECT_EQ(mb, (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 3, 4, 3, 4}));
  EXPECT_EQ(chunk, (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 0, 0, 1, 1}));
  for (int64_t st = 0; st < 4; ++st) {
    const auto a = pipeline_schedule("interleaved-1f1b", 4, 2, 8, st);
    const auto b = pipeline_schedule("interleaved-1f1b", 4, 2, 8, st, 4);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(a[i].forward == b[i].forward && a[i].micro_batch == b[i].micro_batch && a[i].chunk == b[i].chunk);
  }
  auto scenario = [](const std::string& group) {
    return scenario_from_text(std::string(kTiny) +
                                  "parallel: {pp: 2, dp: 8, schedule: interleaved-1f1b, virtual_stages: 2" + group +
                                  "}\ntraining: {global_batch: 64}\n",
                              "group");
  };
  const TrainingPlan base = build_training_plan(scenario(""));
  const TrainingPlan wide = build_training_plan(scenario(", microbatch_group: 8"));
  // 8 micro-batches on chunks of two layers: stage 0 warms up 2 + (v − 1)·N blocks, 4 by
  // default and 10 with N = 8, and runs one more forward before its first backward.
  EXPECT_NEAR(wide.stage_memory[0].activations / base.stage_memory[0].activations, 11.0 / 5.0, 1e-9);
  EXPECT_THROW(build_training_plan(scenario(", microbatch_group: 1")), InputError);   // below pp
  EXPECT_THROW(build_training_plan(scenario(", microbatch_group: 9")), InputError);   // above M
  EXPECT_NO_THROW(build_training_plan(scenario(", microbatch_group: 3")));            // 8 = 3 + 3 + 2 (2 >= pp)
  EXPECT_THROW(build_training_plan(scenario(", microbatch_group: 7")), InputError);   // 8 = 7 + 1 (1 < pp)
  EXPECT_THROW(build_training_plan(scenario_from_text(std::string(kTiny) + "parallel: {pp: 2, dp: 8, microbatch_group: 2}\n"
                                                      "training: {global_batch: 64}\n", "group")),
               InputError);  // 1f1b has no chunks to group
}

// The embedding and the output layer may each stand in for a chunk's layer (Megatron-Core's
// account_for_embedding/loss_in_pipeline_split, Llama 3 405B's 126 layers in 16 × 8 chunks):
// 6 layers in 2 × 4 chunks leave the first chunk and the last without layers; 5 is refused.
// Held activations are counted chunk by chunk, so the stage whose first chunk is only the
// embedding holds fewer layer-activations than the one beside it.
TEST(Pipeline, EmbeddingAndOutputMayTakeAChunkEach) {
  auto scenario = [](int layers) {
    return scenario_from_text("cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: " +
                                  std::to_string(layers) +
                                  "}\nparallel: {pp: 2, dp: 8, schedule: interleaved-1f1b, virtual_stages: 4}\n"
                                  "training: {global_batch: 64}\n",
                              "chunks");
  };
  const TrainingPlan tp = build_training_plan(scenario(6));
  EXPECT_EQ(virtual_stage_layers(6, 8, 0).second, 0);
  EXPECT_EQ(virtual_stage_layers(6, 8, 7).second, 0);
  ASSERT_EQ(tp.stage_memory.size(), 2u);
  // 8 micro-batches. Stage 0 warms up with 8 blocks over chunks 0,0,1,1,2,2,3,3, then
  // runs a forward (chunk 0 again) before the first backward. Of 0,1,1,1 layers that is
  // 6 layer-activations at the peak; with 8 layers, one per chunk, 9.
  const TrainingPlan even = build_training_plan(scenario(8));
  EXPECT_NEAR(tp.stage_memory[0].activations, 6.0 / 9.0 * even.stage_memory[0].activations,
              1e-12 * even.stage_memory[0].activations);
  EXPECT_THROW(build_training_plan(scenario(5)), InputError);
}

// Ring attention: per layer forward, cp-1 K/V blocks of 2·b·(s/cp)·kv_heads/t·d elements
// pass to the next CP rank; backward passes K, V and their gradients (twice that).
// Every send meets one receive on its peer, in the same phase with the same bytes, the
// k-th of each in program order; the executor's peer resolution is the same function.
TEST(Pipeline, SendsAndReceivesPairUp) {
  for (const std::string sched : {"1f1b", "interleaved-1f1b"}) {
    Scenario s =
        scenario_from_text(std::string(kTiny) + "parallel: {pp: 4, dp: 4, micro_batch: 1, schedule: " + sched +
                               (sched == "1f1b" ? "" : ", virtual_stages: 2") + "}\ntraining: {global_batch: 32}\n",
                           "p2p-" + sched);
    PlannerOptions po;
    po.use_symmetry = false;
    const TrainingPlan tp = build_training_plan(s, po);
    size_t sends = 0, recvs = 0;
    for (int32_t r = 0; r < tp.plan.world_size; ++r)
      for (const Op& op : tp.plan.programs[tp.plan.rank_program[static_cast<size_t>(r)]].ops) {
        sends += op.kind == OpKind::Send;
        recvs += op.kind == OpKind::Recv;
      }
    ASSERT_GT(sends, 0u);
    ASSERT_EQ(sends, recvs);
    const auto matches = match_p2p(tp.plan);
    ASSERT_EQ(matches.size(), sends) << sched;
    std::set<std::pair<int32_t, uint32_t>> seen;
    for (const P2pMatch& m : matches) {
      const Op& a = tp.plan.programs[tp.plan.rank_program[static_cast<size_t>(m.send_rank)]].ops[m.send_op];
      const Op& b = tp.plan.programs[tp.plan.rank_program[static_cast<size_t>(m.recv_rank)]].ops[m.recv_op];
      EXPECT_EQ(a.kind, OpKind::Send);
      EXPECT_EQ(b.kind, OpKind::Recv);
      EXPECT_EQ(p2p_peer(tp.plan, m.send_rank, a), m.recv_rank);
      EXPECT_EQ(p2p_peer(tp.plan, m.recv_rank, b), m.send_rank);
      EXPECT_EQ(a.phase, b.phase);
      EXPECT_EQ(a.bytes, b.bytes);
      EXPECT_TRUE(seen.insert({m.send_rank, m.send_op}).second);
      EXPECT_TRUE(seen.insert({m.recv_rank, m.recv_op}).second);
    }
  }
}

// Megatron's blocking p2p ends each batch with torch.cuda.synchronize() (batch_p2p_sync): at
// every block that begins with a receive, and at the first stage's forward after a send, the
// host waits for the last op of every stream and the last gradient reduction issued; before a
// backward it then launches the backward from an empty queue over the chunk's graph. None where
// the p2p is posted ahead, with the key off, or in eager PyTorch; the step is slower with it.
TEST(Pipeline, BlockingP2pSynchronizesTheDevice) {
  const std::string base =
      "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 8}\ntraining: {global_batch: 32}\n"
      "parallel: {pp: 2, dp: 8, micro_batch: 1";
  auto plan = [&](const std::string& extra) {
    return build_training_plan(scenario_from_text(base + extra + "}\n", "p2p-sync"));
  };
  auto syncs = [](const TrainingPlan& tp, int32_t rank) {
    const Program& prog = tp.plan.programs[tp.plan.rank_program[static_cast<size_t>(rank)]];
    std::vector<uint32_t> out;
    for (uint32_t i = 0; i < prog.ops.size(); ++i)
      if (tp.plan.names[prog.ops[i].name] == "pp-device-sync") out.push_back(i);
    return out;
  };
  const TrainingPlan tp = plan("");
  const auto& pp_ranks = tp.plan.groups[static_cast<size_t>(tp.plan.group_of(0, GroupKind::PP))].ranks;
  ASSERT_EQ(pp_ranks.size(), 2u);
  const int64_t M = 4;  // 32 sequences over DP 8
  for (const int32_t r : pp_ranks) {
    const Program& prog = tp.plan.programs[tp.plan.rank_program[static_cast<size_t>(r)]];
    const auto s = syncs(tp, r);
    // Stage 0: its warm-up forward's send before the next forward, and each backward begins
    // with the gradient's receive (its steady-state forwards follow a backward that sends
    // nothing); stage 1: each forward begins with the activation's receive. Megatron's 1F1B
    // calls: 1 + M and M + 1 (the last stage's final send is the step's last, no block after it).
    EXPECT_EQ(static_cast<int64_t>(s.size()), r == pp_ranks[0] ? M + 1 : M);
    size_t backward = 0;
    for (const uint32_t i : s) {
      const Op& op = prog.ops[i];
      EXPECT_EQ(op.access, MemAccess::HostSync);
      EXPECT_EQ(op.m, 1);
      if (op.phase == Phase::Backward) {
        ++backward;
        EXPECT_EQ(op.n, 1);
        EXPECT_GT(op.batch, 20);  // four layers' graph
      }
      // It waits for the last gradient reduction issued before it, where there is one.
      int64_t last_grad = -1;
      for (uint32_t j = 0; j < i; ++j)
        if (prog.ops[j].kind == OpKind::Collective && prog.ops[j].group == GroupKind::DP &&
            prog.ops[j].phase == Phase::Backward)
          last_grad = j;
      if (last_grad >= 0) {
        bool found = false;
        for (uint32_t d = op.dep_begin; d < op.dep_begin + op.dep_count; ++d)
          found = found || prog.deps[d] == static_cast<uint32_t>(last_grad);
        EXPECT_TRUE(found) << "sync " << i << " does not wait for the DP reduction " << last_grad;
      }
    }
    EXPECT_EQ(static_cast<int64_t>(backward), r == pp_ranks[0] ? M : 0);
  }
  for (const char* extra : {", overlap_p2p_comm: true", ", batch_p2p_sync: false"}) {
    const TrainingPlan off = plan(extra);
    for (int32_t r = 0; r < off.plan.world_size; ++r) EXPECT_TRUE(syncs(off, r).empty()) << extra;
  }
  const double on = run_training(scenario_from_text(base + "}\n", "p2p-sync")).exec.makespan.seconds();
  const double off =
      run_training(scenario_from_text(base + ", batch_p2p_sync: false}\n", "p2p-nosync")).exec.makespan.seconds();
  EXPECT_GT(on, off);
}

// Pipeline sends and receives (parallel.overlap_p2p_comm). Blocking (auto under 1F1B, as
// Megatron's non-interleaved schedule always runs): each receive is posted when the
// stage's compute reaches it, and the compute after a send waits for that send. Overlapped:
// receives are posted a block ahead (after the previous block of their direction: the test
// below) and nothing waits for a send. Blocking costs time: the sender waits for the transfer
// and for its receiver to post the receive.
TEST(Pipeline, BlockingSendsWaitForTheirReceiver) {
  const std::string base =
      "cluster: {preset: dgx-h100, nodes: 2, scale_out: {nic_bandwidth: 10Gbps}}\nmodel: {preset: gpt3-1.3b, "
      "layers: 8}\ntraining: {global_batch: 16}\nparallel: {pp: 2, dp: 8, micro_batch: 1, placement: "
      "tp-cp-ep-dp-pp";
  auto plan = [&](const std::string& extra) {
    return build_training_plan(scenario_from_text(base + extra + "}\n", "p2p-block"));
  };
  auto waited_sends_and_posted_recvs = [](const TrainingPlan& tp) {
    const Program& prog = tp.plan.programs[tp.plan.rank_program[0]];
    std::set<uint32_t> depended;
    for (const Op& op : prog.ops)
      for (uint32_t d = 0; d < op.dep_count; ++d) depended.insert(prog.deps[op.dep_begin + d]);
    size_t waited = 0, posted_late = 0, sends = 0, recvs = 0, beside = 0;
    for (uint32_t i = 0; i < prog.ops.size(); ++i) {
      // The pipeline's own transfers (not the tied embedding's gradient exchange once a step).
      if (prog.ops[i].group != GroupKind::PP || prog.ops[i].phase == Phase::Optimizer) continue;
      if (prog.ops[i].kind == OpKind::Send) sends += 1, waited += depended.count(i);
      if (prog.ops[i].kind == OpKind::Recv) recvs += 1, posted_late += prog.ops[i].dep_count > 0;
      beside += prog.ops[i].overlaps_compute;  // its kernel's SMs held beside compute
    }
    return std::array<size_t, 5>{sends, waited, recvs, posted_late, beside};
  };
  const auto blocking = waited_sends_and_posted_recvs(plan(""));
  ASSERT_GT(blocking[0], 0u);
  EXPECT_EQ(blocking[1], blocking[0]);  // every send waited for
  EXPECT_EQ(blocking[3], blocking[2]);  // every receive posted at its point in the schedule
  EXPECT_EQ(blocking[4], 0u);
  const auto ahead = waited_sends_and_posted_recvs(plan(", overlap_p2p_comm: true"));
  EXPECT_EQ(ahead[1], 0u);
  EXPECT_EQ(ahead[3], ahead[2]);  // stage 0 receives gradients only, each after a block
  EXPECT_EQ(ahead[4], ahead[0] + ahead[2]);
  const double t_block = run_training(scenario_from_text(base + "}\n", "p2p-block")).exec.makespan.seconds();
  const double t_ahead =
      run_training(scenario_from_text(base + ", overlap_p2p_comm: true}\n", "p2p-ahead")).exec.makespan.seconds();
  EXPECT_GT(t_block, t_ahead);
  // Interleaved without overlap: receives stay posted ahead, sends are waited for.
  const auto inter = waited_sends_and_posted_recvs(
      plan(", schedule: interleaved-1f1b, virtual_stages: 2, overlap_p2p_comm: false"));
  EXPECT_EQ(inter[1], inter[0]);
  EXPECT_EQ(inter[3], 0u);
  EXPECT_EQ(inter[4], 0u);  // Megatron's batched blocking p2p: nothing beside compute
  EXPECT_EQ(waited_sends_and_posted_recvs(plan(", schedule: interleaved-1f1b, virtual_stages: 2"))[1], 0u);
}

// Overlapped pipeline p2p as Megatron's interleaved schedule posts it: a block's receive goes
// out with the send that follows the previous block of the same direction (send_forward_recv_forward
// after each forward step, send_backward_recv_backward after each backward step; the first
// backward's receive after the warm-up's last forward), and ProcessGroupNCCL's stream waits for
// the kernels issued before the post. So on a middle stage, which receives and sends in every
// block, forward receive k waits for the op forward send k - 1 waits for, backward receive i for
// backward send i - 1's, backward receive 0 for forward send w - 1's (w forward blocks of
// warm-up: (pp - s - 1)·2 + (v - 1)·pp = 8 for stage 1 of pp 4, v 2), and the step's first
// receive for nothing. A receive posted earlier would hold its channels' SMs beside the
// previous block's kernels, which in Megatron it does not.
TEST(Pipeline, OverlappedReceivesArePostedAfterThePreviousBlockOfTheirDirection) {
  const Scenario s = scenario_from_text(std::string(kTiny) +
                                            "parallel: {pp: 4, dp: 4, micro_batch: 1, schedule: interleaved-1f1b, "
                                            "virtual_stages: 2}\ntraining: {global_batch: 32}\n",
                                        "p2p-posted");
  PlannerOptions po;
  po.use_symmetry = false;
  const TrainingPlan tp = build_training_plan(s, po);
  const auto& pp_ranks = tp.plan.groups[static_cast<size_t>(tp.plan.group_of(0, GroupKind::PP))].ranks;
  ASSERT_EQ(pp_ranks.size(), 4u);
  const Program& prog = tp.plan.programs[tp.plan.rank_program[static_cast<size_t>(pp_ranks[1])]];
  std::array<std::vector<uint32_t>, 2> recvs, sends;  // [forward, backward], in program order
  for (uint32_t i = 0; i < prog.ops.size(); ++i) {
    const Op& op = prog.ops[i];
    if (op.group != GroupKind::PP || (op.phase != Phase::Forward && op.phase != Phase::Backward)) continue;
    const size_t d = op.phase == Phase::Backward;
    if (op.kind == OpKind::Recv) recvs[d].push_back(i);
    if (op.kind == OpKind::Send) sends[d].push_back(i);
  }
  const size_t blocks = 8 * 2;  // 32 sequences over DP 4, two chunks each
  for (size_t d = 0; d < 2; ++d) {
    ASSERT_EQ(recvs[d].size(), blocks);
    ASSERT_EQ(sends[d].size(), blocks);
  }
  auto only_dep = [&](uint32_t i) {
    const Op& op = prog.ops[i];
    EXPECT_EQ(op.dep_count, 1u) << tp.plan.names[op.name] << " " << i;
    return op.dep_count == 1 ? prog.deps[op.dep_begin] : ~0u;
  };
  EXPECT_EQ(prog.ops[recvs[0][0]].dep_count, 0u);
  for (size_t k = 1; k < blocks; ++k) {
    EXPECT_EQ(only_dep(recvs[0][k]), only_dep(sends[0][k - 1])) << "forward receive " << k;
    EXPECT_EQ(only_dep(recvs[1][k]), only_dep(sends[1][k - 1])) << "backward receive " << k;
  }
  EXPECT_EQ(only_dep(recvs[1][0]), only_dep(sends[0][7]));
  // The schedule runs the ninth forward block before the first backward, so that receive is
  // planned after it, and still waits only for the eighth.
  EXPECT_LT(sends[0][8], recvs[1][0]);
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

// `yaml` with each placeholder replaced by its value.
std::string filled(std::string yaml, const std::vector<std::pair<std::string, std::string>>& values) {
  for (const auto& [key, value] : values) yaml.replace(yaml.find(key), key.size(), value);
  return yaml;
}

double iteration_s(const std::string& yaml) {
  RunOptions o;
  o.keep_spans = false;
  o.record_link_usage = false;
  for (const auto& [k, v] : run_training(scenario_from_text(yaml, "fidelity"), o).metrics)
    if (k == "iteration_time_s") return v;
  return 0;
}

// Four NICs for eight GPUs: with TP 4 each node holds two ranks of each of four DP groups,
// and the four groups reduce at once, so every NIC carries two GPUs' traffic. The flow
// network (the default there) halves each group's bandwidth, and the exposed reduction
// (after the backward, nothing to hide behind) doubles against eight NICs; the analytic
// model, each collective alone, sees no difference.
TEST(Fidelity, DpGroupsSharingANicReduceAtHalfItsBandwidth) {
  const auto dp_exposed = [](int nics, const std::string& network) {
    const std::string yaml = "cluster: {preset: dgx-a100, nodes: 2, scale_out: {nics_per_node: " +
                             std::to_string(nics) +
                             "}}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
                             "parallel: {tp: 4, dp: 4, zero_stage: 1, overlap_grad_reduce: false, "
                             "overlap_param_gather: false}\ntraining: {global_batch: 16}\n" +
                             (network.empty() ? "" : "network_model: " + network + "\n");
    const Scenario s = scenario_from_text(yaml, "nic-share");
    RunOptions o;
    o.keep_spans = false;
    o.record_link_usage = false;
    const RunOutcome out = run_training(s, o);
    return std::make_pair(s.network_model, out.exec.exposed_comm_by_kind[static_cast<size_t>(GroupKind::DP)]);
  };
  const auto [shared_model, shared] = dp_exposed(4, "");
  const auto [own_model, own] = dp_exposed(8, "");
  const auto [analytic_model, analytic] = dp_exposed(4, "analytic");
  EXPECT_EQ(shared_model, "flow");
  EXPECT_EQ(own_model, "analytic");
  EXPECT_EQ(analytic_model, "analytic");
  ASSERT_GT(own, 0);
  EXPECT_NEAR(shared / own, 2.0, 0.1);
  EXPECT_NEAR(analytic / own, 1.0, 0.01);
}

// Transformer Engine's FP8 speeds up the linear layers' GEMMs only (at FP8's own
// efficiency, plus casts); attention, norms and communication stay BF16. A Llama 3 70B
// step on H100 comes out 1.2-1.6x faster in FP8, as published FP8 runs measure, not 2x.
TEST(Fidelity, Fp8StepOfLlama3_70bOnH100IsBetween1_2And1_6TimesFaster) {
  const std::string base =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-70b, layers: 8, seq_len: 8192, "
      "dtype: DT}\nparallel: {tp: 8, sequence_parallel: true}\ntraining: {global_batch: 4}\n";
  auto with = [&](const std::string& dt) { return iteration_s(filled(base, {{"DT", dt}})); };
  const double ratio = with("bf16") / with("fp8");
  EXPECT_GE(ratio, 1.2);
  EXPECT_LE(ratio, 1.6);
}

// Megatron's finalize_model_grads after the DP gradient sync: with SP, the norms'
// gradients flattened, all-reduced over TP and copied back a tensor at a time; with the
// embedding on the first and the last stage (tied output layer, or the multi-token
// prediction modules' copy), the two copies' gradients exchanged between those stages and
// added, before the optimizer's norm. Stages in between take no part.
TEST(Fidelity, FinalizeModelGradsReducesNormAndSharedEmbeddingGradients) {
  auto named = [](const TrainingPlan& tp, int32_t rank, const std::string& name) {
    std::vector<std::pair<uint32_t, Op>> out;
    const Program& prog = tp.plan.programs[tp.plan.rank_program[static_cast<size_t>(rank)]];
    for (uint32_t i = 0; i < prog.ops.size(); ++i)
      if (tp.plan.names[prog.ops[i].name] == name) out.emplace_back(i, prog.ops[i]);
    return out;
  };
  // Whether op i of the rank's program waits, directly or through others, for an op named `name`.
  auto waits_for = [](const TrainingPlan& tp, int32_t rank, uint32_t i, const std::string& name) {
    return testing::waits_for(tp, tp.plan.programs[tp.plan.rank_program[static_cast<size_t>(rank)]], i, name);
  };
  // GPT (LayerNorm with biases, tied embeddings), 8 layers over PP 4, TP 2 with SP; FP32
  // main gradients. Vocab 51,200: 25,600 rows a TP rank.
  const TrainingPlan tp = build_training_plan(scenario_from_text(
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 8, seq_len: 2048}\n"
      "parallel: {tp: 2, pp: 4, sequence_parallel: true}\ntraining: {global_batch: 8}\n",
      "finalize"));
  ASSERT_TRUE(tp.plan.programs.size() >= 4u);
  const auto& pp_ranks = tp.plan.groups[static_cast<size_t>(tp.plan.group_of(0, GroupKind::PP))].ranks;
  ASSERT_EQ(pp_ranks.size(), 4u);
  const int32_t first = pp_ranks[0], middle = pp_ranks[1], last = pp_ranks[3];
  const double h = 2048, vocab_rows = 51200 / 2;
  for (const int32_t r : {first, last}) {
    const auto send = named(tp, r, "embedding-grad-send"), recv = named(tp, r, "embedding-grad-recv");
    const auto add = named(tp, r, "embedding-grad-add");
    ASSERT_EQ(send.size(), 1u);
    ASSERT_EQ(recv.size(), 1u);
    ASSERT_EQ(add.size(), 1u);
    EXPECT_EQ(send[0].second.bytes, static_cast<int64_t>(vocab_rows * h * 4));
    EXPECT_EQ(send[0].second.group, GroupKind::PP);
    EXPECT_EQ(send[0].second.peer, r == first ? 3 : 0);
    EXPECT_EQ(add[0].second.bytes_read, 2 * send[0].second.bytes);
    const auto norm = named(tp, r, "grad-norm");
    ASSERT_EQ(norm.size(), 1u);
    EXPECT_TRUE(waits_for(tp, r, norm[0].first, "embedding-grad-add"));
    EXPECT_TRUE(waits_for(tp, r, add[0].first, "norm-grads-copy-back"));
  }
  EXPECT_TRUE(named(tp, middle, "embedding-grad-send").empty());
  // The norms: two a layer, weight and bias (2 layers a stage), the final norm on the last
  // stage; FP32 gradients of h each, one copy kernel a tensor.
  for (const int32_t r : {first, last}) {
    const int64_t tensors = 2 * 2 * 2 + (r == last ? 2 : 0);
    const auto flat = named(tp, r, "norm-grads-flatten"), back = named(tp, r, "norm-grads-copy-back");
    const auto ar = named(tp, r, "norm-grads-allreduce-tp");
    ASSERT_EQ(flat.size(), 1u);
    ASSERT_EQ(ar.size(), 1u);
    ASSERT_EQ(back.size(), 1u);
    EXPECT_EQ(ar[0].second.bytes, static_cast<int64_t>(tensors * h * 4));
    EXPECT_EQ(ar[0].second.group, GroupKind::TP);
    EXPECT_EQ(back[0].second.k, tensors);
  }
  // Untied, no multi-token prediction: no exchange; no SP: no norm reduction.
  const TrainingPlan untied = build_training_plan(scenario_from_text(
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b, layers: 8, seq_len: 2048}\n"
      "parallel: {tp: 2, pp: 4}\ntraining: {global_batch: 8}\n",
      "untied"));
  for (int32_t r = 0; r < untied.plan.world_size; ++r) {
    EXPECT_TRUE(named(untied, r, "embedding-grad-send").empty());
    EXPECT_TRUE(named(untied, r, "norm-grads-allreduce-tp").empty());
  }
  // The parameters behind it: an untied last stage with multi-token prediction holds the
  // output layer and the embedding's copy; tied, one table serves both.
  ModelConfig m = *find_model_preset("llama3-8b");
  m.mtp_layers = 1;
  const double table = 128256.0 / 2 * 4096;  // padded to a multiple of 256: 128,256
  EXPECT_DOUBLE_EQ(vocab_params(m, 2, false, true, 1), 2 * table + 2 * 4096);
  EXPECT_DOUBLE_EQ(vocab_params(m, 2, true, true, 1), 2 * table + 2 * 4096);
  m.tied_embeddings = true;
  EXPECT_DOUBLE_EQ(vocab_params(m, 2, false, true, 1), table + 2 * 4096);
  EXPECT_DOUBLE_EQ(vocab_params(m, 2, false, true, 0), table + 2 * 4096);
}

// With --tp-comm-overlap, sequence parallelism's all-gathers and reduce-scatters run in
// chunks beside the GEMMs they feed: TP 8 with SP is then no slower than without.
TEST(Fidelity, SequenceParallelWithTpOverlapIsNoSlowerThanWithoutSp) {
  const std::string base =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-70b, layers: 8, seq_len: 8192}\n"
      "training: {global_batch: 4}\nparallel: {tp: 8, ";
  const double no_sp = iteration_s(base + "sequence_parallel: false}\n");
  const double sp = iteration_s(base + "sequence_parallel: true}\n");
  const double sp_overlap = iteration_s(base + "sequence_parallel: true, tp_comm_overlap: true}\n");
  EXPECT_LE(sp_overlap, no_sp);
  EXPECT_LT(sp_overlap, sp);
}

// Userbuffers' pipelined reduce-scatter (the forward's projection and FC2) holds SMs
// beside the GEMM's chunks; the all-gathers' ring exchange moves by copy engines. So with
// TP overlap the projection's chunks after the first (a send in flight beside them) take
// the factor measured for the kernel's SMs: NeMo's Llama 3.1 70B configuration (24 SMs
// beside the projection, 16 beside FC2, the GEMMs told to leave them) 1.38 and 1.37;
// TE's defaults (16 SMs, no margin) 1.29; 8 SMs with the margin 1.05. The QKV GEMM's
// chunks each take the same time.
TEST(Fidelity, UserbuffersReduceScatterSlowsTheGemmChunksBesideIt) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-70b, layers: 1, seq_len: 8192}\n"
      "parallel: {tp: 8, sequence_parallel: true, tp_comm_overlap: true, tp_overlap_proj_sms: 24, "
      "tp_overlap_fc2_sms: 16, tp_overlap_sm_margin: true}\ntraining: {global_batch: 1}\n";
  RunOptions o;
  o.record_link_usage = false;
  const RunOutcome out = run_training(scenario_from_text(y, "ub"), o);
  const Plan& plan = out.plan.plan;
  const Program& prog = plan.programs[plan.rank_program[0]];
  std::map<std::string, std::vector<double>> took;  // forward GEMM chunks by name, in issue order
  for (const SpanRecord& sp : out.exec.spans) {
    const Op& op = prog.ops[sp.op];
    if (sp.rank != 0 || op.kind != OpKind::Gemm || op.phase != Phase::Forward) continue;
    took[plan.names[op.name]].push_back(static_cast<double>(sp.end_ps - sp.start_ps));
  }
  ASSERT_EQ(took["attn-proj"].size(), 8u);
  ASSERT_EQ(took["mlp-down"].size(), 8u);
  ASSERT_EQ(took["qkv"].size(), 8u);
  const double first = took["attn-proj"][0];
  for (size_t i = 1; i < 8; ++i) EXPECT_NEAR(took["attn-proj"][i] / first, 1.38, 1e-6) << i;
  for (size_t i = 1; i < 8; ++i) EXPECT_NEAR(took["mlp-down"][i] / took["mlp-down"][0], 1.37, 1e-6) << i;
  // TE's defaults (16 SMs, no margin: as beside 16 NCCL channels) and 8 SMs with the margin.
  for (const auto& [keys, proj, fc2] :
       {std::tuple<std::string, double, double>{"tp_comm_overlap: true", 1.29, 1.29},
        {"tp_comm_overlap: true, tp_overlap_fc2_sms: 8, tp_overlap_sm_margin: true", 1.37, 1.05}}) {
    std::string other = y;
    other.replace(other.find("tp_comm_overlap: true"), other.find("}\ntraining") - other.find("tp_comm_overlap: true"),
                  keys);
    const RunOutcome r = run_training(scenario_from_text(other, "ub-sms"), o);
    const Plan& rp = r.plan.plan;
    const Program& rprog = rp.programs[rp.rank_program[0]];
    std::map<std::string, std::vector<double>> t;
    for (const SpanRecord& sp : r.exec.spans) {
      const Op& op = rprog.ops[sp.op];
      if (sp.rank == 0 && op.kind == OpKind::Gemm && op.phase == Phase::Forward)
        t[rp.names[op.name]].push_back(static_cast<double>(sp.end_ps - sp.start_ps));
    }
    ASSERT_EQ(t["attn-proj"].size(), 8u) << keys;
    EXPECT_NEAR(t["attn-proj"][1] / t["attn-proj"][0], proj, 1e-6) << keys;
    EXPECT_NEAR(t["mlp-down"][1] / t["mlp-down"][0], fc2, 1e-6) << keys;
  }
  for (size_t i = 1; i < 8; ++i) EXPECT_NEAR(took["qkv"][i], took["qkv"][0], 1.0) << i;
  // The plan marks the same chunks for the power cap's window (Op::beside_sms): every
  // forward projection chunk but the first, no QKV chunk.
  std::vector<bool> beside;
  for (const Op& op : prog.ops) {
    if (op.phase == Phase::Forward && plan.names[op.name] == "attn-proj") beside.push_back(op.beside_sms);
    if (plan.names[op.name] == "qkv") {
      EXPECT_FALSE(op.beside_sms);
    }
  }
  EXPECT_EQ(beside, (std::vector<bool>{false, true, true, true, true, true, true, true}));
  // The backward's all-gathers of the weight gradients' inputs are TE's bulk overlaps: they
  // hold their configured SMs (TE's default 16 here), no margin, in place of NCCL's
  // channels; its reduce-scatters hold none; the GEMMs never hold any.
  int bulk_ag = 0;
  for (const Op& op : prog.ops) {
    if (op.phase != Phase::Backward) continue;
    const std::string& name = plan.names[op.name];
    if (op.kind == OpKind::Gemm || op.kind == OpKind::Send || op.kind == OpKind::Recv) {
      EXPECT_FALSE(op.holds_sms) << name;
    }
    if (op.kind == OpKind::Collective && (name == "allgather-qkv-input-wgrad" || name == "allgather-mlp-input-wgrad")) {
      EXPECT_TRUE(op.holds_sms) << name;
      EXPECT_EQ(op.held_sms, 16) << name;
      EXPECT_FALSE(op.sm_margin) << name;
      ++bulk_ag;
    }
  }
  EXPECT_EQ(bulk_ag, 2);
  // parallel.tp_overlap_reduce_scatter: ring-exchange (Megatron-Bridge's FP8 userbuffers
  // configurations): the partial sums go by copy engine, no SMs are held, so every
  // projection chunk takes the first one's time and none is marked for the power cap.
  std::string ring = y;
  ring.replace(ring.find("tp_comm_overlap: true"), 21, "tp_comm_overlap: true, tp_overlap_reduce_scatter: ring-exchange");
  const RunOutcome r = run_training(scenario_from_text(ring, "ub-ring"), o);
  const Plan& rp = r.plan.plan;
  const Program& rprog = rp.programs[rp.rank_program[0]];
  std::vector<double> proj;
  for (const SpanRecord& sp : r.exec.spans) {
    const Op& op = rprog.ops[sp.op];
    if (sp.rank == 0 && op.phase == Phase::Forward && rp.names[op.name] == "attn-proj")
      proj.push_back(static_cast<double>(sp.end_ps - sp.start_ps));
    if (op.phase != Phase::Forward) continue;  // the backward's bulk overlaps are unchanged
    if (op.kind == OpKind::Send) {
      EXPECT_FALSE(op.holds_sms);
    }
    EXPECT_FALSE(op.beside_sms);
  }
  ASSERT_EQ(proj.size(), 8u);
  for (size_t i = 1; i < 8; ++i) EXPECT_NEAR(proj[i], proj[0], 1.0) << i;
  // At burst clocks the step without held SMs is the shorter. (Under a binding power cap
  // it need not be: chunks on fewer SMs draw less, and the window's clock rises for it.)
  const auto burst = [&](std::string yaml) {
    yaml.replace(yaml.find("nodes: 1}"), 9, "nodes: 1, power_cap: false}");
    return run_training(scenario_from_text(yaml, "ub-burst"), o).exec.makespan;
  };
  EXPECT_LT(burst(ring), burst(y));
}

// The backward's bulk all-gathers hold the SMs their configuration gives them, so the
// data-gradient GEMMs beside them slow as the forward's do: NeMo's and Megatron-Bridge's
// configurations give them 2-8 SMs (a GEMM 1.077 beside 1-2), TE's default 16 (1.29).
TEST(Fidelity, BulkAllGathersHoldTheirSmsBesideTheDataGradientGemms) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1, power_cap: false}\nmodel: {preset: llama3-70b, layers: 2, "
      "seq_len: 8192}\nparallel: {tp: 8, sequence_parallel: true, tp_comm_overlap: true, SMS}\n"
      "training: {global_batch: 1}\n";
  auto dgrad_s = [&](const std::string& sms) {
    RunOptions o;
    o.record_link_usage = false;
    const RunOutcome r = run_training(scenario_from_text(filled(y, {{"SMS", sms}}), "bulk"), o);
    const Plan& plan = r.plan.plan;
    const Program& prog = plan.programs[plan.rank_program[0]];
    double t = 0;
    for (const SpanRecord& sp : r.exec.spans) {
      const std::string& name = plan.names[prog.ops[sp.op].name];
      if (sp.rank == 0 && (name == "qkv-dgrad" || name == "mlp-up-dgrad"))
        t += static_cast<double>(sp.end_ps - sp.start_ps) * 1e-12;
    }
    return t;
  };
  const double few = dgrad_s("tp_overlap_qkv_dgrad_sms: 2, tp_overlap_fc1_dgrad_sms: 2");
  const double te = dgrad_s("tp_overlap_qkv_dgrad_sms: 16, tp_overlap_fc1_dgrad_sms: 16");
  EXPECT_GT(te, few);                     // 1.29 against 1.077 beside the same all-gathers
  EXPECT_LE(te, few * 1.29 / 1.077 + 1e-9);  // only the chunks that start beside them
  // The keys need the overlap they shape.
  std::string off = filled(y, {{"SMS", "tp_overlap_qkv_dgrad_sms: 8"}});
  off.replace(off.find("tp_comm_overlap: true"), 21, "tp_comm_overlap: false");
  EXPECT_THROW(build_training_plan(scenario_from_text(off, "bulk-off")), std::exception);
}

// The backward's bulk reduce-scatters (TE's qkv_wgrad, fc1_wgrad): one kernel holding its
// configured SMs after the whole data-gradient GEMM, beside the weight-gradient GEMM, which
// runs at the factor for those SMs only while the reduce-scatter lasts: never slower than
// the whole GEMM at that factor, never faster than alone.
TEST(Fidelity, BulkReduceScatterSlowsTheWeightGradientWhileItLasts) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1, power_cap: false}\nmodel: {preset: llama3-70b, layers: 1, "
      "seq_len: 8192}\nparallel: {tp: 8, sequence_parallel: true, tp_comm_overlap: true, SMS}\n"
      "training: {global_batch: 1}\n";
  struct Seen {
    double wgrad = 0, rs = 0, alone = 0;
    int rs_ops = 0, dgrads = 0;
  };
  ComputeProfile alone;  // the kernel's own time: no cap (the scenario turns it off)
  alone.power_cap = false;
  auto look = [&](const std::string& sms) {
    RunOptions o;
    o.record_link_usage = false;
    const RunOutcome r = run_training(scenario_from_text(filled(y, {{"SMS", sms}}), "bulk-rs"), o);
    const Plan& plan = r.plan.plan;
    const Program& prog = plan.programs[plan.rank_program[0]];
    Seen s;
    for (const Op& op : prog.ops)
      if (plan.names[op.name] == "reduce-scatter-mlp-grad") {
        EXPECT_EQ(op.kind, OpKind::Collective);
        EXPECT_TRUE(op.holds_sms);
        EXPECT_FALSE(op.sm_margin);
        ++s.rs_ops;
      }
    for (const SpanRecord& sp : r.exec.spans) {
      if (sp.rank != 0) continue;
      const std::string& name = plan.names[prog.ops[sp.op].name];
      const double t = static_cast<double>(sp.end_ps - sp.start_ps) * 1e-12;
      if (name == "mlp-up-wgrad") s.wgrad = t;
      if (name == "reduce-scatter-mlp-grad") s.rs = t;
      if (name == "mlp-up-dgrad") ++s.dgrads;
      if (name == "mlp-up-wgrad") s.alone = compute_seconds(prog.ops[sp.op], *find_gpu_preset("h100-sxm"), alone);
    }
    return s;
  };
  const Seen few = look("tp_overlap_fc1_wgrad_sms: 2");
  const Seen te = look("tp_overlap_fc1_wgrad_sms: 16");
  EXPECT_EQ(te.rs_ops, 1);   // one bulk kernel
  EXPECT_EQ(te.dgrads, 1);   // beside a whole data-gradient GEMM, not chunks
  EXPECT_GT(te.wgrad, few.wgrad);
  EXPECT_GE(te.wgrad, te.alone * (1 - 1e-9));
  EXPECT_LE(te.wgrad, te.alone * 1.29 * (1 + 1e-9));
  // The slowdown covers the reduce-scatter's span only: (1.29 - 1) of the overlapped part.
  EXPECT_LT(te.rs, te.wgrad);  // the MLP's weight gradient outlasts its input gradient's reduce-scatter
  EXPECT_LT(te.wgrad, te.alone * 1.29 * (1 - 1e-3));
}

// A column-parallel layer's backward (Megatron's LinearWithGradAccumulationAndAsyncCommunication,
// TE's layers): the input's all-gather runs beside the data-gradient GEMM and the input
// gradient's reduction beside the weight-gradient GEMM, so on the compute stream the data
// gradient comes first. Megatron-LM before 2021-09 (parallel.tp_async_grad_reduce: false)
// reduced after both GEMMs, so the reduction waits for the weight gradient.
TEST(Fidelity, BackwardReducesTheInputGradientBesideTheWeightGradient) {
  for (const std::string sp : {"true", "false"}) {
    const std::string y = "name: t\ncluster: {preset: dgx-h100, nodes: 1, power_cap: false}\nmodel: {preset: "
                          "llama3-70b, layers: 1, seq_len: 4096}\nparallel: {tp: 8, sequence_parallel: SP, ASYNC}\n"
                          "training: {global_batch: 1}\n";
    for (const std::string async : {"tp_async_grad_reduce: true", "tp_async_grad_reduce: false"}) {
      const TrainingPlan tp = build_training_plan(scenario_from_text(filled(y, {{"SP", sp}, {"ASYNC", async}}), "bw"));
      const Program& prog = tp.plan.programs[0];
      auto index = [&](const std::string& name) {
        for (size_t i = 0; i < prog.ops.size(); ++i)
          if (prog.ops[i].phase == Phase::Backward && tp.plan.names[prog.ops[i].name] == name) return i;
        return prog.ops.size();
      };
      const bool is_async = async.find("true") != std::string::npos;
      for (const auto& [dgrad, wgrad, red] :
           {std::tuple<std::string, std::string, std::string>{"qkv-dgrad", "qkv-wgrad",
                                                              sp == "true" ? "reduce-scatter-qkv-grad"
                                                                           : "tp-allreduce-qkv-grad"},
            {"mlp-up-dgrad", "mlp-up-wgrad", sp == "true" ? "reduce-scatter-mlp-grad" : "tp-allreduce-mlp-grad"}}) {
        const size_t d = index(dgrad), w = index(wgrad), r = index(red);
        ASSERT_LT(r, prog.ops.size()) << red;
        EXPECT_LT(d, w) << dgrad << " " << sp << " " << async;
        // The reduction waits for the weight gradient only in the synchronous code.
        std::vector<size_t> todo{r};
        std::vector<bool> seen(prog.ops.size(), false);
        bool waits = false;
        while (!todo.empty() && !waits) {
          const size_t o = todo.back();
          todo.pop_back();
          for (uint32_t k = 0; k < prog.ops[o].dep_count; ++k) {
            const size_t dep = prog.deps[prog.ops[o].dep_begin + k];
            waits |= dep == w;
            if (!seen[dep]) seen[dep] = true, todo.push_back(dep);
          }
        }
        EXPECT_EQ(waits, !is_async) << red << " " << sp << " " << async;
      }
    }
  }
  // With the TP overlap the reduction is Transformer Engine's, always beside the weight gradient.
  EXPECT_THROW(build_training_plan(scenario_from_text(
                   "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-70b, layers: 1}\n"
                   "parallel: {tp: 8, sequence_parallel: true, tp_comm_overlap: true, tp_async_grad_reduce: false}\n"
                   "training: {global_batch: 1}\n",
                   "bw-ub")),
               std::exception);
}

// Megatron-Core's defer_embedding_wgrad_compute: the last stage computes the output
// layer's weight gradients of the first wgrad_deferral_limit micro-batches (0: all) after
// its last backward, where the pipeline's flush leaves it idle, and reduces that gradient
// only then; the same work, so the step is no longer.
TEST(Fidelity, DeferredEmbeddingWgradRunsAfterTheLastBackward) {
  const std::string y = "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 2, power_cap: false}\n"
                        "model: {preset: llama3-8b, layers: 4, seq_len: 2048}\nparallel: {pp: 2, dp: 1}\n"
                        "training: {global_batch: 8DEFER}\n";
  const TrainingPlan none = build_training_plan(scenario_from_text(filled(y, {{"DEFER", ""}}), "d0"));
  for (const auto& [defer, deferred] : {std::pair<std::string, int>{", defer_embedding_wgrad: true", 8},
                                        {", defer_embedding_wgrad: true, wgrad_deferral_limit: 3", 3}}) {
    const TrainingPlan tp = build_training_plan(scenario_from_text(filled(y, {{"DEFER", defer}}), "d"));
    const Plan& plan = tp.plan;
    const Program& last = plan.programs[plan.rank_program[1]];  // the stage with the output layer
    size_t last_dgrad = 0, wgrads = 0, after = 0;
    for (size_t i = 0; i < last.ops.size(); ++i) {
      const std::string& name = plan.names[last.ops[i].name];
      if (name == "final-layernorm-backward") last_dgrad = i;  // the last backward through the output layer
    }
    for (size_t i = 0; i < last.ops.size(); ++i)
      if (plan.names[last.ops[i].name] == "logits-wgrad") {
        ++wgrads;
        after += i > last_dgrad;
      }
    EXPECT_EQ(wgrads, 8u) << defer;  // every micro-batch's, once
    EXPECT_EQ(after, static_cast<size_t>(deferred)) << defer;
    EXPECT_DOUBLE_EQ(tp.hardware_flops_per_rank, none.hardware_flops_per_rank) << defer;
    EXPECT_LE(iteration_s(filled(y, {{"DEFER", defer}})), iteration_s(filled(y, {{"DEFER", ""}})) + 1e-9) << defer;
  }
  EXPECT_THROW(build_training_plan(scenario_from_text(filled(y, {{"DEFER", ", wgrad_deferral_limit: 3"}}), "dl")),
               std::exception);
}

// Unfused attention (scores through HBM) is slower than fused, and dropout slower still;
// selective recompute costs the attention core's forward once more.
TEST(Fidelity, UnfusedAttentionDropoutAndSelectiveRecomputeCostTime) {
  const std::string base =
      "name: t\ncluster: {preset: dgx-a100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 4, seq_len: 4096, dropout: DROP}\n"
      "parallel: {tp: 1}\ntraining: {global_batch: 8, attention: ATT, recompute: REC}\n";
  auto run = [&](const std::string& att, const std::string& drop, const std::string& rec) {
    return iteration_s(filled(base, {{"DROP", drop}, {"ATT", att}, {"REC", rec}}));
  };
  const double flash = run("flash", "0", "none");
  const double unfused = run("unfused", "0", "none");
  const double unfused_dropout = run("unfused", "0.1", "none");
  const double selective = run("unfused", "0.1", "selective");
  EXPECT_GT(unfused, 1.05 * flash);
  EXPECT_GT(unfused_dropout, unfused);
  EXPECT_GT(selective, unfused_dropout);
  EXPECT_GT(run("flash", "0", "selective"), flash);  // Megatron-Core re-runs the fused forward
  // FlashAttention-2 is the fused kernel on an A100 (no Hopper features to miss)...
  EXPECT_NEAR(run("flash2", "0", "none"), flash, 1e-12);
  // ... the Triton kernel does its work slower (a profile's factor 1 makes it that kernel),
  // and it has no dropout to run.
  EXPECT_GT(run("triton", "0", "none"), 1.02 * flash);
  const std::string profile = testing::temp_dir("triton") + "/profile.yaml";
  std::ofstream(profile) << "compute: {triton_attention_factor: 1}\n";
  EXPECT_NEAR(iteration_s(filled(base, {{"DROP", "0"}, {"ATT", "triton"}, {"REC", "none"}}) + "calibration: " + profile + "\n"),
              flash, 1e-12);
  try {
    run("triton", "0.1", "none");
    ADD_FAILURE() << "dropout with the Triton kernel was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.dropout: 0"), std::string::npos) << e.what();
  }
  // A fused kernel with dropout draws its mask in-kernel, forward and backward: slower than
  // without, by the mask draws of 4 layers' attention (one sequence of 4,096 a GPU at DP 8,
  // 16 heads, the causal half) at the A100's issue-slot rate, plus the hidden dropouts' 1-byte masks.
  const double flash_dropout = run("flash", "0.1", "none");
  EXPECT_GT(flash_dropout, flash);
  const ComputeProfile prof;
  const double draws = 4.0 * 16 * 4096.0 * 4096 / 2 *
                       (prof.attention_dropout_ops[0] + prof.attention_dropout_ops[1]) /
                       find_gpu_preset("a100-sxm-80gb")->alu_slot_rate();
  EXPECT_GT(flash_dropout - flash, 0.9 * draws);
  EXPECT_LT(flash_dropout - flash, 1.3 * draws);
}

// CUDA_LAUNCH_BLOCKING=1 (training.launch_blocking): the rank issues its ops one at a time,
// so its DP gradient reduction no longer hides behind the backward, and every kernel waits
// for its own dispatch (43 us, measured): the step is longer than without by at least the
// kernels' dispatch, and a profile's compute.blocking_launch replaces the default.
TEST(Fidelity, BlockingLaunchesSerializeTheStepAndExposeEachDispatch) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
      "parallel: {dp: 8}\ntraining: {global_batch: 16, launch_blocking: BLOCK}\n";
  const double async = iteration_s(filled(y, {{"BLOCK", "false"}}));
  const double blocking = iteration_s(filled(y, {{"BLOCK", "true"}}));
  const TrainingPlan tp = build_training_plan(scenario_from_text(filled(y, {{"BLOCK", "true"}}), "fidelity"));
  int kernels = 0;
  for (const Op& op : tp.plan.programs[0].ops)
    kernels += op.kind == OpKind::Gemm || op.kind == OpKind::Attention ||
               (op.kind == OpKind::Memory && op.bytes_read + op.bytes_written > 0);
  ASSERT_GT(kernels, 50);
  EXPECT_GT(blocking - async, kernels * (43e-6 - 2e-6));  // the dispatch replaces the 2 us queued gap
  const std::string profile = testing::temp_dir("blocking") + "/profile.yaml";
  std::ofstream(profile) << "compute: {blocking_launch: 10us}\n";
  const double cheaper = iteration_s(filled(y, {{"BLOCK", "true"}}) + "calibration: " + profile + "\n");
  EXPECT_LT(cheaper, blocking);
  EXPECT_GT(cheaper, async);
}

// ... and on Hopper its forward plateau is ~36 % of peak against cuDNN's 71 %: a step at
// long sequence is slower with it.
// The fused attention backward is three kernels (cuDNN and FlashAttention-2 alike) in one
// library call, so one op: the dO·O row dot, which also zeroes the FP32 dQ accumulator (8 bytes
// an element of Q), the main kernel, and dQ's conversion to 16 bits (6 bytes), each small one
// a kernel's floor and launch gap and its stream; five with GQA (dK's and dV's reductions). Priced so, the op reproduces the timed
// backwards of the H200 tile measurement (calibrate/measurements/attention-tiles-h200-
// 2026-12-03/tiles.csv) within 5 % from 1.9 query tiles per SM up, including 2,048 tokens at
// 1.9 tiles, where the main kernel alone had been 9.6 % fast.
TEST(Fidelity, FusedAttentionBackwardCountsItsTwoSmallKernels) {
  const GpuSpec& h200 = *find_gpu_preset("h200-sxm");
  const ComputeProfile prof;
  auto attention = [](int64_t seq, int64_t bh, Phase ph) {
    Op a;
    a.kind = OpKind::Attention;
    a.phase = ph;
    a.batch = 1, a.heads = bh, a.kv_heads = bh, a.q_len = seq, a.kv_len = seq, a.head_dim = 128;
    a.causal = true;
    a.flops = (ph == Phase::Backward ? 2.5 : 1.0) * attention_flops(a);
    return a;
  };
  const Op bwd = attention(4096, 16, Phase::Backward);
  const double q = 4096.0 * 16 * 128;
  const double streams = 14 * q / (h200.hbm_bandwidth * prof.memory_efficiency);
  EXPECT_NEAR(attention_backward_aux_seconds(bwd, h200, prof),
              2 * (prof.kernel_latency_s + prof.launch_overhead_s) + streams, 1e-12);
  EXPECT_EQ(attention_backward_aux_seconds(attention(4096, 16, Phase::Forward), h200, prof), 0.0);
  EXPECT_EQ(timed_kernel_count(bwd, h200, prof), 3);
  // With GQA (16 query heads over 2 K/V heads) two more: dK's and dV's sums over each group,
  // the 16-bit partials of every query head read and the K/V heads' gradient written.
  Op gqa = bwd;
  gqa.kv_heads = 2;
  const double reduce = 2.0 * 2.0 * (16 + 2) * 4096.0 * 128;
  EXPECT_NEAR(attention_backward_aux_seconds(gqa, h200, prof),
              4 * (prof.kernel_latency_s + prof.launch_overhead_s) +
                  (14 * q + reduce) / (h200.hbm_bandwidth * prof.memory_efficiency),
              1e-12);
  EXPECT_EQ(timed_kernel_count(gqa, h200, prof), 5);
  EXPECT_GT(compute_seconds(gqa, h200, prof), compute_seconds(bwd, h200, prof));
  // The planner keeps one op a backward: the library call the real backend runs.
  const TrainingPlan tp = build_training_plan(scenario_from_text(
      "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
      "training: {global_batch: 1}\n",
      "attn-bwd"));
  int backwards = 0;
  for (const Op& op : tp.plan.programs[0].ops) backwards += op.kind == OpKind::Attention && backward_kernel(op);
  EXPECT_EQ(backwards, 2);

  auto backward = [&](bool flash2, int64_t seq, int64_t bh) {
    ComputeProfile p = prof;
    p.flash2 = flash2;
    return compute_seconds(attention(seq, bh, Phase::Backward), h200, p);
  };
  // (backend, tokens, batch x heads, measured ms)
  const std::vector<std::tuple<bool, int64_t, int64_t, double>> measured = {
      {false, 2048, 16, 0.1699}, {false, 2048, 32, 0.2665}, {false, 8192, 8, 0.7739},
      {false, 8192, 64, 5.0311}, {true, 2048, 32, 0.4714},  {true, 8192, 64, 9.5870}};
  for (const auto& [flash2, seq, bh, ms] : measured)
    EXPECT_NEAR(backward(flash2, seq, bh) / (ms * 1e-3), 1.0, 0.05)
        << (flash2 ? "flash2 " : "cudnn ") << seq << " x " << bh;
}

TEST(Fidelity, FlashAttention2IsSlowerOnHopper) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1, power_cap: CAP}\nmodel: {preset: gpt3-1.3b, "
      "layers: 4, seq_len: 16384, dropout: 0}\ntraining: {global_batch: 1, attention: ATT, step_overhead: 0s}\n";
  auto run = [&](const std::string& att, const std::string& cap) {
    return iteration_s(filled(y, {{"ATT", att}, {"CAP", cap}}));
  };
  EXPECT_GT(run("flash2", "false"), 1.25 * run("flash", "false"));
  // Under the 700 W cap the fused kernel's higher rate draws more power and loses more
  // of it to the clock; FlashAttention-2 at ~35 % of peak stays under the limit.
  EXPECT_GT(run("flash2", "true"), 1.05 * run("flash", "true"));
  EXPECT_GT(run("flash", "true"), run("flash", "false"));
}

// Plain PyTorch under autocast runs more bytes than Megatron's fused kernels for the same
// layer: the FP32 residual stream and norms, a weight cast per linear per micro-batch,
// FP32 gradient accumulation, unfused activations and the FP32 loss. Its step is slower
// by what those kernels cost, and the weight casts grow with the micro-batches. Both without
// dropout (the eager recipe runs none).
TEST(Fidelity, PytorchEagerRunsTheCastsAndUnfusedKernelsOfAutocast) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h200, nodes: 1, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, layers: 4, dropout: 0}\n"
      "parallel: {micro_batch: 2}\ntraining: {global_batch: GB, framework: FW}\n";
  auto run = [&](const std::string& fw, const std::string& gb) {
    return iteration_s(filled(y, {{"FW", fw}, {"GB", gb}}));
  };
  const double megatron = run("megatron", "2"), eager = run("pytorch-eager", "2");
  // (The optimizer's fused Adam is the same multi-tensor class in both, and Megatron adds its
  // small gradients into the FP32 main gradients; the difference is the layers' casts and
  // unfused kernels and the FP32 loss.)
  EXPECT_GT(eager, 1.02 * megatron);
  EXPECT_LT(eager, 2.0 * megatron);
  // Four micro-batches: every one casts the weights again and accumulates into FP32 .grad.
  EXPECT_GT(run("pytorch-eager", "8") - eager, run("megatron", "8") - megatron);
  const Scenario s = scenario_from_text(filled(y, {{"FW", "pytorch-eager"}, {"GB", "4"}}), "eager");
  const TrainingPlan tp = build_training_plan(s);
  int casts = 0, dynamic = 0, multi = 0;
  for (const Op& op : tp.plan.programs[0].ops) {
    const std::string& name = tp.plan.names[op.name];
    casts += name == "autocast-cast-qkv-weight";
    dynamic += op.access == MemAccess::DynamicCast;
    multi += op.access == MemAccess::MultiTensor;
  }
  EXPECT_EQ(casts, 4 * 2);  // 4 layers x 2 micro-batches
  EXPECT_GT(dynamic, 0);
  EXPECT_EQ(multi, 3);  // grad norm, clip scale, fused AdamW
}

// training.cross_entropy: fused (MPT / LLM Foundry's loss_fn default, FlashAttention's
// xentropy kernel): the loss reads the 16-bit logits twice in its forward (the max, the sum
// of exponentials) and once in its backward, where it writes the gradient in their type;
// F.cross_entropy on logits.float() moves 48 bytes a logit through HBM (the FP32 copy,
// log_softmax and their backwards). The eager fused loss keeps no FP32 softmax for the backward.
TEST(Fidelity, FusedCrossEntropyMovesFewerBytesPerLogit) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h200, nodes: 1, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
      "parallel: {micro_batch: 2}\ntraining: {global_batch: 2, framework: FW, cross_entropy: CE}\n";
  auto plan = [&](const std::string& fw, const std::string& ce) {
    return build_training_plan(scenario_from_text(filled(y, {{"FW", fw}, {"CE", ce}}), "ce"));
  };
  const TrainingPlan unfused = plan("pytorch-eager", "unfused"), fused = plan("pytorch-eager", "fused");
  const Scenario s = scenario_from_text(filled(y, {{"FW", "pytorch-eager"}, {"CE", "fused"}}), "ce");
  const double tokens = 2.0 * static_cast<double>(s.model.seq_len);
  const double logits = tokens * static_cast<double>(s.model.vocab);
  auto loss_bytes = [&](const TrainingPlan& tp, const std::string& prefix = "") {
    double bytes = 0;
    for (const Op& op : tp.plan.programs[0].ops) {
      const std::string& name = tp.plan.names[op.name];
      const bool eager_loss = name == "cross-entropy-fused" || name == "cross-entropy-fused-backward" ||
                              name == "logits-float" || name == "log-softmax" || name == "nll-loss" ||
                              name == "nll-loss-backward" || name == "log-softmax-backward" || name == "logits-grad-cast";
      if (prefix.empty() ? eager_loss : name.rfind(prefix, 0) == 0)
        bytes += static_cast<double>(op.bytes_read + op.bytes_written);
    }
    return bytes;
  };
  EXPECT_NEAR(loss_bytes(fused) / logits, 4 * 2.0, 0.01);      // 2 + 1 reads, 1 write of 2 bytes
  EXPECT_NEAR(loss_bytes(unfused) / logits, 48.0, 0.01);  // cast 2+4, log_softmax 12+4, nll grad 4, its backward 12+4, cast 4+2
  EXPECT_LT(iteration_s(filled(y, {{"FW", "pytorch-eager"}, {"CE", "fused"}})),
            iteration_s(filled(y, {{"FW", "pytorch-eager"}, {"CE", "unfused"}})));
  EXPECT_NEAR((unfused.memory.activations - fused.memory.activations) / logits, 4.0, 1e-6);
  // Megatron's fused vocab-parallel loss (--cross-entropy-loss-fusion): three jit-fused
  // passes (e + 4, 4 + 4 and 4 + 4 bytes a logit) and a backward that reads the kept FP32
  // softmax and writes the gradient in the logits' type (4 + e), where the unfused one moves
  // 52 (the cast, max, shift, exp, sum and softmax passes: e + 20 read, 16 written; 8 + 4 + e).
  const double e = 2.0;
  EXPECT_NEAR(loss_bytes(plan("megatron", "fused"), "cross-entropy") / logits, (e + 8) + 12 + 4 + e, 0.01);
  EXPECT_NEAR(loss_bytes(plan("megatron", "unfused"), "cross-entropy") / logits, (e + 20) + 16 + 8 + 4 + e, 0.01);
  EXPECT_EQ(plan("megatron", "fused").memory.activations, plan("megatron", "unfused").memory.activations);
}

// training.fp8_recipe: tensorwise (Transformer Engine's Float8CurrentScaling, Megatron-Bridge's
// "FP8-CS"): a cast takes its scale from the tensor it casts, so every standalone cast reads its
// input once more for the amax, and the norms and activations that wrote FP8 under delayed
// scaling write BF16 with the amax and leave the cast to a quantize kernel (2 bytes read, 2
// written an element). Under sequence parallelism the amax of each sharded tensor (the QKV and
// FC1 inputs, the output gradients of the projection and FC2) is all-reduced over TP.
TEST(Fidelity, CurrentScalingReadsEachCastInputForItsAmax) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: GPUS}\n"
      "model: {preset: llama3-8b, layers: 2, seq_len: 4096, dtype: fp8}\n"
      "parallel: {tp: TP, sequence_parallel: SP}\ntraining: {global_batch: 1, fp8_recipe: RECIPE}\n";
  auto text = [&](const std::string& recipe, const std::string& tp) {
    return filled(y, {{"GPUS", tp}, {"TP", tp}, {"SP", tp == "1" ? "false" : "true"}, {"RECIPE", recipe}});
  };
  auto plan = [&](const std::string& recipe, const std::string& tp = "1") {
    return build_training_plan(scenario_from_text(text(recipe, tp), "cs"));
  };
  const TrainingPlan delayed = plan("delayed"), current = plan("tensorwise");
  const Scenario s = scenario_from_text(text("delayed", "1"), "cs");
  const double tokens = static_cast<double>(s.model.seq_len), h = static_cast<double>(s.model.hidden);
  const double f = static_cast<double>(s.model.ffn_hidden);
  const double qkv = h + 2.0 * static_cast<double>(s.model.kv_heads) * (h / static_cast<double>(s.model.heads));
  auto bytes = [](const TrainingPlan& tp, const std::string& part) {
    double b = 0;
    for (const Op& op : tp.plan.programs[0].ops)
      if (tp.plan.names[op.name].find(part) != std::string::npos)
        b += static_cast<double>(op.bytes_read + op.bytes_written);
    return b;
  };
  // Per layer: the amax passes read the forward's attention output and activation output (f:
  // Megatron-Core's activation is its own, FC2's Linear casts it) and the backward's four
  // gradients (FC2 and projection outputs h, FC1 outputs 2f for SwiGLU, QKV outputs qkv) once;
  // the quantize kernels after the two norms (h) move 4 bytes each.
  const double layers = 2, e = 2;
  EXPECT_NEAR(bytes(current, "-amax") / layers, tokens * e * (h + f + h + h + 2 * f + qkv) + 4 * 6, 1.0);
  EXPECT_EQ(bytes(delayed, "-amax"), 0);
  EXPECT_NEAR(bytes(current, "fp8-quantize-") / layers, tokens * 4 * (h + h), 1.0);
  EXPECT_EQ(bytes(delayed, "fp8-quantize-"), 0);
  // Either recipe casts the activation's BF16 output for FC2: 2 bytes read, the FP8 copy and
  // its transpose written.
  EXPECT_NEAR((bytes(delayed, "fp8-cast-mlp-act") - bytes(delayed, "fp8-cast-mlp-act-grad")) / layers,
              tokens * 4 * f, 1.0);
  EXPECT_GT(iteration_s(text("tensorwise", "1")), iteration_s(text("delayed", "1")));
  // Sequence parallel at TP 2: four 4-byte amax all-reduces over TP per layer and pass
  // (forward: QKV and FC1 inputs; backward: projection and FC2 output gradients).
  const TrainingPlan sp = plan("tensorwise", "2");
  int amax_reductions = 0;
  for (const Op& op : sp.plan.programs[0].ops)
    if (op.kind == OpKind::Collective && sp.plan.names[op.name].find("amax-allreduce") != std::string::npos) {
      EXPECT_EQ(op.bytes, 4);
      EXPECT_EQ(op.group, GroupKind::TP);
      ++amax_reductions;
    }
  EXPECT_EQ(amax_reductions, 4 * 2);
  EXPECT_THROW(build_training_plan(scenario_from_text(
                   "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: llama3-8b, "
                   "layers: 2}\ntraining: {global_batch: 1, fp8_recipe: tensorwise}\n", "cs")),
               InputError);
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
  EXPECT_NEAR((bf16.memory.weights - fp8.memory.weights) / all, 1.0, 1e-6);  // 3 -> 2 bytes a weight
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


// Full recompute runs each layer's forward again in the backward: its attention is the
// forward kernel (the forward's FLOPs, bytes and rate), marked as recomputed, not a second
// backward; the recompute adds one forward attention's time per layer and micro-batch.
TEST(Fidelity, FullRecomputeRunsTheForwardAttentionKernelAgain) {
  for (const std::string fw : {"megatron", "pytorch-eager"}) {
    const std::string y = "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1, power_cap: false}\n"
                          "model: {preset: gpt3-1.3b, layers: 2, seq_len: 8192, dropout: 0}\n"
                          "training: {global_batch: 1, framework: " + fw + ", recompute: REC}\n";
    const TrainingPlan tp = build_training_plan(scenario_from_text(filled(y, {{"REC", "full"}}), "rc"));
    const Program& prog = tp.plan.programs[0];
    std::vector<const Op*> fwd, recomputed, bwd;
    for (const Op& op : prog.ops) {
      if (op.kind != OpKind::Attention) continue;
      (op.recompute ? recomputed : op.phase == Phase::Forward ? fwd : bwd).push_back(&op);
    }
    ASSERT_EQ(fwd.size(), 2u) << fw;
    ASSERT_EQ(recomputed.size(), 2u) << fw;
    ASSERT_EQ(bwd.size(), 2u) << fw;
    const GpuSpec& h100 = *find_gpu_preset("h100-sxm");
    ComputeProfile p;
    p.power_cap = false;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(recomputed[i]->phase, Phase::Backward) << fw;
      EXPECT_DOUBLE_EQ(recomputed[i]->flops, fwd[i]->flops) << fw;
      EXPECT_DOUBLE_EQ(bwd[i]->flops, 2.5 * fwd[i]->flops) << fw;
      EXPECT_DOUBLE_EQ(compute_seconds(*recomputed[i], h100, p), compute_seconds(*fwd[i], h100, p)) << fw;
      EXPECT_FALSE(backward_kernel(*recomputed[i])) << fw;
      EXPECT_TRUE(backward_kernel(*bwd[i])) << fw;
    }
    // Hardware FLOPs count the recomputed forward once more, model FLOPs do not.
    const TrainingPlan none = build_training_plan(scenario_from_text(filled(y, {{"REC", "none"}}), "rc"));
    EXPECT_DOUBLE_EQ(tp.model_flops_per_rank, none.model_flops_per_rank) << fw;
  }
}

// Selective recompute under a fused kernel: Megatron-Core checkpoints the core attention
// (`checkpoint_core_attention`), so each layer's attention forward runs once more in the
// backward, after the output gradient and before the attention backward; nothing else is
// recomputed, and with context parallelism the ring's K/V exchange runs again with it.
TEST(Fidelity, SelectiveRecomputeRunsTheFusedAttentionForwardAgain) {
  for (const std::string cp : {"1", "2"}) {
    const std::string y = "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: GPUS, power_cap: false}\n"
                          "model: {preset: gpt3-1.3b, layers: 2, seq_len: 8192, dropout: 0}\n"
                          "parallel: {cp: CP}\ntraining: {global_batch: 1, recompute: REC}\n";
    const TrainingPlan sel = build_training_plan(scenario_from_text(filled(y, {{"REC", "selective"}, {"CP", cp}, {"GPUS", cp}}), "s"));
    const TrainingPlan none = build_training_plan(scenario_from_text(filled(y, {{"REC", "none"}, {"CP", cp}, {"GPUS", cp}}), "n"));
    auto count = [](const TrainingPlan& t, bool recomputed, OpKind kind) {
      int n = 0;
      for (const Op& op : t.plan.programs[0].ops) n += op.kind == kind && op.recompute == recomputed;
      return n;
    };
    const int blocks = cp == "1" ? 1 : 2;  // attention kernels a layer's forward runs
    EXPECT_EQ(count(sel, true, OpKind::Attention), 2 * blocks) << cp;
    EXPECT_EQ(count(none, true, OpKind::Attention), 0) << cp;
    EXPECT_EQ(count(sel, true, OpKind::Gemm), 0) << cp;  // only the attention core
    EXPECT_EQ(count(sel, false, OpKind::Attention), count(none, false, OpKind::Attention)) << cp;
    if (cp == "2") {
      EXPECT_EQ(count(sel, true, OpKind::Send), 2) << cp;  // a K/V send per layer, again
      EXPECT_EQ(count(sel, false, OpKind::Send), count(none, false, OpKind::Send)) << cp;
    }
    // Every recomputed kernel is the forward's, in the backward phase.
    const Program& prog = sel.plan.programs[0];
    for (size_t i = 0; i < prog.ops.size(); ++i) {
      const Op& op = prog.ops[i];
      if (op.kind != OpKind::Attention || !op.recompute) continue;
      EXPECT_EQ(op.phase, Phase::Backward);
      EXPECT_FALSE(backward_kernel(op));
    }
    EXPECT_DOUBLE_EQ(sel.model_flops_per_rank, none.model_flops_per_rank) << cp;
    EXPECT_GT(sel.hardware_flops_per_rank, none.hardware_flops_per_rank) << cp;
  }
  // Unfused attention keeps its own selective recompute (QK^T, softmax, dropout, PV).
  const std::string u = "name: t\ncluster: {preset: dgx-a100, nodes: 1, gpus_per_node: 1}\n"
                        "model: {preset: gpt3-1.3b, layers: 2}\ntraining: {global_batch: 1, attention: unfused, "
                        "recompute: selective}\n";
  int recomputed_scores = 0;
  const TrainingPlan unfused = build_training_plan(scenario_from_text(u, "u"));
  for (const Op& op : unfused.plan.programs[0].ops) recomputed_scores += op.recompute && op.kind == OpKind::Gemm;
  EXPECT_EQ(recomputed_scores, 4);  // attn-scores and attn-context, two layers
}

TEST(Fidelity, PytorchEagerIsDataParallelOrFsdpOnly) {
  const std::string model = "model: {preset: gpt3-1.3b, layers: 2}\n";
  // Each case: the lines it changes, and what it adds to training:.
  for (const auto& [lines, training] :
       {std::pair<std::string, std::string>{model + "parallel: {tp: 2}\n", ""},
        {model + "parallel: {zero_stage: 1}\n", ""},
        {"model: {preset: gpt3-1.3b, layers: 2, dtype: fp8}\n", ", fp8_attention: true"}}) {
    const std::string y = "name: t\ncluster: {preset: dgx-h200, nodes: 1, gpus_per_node: 2}\n" + lines +
                          "training: {framework: pytorch-eager" + training + "}\n";
    EXPECT_THROW(build_training_plan(scenario_from_text(y, "bad")), InputError) << y;
  }
}

// FP8 in eager PyTorch is Transformer Engine's te.Linear under fp8_autocast (LLM Foundry's
// amp_fp8): each linear casts its BF16 input to FP8 with a transpose (2 bytes read, 2
// written per element), casts its FP32 weight at every forward (4 read, 2 written per
// weight, no BF16 autocast copy), runs fprop, dgrad and wgrad in FP8, and casts the
// incoming gradient in the backward, summing the bias gradient in the same kernel
// (fp8_cast_transpose_bgrad_fused), where BF16 nn.Linear reduces it on its own; attention
// and the logits stay BF16.
TEST(Fidelity, PytorchEagerFp8RunsTeLinearsWithTheirCasts) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, layers: 4, "
      "dtype: DT}\nparallel: {micro_batch: 4}\ntraining: {global_batch: 8, framework: pytorch-eager}\n";
  const Scenario sc = scenario_from_text(filled(y, {{"DT", "fp8"}}), "fp8");
  const TrainingPlan fp8 = build_training_plan(sc);
  const ModelConfig& m = sc.model;
  const double tokens = 4.0 * static_cast<double>(m.seq_len), h = static_cast<double>(m.hidden);
  int weight_casts = 0, autocast_weight = 0, input_casts = 0, grad_casts = 0, fp8_gemms = 0, bf16_gemms = 0;
  int bias_grads = 0;
  for (const Op& op : fp8.plan.programs[0].ops) {
    const std::string& name = fp8.plan.names[op.name];
    if (name == "te-cast-qkv-weight") {
      ++weight_casts;
      const double w = h * 3.0 * h;
      EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_read), 4.0 * w);
      EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_written), 2.0 * w);
    }
    autocast_weight += name.rfind("autocast-cast-", 0) == 0 && name.find("weight") != std::string::npos &&
                       name != "autocast-cast-logits-weight";
    if (name == "te-cast-qkv-input") {
      ++input_casts;
      EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_read), 2.0 * tokens * h);
      EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_written), 2.0 * tokens * h);
      EXPECT_EQ(op.access, MemAccess::Fp8CastTranspose);
    }
    grad_casts += name == "te-cast-mlp-down-grad";
    bias_grads += name.find("-bias-grad") != std::string::npos;
    if (op.kind == OpKind::Gemm) (op.dtype == DType::FP8 ? fp8_gemms : bf16_gemms) += 1;
  }
  const TrainingPlan bf16 = build_training_plan(scenario_from_text(filled(y, {{"DT", "bf16"}}), "bf16"));
  int bf16_bias_grads = 0;
  for (const Op& op : bf16.plan.programs[0].ops)
    bf16_bias_grads += bf16.plan.names[op.name].find("-bias-grad") != std::string::npos;
  EXPECT_EQ(bias_grads, 0);
  EXPECT_EQ(bf16_bias_grads, 4 * 2 * 4);  // 4 linears a layer, 4 layers, 2 micro-batches
  EXPECT_EQ(weight_casts, 4 * 2);  // 4 layers x 2 micro-batches: no cast kept across micro-batches
  EXPECT_EQ(input_casts, 4 * 2);
  EXPECT_EQ(grad_casts, 4 * 2);
  EXPECT_EQ(autocast_weight, 0);
  EXPECT_EQ(fp8_gemms, 4 * 2 * 4 * 3);  // 4 linears x (fprop, dgrad, wgrad) per layer and micro-batch
  EXPECT_EQ(bf16_gemms, 2 * 3);         // the logits' fprop, dgrad and wgrad
  // Faster than the BF16 step where the GEMMs dominate, but by less than the 2x peak.
  const double t8 = iteration_s(filled(y, {{"DT", "fp8"}})), t16 = iteration_s(filled(y, {{"DT", "bf16"}}));
  EXPECT_LT(t8, t16);
  EXPECT_GT(t8, 0.5 * t16);
}

// Without gradient-accumulation fusion (Megatron-LM of 2021) every linear's wgrad is
// followed, at every micro-batch, by main_grad.add_(grad): the 16-bit gradient and the
// buffer read, the buffer written (FP16 main grads for an fp16 model, FP32 for bf16).
TEST(Fidelity, UnfusedGradAccumulationAddsEachWgradIntoMainGrad) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-a100, nodes: 1, gpus_per_node: 2}\nmodel: {preset: gpt3-1.3b, layers: 2, "
      "dtype: DT}\nparallel: {tp: 2}\ntraining: {global_batch: 3, grad_accumulation_fusion: F}\n";
  for (const char* dt : {"fp16", "bf16"}) {
    const Scenario sc = scenario_from_text(filled(y, {{"DT", dt}, {"F", "false"}}), "unfused");
    const TrainingPlan p = build_training_plan(sc);
    const double h = static_cast<double>(sc.model.hidden), g = std::string(dt) == "fp16" ? 2.0 : 4.0;
    int adds = 0, qkv = 0;
    for (const Op& op : p.plan.programs[0].ops) {
      const std::string& name = p.plan.names[op.name];
      adds += name.rfind("grad-accumulate-", 0) == 0;
      if (name != "grad-accumulate-qkv") continue;
      ++qkv;
      const double params = h * 3.0 * h / 2.0;  // this TP rank's half of the QKV weight
      EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_read), params * (2.0 + g)) << dt;
      EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_written), params * g) << dt;
      EXPECT_EQ(op.access, g == 2.0 ? MemAccess::Streaming : MemAccess::DynamicCast) << dt;
    }
    EXPECT_EQ(qkv, 2 * 3) << dt;                // 2 layers x 3 micro-batches
    EXPECT_EQ(adds, (2 * 4 + 1) * 3) << dt;     // 4 linears per layer and the logits, per micro-batch
    const double fused = iteration_s(filled(y, {{"DT", dt}, {"F", "true"}}));
    const double unfused = iteration_s(filled(y, {{"DT", dt}, {"F", "false"}}));
    EXPECT_GT(unfused, fused) << dt;
  }
}

// FP16 under Megatron's loss scale: before the step the FP32 main gradients are unscaled
// and checked for inf/NaN in one pass over the optimizer's shard (4 bytes read, 4 written a
// parameter), after the FP16 buffer's copy into them; BF16 runs have no loss scale.
TEST(Fidelity, Fp16StepUnscalesTheMainGradients) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2, dtype: DT}\n"
      "parallel: {dp: 8, zero_stage: 1}\ntraining: {global_batch: 8}\n";
  auto find = [](const TrainingPlan& p, const std::string& want) -> const Op* {
    for (const Op& op : p.plan.programs[0].ops)
      if (p.plan.names[op.name] == want) return &op;
    return nullptr;
  };
  const TrainingPlan fp16 = build_training_plan(scenario_from_text(filled(y, {{"DT", "fp16"}}), "fp16"));
  const TrainingPlan bf16 = build_training_plan(scenario_from_text(filled(y, {{"DT", "bf16"}}), "bf16"));
  const Op* copy = find(fp16, "main-grad-copy");
  const Op* unscale = find(fp16, "grad-unscale");
  ASSERT_NE(copy, nullptr);
  ASSERT_NE(unscale, nullptr);
  EXPECT_EQ(find(bf16, "grad-unscale"), nullptr);
  // The copy writes the shard's FP32 gradients; the unscale reads and writes them again.
  EXPECT_EQ(unscale->bytes_read, copy->bytes_written);
  EXPECT_EQ(unscale->bytes_written, copy->bytes_written);
  EXPECT_GT(unscale - copy, 0);  // after the copy
}

// parallel.grad_reduce_dtype bf16 (Megatron-Core grad_reduce_in_fp32 False): the buffer
// holds 2 bytes a parameter, the DP reduction moves half the bytes, and the optimizer
// first copies the shard into FP32; ZeRO 3 and plain PyTorch refuse it.
TEST(Fidelity, Bf16GradientBufferHalvesTheReductionAndIsCopiedBeforeTheStep) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
      "parallel: {dp: 8, zero_stage: 1, grad_reduce_dtype: G}\ntraining: {global_batch: 8}\n";
  auto reduced = [](const TrainingPlan& p, double& copy_read, double& copy_written) {
    double bytes = 0;
    for (const Op& op : p.plan.programs[0].ops) {
      const std::string& name = p.plan.names[op.name];
      if (name == "dp-grad-reduce-scatter") bytes += static_cast<double>(op.bytes);
      if (name == "main-grad-copy") {
        copy_read = static_cast<double>(op.bytes_read);
        copy_written = static_cast<double>(op.bytes_written);
      }
    }
    return bytes;
  };
  const Scenario s32 = scenario_from_text(filled(y, {{"G", "auto"}}), "fp32");
  const Scenario s16 = scenario_from_text(filled(y, {{"G", "bf16"}}), "bf16");
  const TrainingPlan p32 = build_training_plan(s32), p16 = build_training_plan(s16);
  double r32 = -1, w32 = -1, r16 = -1, w16 = -1;
  const double b32 = reduced(p32, r32, w32), b16 = reduced(p16, r16, w16);
  EXPECT_GT(b32, 0);
  EXPECT_DOUBLE_EQ(b16, b32 / 2);
  EXPECT_EQ(r32, -1);  // an FP32 buffer is the optimizer's main gradient: nothing to copy
  ASSERT_GT(r16, 0);
  EXPECT_DOUBLE_EQ(w16, 2 * r16);  // the shard's 2 bytes a parameter into 4
  EXPECT_DOUBLE_EQ(p16.memory.gradients, p32.memory.gradients / 2);
  // Refused: under ZeRO 3, and under plain PyTorch (DDP, zero_stage 0).
  const std::string bf16 = filled(y, {{"G", "bf16"}});
  for (const std::string& bad :
       {filled(bf16, {{"zero_stage: 1", "zero_stage: 3"}}),
        filled(bf16, {{"zero_stage: 1", "zero_stage: 0"},
                      {"global_batch: 8}", "global_batch: 8, framework: pytorch-eager}"}})})
    EXPECT_THROW(build_training_plan(scenario_from_text(bad, "bad")), InputError) << bad;
}

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
  EXPECT_NEAR(f.reshape, 2.3 * q, 1.0);    // GQA: the query gathered out of the grouped layout, 2.3 copies' time
  EXPECT_DOUBLE_EQ(f.cat, q + 2 * k);      // dQ, dK, dV into one QKV gradient
  const Seen u = seen(build_training_plan(scenario_from_text(filled(y, {{"M", "llama3-70b"}, {"F", "false"}}), "u")));
  // Unfused: the chain's measured time as copy-rate passes, 28.5 forward and 30 backward.
  EXPECT_DOUBLE_EQ(u.rotary_read + u.rotary_written, 28.5 * (q + k));
  EXPECT_DOUBLE_EQ(u.backward_read, 16.5 * (q + k));
  // Full recompute runs the forward's rotary again in the backward.
  const Seen r = seen(build_training_plan(scenario_from_text(
      filled(y, {{"M", "llama3-70b"}, {"F", "true"}, {"global_batch: 2", "global_batch: 2, recompute: full"}}), "r")));
  EXPECT_EQ(r.rotary, 2);
  // Multi-head attention needs no reshape copy; a learned position table, no rotary.
  const Seen mha = seen(build_training_plan(scenario_from_text(filled(y, {{"M", "llama3-8b, kv_heads: 32"}, {"F", "true"}}), "m")));
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
  EXPECT_EQ(softmax, 4);  // two metrics, two micro-batches
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
    return scenario_from_text(filled(y, {{"NODES", std::to_string(dp / 8)}, {"DP", std::to_string(dp)},
                                         {"GB", std::to_string(4 * dp)}, {"N", std::to_string(n)}}),
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
  for (const Op& op : off.plan.programs[0].ops) EXPECT_EQ(off.plan.names[op.name].rfind("metric-", 0), std::string::npos);
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

// The timeline keeps one copy of identical ranks' spans: a rank whose spans equal an
// earlier rank's of the same program becomes its mirror, and expanding the mirrors gives
// back every simulated span exactly.
TEST(Timeline, IdenticalRanksAreWrittenOnceAsMirrors) {
  const Scenario s = scenario_from_text(
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
      "parallel: {tp: 4, dp: 2}\ntraining: {global_batch: 4}\n", "fold");
  RunOptions o;
  o.simulate_all_ranks = true;
  o.record_link_usage = false;
  const RunOutcome run = run_training(s, o);
  const Timeline t = make_timeline(run);
  EXPECT_LT(t.spans.size(), run.exec.spans.size());
  std::map<int32_t, std::vector<std::tuple<uint32_t, uint8_t, int64_t, int64_t>>> kept, all;
  for (const SpanRecord& sp : t.spans) kept[sp.rank].emplace_back(sp.op, sp.stream, sp.start_ps, sp.end_ps);
  for (const SpanRecord& sp : run.exec.spans) all[sp.rank].emplace_back(sp.op, sp.stream, sp.start_ps, sp.end_ps);
  for (const RankInfo& r : t.ranks) {
    ASSERT_TRUE(kept.count(r.mirror_of)) << r.rank;
    EXPECT_EQ(kept[r.mirror_of], all[r.rank]) << r.rank << " mirrors " << r.mirror_of;
    EXPECT_EQ(t.ranks[static_cast<size_t>(r.mirror_of)].program, r.program);
  }
}

// Megatron-LM's loss_func on the last stage, per micro-batch (training.loss_sync): the
// NaN check's host wait (`check`, the default), then under check-allreduce (2023-09 to
// 2025-04) the reporting loss's 8-byte all-reduce over DP (and the loss over CP first when
// cp > 1); the backward waits for both. `allreduce` (Megatron before the check) has no
// host wait; pytorch-eager has neither and refuses the Megatron modes.
TEST(LossSync, MegatronWaitsForEachMicroBatchsLoss) {
  const std::string base = "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
                           "parallel: {tp: 2, cp: 2, dp: 2, micro_batch: 1}\n"
                           "training: {global_batch: 8";
  auto ops_named = [](const TrainingPlan& tp, const std::string& name) {
    std::vector<const Op*> found;
    for (const Op& op : tp.plan.programs[0].ops)
      if (tp.plan.names[op.name] == name) found.push_back(&op);
    return found;
  };
  const TrainingPlan now = build_training_plan(scenario_from_text(base + "}\n", "loss-now"));
  const auto now_checks = ops_named(now, "loss-nan-check");
  ASSERT_EQ(now_checks.size(), 4u);
  for (const Op* op : now_checks) EXPECT_EQ(op->m, 2);  // NaN, then Inf; one relaunch
  EXPECT_TRUE(ops_named(now, "loss-dp-allreduce").empty());
  const TrainingPlan on = build_training_plan(scenario_from_text(base + ", loss_sync: check-allreduce}\n", "loss-on"));
  ASSERT_EQ(on.layout.micro_batches, 4);
  const auto checks = ops_named(on, "loss-nan-check");
  ASSERT_EQ(checks.size(), 4u);
  for (const Op* op : checks) {
    EXPECT_EQ(op->access, MemAccess::HostSync);
    EXPECT_EQ(op->m, 1);
    EXPECT_EQ(op->n, 1);
  }
  for (const char* name : {"loss-dp-allreduce", "loss-cp-allreduce"}) {
    const auto colls = ops_named(on, name);
    ASSERT_EQ(colls.size(), 4u) << name;
    for (const Op* op : colls) EXPECT_EQ(op->bytes, 8) << name;
  }
  const TrainingPlan old = build_training_plan(scenario_from_text(base + ", loss_sync: allreduce}\n", "loss-old"));
  EXPECT_TRUE(ops_named(old, "loss-nan-check").empty());
  EXPECT_EQ(ops_named(old, "loss-dp-allreduce").size(), 4u);
  const TrainingPlan off = build_training_plan(scenario_from_text(base + ", loss_sync: none}\n", "loss-off"));
  EXPECT_TRUE(ops_named(off, "loss-nan-check").empty());
  EXPECT_TRUE(ops_named(off, "loss-dp-allreduce").empty());
  EXPECT_TRUE(ops_named(off, "loss-cp-allreduce").empty());
  // One GPU: each micro-batch's waits (compute.host_sync, 55 us, two under `check`) and the
  // backward's relaunch from an empty queue (compute.backward_relaunch, 225 us, and
  // compute.autograd_node, 1.27 us a node of the graph it walks), after the launch gap every
  // op pays, are on the step's path.
  const std::string one = "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1, power_cap: false}\n"
                          "model: {preset: gpt3-1.3b, layers: 2}\nparallel: {micro_batch: 1}\ntraining: {global_batch: 4";
  // (The gradient buckets' NaN check, which follows the loss check under auto, held off here.)
  const double t_on =
      run_training(scenario_from_text(one + ", grad_nan_check: false}\n", "loss-1")).exec.makespan.seconds();
  const double t_off = run_training(scenario_from_text(one + ", loss_sync: none, grad_nan_check: false}\n", "loss-0"))
                           .exec.makespan.seconds();
  const ComputeProfile prof;
  const TrainingPlan one_plan = build_training_plan(scenario_from_text(one + "}\n", "loss-1p"));
  const auto one_checks = ops_named(one_plan, "loss-nan-check");
  ASSERT_EQ(one_checks.size(), 4u);
  const double relaunch =
      prof.backward_relaunch_s + static_cast<double>(one_checks[0]->batch) * prof.autograd_node_s;
  EXPECT_NEAR(t_on - t_off, 4 * (2 * prof.host_sync_s + relaunch + prof.launch_overhead_s), 1e-9);
  const std::string eager = "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, "
                            "layers: 2}\ntraining: {framework: pytorch-eager, global_batch: 1";
  EXPECT_TRUE(ops_named(build_training_plan(scenario_from_text(eager + "}\n", "loss-e")), "loss-nan-check").empty());
  EXPECT_THROW(build_training_plan(scenario_from_text(eager + ", loss_sync: check-allreduce}\n", "loss-e2")),
               InputError);
}

// loss.backward() walks its whole graph once before the first node runs (autograd's
// dependency count), so the relaunch after the loss check grows with the nodes: one per
// forward op the chunk planned and one per parameter tensor (12 a GPT layer: two LayerNorms'
// gains and biases, four linears' weights and biases), one checkpoint node a layer under full
// recompute, and only the last chunk's graph on an interleaved last stage.
TEST(LossSync, RelaunchWalksTheChunksAutogradGraph) {
  auto nodes = [](int layers, const std::string& training, const std::string& parallel = "") {
    const TrainingPlan tp = build_training_plan(scenario_from_text(
        "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: " + std::to_string(layers) +
            "}\n" + parallel + "training: {global_batch: 8, loss_sync: check-allreduce" + training + "}\n",
        "nodes"));
    const Program& prog = tp.plan.programs.back();
    int64_t forward_ops = 0;  // micro-batch 0's forward ops before its check, on the last stage
    for (const Op& op : prog.ops) {
      if (tp.plan.names[op.name] == "loss-nan-check") return std::make_pair(op.batch, forward_ops);
      const bool comm = is_comm(op.kind);
      if (op.phase == Phase::Forward && op.micro_batch == 0 && !comm) ++forward_ops;
    }
    return std::make_pair(int64_t{-1}, forward_ops);
  };
  const auto [two, two_ops] = nodes(2, "");
  const auto [four, four_ops] = nodes(4, "");
  ASSERT_GT(two, 0);
  // Two more layers: their forward ops and 2 x 12 parameter tensors.
  EXPECT_EQ(four - two, (four_ops - two_ops) + 2 * 12);
  // The tables (token and position) and the head (final LayerNorm's gain and bias, the output
  // layer's weight unless tied) beside the layers' tensors.
  EXPECT_GE(two, two_ops + 2 * 12 + 2 + 2);
  // Full recompute: a layer's ops record no nodes, its checkpoint one.
  const auto [full, full_ops] = nodes(4, ", recompute: full");
  const int64_t per_layer = (four_ops - two_ops) / 2;
  EXPECT_EQ(full_ops, four_ops);
  EXPECT_EQ(full, four - 4 * per_layer + 4);
  // PP 2, four layers: the last stage's graph holds its two layers under 1F1B, and under the
  // interleaved schedule (two chunks of one layer a stage) only its last chunk's one.
  const auto [staged, staged_ops] = nodes(4, "", "parallel: {pp: 2, dp: 4}\n");
  const auto [chunked, chunked_ops] =
      nodes(4, "", "parallel: {pp: 2, dp: 4, schedule: interleaved-1f1b, virtual_stages: 2}\n");
  EXPECT_EQ(staged - chunked, per_layer + 12);
  // The relaunch is priced per node.
  Op sync;
  sync.kind = OpKind::Memory;
  sync.access = MemAccess::HostSync;
  sync.n = 1;
  ComputeProfile prof;
  const GpuSpec& gpu = *find_gpu_preset("h100-sxm");
  sync.batch = 0;
  const double bare = compute_seconds(sync, gpu, prof);
  sync.batch = 500;
  EXPECT_NEAR(compute_seconds(sync, gpu, prof) - bare, 500 * prof.autograd_node_s, 1e-12);
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
    return std::string("name: t\ncluster: {preset: dgx-a100, nodes: 1, gpus_per_node: 2}\nmodel: {preset: gpt3-1.3b, "
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
  const std::string base = "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 2, power_cap: false}\n"
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
  EXPECT_EQ(named(build_training_plan(scenario_from_text(base + ", loss_sync: allreduce, grad_nan_check: true}\n",
                                                         "forced")),
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

// Bytes read and written, and count, of every op of rank 0 named `name`.
struct OpTotals {
  int count = 0;
  double read = 0, written = 0;
};
OpTotals op_totals(const TrainingPlan& tp, const std::string& name) {
  OpTotals t;
  for (const Op& op : tp.plan.programs[0].ops)
    if (tp.plan.names[op.name] == name) {
      ++t.count;
      t.read += static_cast<double>(op.bytes_read);
      t.written += static_cast<double>(op.bytes_written);
    }
  return t;
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
      "parallel: {tp: 2, sequence_parallel: true, micro_batch: 1}\ntraining: {global_batch: 3, transformer_impl: IMPL}\n";
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
