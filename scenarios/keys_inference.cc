// Scenario keys of serving: schedulers, batching limits, arrivals, lengths, KV cache, speculation, engine costs
// (scenarios/key_table.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "scenarios/key_table.h"
#include "scenarios/readers.h"
#include "scenarios/topology_file.h"
#include "scenarios/units.h"
#include "topology/presets.h"

namespace clustersim {
void add_inference_keys(KeyList& t) {
  using S = Scenario;
  using N = YNode;
  t.insert(
      t.end(),
      {
          {"inference", "mapping", "", "an inference-serving run instead of training", nullptr},
          {"inference.replicas", "integer", "1", "model replicas, each tp × pp GPUs",
           [](const N& n, S& s) { s.serving.replicas = as_int(n, "inference.replicas", 1, 1 << 20); }},
          {"inference.scheduler", "name", "vllm",
           "static | orca | vllm (v0: prefill-first) | sarathi (chunked prefill in the token budget) | vllm-v1 "
           "(chunked "
           "prefill; defaults max_batch_size 1024, max_batch_tokens 8192) | trtllm (in-flight batching: decodes, then "
           "whole "
           "prompts within max_num_tokens; defaults max_batch_size 2048, max_batch_tokens 8192)",
           [](const N& n, S& s) {
             s.serving.scheduler =
                 as_enum(n, "inference.scheduler", {"static", "orca", "vllm", "sarathi", "vllm-v1", "trtllm"});
           }},
          {"inference.router", "name", "round-robin", "round-robin | least-outstanding | least-kv",
           [](const N& n, S& s) {
             s.serving.router = as_enum(n, "inference.router", {"round-robin", "least-outstanding", "least-kv"});
           }},
          {"inference.max_batch_size", "integer", "256", "requests in one iteration at most",
           [](const N& n, S& s) { s.serving.max_batch_size = as_int(n, "inference.max_batch_size", 1, 1 << 20); }},
          {"inference.max_batch_tokens", "integer", "8192",
           "vllm: prefill tokens per iteration (a longer prompt runs alone); sarathi: the token budget; not used by "
           "static and orca (refused there)",
           [](const N& n, S& s) { s.serving.max_batch_tokens = as_int(n, "inference.max_batch_tokens", 1, 1 << 24); }},
          {"inference.iteration_overhead", "time", "1ms",
           "host work per engine step that the GPUs wait for: scheduling, input preparation, sampling, "
           "detokenization, CUDA-graph launch (docs/model.md)",
           [](const N& n, S& s) { s.serving.iteration_overhead_s = as_latency(n, "inference.iteration_overhead"); }},
          {"inference.request_overhead", "time", "5ms",
           "front end per request before the engine sees it: HTTP/gRPC, tokenization, queueing into the engine; "
           "counts in TTFT and end-to-end latency (docs/model.md)",
           [](const N& n, S& s) { s.serving.request_overhead_s = as_time(n, "inference.request_overhead"); }},
          {"inference.kv_block_tokens", "integer", "16", "tokens per paged KV-cache block",
           [](const N& n, S& s) { s.serving.kv_block_tokens = as_int(n, "inference.kv_block_tokens", 1, 1 << 16); }},
          {"inference.requests", "integer", "1000",
           "requests to serve (with a trace: its first rows, at most its row count)",
           [](const N& n, S& s) { s.serving.requests = as_int(n, "inference.requests", 1, int64_t{1} << 26); }},
          {"inference.arrivals", "mapping", "", "when requests arrive", nullptr},
          {"inference.arrivals.process", "name", "poisson",
           "poisson | gamma | fixed | closed (closed: `concurrency` clients, each sending its next request the moment "
           "its last one ends, as benchmark clients at a fixed concurrency do)",
           [](const N& n, S& s) {
             s.serving.arrival_process =
                 as_enum(n, "inference.arrivals.process", {"poisson", "gamma", "fixed", "closed"});
           }},
          {"inference.arrivals.concurrency", "integer", "1", "closed: clients in flight",
           [](const N& n, S& s) { s.serving.concurrency = as_int(n, "inference.arrivals.concurrency", 1, 1 << 20); }},
          {"inference.arrivals.rate_per_s", "number", "8", "mean arrivals per second",
           [](const N& n, S& s) { s.serving.rate_per_s = as_double(n, "inference.arrivals.rate_per_s", 0, true); }},
          {"inference.arrivals.cv", "number", "1.0", "gamma: coefficient of variation of the gaps (burstiness)",
           [](const N& n, S& s) {
             s.serving.cv = as_double(n, "inference.arrivals.cv", 0, true);
             if (s.serving.cv < 1e-3 || s.serving.cv > 1e3)
               throw InputError(n.mark,
                                "inference.arrivals.cv = " + n.scalar + " is out of range, expected 0.001 to 1000");
           }},
          {"inference.arrivals.seed", "integer", "seed", "seed of arrivals and lengths (default: the run's seed)",
           [](const N& n, S& s) {
             s.serving.arrival_seed = static_cast<uint64_t>(as_int(n, "inference.arrivals.seed", 0));
           }},
          {"inference.arrivals.trace", "path", "none",
           "CSV of arrival_s, prompt_tokens, output_tokens[, prefix_group] (instead of a process; a first line that "
           "starts with a letter is a header; relative to this file)",
           [](const N& n, S& s) { s.serving.trace = as_path(n, "inference.arrivals.trace"); }},
          {"inference.prompt_tokens", "mapping", "", "prompt length distribution", nullptr},
          {"inference.output_tokens", "mapping", "", "output length distribution", nullptr},
          {"inference.prompt_tokens.dist", "name", "fixed", "fixed | uniform | lognormal | zipf",
           [](const N& n, S& s) {
             s.serving.prompt.dist =
                 as_enum(n, "inference.prompt_tokens.dist", {"fixed", "uniform", "lognormal", "zipf"});
           }},
          {"inference.prompt_tokens.value", "integer", "preset", "fixed: the length",
           [](const N& n, S& s) { s.serving.prompt.value = as_int(n, "inference.prompt_tokens.value", 1, 1 << 24); }},
          {"inference.prompt_tokens.min", "integer", "1",
           "uniform / zipf / lognormal: smallest length (lognormal: its draws clipped to [min, max])",
           [](const N& n, S& s) { s.serving.prompt.min = as_int(n, "inference.prompt_tokens.min", 1, 1 << 24); }},
          {"inference.prompt_tokens.max", "integer", "4096", "uniform / zipf / lognormal: largest length",
           [](const N& n, S& s) { s.serving.prompt.max = as_int(n, "inference.prompt_tokens.max", 1, 1 << 24); }},
          {"inference.prompt_tokens.mean", "number", "1024", "lognormal: mean length",
           [](const N& n, S& s) { s.serving.prompt.mean = as_double(n, "inference.prompt_tokens.mean", 0, true); }},
          {"inference.prompt_tokens.sigma", "number", "0.5", "lognormal: sigma of log length, 0 to 10",
           [](const N& n, S& s) { s.serving.prompt.sigma = as_number(n, "inference.prompt_tokens.sigma", 0, 10); }},
          {"inference.prompt_tokens.alpha", "number", "1.2", "zipf: exponent",
           [](const N& n, S& s) { s.serving.prompt.alpha = as_double(n, "inference.prompt_tokens.alpha", 0, true); }},
          {"inference.output_tokens.dist", "name", "fixed", "fixed | uniform | lognormal | zipf",
           [](const N& n, S& s) {
             s.serving.output.dist =
                 as_enum(n, "inference.output_tokens.dist", {"fixed", "uniform", "lognormal", "zipf"});
           }},
          {"inference.output_tokens.value", "integer", "preset", "fixed: the length",
           [](const N& n, S& s) { s.serving.output.value = as_int(n, "inference.output_tokens.value", 1, 1 << 24); }},
          {"inference.output_tokens.min", "integer", "1",
           "uniform / zipf / lognormal: smallest length (lognormal: its draws clipped to [min, max])",
           [](const N& n, S& s) { s.serving.output.min = as_int(n, "inference.output_tokens.min", 1, 1 << 24); }},
          {"inference.output_tokens.max", "integer", "4096", "uniform / zipf / lognormal: largest length",
           [](const N& n, S& s) { s.serving.output.max = as_int(n, "inference.output_tokens.max", 1, 1 << 24); }},
          {"inference.output_tokens.mean", "number", "1024", "lognormal: mean length",
           [](const N& n, S& s) { s.serving.output.mean = as_double(n, "inference.output_tokens.mean", 0, true); }},
          {"inference.output_tokens.sigma", "number", "0.5", "lognormal: sigma of log length, 0 to 10",
           [](const N& n, S& s) { s.serving.output.sigma = as_number(n, "inference.output_tokens.sigma", 0, 10); }},
          {"inference.output_tokens.alpha", "number", "1.2", "zipf: exponent",
           [](const N& n, S& s) { s.serving.output.alpha = as_double(n, "inference.output_tokens.alpha", 0, true); }},
          {"inference.slo", "mapping", "", "service-level objective for goodput", nullptr},
          {"inference.slo.ttft", "time", "500ms", "time to first token",
           [](const N& n, S& s) { s.serving.slo_ttft_s = as_time(n, "inference.slo.ttft"); }},
          {"inference.slo.tpot", "time", "50ms", "time per output token",
           [](const N& n, S& s) { s.serving.slo_tpot_s = as_time(n, "inference.slo.tpot"); }},
          {"inference.weight_dtype", "dtype", "model.dtype",
           "stored weights: fp16 | bf16 | fp8 | int8 (W8A8 GEMMs) | int4 (weight-only, bf16 math)",
           [](const N& n, S& s) {
             s.serving.weight_dtype = as_dtype(n, "inference.weight_dtype");
             s.serving.weight_dtype_set = true;
           }},
          {"inference.kv_dtype", "dtype", "model.dtype", "KV-cache entries: fp16 | bf16 | fp8 | int8 | int4",
           [](const N& n, S& s) {
             s.serving.kv_dtype = as_dtype(n, "inference.kv_dtype");
             s.serving.kv_dtype_set = true;
           }},
          {"inference.decode_attention", "name", "streaming",
           "the decode-attention kernel: streaming (its math on tensor cores, bound by the K/V it streams: FlashInfer, "
           "FlashAttention's decode, TensorRT-LLM's XQA) | turbomind-v0.1 (LMDeploy v0.1's TurboMind kernel: QK and PV "
           "on CUDA cores, 4 query heads a block, 1,024-token slices; docs/model.md)",
           [](const N& n, S& s) {
             s.serving.decode_attention = as_enum(n, "inference.decode_attention", {"streaming", "turbomind-v0.1"});
           }},
          {"inference.fp8_context_fmha", "name", "auto",
           "a prefill's context attention in FP8 (TensorRT-LLM's use_fp8_context_fmha; its two products at the FP8 "
           "peak, at 0.81 of the BF16 kernel's efficiency, FlashAttention-3's FP8 and FP16 rates): auto (on for a "
           "TensorRT-LLM engine, inference.scheduler trtllm, with FP8 weights and an FP8 KV cache on a GPU with FP8 "
           "tensor cores, as trtllm-bench builds FP8 engines and TensorRT-LLM's builder forces it for paged context "
           "FMHA over an FP8 cache) | on (needs an FP8 KV cache and FP8 tensor cores) | off; docs/model.md, "
           "\"FP8 context attention\"",
           [](const N& n, S& s) {
             s.serving.fp8_context_fmha = as_enum(n, "inference.fp8_context_fmha", {"auto", "on", "off"});
           }},
          {"inference.sampler", "name", "auto",
           "the GPU work on the logits after the output layer, per emitting row of the vocabulary, greedy requests: "
           "auto "
           "(the scheduler's engine: trtllm for trtllm, vllm-v0 for vllm, vllm-v1 for vllm-v1, none otherwise) | none "
           "| "
           "trtllm (FP32 logits; the decoder's penalty copy, softmax and top-k passes, 48 B an entry) | vllm-v0 (the "
           "cast "
           "to FP32, temperature, softmax and log-softmax, argmax: 50 B from 16-bit logits) | vllm-v1 (the cast and "
           "argmax: 10 B); docs/model.md, \"Sampling on the logits\"",
           [](const N& n, S& s) {
             s.serving.sampler = as_enum(n, "inference.sampler", {"auto", "none", "trtllm", "vllm-v0", "vllm-v1"});
           }},
          {"inference.engine_build", "name", "default",
           "with inference.scheduler trtllm: default (TensorRT-LLM's build defaults, max_batch_size 2048, "
           "max_num_tokens "
           "8192) | trtllm-bench (the limits trtllm-bench build picks from the dataset: the requests of the mean "
           "prompt and "
           "output length that fit in 0.95 of the memory the weights leave, rounded up; tuning.py's "
           "calc_engine_setting; "
           "weight-only INT8/INT4 keep the defaults); a max_batch_size or max_batch_tokens the scenario sets is kept; "
           "docs/model.md, \"Serving engine costs\"",
           [](const N& n, S& s) {
             s.serving.engine_build = as_enum(n, "inference.engine_build", {"default", "trtllm-bench"});
           }},
          {"inference.chunked_context", "bool", "false",
           "with inference.scheduler trtllm: contexts are chunked into the token budget the decodes leave "
           "(TensorRT-LLM's "
           "enable_chunked_context with the first-come-first-served chunking policy; trtllm-bench runs it so), where "
           "without it a context joins whole once the decodes leave it room in max_num_tokens, and a prompt longer "
           "than "
           "max_num_tokens is refused (TensorRT-LLM could never schedule it)",
           [](const N& n, S& s) { s.serving.chunked_context = as_bool(n, "inference.chunked_context"); }},
          {"inference.kv_cache_free_fraction", "number", "0.9",
           "with inference.scheduler trtllm: the KV cache's share of the memory free once the engine's weights and "
           "activations are in place (TensorRT-LLM's kv_cache_free_gpu_mem_fraction, default 0.9), where the other "
           "schedulers take 90% of the GPU's memory less the weights and activations, as vLLM's gpu_memory_utilization "
           "does; docs/model.md, \"Serving engine costs\"",
           [](const N& n, S& s) {
             s.serving.kv_cache_free_fraction = as_number(n, "inference.kv_cache_free_fraction", 0.01, 1.0);
           }},
          {"inference.preemption", "name", "recompute", "recompute | swap: what a preempted request's KV cache does",
           [](const N& n, S& s) {
             s.serving.preemption = as_enum(n, "inference.preemption", {"recompute", "swap"});
           }},
          {"inference.swap_space", "size", "4GiB",
           "with inference.preemption swap: host memory per GPU for swapped-out KV (then recompute)",
           [](const N& n, S& s) { s.serving.swap_space_bytes = as_size(n, "inference.swap_space"); }},
          {"inference.prefix_caching", "bool", "false",
           "reuse the cached KV blocks of a shared prompt prefix (vLLM automatic prefix caching)",
           [](const N& n, S& s) { s.serving.prefix_caching = as_bool(n, "inference.prefix_caching"); }},
          {"inference.shared_prefix", "mapping", "",
           "prompts that open with a shared prefix (system prompts, few-shot examples)", nullptr},
          {"inference.shared_prefix.tokens", "integer", "0", "tokens of each shared prefix",
           [](const N& n, S& s) { s.serving.prefix_tokens = as_int(n, "inference.shared_prefix.tokens", 0, 1 << 24); }},
          {"inference.shared_prefix.groups", "integer", "0",
           "distinct prefixes; each request draws one uniformly (a trace's 4th column names it instead)",
           [](const N& n, S& s) { s.serving.prefix_groups = as_int(n, "inference.shared_prefix.groups", 0, 1 << 24); }},
          {"inference.disaggregation", "mapping", "", "separate prefill and decode pools", nullptr},
          {"inference.disaggregation.prefill_replicas", "integer", "0", "replicas that only prefill",
           [](const N& n, S& s) {
             s.serving.prefill_replicas = as_int(n, "inference.disaggregation.prefill_replicas", 0);
           }},
          {"inference.disaggregation.decode_replicas", "integer", "0", "replicas that only decode",
           [](const N& n, S& s) {
             s.serving.decode_replicas = as_int(n, "inference.disaggregation.decode_replicas", 0);
           }},
          {"inference.speculative", "mapping", "", "speculative decoding", nullptr},
          {"inference.speculative.draft_model", "name", "null", "draft model preset",
           [](const N& n, S& s) {
             s.serving.draft_model =
                 n.scalar == "null" ? "" : scalar(n, "inference.speculative.draft_model", "a preset");
           }},
          {"inference.speculative.lookahead", "integer", "0", "draft tokens per step (at most 256)",
           [](const N& n, S& s) { s.serving.lookahead = as_int(n, "inference.speculative.lookahead", 0, 256); }},
          {"inference.speculative.acceptance_rate", "number", "0.0", "probability a draft token is accepted",
           [](const N& n, S& s) {
             s.serving.acceptance_rate = as_double(n, "inference.speculative.acceptance_rate", 0, false);
           }},
      });
}

}  // namespace clustersim
