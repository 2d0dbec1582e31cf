#include "sim/serving.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "cost_models/compute.h"
#include "cost_models/flow_network.h"
#include "cost_models/network.h"
#include "cost_models/protocol.h"
#include "plan/memory.h"
#include "plan/plan.h"
#include "plan/rng.h"
#include "plan/serving_plan.h"
#include "reports/progress.h"
#include "reports/summary.h"
#include "reports/trace_writer.h"
#include "scenarios/error.h"
#include "sim/arrivals.h"
#include "sim/parallel.h"
#include "sim/run.h"
#include "sim/serving_cost.h"
#include "sim/serving_engine.h"
#include "sim/variability.h"

namespace clustersim {
namespace {

using serve::Engine;
using serve::IterationCost;
using serve::IterCost;

// TensorRT-LLM's buffers for each sequence slot the engine was built for (max_batch_size),
// beside the engine's activations: the runtime's (the engine's logits and the step's I/O) and
// the decoder's (sampling and penalty workspaces, the logits it sorts), most of them a row of
// the whole vocabulary on every rank. Its executor logs both when it starts ("[MemUsageChange]
// Allocated 1.14 GB GPU memory for runtime buffers", "... 4.35 GB GPU memory for decoder"):
// 5.49 GiB for 4,096 slots of Llama 2's 32,000 tokens in the trtllm-bench guide's log
// (TensorRT-LLM v0.12, docs/source/performance/perf-benchmarking.md), 44.97 bytes a slot and
// vocabulary entry.
constexpr double kTrtllmSlotBytes = 5.49 * 1024.0 * 1024.0 * 1024.0 / (4096.0 * 32000.0);

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  const double f = pos - static_cast<double>(i);
  // a + (b − a)·f: equal neighbours give their value exactly, so the percentiles stay ordered
  // (a·(1 − f) + b·f can round a higher quantile below a lower one).
  return i + 1 < v.size() ? v[i] + (v[i + 1] - v[i]) * f : v[i];
}

}  // namespace

double serving_iteration_seconds(const Scenario& s, const IterationBatch& batch) {
  ExecOptions eo;
  apply_calibration(s, eo.compute, eo.network);
  eo.timed_kernels = true;  // serving keeps the bracketed kernel costs (docs/model.md, "Kernels from a full queue")
  collective_options(s, eo);
  Topology topo(s.cluster);
  IterationCost cost(s, s.model, topo, eo);
  IterCost it = cost.dense(batch.tokens, batch.emitting);
  it += cost.decode_attention(batch.decode_context, batch.decode_seqs, batch.decode_max_context);
  for (const PrefillChunk& c : batch.prefill) it += cost.prefill_attention(c.tokens, c.past);
  return cost.seconds(it);
}

ServingResult run_serving(const Scenario& s, bool log_iterations, bool progress, int64_t sample) {
  const InferenceConfig& c = s.serving;
  const int64_t pools = c.prefill_replicas + c.decode_replicas;
  if (pools > 0 && (c.prefill_replicas < 1 || c.decode_replicas < 1))
    throw InputError(s.mark("inference.disaggregation"),
                     "disaggregation needs both pools, expected prefill_replicas >= 1 and decode_replicas >= 1");
  if (pools > 0 && c.scheduler == "static")
    throw InputError(
        s.mark("inference.scheduler"),
        "static batching cannot hand requests between pools, expected orca, vllm, sarathi, vllm-v1 or trtllm");
  if (pools > 0 && c.replicas != 1 && c.replicas != pools)
    throw InputError(s.mark("inference.replicas"),
                     "with disaggregation the replicas are the two pools, expected replicas: " + std::to_string(pools));
  const int64_t replicas = pools > 0 ? pools : c.replicas;
  const ModelConfig* draft_model = nullptr;
  if (!c.draft_model.empty()) {
    draft_model = find_model_preset(c.draft_model);
    if (!draft_model)
      throw InputError(s.mark("inference.speculative.draft_model"),
                       "unknown draft model '" + c.draft_model + "', expected a model preset");
    if (c.lookahead < 1)
      throw InputError(s.mark("inference.speculative.lookahead"), "a draft model needs lookahead >= 1");
    if (draft_model->heads % s.parallel.tp != 0)
      throw InputError(s.mark("inference.speculative.draft_model"), "tp must divide the draft model's heads");
  } else if (c.lookahead > 0 || c.acceptance_rate > 0) {
    throw InputError(s.mark("inference.speculative"), "speculative decoding needs a draft_model");
  }
  if (c.acceptance_rate < 0 || c.acceptance_rate > 1)
    throw InputError(s.mark("inference.speculative.acceptance_rate"), "acceptance_rate must lie in [0, 1]");
  if (c.decode_attention == "turbomind-v0.1") {
    // The kernel as TurboMind v0.1.0a1 builds it: FP16 queries, a head dim of 128, an FP16 or
    // INT8 cache (DispatchDecoderMultiheadAttention).
    const DType kv = c.kv_dtype_for(s.model.dtype);
    for (const ModelConfig* m : {&s.model, draft_model}) {
      if (!m) continue;
      if (m->is_mla())
        throw InputError(s.mark("inference.decode_attention"),
                         "turbomind-v0.1's decode kernel runs multi-head attention, the model has latent attention "
                         "(model.mla); expected decode_attention: streaming");
      if (m->head_dim() != 128)
        throw InputError(s.mark("inference.decode_attention"),
                         "turbomind-v0.1's decode kernel is built for a head dim of 128, the model has " +
                             std::to_string(m->head_dim()) + "; expected decode_attention: streaming");
      if (m->dtype != DType::FP16)
        throw InputError(s.mark("inference.decode_attention"),
                         "turbomind-v0.1's decode kernel runs FP16 models, the model is " +
                             std::string(to_string(m->dtype)) + "; expected model.dtype: fp16");
    }
    if (kv != DType::FP16 && kv != DType::INT8)
      throw InputError(s.mark("inference.decode_attention"),
                       "turbomind-v0.1's decode kernel reads an FP16 or INT8 cache, expected inference.kv_dtype: "
                       "fp16 or int8");
  }
  if (c.fp8_context_fmha == "on") {
    if (c.kv_dtype_for(s.model.dtype) != DType::FP8)
      throw InputError(s.mark("inference.fp8_context_fmha"),
                       "FP8 context attention reads its keys and values from an FP8 cache, expected "
                       "inference.kv_dtype: fp8");
    if (s.cluster.node.gpu.peak_fp8 <= 0)
      throw InputError(s.mark("inference.fp8_context_fmha"), "FP8 context attention needs FP8 tensor cores, which " +
                                                                 s.cluster.node.gpu.name +
                                                                 " lacks; expected fp8_context_fmha: off or auto");
  }
  if (s.parallel.cp != 1)
    throw InputError(s.mark("parallel.cp"), "serving replicas do not split context, expected cp: 1");
  const MoeConfig& moe = s.model.moe;
  if (moe.experts > 0 && (moe.top_k < 1 || moe.top_k > moe.experts || moe.expert_ffn_hidden < 1))
    throw InputError(s.mark("model.moe"), "a mixture of experts needs 1 <= top_k <= experts (" +
                                              std::to_string(moe.experts) + ") and expert_ffn_hidden > 0");
  if (moe.experts > 0 && (moe.expert_ffn_hidden % s.parallel.tp != 0))
    throw InputError(s.mark("parallel.tp"),
                     "tp = " + std::to_string(s.parallel.tp) + " does not divide model.moe.expert_ffn_hidden = " +
                         std::to_string(moe.expert_ffn_hidden) + ": every GPU holds 1/tp of every expert");
  if (s.parallel.ep != 1)
    throw InputError(s.mark("parallel.ep"),
                     "serving replicas shard every expert over their tp GPUs (docs/model.md, \"Mixture of experts\"), "
                     "expected ep: 1");
  const int64_t tp = s.parallel.tp, pp = s.parallel.pp;
  if (pp > s.model.layers) throw InputError(s.mark("parallel.pp"), "more pipeline stages than layers");
  if (tp > s.cluster.node.gpus)
    throw InputError(s.mark("parallel.tp"), "tp " + std::to_string(tp) + " spans nodes, expected tp <= " +
                                                std::to_string(s.cluster.node.gpus) + " GPUs per node");
  if (replicas * tp * pp > s.gpus())
    throw InputError(s.mark("inference.replicas"),
                     std::to_string(replicas) + " replicas of tp " + std::to_string(tp) + " × pp " +
                         std::to_string(pp) + " need " + std::to_string(replicas * tp * pp) +
                         " GPUs, expected at most the cluster's " + std::to_string(s.gpus()));
  if (s.model.heads % tp != 0) throw InputError(s.mark("parallel.tp"), "tp must divide the model's attention heads");
  if (c.trace.empty() && c.rate_per_s <= 0)
    throw InputError(s.mark("inference.arrivals.rate_per_s"), "arrival rate must be positive");
  // Times are doubles in seconds: past ~1e9 s (31 years) they no longer resolve a microsecond.
  const double arrivals_span = static_cast<double>(c.requests) / c.rate_per_s;  // inf for a subnormal rate
  if (c.trace.empty() && c.arrival_process != "closed" && !(arrivals_span <= 1e9))
    throw InputError(s.mark("inference.arrivals.rate_per_s"),
                     "the arrivals would span " +
                         (arrivals_span < 1e300 ? "about " + format_number(arrivals_span) : std::string("over 1e300")) +
                         " s (requests over rate_per_s), past 1e9 s, expected a rate of at least " +
                         format_number(static_cast<double>(c.requests) / 1e9) + " a second");

  ExecOptions eo;
  apply_calibration(s, eo.compute, eo.network);
  collective_options(s, eo);
  eo.timed_kernels = true;  // as serving_iteration_seconds
  Topology topo(s.cluster);
  if (c.fabric_share < 1)  // jobs: what other jobs' traffic leaves of the fabric (sim/jobs.h)
    for (const Link& l : topo.links())
      if (l.cls == LinkClass::Network) topo.set_link_bandwidth(l.id, l.bandwidth * c.fabric_share);
  std::vector<double> replica_slowdown;
  if (sample == 0) {
    const VariabilityConfig& v = s.variability;
    bool link_straggler = false;
    for (const Straggler& st : v.stragglers) link_straggler |= st.kind == "link";
    if (v.link_speed.dist != "none" || v.kernel_jitter > 0 || link_straggler)
      std::cerr << s.mark("variability").str()
                << ": warning: a serving run draws gpu_speed and GPU or node stragglers per replica; link_speed, "
                   "link stragglers and kernel_jitter apply to training runs only\n";
  }
  if (s.variability.any()) {
    // Each replica runs at its slowest GPU (docs/model.md, "Variability").
    const std::vector<double> gpu = draw_gpu_slowdowns(s, topo, stream_seed(s.seed, static_cast<uint64_t>(sample)));
    const int64_t per = s.parallel.tp * s.parallel.pp;
    for (int64_t r = 0; r < replicas; ++r)
      replica_slowdown.push_back(*std::max_element(gpu.begin() + r * per, gpu.begin() + (r + 1) * per));
  }
  IterationCost cost(s, s.model, topo, eo);
  std::unique_ptr<IterationCost> draft;
  if (draft_model) draft = std::make_unique<IterationCost>(s, *draft_model, topo, eo);

  // KV capacity, as vLLM sizes it: 90% of HBM, less the weights' shard and the
  // activation workspace of the largest iteration. TensorRT-LLM gives the KV cache a share
  // (kv_cache_free_gpu_mem_fraction) of the memory left free once the engine is loaded.
  const double bytes = dtype_bits(s.model.dtype) / 8.0;
  const double weights = cost.weight_bytes_per_gpu() + (draft ? draft->weight_bytes_per_gpu() : 0);
  const double activations = static_cast<double>(c.max_batch_tokens) *
                             static_cast<double>(4 * s.model.hidden + 3 * s.model.ffn_hidden / tp) * bytes;
  const double slots = static_cast<double>(c.max_batch_size);
  const double buffers = c.scheduler == "trtllm" ? slots * static_cast<double>(s.model.vocab) * kTrtllmSlotBytes
                                                 : static_cast<double>(c.max_batch_size * s.model.vocab / tp) * 4;
  const double workspace = activations + buffers;
  // TensorRT-LLM measures what is free once the engine is loaded, so the CUDA context and
  // library workspaces and the NCCL buffers (the training memory model's reserve over nothing
  // of its own to fragment: 0.75 GiB, and 0.25 GiB with a communicator) are not in it.
  const double hbm = s.cluster.node.gpu.hbm_bytes;
  const double runtime = default_memory_reserve(MemoryBreakdown{}, tp * pp > 1 ? 1 : 0);
  const double free_bytes = c.scheduler == "trtllm" ? c.kv_cache_free_fraction * (hbm - weights - workspace - runtime)
                                                    : 0.9 * hbm - weights - workspace;
  const double block_bytes =
      (cost.kv_bytes_per_token() + (draft ? draft->kv_bytes_per_token() : 0)) * static_cast<double>(c.kv_block_tokens);
  const int64_t blocks =
      free_bytes > 0 ? static_cast<int64_t>(free_bytes / block_bytes) / pp : 0;  // per virtual engine
  if (blocks < 1) {
    // Name what takes the memory: the weights, or the workspace the batch limits size.
    const bool batch = workspace > weights;
    throw InputError(
        s.mark(batch ? (s.marks.count("inference.max_batch_size") ? "inference.max_batch_size"
                                                                  : "inference.max_batch_tokens")
               : s.marks.count("cluster.gpu_spec.hbm") ? "cluster.gpu_spec.hbm"
                                                       : "parallel.tp"),
        "no room for the KV cache: " + format_number(weights / 1e9) + " GB of weights and " +
            format_number(workspace / 1e9) + " GB of workspace (max_batch_tokens' activations, max_batch_size's " +
            "sampling buffers) per GPU on a " + format_number(s.cluster.node.gpu.hbm_bytes / 1e9) + " GB GPU, " +
            (batch ? "expected smaller inference.max_batch_size or max_batch_tokens" : "expected a larger tp or pp"));
  }

  const std::vector<Arrival> arrivals = make_arrivals(s);
  Engine engine(s, cost, draft.get(), blocks, topo, eo.network);
  if (log_iterations) engine.log_iterations();
  if (!replica_slowdown.empty()) engine.set_replica_slowdown(replica_slowdown);
  Progress bar("serving", static_cast<int64_t>(arrivals.size()), progress);
  if (progress) engine.show_progress(&bar);
  ServingResult r = engine.run(arrivals);
  bar.finish();
  // Whole bytes, as a training run reports them: the memory model's formulas carry fractions of one.
  r.memory_weights = std::round(weights);
  r.memory_activations = std::round(activations);
  r.memory_buffers = std::round(buffers);
  r.memory_kv_cache = std::round(static_cast<double>(blocks * pp) * block_bytes);
  r.memory_reserved =
      std::round(hbm - weights - activations - buffers - static_cast<double>(blocks * pp) * block_bytes);

  std::vector<double> ttft, tpot, e2e;
  double out_tokens = 0, first = r.requests.front().arrival;
  int64_t good = 0;
  for (const ServedRequest& q : r.requests) {
    ttft.push_back(q.first_token - q.arrival);
    e2e.push_back(q.finish - q.arrival);
    const double tp_q = q.output > 1 ? (q.finish - q.first_token) / static_cast<double>(q.output - 1) : 0;
    if (q.output > 1) tpot.push_back(tp_q);
    out_tokens += static_cast<double>(q.output);
    if (q.first_token - q.arrival <= c.slo_ttft_s && tp_q <= c.slo_tpot_s) ++good;
  }
  const double span = r.makespan_s - first;
  const double n = static_cast<double>(r.requests.size());
  r.metrics = {{"requests", n},
               {"makespan_s", r.makespan_s},
               {"throughput_tokens_per_s", out_tokens / span},
               {"requests_per_s", n / span},
               {"goodput_requests_per_s", static_cast<double>(good) / span},
               {"slo_attainment", static_cast<double>(good) / n}};
  for (auto [name, v] :
       {std::pair<const char*, std::vector<double>*>{"ttft_s", &ttft}, {"tpot_s", &tpot}, {"e2e_s", &e2e}})
    for (auto [suffix, qq] : {std::pair<const char*, double>{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}})
      r.metrics.emplace_back(std::string(name) + "_" + suffix, percentile(*v, qq));
  double mean_e2e = 0;
  for (double x : e2e) mean_e2e += x / n;
  r.metrics.insert(
      r.metrics.end(),
      {{"e2e_s_mean", mean_e2e},
       {"mean_requests_in_system", engine.mean_in_system()},
       {"preemptions", static_cast<double>(r.preemptions)},
       {"swaps", static_cast<double>(r.swaps)},
       {"prefix_cache_hit_rate",
        r.prefix_lookups > 0 ? static_cast<double>(r.prefix_hits) / static_cast<double>(r.prefix_lookups) : 0.0},
       {"prefix_tokens_reused", static_cast<double>(r.prefix_tokens_reused)},
       {"kv_transfer_s_mean", engine.kv_transfer_seconds() / n},
       {"kv_transfer_bytes", engine.kv_transfer_bytes()},
       {"tokens_per_verify_step",
        r.verify_steps ? static_cast<double>(r.speculated_tokens) / static_cast<double>(r.verify_steps) : 1.0},
       {"kv_cache_peak_utilization", r.kv_peak_utilization},
       {"kv_blocks_per_replica", static_cast<double>(r.kv_blocks_per_replica)},
       {"memory_weights_bytes", r.memory_weights},
       {"memory_activations_bytes", r.memory_activations},
       {"memory_buffers_bytes", r.memory_buffers},
       {"memory_kv_cache_bytes", r.memory_kv_cache},
       {"memory_reserved_bytes", r.memory_reserved},
       {"iterations", static_cast<double>(r.iterations)},
       {"iteration_cost_memo_hits", static_cast<double>(r.memo_hits)},
       {"iteration_cost_memo_misses", static_cast<double>(r.memo_misses)}});
  return r;
}

void run_serving_samples(const Scenario& s, ServingResult& first, int64_t n, int jobs) {
  n = std::max<int64_t>(1, n);
  const std::vector<std::string> keys = {"ttft_s_p50",
                                         "ttft_s_p99",
                                         "tpot_s_p50",
                                         "tpot_s_p99",
                                         "e2e_s_p50",
                                         "throughput_tokens_per_s",
                                         "goodput_requests_per_s",
                                         "slo_attainment"};
  std::vector<std::vector<double>> values(keys.size(), std::vector<double>(static_cast<size_t>(n)));
  auto take = [&](const Metrics& m, int64_t i) {
    for (size_t k = 0; k < keys.size(); ++k)
      for (const auto& [key, v] : m)
        if (key == keys[k]) values[k][static_cast<size_t>(i)] = v;
  };
  take(first.metrics, 0);
  parallel_for(
      1, n, jobs, [] { return 0; }, [&](int&, int64_t i) { take(run_serving(s, false, false, i).metrics, i); });
  first.samples.clear();
  add_sample_statistics(keys, values, s.seed, first.metrics, first.samples);
}

void write_serving_outputs(const Scenario& s, const ServingResult& r) {
  ServingRecord rec;
  rec.run.name = s.name;
  rec.run.kind = "inference";
  rec.run.network_model = "analytic";
  rec.run.scenario_yaml = s.merged_yaml;
  rec.run.seed = s.serving.arrival_seed;
  rec.run.metrics = r.metrics;
  rec.run.samples = r.samples;
  for (const ServedRequest& q : r.requests)
    rec.requests.push_back({q.replica, q.arrival, q.first_token, q.finish, q.prompt, q.output, q.preemptions});
  rec.iterations = r.iteration_log;
  if (!s.output_sqlite.empty()) write_sqlite(rec, s.output_sqlite);
  if (!s.output_trace.empty()) write_serving_trace(rec, s.output_trace);
}

// The flat fields (`ttft_s_p50`, ...) and, for each latency, an object of its
// percentiles (`"ttft_s": {"p50": ..., "p90": ..., "p99": ...}`).
std::string serving_summary_json(const Scenario& s, const ServingResult& r) {
  std::string out =
      summary_json({{"name", s.name}, {"mode", "inference"}, {"scheduler", s.serving.scheduler}}, r.metrics);
  out.pop_back();  // the closing brace
  for (const char* name : {"ttft_s", "tpot_s", "e2e_s"}) {
    out += std::string(", \"") + name + "\": {";
    const char* sep = "";
    for (const char* q : {"p50", "p90", "p99"})
      for (const auto& [k, v] : r.metrics)
        if (k == std::string(name) + "_" + q) {
          out += std::string(sep) + "\"" + q + "\": " + format_number(v);
          sep = ", ";
        }
    out += "}";
  }
  return out + "}";
}

std::string serving_summary_table(const Scenario& s, const ServingResult& r) {
  std::ostringstream o;
  const InferenceConfig& c = s.serving;
  o << s.name << " — inference, ";
  if (c.prefill_replicas + c.decode_replicas > 0)
    o << c.prefill_replicas << " prefill + " << c.decode_replicas << " decode";
  else
    o << c.replicas;
  o << " replica(s) of tp " << s.parallel.tp << " x pp " << s.parallel.pp << ", " << s.serving.scheduler
    << " scheduler, " << s.serving.router << " router\n";
  for (const auto& [k, v] : r.metrics)
    o << "  " << k << std::string(k.size() < 28 ? 28 - k.size() : 1, ' ') << format_number(v) << "\n";
  return o.str();
}

}  // namespace clustersim
