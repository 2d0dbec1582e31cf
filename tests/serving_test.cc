#include "sim/serving.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <tuple>

#include "cost_models/power_cap.h"
#include "scenarios/error.h"
#include "sim/executor.h"
#include "sim/run.h"
#include "support/temp_scenario.h"
#include "topology/topology.h"

namespace clustersim {
namespace {

using testing::scenario_from_text;

std::string serving_yaml(const std::string& inference, const std::string& model = "llama3-8b", int tp = 1,
                         const std::string& gpu = "h100-sxm") {
  return "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpu: " + gpu + "}\nmodel: {preset: " + model +
         "}\nparallel: {tp: " + std::to_string(tp) + "}\ninference:\n" + inference;
}

double metric(const ServingResult& r, const std::string& name) {
  for (const auto& [k, v] : r.metrics)
    if (k == name) return v;
  ADD_FAILURE() << "no metric " << name;
  return 0;
}

ServingResult serve(const std::string& inference, const std::string& model = "llama3-8b", int tp = 1,
                    const std::string& gpu = "h100-sxm") {
  return run_serving(scenario_from_text(serving_yaml(inference, model, tp, gpu), "serving"));
}

std::string load(const std::string& scheduler, double rate, int64_t requests = 2000) {
  return "  scheduler: " + scheduler + "\n  requests: " + std::to_string(requests) +
         "\n  arrivals: {process: poisson, rate_per_s: " + std::to_string(rate) +
         ", seed: 3}\n  prompt_tokens: {dist: lognormal, mean: 1024, sigma: 0.8, max: 8192}\n"
         "  output_tokens: {dist: lognormal, mean: 256, sigma: 0.8, max: 2048}\n";
}

// Every request finishes exactly once, after it arrived and after its first token; the
// tokens served are the tokens asked for; the KV cache never exceeds its capacity even
// when it runs out and requests are preempted.
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

// TensorRT-LLM's FP8 engines run a prefill's context attention in FP8 (trtllm-bench sets
// use_fp8_context_fmha for FP8 quantization): its FLOPs at the FP8 peak at 0.81 of the BF16
// kernel's efficiency, 2 x 0.81 = 1.62 times the BF16 kernel's rate where the math bounds it.
// auto takes it for the trtllm scheduler with FP8 weights and cache on FP8 tensor cores only.
TEST(Serving, Fp8ContextAttentionAsTensorRtLlmBuildsIt) {
  ServingShape sh;
  sh.model = *find_model_preset("llama3-8b");
  sh.kv_dtype = sh.weight_dtype = DType::FP8;
  IterationBatch b;
  b.tokens = b.emitting = 8192;
  b.prefill = {PrefillChunk{8192, 0}};
  const Op bf16 = iteration_attention_ops(sh, b).at(0);
  sh.fp8_context_attention = true;
  const Op fp8 = iteration_attention_ops(sh, b).at(0);
  EXPECT_EQ(bf16.dtype, sh.model.dtype);
  EXPECT_EQ(fp8.dtype, DType::FP8);
  EXPECT_EQ(fp8.flops, bf16.flops);
  EXPECT_LT(fp8.bytes_read, bf16.bytes_read);  // FP8 queries
  const GpuSpec& h100 = *find_gpu_preset("h100-sxm");
  const ComputeProfile p;
  const double t16 = compute_seconds(bf16, h100, p) - p.kernel_latency_s;
  const double t8 = compute_seconds(fp8, h100, p) - p.kernel_latency_s;
  EXPECT_NEAR(t16 / t8, 2.0 * p.fp8_attention_efficiency, 1e-9);

  // The scenario: one 8,000-token prompt, its TTFT all prefill.
  const std::string one = "  requests: 1\n  prompt_tokens: {dist: fixed, value: 8000}\n"
                          "  output_tokens: {dist: fixed, value: 2}\n  weight_dtype: fp8\n  kv_dtype: fp8\n";
  auto ttft = [&](const std::string& extra, const std::string& gpu = "h100-sxm") {
    return metric(serve(one + extra, "llama3-8b", 1, gpu), "ttft_s_p50");
  };
  const double trt_auto = ttft("  scheduler: trtllm\n");
  EXPECT_LT(trt_auto, 0.97 * ttft("  scheduler: trtllm\n  fp8_context_fmha: off\n"));
  EXPECT_DOUBLE_EQ(ttft("  scheduler: vllm\n"), ttft("  scheduler: vllm\n  fp8_context_fmha: off\n"));
  EXPECT_LT(ttft("  scheduler: vllm\n  fp8_context_fmha: on\n"), 0.97 * ttft("  scheduler: vllm\n"));
  // Refused where TensorRT-LLM cannot run it: no FP8 cache, no FP8 tensor cores.
  EXPECT_THROW(serve("  scheduler: trtllm\n  weight_dtype: fp8\n  fp8_context_fmha: on\n"), InputError);
  EXPECT_THROW(serve("  scheduler: trtllm\n  kv_dtype: fp8\n  fp8_context_fmha: on\n", "llama3-8b", 1, "a100-sxm-80gb"),
               InputError);
}

TEST(Serving, RefusesWhatIsNotModelledAndWhatDoesNotFit) {
  EXPECT_THROW(serve("  disaggregation: {prefill_replicas: 1, decode_replicas: 0}\n"), InputError);
  EXPECT_THROW(serve("  scheduler: static\n  disaggregation: {prefill_replicas: 1, decode_replicas: 1}\n"), InputError);
  EXPECT_THROW(serve("  speculative: {draft_model: no-such-model, lookahead: 4, acceptance_rate: 0.7}\n"), InputError);
  EXPECT_THROW(serve("  speculative: {lookahead: 4, acceptance_rate: 0.7}\n"), InputError);  // no draft model
  EXPECT_THROW(serve("  requests: 10\n", "llama3-405b", 1), InputError);  // 810 GB of weights on one GPU
  EXPECT_THROW(serve("  replicas: 9\n"), InputError);                     // 9 GPUs on an 8-GPU node
  // TurboMind v0.1's decode kernel exists for FP16 models of head dim 128 over an FP16 or INT8
  // cache only.
  EXPECT_THROW(serve("  decode_attention: turbomind-v0.1\n  requests: 10\n"), InputError);  // a BF16 model
  auto turbomind = [](const std::string& model, const std::string& kv) {
    return run_serving(scenario_from_text(
        "name: t\ncluster: {preset: dgx-a100, nodes: 1, gpus_per_node: 1}\nmodel: {layers: 2, hidden: 4096, " + model +
            ", ffn_hidden: 11008, ffn_type: swiglu, vocab: 32000, seq_len: 2048, dtype: fp16}\n"
            "inference: {decode_attention: turbomind-v0.1, requests: 4" + kv + "}\n",
        "serving"));
  };
  EXPECT_THROW(turbomind("heads: 64", ""), InputError);  // head dim 64
  EXPECT_THROW(turbomind("heads: 32", ", kv_dtype: fp8"), InputError);
  EXPECT_EQ(turbomind("heads: 32", ", kv_dtype: int8").requests.size(), 4u);
  EXPECT_EQ(turbomind("heads: 32", "").requests.size(), 4u);
}

// trtllm-bench build picks the engine's limits from the dataset (tensorrt_llm/bench/build/
// tuning.py): requests of the mean length that fit in 0.95 of the memory the FP8 weights leave,
// rounded up. Llama 3.1 70B FP8 on 4 x 79.1 GiB (what CUDA reports): (316.4 - 70.6) x 0.95 GiB
// over 160 KiB a token holds 1.53 M tokens: 5,975 requests of 128 + 128 (capped at 4,096; budget
// 2 x 4,096) and 374 of 2,048 + 2,048 (rounded up to 384; 747 tokens, raised to the 2,048 floor).
TEST(Serving, TrtllmBenchBuildsTheEngineLimitsFromTheDataset) {
  auto limits = [](const std::string& model, int tp, int isl, int osl, const std::string& extra = "") {
    const Scenario s = scenario_from_text(
        "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: " + model + ", seq_len: 32768}\nparallel: {tp: " +
            std::to_string(tp) + "}\ninference: {scheduler: trtllm, engine_build: trtllm-bench, weight_dtype: fp8, "
            "kv_dtype: fp8, requests: 4, prompt_tokens: {dist: fixed, value: " + std::to_string(isl) +
            "}, output_tokens: {dist: fixed, value: " + std::to_string(osl) + "}" + extra + "}\n",
        "bench");
    return std::pair{s.serving.max_batch_size, s.serving.max_batch_tokens};
  };
  EXPECT_EQ(limits("llama3-70b", 4, 128, 128), std::pair(int64_t{4096}, int64_t{8192}));
  EXPECT_EQ(limits("llama3-70b", 4, 2048, 2048), std::pair(int64_t{384}, int64_t{2048}));
  // Llama 3.1 8B on one GPU: 64 KiB a token in (79.1 - 8.0) x 0.95 GiB; 20,000 + 2,000 tokens leave
  // 50 requests (the floor of 64), 2,048 + 128 leave 508 (rounded up to 512), whose prompts need
  // 17 x 508 tokens (rounded up to 9,216).
  EXPECT_EQ(limits("llama3-8b", 1, 20000, 2000), std::pair(int64_t{64}, int64_t{2048}));
  EXPECT_EQ(limits("llama3-8b", 1, 2048, 128), std::pair(int64_t{512}, int64_t{9216}));
  // Both limits given: the build takes them, as trtllm-bench build does.
  EXPECT_EQ(limits("llama3-8b", 1, 2048, 128, ", max_batch_size: 100, max_batch_tokens: 4000"),
            std::pair(int64_t{100}, int64_t{4000}));
  EXPECT_EQ(limits("llama3-8b", 1, 2048, 128, ", max_batch_size: 100"), std::pair(int64_t{100}, int64_t{9216}));
  EXPECT_THROW(scenario_from_text(serving_yaml("  scheduler: vllm-v1\n  engine_build: trtllm-bench\n"), "b"),
               InputError);
  // Weight-only INT4: not a quantization the heuristic tunes, so the build defaults stay.
  const Scenario int4 = scenario_from_text(
      serving_yaml("  scheduler: trtllm\n  engine_build: trtllm-bench\n  weight_dtype: int4\n  requests: 4\n"), "b");
  EXPECT_EQ(int4.serving.max_batch_size, 2048);
  EXPECT_EQ(int4.serving.max_batch_tokens, 8192);
  EXPECT_THROW(scenario_from_text(serving_yaml("  scheduler: vllm\n  chunked_context: true\n"), "b"), InputError);
}

// TensorRT-LLM gives the KV cache a share of the memory free once the engine is loaded
// (kv_cache_free_gpu_mem_fraction); vLLM 90% of the whole GPU less the weights. Llama 3 70B in
// FP8 on one H100 (79.1 GiB) leaves ~10 GiB: 0.9 of it is several times what 0.9 of the GPU less
// the weights is.
TEST(Serving, TrtllmSizesTheKvCacheFromTheMemoryTheEngineLeaves) {
  auto blocks = [](const std::string& inference) {
    return metric(serve(inference + "  requests: 4\n  weight_dtype: fp8\n  kv_dtype: fp8\n  max_batch_size: 64\n"
                                    "  max_batch_tokens: 2048\n", "llama3-70b"),
                  "kv_blocks_per_replica");
  };
  const double trt = blocks("  scheduler: trtllm\n"), vllm = blocks("  scheduler: vllm-v1\n");
  const double half = blocks("  scheduler: trtllm\n  kv_cache_free_fraction: 0.45\n");
  EXPECT_GT(trt, 1.8 * vllm);
  EXPECT_NEAR(half, trt / 2, 1.0);
  EXPECT_THROW(scenario_from_text(serving_yaml("  scheduler: vllm\n  kv_cache_free_fraction: 0.95\n"), "b"),
               InputError);
}

// Weight quantization covers the layers' linears: the embedding table is a lookup and the
// quantizers leave the output layer out (ModelOpt's default configurations disable `*lm_head*`;
// vLLM's ParallelLMHead is no quantized linear), so both keep 16-bit weights. An untied output
// layer then takes the same room from the KV cache in an FP8 engine as in a BF16 one
// (128,256 x 4,096 x 2 bytes, 1.05 GB), and its GEMM streams two bytes a weight.
TEST(Serving, QuantizedEnginesKeepTheEmbeddingAndOutputLayerIn16Bit) {
  auto blocks = [](const std::string& dtype, bool tied) {
    return metric(serve("  scheduler: trtllm\n  requests: 4\n  weight_dtype: " + dtype +
                            "\n  max_batch_size: 64\n  max_batch_tokens: 2048\n",
                        std::string("llama3-8b, tied_embeddings: ") + (tied ? "true" : "false")),
                  "kv_blocks_per_replica");
  };
  const double fp8 = blocks("fp8", true) - blocks("fp8", false);
  const double bf16 = blocks("bf16", true) - blocks("bf16", false);
  EXPECT_GT(fp8, 100);
  EXPECT_NEAR(fp8, bf16, 1.0);

  const ModelConfig& m = *find_model_preset("llama3-8b");
  ServingShape sh;
  sh.model = m;
  sh.weight_dtype = DType::FP8;
  IterationBatch b;
  b.tokens = 32;
  b.emitting = 32;
  b.decode_context = 32 * 100;
  const Plan plan = build_iteration_plan(sh, b, false);
  int logits = 0, fp8_gemms = 0;
  for (const Op& op : plan.programs[0].ops) {
    if (op.kind != OpKind::Gemm) continue;
    if (plan.names[op.name] == "logits") {
      ++logits;
      EXPECT_EQ(op.dtype, DType::BF16);
      EXPECT_EQ(op.bytes_read, (32 + m.vocab) * m.hidden * 2);
    } else {
      fp8_gemms += op.dtype == DType::FP8;
    }
  }
  EXPECT_EQ(logits, 1);
  EXPECT_EQ(fp8_gemms, 4 * m.layers);
}

// The engines' work on every emitting row of the whole vocabulary after the output layer,
// greedy requests, on every TP rank: TensorRT-LLM marks its logits FP32 and its decoder copies
// the row (penalty layer), makes three read-write passes (softmax) and copies and re-reads it
// (top-k): 24 bytes read and 20 written an entry. vLLM V0 casts the 16-bit logits to FP32,
// divides by the temperature, runs softmax and log-softmax (three reads and a write each) and an
// argmax: 34 read, 16 written; vLLM V1 the cast and the argmax: 6 read, 4 written. `none` runs
// nothing, and the logits stay in the model's dtype but for TensorRT-LLM.
TEST(Serving, SamplersPassOverEveryEmittingRowOfTheVocabulary) {
  const ModelConfig& m = *find_model_preset("llama3-8b");
  using Sampler = ServingShape::Sampler;
  struct Case {
    Sampler sampler;
    int ops;
    double read, written;  // bytes an emitting row's entry
  };
  for (const int64_t tp : {1, 4}) {
    for (const Case c : {Case{Sampler::Trtllm, 3, 24, 20}, Case{Sampler::VllmV0, 5, 34, 16},
                         Case{Sampler::VllmV1, 2, 6, 4}, Case{Sampler::None, 0, 0, 0}}) {
      ServingShape sh;
      sh.model = m;
      sh.tp = tp;
      sh.sampler = c.sampler;
      IterationBatch b;
      b.tokens = 48;
      b.emitting = 40;
      b.decode_context = 40 * 100;
      const Plan plan = build_iteration_plan(sh, b, false);
      const double entries = 40.0 * static_cast<double>(m.vocab);
      const double logit_e = c.sampler == Sampler::Trtllm ? 4 : 2;
      double read = 0, written = 0, gathered = 0;
      int ops = 0;
      for (const Op& op : plan.programs[0].ops) {
        const std::string& name = plan.names[op.name];
        if (name == "sampler_to_float") {  // PyTorch's copy with a dtype change: a dynamic-cast loop
          EXPECT_EQ(op.access, MemAccess::DynamicCast);
          EXPECT_EQ(op.m, 40 * m.vocab);
        }
        if (name.starts_with("decoder_") || name.starts_with("sampler_")) {
          ++ops;
          read += static_cast<double>(op.bytes_read);
          written += static_cast<double>(op.bytes_written);
        }
        if (name == "logits") {
          EXPECT_EQ(op.bytes_written, static_cast<int64_t>(40 * (m.vocab / tp) * logit_e)) << "tp " << tp;
        }
        if (name == "logits_gather") gathered = static_cast<double>(op.bytes);
      }
      EXPECT_EQ(ops, c.ops) << "tp " << tp;
      EXPECT_NEAR(read, c.read * entries, 64) << "tp " << tp;
      EXPECT_NEAR(written, c.written * entries, 64) << "tp " << tp;
      if (tp > 1) {
        EXPECT_NEAR(gathered, entries * logit_e, 1);
      }
    }
  }
  // Through the scenario: the scheduler's engine picks the sampler (auto), and a decode step
  // of 64 rows under TensorRT-LLM's is slower than with none by at least its 44 bytes an entry
  // and the FP32 logits' 2 more at the H100's peak stream, and by over twice as much for
  // Llama 3's 128,256 entries as for a 32,000-entry vocabulary.
  auto tpot = [](const std::string& sampler, int64_t vocab) {
    return metric(serve("  scheduler: trtllm\n  sampler: " + sampler + "\n  requests: 64\n  max_batch_size: 64\n"
                        "  max_batch_tokens: 8192\n  arrivals: {process: closed, concurrency: 64}\n"
                        "  prompt_tokens: {dist: fixed, value: 16}\n  output_tokens: {dist: fixed, value: 64}\n",
                        "llama3-8b, vocab: " + std::to_string(vocab)),
                  "tpot_s_p50");
  };
  const double big = tpot("auto", 128256) - tpot("none", 128256);
  const double small = tpot("auto", 32000) - tpot("none", 32000);
  EXPECT_GT(big, 64.0 * 128256 * 46 / 3.35e12);
  EXPECT_GT(big, 2 * small);
  EXPECT_DOUBLE_EQ(tpot("auto", 128256), tpot("trtllm", 128256));
  EXPECT_LT(tpot("vllm-v1", 128256), tpot("vllm-v0", 128256));
  try {
    serve("  sampler: greedy\n");
    ADD_FAILURE() << "an unknown sampler should be refused";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("inference.sampler"), std::string::npos) << what;
    EXPECT_NE(what.find("vllm-v1"), std::string::npos) << what;  // the names it takes
  }
}

// TensorRT-LLM's runtime and decoder keep buffers for every sequence slot the engine was built
// for, most of them a row of the vocabulary (the engine's logits, the sampling and penalty
// workspaces): 5.49 GiB for 4,096 slots of a 32,000-token vocabulary in its own log, 44.97 bytes
// a slot and entry, on every rank. vLLM's profile run holds the logits alone (4 bytes an entry,
// over TP). 1,024 more slots of Llama 3's 128,256 entries take 5.9 GB from TensorRT-LLM's cache
// (0.9 of it, the free fraction) and 0.5 GB from vLLM's.
TEST(Serving, TrtllmSetsAsideDecoderBuffersForEverySequenceSlot) {
  auto blocks = [](const std::string& scheduler, int slots) {
    return metric(serve("  scheduler: " + scheduler + "\n  requests: 4\n  max_batch_tokens: 2048\n  max_batch_size: " +
                        std::to_string(slots) + "\n"),
                  "kv_blocks_per_replica");
  };
  const double trt = blocks("trtllm", 64) - blocks("trtllm", 1088);
  const double vllm = blocks("vllm-v1", 64) - blocks("vllm-v1", 1088);
  EXPECT_GT(vllm, 100);
  EXPECT_NEAR(trt / vllm, 5.49 * 1024 * 1024 * 1024 / (4096.0 * 32000.0) * 0.9 / 4, 0.1);
}

// `run --json` lays one GPU's memory out as the engine does: the parts add up to what CUDA
// reports, the KV cache is its blocks, and TensorRT-LLM's share of the free memory leaves the
// rest (its runtime and a tenth of what was free) reserved. Llama 3 8B in BF16 on an H100:
// 16.1 GB of weights, 32 layers x 8 KV heads x 128 x 2 x 2 bytes = 128 KiB a cached token.
TEST(Serving, ReportsTheGpuMemoryTheEngineLaysOut) {
  const ServingResult r =
      serve("  scheduler: trtllm\n  requests: 4\n  max_batch_size: 256\n  max_batch_tokens: 8192\n");
  const double hbm = find_gpu_preset("h100-sxm")->hbm_bytes;
  const double w = metric(r, "memory_weights_bytes"), a = metric(r, "memory_activations_bytes"),
               b = metric(r, "memory_buffers_bytes"), kv = metric(r, "memory_kv_cache_bytes"),
               rest = metric(r, "memory_reserved_bytes");
  EXPECT_NEAR(w + a + b + kv + rest, hbm, 1.0);
  EXPECT_NEAR(w, 8.03e9 * 2, 0.05e9);
  EXPECT_NEAR(b, 256.0 * 128256 * 5.49 * 1024 * 1024 * 1024 / (4096.0 * 32000.0), 1.0);
  const ModelConfig& m = *find_model_preset("llama3-8b");
  const double per_token = 2.0 * static_cast<double>(m.layers * m.kv_heads * m.head_dim()) * 2;
  EXPECT_NEAR(kv, metric(r, "kv_blocks_per_replica") * 16 * per_token, 1.0);
  EXPECT_NEAR(kv, 0.9 * (kv + rest - 1.0 * 1024 * 1024 * 1024 * 0.75), 16 * per_token);
}

// vLLM's own startup log for Llama 3 8B in BF16 (v0.6, worker.py: "total_gpu_memory (79.14GiB) x
// gpu_memory_utilization (0.90) = 71.22GiB ... model weights take 14.99GiB; non_torch_memory
// takes 0.12GiB; PyTorch activation peak memory takes 1.19GiB; the rest of the memory reserved
// for KV Cache is 54.93GiB"): the model's sizing, 0.9 of the GPU less the weights, the
// activations of 8,192 tokens and 256 rows of logits, lands within 1 % of it.
TEST(Serving, VllmKvCacheMatchesItsStartupLog) {
  const ServingResult r =
      serve("  scheduler: vllm\n  requests: 4\n  max_batch_size: 256\n  max_batch_tokens: 8192\n");
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  EXPECT_NEAR(metric(r, "memory_weights_bytes") / GiB, 14.99, 0.1);
  EXPECT_NEAR(metric(r, "memory_activations_bytes") + metric(r, "memory_buffers_bytes"), (1.19 + 0.12) * GiB,
              0.35 * GiB);
  EXPECT_NEAR(metric(r, "memory_kv_cache_bytes") / GiB, 54.93 - 0.9 * (79.14 - 79.10), 0.55);
}

// A mixture-of-experts layer streams the experts its tokens reach: T tokens choosing 2 of
// Mixtral's 8 reach 8·(1 − (6/8)^T), so a lone decode token reads 2 experts' weights and a batch
// of 512 all 8; its GEMMs do 2·T·top_k·(3·hidden·expert_ffn) FLOPs (the router's aside). The
// model had served it as a dense layer of one expert.
TEST(Serving, MoeIterationReadsTheExpertsItsTokensReach) {
  const ModelConfig& m = *find_model_preset("mixtral-8x7b");
  ServingShape sh;
  sh.model = m;
  auto expert_ops = [&](int64_t tokens) {
    IterationBatch b;
    b.tokens = tokens;
    b.emitting = tokens;
    b.decode_context = tokens * 100;
    const Plan plan = build_iteration_plan(sh, b, false);
    double flops = 0, weight_bytes = 0;
    int dense = 0;
    for (const Op& op : plan.programs[0].ops) {
      const std::string& name = plan.names[op.name];
      dense += name == "mlp_in" || name == "mlp_out";
      if (name != "expert_in" && name != "expert_out") continue;
      flops += op.flops;
      weight_bytes += static_cast<double>(op.bytes_read) - static_cast<double>(tokens * 2 * op.k) * 2;
    }
    EXPECT_EQ(dense, 0);
    return std::pair{flops, weight_bytes};
  };
  const double expert_bytes = 3.0 * static_cast<double>(m.hidden * m.moe.expert_ffn_hidden) * 2;  // BF16
  const double layers = static_cast<double>(m.layers);
  for (int64_t t : {1, 512}) {
    const auto [flops, bytes] = expert_ops(t);
    EXPECT_NEAR(flops, 2.0 * static_cast<double>(t) * 2 * 3 * static_cast<double>(m.hidden * m.moe.expert_ffn_hidden) *
                           layers, 1e-6 * flops);
    const double reached = std::round(8 * (1 - std::pow(0.75, static_cast<double>(t))));
    EXPECT_NEAR(bytes, reached * expert_bytes * layers, 1e-6 * bytes) << t;
  }
  // Expert parallelism is a training layout here: a serving scenario that asks for it is told.
  try {
    (void)run_serving(scenario_from_text("name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: "
                                         "mixtral-8x7b}\nparallel: {tp: 2, ep: 2}\ninference:\n  requests: 4\n",
                                         "serving"));
    ADD_FAILURE() << "ep: 2 was served";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("shard every expert"), std::string::npos) << e.what();
  }
  EXPECT_THROW(serve("  requests: 4\n", "mixtral-8x7b, moe: {top_k: 9}", 2), InputError);
  EXPECT_THROW(serve("  requests: 4\n", "mixtral-8x7b, moe: {expert_ffn_hidden: 14335}", 2), InputError);
}

// With context chunking (trtllm-bench's default) TensorRT-LLM fills the budget the decodes
// leave with prompt chunks; without it a prompt joins whole or waits. Prompts as long as the
// budget then never join beside running decodes, and the requests run one or two at a time.
TEST(Serving, TrtllmChunkedContextFillsTheBudgetBesideTheDecodes) {
  auto throughput = [](bool chunked) {
    return metric(serve(std::string("  scheduler: trtllm\n  max_batch_tokens: 2048\n  requests: 64\n") +
                        "  arrivals: {process: fixed, rate_per_s: 1e6}\n  prompt_tokens: {dist: fixed, value: 2048}\n"
                        "  output_tokens: {dist: fixed, value: 256}\n  chunked_context: " +
                        (chunked ? "true" : "false") + "\n"),
                  "throughput_tokens_per_s");
  };
  EXPECT_GT(throughput(true), 4 * throughput(false));
}

// Speculative decoding: a verify step yields (1 − a^(k+1)) / (1 − a) tokens on average;
// with a good draft TPOT falls, with a useless one (a = 0) the draft is pure overhead.
TEST(Serving, SpeculativeDecoding) {
  const std::string base = load("vllm", 1, 300);
  const auto spec = [&](double a) {
    return serve(
        base + "  speculative: {draft_model: llama3-8b, lookahead: 4, acceptance_rate: " + std::to_string(a) + "}\n",
        "llama3-70b", 8);
  };
  const ServingResult plain = serve(base, "llama3-70b", 8), good = spec(0.8), useless = spec(0.0);
  const double expect = (1 - std::pow(0.8, 5)) / (1 - 0.8);
  EXPECT_NEAR(metric(good, "tokens_per_verify_step"), expect, 0.05 * expect);
  EXPECT_DOUBLE_EQ(metric(useless, "tokens_per_verify_step"), 1.0);
  EXPECT_LT(metric(good, "tpot_s_p50"), 0.75 * metric(plain, "tpot_s_p50"));
  EXPECT_GT(metric(useless, "tpot_s_p50"), 1.2 * metric(plain, "tpot_s_p50"));
  EXPECT_LT(metric(good, "kv_blocks_per_replica"),
            metric(plain, "kv_blocks_per_replica"));  // the draft's weights and KV
}

// Quantization: fp8 weights run fp8 GEMMs and free memory for KV; an fp8 KV cache holds
// twice the tokens of a bf16 one and halves decode attention's reads.
TEST(Serving, QuantizationChangesBytesAndMath) {
  const std::string base = load("vllm", 4, 300);
  const ServingResult bf16 = serve(base, "llama3-70b", 8);
  const ServingResult w8 = serve(base + "  weight_dtype: fp8\n", "llama3-70b", 8);
  const ServingResult kv8 = serve(base + "  kv_dtype: fp8\n", "llama3-70b", 8);
  const ServingResult w4 = serve(base + "  weight_dtype: int4\n", "llama3-70b", 8);
  EXPECT_GT(metric(w8, "kv_blocks_per_replica"), metric(bf16, "kv_blocks_per_replica"));
  EXPECT_NEAR(metric(kv8, "kv_blocks_per_replica") / metric(bf16, "kv_blocks_per_replica"), 2.0, 0.01);
  EXPECT_LT(metric(w8, "tpot_s_p50"), 0.8 * metric(bf16, "tpot_s_p50"));  // decode reads half the weight bytes
  // FP8 GEMMs at FP8's own efficiency (~1.6x BF16), attention and overheads unchanged.
  EXPECT_LT(metric(w8, "ttft_s_p50"), 0.9 * metric(bf16, "ttft_s_p50"));  // prefill runs at the fp8 peak
  // Weight-only int4 reads fewer bytes still; at burst rates that is the whole story. Under
  // the power cap its BF16 math draws twice FP8's energy a FLOP, which can undo it in batches
  // near the ridge, so the bytes are checked with the cap off.
  const auto at_burst = [&](const std::string& extra) {
    Scenario sc = scenario_from_text(serving_yaml(base + extra, "llama3-70b", 8, "h100-sxm"), "serving");
    sc.power_cap = false;
    return run_serving(sc);
  };
  EXPECT_LT(metric(at_burst("  weight_dtype: int4\n"), "tpot_s_p50"),
            metric(at_burst("  weight_dtype: fp8\n"), "tpot_s_p50"));
  EXPECT_GT(metric(w4, "ttft_s_p50"), 0.9 * metric(bf16, "ttft_s_p50"));  // ... but bf16 math in prefill
  EXPECT_THROW(serve("  requests: 10\n", "llama3-70b", 1), InputError);   // 141 GB of bf16 weights on 80 GB
  EXPECT_NO_THROW(serve("  requests: 10\n  weight_dtype: int4\n", "llama3-70b", 1));  // 35 GB in int4
}

// output.sqlite holds one row per request and one per iteration; the rows add up to the
// summary (every output token is emitted by exactly one iteration).
TEST(Serving, SqliteRowsMatchTheSummary) {
  const std::string dir = testing::temp_dir("serving-sqlite");
  const std::string db_path = dir + "/run.sqlite";
  std::filesystem::remove(db_path);
  Scenario s = scenario_from_text(serving_yaml(load("sarathi", 30, 400)), "serving");
  s.output_sqlite = db_path;
  const ServingResult r = run_serving(s, true);
  write_serving_outputs(s, r);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  const auto one = [&](const char* sql) {
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &st, nullptr), SQLITE_OK) << sql;
    EXPECT_EQ(sqlite3_step(st), SQLITE_ROW) << sql;
    const double v = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return v;
  };
  EXPECT_EQ(one("SELECT count(*) FROM requests"), 400);
  EXPECT_EQ(one("SELECT count(*) FROM iterations"), static_cast<double>(r.iterations));
  EXPECT_EQ(one("SELECT kind = 'inference' AND complete = 1 FROM runs"), 1);
  // Output tokens: one per finished prefill plus every decode token.
  const double prefills_done = one("SELECT count(*) FROM requests") + one("SELECT sum(preemptions) FROM requests");
  EXPECT_LE(one("SELECT sum(decode_tokens) FROM iterations") + 400, one("SELECT sum(output_tokens) FROM requests"));
  EXPECT_GE(one("SELECT sum(decode_tokens) FROM iterations") + prefills_done,
            one("SELECT sum(output_tokens) FROM requests"));
  EXPECT_LE(one("SELECT max(kv_blocks_used - kv_blocks) FROM iterations"), 0);
  EXPECT_NEAR(one("SELECT max(kv_blocks_used * 1.0 / kv_blocks) FROM iterations"), r.kv_peak_utilization, 0.05);
  EXPECT_EQ(one("SELECT count(*) FROM requests WHERE first_token_s < arrival_s OR finish_s < first_token_s"), 0);
  sqlite3_close(db);
}

// Disaggregation: prefill and decode pools with the KV cache sent between them. Every
// request still finishes once with all its tokens; decodes no longer wait behind
// prefills (lower tail TPOT than colocated replicas); a KV cache that crosses nodes
// takes longer than one that stays on NVLink.
ServingResult serve_on(int nodes, int tp, const std::string& inference, const std::string& preset = "dgx-h100") {
  return run_serving(scenario_from_text("name: d\ncluster: {preset: " + preset + ", nodes: " + std::to_string(nodes) +
                                            "}\nmodel: {preset: llama3-70b}\nparallel: {tp: " + std::to_string(tp) +
                                            "}\ninference:\n" + inference,
                                        "serving"));
}

TEST(Serving, Disaggregation) {
  const std::string base = load("vllm", 6, 1500);
  // H200s: 70B at tp 2 leaves room for the decode pool's KV caches.
  const ServingResult split =
      serve_on(1, 2, base + "  disaggregation: {prefill_replicas: 2, decode_replicas: 2}\n", "dgx-h200");
  const ServingResult coloc = serve_on(1, 2, base + "  replicas: 4\n", "dgx-h200");
  EXPECT_EQ(metric(split, "preemptions"), 0);
  ASSERT_EQ(split.requests.size(), 1500u);
  double asked = 0;
  for (const ServedRequest& q : split.requests) {
    EXPECT_GE(q.finish, q.first_token);
    EXPECT_GE(q.replica, 2) << "decodes run on the decode pool";
    asked += static_cast<double>(q.output);
  }
  EXPECT_NEAR(metric(split, "throughput_tokens_per_s") * (split.makespan_s - split.requests.front().arrival), asked,
              1e-6 * asked);
  EXPECT_LT(metric(split, "tpot_s_p99"), 0.8 * metric(coloc, "tpot_s_p99"));
  EXPECT_GT(metric(split, "kv_transfer_s_mean"), 0);
  EXPECT_EQ(metric(coloc, "kv_transfer_s_mean"), 0);
  // Two nodes, tp 8: prefill replica on node 0, decode replica on node 1 (NICs).
  const ServingResult cross = serve_on(2, 8, base + "  disaggregation: {prefill_replicas: 1, decode_replicas: 1}\n");
  const ServingResult local = serve_on(1, 4, base + "  disaggregation: {prefill_replicas: 1, decode_replicas: 1}\n");
  const double per_byte_cross = metric(cross, "kv_transfer_s_mean") / metric(cross, "kv_transfer_bytes") * 8;
  const double per_byte_local = metric(local, "kv_transfer_s_mean") / metric(local, "kv_transfer_bytes") * 4;
  EXPECT_GT(per_byte_cross, 4 * per_byte_local);  // 50 GB/s of NIC per GPU against 450 GB/s of NVLink
}

// KV transfers contend like any other flow. Eight TP-1 prefill replicas on node 0 hand
// their KV to eight decode replicas on node 1 through one NIC per node: on the flow
// network concurrent transfers share it (processor sharing at ~60% load: about 2.5x the
// lone transfer), while the analytic network gives each transfer the whole NIC. With a
// NIC per GPU nothing is shared and the two agree.
TEST(Serving, KvTransfersContendOnTheFlowNetwork) {
  auto run = [](const std::string& model, int nics) {
    return run_serving(scenario_from_text(
        "name: t\ncluster: {preset: dgx-h100, nodes: 2, scale_out: {nics_per_node: " + std::to_string(nics) +
            "}}\nmodel: {preset: llama3-8b}\nnetwork_model: " + model +
            "\ninference:\n  scheduler: vllm\n  requests: 1500\n"
            "  arrivals: {process: poisson, rate_per_s: 60, seed: 4}\n"
            "  prompt_tokens: {dist: fixed, value: 4096}\n  output_tokens: {dist: fixed, value: 16}\n"
            "  disaggregation: {prefill_replicas: 8, decode_replicas: 8}\n",
        "serving"));
  };
  const double flow1 = metric(run("flow", 1), "kv_transfer_s_mean");
  const double analytic1 = metric(run("analytic", 1), "kv_transfer_s_mean");
  // 4096 tokens × 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 bytes over one 400 Gb/s NIC.
  const double lone = 4096.0 * 32 * 8 * 128 * 2 * 2 / 50e9;
  EXPECT_GT(analytic1, lone);
  EXPECT_LT(analytic1, 1.3 * lone);
  EXPECT_GT(flow1, 1.5 * analytic1);
  const double flow8 = metric(run("flow", 8), "kv_transfer_s_mean");
  const double analytic8 = metric(run("analytic", 8), "kv_transfer_s_mean");
  EXPECT_NEAR(flow8, analytic8, 0.05 * analytic8);
}

// Disaggregated pools of pipeline-parallel replicas: each stage's GPUs send the KV of their
// layers to the same stage of the decode replica, so the bytes sent are the whole
// prompt's KV, whatever the layout (Llama 3 70B: 80 layers × 8 KV heads × 128 × K, V ×
// 2 bytes per token).
TEST(Serving, DisaggregatedPipelineReplicasSendEveryLayersKv) {
  const std::string inference = load("vllm", 4, 300) + "  disaggregation: {prefill_replicas: 1, decode_replicas: 1}\n";
  double prompts = 0;
  for (const auto& [tp, pp] : {std::pair{8, 1}, std::pair{4, 2}}) {
    const ServingResult r = run_serving(scenario_from_text(
        "name: t\ncluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: llama3-70b}\nparallel: {tp: " +
            std::to_string(tp) + ", pp: " + std::to_string(pp) + "}\nnetwork_model: flow\ninference:\n" + inference,
        "serving"));
    ASSERT_EQ(r.requests.size(), 300u);
    prompts = 0;
    for (const ServedRequest& q : r.requests) {
      EXPECT_EQ(q.replica, 1) << "decodes run on the decode replica";
      prompts += static_cast<double>(q.prompt);
    }
    EXPECT_DOUBLE_EQ(metric(r, "kv_transfer_bytes"), prompts * 80 * 8 * 128 * 2 * 2) << "tp " << tp << " pp " << pp;
  }
}

// Pipeline-parallel replicas run pp virtual engines (pp batches in flight). A balanced
// pipeline serves like pp data-parallel replicas (plus the stage sends) while each GPU
// holds 1/pp of the weights: Llama 3 405B fits on TP 8 × PP 2 H100s, not on TP 8.
TEST(Serving, PipelineParallelReplicas) {
  const auto on = [](int pp, int replicas, const std::string& model) {
    return run_serving(scenario_from_text("name: p\ncluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: " + model +
                                              "}\nparallel: {tp: 8, pp: " + std::to_string(pp) +
                                              "}\ninference:\n  replicas: " + std::to_string(replicas) + "\n" +
                                              load("vllm", 8, 1500),
                                          "serving"));
  };
  const ServingResult pp2 = on(2, 1, "llama3-70b"), dp2 = on(1, 2, "llama3-70b");
  EXPECT_NEAR(metric(pp2, "throughput_tokens_per_s"), metric(dp2, "throughput_tokens_per_s"),
              0.03 * metric(dp2, "throughput_tokens_per_s"));
  EXPECT_GT(metric(pp2, "tpot_s_p50"), metric(dp2, "tpot_s_p50"));  // the stage-to-stage sends
  EXPECT_LT(metric(pp2, "tpot_s_p50"), 1.1 * metric(dp2, "tpot_s_p50"));
  EXPECT_GT(metric(pp2, "kv_blocks_per_replica"), metric(dp2, "kv_blocks_per_replica"));  // per engine: weights halved
  for (const ServedRequest& q : pp2.requests) EXPECT_EQ(q.replica, 0);
  EXPECT_THROW(on(1, 1, "llama3-405b"), InputError);
  EXPECT_NO_THROW(on(2, 1, "llama3-405b"));
}

// output.trace: one process per replica, an event per iteration, a KV counter; the same
// run gives the same bytes.
TEST(Serving, TraceHasAnEventPerIteration) {
  const std::string dir = testing::temp_dir("serving-trace-out");
  Scenario s = scenario_from_text(serving_yaml("  replicas: 2\n" + load("orca", 20, 300)), "serving");
  s.output_trace = dir + "/a.json";
  const ServingResult r = run_serving(s, true);
  write_serving_outputs(s, r);
  std::ifstream in(s.output_trace);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t events = 0, counters = 0;
  for (size_t at = 0; (at = text.find("\"name\":\"iteration\"", at)) != std::string::npos; ++at) ++events;
  for (size_t at = 0; (at = text.find("\"name\":\"kv_blocks_used\"", at)) != std::string::npos; ++at) ++counters;
  EXPECT_EQ(events, static_cast<size_t>(r.iterations));
  EXPECT_EQ(counters, events);
  EXPECT_NE(text.find("\"replica 1\""), std::string::npos);
  EXPECT_EQ(text.substr(text.size() - 4), "\n]}\n");
  s.output_trace = dir + "/b.json";
  write_serving_outputs(s, run_serving(s, true));
  std::ifstream in2(s.output_trace);
  const std::string again((std::istreambuf_iterator<char>(in2)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, again);
}

// The iteration-cost memo is what makes 100,000 requests cheap: most iterations repeat
// a batch signature already costed.
TEST(Serving, IterationCostsAreMemoized) {
  const ServingResult r = serve(load("vllm", 20, 3000));
  EXPECT_GT(r.memo_hits, 2 * r.memo_misses);
}

// An iteration is a Plan: every layer's kernels on every stage, two TP all-reduces per
// layer, a logits gather, one activation send per stage boundary; GEMM FLOPs are
// 2 · tokens · (the layers' weights) plus the logits.
TEST(Serving, IterationPlanHasEveryLayersKernels) {
  const ModelConfig& m = *find_model_preset("llama3-70b");
  ServingShape sh;
  sh.model = m;
  sh.tp = 4;
  sh.pp = 2;
  IterationBatch b;
  b.tokens = 300;
  b.emitting = 44;
  b.prefill = {{256, 0}};
  b.decode_context = 43 * 1000;
  const Plan plan = build_iteration_plan(sh, b, true);
  ASSERT_EQ(plan.world_size, 8);
  ASSERT_EQ(plan.programs.size(), 2u);
  int64_t all_reduces = 0, gathers = 0, sends = 0, recvs = 0, attention = 0, decode = 0;
  double gemm = 0;
  for (const Program& p : plan.programs)
    for (const Op& op : p.ops) {
      if (op.kind == OpKind::Collective) (op.collective == CollectiveKind::AllReduce ? all_reduces : gathers) += 1;
      sends += op.kind == OpKind::Send;
      recvs += op.kind == OpKind::Recv;
      attention += op.kind == OpKind::Attention;
      decode += plan.names[op.name] == "decode_attention";
      if (op.kind == OpKind::Gemm) gemm += op.flops;
    }
  EXPECT_EQ(all_reduces, 2 * m.layers);
  EXPECT_EQ(gathers, 1);
  EXPECT_EQ(sends, 1);
  EXPECT_EQ(recvs, 1);
  EXPECT_EQ(attention, m.layers);
  EXPECT_EQ(decode, m.layers);
  const double layer_weights = static_cast<double>(m.hidden * (m.heads + 2 * m.kv_heads) * m.head_dim() +
                                                   m.heads * m.head_dim() * m.hidden + 3 * m.hidden * m.ffn_hidden);
  const double expected = 2.0 * 300 * static_cast<double>(m.layers) * layer_weights / 4 +
                          2.0 * 44 * static_cast<double>(m.vocab * m.hidden) / 4;
  EXPECT_NEAR(gemm, expected, 1e-9 * expected);  // one GPU per stage, both stages
}

// TurboMind v0.1.0a1's decode attention does QKᵀ and PV on CUDA cores. Per element (query
// head x cached token x dimension) it spends 4 FP32 operations, 4.5 issue slots and 31 more
// shared by a block's query heads, over the grid on every SM or over its longest block at
// 0.6 of one SM, after 9 µs of latency; and never less than its K/V stream. Against the kernel
// itself on one H200 (calibrate/measurements/decode-attention-turbomind-h200-2026-12-04, µs):
// Llama 2 70B at TP 4 (4 query heads a block) is bound by its math from batch 16 up and by
// its slices at batch 1; Llama 2 7B (MHA, 1 a block) by its stream.
TEST(Serving, TurboMindsDecodeKernelIsBoundByItsMathUnderGqa) {
  const GpuSpec& h200 = *find_gpu_preset("h200-sxm");
  const GpuSpec& a100 = *find_gpu_preset("a100-sxm-80gb");
  ModelConfig l70;
  l70.layers = 80;
  l70.hidden = 8192;
  l70.heads = 64;
  l70.kv_heads = 8;
  l70.ffn_hidden = 28672;
  l70.vocab = 32000;
  l70.dtype = DType::FP16;
  ModelConfig l7 = l70;
  l7.layers = 32;
  l7.hidden = 4096;
  l7.heads = l7.kv_heads = 32;
  auto decode_op = [](const ModelConfig& m, int64_t tp, int64_t batch, int64_t context, bool turbomind) {
    ServingShape sh;
    sh.model = m;
    sh.tp = tp;
    sh.kv_dtype = m.dtype;
    sh.turbomind_decode = turbomind;
    IterationBatch b;
    b.tokens = b.emitting = batch;
    b.decode_context = batch * (context + 1);
    b.decode_seqs = batch;
    b.decode_max_context = context + 1;
    return iteration_attention_ops(sh, b).at(0);
  };
  const ComputeProfile p;
  auto us = [&](const Op& op, const GpuSpec& g) { return compute_seconds(op, g, p) * 1e6; };
  struct Point {
    const ModelConfig* m;
    int64_t tp, batch, context;
    double measured_us;
  };
  for (const Point& x : {Point{&l70, 4, 1, 1152, 34.66}, Point{&l70, 4, 1, 3072, 35.46},
                         Point{&l70, 4, 16, 1152, 38.30},
                         Point{&l70, 4, 32, 3072, 84.70}, Point{&l70, 4, 64, 3072, 108.64},
                         Point{&l70, 4, 128, 3072, 209.18}, Point{&l7, 1, 64, 3072, 728.54},
                         Point{&l7, 1, 128, 3072, 1436.32}})
    EXPECT_NEAR(us(decode_op(*x.m, x.tp, x.batch, x.context, true), h200), x.measured_us, 0.12 * x.measured_us)
        << "batch " << x.batch << " context " << x.context;
  // The grid as TurboMind launches it: 4 heads a block under groups of 8; at batch 1 the
  // 3,073-token context in 4 slices of 1,024, one block each; from batch 16 up no split.
  const Op one = decode_op(l70, 4, 1, 3072, true);
  EXPECT_EQ(one.access, MemAccess::CudaCoreDecode);
  EXPECT_EQ(one.k, 4);
  EXPECT_EQ(one.n, 4 * 1 * 4);
  EXPECT_EQ(one.q_len, 1024);
  const Op many = decode_op(l70, 4, 64, 1152, true);
  EXPECT_EQ(many.n, 4 * 64);
  EXPECT_EQ(many.q_len, 1153);
  // On an A100 the 70B's math takes twice its stream (its FMAs at half Hopper's lanes an
  // SM); the 7B streams; the default kernel is its stream alone.
  const Op stream70 = decode_op(l70, 4, 64, 1152, false), stream7 = decode_op(l7, 1, 64, 1152, false);
  EXPECT_EQ(stream70.access, MemAccess::Streaming);
  EXPECT_GT(us(many, a100), 1.8 * us(stream70, a100));
  EXPECT_DOUBLE_EQ(us(decode_op(l7, 1, 64, 1152, true), a100), us(stream7, a100));
  // The math: 64 x 16 x 1,153 x 128 elements at 4 / 128 + (4.5 + 31 / 4) / 256 SM cycles
  // each (the A100's 19.5 TFLOP/s over 108 SMs at 1.41 GHz: 128 FP32 operations a cycle),
  // over 108 SMs at 1.41 GHz, after 9 µs.
  const double cycles = 4.0 / (a100.peak_fp32 / (108 * 1.41e9)) + (4.5 + 31.0 / 4) / 256;
  EXPECT_NEAR(cuda_core_decode_seconds(many, a100, p), 9e-6 + 64.0 * 16 * 1153 * 128 * cycles / (108 * 1.41e9), 1e-9);
}

// The engine's iteration time (memoized attention-free plan + attention kernels) is the
// whole plan's time on the executor, for TP, PP and a mixed batch; also where the power
// cap binds (a long prefill), the iteration being one window of the controller.
TEST(Serving, IterationTimeIsThePlansTime) {
  for (const auto& [tp, pp, prefill] :
       {std::tuple{1, 1, 256}, std::tuple{8, 1, 256}, std::tuple{2, 2, 256}, std::tuple{8, 1, 8192}, std::tuple{2, 2, 4096}}) {
    const Scenario s = scenario_from_text(
        "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-70b}\nparallel: {tp: " +
            std::to_string(tp) + ", pp: " + std::to_string(pp) + "}\ninference: {requests: 1}\n",
        "serving");
    IterationBatch b;
    b.tokens = 2 * prefill + 37;
    b.emitting = 38;
    b.prefill = {{prefill, 0}, {prefill, 1024}};
    b.decode_context = 37 * 8000;
    ServingShape sh;
    sh.model = s.model;
    sh.tp = tp;
    sh.pp = pp;
    sh.weight_dtype = sh.kv_dtype = s.model.dtype;
    sh.sampler = ServingShape::Sampler::VllmV0;  // the default scheduler's (vllm), inference.sampler auto
    Topology topo(s.cluster);
    ExecOptions eo;
    apply_calibration(s, eo.compute, eo.network);  // the engine's profile: its replica's slowest board
    eo.timed_kernels = true;                       // and its kernel costs (sim/serving.cc)
    const ExecResult r = execute_plan(build_iteration_plan(sh, b, true), topo, eo);
    const double whole = r.makespan.seconds();
    const double engine = serving_iteration_seconds(s, b);
    // With stages, the engine takes one clock for all stages' kernels together, the executor one
    // per stage's GPU: where the cap binds they part by what the first stage's embedding and
    // the last one's output layer change in each mix.
    const double tolerance = pp > 1 ? 1e-5 : 1e-9;
    EXPECT_NEAR(engine, whole, 1e-9 + tolerance * whole) << "tp " << tp << " pp " << pp << " prefill " << prefill;
    if (prefill == 8192) {
      EXPECT_LT(r.power_clock, 0.95);  // the cap binds, and both apply it alike
    }
    // Attention is a real part of it: leaving it out is measurably faster.
    const double dense = execute_plan(build_iteration_plan(sh, b, false), topo, eo).makespan.seconds();
    if (prefill == 256) {
      EXPECT_LT(dense, 0.9 * whole);
    }
  }
}

// A decode iteration never gets faster as its batch grows (Llama 3 70B, TP 8, defaults):
// one more request adds a GEMM row, its KV reads and its logits, never fewer tile waves.
TEST(Serving, DecodeIterationTimeIsMonotonicInBatchSize) {
  const Scenario s = scenario_from_text(
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-70b}\nparallel: {tp: 8}\n"
      "inference: {requests: 1}\n",
      "serving");
  double prev = 0;
  for (int64_t batch = 1; batch <= 300; ++batch) {
    IterationBatch b;
    b.tokens = b.emitting = batch;
    b.decode_context = batch * 2048;
    const double t = serving_iteration_seconds(s, b);
    ASSERT_GE(t, prev) << "batch " << batch;
    prev = t;
  }
}

}  // namespace
}  // namespace clustersim
