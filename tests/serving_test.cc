// The serving engine against its invariants: conservation under KV pressure, Little's law,
// batching and routing, length and arrival distributions, traces and prefix caching.
#include "sim/serving.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <tuple>
#include <vector>

#include "cost_models/power_cap.h"
#include "scenarios/error.h"
#include "sim/executor.h"
#include "sim/run.h"
#include "support/serving_helpers.h"
#include "support/temp_scenario.h"
#include "topology/topology.h"

namespace clustersim {
namespace {

using testing::scenario_from_text;

// Every request finishes exactly once, after it arrived and after its first token; the
// tokens served are the tokens asked for; the KV cache never exceeds its capacity even
// when it runs out and requests are preempted.
// The run's seed is the arrivals' unless they name their own: a serving run changes with it.
TEST(Serving, TheRunsSeedSeedsTheArrivals) {
  const std::string body =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b}\n"
      "inference: {requests: 50, arrivals: {rate_per_s: 10";
  EXPECT_EQ(scenario_from_text("seed: 9\n" + body + "}}\n", "seed-a").serving.arrival_seed, 9u);
  EXPECT_EQ(scenario_from_text("seed: 9\n" + body + ", seed: 3}}\n", "seed-b").serving.arrival_seed, 3u);
  const ServingResult a = run_serving(scenario_from_text("seed: 1\n" + body + "}}\n", "seed-c"));
  const ServingResult b = run_serving(scenario_from_text("seed: 2\n" + body + "}}\n", "seed-d"));
  EXPECT_NE(a.metrics, b.metrics);
}

TEST(Serving, ConservationUnderKvPressure) {
  // Llama-3 8B on a 40 GB A100: long requests at a high rate overflow the KV cache.
  const ServingResult r = serve(
      "  scheduler: vllm\n  requests: 600\n  arrivals: {process: poisson, rate_per_s: 50, seed: 5}\n"
      "  prompt_tokens: {dist: uniform, min: 1024, max: 3072}\n  output_tokens: {dist: uniform, min: 512, max: 2048}\n",
      "llama3-8b", 1, "a100-sxm-40gb");
  ASSERT_EQ(r.requests.size(), 600u);
  EXPECT_GT(r.preemptions, 0) << "the scenario should exhaust the KV cache";
  EXPECT_LE(r.kv_peak_utilization, 1.0);
  EXPECT_GT(r.kv_peak_utilization, 0.9);
  int64_t preempted = 0;
  for (const ServedRequest& q : r.requests) {
    EXPECT_GE(q.first_token, q.arrival);
    EXPECT_GE(q.finish, q.first_token);
    EXPECT_LE(q.finish, r.makespan_s);
    preempted += q.preemptions;
  }
  EXPECT_EQ(preempted, r.preemptions);
}

// Swap preemption: the KV goes to host memory and comes back instead of being recomputed;
// when the swap space is full, preemption falls back to recompute.
TEST(Serving, SwapPreemption) {
  const std::string pressure =
      "  scheduler: vllm\n  requests: 600\n  arrivals: {process: poisson, rate_per_s: 50, seed: 5}\n"
      "  prompt_tokens: {dist: uniform, min: 1024, max: 3072}\n  output_tokens: {dist: uniform, min: 512, max: 2048}\n";
  const ServingResult swap =
      serve(pressure + "  preemption: swap\n  swap_space: 64GiB\n", "llama3-8b", 1, "a100-sxm-40gb");
  const ServingResult tiny =
      serve(pressure + "  preemption: swap\n  swap_space: 1MiB\n", "llama3-8b", 1, "a100-sxm-40gb");
  const ServingResult recompute = serve(pressure, "llama3-8b", 1, "a100-sxm-40gb");
  EXPECT_GT(swap.swaps, 0);
  EXPECT_EQ(swap.swaps, swap.preemptions);
  EXPECT_EQ(tiny.swaps, 0);
  EXPECT_GT(tiny.preemptions, 0);
  EXPECT_EQ(metric(tiny, "makespan_s"), metric(recompute, "makespan_s"));  // nothing fitted: plain recompute
  for (const ServingResult* r : {&swap, &tiny}) {
    double asked = 0;
    for (const ServedRequest& q : r->requests) {
      EXPECT_GE(q.finish, q.first_token);
      asked += static_cast<double>(q.output);
    }
    EXPECT_NEAR(metric(*r, "throughput_tokens_per_s") * r->makespan_s, asked, 1e-6 * asked);
    EXPECT_LE(r->kv_peak_utilization, 1.0);
  }
}

// A swapped-out request comes back and takes its step in the same iteration under every
// scheduler that runs its decodes before admitting: at the end of a closed loop the last
// request, swapped out, is the only work (it had come back with none and the engine stalled).
TEST(Serving, SwappedRequestsFinishUnderEveryScheduler) {
  for (const char* sch : {"vllm-v1", "sarathi", "orca", "vllm"}) {
    const ServingResult r = run_serving(testing::scenario_from_text(
        std::string("name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1, gpu_spec: {hbm: 21GB}}\n"
                    "model: {preset: llama3-8b}\nparallel: {tp: 1}\ninference:\n  scheduler: ") +
            sch +
            "\n  requests: 150\n  arrivals: {process: closed, concurrency: 16}\n"
            "  prompt_tokens: {dist: fixed, value: 1024}\n  output_tokens: {dist: fixed, value: 512}\n"
            "  preemption: swap\n",
        "serving"));
    ASSERT_EQ(r.requests.size(), 150u) << sch;
    EXPECT_GT(r.swaps, 0) << sch;
    double out = 0;
    for (const ServedRequest& q : r.requests) out += static_cast<double>(q.output);
    EXPECT_NEAR(metric(r, "throughput_tokens_per_s") * r.makespan_s, out, 1e-6 * out) << sch;
  }
}

// A closed loop's clients all send at the start: their requests are in the queue before
// the first iteration is scheduled, so they are prefilled in one iteration together.
TEST(Serving, RequestsArrivingTogetherAreScheduledTogether) {
  for (const char* sch : {"static", "orca", "vllm", "sarathi", "vllm-v1", "trtllm"}) {
    const ServingResult r = serve(std::string("  scheduler: ") + sch +
                                  "\n  requests: 4\n  request_overhead: 0ms\n"
                                  "  arrivals: {process: closed, concurrency: 4}\n"
                                  "  prompt_tokens: {dist: fixed, value: 512}\n"
                                  "  output_tokens: {dist: fixed, value: 16}\n");
    ASSERT_EQ(r.requests.size(), 4u) << sch;
    for (const ServedRequest& q : r.requests) {
      EXPECT_EQ(q.first_token, r.requests.front().first_token) << sch;
      EXPECT_EQ(q.finish, r.requests.front().finish) << sch;
    }
  }
}

// Requests of one instant are routed before any replica admits them: least-kv counts the
// blocks of the ones it has routed (they went, all eight, to the first replica), and each
// router spreads eight clients over eight replicas.
TEST(Serving, RequestsOfOneInstantSpreadOverTheReplicas) {
  for (const char* router : {"least-kv", "least-outstanding", "round-robin"}) {
    const ServingResult r = run_serving(testing::scenario_from_text(
        std::string("name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b}\n"
                    "inference:\n  replicas: 8\n  router: ") +
            router +
            "\n  requests: 8\n  request_overhead: 0ms\n  arrivals: {process: closed, concurrency: 8}\n"
            "  prompt_tokens: {dist: fixed, value: 512}\n  output_tokens: {dist: fixed, value: 8}\n",
        "serving"));
    std::vector<int> per(8, 0);
    for (const ServedRequest& q : r.requests) ++per.at(static_cast<size_t>(q.replica));
    EXPECT_EQ(per, std::vector<int>(8, 1)) << router;
  }
}

TEST(Serving, TokensOutEqualTokensRequested) {
  for (const char* sch : {"static", "orca", "vllm", "sarathi"}) {
    const ServingResult r = serve(load(sch, 12, 500));
    double asked = 0;
    for (const ServedRequest& q : r.requests) asked += static_cast<double>(q.output);
    const double span = r.makespan_s - r.requests.front().arrival;
    EXPECT_NEAR(metric(r, "throughput_tokens_per_s") * span, asked, 1e-6 * asked) << sch;
    EXPECT_EQ(metric(r, "requests"), 500) << sch;
  }
}

// Little's law, L = λW: the engine's time-averaged count of requests in the system
// (integrated event by event) equals arrival rate × mean time in system.
TEST(Serving, LittlesLaw) {
  for (double rate : {4.0, 20.0}) {
    const ServingResult r = serve(load("vllm", rate, 3000));
    const double span = r.makespan_s;  // first arrival is at t = 0
    const double lambda = metric(r, "requests") / span;
    EXPECT_NEAR(metric(r, "mean_requests_in_system"), lambda * metric(r, "e2e_s_mean"),
                1e-6 * metric(r, "mean_requests_in_system"));
  }
}

TEST(Serving, ThroughputRisesWithLoadAndSaturates) {
  std::vector<double> tput;
  for (double rate : {2.0, 8.0, 32.0, 128.0, 512.0})
    tput.push_back(metric(serve(load("vllm", rate)), "throughput_tokens_per_s"));
  for (size_t i = 1; i < tput.size(); ++i) EXPECT_GE(tput[i], tput[i - 1] * 0.98) << i;
  EXPECT_GT(tput[1], 3.0 * tput[0]);   // light load: throughput follows the offered load
  EXPECT_LT(tput[4], 1.15 * tput[3]);  // overload: it saturates
  const ServingResult over = serve(load("vllm", 512.0));
  EXPECT_GT(metric(over, "ttft_s_p50"), 10 * metric(serve(load("vllm", 2.0)), "ttft_s_p50"));  // queues build
}

TEST(Serving, ContinuousBatchingBeatsStaticAtHighLoad) {
  const double cont = metric(serve(load("vllm", 64)), "throughput_tokens_per_s");
  const double orca = metric(serve(load("orca", 64)), "throughput_tokens_per_s");
  const double stat = metric(serve(load("static", 64)), "throughput_tokens_per_s");
  EXPECT_GT(cont, 1.3 * stat);
  EXPECT_GT(orca, 1.3 * stat);
}

TEST(Serving, ChunkedPrefillLowersTailTpot) {
  const std::string common = "  max_batch_tokens: 2048\n";
  const ServingResult v = serve(common + load("vllm", 16));
  const ServingResult s = serve(common + load("sarathi", 16));
  EXPECT_LT(metric(s, "tpot_s_p99"), 0.8 * metric(v, "tpot_s_p99"));
}

TEST(Serving, RoutersSpreadLoad) {
  for (const char* router : {"round-robin", "least-outstanding", "least-kv"}) {
    const ServingResult r = serve(std::string("  replicas: 4\n  router: ") + router + "\n" + load("vllm", 40, 800));
    std::map<int, int> per;
    for (const ServedRequest& q : r.requests) ++per[q.replica];
    ASSERT_EQ(per.size(), 4u) << router;
    for (auto [rep, n] : per) EXPECT_GT(n, 100) << router << " replica " << rep;
  }
}

TEST(Serving, JsonCarriesTheContractFields) {
  const Scenario sc = scenario_from_text(serving_yaml(load("vllm", 8, 200)), "serving");
  const std::string j = serving_summary_json(sc, run_serving(sc));
  for (const char* field :
       {"\"throughput_tokens_per_s\": ", "\"requests_per_s\": ", "\"preemptions\": ", "\"kv_cache_peak_utilization\": ",
        "\"ttft_s_p99\": ", "\"ttft_s\": {\"p50\": ", "\"tpot_s\": {\"p50\": ", "\"e2e_s\": {\"p50\": "})
    EXPECT_NE(j.find(field), std::string::npos) << field << " in " << j;
  EXPECT_EQ(j.back(), '}');
  EXPECT_EQ(std::count(j.begin(), j.end(), '{'), std::count(j.begin(), j.end(), '}'));
}

TEST(Serving, DeterministicAndSeeded) {
  const Scenario a = scenario_from_text(serving_yaml(load("sarathi", 20, 400)), "serving");
  EXPECT_EQ(serving_summary_json(a, run_serving(a)), serving_summary_json(a, run_serving(a)));
  std::string other = load("sarathi", 20, 400);
  other.replace(other.find("seed: 3"), 7, "seed: 4");
  const Scenario b = scenario_from_text(serving_yaml(other), "serving");
  EXPECT_NE(serving_summary_json(a, run_serving(a)), serving_summary_json(b, run_serving(b)));
}

TEST(Serving, LengthAndArrivalDistributions) {
  const ServingResult r = serve(
      "  requests: 20000\n  arrivals: {process: gamma, cv: 3, rate_per_s: 1000, seed: 9}\n"
      "  prompt_tokens: {dist: lognormal, mean: 512, sigma: 0.5, max: 1000000}\n"
      "  output_tokens: {dist: zipf, min: 1, max: 64, alpha: 1.1}\n");
  double mean = 0, ones = 0;
  std::vector<double> gaps;
  for (size_t i = 0; i < r.requests.size(); ++i) {
    mean += static_cast<double>(r.requests[i].prompt) / 20000;
    ones += r.requests[i].output == 1;
    if (i) gaps.push_back(r.requests[i].arrival - r.requests[i - 1].arrival);
  }
  EXPECT_NEAR(mean, 512, 512 * 0.02);
  // Zipf(1.1) on 1..64: P(1) = 1 / H(64, 1.1).
  double h = 0;
  for (int k = 1; k <= 64; ++k) h += std::pow(k, -1.1);
  EXPECT_NEAR(ones / 20000, 1 / h, 0.01);
  double gm = 0, gv = 0;
  for (double g : gaps) gm += g / static_cast<double>(gaps.size());
  for (double g : gaps) gv += (g - gm) * (g - gm) / static_cast<double>(gaps.size());
  EXPECT_NEAR(gm, 1e-3, 1e-4);
  EXPECT_NEAR(std::sqrt(gv) / gm, 3.0, 0.3);  // the burstiness asked for
}

TEST(Serving, TraceArrivals) {
  const std::string dir = testing::temp_dir("serving-trace");
  std::ofstream(dir + "/trace.csv") << "arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,200,20\n0.5,300,1\n";
  const Scenario s = scenario_from_text(serving_yaml("  arrivals: {trace: " + dir + "/trace.csv}\n"), "serving");
  const ServingResult r = run_serving(s);
  ASSERT_EQ(r.requests.size(), 3u);
  EXPECT_EQ(r.requests[1].prompt, 200);
  EXPECT_EQ(r.requests[2].output, 1);
  EXPECT_DOUBLE_EQ(r.requests[2].arrival, 0.5);

  std::ofstream(dir + "/bad.csv") << "0,100,10\n0.2,oops,3\n";
  const Scenario b = scenario_from_text(serving_yaml("  arrivals: {trace: " + dir + "/bad.csv}\n"), "serving");
  try {
    run_serving(b);
    FAIL() << "a malformed trace row must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.csv:2:5"), std::string::npos) << e.what();  // at 'oops'
  }
}

// A trace row is three or four comma-separated fields, each checked where it stands: only a
// first line that starts with a letter is a header; a number that is not whole, a count past
// 16777216 (the length keys' ceiling), a context past model.seq_len, tabs for commas, an empty
// fourth field, or a prompt shorter than its shared prefix are refused at their line and column.
TEST(Serving, TraceRowsAreCheckedFieldByField) {
  const std::string dir = testing::temp_dir("serving-trace-fields");
  auto refused = [&](const std::string& rows, const std::string& where, const std::string& extra = "") {
    std::ofstream(dir + "/t.csv") << rows;
    try {
      run_serving(scenario_from_text(serving_yaml("  arrivals: {trace: " + dir + "/t.csv}\n" + extra), "serving"));
      return std::string("accepted");
    } catch (const InputError& e) {
      const std::string w = e.what();
      return w.find("t.csv:" + where + ": error: ") != std::string::npos ? std::string("ok") : w;
    }
  };
  EXPECT_EQ(refused("0,10.5,10\n1,10,10\n", "1:3"), "ok");  // a first row is data
  EXPECT_EQ(refused("\xEF\xBB\xBF"
                    "0,x,10\n",
                    "1:3"),
            "ok");                                                                 // after a byte order mark
  EXPECT_EQ(refused("0,5000000000000000000,5000000000000000000\n", "1:3"), "ok");  // past 2^24 tokens
  EXPECT_EQ(refused("0,9223372036854775807,10\n", "1:3"), "ok");
  EXPECT_EQ(refused("0,20000,10\n", "1:3"), "ok");  // past the model's seq_len
  EXPECT_EQ(refused("0,100,10,\n", "1:10"), "ok");  // an empty prefix group
  EXPECT_EQ(refused("0\t100\t10\n", "1:1"), "ok");  // tabs are not commas
  EXPECT_EQ(refused("0,100,10\n0x1,100,10\n", "2:1"), "ok");
  EXPECT_EQ(refused("0,100,10\nnan,100,10\n", "2:1"), "ok");
  EXPECT_EQ(refused("nan,100,10\n1,100,10\n", "1:1"), "ok");  // not a header: strtod's nan
  EXPECT_EQ(refused("Inf,100,10\n", "1:1"), "ok");
  EXPECT_EQ(refused("0,100,10,0\n", "1:3", "  shared_prefix: {tokens: 2048, groups: 1}\n"), "ok");
  // Spaces around fields, a header, CRLF line ends and comments are fine.
  std::ofstream(dir + "/ok.csv") << "arrival_s, prompt_tokens, output_tokens\r\n# note\r\n 0 , 100 , 10 \r\n";
  EXPECT_EQ(run_serving(scenario_from_text(serving_yaml("  arrivals: {trace: " + dir + "/ok.csv}\n"), "serving"))
                .requests.size(),
            1u);
}

// Prefix caching: with room for every prefix, each replica computes each prefix once and
// every later request with it hits, so the hit rate is exactly 1 − groups · replicas /
// requests; the reused tokens are the whole blocks of the prefix; the tokens served are
// the tokens asked for; first tokens come much sooner.
TEST(Serving, PrefixCachingReusesSharedPrefixes) {
  const std::string base =
      "  scheduler: vllm\n  replicas: 4\n  requests: 2000\n  arrivals: {process: poisson, rate_per_s: 40, seed: 2}\n"
      "  prompt_tokens: {dist: uniform, min: 2500, max: 3500}\n  output_tokens: {dist: fixed, value: 64}\n"
      "  shared_prefix: {tokens: 2050, groups: 10}\n";
  const ServingResult off = serve(base);
  const ServingResult on = serve(base + "  prefix_caching: true\n");
  ASSERT_EQ(on.requests.size(), 2000u);
  EXPECT_EQ(metric(off, "prefix_cache_hit_rate"), 0);
  EXPECT_DOUBLE_EQ(metric(on, "prefix_cache_hit_rate"), 1 - 10.0 * 4 / 2000);
  EXPECT_EQ(metric(on, "prefix_tokens_reused"), (2000 - 40) * 2048.0);  // 128 whole blocks of 16
  for (const ServedRequest& q : on.requests) {
    EXPECT_GE(q.first_token, q.arrival);
    EXPECT_GE(q.finish, q.first_token);
  }
  EXPECT_LT(metric(on, "ttft_s_p50"), 0.5 * metric(off, "ttft_s_p50"));
  EXPECT_LE(metric(on, "kv_cache_peak_utilization"), metric(off, "kv_cache_peak_utilization"));
}

// A request counts its prefix lookup once it is admitted, however many times it was looked
// at while waiting: under a queue the tokens reused and the tokens prefilled still add up to
// the prompts (a waiting request had counted a hit at each admission attempt).
TEST(Serving, PrefixReuseCountsAdmittedRequestsOnly) {
  const std::string one =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: llama3-8b}\n"
      "inference:\n  scheduler: vllm\n  requests: 100\n"
      "  arrivals: {process: poisson, rate_per_s: 50, seed: 3}\n"
      "  prompt_tokens: {dist: fixed, value: 3000}\n  output_tokens: {dist: fixed, value: 10}\n"
      "  shared_prefix: {tokens: 2048, groups: 4}\n  prefix_caching: true\n";
  const ServingResult r = run_serving(scenario_from_text(one, "prefix-queue"), true);
  int64_t prefilled = 0;
  for (const IterationRow& it : r.iteration_log) prefilled += it.prefill_tokens;
  EXPECT_EQ(static_cast<double>(prefilled) + metric(r, "prefix_tokens_reused"), 100 * 3000.0);
  EXPECT_EQ(metric(r, "prefix_tokens_reused"), 96 * 2048.0);  // every request but each group's first
  EXPECT_DOUBLE_EQ(metric(r, "prefix_cache_hit_rate"), 0.96);
}

// Under KV pressure idle prefixes are evicted (least recently used first): fewer hits than
// with room for all, every request still served once, the cache never over capacity.
TEST(Serving, PrefixCacheEvictsUnderPressure) {
  const ServingResult r = serve(
      "  scheduler: sarathi\n  requests: 1500\n  arrivals: {process: poisson, rate_per_s: 30, seed: 6}\n"
      "  prompt_tokens: {dist: uniform, min: 4200, max: 6000}\n  output_tokens: {dist: uniform, min: 200, max: 800}\n"
      "  shared_prefix: {tokens: 4096, groups: 400}\n  prefix_caching: true\n",
      "llama3-8b", 1, "a100-sxm-40gb");
  ASSERT_EQ(r.requests.size(), 1500u);
  EXPECT_GT(metric(r, "prefix_cache_hit_rate"), 0.05);
  EXPECT_LT(metric(r, "prefix_cache_hit_rate"), 1 - 400.0 / 1500 - 0.02);
  EXPECT_LE(r.kv_peak_utilization, 1.0);
  for (const ServedRequest& q : r.requests) EXPECT_GT(q.finish, 0);
}

TEST(Serving, TracePrefixGroups) {
  const std::string dir = testing::temp_dir("serving-trace-prefix");
  std::ofstream(dir + "/t.csv") << "0,3000,4,0\n0.5,3000,4,0\n0.6,3000,4,-1\n1.0,3000,4,1\n";
  const std::string cfg = "  shared_prefix: {tokens: 2048, groups: 2}\n  prefix_caching: true\n";
  const ServingResult r =
      run_serving(scenario_from_text(serving_yaml("  arrivals: {trace: " + dir + "/t.csv}\n" + cfg), "serving"));
  EXPECT_DOUBLE_EQ(metric(r, "prefix_cache_hit_rate"), 1.0 / 3);  // three with a prefix, the second hits
  EXPECT_EQ(metric(r, "prefix_tokens_reused"), 2048);
  std::ofstream(dir + "/bad.csv") << "0,3000,4,0\n0.5,3000,4,2\n";
  try {
    run_serving(scenario_from_text(serving_yaml("  arrivals: {trace: " + dir + "/bad.csv}\n" + cfg), "serving"));
    FAIL() << "a prefix group outside shared_prefix.groups must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.csv:2:12"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace clustersim
