// The scenario: every key of a scenario file, typed, with its unit and default.
// scenarios/schema.cc holds the one table of keys (type, default, one-line doc); the
// loader walks the YAML against it, so a typo is an error with file:line:col, never a
// silently ignored key.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "scenarios/error.h"
#include "scenarios/model.h"
#include "scenarios/yaml_tree.h"
#include "topology/topology.h"

namespace clustersim {

struct ParallelConfig {
  int64_t dp = 0;  // 0: derived as GPUs / (tp · pp · cp)
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t cp = 1;
  int64_t ep = 1;
  bool moe_shared_expert_overlap = false;  // shared experts beside the dispatcher's communication
  std::string moe_dispatcher = "alltoall";  // alltoall | allgather (Megatron-Core's token dispatchers)
  int64_t expert_tp = 0;  // the experts' own TP degree (Megatron-Core's --expert-tensor-parallel-size); 0: tp
  bool sequence_parallel = false;
  int64_t zero_stage = 0;
  std::string schedule = "1f1b";
  int64_t virtual_stages = 1;
  // Layers on the first and the last pipeline stage where they differ from the rest
  // (Megatron-Core's --decoder-first/last-pipeline-num-layers); -1: an even split.
  int64_t first_stage_layers = -1, last_stage_layers = -1;
  int64_t microbatch_group = 0;  // interleaved: contiguous micro-batches per chunk (0: pp)
  int64_t micro_batch = 1;
  std::string placement = "tp-cp-ep-dp-pp";
  std::string cp_comm = "p2p";  // p2p (TE's ring) | all-gather (K/V gathered over CP)
  int64_t bucket_params = 40'000'000;  // DP gradient bucket (Megatron's default 40M parameters)
  bool tp_comm_overlap = false;        // Megatron-Core --tp-comm-overlap (TE userbuffers)
  std::string tp_overlap_reduce_scatter = "pipeline";  // the forward's overlapped reduce-scatters: pipeline | ring-exchange
  int64_t tp_overlap_proj_sms = 16, tp_overlap_fc2_sms = 16;  // SMs of those pipelined kernels (TE's num_sm)
  bool tp_overlap_sm_margin = false;   // their GEMMs told to leave those SMs (TE's set_sm_margin)
  bool tp_async_grad_reduce = true;  // the backward's TP reductions beside the weight-gradient GEMMs
  // SMs of the backward's bulk overlaps (TE's num_sm for qkv_dgrad, fc1_dgrad: all-gathers;
  // qkv_wgrad, fc1_wgrad: reduce-scatters)
  int64_t tp_overlap_qkv_dgrad_sms = 16, tp_overlap_fc1_dgrad_sms = 16;
  int64_t tp_overlap_qkv_wgrad_sms = 16, tp_overlap_fc1_wgrad_sms = 16;
  bool overlap_grad_reduce = true;     // gradient buckets reduced during the backward
  bool overlap_param_gather = true;    // distributed optimizer: parameter gathers during the next forward
  bool fp8_param_gather = false;       // FP8 models: FP8 weights, gathered in FP8 (Megatron's --fp8-param-gather)
  std::string overlap_p2p_comm = "auto";  // pipeline p2p posted ahead (true) or blocking (false)
  std::string batch_p2p_sync = "auto";    // blocking p2p ends in torch.cuda.synchronize() (Megatron's batch_p2p_sync)
  bool pp_scatter_gather = true;           // without SP: pipeline tensors as 1/tp slices, gathered on arrival
  std::string zero3_param_gather = "micro-batch";  // ZeRO 3: gather per micro-batch, or once per step
  std::string zero3_grad_sync = "micro-batch";     // ZeRO 3: reduce-scatter per micro-batch, or once per step
  std::string zero3_backward_prefetch = "pre";     // ZeRO 3: when the layer below's backward gather is issued
  std::string fsdp_param_dtype = "auto";   // ZeRO 3: dtype parameters are gathered in (auto: the stack's)
  std::string fsdp_reduce_dtype = "auto";  // ZeRO 3: dtype gradients are reduce-scattered in
  int64_t fsdp_version = 1;                // ZeRO 3 under pytorch-eager: PyTorch's FSDP (1) or fully_shard (2)
  std::string grad_reduce_dtype = "auto";  // ZeRO 0-2: the main-gradient buffer's dtype, reduced in it
};

struct TrainingConfig {
  int64_t global_batch = 0;  // 0: pp micro-batches per DP rank (one without a pipeline)
  int64_t iterations = 1;
  std::string recompute = "none";
  // Under full recompute, the layers of each pipeline chunk that run again, counted from
  // the chunk's first (Megatron-Core's --recompute-method block --recompute-num-layers);
  // -1: every layer.
  int64_t recompute_num_layers = -1;
  // pytorch-eager: torch.utils.checkpoint with use_reentrant=True, which reruns a layer whole
  // (no early stop); false: the non-reentrant checkpoint.
  bool checkpoint_reentrant = false;
  // Under selective recompute, what runs again in the backward (Megatron-Core's
  // --recompute-modules): core_attn | mla_up_proj.
  std::vector<std::string> recompute_modules = {"core_attn"};
  std::string optimizer = "adam";
  // The optimizer's state and master weights: fp32 (Megatron's distributed optimizer: FP32
  // moments and master) | fp32-remainders (Apex's DistributedFusedAdam under a BF16 model:
  // FP32 moments, the master's low 16 bits beside the BF16 parameter) | bf16 (its optim.dtype
  // bf16: BF16 moments, the BF16 parameters updated in place, no master).
  std::string optimizer_state = "fp32";
  std::string attention = "flash";  // flash (fused, IO-aware) | unfused (scores and softmax through HBM)
  // none | unpad (flash-attn's bert_padding around a variable-length kernel: MPT's flash path)
  std::string attention_padding = "none";
  // Metrics the trainer updates from the logits after each micro-batch's backward, each an FP32
  // cross-entropy under autocast (pytorch-eager: Composer with MPT's two)
  int train_metrics = 0;
  std::string plan_revision = "current";  // current | 2026-12-04 (replaying real runs recorded before 2026-12-05)
  std::string loss_sync = "auto";  // auto | none | check | allreduce | check-allreduce
  bool fp8_attention = false;       // with model.dtype fp8: the attention core in FP8 too
  std::string fp8_recipe = "delayed";  // with model.dtype fp8: delayed | tensorwise (current per-tensor scaling)
  std::string framework = "megatron";  // megatron (fused kernels, BF16 weights) | pytorch-eager
  bool grad_accumulation_fusion = true;  // wgrad GEMMs accumulate into the main gradient in place
  // transformer-engine (Megatron-Core's TE modules) | local (Megatron-LM's own layer of 2021-22)
  std::string transformer_impl = "transformer-engine";
  std::string grad_nan_check = "auto";  // auto | true | false: Megatron's per-bucket NaN check of the gradients
  bool rope_fusion = true;               // rotary embedding in one fused kernel each way
  std::string moe_permute = "unfused";   // unfused | masked-select | fused (MoE token permutation)
  bool defer_embedding_wgrad = false;    // the output layer's weight gradients run after the last backward
  int64_t wgrad_deferral_limit = 0;      // of the first this many micro-batches (0: all)
  bool launch_blocking = false;     // CUDA_LAUNCH_BLOCKING=1: each launch returns when its kernel ends
  std::string cross_entropy = "unfused";  // unfused (the FP32 loss passes) | fused (the stack's fused loss kernels)
  double step_overhead_s = 0;       // host work per iteration the GPUs wait for
  bool step_overhead_set = false;   // false: the default
  double duration_s = 86400;        // wall-clock time of the job: goodput under faults: is over it
};

// Spread between GPUs, kernels and links (sim/variability.h; docs/model.md, "Variability").
struct SpreadDist {
  std::string dist = "none";  // none | normal | lognormal
  double sigma = 0;           // of the speed factor (normal) or of its logarithm (lognormal)
};

// A named slow component: a GPU or a node's GPUs run `slowdown` times longer, a link
// moves bytes `slowdown` times slower.
struct Straggler {
  std::string kind;  // gpu | node | link
  int64_t index = 0;  // the GPU or node
  std::string link;   // "SRC->DST" (one direction) or "SRC<->DST" (both), vertex names as in output.sqlite
  double slowdown = 1;
  SourceMark mark;
};

// One job of a `jobs:` file: its own scenario, placed on the shared cluster from a node on.
struct JobSpec {
  std::string scenario;        // path as written, relative to the file that names it
  std::string path;            // the same, resolved (scenarios/readers.h, as_path)
  int64_t first_node = 0;      // the job's nodes are first_node .. first_node + its cluster.nodes - 1
  std::vector<int64_t> nodes;  // or these nodes of the shared cluster, in the job's node order
  SourceMark mark;
};

struct VariabilityConfig {
  SpreadDist gpu_speed, link_speed;
  double kernel_jitter = 0;  // coefficient of variation of each kernel's time
  std::vector<Straggler> stragglers;
  bool any() const {
    return gpu_speed.dist != "none" || link_speed.dist != "none" || kernel_jitter > 0 || !stragglers.empty();
  }
};

// Failures, restarts and checkpoints over training.duration (sim/faults.h; docs/model.md,
// "Failures and goodput").
struct FaultConfig {
  bool set = false;
  double gpu_mtbf_s = 0, node_mtbf_s = 0, link_mtbf_s = 0;  // 0: that component never fails
  std::vector<double> failures_s;   // a failure trace (times from the start) instead of, or beside, MTBFs
  double restart_s = 600;           // detection, restart and reload
  double checkpoint_bandwidth = 0;  // bytes/s to storage, all writers together (required)
  double checkpoint_interval_s = 0;  // 0: auto (the interval of highest expected goodput)
  int64_t checkpoint_size_bytes = -1;  // -1: the model's weights and optimizer state
  int64_t hot_spares = -1;             // spare nodes; -1: a spare is always there
  double repair_s = 4 * 3600.0;        // a failed node's time away when spares run out
};

// A published or measured value the scenario reproduces (`clustersim accuracy`).
struct Reference {
  bool set = false;
  std::string metric;  // a --json metric of `run`
  double value = 0;    // in `unit`
  std::string unit;    // s | ms | us | % | fraction | tokens/s | TFLOP/s | requests/s | GiB | bytes
  std::string source;
  // How the source counts attention's FLOPs in a tflops_per_gpu or mfu figure: "causal"
  // (half the QK^T and PV square under a causal mask, the simulator's own count) or
  // "full" (the whole square, as Megatron-LM's num_floating_point_operations did until
  // 2025-03); `accuracy` converts the prediction to the source's count.
  std::string attention_flops = "causal";
  // Settings the source does not state (key path -> the values a run like it could have
  // had): `accuracy` also predicts each combination and reports the band they span.
  std::vector<std::pair<std::string, YNode>> unstated;
};

struct LengthDist {
  std::string dist = "fixed";  // fixed | uniform | lognormal | zipf
  int64_t value = 1024, min = 1, max = 4096;
  double mean = 1024, sigma = 0.5, alpha = 1.2;
};

struct InferenceConfig {
  int64_t replicas = 1;
  std::string scheduler = "vllm";  // static | orca | vllm | sarathi
  std::string router = "round-robin";
  int64_t max_batch_size = 256;
  int64_t max_batch_tokens = 8192;
  int64_t kv_block_tokens = 16;
  int64_t requests = 1000;
  std::string arrival_process = "poisson";  // poisson | gamma | fixed | closed
  int64_t concurrency = 0;                  // closed: clients, each sending its next request when one ends
  double iteration_overhead_s = 1e-3;       // host work per engine step the GPUs wait for
  double request_overhead_s = 5e-3;         // front end per request before the engine sees it
  double rate_per_s = 8;
  double cv = 1.0;  // gamma: coefficient of variation of inter-arrival times
  uint64_t arrival_seed = 1;
  std::string trace;  // CSV: arrival_s, prompt_tokens, output_tokens
  LengthDist prompt, output{"fixed", 256, 1, 4096, 256, 0.5, 1.2};
  double slo_ttft_s = 0.5, slo_tpot_s = 0.05;
  double fabric_share = 1;  // jobs: the fraction of scale-out bandwidth other jobs leave (set by sim/jobs.cc)
  int64_t prefill_replicas = 0, decode_replicas = 0;
  int64_t lookahead = 0;
  double acceptance_rate = 0;
  std::string draft_model;
  bool prefix_caching = false;                   // reuse cached KV blocks of shared prompt prefixes
  int64_t prefix_tokens = 0, prefix_groups = 0;  // each request opens with one of `groups` shared prefixes
  std::string preemption = "recompute";          // recompute | swap
  int64_t swap_space_bytes = int64_t{4} << 30;   // host memory for swapped KV, per GPU
  bool weight_dtype_set = false, kv_dtype_set = false;
  DType weight_dtype = DType::BF16;  // unset: the model's dtype
  DType kv_dtype = DType::BF16;      // unset: the model's dtype
  DType weight_dtype_for(DType model) const { return weight_dtype_set ? weight_dtype : model; }
  DType kv_dtype_for(DType model) const { return kv_dtype_set ? kv_dtype : model; }
  std::string decode_attention = "streaming";  // streaming | turbomind-v0.1
  std::string fp8_context_fmha = "auto";       // auto | on | off: a prefill's context attention in FP8
  std::string sampler = "auto";  // auto (the scheduler's engine) | none | trtllm | vllm-v0 | vllm-v1
  // The sampler the engine runs on the logits: `sampler`, or for auto the scheduler's engine's.
  std::string sampler_for_engine() const {
    if (sampler != "auto") return sampler;
    if (scheduler == "trtllm") return "trtllm";
    if (scheduler == "vllm") return "vllm-v0";
    if (scheduler == "vllm-v1") return "vllm-v1";
    return "none";
  }
  std::string engine_build = "default";        // default | trtllm-bench: how the engine's limits were chosen
  bool chunked_context = false;                // trtllm: contexts chunked into the budget the decodes leave
  double kv_cache_free_fraction = 0.9;         // trtllm: the KV cache's share of the memory the engine leaves
};

struct Scenario {
  std::string path;                 // the file it was loaded from
  std::vector<std::string> inputs;  // every file read for it: path, then its includes (canonical)
  std::string name;

  ClusterSpec cluster;  // node preset resolved, overrides applied, fabric filled in
  ModelConfig model;    // preset resolved, overrides applied
  ParallelConfig parallel;
  TrainingConfig training;
  bool inference = false;  // an `inference:` block was given
  InferenceConfig serving;
  VariabilityConfig variability;
  FaultConfig faults;
  std::vector<JobSpec> jobs;  // several jobs on this cluster (sim/jobs.h); then no model: of its own
  std::string chakra_dir;     // workload.chakra: the plan is read from Chakra traces (plan/chakra.h), no model:

  std::string algorithm = "auto";
  std::string protocol = "auto";
  std::string network_model = "analytic";
  std::string calibration;
  std::string output_sqlite;
  std::string output_trace;
  // Which ranks and which pipeline stages the trace shows (empty: all it has). A listed
  // rank that mirrors another shows that rank's spans under its own number.
  std::vector<int64_t> trace_ranks, trace_stages;
  uint64_t seed = 1;
  Reference reference;
  bool power_cap = true;  // cluster.power_cap: clocks under the board's power limit
  double board_spread = 0.0148;  // cluster.board_spread: boards' capped-rate coefficient of variation
  int64_t memory_reserve_bytes = -1;  // per GPU, kept from the model by the stack; -1: the default
  bool allow_large = false;           // loaded past the work budgets (--allow-large)

  std::vector<std::pair<std::string, YNode>> sweep;  // key path -> list of values

  std::map<std::string, SourceMark> marks;  // dotted key -> where its value was written
  std::string merged_yaml;                  // the merged document, as the run saw it
  std::string config_yaml;                  // the same without its sweep: block (what a sweep point varies)

  int64_t gpus() const { return static_cast<int64_t>(cluster.node.gpus) * cluster.nodes; }
  // Where `key` was written; falls back to its nearest written parent, then the file.
  SourceMark mark(const std::string& key) const;
};

// Past the work budgets (2^20 GPUs, 10^7 requests, 65,536 micro-batches): refused at
// load unless allow_large (the commands' --allow-large).
struct LoadOptions {
  bool allow_large = false;
};

// Loads a scenario file with its includes, applies `--set key=value` overrides in
// order, and checks every key. Throws InputError on the first problem.
Scenario load_scenario(const std::string& path, const std::vector<std::string>& sets = {},
                       const LoadOptions& options = {});
// The same, then `overrides` (dotted key -> value) on top: a sweep point. The values keep
// the marks of where they were written, so a bad one is reported at its own line.
Scenario load_scenario(const std::string& path, const std::vector<std::string>& sets,
                       const std::vector<std::pair<std::string, YNode>>& overrides, const LoadOptions& options = {});

// One row per scenario key: for `clustersim keys` and docs/scenario-keys.md.
struct KeyDoc {
  std::string key, type, default_value, doc;
};
std::vector<KeyDoc> scenario_key_docs();

// The network model `auto` resolves to for a cluster: flow where concurrent transfers must
// share a link (nodes with fewer NICs than GPUs, an oversubscribed fabric, a topology file's
// explicit links), analytic otherwise.
std::string auto_network_model(const ClusterSpec& c);

}  // namespace clustersim
