// The training layout: the scenario's parallel settings checked against the model and the
// cluster (an InputError at the offending key), and what follows from them — the stages'
// layers, the placement's rank strides, the main gradients' type.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "plan/training_planner.h"
#include "scenarios/error.h"

namespace clustersim {
namespace {

[[noreturn]] void fail(const Scenario& s, const std::string& key, const std::string& msg) {
  throw InputError(s.mark(key), msg);
}

std::string str(int64_t v) { return std::to_string(v); }
std::string decimal(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// A dtype key's value (auto | fp32 | bf16 | fp16): the named type, or `automatic`.
DType chosen_dtype(const std::string& v, DType automatic) {
  return v == "fp32" ? DType::FP32 : v == "bf16" ? DType::BF16 : v == "fp16" ? DType::FP16 : automatic;
}

}  // namespace

std::pair<int64_t, int64_t> virtual_stage_layers(int64_t layers, int64_t n, int64_t vs) {
  const int64_t base = layers / n, extra = layers % n;
  if (extra == 0) return {vs * base, base};
  // An uneven split leaves n - extra stages one layer short. They are taken from the two
  // ends inward (first, last, second, second to last, ...): the first stage holds the
  // embedding and the most micro-batches in flight, the last the output layer and the
  // loss. Llama 3 405B's 126 layers over 16 stages: 7, fourteen of 8, 7 (Dubey et al.
  // 2024, section 3.3.2).
  const int64_t short_stages = n - extra;
  auto is_short = [&](int64_t i) { return (i <= n - 1 - i ? 2 * i : 2 * (n - 1 - i) + 1) < short_stages; };
  int64_t first = 0;
  for (int64_t i = 0; i < vs; ++i) first += base + (is_short(i) ? 0 : 1);
  return {first, base + (is_short(vs) ? 0 : 1)};
}

std::pair<int64_t, int64_t> stage_layers(const TrainingLayout& l, int64_t layers, int64_t vs) {
  const int64_t n = l.pp * l.virtual_stages;
  if (l.first_stage_layers < 0 && l.last_stage_layers < 0) return virtual_stage_layers(layers, n, vs);
  const int64_t first = l.first_stage_layers, last = l.last_stage_layers;
  const int64_t given = std::max<int64_t>(first, 0) + std::max<int64_t>(last, 0);
  const int64_t middle_stages = l.pp - (first >= 0 ? 1 : 0) - (last >= 0 ? 1 : 0);
  const int64_t middle = middle_stages > 0 ? (layers - given) / middle_stages : 0;
  auto count = [&](int64_t v) {
    const int64_t st = v % l.pp;
    const int64_t stage = st == 0 && first >= 0 ? first : st == l.pp - 1 && last >= 0 ? last : middle;
    return stage / l.virtual_stages;
  };
  int64_t start = 0;
  for (int64_t v = 0; v < vs; ++v) start += count(v);
  return {start, count(vs)};
}

DType main_grad_dtype(const Scenario& s) {
  return chosen_dtype(s.parallel.grad_reduce_dtype, s.model.dtype == DType::FP16 ? DType::FP16 : DType::FP32);
}

TrainingLayout check_training_layout(const Scenario& s) {
  const ParallelConfig& p = s.parallel;
  const ModelConfig& m = s.model;
  if (s.inference)
    fail(s, "inference",
         "a training step's plan needs a training scenario, expected no inference block: a serving scenario's "
         "iterations are planned as its engine forms them, and `clustersim run` simulates it");
  // Training runs in a floating-point recipe (weights and gradients of int8 / int4 are a
  // serving format), and FP8 needs FP8 tensor cores.
  if (m.dtype == DType::INT8 || m.dtype == DType::INT4)
    fail(s, "model.dtype",
         "training in " + std::string(to_string(m.dtype)) +
             " is not a recipe a training stack runs, expected fp32, bf16, fp16 or fp8");
  if (m.dtype == DType::FP8 && s.cluster.node.gpu.peak_fp8 <= 0)
    fail(s, "model.dtype",
         "FP8 training needs FP8 tensor cores, which " + s.cluster.node.gpu.name +
             " lacks; expected bf16 or fp16 there");
  TrainingLayout l;
  l.tp = p.tp;
  l.pp = p.pp;
  l.cp = p.cp;
  l.ep = p.ep;
  l.etp = p.expert_tp > 0 ? p.expert_tp : p.tp;
  l.virtual_stages = p.virtual_stages;
  l.first_stage_layers = p.first_stage_layers;
  l.last_stage_layers = p.last_stage_layers;
  l.shared_expert_overlap = p.moe_shared_expert_overlap;
  l.moe_allgather = p.moe_dispatcher == "allgather";
  l.micro_batch = p.micro_batch;
  l.zero_stage = p.zero_stage;
  l.bucket_params = p.bucket_params;
  l.schedule = p.schedule;
  l.recompute = s.training.recompute;
  // Megatron-Core's --recompute-modules under selective granularity (default core_attn).
  auto recomputes = [&](const char* module) {
    return l.recompute == "selective" &&
           std::find(s.training.recompute_modules.begin(), s.training.recompute_modules.end(), module) !=
               s.training.recompute_modules.end();
  };
  if (l.recompute == "op" && s.training.framework != "pytorch-eager")
    fail(s, "training.recompute",
         "training.recompute: op is PyTorch's selective checkpointing (TorchTitan's policy), expected "
         "training.framework: pytorch-eager");
  if (l.recompute == "op" && (s.training.attention == "triton" || s.training.attention == "unfused" ||
                              s.training.attention_padding != "none" || m.biases))
    fail(s, "training.recompute",
         "training.recompute: op follows TorchTitan's Llama block: linears without bias (aten.mm) and PyTorch's "
         "SDPA, which its policy saves, expected training.attention flash or flash2, no attention_padding and a "
         "model without linear biases");
  if (l.recompute == "op" && m.dtype == DType::FP8)
    fail(s, "training.recompute",
         "training.recompute: op saves matmul outputs, which Transformer Engine's FP8 linears do not run as "
         "matmuls, expected model.dtype bf16 or fp16");
  l.recompute_num_layers = s.training.recompute_num_layers;
  l.checkpoint_reentrant = s.training.checkpoint_reentrant;
  if (l.checkpoint_reentrant && (s.training.framework != "pytorch-eager" || l.recompute != "full"))
    fail(s, "training.checkpoint_reentrant",
         "training.checkpoint_reentrant names torch.utils.checkpoint's variant, expected training.framework: "
         "pytorch-eager with training.recompute: full (the op policy needs the non-reentrant one)");
  if (s.training.recompute_num_layers >= 0 && l.recompute != "full")
    fail(s, "training.recompute_num_layers",
         "training.recompute_num_layers counts the layers that full recompute runs again, expected "
         "training.recompute: full");
  l.recompute_core_attn = recomputes("core_attn");
  l.mla_up_recompute = recomputes("mla_up_proj");
  l.sequence_parallel = p.sequence_parallel && p.tp > 1;
  l.flash_attention = s.training.attention != "unfused";  // flash, flash2 and triton are fused kernels
  l.fp8 = m.dtype == DType::FP8;
  l.fp8_attention = l.fp8 && s.training.fp8_attention;
  l.fp8_current_scaling = l.fp8 && s.training.fp8_recipe == "tensorwise";
  l.fp8_params = l.fp8 && p.fp8_param_gather;
  if (p.fp8_param_gather && (!l.fp8 || s.training.framework != "megatron" || p.zero_stage < 1))
    fail(
        s, "parallel.fp8_param_gather",
        "parallel.fp8_param_gather keeps Transformer Engine's FP8 weights in Megatron's distributed optimizer or FSDP, "
        "expected model.dtype: fp8, training.framework: megatron and parallel.zero_stage >= 1");
  l.tp_comm_overlap = p.tp_comm_overlap && l.sequence_parallel;
  l.tp_overlap_rs_ring = l.tp_comm_overlap && p.tp_overlap_reduce_scatter == "ring-exchange";
  l.tp_overlap_proj_sms = static_cast<int>(p.tp_overlap_proj_sms);
  l.tp_overlap_fc2_sms = static_cast<int>(p.tp_overlap_fc2_sms);
  l.tp_overlap_sm_margin = p.tp_overlap_sm_margin;
  l.tp_async_grad_reduce = p.tp_async_grad_reduce;
  if (!p.tp_async_grad_reduce && p.tp_comm_overlap)
    fail(s, "parallel.tp_async_grad_reduce",
         "the TP overlap (Transformer Engine's userbuffers) reduces beside the weight-gradient GEMMs, expected "
         "parallel.tp_async_grad_reduce left true with parallel.tp_comm_overlap");
  l.tp_overlap_qkv_dgrad_sms = static_cast<int>(p.tp_overlap_qkv_dgrad_sms);
  l.tp_overlap_fc1_dgrad_sms = static_cast<int>(p.tp_overlap_fc1_dgrad_sms);
  l.tp_overlap_qkv_wgrad_sms = static_cast<int>(p.tp_overlap_qkv_wgrad_sms);
  l.tp_overlap_fc1_wgrad_sms = static_cast<int>(p.tp_overlap_fc1_wgrad_sms);
  for (const char* key :
       {"parallel.tp_overlap_reduce_scatter", "parallel.tp_overlap_proj_sms", "parallel.tp_overlap_fc2_sms",
        "parallel.tp_overlap_sm_margin", "parallel.tp_overlap_qkv_dgrad_sms", "parallel.tp_overlap_fc1_dgrad_sms",
        "parallel.tp_overlap_qkv_wgrad_sms", "parallel.tp_overlap_fc1_wgrad_sms"})
    if (s.marks.count(key) && !p.tp_comm_overlap)
      fail(s, key, std::string(key) + " shapes the TP overlap's kernels, expected parallel.tp_comm_overlap: true");
  l.overlap_grad_reduce = p.overlap_grad_reduce;
  l.overlap_p2p = p.overlap_p2p_comm == "true" || (p.overlap_p2p_comm == "auto" && p.schedule == "interleaved-1f1b");
  l.pp_scatter_gather = p.pp_scatter_gather;
  l.overlap_param_gather = p.overlap_param_gather;
  l.zero3_gather_once = p.zero_stage >= 3 && p.zero3_param_gather == "step";
  l.zero3_grad_once = p.zero_stage >= 3 && p.zero3_grad_sync == "step";
  l.zero3_keep_for_backward = p.zero_stage >= 3 && p.zero3_param_gather != "micro-batch";
  l.zero3_prefetch = p.zero3_backward_prefetch != "none";
  l.eager = s.training.framework == "pytorch-eager";
  if (p.fsdp_version != 1 && (!l.eager || p.zero_stage < 3))
    fail(s, "parallel.fsdp_version",
         "parallel.fsdp_version names PyTorch's FSDP, expected parallel.zero_stage: 3 under training.framework: "
         "pytorch-eager");
  l.fsdp2 = l.eager && p.zero_stage >= 3 && p.fsdp_version == 2;
  l.p2p_device_sync =
      !l.overlap_p2p && l.pp > 1 &&
      (p.batch_p2p_sync == "true" || (p.batch_p2p_sync == "auto" && !l.eager && !s.training.launch_blocking));
  l.grad_accumulation_fusion = s.training.grad_accumulation_fusion;
  l.plan_before_2026_12_05 = s.training.plan_revision == "2026-12-04";
  const std::string& state = s.training.optimizer_state;
  l.master_bytes = state == "fp32" ? 4.0 : state == "fp32-remainders" ? 2.0 : 0.0;
  l.moment_bytes = state == "bf16" ? 2.0 : 4.0;
  // Apex's DistributedFusedAdam keeps its state (and the remainders that complete a BF16
  // parameter to FP32) in its distributed shard, beside a BF16 model's parameters.
  if (state != "fp32" && (s.model.dtype != DType::BF16 || p.zero_stage < 1 || p.zero_stage > 2 ||
                          s.training.framework != "megatron" || p.fp8_param_gather))
    fail(s, "training.optimizer_state",
         "training.optimizer_state " + state +
             " is Apex's DistributedFusedAdam beside BF16 parameters, expected model.dtype bf16, "
             "parallel.zero_stage 1 or 2, training.framework megatron and no parallel.fp8_param_gather");
  l.local_impl = s.training.transformer_impl == "local";
  if (l.local_impl && l.eager)
    fail(s, "training.transformer_impl",
         "training.framework: pytorch-eager has no Megatron layer, expected "
         "training.transformer_impl: transformer-engine");
  if (l.local_impl && m.dtype == DType::FP8)
    fail(s, "training.transformer_impl",
         "Megatron-LM's local layer has no FP8 (Transformer Engine runs it), expected "
         "model.dtype bf16 or fp16, or training.transformer_impl: transformer-engine");
  l.rope_fusion = s.training.rope_fusion;
  l.cp_allgather = s.parallel.cp_comm == "all-gather";
  l.defer_embedding_wgrad = s.training.defer_embedding_wgrad;
  l.wgrad_deferral_limit = s.training.wgrad_deferral_limit;
  if (l.defer_embedding_wgrad && l.eager)
    fail(s, "training.defer_embedding_wgrad",
         "training.defer_embedding_wgrad is Megatron-Core's, expected training.framework: megatron");
  if (s.marks.count("training.wgrad_deferral_limit") && !l.defer_embedding_wgrad)
    fail(s, "training.wgrad_deferral_limit",
         "training.wgrad_deferral_limit bounds the deferral, expected training.defer_embedding_wgrad: true");
  l.grad_dtype = main_grad_dtype(s);
  if (p.grad_reduce_dtype != "auto" && (p.zero_stage >= 3 || l.eager))
    fail(s, "parallel.grad_reduce_dtype",
         p.zero_stage >= 3
             ? "parallel.grad_reduce_dtype shapes Megatron's ZeRO 0-2 gradient buffer, expected "
               "parallel.fsdp_reduce_dtype under zero_stage 3"
             : "parallel.grad_reduce_dtype shapes Megatron's gradient buffer, expected training.framework: "
               "megatron (PyTorch DDP reduces the FP32 .grad)");
  // Megatron's "ZeRO 3" gathers the 16-bit weights it computes with; plain PyTorch FSDP
  // without a mixed-precision policy gathers the FP32 parameters autocast then casts.
  l.fsdp_param_dtype = chosen_dtype(p.fsdp_param_dtype, l.eager                 ? DType::FP32
                                                        : m.dtype != DType::FP8 ? m.dtype
                                                        : p.fp8_param_gather    ? DType::FP8
                                                                                : DType::BF16);
  l.fsdp_reduce_dtype = chosen_dtype(p.fsdp_reduce_dtype, m.dtype == DType::FP16 ? DType::FP16 : DType::FP32);
  if (p.zero_stage < 3) {
    const char* key = p.zero3_param_gather != "micro-batch"               ? "parallel.zero3_param_gather"
                      : p.zero3_grad_sync != "micro-batch"                ? "parallel.zero3_grad_sync"
                      : p.fsdp_param_dtype != "auto"                      ? "parallel.fsdp_param_dtype"
                      : p.fsdp_reduce_dtype != "auto"                     ? "parallel.fsdp_reduce_dtype"
                      : s.marks.count("parallel.zero3_backward_prefetch") ? "parallel.zero3_backward_prefetch"
                                                                          : nullptr;
    if (key) fail(s, key, std::string(key) + " shapes ZeRO 3 / FSDP, expected parallel.zero_stage: 3");
  }
  if (l.eager) {
    // Plain PyTorch shards data (DDP) or parameters (FSDP: zero_stage 3); the model
    // parallelisms are Megatron's.
    const char* key = p.tp > 1   ? "parallel.tp"
                      : p.pp > 1 ? "parallel.pp"
                      : p.cp > 1 ? "parallel.cp"
                      : p.ep > 1 ? "parallel.ep"
                                 : nullptr;
    if (key)
      fail(s, key,
           std::string(key) +
               " > 1 with training.framework: pytorch-eager, expected 1 (plain PyTorch "
               "runs data parallel or FSDP; model parallelism is training.framework: megatron)");
    if (m.moe.experts > 0)
      fail(s, "training.framework",
           "training.framework: pytorch-eager models dense transformers, expected no model.moe");
    if (l.fp8_attention)
      fail(s, "training.fp8_attention",
           "training.framework: pytorch-eager calls scaled_dot_product_attention in BF16, "
           "expected training.fp8_attention: false");
    if (p.zero_stage == 1 || p.zero_stage == 2)
      fail(s, "parallel.zero_stage",
           "training.framework: pytorch-eager shards with FSDP, expected zero_stage 0 (DDP) or 3 "
           "(FSDP; SHARD_GRAD_OP is zero_stage 3 with zero3_param_gather: forward)");
    if (s.training.attention == "unfused")
      fail(s, "training.attention",
           "training.framework: pytorch-eager calls a fused attention kernel, expected training.attention: flash, "
           "flash2 or triton");
  }
  l.fused_cross_entropy = s.training.cross_entropy == "fused";
  if (s.training.attention == "triton" && m.dropout > 0)
    fail(s, "training.attention",
         "the Triton FlashAttention kernel has no dropout (flash_attn_triton.py), expected model.dropout: 0 "
         "or training.attention: flash or flash2");
  l.attention_unpad = s.training.attention_padding == "unpad";
  if (l.attention_unpad && (!l.eager || (s.training.attention != "flash" && s.training.attention != "flash2")))
    fail(s, "training.attention_padding",
         "unpad is flash-attn's bert_padding around its variable-length kernel, called from PyTorch: expected "
         "training.framework: pytorch-eager with training.attention: flash or flash2, or "
         "training.attention_padding: none");
  {
    const std::string& ls = s.training.loss_sync;
    const std::string sync = ls == "auto" ? (l.eager ? "none" : "check") : ls;
    if (l.eager && sync != "none")
      fail(s, "training.loss_sync",
           "training.framework: pytorch-eager reduces the loss once a step, expected "
           "training.loss_sync: none or auto");
    // Since 2025 the check is two (NaN, then Inf: validate_result twice); r0.8 checked NaN alone.
    l.loss_host_syncs = sync == "check" ? 2 : sync == "check-allreduce" ? 1 : 0;
    l.loss_allreduce = sync == "allreduce" || sync == "check-allreduce";
    const std::string& gc = s.training.grad_nan_check;
    if (gc == "true" && (l.eager || p.zero_stage >= 3))
      fail(s, "training.grad_nan_check",
           "the per-bucket NaN check is Megatron-Core DDP's (ZeRO 0-2), expected "
           "training.grad_nan_check: false or auto");
    l.grad_nan_check = !l.eager && p.zero_stage <= 2 && (gc == "true" || (gc == "auto" && l.loss_host_syncs > 0));
  }
  l.train_metrics = s.training.train_metrics;
  if (l.train_metrics > 0 && !l.eager)
    fail(s, "training.train_metrics",
         "training metrics are the eager trainer's (Composer's), expected training.framework: pytorch-eager or "
         "training.train_metrics: 0");
  if (s.training.fp8_attention && !l.fp8)
    fail(s, "training.fp8_attention", "training.fp8_attention needs model.dtype: fp8");
  if (s.training.fp8_recipe != "delayed" && !l.fp8)
    fail(s, "training.fp8_recipe", "training.fp8_recipe: " + s.training.fp8_recipe + " needs model.dtype: fp8");
  if (p.tp_comm_overlap && !l.sequence_parallel && p.tp > 1)
    fail(s, "parallel.tp_comm_overlap",
         "parallel.tp_comm_overlap overlaps the sequence-parallel all-gathers and reduce-scatters: it needs "
         "parallel.sequence_parallel: true (as Megatron-Core requires)");
  const int64_t gpus = s.gpus();
  const int64_t model_par = p.tp * p.pp * p.cp;
  if (p.dp == 0) {
    if (gpus % model_par != 0)
      fail(s, "parallel.tp",
           "tp·pp·cp = " + str(model_par) + " does not divide the " + str(gpus) + " GPUs of the cluster");
    l.dp = gpus / model_par;
  } else {
    l.dp = p.dp;
    if (l.dp * model_par != gpus)
      fail(s, "parallel.dp",
           "dp·tp·pp·cp = " + str(l.dp) + "·" + str(p.tp) + "·" + str(p.pp) + "·" + str(p.cp) + " = " +
               str(l.dp * model_par) + " but the cluster has " + str(gpus) + " GPUs (" + str(s.cluster.nodes) +
               (s.cluster.nodes == 1 ? " node × " : " nodes × ") + str(s.cluster.node.gpus) + ")");
  }
  if (m.heads % p.tp != 0)
    fail(s, "parallel.tp", "tp = " + str(p.tp) + " does not divide model.heads = " + str(m.heads));
  if (m.kv_heads % p.tp != 0)
    fail(s, "parallel.tp", "tp = " + str(p.tp) + " does not divide model.kv_heads = " + str(m.kv_heads));
  if (m.ffn_hidden % p.tp != 0)
    fail(s, "parallel.tp", "tp = " + str(p.tp) + " does not divide model.ffn_hidden = " + str(m.ffn_hidden));
  if (l.moe_allgather && m.moe.experts == 0)
    fail(s, "parallel.moe_dispatcher", "a token dispatcher needs a mixture-of-experts model (model.moe.experts > 0)");
  if (l.moe_allgather && l.tp > 1 && l.etp != 1)
    fail(s, "parallel.moe_dispatcher",
         "the allgather dispatcher over TP x EP groups (experts split over TP) is not modelled, expected "
         "parallel.expert_tp: 1 or tp: 1");
  if (m.mtp_layers > 0 && l.eager)
    fail(s, "model.mtp_layers",
         "multi-token prediction is planned as Megatron-Core runs it, expected "
         "training.framework: megatron");
  if (m.mtp_layers > 0 && !m.blocks.empty())
    fail(s, "model.mtp_layers", "multi-token prediction follows a transformer's last layer, expected no model.blocks");
  if (m.is_mla()) {
    const MlaConfig& a = m.mla;
    if (a.q_lora_rank % p.tp != 0)
      fail(s, "parallel.tp",
           "tp = " + str(p.tp) + " does not divide model.mla.q_lora_rank = " + str(a.q_lora_rank) +
               " (the query's down projection is column-parallel)");
    if ((a.kv_lora_rank + a.rope_head_dim) % p.tp != 0)
      fail(s, "parallel.tp",
           "tp = " + str(p.tp) + " does not divide model.mla.kv_lora_rank + rope_head_dim = " +
               str(a.kv_lora_rank + a.rope_head_dim) + " (the key/value down projection is column-parallel)");
    if (l.eager)
      fail(s, "model.mla",
           "multi-head latent attention is planned as Megatron-Core runs it, expected "
           "training.framework: megatron");
    if (m.dtype == DType::FP8)
      fail(s, "model.mla",
           "multi-head latent attention under FP8 is not modelled (DeepSeek-V3 trains its FP8 with "
           "block-wise scaling, which Transformer Engine's recipes here are not), expected model.dtype "
           "bf16");
    if (s.training.attention != "flash")
      fail(s, "training.attention",
           "multi-head latent attention runs Transformer Engine's fused kernel (queries and "
           "keys wider than values), expected training.attention: flash");
  }
  const int64_t etp = l.etp;
  if (p.expert_tp > 0 && m.moe.experts == 0)
    fail(s, "parallel.expert_tp", "expert_tp needs a mixture-of-experts model (model.moe.experts > 0)");
  if (etp != p.tp && etp != 1)
    fail(s, "parallel.expert_tp", "expert_tp = " + str(etp) + ", expected 1 or tp (" + str(p.tp) + ")");
  if (etp < p.tp && !p.sequence_parallel)
    fail(s, "parallel.expert_tp",
         "expert_tp 1 under tp = " + str(p.tp) + " routes each rank's own tokens, expected sequence_parallel: true");
  if (m.moe.experts > 0 && m.moe.expert_ffn_hidden % etp != 0)
    fail(s, p.expert_tp > 0 ? "parallel.expert_tp" : "parallel.tp",
         "expert TP " + str(etp) + " does not divide model.moe.expert_ffn_hidden = " + str(m.moe.expert_ffn_hidden));
  // The embedding and the output layer with the loss may each stand in for a layer of the
  // first and the last chunk (Megatron-Core's account_for_embedding_in_pipeline_split and
  // account_for_loss_in_pipeline_split; Llama 3 405B's 126 layers in 16 × 8 chunks, the
  // first holding only the embedding, the last only the output, Dubey et al. 2024 §3.3.2).
  if (m.layers + 2 < p.pp * p.virtual_stages)
    fail(s, p.virtual_stages > 1 ? "parallel.virtual_stages" : "parallel.pp",
         "pp·virtual_stages = " + str(p.pp * p.virtual_stages) + " is more than model.layers + 2 = " +
             str(m.layers + 2) + ": every model chunk needs a layer, the embedding or the output layer");
  if (p.first_stage_layers >= 0 || p.last_stage_layers >= 0) {
    const char* key = p.first_stage_layers >= 0 ? "parallel.first_stage_layers" : "parallel.last_stage_layers";
    if (p.pp < 2) fail(s, key, "an uneven pipeline split needs pp >= 2");
    const int64_t given = std::max<int64_t>(p.first_stage_layers, 0) + std::max<int64_t>(p.last_stage_layers, 0);
    const int64_t middle_stages = p.pp - (p.first_stage_layers >= 0 ? 1 : 0) - (p.last_stage_layers >= 0 ? 1 : 0);
    const int64_t rest = m.layers - given;
    if (rest < 0 || (middle_stages == 0 && rest != 0) || (middle_stages > 0 && rest % middle_stages != 0))
      fail(s, key,
           "first and last stages of " + str(std::max<int64_t>(p.first_stage_layers, 0)) + " and " +
               str(std::max<int64_t>(p.last_stage_layers, 0)) + " layers leave " + str(rest) + " of " + str(m.layers) +
               " for " + str(middle_stages) + " other stages, expected an even share each");
    for (int64_t stage : {p.first_stage_layers, p.last_stage_layers, middle_stages > 0 ? rest / middle_stages : 0})
      if (stage > 0 && stage % p.virtual_stages != 0)
        fail(s, key,
             "a stage of " + str(stage) + " layers does not split into " + str(p.virtual_stages) +
                 " model chunks (parallel.virtual_stages)");
  }
  if (p.virtual_stages > 1 && (p.schedule != "interleaved-1f1b" || p.pp < 2))
    fail(s, "parallel.virtual_stages", "virtual_stages > 1 needs schedule: interleaved-1f1b and pp > 1");
  if (p.schedule == "interleaved-1f1b" && p.virtual_stages < 2 && p.pp > 1)
    fail(s, "parallel.schedule", "interleaved-1f1b needs virtual_stages >= 2 (model chunks per pipeline rank)");
  if (l.sequence_parallel && (m.seq_len / p.cp) % p.tp != 0)
    fail(s, "parallel.sequence_parallel",
         "sequence parallelism needs tp = " + str(p.tp) + " to divide the " + str(m.seq_len / p.cp) +
             " tokens per context-parallel rank");
  if (p.cp > 1 && m.seq_len % (2 * p.cp) != 0)
    fail(s, "parallel.cp",
         "cp = " + str(p.cp) + ": model.seq_len = " + str(m.seq_len) +
             " must split into 2·cp equal chunks (load-balanced causal ring attention)");
  if (p.ep > 1) {
    if (m.moe.experts == 0)
      fail(s, "parallel.ep", "ep = " + str(p.ep) + " needs a mixture-of-experts model (model.moe.experts > 0)");
    if (m.moe.experts % p.ep != 0)
      fail(s, "parallel.ep", "ep = " + str(p.ep) + " does not divide model.moe.experts = " + str(m.moe.experts));
    const int64_t units = p.tp / etp * l.dp * l.cp;
    if (units % p.ep != 0)
      fail(s, "parallel.ep",
           "ep = " + str(p.ep) + " must divide " + (etp < p.tp ? "tp·dp·cp = " : "dp·cp = ") + str(units) +
               " (experts are carved out of " + (etp < p.tp ? "tensor, " : "") + "data and context parallelism)");
  }
  if (m.moe.experts > 0 && (m.moe.top_k < 1 || m.moe.top_k > m.moe.experts || m.moe.expert_ffn_hidden < 1))
    fail(s, "model.moe", "a mixture of experts needs 1 <= top_k <= experts and expert_ffn_hidden > 0");
  if (m.moe.experts > 0) {
    const MoeConfig& moe = m.moe;
    if ((moe.groups > 0) != (moe.group_topk > 0))
      fail(s, moe.groups > 0 ? "model.moe.groups" : "model.moe.group_topk",
           "group-limited routing takes both model.moe.groups and model.moe.group_topk, expected both set or neither");
    if (moe.groups > 0 && (moe.experts % moe.groups != 0 || moe.group_topk > moe.groups ||
                           moe.top_k % moe.group_topk != 0 || moe.top_k / moe.group_topk > moe.experts / moe.groups))
      fail(s, "model.moe.groups",
           "model.moe.groups = " + str(moe.groups) + " and group_topk = " + str(moe.group_topk) + " do not fit " +
               str(moe.experts) + " experts and top_k = " + str(moe.top_k) +
               ", expected groups dividing the experts, group_topk <= groups dividing top_k, and top_k / group_topk "
               "experts in a group");
    // A capacity is what a dropping router caps (and pads to): Megatron-Core's dropless
    // router has none (--moe-expert-capacity-factor unset), so one set beside dropless asks
    // for two things at once.
    if (moe.routing.dropless && moe.capacity_factor != 1.0)
      fail(s, "model.moe.capacity_factor",
           "model.moe.capacity_factor = " + decimal(moe.capacity_factor) +
               " caps (and pads) each expert's tokens, which a dropless router does not, expected "
               "model.moe.routing.dropless: false with it, or capacity_factor 1");
    if (moe.expert_bias && !moe.score_sigmoid)
      fail(s, "model.moe.expert_bias",
           "model.moe.expert_bias: Megatron-Core adds the expert bias to sigmoid scores, expected "
           "model.moe.score_function: sigmoid");
  }
  l.moe_permute = s.training.moe_permute;
  l.global_batch = s.training.global_batch > 0 ? s.training.global_batch : l.dp * l.micro_batch * (p.pp > 1 ? p.pp : 1);
  if (l.global_batch % (l.dp * l.micro_batch) != 0)
    fail(s, "training.global_batch",
         "training.global_batch = " + str(l.global_batch) +
             " is not a multiple of dp·micro_batch = " + str(l.dp * l.micro_batch));
  l.micro_batches = l.global_batch / (l.dp * l.micro_batch);
  // With one micro-batch there is nothing to accumulate: its backward reduce-scatters each
  // layer's gradients as they come, and no unsharded gradient buffer is held.
  if (l.micro_batches == 1) l.zero3_grad_once = false;
  if (l.micro_batches > (int64_t{1} << 22))
    fail(s, "training.global_batch",
         str(l.micro_batches) + " micro-batches per pipeline is past 4194304, the most any run takes");
  // The plan's size: every layer of a stage runs once per micro-batch (about 30 ops each).
  const int64_t passes = l.micro_batches * ((m.layers + p.pp - 1) / p.pp);
  if (passes > (int64_t{1} << 22))
    fail(s, "training.global_batch",
         str(passes) +
             " layer passes per stage (micro-batches x layers per stage) is past "
             "4194304, the most any run takes");
  if (passes > (int64_t{1} << 18) && !s.allow_large)
    fail(s, "training.global_batch",
         str(passes) +
             " layer passes per stage (micro-batches x layers per stage) is past the budget of 262144 "
             "(about 8 million ops), expected fewer micro-batches (--allow-large runs it anyway)");
  if (l.micro_batches > 65536 && !s.allow_large)
    fail(s, "training.global_batch",
         str(l.micro_batches) +
             " micro-batches per pipeline is past the budget of 65536 per iteration, expected a "
             "larger parallel.micro_batch or a smaller training.global_batch (--allow-large runs "
             "it anyway)");
  // Megatron-Core's rule for N contiguous micro-batches per chunk: pp <= N <= M, and a
  // last, shorter group of at least pp (a shorter one would stall on its own sends).
  const bool interleaved = p.schedule == "interleaved-1f1b" && p.pp > 1;
  if (p.microbatch_group > 0 && !interleaved)
    fail(s, "parallel.microbatch_group", "microbatch_group needs schedule: interleaved-1f1b and pp > 1");
  l.microbatch_group = p.microbatch_group > 0 ? p.microbatch_group : p.pp;
  if (interleaved && p.microbatch_group > 0 && (l.microbatch_group < p.pp || l.microbatch_group > l.micro_batches))
    fail(s, "parallel.microbatch_group",
         "microbatch_group = " + str(l.microbatch_group) + " is outside [pp, micro-batches per pipeline] = [" +
             str(p.pp) + ", " + str(l.micro_batches) + "]");
  if (interleaved) {
    const int64_t last = l.micro_batches % l.microbatch_group;
    if (last != 0 && last < p.pp)
      fail(s, p.microbatch_group > 0 ? "parallel.microbatch_group" : "training.global_batch",
           "interleaved-1f1b needs the " + str(l.micro_batches) + " micro-batches per pipeline to be a multiple of " +
               (p.microbatch_group > 0 ? "microbatch_group = " + str(l.microbatch_group) +
                                             ", or to leave at least pp = " + str(p.pp) + " in the last group"
                                       : "pp = " + str(p.pp)));
  }
  return l;
}

PlacementStrides placement_strides(const std::string& placement, const TrainingLayout& l) {
  PlacementStrides out;
  int64_t stride = 1;
  size_t start = 0;
  for (;;) {
    const size_t dash = placement.find('-', start);
    const std::string name = placement.substr(start, dash == std::string::npos ? std::string::npos : dash - start);
    if (name == "tp") out.tp = stride, stride *= l.tp;
    if (name == "cp") out.cp = stride, stride *= l.cp;
    if (name == "dp") out.dp = stride, stride *= l.dp;
    if (name == "pp") out.pp = stride, stride *= l.pp;
    if (dash == std::string::npos) break;
    start = dash + 1;
  }
  return out;
}

}  // namespace clustersim
