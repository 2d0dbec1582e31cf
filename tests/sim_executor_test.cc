#include <gtest/gtest.h>

#include <array>
#include <map>

#include "plan/training_planner.h"
#include "sim/executor.h"
#include "sim/run.h"
#include "support/temp_scenario.h"
#include "topology/presets.h"

namespace clustersim {
namespace {

using testing::scenario_from_text;

ClusterSpec one_dgx() {
  ClusterSpec c;
  c.node = *find_node_preset("dgx-h100");
  return c;
}

// Two ranks on GPUs 0 and 1, one TP group of both; no programs yet.
Plan two_ranks_in_a_tp_group() {
  Plan p;
  p.world_size = 2;
  p.rank_gpu = {0, 1};
  p.mirror_of = {0, 1};
  p.rank_groups.assign(2, {-1, -1, -1, -1, -1, -1, -1});
  p.add_group(GroupKind::TP, {0, 1});
  return p;
}

// One rank on GPU 0 in no group; no program yet.
Plan one_rank() {
  Plan p;
  p.world_size = 1;
  p.rank_gpu = {0};
  p.mirror_of = {0};
  p.rank_groups.assign(1, {-1, -1, -1, -1, -1, -1, -1});
  return p;
}

// Two ranks, one program: memory op -> all-reduce over both -> memory op.
Plan tiny_plan(int64_t first_bytes_rank1) {
  Plan p = two_ranks_in_a_tp_group();
  for (int r = 0; r < 2; ++r) {
    Program prog;
    prog.name = "r" + std::to_string(r);
    const uint8_t compute = prog.stream("compute");
    const uint8_t comm = prog.stream("tp");
    Op a;
    a.kind = OpKind::Memory;
    a.stream = compute;
    a.bytes_read = r == 1 ? first_bytes_rank1 : 1'000'000;
    a.name = p.intern("a");
    uint32_t i0 = prog.add(a);
    Op c;
    c.kind = OpKind::Collective;
    c.stream = comm;
    c.group = GroupKind::TP;
    c.collective = CollectiveKind::AllReduce;
    c.bytes = 90'000'000;
    c.name = p.intern("ar");
    uint32_t i1 = prog.add(c, {i0});
    Op b = a;
    b.bytes_read = 1'000'000;
    prog.add(b, {i1});
    p.programs.push_back(prog);
    p.rank_program.push_back(static_cast<uint32_t>(r));
  }
  return p;
}

// Two ranks of a TP group: `first[r]` on rank r, then an all-reduce, then `second`. Rank 0
// reaches its all-reduce after its short first kernel and runs `second` beside it while
// it waits; rank 1 joins after its longer first kernel and runs `second` once the
// all-reduce is done.
Plan kernel_beside_an_all_reduce(const std::array<Op, 2>& first, const Op& second) {
  Plan p = two_ranks_in_a_tp_group();
  for (int r = 0; r < 2; ++r) {
    Program prog;
    prog.name = "r" + std::to_string(r);
    const uint8_t compute = prog.stream("compute");
    const uint8_t comm = prog.stream("tp");
    Op a = first[static_cast<size_t>(r)];
    a.stream = compute;
    a.name = p.intern("first");
    const uint32_t i0 = prog.add(a);
    Op c;
    c.kind = OpKind::Collective;
    c.stream = comm;
    c.group = GroupKind::TP;
    c.collective = CollectiveKind::AllReduce;
    c.bytes = 1'000'000;
    c.name = p.intern("ar");
    const uint32_t i1 = prog.add(c, {i0});
    Op b = second;
    b.stream = compute;
    b.name = p.intern("second");
    prog.add(b, {r == 0 ? i0 : i1});  // rank 0: beside the waiting all-reduce; rank 1: after it
    p.programs.push_back(prog);
    p.rank_program.push_back(static_cast<uint32_t>(r));
  }
  return p;
}

Op memory_op(int64_t bytes) {
  Op o;
  o.kind = OpKind::Memory;
  o.bytes_read = bytes;
  return o;
}

Op gemm_op(int64_t m, int64_t n, int64_t k) {
  Op o;
  o.kind = OpKind::Gemm;
  o.dtype = DType::BF16;
  o.m = m, o.n = n, o.k = k;
  return o;
}

// Rank 0's second kernel runs beside the waiting NCCL kernel, at the profile's slowdown
// for a waiting collective; kernels with no NCCL kernel beside them keep their time.
TEST(Executor, KernelsBesideAWaitingNcclKernelRunAtTheMeasuredSlowdown) {
  const Plan p = kernel_beside_an_all_reduce({memory_op(1'000'000), memory_op(1'000'000'000)}, memory_op(100'000'000));
  Topology topo(one_dgx());
  auto durations = [&](double coll, double p2p) {
    ExecOptions opt;
    opt.compute.kernel_latency_s = 0;  // the slowdown alone, on no floor
    opt.compute.overlap_slowdown[0].fill(p2p);
    opt.compute.overlap_slowdown[1].fill(coll);
    std::map<std::pair<int32_t, uint32_t>, int64_t> d;
    for (const SpanRecord& s : execute_plan(p, topo, opt).spans) d[{s.rank, s.op}] = s.end_ps - s.start_ps;
    return d;
  };
  const auto base = durations(1.0, 1.0), slow = durations(1.5, 3.0);
  EXPECT_NEAR(static_cast<double>(slow.at({0, 2})) / static_cast<double>(base.at({0, 2})), 1.5, 1e-7);
  EXPECT_EQ(slow.at({0, 0}), base.at({0, 0}));  // before the collective was reached
  EXPECT_EQ(slow.at({1, 0}), base.at({1, 0}));  // rank 1 reaches it after
  EXPECT_EQ(slow.at({1, 2}), base.at({1, 2}));  // starts once the collective is done
}

// The same with a GEMM beside the waiting all-reduce and no measured factor: it takes the
// factor NCCL's 16 channels imply on the GPU, 1.29 on an H100 as measured beside 16 held
// SMs (cost_models/compute.h, beside_blocks); the GEMM before the collective keeps its time.
TEST(Executor, GemmBesideACollectiveLosesTheSmsItsChannelsHold) {
  const Plan p = kernel_beside_an_all_reduce({gemm_op(1024, 8192, 8192), gemm_op(8192, 8192, 8192)},
                                             gemm_op(4096, 8192, 8192));
  Topology topo(one_dgx());
  ASSERT_EQ(topo.gpu().sm_count, 132);
  ASSERT_EQ(topo.gpu().gemm_cluster_sms, 2);
  auto durations = [&](bool measured_one) {
    ExecOptions opt;
    opt.compute.power_cap = false;
    if (measured_one) opt.compute.overlap_slowdown[1].fill(1.0);
    std::map<std::pair<int32_t, uint32_t>, int64_t> d;
    for (const SpanRecord& s : execute_plan(p, topo, opt).spans) d[{s.rank, s.op}] = s.end_ps - s.start_ps;
    return d;
  };
  const auto alone = durations(true), beside = durations(false);
  EXPECT_NEAR(static_cast<double>(beside.at({0, 2})) / static_cast<double>(alone.at({0, 2})), 1.29, 1e-6);
  EXPECT_EQ(beside.at({0, 0}), alone.at({0, 0}));  // before the collective was reached
  EXPECT_EQ(beside.at({1, 2}), alone.at({1, 2}));  // after the collective ended
}

// A receive posted ahead of the compute holds its channels' SMs beside the kernels that
// start while it waits. NCCL gives each peer of a communicator as many p2p channels as the
// worst pair of its ranks allows (ncclTopoComputeP2pChannels): 16 when every rank is in
// the node, the network peer's 2 as soon as one is not, even for a peer in the same node.
// Rank 0 receives from rank 1 (GPUs 0 and 1, one node) while a GEMM runs: beside 16 held
// SMs it takes 1.29, beside 2 it takes 1.077, and only the group's third rank on the other
// node (GPU 8) tells the two apart.
TEST(Executor, APostedReceiveHoldsTheChannelsItsWholeGroupAllows) {
  ClusterSpec two = one_dgx();
  two.nodes = 2;
  Topology topo(two);
  auto plan = [](bool group_leaves_the_node) {
    Plan p;
    p.world_size = group_leaves_the_node ? 3 : 2;
    p.rank_gpu = {0, 1};
    if (group_leaves_the_node) p.rank_gpu.push_back(8);
    for (int32_t r = 0; r < p.world_size; ++r) p.mirror_of.push_back(r);
    std::array<int32_t, kGroupKinds> none{};
    none.fill(-1);
    p.rank_groups.assign(static_cast<size_t>(p.world_size), none);
    std::vector<int32_t> members = {0, 1};
    if (group_leaves_the_node) members.push_back(2);
    p.add_group(GroupKind::PP, members);
    for (int32_t r = 0; r < p.world_size; ++r) {
      Program prog;
      prog.name = "r" + std::to_string(r);
      const uint8_t compute = prog.stream("compute");
      const uint8_t pp = prog.stream("pp");
      Op p2p;
      p2p.stream = pp;
      p2p.group = GroupKind::PP;
      p2p.bytes = 1'000'000;
      p2p.overlaps_compute = true;
      if (r == 0) {
        p2p.kind = OpKind::Recv;
        p2p.peer = 1;
        p2p.name = p.intern("recv");
        prog.add(p2p);
        Op g = gemm_op(4096, 8192, 8192);
        g.stream = compute;
        g.name = p.intern("gemm");
        prog.add(g);
      } else {
        Op wait = memory_op(20'000'000'000);  // rank 1 sends long after rank 0's GEMM is done
        wait.stream = compute;
        wait.name = p.intern("wait");
        const uint32_t w = prog.add(wait);
        if (r == 1) {
          p2p.kind = OpKind::Send;
          p2p.peer = 0;
          p2p.name = p.intern("send");
          prog.add(p2p, {w});
        }
      }
      p.programs.push_back(prog);
      p.rank_program.push_back(static_cast<uint32_t>(r));
    }
    return p;
  };
  auto gemm_ratio = [&](bool group_leaves_the_node) {
    const Plan p = plan(group_leaves_the_node);
    auto gemm = [&](bool measured_one) {
      ExecOptions opt;
      opt.compute.power_cap = false;
      if (measured_one) opt.compute.overlap_slowdown[0].fill(1.0);
      for (const SpanRecord& s : execute_plan(p, topo, opt).spans)
        if (s.rank == 0 && s.op == 1) return static_cast<double>(s.end_ps - s.start_ps);
      return 0.0;
    };
    return gemm(false) / gemm(true);
  };
  EXPECT_NEAR(gemm_ratio(false), 1.29, 1e-6);
  EXPECT_NEAR(gemm_ratio(true), 1.077, 1e-6);
}

// CUDA_LAUNCH_BLOCKING=1: the host issues each op only once every earlier op of its rank
// has finished, whatever the stream, and a kernel starts blocking_launch_s after its
// issue. Rank 0's second kernel, which ran beside the all-reduce, now follows it:
//   start(second) = end(ar) + g,  start(first) = g.
// g was measured as what a kernel takes beyond its queued time with the gap before it, so
// a blocked kernel runs its queued time and that gap: its span is the queued span + gap.
TEST(Executor, BlockingLaunchesSerializeARanksStreams) {
  const Plan p = kernel_beside_an_all_reduce({memory_op(1'000'000), memory_op(1'000'000'000)}, memory_op(100'000'000));
  Topology topo(one_dgx());
  auto spans = [&](double blocking) {
    ExecOptions opt;
    opt.compute.power_cap = false;
    opt.compute.overlap_slowdown[1].fill(1.0);
    opt.blocking_launch_s = blocking;
    std::map<std::pair<int32_t, uint32_t>, SpanRecord> d;
    for (const SpanRecord& s : execute_plan(p, topo, opt).spans) d[{s.rank, s.op}] = s;
    return d;
  };
  const auto async = spans(-1);
  EXPECT_LT(async.at({0, 2}).start_ps, async.at({0, 1}).end_ps);  // beside the waiting all-reduce
  const double g = 40e-6;
  const auto blocked = spans(g);
  const int64_t gp = static_cast<int64_t>(g * 1e12);
  EXPECT_EQ(blocked.at({0, 0}).start_ps, gp);
  EXPECT_EQ(blocked.at({0, 2}).start_ps, blocked.at({0, 1}).end_ps + gp);
  EXPECT_EQ(blocked.at({1, 2}).start_ps, blocked.at({1, 1}).end_ps + gp);
  // Each kernel keeps its queued time and gap; where it starts moves.
  const int64_t gap = SimTime::from_seconds(ExecOptions{}.compute.launch_overhead_s).picoseconds();
  for (const auto& [key, sp] : async) {
    if (key.second == 1) continue;  // the all-reduce: its span is its wait as well
    EXPECT_NEAR(static_cast<double>(sp.end_ps - sp.start_ps + gap),
                static_cast<double>(blocked.at(key).end_ps - blocked.at(key).start_ps), 2.0);
  }
}

// Compute busy is the union of a rank's kernels: two compute streams at once (an eager
// stack's side stream, a second kernel beside the first) count their overlap once, so busy
// never exceeds the step; two kernels side by side of t each give t, not 2t.
TEST(Executor, ComputeBusyIsTheUnionOfTheKernelsNeverMoreThanTheStep) {
  Plan p = one_rank();
  Program prog;
  prog.name = "r0";
  Op a = memory_op(1'000'000'000);
  a.stream = prog.stream("compute");
  a.name = p.intern("a");
  prog.add(a);
  Op b = a;
  b.stream = prog.stream("side");
  b.name = p.intern("b");
  prog.add(b);
  p.programs.push_back(prog);
  p.rank_program.push_back(0);
  Topology topo(one_dgx());
  ExecOptions opt;
  opt.compute.power_cap = false;
  const ExecResult r = execute_plan(p, topo, opt);
  const double one = static_cast<double>(r.spans.at(0).end_ps - r.spans.at(0).start_ps) * 1e-12;
  EXPECT_DOUBLE_EQ(r.spans.at(0).start_ps, r.spans.at(1).start_ps);  // side by side
  EXPECT_LE(r.compute_busy_s, r.makespan.seconds());
  EXPECT_NEAR(r.compute_busy_s, one + opt.compute.launch_overhead_s, 1e-12);
  EXPECT_EQ(r.bubble_s, 0.0);
}

// Under blocking launches a plan whose ranks wait on each other in a cycle cannot finish:
// an interleaved schedule with overlapped pipeline transfers and TP overlap, as a real job
// with CUDA_LAUNCH_BLOCKING=1 would hang; the error says why.
TEST(Executor, BlockingLaunchesThatWouldHangAreReported) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: llama3-8b, layers: 8}\n"
      "parallel: {tp: 4, pp: 4, schedule: interleaved-1f1b, virtual_stages: 2, overlap_p2p_comm: true, "
      "sequence_parallel: true, tp_comm_overlap: true}\n"
      "training: {global_batch: 8, launch_blocking: true}\n";
  try {
    run_training(scenario_from_text(y, "blocking-hang"));
    ADD_FAILURE() << "the plan finished";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("a real job would hang as well"), std::string::npos) << e.what();
  }
}

// Kernels from a framework's full queue (docs/model.md, "Kernels from a full queue"): with
// no timing events between them, each kernel with its gap g takes queue_saving s less than
// as timed, and no kernel less than queue_interval i. One rank, n memory kernels in a row:
//   makespan(timed)  = n · (g + t)
//   makespan(queued) = n · g + Σ max(i, t + g - s) - g  = n · max(i, t + g - s)
// A large kernel (t = 4.4 µs + 1 GB / (0.88 · HBM)) saves s; a kernel of no bytes is
// ~4.4 µs as timed and so clamps at i only when the floor is lowered under s - g + i. (The
// executor adds the gap whatever the kernel: a queued kernel takes at least max(i, g).)
TEST(Executor, KernelsFromAFullQueueTakeTheSavingLess) {
  Topology topo(one_dgx());
  auto makespan = [&](int64_t bytes, bool timed, double latency) {
    Plan p = one_rank();
    Program prog;
    prog.name = "r0";
    const uint8_t compute = prog.stream("compute");
    uint32_t last = 0;
    for (int i = 0; i < 10; ++i) {
      Op o = memory_op(bytes);
      o.stream = compute;
      o.name = p.intern("k");
      last = i == 0 ? prog.add(o) : prog.add(o, {last});
    }
    p.programs.push_back(prog);
    p.rank_program.push_back(0);
    ExecOptions opt;
    opt.compute.power_cap = false;
    opt.compute.kernel_latency_s = latency;
    opt.compute.launch_overhead_s = 1.28e-6;  // the gap a calibration measures (under queue_interval)
    opt.timed_kernels = timed;
    return execute_plan(p, topo, opt).makespan.seconds();
  };
  const ComputeProfile c;
  const double g = 1.28e-6, s = c.queue_saving_s, i = c.queue_interval_s;
  // Large kernels: 10 · s shorter.
  EXPECT_NEAR(makespan(1'000'000'000, true, c.kernel_latency_s) - makespan(1'000'000'000, false, c.kernel_latency_s),
              10 * s, 1e-11);
  // Tiny kernels, as timed 4.4 µs + a few bytes: 10 · (t + g - s) queued.
  const double timed = makespan(64, true, c.kernel_latency_s);
  EXPECT_NEAR(makespan(64, false, c.kernel_latency_s), timed - 10 * s, 1e-11);
  // With no floor the tiny kernels would take less than the front end issues them: i each.
  EXPECT_LT(makespan(64, true, 0) / 10 - s, i);
  EXPECT_NEAR(makespan(64, false, 0), 10 * i, 1e-11);
  EXPECT_GT(timed, 10 * (g + c.kernel_latency_s) - 1e-12);
}

// A collective starts when its last member arrives and ends for all members at once:
//   end(ar) = max(t_a(rank0), t_a(rank1)) + T_ring(2 GPUs, 90 MB)
TEST(Executor, CollectiveWaitsForTheLastMember) {
  Topology topo(one_dgx());
  ExecOptions opt;
  opt.compute.kernel_latency_s = 0;  // kernels at bytes / (0.9 · HBM bandwidth), no floor
  opt.compute.memory_efficiency = 0.9;
  opt.timed_kernels = true;  // and their gaps as timed, not from a full queue
  // No protocol overheads, a fixed ring: the textbook 2-GPU ring all-reduce.
  for (auto& f : opt.network.base_latency) f.fill(0.0);
  for (auto& c : opt.network.hop_latency)
    for (auto& f : c) f.fill(0.0);
  opt.network.figure_route_latency.fill(0.0);  // the route's own latency, all of it
  opt.network.link_efficiency.fill(1.0);
  opt.algorithm = Algorithm::Ring;
  opt.protocol = Protocol::Simple;
  const Plan plan = tiny_plan(100'000'000);  // rank 1 arrives late
  ExecResult r = execute_plan(plan, topo, opt);
  const GpuSpec& gpu = topo.gpu();
  auto dur = [&](int64_t bytes) { return SimTime::from_seconds(bytes / (gpu.hbm_bandwidth * 0.9) + 2e-6); };
  const SimTime ar = SimTime::from_seconds(2 * 0.5e-6 + 90e6 / 450e9);  // p = 2: 2 steps of S/2
  const SimTime expect_ar_end = dur(100'000'000) + ar;
  ASSERT_EQ(r.spans.size(), 6u);
  for (const SpanRecord& s : r.spans) {
    if (s.op == 1) {
      EXPECT_EQ(s.end_ps, expect_ar_end.picoseconds());
      // Each member's span starts at its own arrival, as a real NCCL kernel does.
      EXPECT_EQ(s.start_ps, s.rank == 0 ? dur(1'000'000).picoseconds() : dur(100'000'000).picoseconds());
    }
  }
  EXPECT_EQ(r.makespan, expect_ar_end + dur(1'000'000));
  // Rank 0 waited inside the collective while its compute stream was idle: exposed.
  EXPECT_GT(r.exposed_comm_by_kind[static_cast<size_t>(GroupKind::TP)], ar.seconds());
}

TEST(Executor, ACollectiveNobodyJoinsIsReportedNotHung) {
  Topology topo(one_dgx());
  Plan plan = tiny_plan(1000);
  plan.programs[1].ops[1].group = GroupKind::DP;  // rank 1 issues on a group it is not in
  EXPECT_THROW(execute_plan(plan, topo, ExecOptions{}), std::runtime_error);
}

constexpr const char* kLayout = R"(
cluster: {preset: dgx-h100, nodes: 4, scale_out: {topology: fat-tree, nics_per_leaf: 16}}
model: {preset: gpt3-1.3b, layers: 4}
parallel: {tp: 4, dp: 8, micro_batch: 1}
training: {global_batch: 16}
)";

// The symmetry shortcut (simulate one DP replica) gives exactly the plain answer.
TEST(Executor, SymmetryShortcutMatchesSimulatingEveryRank) {
  const Scenario s = scenario_from_text(kLayout, "symmetry");
  RunOptions all;
  all.simulate_all_ranks = true;
  const RunOutcome fast = run_training(s);
  const RunOutcome slow = run_training(s, all);
  EXPECT_EQ(fast.exec.simulated_ranks.size(), 4u);
  EXPECT_EQ(slow.exec.simulated_ranks.size(), 32u);
  EXPECT_EQ(fast.exec.makespan, slow.exec.makespan);
  EXPECT_DOUBLE_EQ(fast.exec.exposed_comm_s, slow.exec.exposed_comm_s);
  // Every mirror rank's spans equal its representative's, op for op.
  std::map<int32_t, std::vector<std::tuple<uint8_t, uint32_t, int64_t, int64_t>>> by_rank;
  for (const SpanRecord& sp : slow.exec.spans) by_rank[sp.rank].emplace_back(sp.stream, sp.op, sp.start_ps, sp.end_ps);
  for (int32_t r = 0; r < 32; ++r)
    EXPECT_EQ(by_rank[r], by_rank[fast.plan.plan.mirror_of[static_cast<size_t>(r)]]) << r;
}

// The same on the flow network, with a pipeline and an oversubscribed fabric: the
// mirrored replicas' DP traffic still contends, and one replica stands for all exactly.
TEST(Executor, SymmetryShortcutMatchesSimulatingEveryRankOnTheFlowNetwork) {
  const Scenario s = scenario_from_text(
      "cluster: {preset: dgx-h100, nodes: 4, scale_out: {topology: fat-tree, nics_per_leaf: 8, oversubscription: 2}}\n"
      "model: {preset: gpt3-1.3b, layers: 4}\nparallel: {tp: 4, pp: 2, dp: 4, micro_batch: 1}\n"
      "training: {global_batch: 16}\nnetwork_model: flow\n",
      "symmetry-flow");
  RunOptions all;
  all.simulate_all_ranks = true;
  const RunOutcome fast = run_training(s);
  const RunOutcome slow = run_training(s, all);
  EXPECT_LT(fast.exec.simulated_ranks.size(), slow.exec.simulated_ranks.size());
  EXPECT_EQ(fast.exec.makespan, slow.exec.makespan);
  // The mean over ranks is summed over the representatives in one case, over every rank in
  // the other: equal up to the last bits of the sum.
  EXPECT_NEAR(fast.exec.exposed_comm_s, slow.exec.exposed_comm_s, 1e-12 * slow.exec.exposed_comm_s);
  std::map<int32_t, std::vector<std::tuple<uint8_t, uint32_t, int64_t, int64_t>>> by_rank;
  for (const SpanRecord& sp : slow.exec.spans) by_rank[sp.rank].emplace_back(sp.stream, sp.op, sp.start_ps, sp.end_ps);
  for (int32_t r = 0; r < 32; ++r)
    EXPECT_EQ(by_rank[r], by_rank[fast.plan.plan.mirror_of[static_cast<size_t>(r)]]) << r;
}

// Three spines under leaves of eight NICs split a stage's eight pipeline sends 3, 3, 2:
// the replicas whose sends share a spine with two others move slower than the rest, so
// no replica stands for another, and the run simulates every rank (it had folded them
// and come out 0.5 % faster, its DP exposure 2.4 times smaller). Two spines split them
// evenly: folded, and exact.
TEST(Executor, UnevenSpinesKeepEveryReplicaOnTheFlowNetwork) {
  const std::string y =
      "cluster: {preset: dgx-h100, nodes: 4, scale_out: {topology: fat-tree, nics_per_leaf: 8, oversubscription: "
      "OS}}\nmodel: {preset: gpt3-1.3b, layers: 4}\nparallel: {dp: 8, tp: 1, pp: 4, micro_batch: 1}\n"
      "training: {global_batch: 64}\nnetwork_model: flow\n";
  RunOptions all;
  all.simulate_all_ranks = true;
  for (const auto& [os, folded] : {std::pair{"3", false}, {"2", true}}) {
    std::string text = y;
    text.replace(text.find("OS"), 2, os);
    const Scenario s = scenario_from_text(text, std::string("spines-") + os);
    const RunOutcome fast = run_training(s);
    const RunOutcome slow = run_training(s, all);
    EXPECT_EQ(fast.exec.simulated_ranks.size() < slow.exec.simulated_ranks.size(), folded) << os;
    EXPECT_EQ(fast.exec.makespan, slow.exec.makespan) << os;
    EXPECT_NEAR(fast.exec.exposed_comm_s, slow.exec.exposed_comm_s, 1e-12 * slow.exec.exposed_comm_s) << os;
  }
}

TEST(Executor, SameScenarioGivesIdenticalSpans) {
  const Scenario s = scenario_from_text(kLayout, "determinism");
  const RunOutcome a = run_training(s);
  const RunOutcome b = run_training(s);
  ASSERT_EQ(a.exec.spans.size(), b.exec.spans.size());
  for (size_t i = 0; i < a.exec.spans.size(); ++i) {
    EXPECT_EQ(a.exec.spans[i].start_ps, b.exec.spans[i].start_ps);
    EXPECT_EQ(a.exec.spans[i].end_ps, b.exec.spans[i].end_ps);
    EXPECT_EQ(a.exec.spans[i].op, b.exec.spans[i].op);
  }
  EXPECT_EQ(a.metrics, b.metrics);
}

// Every op of every simulated rank runs exactly once, after its dependencies, and
// each stream runs one op at a time.
TEST(Executor, EveryOpRunsOnceAfterItsDependencies) {
  const Scenario s = scenario_from_text(kLayout, "invariants");
  const RunOutcome out = run_training(s);
  const Program& prog = out.plan.plan.programs[0];
  std::map<int32_t, std::vector<int>> seen;
  for (int32_t r : out.exec.simulated_ranks) seen[r].assign(prog.ops.size(), 0);
  std::map<std::pair<int32_t, uint32_t>, std::pair<int64_t, int64_t>> when;
  for (const SpanRecord& sp : out.exec.spans) {
    ++seen[sp.rank][sp.op];
    when[{sp.rank, sp.op}] = {sp.start_ps, sp.end_ps};
    EXPECT_LE(sp.start_ps, sp.end_ps);
  }
  for (auto& [r, counts] : seen)
    for (int c : counts) ASSERT_EQ(c, 1);
  for (int32_t r : out.exec.simulated_ranks)
    for (uint32_t i = 0; i < prog.ops.size(); ++i) {
      const Op& op = prog.ops[i];
      for (uint32_t d = 0; d < op.dep_count; ++d)
        EXPECT_GE(when[std::pair(r, i)].first, when[std::pair(r, prog.deps[op.dep_begin + d])].second);
    }
  std::map<std::pair<int32_t, uint8_t>, int64_t> stream_free;
  std::vector<SpanRecord> sorted = out.exec.spans;
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.start_ps < b.start_ps; });
  for (const SpanRecord& sp : sorted) {
    auto& free_at = stream_free[{sp.rank, sp.stream}];
    EXPECT_GE(sp.start_ps, free_at);
    free_at = sp.end_ps;
  }
}

// DP gradient all-reduces overlap the backward pass: their exposed time is far less
// than their total time.
TEST(Executor, DataParallelGradientsOverlapBackward) {
  const Scenario s = scenario_from_text(kLayout, "overlap");
  const RunOutcome out = run_training(s);
  const Program& prog = out.plan.plan.programs[0];
  double dp_total = 0;
  for (const SpanRecord& sp : out.exec.spans)
    if (sp.rank == 0 && prog.ops[sp.op].kind == OpKind::Collective && prog.ops[sp.op].group == GroupKind::DP)
      dp_total += static_cast<double>(sp.end_ps - sp.start_ps) * 1e-12;
  const double dp_exposed = out.exec.exposed_comm_by_kind[static_cast<size_t>(GroupKind::DP)];
  EXPECT_GT(dp_total, 0);
  EXPECT_LT(dp_exposed, dp_total);
}

}  // namespace
}  // namespace clustersim

namespace clustersim {
namespace {

// One node, no traffic between concurrent collectives: the flow network changes nothing.
TEST(Executor, FlowAndAnalyticAgreeWithoutContention) {
  const Scenario s = scenario_from_text(
      "cluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b, layers: 4}\nparallel: {dp: 8}\ntraining: {global_batch: "
      "16}\n",
      "flow-agree");
  Scenario f = s;
  f.network_model = "flow";
  const RunOutcome a = run_training(s), b = run_training(f);
  EXPECT_NEAR(b.exec.makespan.seconds(), a.exec.makespan.seconds(), 1e-3 * a.exec.makespan.seconds());
  EXPECT_FALSE(b.exec.link_usage.empty());  // link utilization over time is recorded
}

// TP 8 x DP 16 with every node on its own leaf of a 4:1 oversubscribed fat-tree: the
// eight DP rings share each leaf's two up-links. The flow network sees it; the
// analytic one, which costs each collective alone, cannot.
TEST(Executor, FlowNetworkMakesConcurrentGroupsContend) {
  const Scenario s = scenario_from_text(R"(
cluster: {preset: dgx-h100, nodes: 16, scale_out: {nics_per_leaf: 8, oversubscription: 4}}
model: {preset: gpt3-1.3b, layers: 4}
parallel: {tp: 8, dp: 16}
training: {global_batch: 16}
network_model: analytic
)",
                                        "flow-contend");
  Scenario f = s;
  f.network_model = "flow";
  const RunOutcome a = run_training(s), b = run_training(f);
  const double dp_a = a.exec.exposed_comm_by_kind[static_cast<size_t>(GroupKind::DP)];
  const double dp_b = b.exec.exposed_comm_by_kind[static_cast<size_t>(GroupKind::DP)];
  EXPECT_GT(dp_b, 1.5 * dp_a);
  EXPECT_GT(b.exec.makespan, a.exec.makespan);
}

// Pipeline stages over data-parallel replicas on a rail-optimized fabric, flow network:
// the mirrored sends run as solo steps (FlowNetwork) and the iteration is the one the
// shared system gives, to the picosecond, with every metric alike.
TEST(Executor, SoloStepsGiveTheSharedSystemsIteration) {
  Scenario s = scenario_from_text(R"(
cluster: {preset: dgx-h100, nodes: 32, scale_out: {topology: rail-optimized, nics_per_leaf: 8}}
model: {preset: gpt3-1.3b, layers: 8}
parallel: {tp: 8, pp: 4, dp: 8}
training: {global_batch: 64}
)",
                                  "solo");
  s.network_model = "flow";
  RunOptions quiet;
  quiet.record_link_usage = false;
  RunOptions plain = quiet;
  plain.solo_steps = false;
  const RunOutcome a = run_training(s, quiet), b = run_training(s, plain);
  EXPECT_EQ(a.exec.makespan, b.exec.makespan);
  ASSERT_EQ(a.metrics.size(), b.metrics.size());
  for (size_t i = 0; i < a.metrics.size(); ++i) {
    if (a.metrics[i].first == "events") continue;  // the solo steps' flows make no events
    EXPECT_EQ(a.metrics[i].second, b.metrics[i].second) << a.metrics[i].first;
  }
}

// Send/recv: a plan whose rank 0 sends to rank 1, which receives and then computes.
TEST(Executor, SendMeetsRecv) {
  Topology topo(one_dgx());
  Plan p;
  p.world_size = 2;
  p.rank_gpu = {0, 1};
  p.mirror_of = {0, 1};
  p.rank_groups.assign(2, {-1, -1, -1, -1, -1, -1, -1});
  p.add_group(GroupKind::PP, {0, 1});
  for (int r = 0; r < 2; ++r) {
    Program prog;
    const uint8_t st = prog.stream("p2p");
    Op op;
    op.kind = r == 0 ? OpKind::Send : OpKind::Recv;
    op.group = GroupKind::PP;
    op.peer = r == 0 ? 1 : 0;
    op.bytes = 450'000'000;
    op.stream = st;
    op.name = p.intern(r == 0 ? "send" : "recv");
    prog.add(op);
    p.programs.push_back(prog);
    p.rank_program.push_back(static_cast<uint32_t>(r));
  }
  for (bool flow : {false, true}) {
    ExecOptions opt;
    opt.flow = flow;
    const ExecResult r = execute_plan(p, topo, opt);
    // 450 MB over one NVLink hop pair at 370.8 GB/s, plus latencies.
    EXPECT_NEAR(r.makespan.seconds(), 450e6 / 370.8e9, 2e-5) << flow;
    ASSERT_EQ(r.spans.size(), 2u);
    EXPECT_EQ(r.spans[0].end_ps, r.spans[1].end_ps);
  }
}

}  // namespace
}  // namespace clustersim
