#include "sim/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "scenarios/error.h"
#include "sim/run.h"
#include "support/temp_scenario.h"

namespace clustersim {
namespace {

using testing::scenario_from_text;

// Searches with the analytic refinement and no progress lines: the top k simulated.
SearchResult quiet_search(const Scenario& s, int top_k) {
  SearchOptions o;
  o.top_k = top_k;
  o.refine = "analytic";
  o.progress = false;
  return search_layouts(s, o);
}

// The Must-show: on GPT-3 175B / 1,024 A100 the search returns a layout at least as fast
// as Megatron's TP 8 × PP 8 (the scenario's own layout, always simulated as the
// baseline), and says why.
TEST(Search, Gpt3On1024A100BeatsMegatronsLayout) {
  const Scenario s =
      load_scenario(std::string(CLUSTERSIM_SOURCE_DIR) + "/scenarios/examples/training/gpt3-175b-1024xa100.yaml");
  const SearchResult r = quiet_search(s, 2);
  ASSERT_GE(r.best, 0);
  ASSERT_GE(r.baseline, 0) << r.baseline_reason;
  const SearchCandidate& best = r.top[static_cast<size_t>(r.best)];
  const SearchCandidate& base = r.top[static_cast<size_t>(r.baseline)];
  EXPECT_EQ(base.layout.tp, 8);
  EXPECT_EQ(base.layout.pp, 8);
  EXPECT_LE(best.simulated_s, base.simulated_s);
  EXPECT_GT(r.enumerated, 1000);
  EXPECT_GT(r.over_memory, 0) << "some layouts of a 175B model must not fit on 80 GB";
  for (const SearchCandidate& c : r.top) {
    EXPECT_TRUE(c.simulated);
    EXPECT_LE(c.peak_memory_bytes, s.cluster.node.gpu.hbm_bytes);
    EXPECT_EQ(c.layout.dp * c.layout.tp * c.layout.pp * c.layout.cp, 1024);
    EXPECT_EQ(c.layout.global_batch, 1536);
  }
  const std::string table = search_table(r);
  EXPECT_NE(table.find("why, against the scenario's layout"), std::string::npos) << table;
  EXPECT_NE(table.find("pipeline bubble"), std::string::npos);
  EXPECT_NE(search_json(r).find("\"baseline\": {\"dp\": 16, \"tp\": 8, \"pp\": 8"), std::string::npos);
  // The table ends its answer with the --set pairs that run the winner.
  EXPECT_NE(table.find("run it: --set parallel.dp=" + std::to_string(best.layout.dp) + " --set parallel.tp=" +
                       std::to_string(best.layout.tp) + " --set parallel.pp=" + std::to_string(best.layout.pp)),
            std::string::npos)
      << table;
}

// The estimate that ranks layouts follows the op-by-op simulation: over a spread of
// layouts of one model its error is small and the order is kept.
TEST(Search, EstimateTracksTheSimulation) {
  const Scenario s = scenario_from_text(
      "name: t\ncluster: {preset: dgx-h100, nodes: 4}\nmodel: {preset: megatron-7.5b}\n"
      "training: {global_batch: 256}\n",
      "search-estimate");
  LayoutEstimator est(s);
  std::vector<double> e, sim;
  for (const auto& [tp, pp, mb, v, zero, sp] :
       std::vector<std::tuple<int, int, int, int, int, bool>>{{1, 1, 1, 1, 1, false},
                                                              {2, 1, 2, 1, 1, true},
                                                              {4, 1, 4, 1, 0, true},
                                                              {8, 1, 2, 1, 0, false},
                                                              {2, 2, 1, 1, 1, true},
                                                              {4, 2, 2, 2, 0, true},
                                                              {2, 4, 1, 1, 0, false},
                                                              {4, 4, 1, 2, 1, true},
                                                              {8, 2, 4, 1, 0, true},
                                                              {1, 4, 2, 4, 1, false},
                                                              {2, 8, 1, 1, 2, false},
                                                              {8, 4, 1, 4, 0, true},
                                                              {1, 2, 1, 1, 3, false}}) {
    TrainingLayout l;
    l.tp = tp;
    l.pp = pp;
    l.dp = 32 / (tp * pp);
    l.micro_batch = mb;
    l.global_batch = 256;
    l.schedule = v > 1 ? "interleaved-1f1b" : "1f1b";
    l.virtual_stages = v;
    l.zero_stage = zero;
    l.sequence_parallel = sp;
    const Scenario c = with_layout(s, l);
    l = check_training_layout(c);
    const LayoutEstimate le = est.estimate(l);
    e.push_back(le.total_s);
    sim.push_back(run_training(c).exec.makespan.seconds());
    std::printf("%-60s estimate %.4f sim %.4f  %+.1f%%\n", describe_layout(l).c_str(), e.back(), sim.back(),
                100 * (e.back() - sim.back()) / sim.back());
  }
  std::vector<double> err;
  for (size_t i = 0; i < e.size(); ++i) err.push_back(std::fabs(e[i] - sim[i]) / sim[i]);
  std::sort(err.begin(), err.end());
  EXPECT_LT(err[err.size() / 2], 0.02) << "median |error|";
  EXPECT_LT(err.back(), 0.05) << "worst |error|";
  // Spearman rank correlation.
  auto ranks = [](const std::vector<double>& x) {
    std::vector<size_t> idx(x.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
    std::vector<double> r(x.size());
    for (size_t i = 0; i < idx.size(); ++i) r[idx[i]] = static_cast<double>(i);
    return r;
  };
  const auto re = ranks(e), rs = ranks(sim);
  double d2 = 0;
  for (size_t i = 0; i < re.size(); ++i) d2 += (re[i] - rs[i]) * (re[i] - rs[i]);
  const double n = static_cast<double>(re.size());
  EXPECT_GT(1 - 6 * d2 / (n * (n * n - 1)), 0.9);
}

// A multi-token prediction module is a layer, logits and loss more on the last stage, not a
// ninth layer of the estimate's probe; the end stages' own sizes are the layout's.
TEST(Search, EstimatePricesMultiTokenPredictionOnTheLastStage) {
  const Scenario s = scenario_from_text(
      "name: t\ncluster: {preset: dgx-h100, nodes: 2}\n"
      "model: {preset: deepseek-v3, layers: 10, moe: {experts: 16}, mtp_layers: 1}\n"
      "parallel: {tp: 2, pp: 2, dp: 4, ep: 4, sequence_parallel: true, zero_stage: 1, first_stage_layers: 6, "
      "last_stage_layers: 4}\ntraining: {global_batch: 32, rope_fusion: false}\n",
      "search-mtp");
  LayoutEstimator est(s);
  const TrainingLayout l = check_training_layout(s);
  const double estimate = est.estimate(l).total_s;
  const double sim = run_training(s).exec.makespan.seconds();
  EXPECT_NEAR(estimate / sim, 1.0, 0.06) << estimate << " against " << sim;
  // Without the module the step is shorter, and the estimate follows.
  Scenario none = s;
  none.model.mtp_layers = 0;
  LayoutEstimator est0(none);
  const double estimate0 = est0.estimate(check_training_layout(none)).total_s;
  const double sim0 = run_training(none).exec.makespan.seconds();
  std::printf("with the module: estimate %.4f sim %.4f; without: estimate %.4f sim %.4f\n", estimate, sim, estimate0,
              sim0);
  EXPECT_LT(sim0, sim);
  EXPECT_NEAR(estimate0 / sim0, 1.0, 0.06) << estimate0 << " against " << sim0;
}

// The gradients' NaN check (a norm and a host wait per bucket) costs the estimate what its
// ops cost the simulation, buckets formed as the planner forms them: with small buckets each
// layer is a bucket of its own, and its norm is short, so a norm priced as timed between
// events, or a bucket count of parameters / bucket_size, would show.
TEST(Search, EstimatePricesTheGradNanCheckAsTheSimulationDoes) {
  auto scenario = [](const char* check) {
    return scenario_from_text(std::string("name: t\ncluster: {preset: dgx-h100, nodes: 1}\n"
                                          "model: {preset: megatron-1.7b}\n"
                                          "parallel: {dp: 8, zero_stage: 1, bucket_size: 500000}\n"
                                          "training: {global_batch: 8, grad_nan_check: ") +
                                  check + "}\n",
                              std::string("search-nan-") + check);
  };
  const Scenario on = scenario("true"), off = scenario("false");
  LayoutEstimator est_on(on), est_off(off);
  const double est = est_on.estimate(check_training_layout(on)).optimizer_s -
                     est_off.estimate(check_training_layout(off)).optimizer_s;
  // The simulation's checks: each op with the launch gap before it.
  const RunOutcome r = run_training(on);
  ComputeProfile compute;
  NetworkProfile network;
  apply_calibration(on, compute, network);
  const double gap = compute.launch_overhead_s;
  double sim = 0;
  int ops = 0;
  for (const SpanRecord& sp : r.exec.spans) {
    const Op& op = r.plan.plan.programs[r.plan.plan.rank_program[static_cast<size_t>(sp.rank)]].ops[sp.op];
    const std::string& name = r.plan.plan.names[op.name];
    if (sp.rank != 0 || name.rfind("grad-nan-", 0) != 0) continue;
    sim += static_cast<double>(sp.end_ps - sp.start_ps) * 1e-12 + gap;
    ++ops;
  }
  EXPECT_EQ(ops, 50) << "24 layers and the embedding, a bucket each: a norm and a wait";
  EXPECT_NEAR(est / sim, 1.0, 0.02) << "estimate " << est << " s, simulation " << sim << " s";
}

// The end stages' own sizes are the scenario's pipeline's: a candidate of another depth
// splits its layers evenly, the scenario's own keeps them.
TEST(Search, EndStageSizesStayWithTheScenariosPipeline) {
  const Scenario s = scenario_from_text(
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b, layers: 30}\n"
      "parallel: {pp: 4, dp: 2, first_stage_layers: 3, last_stage_layers: 3}\ntraining: {global_batch: 8}\n",
      "ends");
  TrainingLayout own = check_training_layout(s);
  EXPECT_EQ(stage_layers(own, 30, 0).second, 3);
  TrainingLayout other = own;
  other.pp = 2;
  other.dp = 4;
  const Scenario c = with_layout(s, other);
  EXPECT_EQ(c.parallel.first_stage_layers, -1);
  EXPECT_EQ(stage_layers(check_training_layout(c), 30, 0).second, 15);
  EXPECT_EQ(with_layout(s, own).parallel.first_stage_layers, 3);
}

TEST(Search, RefusesWhatItCannotSearch) {
  SearchOptions o;
  o.progress = false;
  EXPECT_THROW(search_layouts(scenario_from_text("name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: "
                                                 "gpt3-1.3b}\n",
                                                 "search-nobatch"),
                              o),
               InputError);
  EXPECT_THROW(search_layouts(scenario_from_text("name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: "
                                                 "llama3-8b}\ninference: {requests: 10}\n",
                                                 "search-inference"),
                              o),
               InputError);
}

// The same check refused at other numbers is one class of refusal.
TEST(Search, RefusalsAreCountedByClass) {
  EXPECT_EQ(refusal_class("parallel.pp = 3 does not divide model.layers = 32"),
            refusal_class("parallel.pp = 5 does not divide model.layers = 32"));
  EXPECT_EQ(refusal_class("needs 1,024.5 GiB at tp 8"), "needs # GiB at tp #");
  EXPECT_NE(refusal_class("tp 2 needs sequence_parallel"), refusal_class("tp 2 needs a mixture-of-experts model"));
}

// When the checks refuse every layout, the answer says why: their most frequent refusal.
TEST(Search, NoLayoutFitsSaysWhatTheChecksRefused) {
  const SearchResult r = quiet_search(
      scenario_from_text("name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
                         "parallel: {moe_dispatcher: allgather}\ntraining: {global_batch: 8}\n",
                         "search-none"),
      2);
  EXPECT_LT(r.best, 0);
  EXPECT_GT(r.invalid, 0);
  EXPECT_EQ(r.invalid_reason_count, r.invalid);
  EXPECT_NE(r.invalid_reason.find("needs a mixture-of-experts model"), std::string::npos) << r.invalid_reason;
  EXPECT_NE(search_table(r).find("no layout fits; the checks' most frequent refusal"), std::string::npos);
  EXPECT_NE(search_json(r).find("\"invalid_reason\": \"a token dispatcher needs"), std::string::npos);
}

// A scenario whose own layout does not fit still gets an answer, and says why its layout
// is not among the candidates.
TEST(Search, BaselineThatDoesNotFitIsExplained) {
  const Scenario s = scenario_from_text(
      "name: t\ncluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: megatron-18.4b}\nparallel: {tp: 1, pp: 1}\n"
      "training: {global_batch: 64}\n",
      "search-baseline");
  const SearchResult r = quiet_search(s, 2);
  EXPECT_EQ(r.baseline, -1);
  EXPECT_FALSE(r.baseline_reason.empty());
  ASSERT_GE(r.best, 0);
  EXPECT_NE(search_table(r).find("the scenario's own layout is not a candidate"), std::string::npos);
}

// Llama 3 70B at seq 8192 on 64 H100 from a layout that cannot fit (TP 1, no ZeRO): a
// one-layer cost probe of a layout never has to fit by itself (its micro-batch's logits
// alone can exceed the GPU), and the baseline's memory is the planner's, as `run` says.
TEST(Search, FindsLayoutsForLlama3_70bAt8kOn64H100) {
  const Scenario s = scenario_from_text(
      "name: t\ncluster: {preset: dgx-h100, nodes: 8}\nmodel: {preset: llama3-70b, seq_len: 8192}\n"
      "parallel: {tp: 1, dp: 64}\ntraining: {global_batch: 512}\n",
      "search-70b");
  const SearchResult r = quiet_search(s, 2);
  ASSERT_GE(r.best, 0);
  EXPECT_EQ(r.baseline, -1);
  EXPECT_NE(r.baseline_reason.find("does not fit in memory"), std::string::npos);
  ASSERT_GE(r.top.size(), 2u);
  EXPECT_LE(r.top[0].simulated_s, r.top[1].simulated_s);
  for (const SearchCandidate& c : r.top) EXPECT_LE(c.peak_memory_bytes, s.cluster.node.gpu.hbm_bytes);
}

// A mixture of experts is searched with its experts split over TP and whole on every rank
// (expert_tp 1, EP carved out of TP x DP x CP, as DeepSeek-V3's recipes run it): the
// scenario's own whole-expert layout is its baseline as it is, not the split-expert layout
// of the same degrees, and the layouts say which they are.
TEST(Search, MixtureOfExpertsWithWholeExpertsOnEveryRank) {
  const Scenario s = scenario_from_text(
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\n"
      "model: {preset: deepseek-v3, layers: 4, mtp_layers: 0, seq_len: 1024, moe: {experts: 16}}\n"
      "parallel: {tp: 2, dp: 4, ep: 4, expert_tp: 1, sequence_parallel: true, zero_stage: 1}\n"
      "training: {global_batch: 8}\n",
      "search-etp");
  const SearchResult r = quiet_search(s, 2);
  ASSERT_GE(r.baseline, 0) << r.baseline_reason;
  const TrainingLayout& own = r.top[static_cast<size_t>(r.baseline)].layout;
  EXPECT_EQ(own.tp, 2);
  EXPECT_EQ(own.ep, 4);
  EXPECT_EQ(own.expert_tp(), 1);
  EXPECT_NE(search_table(r).find("ep 4 etp 1"), std::string::npos);
  EXPECT_NE(search_json(r).find("\"expert_tp\": 1"), std::string::npos);
  // The same degrees with the experts split over TP are another layout, simulated apart.
  TrainingLayout split = own;
  split.etp = 2;
  const Scenario c = with_layout(s, split);
  EXPECT_EQ(c.parallel.expert_tp, 0);  // the default: the experts' TP is parallel.tp
  EXPECT_EQ(with_layout(s, own).parallel.expert_tp, 1);
}

// A scenario's ZeRO 3 / FSDP keys shape its ZeRO 3 candidates; the ZeRO 0-2 candidates
// are searched without them instead of being refused.
TEST(Search, Zero3KeysShapeOnlyZero3Layouts) {
  const Scenario s = scenario_from_text(
      "name: t\ncluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
      "parallel: {dp: 16, zero_stage: 3, zero3_param_gather: step, fsdp_reduce_dtype: bf16}\n"
      "training: {global_batch: 64}\n",
      "search-z3");
  const SearchResult r = quiet_search(s, 4);
  ASSERT_GE(r.best, 0);
  EXPECT_GE(r.baseline, 0) << r.baseline_reason;
  bool other_stage = false;
  for (const SearchCandidate& c : r.top) other_stage |= c.layout.zero_stage < 3;
  EXPECT_TRUE(other_stage);
}

// FP8 weights (parallel.fp8_param_gather) need a sharded optimizer: the ZeRO 0 candidates
// are searched with 16-bit weights instead of being refused.
TEST(Search, Fp8ParamGatherShapesOnlyShardedLayouts) {
  const Scenario s = scenario_from_text(
      "name: t\ncluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 4, dtype: fp8}\n"
      "parallel: {dp: 16, zero_stage: 1, fp8_param_gather: true}\ntraining: {global_batch: 64}\n",
      "search-fp8p");
  const SearchResult r = quiet_search(s, 4);
  ASSERT_GE(r.best, 0);
  EXPECT_GE(r.baseline, 0) << r.baseline_reason;
  TrainingLayout l = r.top[static_cast<size_t>(r.baseline)].layout;
  EXPECT_TRUE(with_layout(s, l).parallel.fp8_param_gather);
  l.zero_stage = 0;
  const Scenario z0 = with_layout(s, l);
  EXPECT_FALSE(z0.parallel.fp8_param_gather);
  EXPECT_NO_THROW(build_training_plan(z0));
}

// A scenario's micro-batch group is its own layout's: the baseline keeps it, and the
// layouts search builds (1F1B, other pp) take the default instead of being refused.
TEST(Search, MicrobatchGroupShapesOnlyTheScenariosLayout) {
  const Scenario s = scenario_from_text(
      "name: t\ncluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 8}\n"
      "parallel: {pp: 2, dp: 8, schedule: interleaved-1f1b, virtual_stages: 2, microbatch_group: 4}\n"
      "training: {global_batch: 64}\n",
      "search-group");
  const SearchResult r = quiet_search(s, 4);
  ASSERT_GE(r.best, 0);
  ASSERT_GE(r.baseline, 0) << r.baseline_reason;
  EXPECT_EQ(r.top[static_cast<size_t>(r.baseline)].layout.microbatch_group, 4);
  EXPECT_NE(describe_layout(r.top[static_cast<size_t>(r.baseline)].layout).find("interleaved-1f1b v2 N4"),
            std::string::npos);
  bool other_schedule = false;
  for (const SearchCandidate& c : r.top) other_schedule |= c.layout.schedule != "interleaved-1f1b";
  EXPECT_TRUE(other_schedule);
}

}  // namespace
}  // namespace clustersim
