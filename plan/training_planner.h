// The training planner: model + parallel layout -> Plan. One iteration of a decoder-only
// transformer (dense or MoE) under every layout Megatron-LM / DeepSpeed users run:
//   DP   per-bucket gradient reduction overlapped with the last micro-batch's backward;
//        ZeRO 1/2 (reduce-scatter gradients, all-gather updated parameters), ZeRO 3
//        (all-gather each layer's parameters before its forward and backward,
//        reduce-scatter its gradients every micro-batch)
//   TP   Megatron all-reduces, or sequence parallelism's all-gather / reduce-scatter
//   PP   gpipe, 1f1b and interleaved-1f1b (virtual stages), op by op, with real sends
//        and receives of activations and gradients between stages
//   CP   ring attention: K/V blocks passed around the CP group, overlapped with the
//        blockwise attention of the block already there
//   EP   MoE layers: router, token dispatch and combine all-to-alls over the EP group,
//        grouped expert GEMMs for the local experts; expert gradients reduced over the
//        expert-data-parallel group
//   recompute none | selective | full (full re-runs each layer's forward before its backward)
//
// Layout checks happen here, with the scenario's marks, so an impossible layout is a
// FILE:LINE:COL error before anything runs.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "plan/memory.h"
#include "plan/plan.h"
#include "scenarios/scenario.h"

namespace clustersim {

struct TrainingLayout {
  int64_t dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;
  int64_t etp = 0;  // the experts' TP degree: tp, or 1 (parallel.expert_tp); 0: tp
  int64_t expert_tp() const { return etp > 0 ? etp : tp; }
  int64_t virtual_stages = 1;
  int64_t first_stage_layers = -1, last_stage_layers = -1;  // -1: an even split
  bool shared_expert_overlap = false;  // shared experts beside the MoE dispatcher's communication
  bool moe_allgather = false;          // Megatron-Core's allgather token dispatcher
  std::string moe_permute = "unfused";  // unfused | masked-select | fused (training.moe_permute)
  int64_t microbatch_group = 1;  // interleaved: micro-batches run back to back on one chunk (N)
  int64_t micro_batch = 1;
  int64_t micro_batches = 1;  // per DP rank per iteration
  int64_t global_batch = 1;
  int64_t zero_stage = 0;
  int64_t bucket_params = 40'000'000;
  bool sequence_parallel = false;
  std::string schedule = "1f1b";
  std::string recompute = "none";
  int64_t recompute_num_layers = -1;  // full: the layers of each chunk recomputed, from its first (-1: all)
  bool checkpoint_reentrant = false;  // pytorch-eager: the reentrant checkpoint, each layer rerun whole
  bool recompute_core_attn = false;  // selective: the attention core's forward again in the backward
  bool mla_up_recompute = false;     // selective with mla_up_proj: MLA's up projections again
  bool flash_attention = true;      // training.attention: flash | unfused
  bool fp8 = false;                 // model.dtype fp8: Transformer Engine's FP8 linear layers
  bool fp8_attention = false;       // the attention core in FP8 too
  bool fp8_current_scaling = false; // training.fp8_recipe: tensorwise: each cast computes its tensor's amax first
  bool fp8_params = false;          // parallel.fp8_param_gather: FP8 weights, cast on the shard, gathered in FP8
  bool tp_comm_overlap = false;     // SP collectives chunked around the ring beside their GEMMs
  bool tp_overlap_rs_ring = false;  // the forward's overlapped reduce-scatters by ring exchange (no SMs held)
  int tp_overlap_proj_sms = 16, tp_overlap_fc2_sms = 16;  // SMs the pipelined ones hold (TE's num_sm)
  bool tp_overlap_sm_margin = false;  // the GEMMs beside them planned for the SMs left (set_sm_margin)
  bool tp_async_grad_reduce = true;  // the backward's TP reductions beside the weight-gradient GEMMs
  // The SMs of the backward's bulk all-gathers beside the data-gradient GEMMs (TE's
  // qkv_dgrad and fc1_dgrad num_sm).
  int tp_overlap_qkv_dgrad_sms = 16, tp_overlap_fc1_dgrad_sms = 16;
  // And of its bulk reduce-scatters beside the weight-gradient GEMMs (qkv_wgrad, fc1_wgrad).
  int tp_overlap_qkv_wgrad_sms = 16, tp_overlap_fc1_wgrad_sms = 16;
  bool overlap_grad_reduce = true;  // gradient buckets reduced during the backward
  bool overlap_param_gather = true; // ZeRO 1/2: parameter gathers ahead of the next forward
  bool overlap_p2p = false;         // pipeline p2p posted ahead; false: each blocks the compute stream
  bool p2p_device_sync = false;     // blocking p2p ends in torch.cuda.synchronize() (parallel.batch_p2p_sync)
  bool pp_scatter_gather = true;    // without SP: pipeline tensors sent as 1/tp slices, all-gathered on arrival
  bool zero3_gather_once = false;   // ZeRO 3: parameters gathered once per step and kept
  bool zero3_keep_for_backward = false;  // ZeRO 3: no re-gather before the backward (SHARD_GRAD_OP)
  // ZeRO 3, gathering before each backward: the next layer down's gather is issued from this
  // layer's backward hooks, ahead of its reduce-scatter (parallel.zero3_backward_prefetch pre
  // or post: the same order on the GPU), or when the layer below's backward begins (none).
  bool zero3_prefetch = true;
  bool fsdp2 = false;  // pytorch-eager ZeRO 3 as fully_shard: the gathered parameters copied out per tensor
  DType fsdp_param_dtype = DType::BF16;  // ZeRO 3: gathered parameters
  DType fsdp_reduce_dtype = DType::FP32; // ZeRO 3: reduce-scattered gradients
  bool zero3_grad_once = false;     // ZeRO 3: gradients accumulated unsharded, reduce-scattered once per step
  bool eager = false;               // training.framework: pytorch-eager
  bool fused_cross_entropy = false; // training.cross_entropy: fused: the stack's fused loss kernels
  bool attention_unpad = false;     // training.attention_padding: unpad (bert_padding around the kernel)
  int train_metrics = 0;            // training.train_metrics: cross-entropy metrics after each backward
  // training.loss_sync: host waits and all-reduces of each micro-batch's loss before its backward
  int loss_host_syncs = 0;
  bool loss_allreduce = false;
  bool grad_accumulation_fusion = true;  // megatron: wgrad GEMMs accumulate into the main gradient
  // training.plan_revision 2026-12-04: no separate dropout or bias-gradient backward kernels,
  // the optimizer as one streaming pass (replaying real runs recorded before 2026-12-05).
  bool plan_before_2026_12_05 = false;
  // training.optimizer_state: the bytes a parameter of the optimizer's master (4, 2 as BF16
  // remainders, 0 for BF16 state) and of each moment (4, or 2 for BF16 state).
  double master_bytes = 4, moment_bytes = 4;
  bool local_impl = false;               // training.transformer_impl: local (Megatron-LM's own layer)
  bool grad_nan_check = false;           // training.grad_nan_check: each bucket's norm and a host wait
  bool cp_allgather = false;             // parallel.cp_comm all-gather: K/V gathered over CP, no ring
  bool rope_fusion = true;                // megatron: the rotary embedding in TE's fused kernel
  bool defer_embedding_wgrad = false;     // megatron: the output layer's wgrad GEMMs after the last backward
  int64_t wgrad_deferral_limit = 0;       // of the first this many micro-batches (0: all)
  DType grad_dtype = DType::FP32;   // ZeRO 0-2: the main-gradient buffer, reduced over DP in this type
};

struct TrainingPlan {
  Plan plan;
  TrainingLayout layout;
  MemoryBreakdown memory;  // the stage that needs the most
  std::vector<MemoryBreakdown> stage_memory;
  double model_flops_per_rank = 0;     // one iteration, mean over ranks, no recompute (MFU numerator)
  double hardware_flops_per_rank = 0;  // everything the GPUs execute, mean over ranks
  // The causal attention products' share of model_flops_per_rank (QK^T and PV under a
  // causal mask, counted as half the square). A source that counts the whole square
  // (Megatron-LM's num_floating_point_operations until 2025-03) counts these twice.
  double causal_attention_flops_per_rank = 0;
  double moe_hot_rank_load = 1;        // skewed MoE routing: the most-loaded EP rank's tokens / an even share (mean)
};

struct PlannerOptions {
  bool use_symmetry = true;  // mark mirror ranks when the layout makes them provably identical
  bool check_memory = true;  // refuse a layout that does not fit (a cost probe of one layer skips it)
};

TrainingPlan build_training_plan(const Scenario& s, const PlannerOptions& opt = {});

// Of a pipeline chunk's `layers` transformer layers, how many run their forward again in
// the backward under full recompute (training.recompute_num_layers: the first N; all by
// default); 0 without it. Multi-token prediction layers are not counted here.
int64_t recomputed_layers(const TrainingLayout& l, int64_t layers);

// The main-gradient buffer's dtype (parallel.grad_reduce_dtype; auto: FP16 for fp16
// models, else FP32).
DType main_grad_dtype(const Scenario& s);

// Rank strides of each parallel dimension from the placement order (innermost first);
// rank r sits on GPU r. EP is carved out of DP (Megatron), so it has no stride of its own.
struct PlacementStrides {
  int64_t tp = 1, cp = 1, dp = 1, pp = 1;
};
PlacementStrides placement_strides(const std::string& placement, const TrainingLayout& l);

// Layers of virtual stage vs of n: {first layer, layer count}; an even split, and when
// it does not divide, the stages one layer short are the two ends inward (Llama 3 405B:
// 126 layers over 16 stages are 7, fourteen of 8, 7).
std::pair<int64_t, int64_t> virtual_stage_layers(int64_t layers, int64_t n, int64_t vs);
// The layout's split: {first layer, layers} of virtual stage vs (= chunk·pp + stage), the
// first and last stages' counts as the layout gives them (each split evenly over its
// chunks) and the rest even over the middle stages; else virtual_stage_layers.
std::pair<int64_t, int64_t> stage_layers(const TrainingLayout& l, int64_t layers, int64_t vs);

// The layout the scenario asks for, checked (InputError at the offending key).
TrainingLayout check_training_layout(const Scenario& s);
// Memory per pipeline stage for a checked layout (no plan built).
std::vector<MemoryBreakdown> training_stage_memory(const Scenario& s, const TrainingLayout& l);

// The order in which one pipeline stage runs forward (F) and backward (B) blocks of
// (micro-batch, model chunk); exposed for tests.
struct PipelineBlock {
  bool forward = true;
  int64_t micro_batch = 0;
  int64_t chunk = 0;
};
std::vector<PipelineBlock> pipeline_schedule(const std::string& schedule, int64_t pp, int64_t virtual_stages,
                                             int64_t micro_batches, int64_t stage, int64_t microbatch_group = 0);

}  // namespace clustersim
