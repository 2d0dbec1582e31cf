// The serving engines as their projects build them: TensorRT-LLM's engine limits and buffers,
// vLLM's KV cache, FP8 and quantized layers, samplers, MoE, speculative decoding, SQLite rows.
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
#include "sim/serving.h"
#include "support/serving_helpers.h"
#include "support/temp_scenario.h"
#include "topology/topology.h"

namespace clustersim {
namespace {

using testing::scenario_from_text;

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
  const std::string one =
      "  requests: 1\n  prompt_tokens: {dist: fixed, value: 8000}\n"
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
            "inference: {decode_attention: turbomind-v0.1, requests: 4" +
            kv + "}\n",
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
        "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: " + model +
            ", seq_len: 32768}\nparallel: {tp: " + std::to_string(tp) +
            "}\ninference: {scheduler: trtllm, engine_build: trtllm-bench, weight_dtype: fp8, "
            "kv_dtype: fp8, requests: 4, prompt_tokens: {dist: fixed, value: " +
            std::to_string(isl) + "}, output_tokens: {dist: fixed, value: " + std::to_string(osl) + "}" + extra + "}\n",
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
                                    "  max_batch_tokens: 2048\n",
                        "llama3-70b"),
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
    return metric(serve("  scheduler: trtllm\n  sampler: " + sampler +
                            "\n  requests: 64\n  max_batch_size: 64\n"
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
    return metric(serve("  scheduler: " + scheduler +
                        "\n  requests: 4\n  max_batch_tokens: 2048\n  max_batch_size: " + std::to_string(slots) + "\n"),
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
  const ServingResult r = serve("  scheduler: vllm\n  requests: 4\n  max_batch_size: 256\n  max_batch_tokens: 8192\n");
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
  for (int64_t t : {1, 3, 512}) {
    const auto [flops, bytes] = expert_ops(t);
    EXPECT_NEAR(flops,
                2.0 * static_cast<double>(t) * 2 * 3 * static_cast<double>(m.hidden * m.moe.expert_ffn_hidden) * layers,
                1e-6 * flops);
    // The mean number reached, fractional: 3 tokens reach 8·(1 − 0.75³) = 4.625 experts.
    const double reached = 8 * (1 - std::pow(0.75, static_cast<double>(t)));
    EXPECT_NEAR(bytes, reached * expert_bytes * layers, 1e-6 * bytes) << t;
  }
  // Each grouped GEMM tells the tile model its routing (the iteration's tokens, the experts
  // and top_k), and the routing's three kernels (top-k softmax, sort, offsets) run before the
  // permutation, reading the FP32 logits.
  IterationBatch b;
  b.tokens = b.emitting = 64;
  b.decode_context = 6400;
  const Plan plan = build_iteration_plan(sh, b, false);
  int grouped = 0, routing = 0;
  for (const Op& op : plan.programs[0].ops) {
    const std::string& name = plan.names[op.name];
    if (name == "expert_in" || name == "expert_out") {
      ++grouped;
      EXPECT_EQ(op.group_experts, 8);
      EXPECT_EQ(op.group_top_k, 2);
      EXPECT_EQ(op.group_tokens, 64);
    } else if (name == "moe_routing") {
      ++routing;
      EXPECT_EQ(memory_kernels(op), 3);
      EXPECT_EQ(op.bytes_read, 64 * 8 * 4 + 128 * 12);
    } else {
      EXPECT_EQ(op.group_experts, 0) << name;
    }
  }
  EXPECT_EQ(grouped, 2 * m.layers);
  EXPECT_EQ(routing, m.layers);
  // Expert parallelism is a training layout here: a serving scenario that asks for it is told.
  try {
    (void)run_serving(
        scenario_from_text("name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: "
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
  EXPECT_GT(metric(w4, "ttft_s_p50"), 0.9 * metric(bf16, "ttft_s_p50"));              // ... but bf16 math in prefill
  EXPECT_THROW(serve("  requests: 10\n", "llama3-70b", 1), InputError);               // 141 GB of bf16 weights on 80 GB
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

}  // namespace
}  // namespace clustersim
