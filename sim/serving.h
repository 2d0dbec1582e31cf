// Inference serving, event by event: requests arrive (Poisson, gamma, fixed rate or a
// trace), a router sends each to a replica (tp × pp GPUs), and each replica runs
// iterations chosen by its scheduler — `static` (request-level batches), `orca`
// (iteration-level: new requests join with their whole prefill), `vllm` (continuous
// batching, prefill first) or `sarathi` (chunked prefill under a token budget, decodes
// never wait). A paged KV cache (blocks of kv_block_tokens; capacity = HBM left after
// weights and a workspace) admits requests; when it runs out, the youngest running
// request is preempted and recomputed (or swapped out) later. Disaggregated pools hand
// each prefilled request's KV to a decode replica over the network; a draft model
// speculates for the target. An iteration's time is that of its Plan
// (plan/serving_plan.h) on the same executor, cost models and topology as training.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/serving_plan.h"
#include "reports/sqlite_writer.h"
#include "reports/summary.h"
#include "scenarios/scenario.h"

namespace clustersim {

struct ServedRequest {
  double arrival = 0, first_token = 0, finish = 0;
  int64_t prompt = 0, output = 0;
  int replica = 0;
  int preemptions = 0;
};

struct ServingResult {
  std::vector<ServedRequest> requests;
  double makespan_s = 0;
  int64_t iterations = 0;
  int64_t preemptions = 0;
  int64_t swaps = 0;               // preemptions that swapped the KV to host memory
  double kv_peak_utilization = 0;  // max over replicas and time of used / total blocks
  int64_t kv_blocks_per_replica = 0;
  // One GPU's memory as the engine lays it out (the fullest stage): weights, the activation
  // workspace, the per-sequence-slot buffers (TensorRT-LLM's runtime and decoder; vLLM's
  // logits), the KV cache, and what is left to the CUDA context, libraries and headroom.
  double memory_weights = 0, memory_activations = 0, memory_buffers = 0, memory_kv_cache = 0,
         memory_reserved = 0;
  int64_t memo_hits = 0, memo_misses = 0;
  int64_t verify_steps = 0, speculated_tokens = 0;  // speculative decoding
  int64_t prefix_lookups = 0, prefix_hits = 0;      // prefix caching: admissions with a prefix, and cache hits
  int64_t prefix_tokens_reused = 0;                 // prompt tokens not prefilled thanks to the cache
  Metrics metrics;                                  // flat: throughput, percentiles, ...
  std::vector<IterationRow> iteration_log;          // when asked for (output files)
  std::vector<SampleValue> samples;                 // run_serving_samples
};

// Throws InputError for settings not modelled (pipeline-parallel replicas in
// disaggregated pools, context parallelism) and for a model that does not fit.
// `sample`: which seeded draw of the scenario's variability: block (0: the first).
ServingResult run_serving(const Scenario& s, bool log_iterations = false, bool progress = false,
                          int64_t sample = 0);
// Runs draws 1..n-1 of the variability beside `first` (draw 0) on `jobs` threads and adds
// the p5 / p50 / p95 and mean over draws of the latency percentiles, throughput and SLO
// goodput to first.metrics. Arrivals are the same in every draw.
void run_serving_samples(const Scenario& s, ServingResult& first, int64_t n, int jobs);
// The time of one iteration of `batch` on one replica, as the engine costs it: the
// memoized attention-free plan on the executor plus the batch's attention kernels.
double serving_iteration_seconds(const Scenario& s, const IterationBatch& batch);
// Appends the run (summary, requests, iterations) to the scenario's output.sqlite and
// writes its output.trace, where named (run_serving must have logged iterations).
void write_serving_outputs(const Scenario& s, const ServingResult& r);
std::string serving_summary_json(const Scenario& s, const ServingResult& r);
std::string serving_summary_table(const Scenario& s, const ServingResult& r);

}  // namespace clustersim
