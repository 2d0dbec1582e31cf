// Pipeline schedules against their documented formulas: the bubble, the order of blocks,
// uneven splits, micro-batch groups, the sends and receives between stages, each micro-batch's
// loss and the timeline's mirrors of identical ranks.
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
  EXPECT_THROW(build_training_plan(scenario(", microbatch_group: 1")), InputError);  // below pp
  EXPECT_THROW(build_training_plan(scenario(", microbatch_group: 9")), InputError);  // above M
  EXPECT_NO_THROW(build_training_plan(scenario(", microbatch_group: 3")));           // 8 = 3 + 3 + 2 (2 >= pp)
  EXPECT_THROW(build_training_plan(scenario(", microbatch_group: 7")), InputError);  // 8 = 7 + 1 (1 < pp)
  EXPECT_THROW(
      build_training_plan(scenario_from_text(std::string(kTiny) + "parallel: {pp: 2, dp: 8, microbatch_group: 2}\n"
                                                                  "training: {global_batch: 64}\n",
                                             "group")),
      InputError);  // 1f1b has no chunks to group
}

// The embedding and the output layer may each stand in for a chunk's layer (Megatron-Core's
// account_for_embedding/loss_in_pipeline_split, Llama 3 405B's 126 layers in 16 × 8 chunks):
// 6 layers in 2 × 4 chunks leave the first chunk and the last without layers; 5 is refused.
// Held activations are counted chunk by chunk, so the stage whose first chunk is only the
// embedding holds fewer layer-activations than the one beside it.
TEST(Pipeline, EmbeddingAndOutputMayTakeAChunkEach) {
  auto scenario = [](int layers) {
    return scenario_from_text(
        "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: " + std::to_string(layers) +
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
  const auto inter =
      waited_sends_and_posted_recvs(plan(", schedule: interleaved-1f1b, virtual_stages: 2, overlap_p2p_comm: false"));
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

// The timeline keeps one copy of identical ranks' spans: a rank whose spans equal an
// earlier rank's of the same program becomes its mirror, and expanding the mirrors gives
// back every simulated span exactly.
TEST(Timeline, IdenticalRanksAreWrittenOnceAsMirrors) {
  const Scenario s = scenario_from_text(
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
      "parallel: {tp: 4, dp: 2}\ntraining: {global_batch: 4}\n",
      "fold");
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
  const std::string base =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
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
  const std::string one =
      "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1, power_cap: false}\n"
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
  const double relaunch = prof.backward_relaunch_s + static_cast<double>(one_checks[0]->batch) * prof.autograd_node_s;
  EXPECT_NEAR(t_on - t_off, 4 * (2 * prof.host_sync_s + relaunch + prof.launch_overhead_s), 1e-9);
  const std::string eager =
      "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, "
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
        "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: " + std::to_string(layers) + "}\n" +
            parallel + "training: {global_batch: 8, loss_sync: check-allreduce" + training + "}\n",
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

}  // namespace
}  // namespace clustersim
