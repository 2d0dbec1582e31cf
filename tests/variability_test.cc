// Variability, samples and faults against their closed forms (docs/model.md,
// "Variability" and "Failures and goodput").
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "scenarios/error.h"
#include "plan/moe_routing.h"
#include "sim/faults.h"
#include "sim/run.h"
#include "sim/variability.h"
#include "support/temp_scenario.h"

namespace clustersim {
namespace {

using testing::scenario_from_text;

double metric(const RunOutcome& r, const std::string& key) {
  for (const auto& [k, v] : r.metrics)
    if (k == key) return v;
  ADD_FAILURE() << "no metric " << key;
  return 0;
}

// E[max of n i.i.d. exp(σZ)], Z standard normal: ∫ e^{σz} n φ(z) Φ(z)^{n-1} dz.
double expected_max_lognormal(int n, double sigma) {
  double sum = 0;
  const double h = 1e-3;
  for (double z = -10; z < 10; z += h) {
    const double phi = std::exp(-z * z / 2) / std::sqrt(2 * M_PI);
    const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
    sum += std::exp(sigma * z) * n * phi * std::pow(cdf, n - 1) * h;
  }
  return sum;
}

// A data-parallel step whose compute dwarfs its communication: 32 micro-batches of a
// four-layer GPT-3 1.3B per GPU, then the gradient all-reduce of a small model.
std::string dp_scenario(int gpus, const std::string& variability) {
  return "cluster: {preset: dgx-h100, nodes: " + std::to_string(gpus / 8) +
         "}\n"
         "model: {preset: gpt3-1.3b, layers: 4}\n"
         "parallel: {dp: " +
         std::to_string(gpus) +
         "}\n"
         "training: {global_batch: " +
         std::to_string(gpus * 32) + ", step_overhead: 0s}\n" + variability;
}

// A synchronous step waits for its slowest GPU: with lognormal speeds, the step's mean
// over draws is the nominal compute times E[max of N slowdowns], plus the communication
// left exposed (which the slowdown does not stretch).
TEST(Variability, ExpectedMaximumOfLognormalSpeedsSetsASynchronousStep) {
  const double sigma = 0.05;
  for (int n : {8, 64, 512, 4096}) {
    const RunOutcome nominal = run_training(scenario_from_text(dp_scenario(n, ""), "var-nominal"));
    const double t0 = metric(nominal, "iteration_time_s"), exposed = metric(nominal, "exposed_comm_s");
    RunOutcome run = run_training(scenario_from_text(
        dp_scenario(n, "variability: {gpu_speed: {dist: lognormal, sigma: 0.05}}\n"), "var-draws"));
    EXPECT_EQ(metric(run, "simulated_ranks"), 1) << "symmetry must still hold for a data-parallel step";
    run_samples(run, 200, 2);
    const double predicted = (t0 - exposed) * expected_max_lognormal(n, sigma) + exposed;
    EXPECT_NEAR(metric(run, "iteration_time_s_mean") / predicted, 1.0, 0.02)
        << n << " GPUs: E[max] " << expected_max_lognormal(n, sigma) << ", t0 " << t0 << ", exposed " << exposed;
  }
}

TEST(Variability, ZeroSpreadGivesIdenticalSamples) {
  RunOutcome run = run_training(
      scenario_from_text(dp_scenario(16, "variability: {gpu_speed: {dist: lognormal, sigma: 0}}\n"), "var-zero"));
  run_samples(run, 8, 2);
  const double t = metric(run, "iteration_time_s");
  EXPECT_EQ(metric(run, "iteration_time_s_p5"), t);
  EXPECT_EQ(metric(run, "iteration_time_s_p95"), t);
  for (const SampleValue& v : run.samples) {
    if (v.key == "iteration_time_s") {
      EXPECT_EQ(v.value, t) << "sample " << v.sample;
    }
  }
}

TEST(Variability, SamplesAreTheSameWhateverTheThreads) {
  const Scenario s = scenario_from_text(
      dp_scenario(16, "variability: {gpu_speed: {dist: normal, sigma: 0.04}, kernel_jitter: 0.03}\n"), "var-jobs");
  RunOutcome one = run_training(s), two = run_training(s);
  run_samples(one, 9, 1);
  run_samples(two, 9, 2);
  ASSERT_EQ(one.samples.size(), two.samples.size());
  for (size_t i = 0; i < one.samples.size(); ++i) EXPECT_EQ(one.samples[i].value, two.samples[i].value) << i;
  EXPECT_LT(metric(one, "iteration_time_s_p5"), metric(one, "iteration_time_s_p95"));
}

// A named straggler stretches the step's compute by its slowdown.
TEST(Variability, NamedStragglerSetsTheStep) {
  const RunOutcome nominal = run_training(scenario_from_text(dp_scenario(16, ""), "var-nominal2"));
  const double t0 = metric(nominal, "iteration_time_s"), exposed = metric(nominal, "exposed_comm_s");
  for (const std::string& who : {std::string("gpu: 13"), std::string("node: 1")}) {
    const RunOutcome slow = run_training(scenario_from_text(
        dp_scenario(16, "variability: {stragglers: [{" + who + ", slowdown: 1.3}]}\n"), "var-straggler"));
    EXPECT_NEAR(metric(slow, "iteration_time_s") / ((t0 - exposed) * 1.3 + exposed), 1.0, 0.01) << who;
    EXPECT_DOUBLE_EQ(metric(slow, "slowest_gpu_slowdown"), 1.3);
  }
}

// A simulated rank at the slowest of the ranks it stands for is exact where they meet at
// every collective (data and tensor parallel), an upper bound across pipeline stages of
// different replicas.
TEST(Variability, SymmetricDrawIsExactForDataAndTensorParallelAndBoundsPipelines) {
  const std::string var = "variability: {gpu_speed: {dist: lognormal, sigma: 0.08}}\nseed: 7\n";
  RunOptions all;
  all.simulate_all_ranks = true;
  const Scenario dp_tp = scenario_from_text(
      "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
      "parallel: {tp: 4, dp: 4}\ntraining: {global_batch: 32}\n" + var, "var-dptp");
  const RunOutcome a = run_training(dp_tp), b = run_training(dp_tp, all);
  EXPECT_LT(metric(a, "simulated_ranks"), metric(b, "simulated_ranks"));
  EXPECT_NEAR(metric(a, "iteration_time_s") / metric(b, "iteration_time_s"), 1.0, 1e-9);
  const Scenario pp_dp = scenario_from_text(
      "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 8}\n"
      "parallel: {tp: 2, pp: 4, dp: 2}\ntraining: {global_batch: 32}\n" + var, "var-ppdp");
  const RunOutcome c = run_training(pp_dp), d = run_training(pp_dp, all);
  EXPECT_GE(metric(c, "iteration_time_s"), metric(d, "iteration_time_s") * (1 - 1e-9));
  EXPECT_LT(metric(c, "iteration_time_s") / metric(d, "iteration_time_s"), 1.10);
}

TEST(Variability, SlowLinkStretchesTheCollectivesThatCrossIt) {
  const std::string base =
      "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
      "parallel: {dp: 16}\ntraining: {global_batch: 16, step_overhead: 0s}\n";
  const RunOutcome nominal = run_training(scenario_from_text(base, "var-link0"));
  const Topology topo(nominal.scenario.cluster);
  std::string name;
  for (const Link& l : topo.links())
    if (l.cls == LinkClass::Network) {
      name = topo.vertex(l.src).name + "<->" + topo.vertex(l.dst).name;
      break;
    }
  ASSERT_FALSE(name.empty());
  ASSERT_EQ(find_links(topo, name).size(), 2u);
  const RunOutcome slow = run_training(scenario_from_text(
      base + "variability: {stragglers: [{link: \"" + name + "\", slowdown: 8}]}\n", "var-link1"));
  EXPECT_GT(metric(slow, "exposed_comm_s"), metric(nominal, "exposed_comm_s") * 1.5);
  EXPECT_THROW(run_training(scenario_from_text(
                   base + "variability: {stragglers: [{link: \"node0/nic0->nowhere\", slowdown: 2}]}\n", "var-link2")),
               InputError);
}

TEST(Variability, BadInputIsRefusedWhereItIsWritten) {
  const std::string base = "cluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b}\n";
  for (const std::string& bad : {
           std::string("variability: {gpu_speed: {dist: gamma, sigma: 0.1}}\n"),
           std::string("variability: {gpu_speed: {dist: lognormal}}\n"),
           std::string("variability: {stragglers: [{gpu: 8, slowdown: 2}]}\n"),
           std::string("variability: {stragglers: [{gpu: 1}]}\n"),
           std::string("variability: {stragglers: [{gpu: 1, node: 0, slowdown: 2}]}\n"),
           std::string("variability: {kernel_jitter: -0.1}\n"),
           std::string("faults: {gpu_mtbf: 50000h}\n"),
           std::string("faults: {checkpoint_bandwidth: 10GB/s}\n"),
           std::string("faults: {gpu_mtbf: 50000, checkpoint_bandwidth: 10GB/s}\n"),
       }) {
    try {
      scenario_from_text(base + bad, "var-bad");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("s.yaml:"), std::string::npos) << e.what();
    }
  }
}

// ---- MoE routing skew ----------------------------------------------------------------

MoeConfig moe(int64_t experts, const std::string& dist) {
  MoeConfig m;
  m.experts = experts;
  m.top_k = 2;
  m.expert_ffn_hidden = 1024;
  m.routing.dist = dist;
  m.routing.seed = 11;
  return m;
}

// Zipf: the hottest expert takes 1 / H(E, α) of the tokens; with one expert per rank
// the hot rank's load is E / H(E, α).
TEST(MoeRouting, ZipfHotRankTakesTheHarmonicShare) {
  for (double alpha : {0.5, 1.0, 1.5}) {
    MoeConfig m = moe(8, "zipf");
    m.routing.alpha = alpha;
    double h = 0;
    for (int k = 1; k <= 8; ++k) h += std::pow(k, -alpha);
    EXPECT_NEAR(moe_hot_rank_load(m, 10'000'000, 8, 3, 0), 8 / h, 8 / h * 0.003) << alpha;
  }
}

TEST(MoeRouting, HistogramAndCapacity) {
  MoeConfig m = moe(4, "histogram");
  m.routing.histogram = {4, 1, 1, 2};
  // Two ranks: experts {0, 1} carry 5/8 of the tokens, 1.25 times an even half.
  EXPECT_NEAR(moe_hot_rank_load(m, 10'000'000, 2, 0, 0), 1.25, 0.002);
  // Capped at 1.1 x an even share per expert, the rest dropped: expert 0 keeps 1.1/4.
  m.routing.dropless = false;
  m.capacity_factor = 1.1;
  EXPECT_NEAR(moe_hot_rank_load(m, 10'000'000, 2, 0, 0), (1.1 / 4 + 1.0 / 8) * 2, 0.002);
}

// Uniform routing is not even: multinomial counts leave the hot rank above its share. The
// counts sum to n, so they are Y_e − Ȳ for independent Y_e ~ N(n/8, n/8) (covariance
// n·(diag p − p pᵀ)), whose largest is E[max of 8 standard normals] · √(n/8) above the mean:
// the sum-constrained excess, √(1/(1 − 1/8)) times what independent counts of the multinomial's
// variance would give. Under EP 1 the one rank takes all n, exactly.
TEST(MoeRouting, UniformRoutingHasTheMultinomialExcess) {
  const MoeConfig m = moe(8, "uniform");
  const int64_t n = 65536;
  double sum = 0;
  const int draws = 4000;
  for (int i = 0; i < draws; ++i) sum += moe_hot_rank_load(m, n, 8, i % 64, i / 64);
  const double excess = sum / draws - 1;
  const double sd = std::sqrt(1.0 / (static_cast<double>(n) / 8));  // √(n/8) over the mean n/8
  EXPECT_NEAR(excess / (1.4236 * sd), 1.0, 0.03);                   // E[max of 8 standard normals] = 1.4236
  EXPECT_EQ(moe_hot_rank_load(moe(8, "even"), n, 8, 0, 0), 1.0);
  for (const char* dist : {"uniform", "zipf"})
    for (int layer = 0; layer < 4; ++layer) EXPECT_NEAR(moe_hot_rank_load(moe(8, dist), n, 1, layer, 0), 1.0, 1e-12);
}

TEST(MoeRouting, TheHotRankSetsTheLayer) {
  auto text = [](const std::string& routing) {
    return "cluster: {preset: dgx-h100}\nmodel: {preset: mixtral-8x7b, layers: 2" + routing +
           "}\nparallel: {dp: 8, ep: 8, zero_stage: 1}\ntraining: {global_batch: 8}\n";
  };
  const RunOutcome even = run_training(scenario_from_text(text(""), "moe-even"));
  const RunOutcome zipf = run_training(scenario_from_text(text(", moe: {routing: {dist: zipf, alpha: 1.0}}"), "moe-zipf"));
  EXPECT_GT(metric(zipf, "iteration_time_s"), metric(even, "iteration_time_s") * 1.3);
  EXPECT_NEAR(metric(zipf, "moe_hot_rank_load"), 8 / 2.717857, 0.05);
  // The expert GEMMs take the hot rank's tokens: ~2.9 x the 8,192 of an even split.
  const Plan& plan = zipf.plan.plan;
  int checked = 0;
  for (const Op& op : plan.programs[0].ops)
    if (plan.names[op.name] == "expert-up") {
      EXPECT_GT(op.m, 2 * 8192);
      ++checked;
    } else if (plan.names[op.name] == "moe-permute") {
      // The permutation moves the rank's own 4,096 tokens' top-2 rows, whatever the skew.
      EXPECT_EQ(op.bytes_read, 4096LL * 2 * 4096 * 2);
    }
  EXPECT_GT(checked, 0);
  for (const std::string& bad : {std::string(", moe: {routing: {dist: histogram, histogram: [1, 2]}}"),
                                 std::string(", moe: {routing: {histogram: [1, 2, 3, 4, 5, 6, 7, 8]}}")}) {
    EXPECT_THROW(scenario_from_text(text(bad), "moe-bad"), InputError) << bad;
  }
  EXPECT_THROW(scenario_from_text("cluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b, moe: {routing: {dist: zipf}}}\n",
                                  "moe-dense"),
               InputError);
}

// ---- faults --------------------------------------------------------------------------

FaultParams params(double mtbf, double restart, double checkpoint) {
  FaultParams p;
  p.mtbf_s = mtbf;
  p.restart_s = restart;
  p.checkpoint_s = checkpoint;
  p.gpus = 8;
  p.nodes = 1;
  p.links = 1;
  p.gpus_per_node = 8;
  p.node_share = 1;
  return p;
}

// Young (1974): with δ ≪ M, goodput is highest at τ = √(2δM).
TEST(Faults, GoodputPeaksAtYoungsInterval) {
  for (auto [m, r, d] : {std::tuple{10 * 3600.0, 600.0, 60.0}, {3 * 3600.0, 300.0, 20.0}, {24 * 3600.0, 900.0, 120.0},
                         {3600.0, 120.0, 5.0}}) {
    const FaultParams p = params(m, r, d);
    // The maximum on a fine grid of intervals, not the search's answer.
    double best = 0, best_g = 0;
    for (double tau = 1; tau < 20 * std::sqrt(2 * d * m); tau *= 1.001) {
      const double g = expected_goodput(p, tau);
      if (g > best_g) {
        best_g = g;
        best = tau;
      }
    }
    EXPECT_NEAR(best / std::sqrt(2 * d * m), 1.0, 0.05) << "M " << m << " δ " << d;
    EXPECT_NEAR(optimal_interval(p) / best, 1.0, 0.002);
    EXPECT_NEAR(young_interval(p), std::sqrt(2 * d * m), 1e-9);
  }
}

// The seeded timeline, over many failures, averages to Daly's expected goodput.
TEST(Faults, SimulatedTimelineAveragesToTheExpectedGoodput) {
  const FaultParams p = params(5 * 3600.0, 600.0, 40.0);
  const double tau = optimal_interval(p);
  const FaultTimeline t = simulate_faults(p, tau, 20000 * p.mtbf_s, 42, false);
  EXPECT_GT(t.failures, 19000);
  EXPECT_NEAR(t.goodput() / expected_goodput(p, tau), 1.0, 0.005);
  EXPECT_TRUE(t.events.empty());
}

TEST(Faults, TimelineAccountsForEverySecond) {
  FaultParams p = params(4 * 3600.0, 600.0, 30.0);
  p.trace_s = {5000.0};
  const double day = 86400;
  const FaultTimeline t = simulate_faults(p, 1800, day, 3);
  EXPECT_NEAR(t.useful_s + t.checkpoint_s + t.restart_s + t.lost_s, day, 1e-6);
  int failures = 0;
  bool trace_seen = false;
  for (size_t i = 0; i < t.events.size(); ++i) {
    if (i) {
      EXPECT_LE(t.events[i - 1].start_s, t.events[i].start_s);
    }
    EXPECT_LE(t.events[i].start_s, t.events[i].end_s);
    EXPECT_LE(t.events[i].end_s, day + 1e-9);
    failures += t.events[i].kind == "failure";
    trace_seen |= t.events[i].kind == "failure" && t.events[i].start_s == 5000.0 && t.events[i].component == "trace";
  }
  EXPECT_EQ(failures, t.failures);
  EXPECT_TRUE(trace_seen);
}

TEST(Faults, RunningOutOfSparesCostsRepairs) {
  FaultParams p = params(2 * 3600.0, 600.0, 30.0);
  p.repair_s = 8 * 3600.0;
  const double unlimited = expected_goodput(p, 1800);
  p.hot_spares = 0;
  const double none = expected_goodput(p, 1800);
  p.hot_spares = 8;
  const double eight = expected_goodput(p, 1800);
  EXPECT_LT(none, eight);
  EXPECT_LT(eight, unlimited + 1e-12);
  EXPECT_NEAR(effective_restart(p), 600 + 0.05113 * 8 * 3600, 5);  // a = 4 nodes away; P(Poisson(4) >= 8)
  p.hot_spares = 0;
  const FaultTimeline waits = simulate_faults(p, 1800, 1000 * p.mtbf_s, 5, false);
  p.hot_spares = -1;
  const FaultTimeline free = simulate_faults(p, 1800, 1000 * p.mtbf_s, 5, false);
  EXPECT_LT(waits.goodput(), free.goodput());
}

// A training scenario with faults: reports goodput and a checkpoint interval of whole
// iterations; its checkpoint is the weights and Adam's state.
TEST(Faults, ScenarioReportsGoodputOverItsDuration) {
  const RunOutcome r = run_training(scenario_from_text(
      "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 4}\nparallel: {dp: 16}\n"
      "training: {duration: 24h}\n"
      "faults: {gpu_mtbf: 5000h, restart: 10min, checkpoint_bandwidth: 1GB/s, checkpoint_interval: auto}\n",
      "faults-run"));
  const double g = metric(r, "goodput"), iter = metric(r, "iteration_time_s");
  EXPECT_GT(g, 0.5);
  EXPECT_LT(g, 1.0);
  const double k = metric(r, "checkpoint_interval_s") / iter;
  EXPECT_NEAR(k, std::round(k), 1e-6);
  EXPECT_NEAR(metric(r, "system_mtbf_s"), 5000 * 3600.0 / 16, 1e-3);
  EXPECT_DOUBLE_EQ(metric(r, "checkpoint_bytes"), 14.0 * static_cast<double>(r.scenario.model.total_params()));
  // A failure trace alone: the system's MTBF is the trace's mean gap, not 0.
  const RunOutcome traced = run_training(scenario_from_text(
      "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 4}\nparallel: {dp: 16}\n"
      "training: {duration: 24h}\n"
      "faults: {failures: [1h, 2h, 3h], restart: 10min, checkpoint_bandwidth: 1GB/s}\n",
      "faults-trace"));
  EXPECT_NEAR(metric(traced, "system_mtbf_s"), 8 * 3600.0, 1e-6);
  EXPECT_NEAR(metric(r, "checkpoint_write_s"), metric(r, "checkpoint_bytes") / 1e9, 1e-9);
  ASSERT_TRUE(r.goodput.has_value());
  EXPECT_FALSE(r.goodput->timeline.events.empty());
}

// The hours lost split as Daly's renewal splits a segment's expected time (the work of
// failed attempts, the restarts after them, the checkpoints): over 2,000 MTBFs the seeded
// timeline loses the same to each, and the parts and the goodput add up to the duration.
TEST(Faults, LostTimeSplitsAsTheTimelineLosesIt) {
  const std::string base =
      "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 4}\nparallel: {dp: 16}\n"
      "faults: {gpu_mtbf: 16h, restart: 20min, checkpoint_bandwidth: 1GB/s}\n";
  const RunOutcome r = run_training(scenario_from_text(base + "training: {duration: 2000h}\n", "faults-split"));
  const double d = 2000 * 3600.0;
  const double restart = metric(r, "lost_restart_s"), rework = metric(r, "lost_rework_s");
  const double ckpt = metric(r, "lost_checkpoint_s"), g = metric(r, "goodput");
  EXPECT_NEAR(restart + rework + ckpt + g * d, d, 1e-6 * d);
  ASSERT_TRUE(r.goodput.has_value());
  const FaultTimeline& t = r.goodput->timeline;
  EXPECT_GT(t.failures, 1500);
  EXPECT_NEAR(restart / t.restart_s, 1.0, 0.06);
  EXPECT_NEAR(rework / t.lost_s, 1.0, 0.06);
  EXPECT_NEAR(ckpt / t.checkpoint_s, 1.0, 0.03);
  // A day's run that never reaches its 48 h interval writes no checkpoint: failures a
  // thousand hours apart cost it about 1 %, not the steady state's checkpoint share.
  const RunOutcome day = run_training(scenario_from_text(
      "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 4}\nparallel: {dp: 16}\n"
      "training: {duration: 24h}\nfaults: {gpu_mtbf: 16000h, restart: 10min, checkpoint_bandwidth: 1MB/s, "
      "checkpoint_interval: 48h}\n",
      "faults-short"));
  EXPECT_GT(metric(day, "goodput"), 0.98);
  EXPECT_EQ(metric(day, "lost_checkpoint_s"), 0);
  // Failures far faster than a restart: G underflows to 0 and the whole duration is restarts,
  // not NaN (e^{L/M} overflows) or nothing at all.
  const RunOutcome never = run_training(scenario_from_text(
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\ntraining: {duration: 2h}\n"
      "faults: {gpu_mtbf: 1s, restart: 10min, checkpoint_bandwidth: 1GB/s, checkpoint_interval: 1min}\n",
      "faults-never"));
  EXPECT_EQ(metric(never, "goodput"), 0);
  EXPECT_NEAR(metric(never, "lost_restart_s") + metric(never, "lost_rework_s") + metric(never, "lost_checkpoint_s"),
              7200, 1e-6);
  // A duration under one iteration does no work: refused where it is written.
  EXPECT_THROW(run_training(scenario_from_text(base + "training: {duration: 1ms}\n", "faults-tiny")), InputError);
}

}  // namespace
}  // namespace clustersim
