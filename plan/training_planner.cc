#include "plan/training_planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string_view>
#include <tuple>

#include "plan/block_planner.h"
#include "plan/moe_routing.h"

namespace clustersim {
namespace {

[[noreturn]] void fail(const Scenario& s, const std::string& key, const std::string& msg) {
  throw InputError(s.mark(key), msg);
}

std::string str(int64_t v) { return std::to_string(v); }

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
    return l.recompute == "selective" && std::find(s.training.recompute_modules.begin(),
                                                   s.training.recompute_modules.end(),
                                                   module) != s.training.recompute_modules.end();
  };
  l.recompute_core_attn = recomputes("core_attn");
  l.mla_up_recompute = recomputes("mla_up_proj");
  l.sequence_parallel = p.sequence_parallel && p.tp > 1;
  l.flash_attention = s.training.attention != "unfused";  // flash, flash2 and triton are fused kernels
  l.fp8 = m.dtype == DType::FP8;
  l.fp8_attention = l.fp8 && s.training.fp8_attention;
  l.fp8_current_scaling = l.fp8 && s.training.fp8_recipe == "tensorwise";
  l.fp8_params = l.fp8 && p.fp8_param_gather;
  if (p.fp8_param_gather && (!l.fp8 || s.training.framework != "megatron" || p.zero_stage < 1))
    fail(s, "parallel.fp8_param_gather",
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
  for (const char* key : {"parallel.tp_overlap_reduce_scatter", "parallel.tp_overlap_proj_sms",
                          "parallel.tp_overlap_fc2_sms", "parallel.tp_overlap_sm_margin",
                          "parallel.tp_overlap_qkv_dgrad_sms", "parallel.tp_overlap_fc1_dgrad_sms",
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
  l.p2p_device_sync = !l.overlap_p2p && l.pp > 1 &&
                      (p.batch_p2p_sync == "true" ||
                       (p.batch_p2p_sync == "auto" && !l.eager && !s.training.launch_blocking));
  l.grad_accumulation_fusion = s.training.grad_accumulation_fusion;
  l.plan_before_2026_12_05 = s.training.plan_revision == "2026-12-04";
  l.local_impl = s.training.transformer_impl == "local";
  if (l.local_impl && l.eager)
    fail(s, "training.transformer_impl", "training.framework: pytorch-eager has no Megatron layer, expected "
                                         "training.transformer_impl: transformer-engine");
  if (l.local_impl && m.dtype == DType::FP8)
    fail(s, "training.transformer_impl", "Megatron-LM's local layer has no FP8 (Transformer Engine runs it), expected "
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
         p.zero_stage >= 3 ? "parallel.grad_reduce_dtype shapes Megatron's ZeRO 0-2 gradient buffer, expected "
                             "parallel.fsdp_reduce_dtype under zero_stage 3"
                           : "parallel.grad_reduce_dtype shapes Megatron's gradient buffer, expected training.framework: "
                             "megatron (PyTorch DDP reduces the FP32 .grad)");
  // Megatron's "ZeRO 3" gathers the 16-bit weights it computes with; plain PyTorch FSDP
  // without a mixed-precision policy gathers the FP32 parameters autocast then casts.
  l.fsdp_param_dtype =
      chosen_dtype(p.fsdp_param_dtype, l.eager                ? DType::FP32
                                       : m.dtype != DType::FP8 ? m.dtype
                                       : p.fp8_param_gather    ? DType::FP8
                                                               : DType::BF16);
  l.fsdp_reduce_dtype = chosen_dtype(p.fsdp_reduce_dtype, m.dtype == DType::FP16 ? DType::FP16 : DType::FP32);
  if (p.zero_stage < 3) {
    const char* key = p.zero3_param_gather != "micro-batch" ? "parallel.zero3_param_gather"
                      : p.zero3_grad_sync != "micro-batch"  ? "parallel.zero3_grad_sync"
                      : p.fsdp_param_dtype != "auto"        ? "parallel.fsdp_param_dtype"
                      : p.fsdp_reduce_dtype != "auto"       ? "parallel.fsdp_reduce_dtype"
                      : s.marks.count("parallel.zero3_backward_prefetch") ? "parallel.zero3_backward_prefetch"
                                                            : nullptr;
    if (key) fail(s, key, std::string(key) + " shapes ZeRO 3 / FSDP, expected parallel.zero_stage: 3");
  }
  if (l.eager) {
    // Plain PyTorch shards data (DDP) or parameters (FSDP: zero_stage 3); the model
    // parallelisms are Megatron's.
    const char* key = p.tp > 1 ? "parallel.tp" : p.pp > 1 ? "parallel.pp" : p.cp > 1 ? "parallel.cp" : p.ep > 1 ? "parallel.ep" : nullptr;
    if (key) fail(s, key, std::string(key) + " > 1 with training.framework: pytorch-eager, expected 1 (plain PyTorch "
                                              "runs data parallel or FSDP; model parallelism is training.framework: megatron)");
    if (m.moe.experts > 0) fail(s, "training.framework", "training.framework: pytorch-eager models dense transformers, expected no model.moe");
    if (l.fp8_attention)
      fail(s, "training.fp8_attention", "training.framework: pytorch-eager calls scaled_dot_product_attention in BF16, "
                                        "expected training.fp8_attention: false");
    if (p.zero_stage == 1 || p.zero_stage == 2)
      fail(s, "parallel.zero_stage", "training.framework: pytorch-eager shards with FSDP, expected zero_stage 0 (DDP) or 3 "
                                     "(FSDP; SHARD_GRAD_OP is zero_stage 3 with zero3_param_gather: forward)");
    if (s.training.attention == "unfused")
      fail(s, "training.attention", "training.framework: pytorch-eager calls a fused attention kernel, expected training.attention: flash, flash2 or triton");
  }
  l.fused_cross_entropy = s.training.cross_entropy == "fused";
  if (s.training.attention == "triton" && m.dropout > 0)
    fail(s, "training.attention", "the Triton FlashAttention kernel has no dropout (flash_attn_triton.py), expected model.dropout: 0 "
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
      fail(s, "training.loss_sync", "training.framework: pytorch-eager reduces the loss once a step, expected "
                                    "training.loss_sync: none or auto");
    // Since 2025 the check is two (NaN, then Inf: validate_result twice); r0.8 checked NaN alone.
    l.loss_host_syncs = sync == "check" ? 2 : sync == "check-allreduce" ? 1 : 0;
    l.loss_allreduce = sync == "allreduce" || sync == "check-allreduce";
    const std::string& gc = s.training.grad_nan_check;
    if (gc == "true" && (l.eager || p.zero_stage >= 3))
      fail(s, "training.grad_nan_check", "the per-bucket NaN check is Megatron-Core DDP's (ZeRO 0-2), expected "
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
               " nodes × " + str(s.cluster.node.gpus) + ")");
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
    fail(s, "model.mtp_layers", "multi-token prediction is planned as Megatron-Core runs it, expected "
                                "training.framework: megatron");
  if (m.mtp_layers > 0 && !m.blocks.empty())
    fail(s, "model.mtp_layers", "multi-token prediction follows a transformer's last layer, expected no model.blocks");
  if (m.is_mla()) {
    const MlaConfig& a = m.mla;
    if (a.q_lora_rank % p.tp != 0)
      fail(s, "parallel.tp", "tp = " + str(p.tp) + " does not divide model.mla.q_lora_rank = " + str(a.q_lora_rank) +
                                 " (the query's down projection is column-parallel)");
    if ((a.kv_lora_rank + a.rope_head_dim) % p.tp != 0)
      fail(s, "parallel.tp", "tp = " + str(p.tp) + " does not divide model.mla.kv_lora_rank + rope_head_dim = " +
                                 str(a.kv_lora_rank + a.rope_head_dim) +
                                 " (the key/value down projection is column-parallel)");
    if (l.eager)
      fail(s, "model.mla", "multi-head latent attention is planned as Megatron-Core runs it, expected "
                           "training.framework: megatron");
    if (m.dtype == DType::FP8)
      fail(s, "model.mla", "multi-head latent attention under FP8 is not modelled (DeepSeek-V3 trains its FP8 with "
                           "block-wise scaling, which Transformer Engine's recipes here are not), expected model.dtype "
                           "bf16");
    if (s.training.attention != "flash")
      fail(s, "training.attention", "multi-head latent attention runs Transformer Engine's fused kernel (queries and "
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
      fail(s, key, "first and last stages of " + str(std::max<int64_t>(p.first_stage_layers, 0)) + " and " +
                       str(std::max<int64_t>(p.last_stage_layers, 0)) + " layers leave " + str(rest) + " of " +
                       str(m.layers) + " for " + str(middle_stages) + " other stages, expected an even share each");
    for (int64_t stage : {p.first_stage_layers, p.last_stage_layers, middle_stages > 0 ? rest / middle_stages : 0})
      if (stage > 0 && stage % p.virtual_stages != 0)
        fail(s, key, "a stage of " + str(stage) + " layers does not split into " + str(p.virtual_stages) +
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
  if (l.micro_batches > (int64_t{1} << 22))
    fail(s, "training.global_batch", str(l.micro_batches) + " micro-batches per pipeline is past 4194304, the most any run takes");
  // The plan's size: every layer of a stage runs once per micro-batch (about 30 ops each).
  const int64_t passes = l.micro_batches * ((m.layers + p.pp - 1) / p.pp);
  if (passes > (int64_t{1} << 22))
    fail(s, "training.global_batch", str(passes) + " layer passes per stage (micro-batches x layers per stage) is past "
                                         "4194304, the most any run takes");
  if (passes > (int64_t{1} << 18) && !s.allow_large)
    fail(s, "training.global_batch",
         str(passes) + " layer passes per stage (micro-batches x layers per stage) is past the budget of 262144 "
                       "(about 8 million ops), expected fewer micro-batches (--allow-large runs it anyway)");
  if (l.micro_batches > 65536 && !s.allow_large)
    fail(s, "training.global_batch",
         str(l.micro_batches) + " micro-batches per pipeline is past the budget of 65536 per iteration, expected a "
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
               (p.microbatch_group > 0 ? "microbatch_group = " + str(l.microbatch_group) + ", or to leave at least pp = " +
                                             str(p.pp) + " in the last group"
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

namespace {

// Builds the program of one pipeline stage. Every rank of a stage runs it.
class StageBuilder {
 public:
  StageBuilder(Plan& plan, Program& prog, const ModelConfig& m, const TrainingLayout& l, int64_t stage, bool adam)
      : plan_(plan), p_(prog), m_(m), l_(l), stage_(stage), adam_(adam) {
    compute_ = p_.stream("compute");
    tp_ = p_.stream("tp");
    dp_ = p_.stream("dp");
    // Transformer Engine's FP8 recipe: the linear layers' GEMMs take FP8 operands, and
    // everything between them (activations, attention, norms) stays in BF16.
    act_dtype_ = l.fp8 ? DType::BF16 : m.dtype;
    lin_dtype_ = m.dtype;
    attn_dtype_ = l.fp8 && !l.fp8_attention ? DType::BF16 : m.dtype;
    e_ = dtype_bits(act_dtype_) / 8;
    t_ = l.tp;
    tokens_ = l.micro_batch * m.seq_len / l.cp;
    seq_tokens_ = l.sequence_parallel ? tokens_ / t_ : tokens_;
    vocab_local_ = padded_vocab(m, t_) / t_;
    mlp_in_ = m.mlp_matrices() == 3 ? 2 * m.ffn_hidden / t_ : m.ffn_hidden / t_;
    qkv_ = (m.heads + 2 * m.kv_heads) * m.head_dim() / t_;

    grad_dtype_ = l.grad_dtype;  // fp32 main grads for bf16 unless asked (Megatron)
    chunk_nodes_.assign(static_cast<size_t>(l.virtual_stages), -1);
  }

  void build() {
    const auto order =
        pipeline_schedule(l_.schedule, l_.pp, l_.virtual_stages, l_.micro_batches, stage_, l_.microbatch_group);
    last_mb_.assign(static_cast<size_t>(l_.virtual_stages), -1);
    // The warm-up: the leading forward blocks, less the steady state's first where a backward
    // follows the forwards' run before the forwards are all done.
    size_t forwards = 0;
    for (const PipelineBlock& b : order) forwards += b.forward;
    while (warm_forwards_ < order.size() && order[warm_forwards_].forward) ++warm_forwards_;
    if (warm_forwards_ < forwards) --warm_forwards_;
    for (const PipelineBlock& b : order)
      last_mb_[static_cast<size_t>(b.chunk)] = std::max(last_mb_[static_cast<size_t>(b.chunk)], b.micro_batch);
    const double gb = dtype_bits(grad_dtype_) / 8.0;
    const double local = local_params(false) + local_params(true);
    // Per step, before the first micro-batch: the gradient buffer is zeroed (Megatron's
    // zero_grad_buffer), and under FP8 each linear weight is cast once (with its
    // transpose) and kept for every micro-batch.
    // (PyTorch's zero_grad sets the gradients to None: nothing to zero.)
    if (!l_.eager) prev_ = add_memory("zero-grad-buffer", Phase::Other, -1, 0, local * gb, 0, {});
    // (Eager PyTorch's te.Linear casts its weight at every forward instead: eager_linear_weight.)
    if (l_.fp8 && !l_.eager && !l_.fp8_params) {
      const double linear = local - embedding_params_local();
      // Current scaling reads each weight once more for its amax before the cast.
      const double amax_read = l_.fp8_current_scaling ? linear * 2 : 0;
      prev_ = add_memory("fp8-weight-cast", Phase::Forward, -1, linear * 2 + amax_read, linear * 2, linear * 2,
                         deps(prev_));
    }
    // FP8 weights (parallel.fp8_param_gather) arrive from the gather without the transpose
    // the backward's data-gradient GEMM reads: TE builds it once per step
    // (post_all_gather_processing), 1 byte read and 1 written a weight.
    if (l_.fp8_params) {
      const double linear = local - embedding_params_local();
      prev_ = add_memory("fp8-weight-transpose", Phase::Forward, -1, linear, linear, 0, deps(prev_));
    }
    plan_param_gathers();
    defer_grads_ = !l_.overlap_grad_reduce;
    for (const PipelineBlock& b : order) {
      mb_ = static_cast<int32_t>(b.micro_batch);
      if (b.forward)
        forward_block(b.chunk);
      else
        backward_block(b.chunk, b.micro_batch == last_mb_[static_cast<size_t>(b.chunk)]);
    }
    mb_ = -1;
    prev_ = after_sends();
    drain_deferred_wgrads();
    flush_buckets(prev_);
    // Without --overlap-grad-reduce the buckets are reduced after the whole backward.
    defer_grads_ = false;
    for (const Bucket& b : deferred_) {
      bucket_dense_ = b.dense;
      bucket_expert_ = b.expert;
      bucket_layer_ = b.layer;
      bucket_gather_ = b.gather_bytes;
      flush_buckets(prev_);
    }
    std::vector<uint32_t> after = grad_ops_;
    if (prev_ != kNone) after.push_back(prev_);
    after = finalize_model_grads(after, gb);
    // Optimizer step on the local (ZeRO-sharded) parameters: reads weights, fp32 grads
    // and state; writes weights and state.
    const double shard = l_.zero_stage >= 1 ? static_cast<double>(l_.dp * l_.cp) : 1.0;
    const double params = (params_dense_ + params_expert_ * static_cast<double>(l_.ep)) / shard;
    const double state = adam_ ? 12.0 : 8.0;
    // Gradient clipping: the norm of the local gradient shard (one read), summed over
    // the data- and model-parallel groups (a 4-byte all-reduce each: latency only).
    uint32_t norm = add_memory("grad-norm", Phase::Optimizer, -1, params * gb, 0, params * 2, after);
    if (l_.eager) {
      // clip_grad_norm_ (foreach norm, then every gradient scaled: torch multiplies by
      // min(1, max_norm / norm) unconditionally), then fused AdamW on FP32 parameters,
      // gradients and two moments: read 16, write 12 bytes per parameter (SGD: 12, 8).
      // FSDP's norm is a sum over the shards: a 4-byte all-reduce.
      accessed(norm, MemAccess::MultiTensor);
      if (l_.zero_stage >= 1 && l_.dp > 1)
        norm = add_coll("grad-norm-allreduce", CollectiveKind::AllReduce, GroupKind::DP, dp_, Phase::Optimizer, -1, 4,
                        deps(norm));
      norm = accessed(add_memory("grad-clip-scale", Phase::Optimizer, -1, params * 4, params * 4, params, deps(norm)),
                      MemAccess::MultiTensor);
      const uint32_t opt =
          accessed(add_memory("optimizer-step", Phase::Optimizer, -1, params * (adam_ ? 16 : 12),
                              params * (adam_ ? 12 : 8), params * 12, deps(norm)),
                   MemAccess::MultiTensor);
      train_metrics_sync(opt);
      return;
    }
    if (l_.dp * l_.cp > 1)
      norm = add_coll("grad-norm-allreduce", CollectiveKind::AllReduce, GroupKind::DP, dp_, Phase::Optimizer, -1, 4,
                      deps(norm));
    if (t_ > 1)
      norm = add_coll("grad-norm-allreduce-tp", CollectiveKind::AllReduce, GroupKind::TP, tp_, Phase::Optimizer, -1,
                      4, deps(norm));
    // A 16-bit gradient buffer is copied into the FP32 main gradients the optimizer reads
    // (Megatron's _copy_model_grads_to_main_grads).
    if (gb < 4)
      norm = add_memory("main-grad-copy", Phase::Optimizer, -1, params * gb, params * 4, 0, deps(norm));
    // FP16 runs under a loss scale: the FP32 main gradients are unscaled and checked for
    // inf/NaN in one pass (Megatron's _unscale_main_grads_and_check_for_nan:
    // torch._amp_foreach_non_finite_check_and_unscale_, 4 bytes read and 4 written a parameter).
    if (m_.dtype == DType::FP16)
      norm = accessed(add_memory("grad-unscale", Phase::Optimizer, -1, params * 4, params * 4, params, deps(norm)),
                      MemAccess::MultiTensor);
    // FP8 weights: the step writes the FP32 master shard, and the linear weights' shard is
    // cast to FP8 into the parameter buffer (Megatron's quantize_param_shard: 4 bytes read,
    // 1 written; current scaling reads the shard once more for its amaxes and all-reduces
    // them, one per weight tensor, over DP), in place of the 16-bit copy.
    const double fp8_shard = l_.fp8_params ? (local_params(false) + local_params(true) - embedding_params_local()) / shard : 0;
    // Apex's or Transformer Engine's FusedAdam over the FP32 main parameters, gradients and
    // moments (multi-tensor-apply kernels: MemAccess::MultiTensor), then the updated main
    // parameters copied into the 16-bit model parameters, a pass of its own
    // (_copy_main_params_to_model_params: 4 bytes read, 2 written a parameter).
    uint32_t opt;
    if (l_.plan_before_2026_12_05) {
      opt = add_memory("optimizer-step", Phase::Optimizer, -1, params * (e_ + 4 + state),
                       params * (e_ + state) - fp8_shard * static_cast<double>(e_), params * 12, deps(norm));
    } else {
      opt = accessed(add_memory("optimizer-step", Phase::Optimizer, -1, params * (4 + state), params * state,
                                params * 12, deps(norm)),
                     MemAccess::MultiTensor);
    }
    if (params > fp8_shard && e_ < 4 && !l_.plan_before_2026_12_05)
      opt = add_memory("main-param-copy", Phase::Optimizer, -1, (params - fp8_shard) * 4,
                       (params - fp8_shard) * static_cast<double>(e_), 0, deps(opt));
    if (l_.fp8_params) {
      if (l_.fp8_current_scaling) {
        opt = add_memory("fp8-param-shard-amax", Phase::Optimizer, -1, fp8_shard * 4, 0, fp8_shard, deps(opt));
        // One amax a weight tensor: about seven a layer (QKV, projection, FC1, FC2 and
        // their biases or gates), counted as eight.
        int64_t layers = 0;
        for (int64_t c = 0; c < l_.virtual_stages; ++c) layers += chunk_layers(c);
        if (l_.dp * l_.cp > 1)
          opt = add_coll("fp8-param-amax-allreduce", CollectiveKind::AllReduce, GroupKind::DP, dp_, Phase::Optimizer,
                         -1, 4.0 * 8.0 * static_cast<double>(layers), deps(opt));
      }
      opt = add_memory("fp8-param-shard-cast", Phase::Optimizer, -1, fp8_shard * 4, fp8_shard, fp8_shard, deps(opt));
    }
    // ZeRO 1/2: the updated shards are all-gathered back into every replica (with
    // --overlap-param-gather, ahead of the next forward instead: plan_param_gathers).
    if (l_.zero_stage >= 1 && l_.zero_stage <= 2 && l_.dp * l_.cp > 1 && !l_.overlap_param_gather) {
      for (double bytes : gather_buckets_)
        add_coll("zero-param-allgather", CollectiveKind::AllGather, GroupKind::DP, dp_, Phase::Optimizer, -1, bytes,
                 deps(opt));
    }
  }

  // Megatron's finalize_model_grads, once every gradient bucket's DP reduction is done
  // (finish_grad_sync) and before the optimizer (core_r0.8.0 to core_r0.15.0, and
  // Megatron-LM's train_step of 2021-22):
  // - with sequence parallelism, each TP rank's norm gradients hold its own tokens' sum:
  //   _allreduce_layernorm_grads flattens them into one buffer (a cat), all-reduces it over
  //   TP and copies each tensor back (a copy kernel each);
  // - with the embedding held by the first and the last stage (the output layer tied to it,
  //   or the multi-token prediction modules' copy), _allreduce_word_embedding_grads
  //   all-reduces the two copies' main gradients between those two stages, a TP rank's
  //   vocabulary share in the gradient's type. Between two ranks the all-reduce is an
  //   exchange: each sends its copy and adds the one it receives.
  std::vector<uint32_t> finalize_model_grads(std::vector<uint32_t> after, double gb) {
    if (l_.eager) return after;
    const double h = static_cast<double>(m_.hidden);
    const bool first = first_virtual(0), last = last_virtual(l_.virtual_stages - 1);
    const std::vector<int32_t> layers = held_layers();
    if (t_ > 1 && l_.sequence_parallel) {
      // Two norms a layer (weight, and bias where the model has them), the final norm on
      // the last stage, and each multi-token prediction module's three norms beside its layer's.
      const int64_t per_norm = m_.biases ? 2 : 1;
      const int64_t tensors =
          per_norm * (2 * static_cast<int64_t>(layers.size()) + (last ? 1 + 3 * m_.mtp_layers : 0));
      const double bytes = static_cast<double>(tensors) * h * gb;
      uint32_t x = add_memory("norm-grads-flatten", Phase::Optimizer, -1, bytes, bytes, 0, after);
      x = add_coll("norm-grads-allreduce-tp", CollectiveKind::AllReduce, GroupKind::TP, tp_, Phase::Optimizer, -1,
                   bytes, deps(x));
      x = add_memory("norm-grads-copy-back", Phase::Optimizer, -1, bytes, bytes, 0, deps(x));
      p_.ops[x].k = tensors;
      after = {x};
    }
    if (l_.pp > 1 && (first || last) && (m_.tied_embeddings || m_.mtp_layers > 0)) {
      const double bytes = static_cast<double>(vocab_local_) * h * gb;
      const auto peer = static_cast<int32_t>(first ? l_.pp - 1 : 0);
      const uint32_t sent = add_p2p("embedding-grad-send", OpKind::Send, GroupKind::PP, peer, "embedding-send",
                                    Phase::Optimizer, -1, bytes, after);
      const uint32_t got = add_p2p("embedding-grad-recv", OpKind::Recv, GroupKind::PP, peer, "embedding-recv",
                                   Phase::Optimizer, -1, bytes, after);
      after = {add_memory("embedding-grad-add", Phase::Optimizer, -1, 2 * bytes, bytes, bytes / gb, deps(sent, got))};
    }
    // Aux-loss-free balancing (model.moe.expert_bias): _update_router_expert_bias stacks the
    // stage's MoE layers' token counts and biases ([layers, experts] FP32, a kernel each),
    // all-reduces the counts over TP x DP x CP (here over DP x CP, then TP: the same sum),
    // takes each layer's mean, the offsets, their sign, scaled by the update rate, added to
    // the biases (six kernels), and zeroes each layer's counts and copies its new bias back
    // (two kernels a layer).
    if (m_.moe.expert_bias) {
      const int64_t moe_layers =
          std::count_if(layers.begin(), layers.end(), [&](int32_t L) { return m_.moe_layer(L); });
      if (moe_layers > 0) {
        const double table = static_cast<double>(moe_layers * m_.moe.experts) * 4;
        uint32_t x = add_memory("expert-bias-stack", Phase::Optimizer, -1, 2 * table, 2 * table, 0, after);
        p_.ops[x].k = 2;
        if (l_.dp * l_.cp > 1)
          x = add_coll("expert-bias-counts-allreduce", CollectiveKind::AllReduce, GroupKind::DP, dp_, Phase::Optimizer,
                       -1, table, deps(x));
        if (t_ > 1)
          x = add_coll("expert-bias-counts-allreduce-tp", CollectiveKind::AllReduce, GroupKind::TP, tp_,
                       Phase::Optimizer, -1, table, deps(x));
        x = add_memory("expert-bias-update", Phase::Optimizer, -1, 7 * table, 8 * table, 6 * table / 4, deps(x));
        p_.ops[x].k = 6 + 2 * moe_layers;
        after = {x};
      }
    }
    return after;
  }

  double model_flops() const { return model_flops_; }
  double causal_attention_flops() const { return causal_attention_flops_; }
  // The hot EP rank's load summed over this stage's forward MoE layers, and their count.
  double moe_load_sum() const { return load_sum_; }
  int64_t moe_load_count() const { return load_count_; }

 private:
  static constexpr uint32_t kNone = ~0u;

  static std::vector<uint32_t> deps(uint32_t a, uint32_t b = kNone, uint32_t c = kNone) {
    std::vector<uint32_t> d;
    for (uint32_t x : {a, b, c})
      if (x != kNone) d.push_back(x);
    return d;
  }

  Op base(const char* name, OpKind kind, Phase phase, int32_t layer, uint8_t stream) {
    Op op = plan_.make_op(name, kind, phase, layer, mb_, stream, act_dtype_);
    op.recompute = recomputing_;
    return op;
  }

  // A GEMM; `model_share` is the part of its FLOPs that counts as model FLOPs (recompute
  // 0, capacity padding excluded).
  // `dt`: the operands' type (a linear layer's: FP8 under Transformer Engine's recipe);
  // the output is written in the activations' type.
  uint32_t add_gemm(const char* name, Phase ph, int32_t layer, int64_t m, int64_t n, int64_t k,
                    const std::vector<uint32_t>& after, int64_t batch = 1, double model_share = 1.0,
                    DType dt = DType::FP32) {
    Op op = base(name, OpKind::Gemm, ph, layer, compute_);
    op.m = m;
    op.n = n;
    op.k = k;
    op.batch = batch;
    op.dtype = dt == DType::FP32 ? lin_dtype_ : dt;
    op.flops = gemm_flops(op);
    op.bytes_read = (m * k + k * n) * (dtype_bits(op.dtype) / 8) * batch;
    op.bytes_written = m * n * e_ * batch;
    model_flops_ += op.flops * (recomputing_ ? 0.0 : model_share);
    // model_share < 1: an unfused attention product over the whole square under a causal mask.
    if (model_share < 1.0 && !recomputing_) causal_attention_flops_ += op.flops * model_share;
    return p_.add(op, after);
  }

  uint32_t add_memory(const char* name, Phase ph, int32_t layer, double read, double written, double flops,
                      const std::vector<uint32_t>& after, uint8_t stream = 0xff) {  // 0xff: compute
    Op op = base(name, OpKind::Memory, ph, layer, stream == 0xff ? compute_ : stream);
    op.bytes_read = static_cast<int64_t>(read);
    op.bytes_written = static_cast<int64_t>(written);
    op.flops = flops;
    return p_.add(op, after);
  }

  uint32_t add_attention(const char* name, Phase ph, int32_t layer, int64_t q_len, int64_t kv_len,
                         const std::vector<uint32_t>& after) {
    Op op = base(name, OpKind::Attention, ph, layer, compute_);
    op.batch = l_.micro_batch;
    op.heads = m_.heads / t_;
    op.kv_heads = m_.attn_kv_heads() / t_;
    op.q_len = q_len;
    op.kv_len = kv_len;
    op.head_dim = m_.attn_head_dim();
    op.causal = true;
    op.dropout = m_.dropout > 0 && !l_.eager;  // eager: the reference stack runs no dropout
    op.dtype = attn_dtype_;
    const double fwd = attention_flops(op);
    const int64_t q = l_.micro_batch * q_len * op.heads * op.head_dim * e_;
    const int64_t kv = l_.micro_batch * kv_len * op.kv_heads * op.head_dim * e_;
    // A recomputed forward (Op::recompute) runs the forward kernel inside the backward.
    if (ph == Phase::Forward || recomputing_) {
      op.flops = fwd;
      op.bytes_read = q + 2 * kv;
      op.bytes_written = q;
      model_flops_ += recomputing_ ? 0.0 : fwd;
      if (op.causal && !recomputing_) causal_attention_flops_ += fwd;
    } else {
      // FlashAttention backward: five GEMM-sized products against the forward's two
      // (2.5x), of which the recomputed QK^T (0.5x) is not model FLOPs.
      op.flops = 2.5 * fwd;
      op.bytes_read = 3 * q + 2 * kv;
      op.bytes_written = q + 2 * kv;
      model_flops_ += 2.0 * fwd;
      if (op.causal) causal_attention_flops_ += 2.0 * fwd;
    }
    return p_.add(op, after);
  }

  uint32_t add_coll(const char* name, CollectiveKind kind, GroupKind group, uint8_t stream, Phase ph, int32_t layer,
                    double bytes, const std::vector<uint32_t>& after) {
    Op op = base(name, OpKind::Collective, ph, layer, stream);
    op.collective = kind;
    op.group = group;
    op.bytes = static_cast<int64_t>(bytes);
    return p_.add(op, after);
  }

  uint32_t add_p2p(const char* name, OpKind kind, GroupKind group, int32_t peer, const char* stream, Phase ph,
                   int32_t layer, double bytes, const std::vector<uint32_t>& after, bool relative = false,
                   bool holds_sms = false, bool overlaps_compute = false) {
    Op op = base(name, kind, ph, layer, p_.stream(stream));
    op.group = group;
    op.peer = peer;
    op.relative_peer = relative;
    op.holds_sms = holds_sms;
    op.overlaps_compute = overlaps_compute;
    op.bytes = static_cast<int64_t>(bytes);
    return p_.add(op, after);
  }

  double act_bytes() const { return static_cast<double>(seq_tokens_ * m_.hidden * e_); }
  // Pipeline activations and gradients: without SP every TP rank holds the whole tensor;
  // Megatron's scatter-gather (parallel.pp_scatter_gather) sends each rank's 1/tp slice
  // over its own NIC and all-gathers the slices on the receiving stage over NVLink.
  bool pp_scatter() const { return l_.pp_scatter_gather && !l_.sequence_parallel && t_ > 1; }
  double pp_bytes() const { return pp_scatter() ? act_bytes() / static_cast<double>(t_) : act_bytes(); }
  uint32_t pp_gather(const char* name, Phase ph, int32_t layer, uint32_t recv) {
    if (!pp_scatter()) return recv;
    return add_coll(name, CollectiveKind::AllGather, GroupKind::TP, tp_, ph, layer, full_act_bytes(), deps(recv));
  }
  double full_act_bytes() const { return static_cast<double>(tokens_ * m_.hidden * e_); }

  // Activations leaving a row-parallel layer: all-reduce, or reduce-scatter under SP.
  uint32_t tp_reduce(const char* ar, const char* rs, Phase ph, int32_t layer, uint32_t after) {
    if (t_ == 1) return after;
    return add_coll(l_.sequence_parallel ? rs : ar,
                    l_.sequence_parallel ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, GroupKind::TP,
                    tp_, ph, layer, full_act_bytes(), deps(after));
  }
  // Activations entering a column-parallel layer under SP: all-gather the sequence.
  // `bulk_sms`: under the TP overlap, the backward's all-gather of a weight gradient's input
  // is a userbuffers bulk overlap whose kernel holds that many SMs beside the data-gradient
  // GEMM (TE's qkv_dgrad / fc1_dgrad num_sm, no margin), not an NCCL collective's channels.
  uint32_t tp_gather(const char* name, Phase ph, int32_t layer, uint32_t after, int bulk_sms = 0) {
    if (t_ == 1 || !l_.sequence_parallel) return after;
    const uint32_t op =
        add_coll(name, CollectiveKind::AllGather, GroupKind::TP, tp_, ph, layer, full_act_bytes(), deps(after));
    return l_.tp_comm_overlap && bulk_sms > 0 ? bulk(op, bulk_sms) : op;
  }
  // A TE userbuffers bulk overlap: one comm kernel holding `sms` SMs, no margin (TE's
  // default and every configuration's set_sm_margin for bulk overlaps).
  uint32_t bulk(uint32_t op, int sms) {
    p_.ops[op].holds_sms = true;
    p_.ops[op].held_sms = static_cast<uint16_t>(sms);
    p_.ops[op].sm_margin = false;
    return op;
  }

  // ---- TP communication overlap (Megatron-Core --tp-comm-overlap, TE userbuffers) ----
  // All-gather then a column-parallel GEMM. Overlapped (ring exchange): the GEMM runs on
  // the tp chunks of the sequence one at a time, starting on the rank's own chunk while
  // the next arrives from the ring predecessor; tp - 1 sends of one chunk each, the
  // all-gather's bytes. `gathered_` is the op after which the whole input is here (the
  // weight-gradient GEMM of the backward reads it).
  uint32_t ag_then_gemm(const char* ag, const char* gemm, Phase ph, int32_t L, uint32_t in, int64_t n, int64_t k,
                        const std::vector<uint32_t>& extra = {}) {
    if (!l_.tp_comm_overlap) {
      gathered_ = tp_gather(ag, ph, L, in);
      std::vector<uint32_t> after = deps(gathered_);
      after.insert(after.end(), extra.begin(), extra.end());
      return add_gemm(gemm, ph, L, tokens_, n, k, after);
    }
    uint32_t have = in, last = kNone;
    for (int64_t i = 0; i < t_; ++i) {
      if (i > 0) {
        add_p2p("tp-overlap-send", OpKind::Send, GroupKind::TP, 1, "tp-send", ph, L, act_bytes(), deps(have), true);
        have = add_p2p("tp-overlap-recv", OpKind::Recv, GroupKind::TP, static_cast<int32_t>(t_ - 1), "tp-recv", ph,
                       L, act_bytes(), deps(have), true);
      }
      std::vector<uint32_t> after = deps(have, last);
      if (i == 0) after.insert(after.end(), extra.begin(), extra.end());
      last = add_gemm(gemm, ph, L, seq_tokens_, n, k, after);
    }
    gathered_ = have;
    return last;
  }
  // A row-parallel GEMM then its all-reduce (reduce-scatter under SP). Overlapped
  // (pipelined reduce-scatter): the GEMM runs chunk by chunk, each chunk's partial sums
  // leave for the ring successor as soon as they exist, and the last step adds the
  // partials that arrived; tp - 1 sends of one chunk each. In the forward these are
  // Transformer Engine's `pipeline` overlaps (proj_fprop, fc2_fprop), whose kernels hold
  // SMs beside the chunks (Op::holds_sms); the backward's are its `bulk` overlaps.
  // `then` (the backward only), when given, adds the weight-gradient GEMM after the data-gradient
  // GEMM in the compute stream's order and returns the op it ends with. Megatron's and
  // Transformer Engine's linear layers reduce the data gradient while computing the
  // weights' (parallel.tp_async_grad_reduce); Megatron-LM before 2021-09 reduced it in the
  // backward of the identity before the layer, once both GEMMs were done.
  uint32_t gemm_then_reduce(const char* gemm, const char* ar, const char* rs, Phase ph, int32_t L,
                            const std::vector<uint32_t>& after, int64_t n, int64_t k,
                            const std::function<uint32_t()>& then = {}) {
    if (!l_.tp_comm_overlap) {
      const uint32_t g = add_gemm(gemm, ph, L, tokens_, n, k, after);
      if (!then) return tp_reduce(ar, rs, ph, L, g);
      if (!l_.tp_async_grad_reduce) return tp_reduce(ar, rs, ph, L, join(g, then()));
      const uint32_t red = tp_reduce(ar, rs, ph, L, g);
      then();
      return red;
    }
    // The backward's (the QKV and MLP-up input gradients) are TE's bulk overlaps: the data
    // gradient's GEMM whole, then one reduce-scatter kernel holding its configured SMs (no
    // margin) beside the weight-gradient GEMM, which runs at the factor for those SMs while
    // the reduce-scatter lasts (the executor retimes it when that ends).
    if (ph == Phase::Backward) {
      const uint32_t g = add_gemm(gemm, ph, L, tokens_, n, k, after);
      const uint32_t red =
          bulk(add_coll(rs, CollectiveKind::ReduceScatter, GroupKind::TP, tp_, ph, L, full_act_bytes(), deps(g)),
               std::string_view(gemm) == "qkv-dgrad" ? l_.tp_overlap_qkv_wgrad_sms : l_.tp_overlap_fc1_wgrad_sms);
      if (then) then();
      return red;
    }
    // The forward's `pipeline` kernels hold their SMs; a `ring_exchange` reduce-scatter
    // (parallel.tp_overlap_reduce_scatter) sends by copy engine and holds none.
    const bool held = !l_.tp_overlap_rs_ring;
    // The kernel's SMs (TE's num_sm for proj_fprop or fc2_fprop) and the GEMMs' margin.
    const auto sms = static_cast<uint16_t>(std::string_view(gemm) == "attn-proj" ? l_.tp_overlap_proj_sms
                                                                                 : l_.tp_overlap_fc2_sms);
    auto mark = [&](uint32_t op) {
      p_.ops[op].held_sms = sms;
      p_.ops[op].sm_margin = l_.tp_overlap_sm_margin;
      return op;
    };
    uint32_t last = kNone, arrived = kNone;
    for (int64_t i = 0; i < t_; ++i) {
      last = add_gemm(gemm, ph, L, seq_tokens_, n, k, i == 0 ? after : deps(last));
      // Every chunk after the first runs beside the previous chunk's send.
      if (i > 0 && held) p_.ops[mark(last)].beside_sms = true;
      if (i + 1 < t_) {
        const uint32_t send = add_p2p("tp-overlap-send", OpKind::Send, GroupKind::TP, 1, "tp-send", ph, L, act_bytes(),
                                      deps(last, arrived), true, held);
        arrived = add_p2p("tp-overlap-recv", OpKind::Recv, GroupKind::TP, static_cast<int32_t>(t_ - 1), "tp-recv", ph,
                          L, act_bytes(), deps(arrived == kNone ? last : arrived), true, held);
        if (held) {
          mark(send);
          mark(arrived);
        }
      }
    }
    return add_memory(rs, ph, L, 2 * act_bytes(), act_bytes(), act_bytes() / static_cast<double>(e_),
                      deps(last, arrived));
  }

  // The backward of Megatron's bias-dropout-add (bias_dropout_add_fused_train under
  // jit_fuser) for one branch of the residual stream, from its output gradient `g`: with
  // hidden dropout, the dropped branch's gradient is `g` times the mask and 1 / (1 - p), a
  // kernel of its own (the gradient and the 1-byte mask read, the gradient written); with
  // linear biases under Transformer Engine (skip_bias_add: the projection and FC2 return
  // their bias for this op to add), the bias gradient is that gradient summed over the
  // (sequence-parallel) tokens, a reduction. The residual's gradient passes through.
  uint32_t bias_dropout_add_backward(const char* drop_name, const char* bias_name, int32_t L, uint32_t g,
                                     bool biased = true) {
    if (l_.plan_before_2026_12_05) return g;
    const double act = act_bytes(), elems = act / static_cast<double>(e_);
    if (m_.dropout > 0)
      g = add_memory(drop_name, Phase::Backward, L, act + elems, act, elems, deps(g));
    if (biased && m_.biases && !l_.local_impl)
      g = add_memory(bias_name, Phase::Backward, L, act, static_cast<double>(m_.hidden) * static_cast<double>(e_),
                     elems, deps(g));
    return g;
  }

  // The nodes loss.backward() walks before its first one runs (autograd's dependency count
  // over the graph from the loss down to this chunk's input): one a forward computation
  // planned since the chunk began (`first`; a GEMM split into chunks beside its
  // communication is one op of its module, and communication records none), one a parameter
  // tensor of its layers and of the embedding or output layer it holds (their AccumulateGrad
  // nodes). A floor: the views and splits a framework records between its kernels add more
  // (docs/model.md, "Each micro-batch's loss"). A chunk's graph ends at its input: a
  // received activation is a leaf.
  int64_t autograd_nodes(int64_t chunk, uint32_t first) const {
    // Under full recompute each layer is one checkpoint node; its ops record none.
    const bool checkpointed = l_.recompute == "full";
    std::vector<std::pair<int32_t, uint32_t>> ops;  // (layer, name) of each forward computation
    for (size_t i = first; i < p_.ops.size(); ++i) {
      const Op& op = p_.ops[i];
      const bool comm = op.kind == OpKind::Collective || op.kind == OpKind::Send || op.kind == OpKind::Recv;
      // (the pipeline's device synchronize is the host's wait, no node of the graph)
      if (op.phase == Phase::Forward && !comm && op.name != device_sync_name_ && !(checkpointed && op.layer >= 0))
        ops.emplace_back(op.layer, op.name);
    }
    std::sort(ops.begin(), ops.end());
    int64_t nodes = (checkpointed ? chunk_layers(chunk) : 0) +
                    static_cast<int64_t>(std::unique(ops.begin(), ops.end()) - ops.begin());
    for (int64_t i = 0; i < chunk_layers(chunk); ++i) nodes += layer_param_tensors(layer_of(chunk, i));
    if (first_virtual(chunk)) nodes += m_.learned_positions ? 2 : 1;  // the token (and position) tables
    if (last_virtual(chunk)) nodes += (m_.biases ? 2 : 1) + (m_.tied_embeddings && l_.pp == 1 ? 0 : 1);
    return nodes;
  }
  // A layer's parameter tensors: two norms' gains (and biases), the QKV and projection
  // weights (and biases), then FC1 and FC2 (and biases), or a router and each local
  // expert's two.
  int64_t layer_param_tensors(int32_t L) const {
    int64_t n = m_.biases ? 8 : 4;
    if (m_.moe_layer(L))
      n += 1 + 2 * (m_.moe.experts / l_.ep);
    else
      n += m_.biases ? 4 : 2;
    return n;
  }

  // Megatron's DDP adds each parameter's gradient into its FP32 main gradient from a hook
  // after every micro-batch's backward (`param.main_grad.add_(param.grad.data)`), except
  // where the wgrad GEMM accumulated it there already (gradient-accumulation fusion, or the
  // main_grad_add ops below): the LayerNorm gains and biases and the linear biases, one
  // small kernel each, 16-bit into the main gradient's type (FP32: a dynamic-cast loop).
  // `k` counts the kernels.
  uint32_t small_param_grad_adds(int32_t L, uint32_t g) {
    if (l_.plan_before_2026_12_05) return g;
    const int64_t h = m_.hidden;
    int64_t kernels = m_.biases ? 4 : 2, elements = kernels * h;  // two norms: gains (and biases)
    if (m_.biases) {  // QKV and projection biases; FC1's and FC2's in a dense layer
      kernels += 2, elements += qkv_ + h;
      if (!m_.moe_layer(L))
        kernels += 2, elements += (m_.ffn_type == FfnType::Swiglu ? 2 : 1) * (m_.ffn_hidden / t_) + h;
    }
    const double n = static_cast<double>(elements), ge = dtype_bits(grad_dtype_) / 8.0;
    uint32_t op = add_memory("main-grad-add-small-params", Phase::Backward, L, n * (ge + static_cast<double>(e_)),
                             n * ge, n, deps(g));
    if (ge != static_cast<double>(e_)) op = accessed(op, MemAccess::DynamicCast, n);
    p_.ops[op].k = kernels;
    return op;
  }

  // ---- Weight gradients into the main gradient buffer --------------------------------
  // With --gradient-accumulation-fusion the wgrad GEMM adds into the main gradient in its
  // epilogue (nothing more to run). Without it, the GEMM writes a 16-bit gradient and a
  // hook adds it into the buffer: main_grad.add_(grad) at every micro-batch (Megatron-LM's
  // DistributedDataParallel of 2021, megatron/model/distributed.py).
  uint32_t main_grad_add(const char* name, int32_t L, int64_t in, int64_t out, uint32_t wgrad) {
    if (l_.grad_accumulation_fusion || l_.eager) return wgrad;
    const double params = static_cast<double>(in * out), g = dtype_bits(grad_dtype_) / 8.0;
    const uint32_t op = add_memory(name, Phase::Backward, L, params * (e_ + g), params * g, params, deps(wgrad));
    return dtype_bits(grad_dtype_) / 8 == e_ ? op : accessed(op, MemAccess::DynamicCast, params);
  }

  // ---- Transformer Engine FP8: casts to FP8 (with amax) and the transposes wgrad reads --
  // Transformer Engine's Fp8Padding and Fp8Unpadding around the grouped MLP under FP8
  // (Megatron-Core's TEGroupedMLP, core_r0.10.0 to core_r0.15.0): FP8 GEMMs take each expert's
  // rows in multiples of 16, so the dispatched tokens are copied into a buffer with each
  // expert's rows padded (tex.fused_multi_row_padding) before FC1, and FC2's output copied
  // out of it (fused_multi_row_unpadding); the backward copies the gradients the other way.
  // Fp8Padding returns its input untouched only when every count is already a multiple of
  // 16, which routing does not leave, so the copies run every layer and micro-batch unless
  // the router pads its map instead (model.moe.router_padding_for_fp8).
  uint32_t fp8_expert_padding(const char* name, Phase ph, int32_t L, int64_t rows, uint32_t after) {
    if (!l_.fp8 || m_.moe.router_padding_for_fp8) return after;
    const double bytes = static_cast<double>(rows) * static_cast<double>(m_.hidden) * static_cast<double>(e_);
    return add_memory(name, ph, L, bytes, bytes, 0, deps(after));
  }

  // A cast-transpose reads the BF16 tensor and writes it twice in FP8 (as is and
  // transposed). TE fuses the casts of the LayerNorm outputs (QKV, MLP up) and of the
  // GELU output into those kernels; the attention output and every gradient entering a
  // linear layer's backward get a kernel of their own.
  // Transformer Engine's cast-transpose of a rows × cols activation or gradient: its FP8
  // copy and the transpose the next GEMM reads, and the tensor's amax.
  // `held`: bytes per element of the tensor read (the activations' type unless given).
  //
  // Under current scaling (training.fp8_recipe: tensorwise, TE's Float8CurrentScalingQuantizer)
  // the scale comes from the tensor itself: a kernel reads it for its amax first
  // (nvte_compute_amax), the amax of a sequence-parallel shard is all-reduced over TP
  // (`amax_over_tp`), then the cast reads it again. Delayed scaling takes the scale from the
  // amax history and records the new amax as the cast writes: one pass.
  uint32_t fp8_cast(const char* name, Phase ph, int32_t L, int64_t rows, int64_t cols, uint32_t after,
                    double held = 0, bool amax_over_tp = false) {
    if (!l_.fp8) return after;
    const double elements = static_cast<double>(rows) * static_cast<double>(cols);
    const double read = elements * (held > 0 ? held : static_cast<double>(e_));
    if (l_.fp8_current_scaling) {
      after = add_memory((std::string(name) + "-amax").c_str(), ph, L, read, 4, elements, deps(after));
      if (amax_over_tp) after = amax_allreduce(name, ph, L, after);
    }
    return cast_transpose(name, ph, L, rows, cols, read, after);
  }

  // The cast-transpose kernel itself: `read` bytes in, the FP8 copy and its transpose out.
  uint32_t cast_transpose(const char* name, Phase ph, int32_t L, int64_t rows, int64_t cols, double read,
                          uint32_t after) {
    const double elements = static_cast<double>(rows) * static_cast<double>(cols);
    const uint32_t c = add_memory(name, ph, L, read, 2.0 * elements, 2.0 * elements, deps(after));
    Op& op = p_.ops[c];
    op.access = MemAccess::Fp8CastTranspose;
    op.m = rows;
    op.n = cols;
    return c;
  }

  // The 4-byte MAX all-reduce of a sequence-parallel tensor's amax over the TP group, which
  // the cast waits for (TE's amax reduction group: the column-parallel inputs and the
  // row-parallel output gradients under sequence parallelism).
  uint32_t amax_allreduce(const char* name, Phase ph, int32_t L, uint32_t after) {
    if (!l_.sequence_parallel) return after;
    return add_coll((std::string(name) + "-amax-allreduce").c_str(), CollectiveKind::AllReduce, GroupKind::TP, tp_,
                    ph, L, 4, deps(after));
  }

  // Current scaling cannot scale inside the kernel that produces a tensor: TE's norms and
  // activations then write it in BF16 with its amax (Impl::FUSED_NORM_AMAX_FP8 in
  // normalization.cpp), and a quantize kernel reads it and writes the FP8 copy and its
  // transpose. Under delayed scaling the norm or activation writes FP8 itself: nothing here.
  uint32_t fp8_quantize_fused(const char* name, Phase ph, int32_t L, int64_t rows, int64_t cols, uint32_t after,
                              bool amax_over_tp = false) {
    if (!l_.fp8_current_scaling || l_.eager) return after;
    if (amax_over_tp) after = amax_allreduce(name, ph, L, after);
    const double elements = static_cast<double>(rows) * static_cast<double>(cols);
    return cast_transpose(name, ph, L, rows, cols, elements * static_cast<double>(e_), after);
  }

  // ---- unfused attention: QK^T and PV as batched GEMMs, scores through HBM ------------
  // Megatron-LM before fused attention: per head, S = QK^T (q x kv x d) into HBM, a fused
  // scale-mask-softmax over S (read and write), dropout over S (and its 1-byte mask),
  // then O = PV. The GEMMs compute the whole square (the causal mask is applied to the
  // scores), so they count twice the causal model FLOPs as hardware FLOPs.
  uint32_t unfused_attention_forward(Phase ph, int32_t L, int64_t q, int64_t kv, uint32_t in) {
    const int64_t heads = m_.heads / t_, d = m_.head_dim();
    const int64_t bh = l_.micro_batch * heads;
    const double scores = static_cast<double>(bh * q * kv);
    const double s_e = static_cast<double>(e_);
    uint32_t x = add_gemm("attn-scores", ph, L, q, kv, d, deps(in), bh, 0.5, attn_dtype_);
    x = add_memory("softmax", ph, L, scores * s_e, scores * s_e, 5.0 * scores, deps(x));
    // PyTorch's dropout kernel draws its Philox numbers per element (MemAccess::RandomMask).
    if (m_.dropout > 0)
      x = accessed(add_memory("attention-dropout", ph, L, scores * s_e, scores * (s_e + 1), scores, deps(x)),
                   MemAccess::RandomMask, scores);
    x = add_gemm("attn-context", ph, L, q, d, kv, deps(x), bh, 0.5, attn_dtype_);
    return context_permute("context-permute", ph, L, x);
  }
  // Megatron-LM's own layer (transformer_impl: local) makes the context [b, np, s, hn] ->
  // [s, b, np, hn] contiguous after PV, and its backward makes the permuted gradient
  // contiguous again for the batched GEMMs: PyTorch's strided copy loop, each way.
  uint32_t context_permute(const char* name, Phase ph, int32_t L, uint32_t after) {
    if (!l_.local_impl) return after;
    return strided_copy(name, ph, L, static_cast<double>(tokens_ * (m_.heads / t_) * m_.head_dim()),
                        MemAccess::StridedCopy, deps(after));
  }
  // A copy of `elements` 16-bit elements through one of PyTorch's strided loops.
  uint32_t strided_copy(const char* name, Phase ph, int32_t L, double elements, MemAccess a,
                        const std::vector<uint32_t>& after) {
    const double b = elements * static_cast<double>(e_);
    return accessed(add_memory(name, ph, L, b, b, 0, after), a, elements);
  }
  uint32_t unfused_attention_backward(int32_t L, int64_t q, int64_t kv, uint32_t dout) {
    const int64_t heads = m_.heads / t_, d = m_.head_dim();
    const int64_t bh = l_.micro_batch * heads;
    const double scores = static_cast<double>(bh * q * kv);
    const double s_e = static_cast<double>(e_);
    const Phase ph = Phase::Backward;
    // Selective recompute (Korthikanti et al. 2022): the attention core's forward runs
    // again here instead of keeping its 5·a·s²·b bytes per layer.
    if (l_.recompute_core_attn) {
      recomputing_ = true;
      dout = join(dout, unfused_attention_forward(ph, L, q, kv, dout));
      recomputing_ = false;
    }
    dout = context_permute("context-permute-backward", ph, L, dout);
    uint32_t dp = add_gemm("attn-context-dgrad", ph, L, q, kv, d, deps(dout), bh, 0.5, attn_dtype_);
    const uint32_t dv = add_gemm("attn-context-wgrad", ph, L, kv, d, q, deps(dout), bh, 0.5, attn_dtype_);
    if (m_.dropout > 0)
      dp = add_memory("attention-dropout-backward", ph, L, scores * (s_e + 1), scores * s_e, scores, deps(dp));
    const uint32_t ds = add_memory("softmax-backward", ph, L, 2 * scores * s_e, scores * s_e, 4.0 * scores, deps(dp));
    const uint32_t dq = add_gemm("attn-scores-dgrad", ph, L, q, d, kv, deps(ds), bh, 0.5, attn_dtype_);
    const uint32_t dk = add_gemm("attn-scores-wgrad", ph, L, kv, d, q, deps(ds, dv), bh, 0.5, attn_dtype_);
    // Megatron-LM's own layer splits the fused QKV output into strided views
    // (split_tensor_along_last_dim), so autograd concatenates their gradients back
    // (torch.cat over strided parts). With rotary embeddings rope_backward does it.
    if (l_.local_impl && m_.learned_positions)
      return strided_copy("qkv-split-backward", ph, L, static_cast<double>(tokens_ * qkv_), MemAccess::CatCopy,
                          deps(dq, dk));
    return join(dq, dk);
  }

  int32_t layer_of(int64_t chunk, int64_t i) const {
    return static_cast<int32_t>(
        stage_layers(l_, m_.layers, chunk * l_.pp + stage_).first + i);
  }
  int64_t chunk_layers(int64_t chunk) const {
    return stage_layers(l_, m_.layers, chunk * l_.pp + stage_).second;
  }
  bool first_virtual(int64_t chunk) const { return chunk == 0 && stage_ == 0; }
  bool last_virtual(int64_t chunk) const { return chunk == l_.virtual_stages - 1 && stage_ == l_.pp - 1; }

  double layer_dense_params(int32_t L) const {
    const double t = static_cast<double>(t_), h = static_cast<double>(m_.hidden);
    double p = static_cast<double>(m_.attention_params()) / t + (m_.biases ? 4 * h : 2 * h);
    if (m_.moe_layer(L))
      p +=
          h * static_cast<double>(m_.moe.experts) + static_cast<double>(m_.moe.shared_experts * m_.expert_params()) / t;
    else
      p += static_cast<double>(m_.dense_mlp_params()) / t;
    return p;
  }
  double layer_expert_params(int32_t L) const {
    if (!m_.moe_layer(L)) return 0;
    return static_cast<double>(m_.moe.experts / l_.ep * m_.expert_params()) / static_cast<double>(l_.expert_tp());
  }
  double embedding_params(bool first, bool last) const { return vocab_params(m_, t_, first, last, m_.mtp_layers); }

  // ---- ZeRO-3 parameter gathers and gradient scatters, per layer ----------------------
  // Whether each backward gathers its layer's parameters again (ZeRO 3 per micro-batch).
  bool zero3_backward_gathers() const {
    return l_.zero_stage >= 3 && l_.dp * l_.cp > 1 && !l_.zero3_gather_once && !l_.zero3_keep_for_backward;
  }
  // The backward's gather for layer L: the one prefetched for it, else issued now.
  uint32_t zero3_backward_gather(int32_t L, uint32_t after) {
    if (prefetched_layer_ == L) {
      prefetched_layer_ = -1;
      return prefetched_gather_;
    }
    return zero3_gather(Phase::Backward, L, after);
  }
  // At the start of layer `L`'s backward, `below` next: with a backward prefetch the gather
  // of `below` goes on the DP stream now, ahead of L's reduce-scatter and behind the layer
  // above's, waiting for no kernel, so it runs beside L's backward. BACKWARD_PRE issues it
  // from L's pre-backward hook and BACKWARD_POST from its post-backward hook; both hooks run
  // on the host as autograd reaches them, ahead of the GPU, so the stream gets the same
  // order either way (docs/model.md, "ZeRO 3 backward prefetch").
  void zero3_prefetch_below(int32_t below) {
    if (below < 0 || !zero3_backward_gathers() || !l_.zero3_prefetch) return;
    prefetched_gather_ = zero3_gather(Phase::Backward, below, kNone);
    prefetched_layer_ = below;
  }

  uint32_t zero3_gather(Phase ph, int32_t L, uint32_t after) {
    if (l_.zero_stage < 3 || l_.dp * l_.cp == 1) return after;
    // Gathered once: what the first micro-batch's forward gathered stays until the step
    // ends (torch.distributed.pipelining turns FSDP's reshard off for all but the last
    // backward).
    if (l_.zero3_gather_once && (ph != Phase::Forward || mb_ > 0)) return after;
    // Kept for the backward (SHARD_GRAD_OP): gathered before each forward only.
    if (l_.zero3_keep_for_backward && ph != Phase::Forward) return after;
    const double pe = dtype_bits(l_.fsdp_param_dtype) / 8.0;
    // Prefetched: the gather for this layer is issued on the DP stream as soon as the
    // previous gather finished, and the layer's first op waits for it.
    uint32_t g = add_coll(ph == Phase::Forward ? "zero3-param-allgather" : "zero3-param-allgather-bwd",
                          CollectiveKind::AllGather, GroupKind::DP, dp_, ph, L,
                          layer_dense_params(L) * pe, {});
    if (layer_expert_params(L) > 0 && expert_dp() > 1)
      g = add_coll("zero3-expert-allgather", CollectiveKind::AllGather, GroupKind::EDP, dp_, ph, L,
                   layer_expert_params(L) * pe, {});
    (void)after;
    return g;
  }

  // ---- data-parallel gradient buckets -------------------------------------------------
  // Megatron-Core's finish_embedding_wgrad_compute: after the last backward, the output
  // layer's deferred weight gradients, one GEMM per deferred micro-batch, each on its
  // input all-gathered again under SP; then its gradient joins the buckets.
  void drain_deferred_wgrads() {
    if (deferred_wgrads_ == 0) return;
    const int64_t h = m_.hidden;
    for (int64_t i = 0; i < deferred_wgrads_; ++i) {
      const uint32_t x = tp_gather("allgather-logits-input-wgrad", Phase::Backward, -1, prev_);
      prev_ = main_grad_add("grad-accumulate-logits", -1, vocab_local_, h,
                            add_gemm("logits-wgrad", Phase::Backward, -1, vocab_local_, h, tokens_, deps(x, prev_), 1,
                                     1.0, act_dtype_));
    }
    if (deferred_embedding_params_ > 0) add_grads(-1, deferred_embedding_params_, 0, prev_);
    deferred_wgrads_ = 0;
    deferred_embedding_params_ = 0;
  }

  void add_grads(int32_t L, double dense, double expert, uint32_t ready) {
    const double gb = dtype_bits(l_.zero_stage >= 3 ? l_.fsdp_reduce_dtype : grad_dtype_) / 8.0;
    if (l_.zero_stage >= 3) {
      // ZeRO-3 reduce-scatters each layer's gradients every micro-batch (step sync: once,
      // in the last micro-batch's backward, from the unsharded accumulation buffer).
      if (l_.dp * l_.cp > 1 && dense > 0) {
        if (l_.eager) {
          fsdp_reduce_scatter(L, dense, ready);
        } else {
          grad_ops_.push_back(add_grad_coll("zero3-grad-reduce-scatter", CollectiveKind::ReduceScatter, GroupKind::DP,
                                            L, dense * gb, ready));
        }
      }
      if (expert_dp() > 1 && expert > 0)
        grad_ops_.push_back(add_grad_coll("zero3-expert-grad-reduce-scatter", CollectiveKind::ReduceScatter,
                                          GroupKind::EDP, L, expert * gb, ready));
      return;
    }
    bucket_dense_ += dense;
    bucket_gather_ += dense * gathered_bytes(L);
    bucket_expert_ += expert;
    bucket_ready_ = ready;
    bucket_layer_ = L;
    if (bucket_dense_ + bucket_expert_ >= static_cast<double>(l_.bucket_params)) flush_buckets(ready);
  }

  // PyTorch FSDP's post-backward hook on a layer's FlatParameter (torch/distributed/fsdp/
  // _runtime_utils.py, _post_backward_hook, and default_hooks.reduce_scatter_hook): the
  // unsharded gradient, in the dtype the layer computed in, is cast to reduce_dtype, divided
  // by the pre-divide factor, reduce-scattered, and its shard divided by the rest of the
  // world size, cast back to the FP32 parameter's dtype and added into the saved shard
  // (from the second micro-batch). The unsharded passes run as the layer's gradients land,
  // before the next layer's kernels get the SMs (compute stream); the shard's, after the
  // reduce-scatter (DP stream). docs/model.md, "ZeRO 3 backward prefetch".
  void fsdp_reduce_scatter(int32_t L, double params, uint32_t ready) {
    const double n = static_cast<double>(l_.dp * l_.cp);
    const double ep = dtype_bits(l_.fsdp_param_dtype) / 8.0, er = dtype_bits(l_.fsdp_reduce_dtype) / 8.0;
    double pre = 1;  // _get_gradient_predivide_factor
    while (std::fmod(n, pre) == 0 && n / pre > pre) pre *= 2;
    uint32_t r = ready;
    if (ep != er) r = add_memory("fsdp-grad-cast", Phase::Backward, L, params * ep, params * er, 0, deps(r));
    if (pre > 1) r = add_memory("fsdp-grad-predivide", Phase::Backward, L, params * er, params * er, params, deps(r));
    uint32_t g = add_grad_coll("zero3-grad-reduce-scatter", CollectiveKind::ReduceScatter, GroupKind::DP, L,
                               params * er, r);
    const double shard = params / n;
    const Phase b = Phase::Backward;
    if (n / pre > 1) g = add_memory("fsdp-grad-postdivide", b, L, shard * er, shard * er, shard, deps(g), dp_);
    if (er != 4) g = add_memory("fsdp-grad-shard-cast", b, L, shard * er, shard * 4, 0, deps(g), dp_);
    if (mb_ > 0) g = add_memory("fsdp-grad-accumulate", b, L, 8 * shard, 4 * shard, shard, deps(g), dp_);
    grad_ops_.push_back(g);
  }

  uint32_t add_grad_coll(const char* name, CollectiveKind kind, GroupKind group, int32_t L, double bytes,
                         uint32_t ready) {
    Op op = base(name, OpKind::Collective, Phase::Backward, L, dp_);
    op.collective = kind;
    op.group = group;
    op.dtype = grad_dtype_;
    op.bytes = static_cast<int64_t>(bytes);
    op.micro_batch = -1;
    return p_.add(op, deps(ready));
  }

  void flush_buckets(uint32_t ready) {
    if (defer_grads_) {
      if (bucket_dense_ + bucket_expert_ > 0)
        deferred_.push_back(Bucket{bucket_dense_, bucket_expert_, bucket_layer_, bucket_gather_});
      bucket_dense_ = bucket_expert_ = bucket_gather_ = 0;
      return;
    }
    if (ready == kNone) ready = bucket_ready_;
    const double gb = dtype_bits(grad_dtype_) / 8.0;
    // Megatron-Core's check_for_nan_in_grad: start_grad_sync takes the bucket's norm on the
    // compute stream and asserts it is not NaN, so the host waits for it before it issues
    // the bucket's collective and goes on with the backward.
    if (l_.grad_nan_check && bucket_dense_ + bucket_expert_ > 0) {
      const double bytes = (bucket_dense_ + bucket_expert_) * gb;
      ready = add_memory("grad-nan-norm", Phase::Backward, bucket_layer_, bytes, 4, bytes / gb, deps(ready));
      ready = host_wait("grad-nan-wait", Phase::Backward, bucket_layer_, ready);
    }
    const bool sharded = l_.zero_stage >= 1;
    const CollectiveKind kind = sharded ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
    if (bucket_dense_ > 0 && l_.dp * l_.cp > 1) {
      grad_ops_.push_back(add_grad_coll(sharded ? "dp-grad-reduce-scatter" : "dp-grad-allreduce", kind, GroupKind::DP,
                                        bucket_layer_, bucket_dense_ * gb, ready));
      if (sharded && !l_.overlap_param_gather) gather_buckets_.push_back(bucket_gather_);
    }
    if (bucket_expert_ > 0 && expert_dp() > 1) {
      grad_ops_.push_back(add_grad_coll(sharded ? "expert-grad-reduce-scatter" : "expert-grad-allreduce", kind,
                                        GroupKind::EDP, bucket_layer_, bucket_expert_ * gb, ready));
    }
    bucket_dense_ = bucket_expert_ = bucket_gather_ = 0;
  }

  // ---- attention, with ring attention across the CP group ----------------------------
  // Ring attention: the local K/V block first, then cp - 1 blocks arriving from the ring
  // predecessor while the block at hand is computed (load-balanced causal split). Forward
  // passes K and V on as they arrive; backward passes K, V and their gradients (twice the
  // bytes) once each block's gradients are done.
  // `fwd`: the forward's kernels, also in the backward phase when recomputed there.
  uint32_t ring_attention(int32_t L, Phase ph, uint32_t input) {
    return ring_attention(L, ph, input, ph == Phase::Forward);
  }
  uint32_t ring_attention(int32_t L, Phase ph, uint32_t input, bool fwd) {
    const int64_t q = m_.seq_len / l_.cp;
    const char* block = fwd ? "attention-block" : "attention-block-backward";
    if (l_.cp == 1) {
      if (!l_.flash_attention)
        return fwd ? unfused_attention_forward(ph, L, q, q, input) : unfused_attention_backward(L, q, q, input);
      return add_attention(fwd ? "attention" : "attention-backward", ph, L, q, q, deps(input));
    }
    if (l_.cp_allgather) return allgather_attention(L, ph, input, fwd);
    const double KV = cp_kv_bytes();
    const double kv = fwd ? KV : 2.0 * KV;  // a step's send: K and V, and in the backward their gradients too
    // Transformer Engine's AttnFuncWithCPAndKVP2P around the blocks (docs/model.md,
    // "Context parallelism"): K and V packed into one send buffer; at each step after the
    // first the half of the query, or of K/V, that the load-balanced split leaves the rank
    // copied contiguous; the forward's per-step outputs corrected into one by their
    // log-sum-exps; in the backward each block's dK, dV concatenated and, with its dQ,
    // accumulated. Bytes in units of the rank's query (Q) and K+V (KV) tensors, each
    // step's averaged over the ring's ranks (a step's halves fall to different ranks).
    const double Q = static_cast<double>(l_.micro_batch * q * (m_.heads / t_) * m_.attn_head_dim() * e_);
    const double c = static_cast<double>(l_.cp - 1);
    uint32_t pack = add_memory("cp-kv-pack", ph, L, KV + (fwd ? 0.25 * c * (Q + KV) : 0.0),
                               KV + (fwd ? 0.25 * c * (Q + KV) : 0.0), 0, deps(input));
    uint32_t at = add_attention(block, ph, L, q, q, deps(pack));
    if (!fwd) at = add_memory("cp-grad-accumulate", ph, L, 2 * KV + Q, 2 * KV + Q, 0, deps(at));
    uint32_t have = fwd ? pack : at;
    for (int64_t i = 1; i < l_.cp; ++i) {
      add_p2p(fwd ? "cp-kv-send" : "cp-dkv-send", OpKind::Send, GroupKind::CP, 1, "cp-send", ph, L, kv, deps(have),
              true, false, true);
      const uint32_t recv = add_p2p(fwd ? "cp-kv-recv" : "cp-dkv-recv", OpKind::Recv, GroupKind::CP,
                                    static_cast<int32_t>(l_.cp - 1), "cp-recv", ph, L, kv, deps(have), true, false,
                                    true);
      at = add_attention(block, ph, L, q, q, deps(recv, at));
      if (!fwd)
        at = add_memory("cp-grad-accumulate", ph, L, 2.5 * KV + 2.25 * Q, 1.75 * KV + 1.5 * Q,
                        0.75 * (KV + Q) / static_cast<double>(e_), deps(at));
      have = fwd ? recv : at;
    }
    if (!fwd) return at;
    // The corrections: out zero-filled, then each step's output read with out and added
    // into it, over the whole query at steps the rank computes whole and over its second
    // half at the others: 1 + 3c/4 whole-query corrections on average.
    const double corr = 1.0 + 0.75 * c;
    return add_memory("attention-merge", ph, L, 2 * corr * Q, (corr + 1) * Q, 4.0 * corr * Q / static_cast<double>(e_),
                      deps(at));
  }

  // A CP rank's K and V: its s/cp tokens of the TP rank's K/V heads.
  double cp_kv_bytes() const {
    return 2.0 * static_cast<double>(l_.micro_batch * (m_.seq_len / l_.cp) * (m_.attn_kv_heads() / t_) *
                                     m_.attn_head_dim() * e_);
  }

  // All-gather context parallelism (parallel.cp_comm: all-gather; Transformer Engine's
  // AttnFuncWithCPAndKVAllGather, Megatron-Core's --cp-comm-type all_gather, and Llama 3's
  // training as Dubey et al. 2024 describe it, section 3.3.2): the rank's K and V
  // all-gathered over the CP group and put back in sequence order (the load-balanced split
  // holds chunks i and 2·cp − 1 − i), then the rank's s/cp queries attend over the keys
  // before them: s²/(2·cp) score pairs, as one causal kernel of s/cp queries over s keys.
  // The backward gathers K and V again (only the local ones are saved), and the K/V
  // gradients, computed over the whole gathered length, are reordered and
  // reduce-scattered back to their ranks. The all-gathers sit in the attention's path.
  uint32_t allgather_attention(int32_t L, Phase ph, uint32_t input, bool fwd) {
    const int64_t q = m_.seq_len / l_.cp;
    const double gathered = cp_kv_bytes() * static_cast<double>(l_.cp);
    if (cp_ == 0xff) cp_ = p_.stream("cp");
    const uint32_t ag = add_coll(fwd ? "cp-kv-allgather" : "cp-kv-allgather-backward", CollectiveKind::AllGather,
                                 GroupKind::CP, cp_, ph, L, gathered, deps(input));
    const uint32_t order = add_memory("cp-kv-reorder", ph, L, gathered, gathered, 0, deps(ag));
    const uint32_t at = add_attention(fwd ? "attention" : "attention-backward", ph, L, q, m_.seq_len, deps(order));
    if (fwd) return at;
    const uint32_t back = add_memory("cp-dkv-reorder", ph, L, gathered, gathered, 0, deps(at));
    const uint32_t rs = add_coll("cp-dkv-reduce-scatter", CollectiveKind::ReduceScatter, GroupKind::CP, cp_, ph, L,
                                 gathered, deps(back));
    return join(at, rs);
  }

  // The rotary embedding (models without a learned position table) on each TP rank's
  // query and key heads, as Megatron-Core's SelfAttention applies it between the QKV GEMM
  // and the attention kernel (docs/model.md, "Rotary embedding"). Transformer Engine's
  // fused kernel (training.rope_fusion) reads and writes each element once;
  // apply_rotary_pos_emb's unfused chain (t·cos, rotate_half's negation and concatenation,
  // ·sin, the sum, the concatenation with the unrotated part) as measured below. Under GQA
  // the query's reshape out of the grouped QKV layout cannot be a view, so it is copied
  // first: a strided gather, measured at 2.3 times a copy's time (the same measurement).
  // In the backward the same passes run on the gradients, and the
  // split of the QKV output is undone by concatenating the three gradients (TE's
  // SplitAlongDim: they come from separate buffers, so a copy).
  // The unfused chain's ten kernels a tensor (two of them on the [s, 1, 1, d] angles) run
  // below copy rate: the broadcast multiplies and the half-width negation are strided, so
  // TensorIterator does not vectorize them, and the concatenations copy strided halves.
  // Timed as their kernels' sum on one H200, they take what a copy of 28.5 (forward) and
  // 30 (backward) elements per element would (calibrate/measurements/rope-h200-2026-12-03),
  // where their tensors' bytes alone would be 12; the op carries those copy-rate passes.
  double rope_reads(bool backward) const { return l_.rope_fusion ? 1.0 : backward ? 16.5 : 15.5; }
  double rope_writes(bool backward) const { return l_.rope_fusion ? 1.0 : backward ? 13.5 : 13.0; }
  double rope_elements() const {
    return static_cast<double>(tokens_ * (m_.heads / t_ + std::max<int64_t>(1, m_.kv_heads / t_)) * m_.head_dim());
  }
  uint32_t rope_forward(Phase ph, int32_t L, uint32_t after) {
    if (m_.learned_positions) return after;
    uint32_t x = after;
    if (m_.kv_heads < m_.heads) {
      const double q = static_cast<double>(tokens_ * (m_.heads / t_) * m_.head_dim() * e_);
      x = add_memory("query-reshape", ph, L, 2.3 * q, 2.3 * q, 0, deps(x));
    }
    const double n = rope_elements();
    return add_memory("rotary", ph, L, rope_reads(false) * n * e_, rope_writes(false) * n * e_, 3.0 * n, deps(x));
  }
  uint32_t rope_backward(int32_t L, uint32_t after) {
    if (m_.learned_positions) return after;
    const double n = rope_elements();
    const uint32_t r = add_memory("rotary-backward", Phase::Backward, L, rope_reads(true) * n * e_,
                                  rope_writes(true) * n * e_, 3.0 * n, deps(after));
    const double qkv = static_cast<double>(tokens_ * qkv_ * e_);
    return add_memory("qkv-grad-cat", Phase::Backward, L, qkv, qkv, 0, deps(r));
  }

  // ---- multi-head latent attention (Megatron-Core's MLASelfAttention) -----------------
  // As core_r0.12.0 runs it with Transformer Engine's layer spec and qk_layernorm
  // (docs/model.md, "Multi-head latent attention"). Every projection is a column-parallel
  // TE Linear: under SP each gathers its own input over TP. The two down projections'
  // outputs are split over TP, so each is all-gathered along its width and concatenated
  // (gather_from_tensor_model_parallel_region), and under SP the rank keeps its own tokens
  // again (a contiguous copy); the up projections are LayerNorm-Linears (the norm on the
  // rank's tokens, then the gather). The rotary part of every query head and the one
  // shared rotary key are rotated, the query and key concatenated from their parts, the
  // value made contiguous, and the attention kernel runs query/key heads of qk + rope and
  // value heads of v.
  // A column-parallel GEMM of `k` inputs and `n` outputs on the sequence, its input gathered
  // over TP under SP.
  uint32_t sp_gemm(const char* ag, const char* gemm, Phase ph, int32_t L, uint32_t in, int64_t n, int64_t k) {
    uint32_t x = in;
    if (t_ > 1 && l_.sequence_parallel)
      x = add_coll(ag, CollectiveKind::AllGather, GroupKind::TP, tp_, ph, L, static_cast<double>(tokens_ * k * e_),
                   deps(in));
    return add_gemm(gemm, ph, L, tokens_, n, k, deps(x));
  }
  // A down projection's output, `width` wide split over TP: all-gathered along the width and
  // concatenated; under SP the rank's tokens of its first `kept` columns copied out.
  uint32_t latent_gather(const char* ag, const char* cat, const char* scatter, Phase ph, int32_t L, uint32_t in,
                         int64_t width, int64_t kept) {
    if (t_ == 1) return in;
    const double full = static_cast<double>(tokens_ * width * e_);
    uint32_t x = add_coll(ag, CollectiveKind::AllGather, GroupKind::TP, tp_, ph, L, full, deps(in));
    x = add_memory(cat, ph, L, full, full, 0, deps(x));
    if (!l_.sequence_parallel) return x;
    const double own = static_cast<double>(seq_tokens_ * kept * e_);
    return add_memory(scatter, ph, L, own, own, 0, deps(x));
  }
  // A norm over the rank's tokens of a latent (the LayerNorm-Linear's own norm).
  uint32_t latent_norm(const char* name, Phase ph, int32_t L, uint32_t in, int64_t width) {
    const double x = static_cast<double>(seq_tokens_ * width * e_);
    return add_memory(name, ph, L, ph == Phase::Backward && !recomputing_ ? 3 * x : x,
                      ph == Phase::Backward && !recomputing_ ? 2 * x : x, 8.0 * x / static_cast<double>(e_), deps(in));
  }
  // The up projections with the rotary embedding and the query's, key's and value's
  // assembly: what training.recompute_modules' mla_up_proj runs again before the
  // attention's backward (Megatron-Core's CheckpointWithoutOutput: the outputs are dropped
  // once the attention has run; the latents they came from are kept).
  uint32_t mla_up(int32_t L, Phase ph, uint32_t q, uint32_t kv) {
    const MlaConfig& a = m_.mla;
    const int64_t n = m_.heads / t_, qk = a.qk_head_dim + a.rope_head_dim;
    if (a.q_lora_rank > 0)
      q = sp_gemm("allgather-q-up-input", "q-up", ph, L, latent_norm("q-layernorm", ph, L, q, a.q_lora_rank), n * qk,
                  a.q_lora_rank);
    else
      q = sp_gemm("allgather-q-input", "q-proj", ph, L, q, n * qk, m_.hidden);
    kv = sp_gemm("allgather-kv-up-input", "kv-up", ph, L, latent_norm("kv-layernorm", ph, L, kv, a.kv_lora_rank),
                 n * (a.qk_head_dim + a.v_head_dim), a.kv_lora_rank);
    const double tok = static_cast<double>(tokens_), e = static_cast<double>(e_);
    const double rot = tok * static_cast<double>((n + 1) * a.rope_head_dim);
    uint32_t r = add_memory("rotary", ph, L, rope_reads(false) * rot * e, rope_writes(false) * rot * e, 3.0 * rot,
                            deps(q, kv));
    const double query = tok * static_cast<double>(n * qk) * e;
    r = add_memory("mla-query-cat", ph, L, query, query, 0, deps(r));
    r = add_memory("mla-key-cat", ph, L, tok * static_cast<double>(n * a.qk_head_dim + a.rope_head_dim) * e, query, 0,
                   deps(r));
    const double value = tok * static_cast<double>(n * a.v_head_dim) * e;
    return add_memory("mla-value-copy", ph, L, value, value, 0, deps(r));
  }
  uint32_t mla_forward(int32_t L, Phase ph, uint32_t ln) {
    const MlaConfig& a = m_.mla;
    const int64_t h = m_.hidden;
    uint32_t q = ln;
    if (a.q_lora_rank > 0) {
      q = sp_gemm("allgather-q-down-input", "q-down", ph, L, ln, a.q_lora_rank / t_, h);
      q = latent_gather("q-down-allgather", "q-down-cat", "q-down-scatter", ph, L, q, a.q_lora_rank, a.q_lora_rank);
    }
    uint32_t kv = sp_gemm("allgather-kv-down-input", "kv-down", ph, L, ln, (a.kv_lora_rank + a.rope_head_dim) / t_, h);
    kv = latent_gather("kv-down-allgather", "kv-down-cat", "kv-down-scatter", ph, L, kv,
                       a.kv_lora_rank + a.rope_head_dim, a.kv_lora_rank);
    return mla_up(L, ph, q, kv);
  }
  // A column-parallel layer's backward (`in` inputs, `out` outputs on this rank): its data
  // gradient reduced over TP (reduce-scatter under SP), its weight gradient on the input
  // gathered again under SP, after `after_w`; returns the data gradient, `w` the weight
  // gradient's last op.
  uint32_t column_backward(const std::string& nm, int32_t L, uint32_t dy, int64_t in, int64_t out, uint32_t after_w,
                           uint32_t& w) {
    const Phase b = Phase::Backward;
    const double bytes = static_cast<double>(tokens_ * in * e_);
    uint32_t d = add_gemm((nm + "-dgrad").c_str(), b, L, tokens_, in, out, deps(dy));
    const bool sp = l_.sequence_parallel;
    if (t_ > 1)
      d = add_coll(((sp ? "reduce-scatter-" : "allreduce-") + nm + "-grad").c_str(),
                   sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, GroupKind::TP, tp_, b, L, bytes,
                   deps(d));
    uint32_t x = dy;
    if (t_ > 1 && sp)
      x = add_coll(("allgather-" + nm + "-input-wgrad").c_str(), CollectiveKind::AllGather, GroupKind::TP, tp_, b, L,
                   bytes, deps(dy));
    w = main_grad_add(("grad-accumulate-" + nm).c_str(), L, in, out,
                      add_gemm((nm + "-wgrad").c_str(), b, L, in, out, tokens_, deps(x, after_w)));
    return d;
  }
  // latent_gather undone in the backward: under SP the rank's tokens of the `kept` columns
  // gathered back, then the rank's columns of the whole `width` copied out.
  uint32_t width_gather_backward(const char* ag, const char* split, int32_t L, uint32_t dy, int64_t width,
                                 int64_t kept) {
    if (t_ == 1) return dy;
    const Phase b = Phase::Backward;
    uint32_t x = dy;
    if (l_.sequence_parallel)
      x = add_coll(ag, CollectiveKind::AllGather, GroupKind::TP, tp_, b, L, static_cast<double>(tokens_ * kept * e_),
                   deps(dy));
    const double mine = static_cast<double>(tokens_ * (width / t_) * e_);
    return add_memory(split, b, L, mine, mine, 0, deps(x));
  }

  // From the attention's input gradients to the layer input's: the assembly's and the
  // rotary embedding's backward, then each projection's data gradient (reduced over TP)
  // and weight gradient (its input gathered again under SP), the latents' norms, their
  // gathers undone. `proj_w`: the output projection's weight gradient, which runs first.
  uint32_t mla_backward(int32_t L, uint32_t dqkv, uint32_t proj_w) {
    const MlaConfig& a = m_.mla;
    const int64_t h = m_.hidden, n = m_.heads / t_, qk = a.qk_head_dim + a.rope_head_dim;
    const Phase b = Phase::Backward;
    const double tok = static_cast<double>(tokens_), e = static_cast<double>(e_);
    const double rot = tok * static_cast<double>((n + 1) * a.rope_head_dim);
    uint32_t r = add_memory("rotary-backward", b, L, rope_reads(true) * rot * e, rope_writes(true) * rot * e,
                            3.0 * rot, deps(dqkv));
    // The query's split undone (a copy), the shared key's gradient summed over the heads,
    // the key's and value's gradients joined into the up projection's output gradient.
    const double query = tok * static_cast<double>(n * qk) * e;
    const uint32_t dq = add_memory("mla-query-grad-cat", b, L, query, query, 0, deps(r));
    r = add_memory("mla-rope-key-grad-sum", b, L, tok * static_cast<double>(n * a.rope_head_dim) * e,
                   tok * static_cast<double>(a.rope_head_dim) * e, 0, deps(r));
    const double kv_out = tok * static_cast<double>(n * (a.qk_head_dim + a.v_head_dim)) * e;
    const uint32_t dkv = add_memory("mla-kv-grad-cat", b, L, kv_out, kv_out, 0, deps(r));
    uint32_t last_w = proj_w;
    auto linear_backward = [&](const char* name, uint32_t dy, int64_t in, int64_t out) {
      return column_backward(name, L, dy, in, out, last_w, last_w);
    };
    auto latent_scatter = [&](const char* ag, const char* split, uint32_t dy, int64_t width, int64_t kept) {
      return width_gather_backward(ag, split, L, dy, width, kept);
    };
    uint32_t kv = linear_backward("kv-up", dkv, a.kv_lora_rank, n * (a.qk_head_dim + a.v_head_dim));
    kv = latent_norm("kv-layernorm-backward", b, L, kv, a.kv_lora_rank);
    kv = latent_scatter("kv-down-grad-allgather", "kv-down-grad-split", kv, a.kv_lora_rank + a.rope_head_dim,
                        a.kv_lora_rank);
    kv = linear_backward("kv-down", join(kv, r), h, (a.kv_lora_rank + a.rope_head_dim) / t_);
    uint32_t q;
    if (a.q_lora_rank > 0) {
      q = linear_backward("q-up", dq, a.q_lora_rank, n * qk);
      q = latent_norm("q-layernorm-backward", b, L, q, a.q_lora_rank);
      q = latent_scatter("q-down-grad-allgather", "q-down-grad-split", q, a.q_lora_rank, a.q_lora_rank);
      q = linear_backward("q-down", q, h, a.q_lora_rank / t_);
    } else {
      q = linear_backward("q-proj", dq, h, n * qk);
    }
    // The two paths' input gradients summed (autograd's accumulation).
    const double own = static_cast<double>(seq_tokens_ * h * e_);
    return add_memory("mla-input-grad-add", b, L, 2 * own, own, own / e, deps(q, kv, last_w));
  }

  // ---- the MLP: dense, or router + experts (+ shared experts) -------------------------
  // The MLP from its (sequence-parallel) input to its reduced output.
  uint32_t mlp_forward(int32_t L, Phase ph, uint32_t ln) {
    const int64_t h = m_.hidden;
    const bool swiglu = m_.ffn_type == FfnType::Swiglu;
    if (!m_.moe_layer(L)) {
      uint32_t up = ag_then_gemm("allgather-mlp-input", "mlp-up", ph, L, ln, mlp_in_, h);
      const double f = static_cast<double>(tokens_ * (m_.ffn_hidden / t_) * e_);
      uint32_t a = add_memory(swiglu ? "swiglu" : "bias-gelu", ph, L, swiglu ? 2 * f : f, f,
                              8.0 * f / static_cast<double>(e_), deps(up));
      // Megatron-LM's own layer: bias_gelu, a TorchScript-fused kernel whose tanh GeLU costs
      // arithmetic beyond its stream (MemAccess::TanhGelu).
      if (l_.local_impl && !swiglu) a = accessed(a, MemAccess::TanhGelu, f / static_cast<double>(e_));
      // Megatron-Core's MLP runs the activation itself, between Transformer Engine's
      // LayerNormLinear (FC1) and Linear (FC2): its BF16 output is cast by FC2's Linear.
      a = fp8_cast("fp8-cast-mlp-act", ph, L, tokens_, m_.ffn_hidden / t_, a);
      return gemm_then_reduce("mlp-down", "tp-allreduce-mlp", "reduce-scatter-mlp", ph, L, deps(a), h,
                              m_.ffn_hidden / t_);
    }
    if (moe_sp()) return moe_forward(L, ph, ln);
    return tp_reduce("tp-allreduce-mlp", "reduce-scatter-mlp", ph, L, moe_forward(L, ph, ln));
  }

  // The MoE layer's work on the most-loaded EP rank of this (layer, micro-batch): tokens
  // per local expert, the grouped GEMM's useful fraction, and the all-to-all's scale.
  // An even router pads every expert to capacity_factor × its share (useful 1/capacity);
  // a skewed one (plan/moe_routing.h) processes the hot rank's tokens, which every rank's
  // combine all-to-all waits for.
  struct ExpertLoad {
    int64_t per_expert = 0;
    double useful = 1, a2a_scale = 1;
  };
  ExpertLoad expert_load(int32_t L, bool forward) {
    const MoeConfig& moe = m_.moe;
    const int64_t routed = moe_rows_tokens() * l_.ep * moe.top_k;
    const double even = static_cast<double>(routed) / static_cast<double>(moe.experts);
    ExpertLoad e;
    if (moe.routing.dist == "even") {
      e.per_expert = static_cast<int64_t>(std::ceil(even * moe.capacity_factor));
      e.useful = 1.0 / moe.capacity_factor;
      return e;
    }
    const double hot = moe_hot_rank_load(moe, routed, l_.ep, L, mb_);
    if (forward) {
      load_sum_ += hot;
      ++load_count_;
    }
    e.per_expert = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(even * hot)));
    e.a2a_scale = hot;
    return e;
  }
  // An FP32 router (--moe-router-dtype fp32; core_r0.12.0 router.py `gating`): the input
  // cast up to FP32 for the GEMM (and its gradient back down in the backward), and the
  // three GEMMs in FP32, priced at the FP32 peak (PyTorch leaves TF32 off for matmuls).
  uint32_t router_cast(const char* name, Phase ph, int32_t L, int64_t rows, uint32_t after) {
    if (!m_.moe.router_fp32) return after;
    const double x = static_cast<double>(rows * m_.hidden);
    const bool up = ph == Phase::Forward || recomputing_;
    return add_memory(name, ph, L, x * (up ? e_ : 4), x * (up ? 4 : e_), 0, deps(after));
  }
  void router_in_fp32(uint32_t gemm) {
    if (!m_.moe.router_fp32) return;
    Op& op = p_.ops[gemm];
    op.dtype = DType::FP32;
    op.bytes_read = (op.m * op.k + op.k * op.n) * 4;
    op.bytes_written = op.m * op.n * 4;
  }
  // ---- The router's own kernels and the dispatcher's bookkeeping ---------------------
  // After its GEMM the router selects each token's experts and builds the routing map and
  // probabilities from small PyTorch ops on [tokens, experts] tensors, each a kernel of its
  // own (Megatron-Core's topk_softmax_with_capacity, group_limited_topk and the balancing
  // losses; core_r0.10.0 and core_r0.12.0 moe_utils.py and router.py). The counts are the
  // kernels one H100 launched running those paths forward and backward
  // (calibrate/measurements/moe-router-h100-2026-12-06; docs/model.md, "The router's own
  // kernels"); each kernel moves its [tokens, experts] tensor in and out.
  struct RouteKernels {
    int64_t fwd = 0, bwd = 0, aux_fwd = 0, aux_bwd = 0;
  };
  bool moe_aux_loss() const { return m_.moe.aux_loss_coeff > 0 && m_.moe.load_balancing != "none"; }
  RouteKernels route_kernels() const {
    const MoeConfig& moe = m_.moe;
    RouteKernels k;
    // Measured: softmax after the top-k (the top-k's select and sort, the softmax and its
    // casts, the gates and the routing map scattered, cast and summed): 15 forward, 8
    // backward. The sigmoid path's base is what DeepSeek-V3's router launched (57 and 29)
    // less the enumerated kernels of its bias (the bias added for the choice, the chosen
    // scores gathered, the counts summed and added: 4, and the gather's backward 2), its
    // groups (the groups' top-2 and their sum, the top groups, the mask built, cast,
    // inverted, applied, the masked top-k: 11), its scaling (1 and 1), its capacity and its
    // sequence loss (below).
    if (moe.score_sigmoid) {
      k.fwd = 22, k.bwd = 12;
      if (moe.expert_bias) k.fwd += 4, k.bwd += 2;
    } else {
      k.fwd = 15, k.bwd = 8;
    }
    if (moe.groups > 0) k.fwd += 11;
    if (moe.topk_scaling > 0) ++k.fwd, ++k.bwd;
    // Measured: the capacity's top-k over the tokens, its mask scattered and cast, the gates
    // masked (6), and the mask's product in the backward (1).
    if (!moe.routing.dropless) k.fwd += 6, ++k.bwd;
    if (moe_aux_loss()) {
      // The switch loss over softmax scores, measured: 8 forward (its softmax and cast, the
      // sums and products, the tracker's add) and 8 backward. The sequence loss, enumerated:
      // the map's counts over the sequence, the scores' mean, their product and means, the
      // coefficient, the tracker (11 forward, 10 backward). Sigmoid scores for the loss take
      // the sigmoid and its normalization (2 more forward, 3 backward).
      const bool seq = moe.load_balancing == "seq_aux_loss";
      k.aux_fwd = seq ? 11 : 8, k.aux_bwd = seq ? 10 : 8;
      if (moe.score_sigmoid) k.aux_fwd += 2, k.aux_bwd += 3;
    }
    return k;
  }
  // A [tokens, experts] tensor of the router's output type.
  double route_bytes(int64_t own) const { return static_cast<double>(own * m_.moe.experts) * probs_bytes(); }
  uint32_t route_op(const char* name, Phase ph, int32_t L, int64_t kernels, int64_t own, uint32_t after) {
    if (kernels <= 0) return after;
    const double b = route_bytes(own) * static_cast<double>(kernels);
    const uint32_t op = add_memory(name, ph, L, b, b, 0, deps(after));
    p_.ops[op].k = kernels;
    return op;
  }
  // A collective over TP x CP, Megatron-Core's sequence-partition group for the balancing
  // loss: run over TP, then over CP (the same sum, or the same gathered whole).
  uint32_t tp_cp_coll(const char* tp_name, const char* cp_name, CollectiveKind kind, Phase ph, int32_t L,
                      double bytes, uint32_t after) {
    uint32_t x = after;
    const bool reduce = kind == CollectiveKind::AllReduce;
    const double over_tp = reduce ? bytes : bytes * static_cast<double>(t_);
    if (moe_sp()) x = add_coll(tp_name, kind, GroupKind::TP, tp_, ph, L, over_tp, deps(x));
    if (l_.cp > 1) {
      if (cp_ == 0xff) cp_ = p_.stream("cp");
      const double over_cp = reduce ? bytes : (moe_sp() ? over_tp : bytes) * static_cast<double>(l_.cp);
      x = add_coll(cp_name, kind, GroupKind::CP, cp_, ph, L, over_cp, deps(x));
    }
    return x;
  }
  double aux_score_bytes(int64_t own) const {
    const double b = m_.moe.router_fp32 || !m_.moe.score_sigmoid ? 4.0 : static_cast<double>(e_);
    return static_cast<double>(own * m_.moe.experts) * b;
  }
  // The forward from the router's GEMM to the routing map and probabilities.
  uint32_t route_forward(int32_t L, Phase ph, uint32_t router, int64_t own) {
    const RouteKernels k = route_kernels();
    uint32_t x = route_op("moe-route", ph, L, k.fwd, own, router);
    if (k.aux_fwd == 0) return x;
    if (m_.moe.load_balancing == "seq_aux_loss")  // every sequence's scores
      x = tp_cp_coll("moe-aux-scores-allgather-tp", "moe-aux-scores-allgather-cp", CollectiveKind::AllGather, ph, L,
                     aux_score_bytes(own), x);
    else  // the experts' token counts (int64)
      x = tp_cp_coll("moe-aux-counts-allreduce-tp", "moe-aux-counts-allreduce-cp", CollectiveKind::AllReduce, ph, L,
                     8.0 * static_cast<double>(m_.moe.experts), x);
    return route_op("moe-aux-loss", ph, L, k.aux_fwd, own, x);
  }
  uint32_t route_backward(int32_t L, uint32_t g, int64_t own) {
    const RouteKernels k = route_kernels();
    const Phase b = Phase::Backward;
    uint32_t x = route_op("moe-aux-loss-backward", b, L, k.aux_bwd, own, g);
    if (k.aux_bwd > 0 && m_.moe.load_balancing == "seq_aux_loss")
      x = tp_cp_coll("moe-aux-scores-reduce-scatter-tp", "moe-aux-scores-reduce-scatter-cp",
                     CollectiveKind::ReduceScatter, b, L, aux_score_bytes(own), x);
    return route_op("moe-route-backward", b, L, k.bwd, own, x);
  }
  // The all-to-all dispatcher's index bookkeeping and host waits around its permutations
  // (training.moe_permute). `masked_select` sizes its output on the host: a wait for the GPU
  // each time (and the select's kernel launched from the emptied queue).
  //   unfused (core_r0.12.0): a padded router's rows sorted on the device (int8 map,
  //     transpose, argsort, slice) and the probabilities masked_select-ed (one wait); dropless,
  //     the tokens and the probabilities masked_select-ed (two), the experts' counts
  //     all-gathered over TP x EP for the all-to-all's splits, whose own wait falls after them.
  //   masked-select (core_r0.10.0): the tokens masked_select-ed in the permutation and the
  //     probabilities in the unpermutation (two waits), padded or not; dropless, the counts
  //     gathered and a wait for them before the permutation.
  //   fused (Transformer Engine's permute): no bookkeeping; dropless, the counts and their wait.
  // Kernels beside the permutation's and unpermutation's own, measured on one H100 over both
  // paths, forward and backward together: unfused padded 23, masked_select 31 (of which 6 and
  // 9 in the backward, enumerated: the index gradients' zeros and adds, the masked scatter).
  bool permute_masked_select() const {
    return l_.moe_permute == "masked-select" || (l_.moe_permute == "unfused" && m_.moe.routing.dropless);
  }
  uint32_t dispatch_bookkeeping(int32_t L, Phase ph, uint32_t routed, int64_t own) {
    uint32_t x = routed;
    const bool dropless = m_.moe.routing.dropless && (l_.ep > 1 || moe_tp_gather());
    if (dropless) {
      const double counts = 8.0 * static_cast<double>(m_.moe.experts);
      if (l_.ep > 1)
        x = add_coll("moe-counts-allgather-ep", CollectiveKind::AllGather, GroupKind::EP, ep_stream(), ph, L,
                     counts * static_cast<double>(l_.ep), deps(x));
      if (moe_tp_gather())
        x = add_coll("moe-counts-allgather-tp", CollectiveKind::AllGather, GroupKind::TP, tp_, ph, L,
                     counts * static_cast<double>(l_.ep * t_), deps(x));
    }
    if (l_.moe_permute == "fused") return dropless ? host_wait("moe-splits-sync", ph, L, x, 1, 1) : x;
    if (l_.moe_permute == "masked-select" && dropless) x = host_wait("moe-splits-sync", ph, L, x, 1, 1);
    x = route_op("moe-permute-indices", ph, L, permute_masked_select() ? 22 : 17, own, x);
    x = host_wait("moe-permute-sync", ph, L, x, 1, 1);
    if (l_.moe_permute == "unfused" && m_.moe.routing.dropless) x = host_wait("moe-permute-probs-sync", ph, L, x, 1, 1);
    return x;
  }
  uint32_t unpermute_bookkeeping(int32_t L, Phase ph, uint32_t combined) {
    return l_.moe_permute == "masked-select" ? host_wait("moe-unpermute-sync", ph, L, combined, 1, 1) : combined;
  }
  uint32_t permute_bookkeeping_backward(int32_t L, uint32_t g, int64_t own) {
    if (l_.moe_permute == "fused") return g;
    return route_op("moe-permute-indices-backward", Phase::Backward, L, permute_masked_select() ? 9 : 6, own, g);
  }

  // Megatron-Core's all-to-all token dispatcher (MoEAlltoAllTokenDispatcher, with the
  // experts split over the TP group as the dense layers are): under sequence parallelism the
  // layer takes the rank's own 1/tp of the tokens, no all-gather before it. The router scores
  // them, they are permuted into expert order (top_k rows a token) and exchanged over EP, and
  // the TP group all-gathers what its ranks received, each rank holding 1/tp of every local
  // expert; after the experts a reduce-scatter over TP, the combine all-to-all and the
  // unpermute (weighted by the router's probabilities) undo it. Without SP every TP rank
  // holds every token and the output is all-reduced.
  bool moe_sp() const { return l_.sequence_parallel && t_ > 1; }
  // The experts split over TP (expert_tp = tp): the TP group gathers what its ranks received.
  // With whole experts on every rank (expert_tp 1) each rank's own tokens go straight to EP.
  bool moe_tp_gather() const { return moe_sp() && l_.expert_tp() == t_; }
  int64_t moe_rows_tokens() const { return moe_sp() && !moe_tp_gather() ? seq_tokens_ : tokens_; }
  // The ranks that hold the same experts and reduce their gradients together.
  int64_t expert_dp() const { return (t_ / l_.expert_tp()) * l_.dp * l_.cp / l_.ep; }
  // What a MoE layer's forward or backward works on: its local experts, the rows each takes
  // and the share of them that is padding (cap), the experts' width on this rank, the tokens
  // the rank routes, the bytes of the EP all-to-all and of the TP gather.
  struct MoeShape {
    int64_t local = 0, per_expert = 0, fe = 0, own = 0;
    double cap = 1, a2a = 0, gathered = 0;
  };
  MoeShape moe_shape(int32_t L, bool forward) {
    const ExpertLoad load = expert_load(L, forward);
    MoeShape x;
    x.local = m_.moe.experts / l_.ep;
    x.per_expert = load.per_expert;
    x.fe = m_.moe.expert_ffn_hidden / l_.expert_tp();
    x.own = moe_sp() ? seq_tokens_ : tokens_;
    x.cap = 1.0 / load.useful;
    x.a2a = static_cast<double>(x.own * m_.moe.top_k * m_.hidden * e_) * load.a2a_scale;
    x.gathered = x.a2a * static_cast<double>(moe_tp_gather() ? t_ : 1);
    return x;
  }
  // Megatron-Core's allgather token dispatcher (MoEAllGatherTokenDispatcher, core_r0.12.0
  // token_dispatcher.py; parallel.moe_dispatcher: allgather): every EP rank's tokens are
  // all-gathered (with their routing map and probabilities, small), the host reads how many
  // rows each local expert takes (`tokens_per_expert ... .cpu()`: a wait for the GPU), the
  // local experts' rows are permuted out of the gathered tokens; after the experts they are
  // unpermuted into a zero-filled tensor of every gathered token, which is reduce-scattered
  // back in the router probabilities' type (FP32 under an FP32 router). The backward
  // all-gathers the output gradient, gathers the rows, and scatter-adds the experts' input
  // gradients into the gathered tokens before reduce-scattering them. `rows`: the local
  // experts' rows; `own`: the rank's tokens.
  double gathered_tokens(int64_t own) const { return static_cast<double>(own * l_.ep); }
  double probs_bytes() const { return m_.moe.router_fp32 ? 4.0 : static_cast<double>(e_); }
  uint32_t allgather_dispatch(int32_t L, Phase ph, uint32_t router, int64_t rows, int64_t own) {
    const double h = static_cast<double>(m_.hidden), e = static_cast<double>(e_);
    uint32_t x = router;
    if (l_.ep > 1)
      x = add_coll("moe-dispatch-allgather-ep", CollectiveKind::AllGather, GroupKind::EP, ep_stream(), ph, L,
                   gathered_tokens(own) * h * e, deps(x));
    x = host_wait("moe-tokens-per-expert-sync", ph, L, x);
    const double r = static_cast<double>(rows) * h * e;
    return add_memory("moe-permute", ph, L, r, r, 0, deps(x));
  }
  uint32_t allgather_combine(int32_t L, Phase ph, uint32_t experts, int64_t rows, int64_t own) {
    const double h = static_cast<double>(m_.hidden), e = static_cast<double>(e_);
    const double all = gathered_tokens(own) * h;
    uint32_t x = add_memory("moe-unpermute", ph, L, static_cast<double>(rows) * h * e, 2 * all * e, 0, deps(experts));
    if (l_.ep == 1) return x;
    const double pb = probs_bytes();
    if (pb != e) x = add_memory("moe-combine-cast", ph, L, all * e, all * pb, 0, deps(x));
    x = add_coll("moe-combine-reduce-scatter-ep", CollectiveKind::ReduceScatter, GroupKind::EP, ep_stream(), ph, L,
                 all * pb, deps(x));
    if (pb != e) {
      const double mine = static_cast<double>(own) * h;
      x = add_memory("moe-combine-cast-back", ph, L, mine * pb, mine * e, 0, deps(x));
    }
    return x;
  }
  uint32_t allgather_combine_backward(int32_t L, uint32_t dy, int64_t rows, int64_t own) {
    const double h = static_cast<double>(m_.hidden), e = static_cast<double>(e_);
    const Phase b = Phase::Backward;
    const double all = gathered_tokens(own) * h;
    uint32_t x = dy;
    if (l_.ep > 1)
      x = add_coll("moe-combine-allgather-ep-backward", CollectiveKind::AllGather, GroupKind::EP, ep_stream(), b, L,
                   all * probs_bytes(), deps(x));
    const double r = static_cast<double>(rows) * h * e;
    return add_memory("moe-unpermute-backward", b, L, r, r, 0, deps(x));
  }
  uint32_t allgather_dispatch_backward(int32_t L, uint32_t dx, int64_t rows, int64_t own) {
    const double h = static_cast<double>(m_.hidden), e = static_cast<double>(e_);
    const Phase b = Phase::Backward;
    const double all = gathered_tokens(own) * h;
    uint32_t x = add_memory("moe-permute-backward", b, L, static_cast<double>(rows) * h * e, 2 * all * e, 0, deps(dx));
    if (l_.ep > 1)
      x = add_coll("moe-dispatch-reduce-scatter-ep-backward", CollectiveKind::ReduceScatter, GroupKind::EP,
                   ep_stream(), b, L, all * e, deps(x));
    return x;
  }
  uint32_t moe_forward(int32_t L, Phase ph, uint32_t in) {
    const int64_t h = m_.hidden;
    const bool swiglu = m_.ffn_type == FfnType::Swiglu;
    const MoeConfig& moe = m_.moe;
    const auto [local, per_expert, fe, own, cap, a2a, gathered] = moe_shape(L, true);
    uint32_t router = add_gemm("moe-router", ph, L, own, moe.experts, h,
                               deps(router_cast("moe-router-input-cast", ph, L, own, in)), 1, 1.0, act_dtype_);
    router_in_fp32(router);
    router = route_forward(L, ph, router, own);
    uint32_t disp;
    if (l_.moe_allgather) {
      disp = allgather_dispatch(L, ph, router, per_expert * local, own);
    } else {
      disp = add_memory("moe-permute", ph, L, a2a, a2a, 0, deps(dispatch_bookkeeping(L, ph, router, own)));
      if (l_.ep > 1)
        disp = add_coll("moe-dispatch-alltoall", CollectiveKind::AllToAll, GroupKind::EP, ep_stream(), ph, L, a2a,
                        deps(disp));
    }
    if (moe_tp_gather())
      disp = add_coll("moe-dispatch-allgather", CollectiveKind::AllGather, GroupKind::TP, tp_, ph, L, gathered,
                      deps(disp));
    // The experts' linear layers are Transformer Engine Linears fed BF16 (the dispatched
    // tokens, the activation's output): under FP8 each casts its input, and the backward
    // each gradient entering it.
    disp = fp8_expert_padding("fp8-pad-expert-input", ph, L, per_expert * local, disp);
    disp = fp8_cast("fp8-cast-expert-input", ph, L, per_expert * local, h, disp);
    uint32_t up = add_gemm("expert-up", ph, L, per_expert, (swiglu ? 2 : 1) * fe, h, deps(disp), local, 1.0 / cap);
    const double f = static_cast<double>(per_expert * local * fe * e_);
    uint32_t a = add_memory(swiglu ? "expert-swiglu" : "expert-gelu", ph, L, swiglu ? 2 * f : f, f,
                            8.0 * f / static_cast<double>(e_), deps(up));
    a = fp8_cast("fp8-cast-expert-act", ph, L, per_expert * local, fe, a);
    uint32_t comb = add_gemm("expert-down", ph, L, per_expert, h, fe, deps(a), local, 1.0 / cap);
    comb = fp8_expert_padding("fp8-unpad-expert-output", ph, L, per_expert * local, comb);
    if (moe_tp_gather())
      comb = add_coll("moe-combine-reduce-scatter", CollectiveKind::ReduceScatter, GroupKind::TP, tp_, ph, L,
                      gathered, deps(comb));
    uint32_t out;
    if (l_.moe_allgather) {
      out = allgather_combine(L, ph, comb, per_expert * local, own);
    } else {
      if (l_.ep > 1)
        comb = add_coll("moe-combine-alltoall", CollectiveKind::AllToAll, GroupKind::EP, ep_stream(), ph, L, a2a,
                        deps(comb));
      out = add_memory("moe-unpermute", ph, L, a2a, a2a / static_cast<double>(moe.top_k), 0,
                       deps(unpermute_bookkeeping(L, ph, comb)));
    }
    if (moe.shared_experts > 0) {
      const int64_t fs = moe.shared_experts * moe.expert_ffn_hidden / t_;  // shared experts: the dense TP
      // Overlapped, they start from the layer's input beside the dispatch; else after the
      // routed experts' combine (Megatron-Core's MoELayer: output + shared_experts(input)).
      const uint32_t from = l_.shared_expert_overlap ? in : out;
      uint32_t su = add_gemm("shared-expert-up", ph, L, tokens_, (swiglu ? 2 : 1) * fs, h,
                             deps(moe_sp() ? tp_gather("allgather-shared-expert-input", ph, L, from) : from));
      uint32_t sd = add_gemm("shared-expert-down", ph, L, tokens_, h, fs, deps(su));
      if (moe_sp()) sd = tp_reduce("", "reduce-scatter-shared-expert", ph, L, sd);
      const double merged = static_cast<double>(own * h * e_);
      out = add_memory("moe-merge", ph, L, 2 * merged, merged, 0, deps(out, sd));
    }
    return out;
  }

  // The MLP's backward from the output gradient (sequence-parallel) to the reduced input
  // gradient; `wgrad` is set to the op the up projection's weight gradient waits for.
  // Dense: `up_wgrad` is set to the up projection's weight-gradient op, which runs beside
  // the input gradient's reduction (gemm_then_reduce), its input all-gathered beside the
  // data-gradient GEMM.
  uint32_t mlp_backward(int32_t L, uint32_t g, uint32_t& wgrad, uint32_t& up_wgrad) {
    const int64_t h = m_.hidden;
    const bool swiglu = m_.ffn_type == FfnType::Swiglu;
    if (!m_.moe_layer(L)) {
      const uint32_t g8 = fp8_cast("fp8-cast-mlp-grad", Phase::Backward, L, seq_tokens_, m_.hidden, g, 0, true);
      uint32_t down_d = ag_then_gemm("allgather-mlp-grad", "mlp-down-dgrad", Phase::Backward, L, g8, m_.ffn_hidden / t_, h);
      uint32_t down_w = main_grad_add(
          "grad-accumulate-mlp-down", L, m_.ffn_hidden / t_, h,
          add_gemm("mlp-down-wgrad", Phase::Backward, L, m_.ffn_hidden / t_, h, tokens_, deps(gathered_)));
      const double f = static_cast<double>(tokens_ * (m_.ffn_hidden / t_) * e_);
      uint32_t act_b =
          add_memory(swiglu ? "swiglu-backward" : "gelu-backward", Phase::Backward, L, swiglu ? 3 * f : 2 * f,
                     swiglu ? 2 * f : f, 10.0 * f / static_cast<double>(e_), deps(down_d));
      if (l_.local_impl && !swiglu) act_b = accessed(act_b, MemAccess::TanhGelu, f / static_cast<double>(e_));
      // Megatron-Core's MLP adds FC1's bias inside the fused activation (skip_bias_add: TE
      // returns the bias unapplied), whose backward hands the same gradient back for the bias
      // (GeLUFunction: `return tmp, tmp`): autograd reduces it over the tokens, a kernel of
      // its own. Megatron-LM's own layer sums it in bias-grad-sums below.
      if (m_.biases && !l_.local_impl && !l_.plan_before_2026_12_05) {
        const double width = swiglu ? 2.0 : 1.0;  // SwiGLU's FC1 has two halves, each with its bias
        const double cols = width * static_cast<double>(m_.ffn_hidden / t_);
        act_b = add_memory("bias-grad-fc1", Phase::Backward, L, width * f, cols * static_cast<double>(e_),
                           width * f / static_cast<double>(e_), deps(act_b));
      }
      act_b = fp8_cast("fp8-cast-mlp-act-grad", Phase::Backward, L, tokens_, mlp_in_, act_b);
      mlp_input_ready_ = act_b;
      wgrad = down_w;
      const uint32_t x2 =
          tp_gather("allgather-mlp-input-wgrad", Phase::Backward, L, act_b, l_.tp_overlap_fc1_dgrad_sms);
      return gemm_then_reduce("mlp-up-dgrad", "tp-allreduce-mlp-grad", "reduce-scatter-mlp-grad", Phase::Backward, L,
                              deps(act_b), h, mlp_in_, [&] {
                                up_wgrad = main_grad_add("grad-accumulate-mlp-up", L, h, mlp_in_,
                                                         add_gemm("mlp-up-wgrad", Phase::Backward, L, h, mlp_in_,
                                                                  tokens_, deps(x2, down_w)));
                                return up_wgrad;
                              });
    }
    if (moe_sp()) return moe_backward(L, g, wgrad);
    return tp_reduce("tp-allreduce-mlp-grad", "reduce-scatter-mlp-grad", Phase::Backward, L, moe_backward(L, g, wgrad));
  }

  uint32_t moe_backward(int32_t L, uint32_t dy, uint32_t& wgrad) {
    const int64_t h = m_.hidden;
    const bool swiglu = m_.ffn_type == FfnType::Swiglu;
    const MoeConfig& moe = m_.moe;
    const auto [local, per_expert, fe, own, cap, a2a, gathered] = moe_shape(L, false);
    const double unpermuted = a2a / static_cast<double>(moe.top_k);
    uint32_t comb;
    if (l_.moe_allgather) {
      comb = allgather_combine_backward(L, dy, per_expert * local, own);
    } else {
      comb = add_memory("moe-unpermute-backward", Phase::Backward, L, unpermuted, a2a, 0, deps(dy));
      if (l_.ep > 1)
        comb = add_coll("moe-combine-alltoall-backward", CollectiveKind::AllToAll, GroupKind::EP, ep_stream(),
                        Phase::Backward, L, a2a, deps(comb));
    }
    if (moe_tp_gather())
      comb = add_coll("moe-combine-allgather-backward", CollectiveKind::AllGather, GroupKind::TP, tp_,
                      Phase::Backward, L, gathered, deps(comb));
    comb = fp8_expert_padding("fp8-pad-expert-output-grad", Phase::Backward, L, per_expert * local, comb);
    comb = fp8_cast("fp8-cast-expert-grad", Phase::Backward, L, per_expert * local, h, comb);
    uint32_t dd = add_gemm("expert-down-dgrad", Phase::Backward, L, per_expert, fe, h, deps(comb), local, 1.0 / cap);
    uint32_t dw = add_gemm("expert-down-wgrad", Phase::Backward, L, fe, h, per_expert, deps(comb), local, 1.0 / cap);
    const double f = static_cast<double>(per_expert * local * fe * e_);
    uint32_t ab = add_memory("expert-act-backward", Phase::Backward, L, swiglu ? 3 * f : 2 * f, swiglu ? 2 * f : f,
                             10.0 * f / static_cast<double>(e_), deps(dd));
    ab = fp8_cast("fp8-cast-expert-act-grad", Phase::Backward, L, per_expert * local, (swiglu ? 2 : 1) * fe, ab);
    add_gemm("expert-up-dgrad", Phase::Backward, L, per_expert, h, (swiglu ? 2 : 1) * fe, deps(ab), local, 1.0 / cap);
    uint32_t uw = add_gemm("expert-up-wgrad", Phase::Backward, L, h, (swiglu ? 2 : 1) * fe, per_expert, deps(ab, dw),
                           local, 1.0 / cap);
    // The grouped linear's backward is one autograd node (Transformer Engine's
    // _GroupedLinear.backward: the data gradient, then the weight gradient): the nodes after
    // it (the padding's backward, the dispatch's gather and all-to-all backward) are issued
    // once both are queued, so they wait for the weight gradient too.
    uint32_t disp = fp8_expert_padding("fp8-unpad-expert-input-grad", Phase::Backward, L, per_expert * local, uw);
    if (moe_tp_gather())
      disp = add_coll("moe-dispatch-reduce-scatter-backward", CollectiveKind::ReduceScatter, GroupKind::TP, tp_,
                      Phase::Backward, L, gathered, deps(disp));
    if (l_.moe_allgather) {
      disp = allgather_dispatch_backward(L, disp, per_expert * local, own);
    } else {
      if (l_.ep > 1)
        disp = add_coll("moe-dispatch-alltoall-backward", CollectiveKind::AllToAll, GroupKind::EP, ep_stream(),
                        Phase::Backward, L, a2a, deps(disp));
      disp = add_memory("moe-permute-backward", Phase::Backward, L, a2a, a2a, 0, deps(disp));
      disp = permute_bookkeeping_backward(L, disp, own);
    }
    disp = route_backward(L, disp, own);
    uint32_t rd =
        add_gemm("moe-router-dgrad", Phase::Backward, L, own, h, moe.experts, deps(disp), 1, 1.0, act_dtype_);
    router_in_fp32(rd);
    rd = router_cast("moe-router-grad-cast", Phase::Backward, L, own, rd);
    uint32_t rw =
        add_gemm("moe-router-wgrad", Phase::Backward, L, moe.experts, h, own, deps(disp, uw), 1, 1.0, act_dtype_);
    router_in_fp32(rw);
    uint32_t out = rd;
    wgrad = rw;
    if (moe.shared_experts > 0) {
      const int64_t fs = moe.shared_experts * moe.expert_ffn_hidden / t_;  // shared experts: the dense TP
      // Not overlapped, autograd reaches them after the routed path's backward (the add's
      // other branch) on the same stream.
      const uint32_t from = l_.shared_expert_overlap ? dy : rd;
      const uint32_t g = moe_sp() ? tp_gather("allgather-shared-expert-grad", Phase::Backward, L, from) : from;
      uint32_t sdd = add_gemm("shared-expert-down-dgrad", Phase::Backward, L, tokens_, fs, h, deps(g));
      uint32_t sdw = add_gemm("shared-expert-down-wgrad", Phase::Backward, L, fs, h, tokens_, deps(g));
      uint32_t sud =
          add_gemm("shared-expert-up-dgrad", Phase::Backward, L, tokens_, h, (swiglu ? 2 : 1) * fs, deps(sdd));
      uint32_t suw =
          add_gemm("shared-expert-up-wgrad", Phase::Backward, L, h, (swiglu ? 2 : 1) * fs, tokens_, deps(sdd, sdw));
      if (moe_sp()) sud = tp_reduce("", "reduce-scatter-shared-expert-grad", Phase::Backward, L, sud);
      const double merged = static_cast<double>(own * h * e_);
      out = add_memory("moe-merge-backward", Phase::Backward, L, 2 * merged, merged, 0, deps(rd, sud));
      wgrad = add_memory("moe-wgrad-join", Phase::Backward, L, 0, 0, 0, deps(rw, suw));
    }
    mlp_input_ready_ = out;
    return out;
  }

  uint8_t ep_stream() {
    if (ep_ == 0xff) ep_ = p_.stream("ep");
    return ep_;
  }

  // One transformer layer forward; returns its last op.
  uint32_t layer_forward(int32_t L, uint32_t x, Phase ph) {
    if (l_.eager) return layer_forward_eager(L, x, ph);
    const double act = act_bytes();
    const int64_t h = m_.hidden;
    const uint32_t pg = ph == Phase::Forward && mb_ == 0 ? param_gather_for(L) : kNone;
    // Hidden dropout (fused with the bias and residual adds) writes a 1-byte mask and draws
    // a Philox number per element, as PyTorch's dropout does (MemAccess::RandomMask).
    const double mask = m_.dropout > 0 ? act / static_cast<double>(e_) : 0.0;
    auto drawn = [&](uint32_t op) { return mask > 0 ? accessed(op, MemAccess::RandomMask, mask) : op; };
    uint32_t ln = add_memory("layernorm-1", ph, L, act, act, 8.0 * act / static_cast<double>(e_),
                             pg == kNone ? deps(x) : deps(x, pg));
    ln = fp8_quantize_fused("fp8-quantize-qkv-input", ph, L, seq_tokens_, h, ln, true);
    uint32_t qkv = m_.is_mla() ? mla_forward(L, ph, ln)
                               : rope_forward(ph, L, ag_then_gemm("allgather-qkv-input", "qkv", ph, L, ln, qkv_, h));
    const int64_t q = m_.seq_len / l_.cp;
    uint32_t at;
    if (!recomputing_)
      at = ring_attention(L, Phase::Forward, qkv);
    else if (l_.flash_attention)
      at = add_attention("attention", ph, L, q, q, deps(qkv));
    else
      at = unfused_attention_forward(ph, L, q, q, qkv);
    const int64_t attn_out = m_.attn_out_width() / t_;
    at = fp8_cast("fp8-cast-attn-out", ph, L, tokens_, attn_out, at);
    uint32_t red = gemm_then_reduce("attn-proj", "tp-allreduce-attn", "reduce-scatter-attn", ph, L, deps(at), h,
                                    attn_out);
    uint32_t ln2 = drawn(add_memory("residual-layernorm-2", ph, L, 2 * act, 2 * act + mask,
                                    10.0 * act / static_cast<double>(e_), deps(red)));
    if (!m_.moe_layer(L)) ln2 = fp8_quantize_fused("fp8-quantize-mlp-input", ph, L, seq_tokens_, h, ln2, true);
    uint32_t red2 = mlp_forward(L, ph, ln2);
    return drawn(add_memory("residual-add", ph, L, 2 * act, act + mask, act / static_cast<double>(e_), deps(red2)));
  }

  // ---- plain PyTorch under torch.autocast(bfloat16) (training.framework: pytorch-eager) ----
  // What eager PyTorch launches for the same layer (docs/model.md, "PyTorch eager"): the
  // parameters are FP32 and autocast casts each linear's weight (and bias) to BF16 at
  // every forward (its cast cache lives for one autocast region: a micro-batch); linear
  // inputs that arrive in FP32 are cast too. layer_norm / rms_norm, log_softmax and
  // nll_loss run in FP32, so the residual stream after the embedding is FP32 and every
  // residual add is FP32 + BF16 -> FP32. Each elementwise op is its own kernel. In the
  // backward, each weight gradient leaves its GEMM in BF16, is cast to FP32 and
  // accumulated into .grad (a copy for the first micro-batch: zero_grad sets None, an
  // add after); bias gradients are a reduction of the output gradient.
  uint32_t accessed(uint32_t op, MemAccess a, double elements = 0) {
    p_.ops[op].access = a;
    p_.ops[op].m = static_cast<int64_t>(elements);
    return op;
  }
  // The host's own time as an op (compute.host_sync a wait, compute.host_op a small op it
  // then dispatches alone): `waits` waits for the GPU, then `ops` ops issued one by one.
  uint32_t host_wait(const char* name, Phase ph, int32_t L, uint32_t after, int64_t waits = 1, int64_t ops = 0) {
    const uint32_t op = accessed(add_memory(name, ph, L, 0, 0, 0, deps(after)), MemAccess::HostSync,
                                 static_cast<double>(waits));
    p_.ops[op].k = ops;
    return op;
  }
  double eager_act32() const { return static_cast<double>(tokens_ * m_.hidden) * 4.0; }
  double eager_act16() const { return static_cast<double>(tokens_ * m_.hidden * e_); }
  uint32_t eager_weight_cast(const char* name, Phase ph, int32_t L, double params, uint32_t after) {
    // FSDP with a 16-bit param_dtype hands the layers 16-bit weights: autocast has nothing
    // to cast.
    if (l_.zero_stage >= 3 && l_.fsdp_param_dtype != DType::FP32) return after;
    return add_memory(name, ph, L, 4.0 * params, static_cast<double>(e_) * params, 0, deps(after));
  }
  // A linear layer's weight as its GEMM takes it. Under autocast, the FP32 weight's BF16
  // copy (above). Under Transformer Engine's fp8_autocast (model.dtype fp8), te.Linear
  // casts the weight to FP8 with its transpose for the dgrad at every forward (nothing
  // tells it a later micro-batch could reuse the first one's cast), reading the weight in
  // the type the layer holds it.
  uint32_t eager_linear_weight(const char* autocast_name, const char* te_name, Phase ph, int32_t L, int64_t in,
                               int64_t out, uint32_t after) {
    if (!l_.fp8) return eager_weight_cast(autocast_name, ph, L, linear_params(in, out), after);
    const double held = l_.zero_stage >= 3 ? dtype_bits(l_.fsdp_param_dtype) / 8.0 : 4.0;
    return fp8_cast(te_name, ph, L, out, in, after, held);
  }
  uint32_t eager_grad_accumulate(const char* name, int32_t L, double params, uint32_t after) {
    const double cast_r = static_cast<double>(e_) * params, cast_w = 4.0 * params;
    const uint32_t op = mb_ == 0 ? add_memory(name, Phase::Backward, L, cast_r, cast_w, 0, deps(after))
                                 : add_memory(name, Phase::Backward, L, cast_r + 8.0 * params, cast_w + 4.0 * params,
                                              params, deps(after));
    return accessed(op, MemAccess::DynamicCast, params);
  }
  uint32_t eager_bias_grad(const char* name, int32_t L, int64_t width, uint32_t after) {
    if (!m_.biases) return after;
    return add_memory(name, Phase::Backward, L, static_cast<double>(tokens_ * width * e_),
                      static_cast<double>(width * e_), static_cast<double>(tokens_ * width), deps(after));
  }
  double linear_params(int64_t in, int64_t out) const {
    return static_cast<double>(in * out + (m_.biases ? out : 0));
  }
  // An FP32 norm and the cast of its output for the linear it feeds.
  uint32_t eager_norm(const char* norm, const char* cast, Phase ph, int32_t L, uint32_t after) {
    const double a32 = eager_act32();
    const uint32_t n = add_memory(norm, ph, L, a32, a32, 8.0 * static_cast<double>(tokens_ * m_.hidden), deps(after));
    return add_memory(cast, ph, L, a32, eager_act16(), 0, deps(n));
  }
  // A linear's backward (`name` in -> out): the input gradient from `dy`, the weight
  // gradient after the previous linear's accumulation `acc`, its bias gradient and its
  // FP32 accumulation, which `acc` moves on to. Returns the input gradient.
  uint32_t eager_linear_backward(const std::string& name, int32_t L, int64_t in, int64_t out, uint32_t dy,
                                 uint32_t& acc) {
    // te.Linear's backward casts the incoming gradient to FP8 with its transpose (wgrad), and
    // with a bias the same kernel sums the bias gradient (grad_output_preprocess:
    // fp8_cast_transpose_bgrad_fused), so no reduction of its own follows.
    dy = fp8_cast(("te-cast-" + name + "-grad").c_str(), Phase::Backward, L, tokens_, out, dy);
    const uint32_t dgrad = add_gemm((name + "-dgrad").c_str(), Phase::Backward, L, tokens_, in, out, deps(dy));
    uint32_t w = add_gemm((name + "-wgrad").c_str(), Phase::Backward, L, in, out, tokens_, deps(dy, acc));
    if (!l_.fp8) w = eager_bias_grad((name + "-bias-grad").c_str(), L, out, w);
    acc = eager_grad_accumulate(("grad-accumulate-" + name).c_str(), L, linear_params(in, out), w);
    return dgrad;
  }
  // A norm's backward from its linear's BF16 input gradient: cast to FP32, the input
  // gradient, the weight gradient, then the residual stream's sum (after `also`).
  uint32_t eager_norm_backward(const char* cast, const char* norm, const char* weight, const char* residual,
                               int32_t L, uint32_t dx, uint32_t also, uint32_t also2 = kNone) {
    const double a32 = eager_act32(), th = static_cast<double>(tokens_ * m_.hidden);
    uint32_t x = accessed(add_memory(cast, Phase::Backward, L, eager_act16(), a32, 0, deps(dx)), MemAccess::DynamicCast,
                          th);
    x = add_memory(norm, Phase::Backward, L, 2 * a32, a32, 10.0 * th, deps(x));
    x = add_memory(weight, Phase::Backward, L, 2 * a32, 0, 0, deps(x));
    return add_memory(residual, Phase::Backward, L, 2 * a32, a32, th, deps(x, also, also2));
  }
  // Rotary embedding as the reference writes it (x·cos + cat(-x2, x1)·sin) on [b, h, s, d]
  // views of the QKV output: five kernels over q and over k, strided and broadcast, so not
  // vectorized. Their kernels' sum on one H200 is what a copy of 29 elements per element
  // takes forward and 33.5 backward (calibrate/measurements/rope-h200-2026-12-03), where
  // their bytes alone would be about 10; the op carries those copy-rate passes.
  uint32_t eager_rotary(Phase ph, int32_t L, uint32_t after) {
    if (m_.learned_positions) return after;
    const double elems = static_cast<double>(tokens_ * (m_.heads + m_.kv_heads) * m_.head_dim());
    const bool backward = ph == Phase::Backward && !recomputing_;
    return add_memory(backward ? "rotary-backward" : "rotary", ph, L, (backward ? 18.5 : 16.0) * elems * e_,
                      (backward ? 15.0 : 13.0) * elems * e_, 3.0 * elems, deps(after));
  }

  // flash-attn's bert_padding around its variable-length kernel, as MPT's flash path calls
  // it (docs/model.md, "Padding around the kernel"). unpad_input on q, k and v: the mask's
  // sum, nonzero and max().item(), two host synchronizations a call, then a row gather
  // (index_first_axis); pad_input on the output: zeros, then index_put of the rows. Their
  // backwards: zeros and a scatter_ of each gradient, a row gather of the output's.
  double unpad_qkv_bytes() const {
    return static_cast<double>(tokens_ * (m_.heads + 2 * m_.kv_heads) * m_.head_dim() * e_);
  }
  double pad_out_bytes() const { return static_cast<double>(tokens_ * m_.heads * m_.head_dim() * e_); }
  uint32_t unpad_qkv(Phase ph, int32_t L, uint32_t after) {
    if (!l_.attention_unpad) return after;
    const uint32_t mask = host_wait("unpad-mask", ph, L, after, 6);
    return add_memory("unpad-qkv", ph, L, unpad_qkv_bytes(), unpad_qkv_bytes(), 0, deps(mask));
  }
  uint32_t pad_output(Phase ph, int32_t L, uint32_t after) {
    if (!l_.attention_unpad) return after;
    const double o = pad_out_bytes();
    return accessed(add_memory("pad-output", ph, L, o, 2 * o, 0, deps(after)), MemAccess::IndexPut,
                    o / static_cast<double>(e_));
  }

  // The trainer's training metrics (training.train_metrics), updated after the micro-batch's
  // backward from the logits its forward kept: each a cross-entropy under autocast, which runs
  // log_softmax on the 16-bit logits with an FP32 output (three reads of each row, one FP32
  // write), then nll_loss (Composer's _eval_train_metrics with MPT's LanguageCrossEntropy and
  // LanguagePerplexity; docs/model.md, "Training metrics").
  void train_metrics(uint32_t after) {
    const double lg = static_cast<double>(tokens_ * vocab_local_);
    uint32_t x = after;
    for (int k = 0; k < l_.train_metrics; ++k) {
      x = accessed(add_memory("metric-log-softmax", Phase::Forward, -1, lg * 3 * static_cast<double>(e_), lg * 4, 0,
                              deps(x)),
                   MemAccess::MixedSoftmax, lg);
      x = add_memory("metric-nll-loss", Phase::Forward, -1, static_cast<double>(tokens_) * 12, 4, 0, deps(x));
    }
  }

  // Once a batch the trainer computes each training metric, and torchmetrics syncs every
  // state over all ranks (Composer's _compute_and_log_metrics -> Metric.compute ->
  // gather_all_tensors, torchmetrics 0.10-1.3): a barrier (a one-element all-reduce, then the
  // host waits for the device), n fills for the outputs, an all-gather of n elements that
  // ProcessGroupNCCL copies into them one by one, each fill and copy dispatched by the host
  // (compute.host_op) with the device idle after the barrier. MPT's two metrics hold two
  // scalar states each (docs/model.md, "Training metrics").
  void train_metrics_sync(uint32_t x) {
    if (l_.train_metrics <= 0 || l_.dp <= 1) return;
    const int64_t n = l_.dp;
    for (int k = 0; k < 2 * l_.train_metrics; ++k) {
      x = add_coll("metric-barrier", CollectiveKind::AllReduce, GroupKind::DP, dp_, Phase::Other, -1, 4, deps(x));
      x = host_wait("metric-barrier-wait", Phase::Other, -1, x);
      const uint32_t fills = host_ops("metric-gather-fills", n, x);
      const uint32_t gather = add_coll("metric-allgather", CollectiveKind::AllGather, GroupKind::DP, dp_, Phase::Other,
                                       -1, 4.0 * static_cast<double>(n), deps(fills));
      x = join(gather, host_ops("metric-gather-copies", n, fills));
    }
  }
  // `count` small eager ops (a fill, a copy) dispatched one by one by the host, with nothing
  // queued ahead of them on the device.
  uint32_t host_ops(const char* name, int64_t count, uint32_t after) {
    return host_wait(name, Phase::Other, -1, after, 0, count);
  }

  uint32_t layer_forward_eager(int32_t L, uint32_t x, Phase ph) {
    const int64_t h = m_.hidden;
    const double a32 = eager_act32(), a16 = eager_act16();
    const int64_t attn_out = m_.heads * m_.head_dim();
    const int64_t f = m_.ffn_hidden;
    // Under model.dtype fp8 each linear is a te.Linear: its BF16 input is cast to FP8 with
    // the transpose its wgrad reads (fp8_cast), and its weight as eager_linear_weight says.
    uint32_t n1 = eager_norm("layernorm-1", "autocast-cast-qkv-input", ph, L, x);
    n1 = fp8_cast("te-cast-qkv-input", ph, L, tokens_, h, n1);
    uint32_t qkv = add_gemm("qkv", ph, L, tokens_, qkv_, h,
                            deps(eager_linear_weight("autocast-cast-qkv-weight", "te-cast-qkv-weight", ph, L, h, qkv_, n1)));
    qkv = unpad_qkv(ph, L, eager_rotary(ph, L, qkv));
    uint32_t at = pad_output(ph, L, add_attention("attention", ph, L, m_.seq_len, m_.seq_len, deps(qkv)));
    at = fp8_cast("te-cast-proj-input", ph, L, tokens_, attn_out, at);
    uint32_t proj = add_gemm(
        "attn-proj", ph, L, tokens_, h, attn_out,
        deps(eager_linear_weight("autocast-cast-proj-weight", "te-cast-proj-weight", ph, L, attn_out, h, at)));
    const double th = static_cast<double>(tokens_ * h);
    uint32_t r1 = accessed(add_memory("residual-add-attn", ph, L, a32 + a16, a32, th, deps(proj, x)),
                           MemAccess::DynamicCast, th);
    uint32_t n2 = eager_norm("layernorm-2", "autocast-cast-mlp-input", ph, L, r1);
    n2 = fp8_cast("te-cast-up-input", ph, L, tokens_, h, n2);
    uint32_t up = add_gemm(
        "mlp-up", ph, L, tokens_, mlp_in_, h,
        deps(eager_linear_weight("autocast-cast-up-weight", "te-cast-up-weight", ph, L, h, mlp_in_, n2)));
    const double f16 = static_cast<double>(tokens_ * f * e_);
    uint32_t act;
    if (m_.ffn_type == FfnType::Swiglu) {
      act = add_memory("silu", ph, L, f16, f16, 4.0 * f16 / static_cast<double>(e_), deps(up));
      act = add_memory("swiglu-mul", ph, L, 2 * f16, f16, f16 / static_cast<double>(e_), deps(act));
    } else {
      act = add_memory("gelu", ph, L, f16, f16, 8.0 * f16 / static_cast<double>(e_), deps(up));
    }
    act = fp8_cast("te-cast-down-input", ph, L, tokens_, f, act);
    uint32_t down = add_gemm(
        "mlp-down", ph, L, tokens_, h, f,
        deps(eager_linear_weight("autocast-cast-down-weight", "te-cast-down-weight", ph, L, f, h, act)));
    return accessed(add_memory("residual-add-mlp", ph, L, a32 + a16, a32, th, deps(down, r1)), MemAccess::DynamicCast,
                    th);
  }

  // One layer's backward from the FP32 gradient of its output; returns the FP32 gradient
  // of its input.
  uint32_t layer_backward_eager(int32_t L, uint32_t g, bool last_micro_batch) {
    const int64_t h = m_.hidden;
    const double a32 = eager_act32(), a16 = eager_act16();
    const int64_t attn_out = m_.heads * m_.head_dim();
    const int64_t f = m_.ffn_hidden;
    const double f16 = static_cast<double>(tokens_ * f * e_);
    // MLP.
    uint32_t acc = kNone;
    uint32_t c = add_memory("autocast-cast-mlp-grad", Phase::Backward, L, a32, a16, 0, deps(g));
    const uint32_t dd = eager_linear_backward("mlp-down", L, f, h, c, acc);
    uint32_t ab;
    if (m_.ffn_type == FfnType::Swiglu) {
      ab = add_memory("swiglu-mul-backward", Phase::Backward, L, 4 * f16, 2 * f16, 2 * f16 / static_cast<double>(e_),
                      deps(dd));
      ab = add_memory("silu-backward", Phase::Backward, L, 2 * f16, f16, 6 * f16 / static_cast<double>(e_), deps(ab));
      ab = add_memory("swiglu-grad-cat", Phase::Backward, L, 2 * f16, 2 * f16, 0, deps(ab));
    } else {
      ab = add_memory("gelu-backward", Phase::Backward, L, 2 * f16, f16, 10 * f16 / static_cast<double>(e_), deps(dd));
    }
    const uint32_t ud = eager_linear_backward("mlp-up", L, h, mlp_in_, ab, acc);
    const uint32_t r = eager_norm_backward("autocast-cast-mlp-input-grad", "layernorm-2-backward",
                                           "layernorm-2-weight-grad", "residual-grad-add-mlp", L, ud, kNone);
    // Attention.
    c = add_memory("autocast-cast-attn-grad", Phase::Backward, L, a32, a16, 0, deps(r));
    uint32_t pd = eager_linear_backward("attn-proj", L, attn_out, h, c, acc);
    if (l_.attention_unpad)
      pd = add_memory("pad-output-backward", Phase::Backward, L, pad_out_bytes(), pad_out_bytes(), 0, deps(pd));
    uint32_t at = add_attention("attention-backward", Phase::Backward, L, m_.seq_len, m_.seq_len, deps(pd));
    if (l_.attention_unpad)
      at = accessed(add_memory("unpad-qkv-backward", Phase::Backward, L, unpad_qkv_bytes(), 2 * unpad_qkv_bytes(), 0,
                               deps(at)),
                    MemAccess::Scatter, unpad_qkv_bytes() / static_cast<double>(e_));
    at = eager_rotary(Phase::Backward, L, at);
    const double qkv16 = static_cast<double>(tokens_ * qkv_ * e_);
    at = add_memory("qkv-grad-cat", Phase::Backward, L, qkv16, qkv16, 0, deps(at));
    const uint32_t qd = eager_linear_backward("qkv", L, h, qkv_, at, acc);
    g = eager_norm_backward("autocast-cast-qkv-input-grad", "layernorm-1-backward", "layernorm-1-weight-grad",
                            "residual-grad-add-attn", L, qd, r, acc);
    if (last_micro_batch || (l_.zero_stage >= 3 && !l_.zero3_grad_once)) add_grads(L, layer_dense_params(L), 0, g);
    return g;
  }

  void forward_block(int64_t chunk) {
    chunk_begin_ = static_cast<uint32_t>(p_.ops.size());
    uint32_t x = prev_;
    if (first_virtual(chunk)) {
      const bool waited = pending_send_ != kNone;
      prev_ = x = after_sends();
      if (waited && l_.p2p_device_sync) prev_ = x = device_sync("pp-device-sync", Phase::Forward, -1, x, -1);
      // Vocab-parallel embedding: each TP rank looks up its slice, then partial sums meet.
      const uint32_t pg = mb_ == 0 ? param_gather_for(-1) : kNone;
      if (l_.eager) {
        // FP32 table: an FP32 gather, and (GPT) the FP32 position rows added.
        x = add_memory("embedding", Phase::Forward, -1, eager_act32() + static_cast<double>(tokens_ * 8), eager_act32(),
                       0, pg == kNone ? deps(prev_) : deps(prev_, pg));
        if (m_.learned_positions)
          x = add_memory("position-add", Phase::Forward, -1, 2 * eager_act32(), eager_act32(),
                         static_cast<double>(tokens_ * m_.hidden), deps(x));
      } else
      x = add_memory("embedding", Phase::Forward, -1, full_act_bytes() + static_cast<double>(tokens_ * 8),
                     full_act_bytes(), 0, pg == kNone ? deps(prev_) : deps(prev_, pg));
      x = tp_reduce("embedding-allreduce", "embedding-reduce-scatter", Phase::Forward, -1, x);
    } else {
      const uint32_t recv =
          add_p2p("pp-recv-activation", OpKind::Recv, GroupKind::PP, static_cast<int32_t>((stage_ + l_.pp - 1) % l_.pp),
                  "pp-recv-fwd", Phase::Forward, layer_of(chunk, 0), pp_bytes(), p2p_posted(true), false, false,
                  l_.overlap_p2p);
      const uint32_t in = pp_gather("pp-activation-allgather", Phase::Forward, layer_of(chunk, 0), recv);
      x = add_memory("pp-activation-in", Phase::Forward, layer_of(chunk, 0), 0, 0, 0, deps(in, after_sends()));
      if (l_.p2p_device_sync) x = device_sync("pp-device-sync", Phase::Forward, layer_of(chunk, 0), x, -1);
    }
    for (int64_t i = 0; i < chunk_layers(chunk); ++i) {
      const int32_t L = layer_of(chunk, i);
      const uint32_t g = zero3_gather(Phase::Forward, L, x);
      x = layer_forward(L, g == x ? x : join(x, g), Phase::Forward);
    }
    if (l_.p2p_device_sync && chunk_nodes_[static_cast<size_t>(chunk)] < 0)
      chunk_nodes_[static_cast<size_t>(chunk)] = autograd_nodes(chunk, chunk_begin_);
    if (last_virtual(chunk) && l_.eager) {
      // FP32 norm, its cast, the logits' weight cast, then F.cross_entropy(logits.float()):
      // the FP32 copy, log_softmax and nll_loss, each a kernel.
      uint32_t ln = eager_norm("final-layernorm", "autocast-cast-logits-input", Phase::Forward, -1, x);
      const double table = static_cast<double>(vocab_local_ * m_.hidden);
      ln = eager_weight_cast("autocast-cast-logits-weight", Phase::Forward, -1, table, ln);
      uint32_t logits = add_gemm("logits", Phase::Forward, -1, tokens_, vocab_local_, m_.hidden, deps(ln), 1, 1.0,
                                 act_dtype_);
      const double lg = static_cast<double>(tokens_ * vocab_local_);
      if (l_.fused_cross_entropy) {
        // One kernel on the 16-bit logits (FlashAttention's xentropy, after apex's): per row
        // a pass for the max and one for the sum of exponentials; the loss and the
        // log-sum-exp out, 8 bytes a row.
        x = add_memory("cross-entropy-fused", Phase::Forward, -1, lg * 2 * static_cast<double>(e_) + tokens_ * 8.0,
                       tokens_ * 8.0, 3.0 * lg, deps(logits));
      } else {
        x = accessed(add_memory("logits-float", Phase::Forward, -1, lg * static_cast<double>(e_), lg * 4, 0, deps(logits)),
                     MemAccess::DynamicCast, lg);
        // A vocabulary row is longer than a thread block holds: log_softmax reads it once
        // per pass (max, sum of exponentials, output), its backward twice and the output
        // once (PyTorch's cunn_SoftMaxForward / cunn_SoftMaxBackward).
        x = add_memory("log-softmax", Phase::Forward, -1, lg * 12, lg * 4, 5.0 * lg, deps(x));
        x = add_memory("nll-loss", Phase::Forward, -1, static_cast<double>(tokens_) * 12, 4, 0, deps(x));
      }
    } else if (last_virtual(chunk)) {
      x = logits_and_loss(mtp_forward(x), -1, "");
      x = loss_sync(x, chunk);
    } else {
      sent(add_p2p("pp-send-activation", OpKind::Send, GroupKind::PP, static_cast<int32_t>((stage_ + 1) % l_.pp),
                   "pp-send-fwd", Phase::Forward, layer_of(chunk, chunk_layers(chunk) - 1), pp_bytes(), deps(x), false,
                   false, l_.overlap_p2p));
    }
    prev_ = x;
    fwd_ends_.push_back(x);
  }

  // The final norm, the vocab-parallel output layer and the loss over its logits: the
  // model's (`L` -1) or a multi-token prediction module's (its layer, names `pre`-fixed).
  uint32_t logits_and_loss(uint32_t x, int32_t L, const std::string& pre) {
    {
      const double act = act_bytes();
      uint32_t ln = add_memory((pre + "final-layernorm").c_str(), Phase::Forward, L, act, act,
                               8.0 * act / static_cast<double>(e_), deps(x));
      uint32_t in = tp_gather((pre + "allgather-logits-input").c_str(), Phase::Forward, L, ln);
      const uint32_t pg = L < 0 ? param_gather_for(-1) : kNone;
      uint32_t logits = add_gemm((pre + "logits").c_str(), Phase::Forward, L, tokens_, vocab_local_, m_.hidden,
                                 pg == kNone ? deps(in) : deps(in, pg), 1, 1.0, act_dtype_);
      const double lg = static_cast<double>(tokens_ * vocab_local_);
      // Megatron's vocab-parallel cross-entropy on logits.float(): the cast, max, shift,
      // exp, sum and softmax passes over the FP32 logits. Fused (--cross-entropy-loss-fusion,
      // NeMo's and Megatron-Bridge's default), its three jit-fused steps: the cast with the
      // max (reads e, writes 4), the shift, exponential and sum (reads and writes 4), the
      // division into the softmax it keeps (reads and writes 4).
      // Unfused, the shift by the row's maximum and the division by its sum read a per-row
      // scalar broadcast across the row: PyTorch's loop for those two passes is not
      // vectorized and is bound by the SMs (MemAccess::BroadcastLoop, 2 lg elements).
      const bool fused = l_.fused_cross_entropy;
      x = add_memory((pre + "cross-entropy").c_str(), Phase::Forward, L,
                     lg * (static_cast<double>(e_) + (fused ? 8.0 : 20.0)), lg * (fused ? 12.0 : 16.0), 5.0 * lg,
                     deps(logits));
      if (!fused) x = accessed(x, MemAccess::BroadcastLoop, 2.0 * lg);
      if (t_ > 1)  // vocab-parallel cross-entropy: max, sum of exponentials and target logit
        x = add_coll((pre + "cross-entropy-allreduce").c_str(), CollectiveKind::AllReduce, GroupKind::TP, tp_,
                     Phase::Forward, L, 3.0 * static_cast<double>(tokens_) * 4, deps(x));
    }
    return x;
  }

  // ---- multi-token prediction (Megatron-Core's MultiTokenPredictionBlock) ------------
  // On the last stage, after the last layer, each module k (its layer numbered layers + k):
  // the next token's embedding looked up (the stage's own copy of the table, its partial
  // sums reduced over TP), the two norms (that embedding's and the hidden state's), their
  // concatenation projected back to h (a column-parallel TE Linear: input gathered under
  // SP, output gathered along its width and the rank's tokens taken again), a transformer
  // layer like the model's last, and its own final norm, logits over the shared output
  // layer and loss, which joins the model's loss (MTPLossAutoScaler). docs/model.md.
  uint32_t mtp_forward(uint32_t x) {
    if (m_.mtp_layers == 0) return x;
    const double act = act_bytes(), e = static_cast<double>(e_);
    const int64_t h = m_.hidden;
    uint32_t hid = x, losses = x;
    for (int64_t k = 0; k < m_.mtp_layers; ++k) {
      const auto L = static_cast<int32_t>(m_.layers + k);
      uint32_t emb = add_memory("mtp-embedding", Phase::Forward, L, full_act_bytes() + static_cast<double>(tokens_ * 8),
                                full_act_bytes(), 0, deps(hid));
      emb = tp_reduce("mtp-embedding-allreduce", "mtp-embedding-reduce-scatter", Phase::Forward, L, emb);
      uint32_t c = add_memory("mtp-norms", Phase::Forward, L, 2 * act, 2 * act, 16.0 * act / e, deps(emb, hid));
      c = add_memory("mtp-concat", Phase::Forward, L, 2 * act, 2 * act, 0, deps(c));
      c = sp_gemm("allgather-mtp-proj-input", "mtp-proj", Phase::Forward, L, c, h / t_, 2 * h);
      c = latent_gather("mtp-proj-allgather", "mtp-proj-cat", "mtp-proj-scatter", Phase::Forward, L, c, h, h);
      const uint32_t g = zero3_gather(Phase::Forward, L, c);
      hid = layer_forward(L, g == c ? c : join(c, g), Phase::Forward);
      losses = logits_and_loss(hid, L, "mtp-");
    }
    return join(x, losses);
  }
  // The modules' backward, last first, from the main model's final-norm gradient `g`: each
  // module's loss, output layer (its weight gradient into the shared one's), final norm,
  // layer, projection, norms and embedding; the hidden state's gradient added into the
  // main one's.
  uint32_t mtp_backward(uint32_t g, bool last_micro_batch) {
    if (m_.mtp_layers == 0) return g;
    const double act = act_bytes(), e = static_cast<double>(e_);
    const int64_t h = m_.hidden;
    const Phase b = Phase::Backward;
    uint32_t d = g;
    for (int64_t k = m_.mtp_layers - 1; k >= 0; --k) {
      const auto L = static_cast<int32_t>(m_.layers + k);
      const double lg = static_cast<double>(tokens_ * vocab_local_);
      const bool fused = l_.fused_cross_entropy;
      d = add_memory("mtp-cross-entropy-backward", b, L, lg * (fused ? 4.0 : 8.0),
                     lg * ((fused ? 0.0 : 4.0) + e), 3.0 * lg, deps(d));
      if (!fused) d = accessed(d, MemAccess::BroadcastLoop, lg);
      const uint32_t dg = add_gemm("mtp-logits-dgrad", b, L, tokens_, h, vocab_local_, deps(d), 1, 1.0, act_dtype_);
      const uint32_t x = tp_gather("allgather-mtp-logits-input-wgrad", b, L, d);
      const uint32_t w = main_grad_add(
          "grad-accumulate-logits", L, vocab_local_, h,
          add_gemm("mtp-logits-wgrad", b, L, vocab_local_, h, tokens_, deps(d, x), 1, 1.0, act_dtype_));
      d = tp_reduce("mtp-logits-grad-allreduce", "mtp-logits-grad-reduce-scatter", b, L, dg);
      d = add_memory("mtp-final-layernorm-backward", b, L, 2 * act, act, 10.0 * act / e, deps(d, w));
      d = layer_backward(L, d, last_micro_batch);
      // The projection: the width gather and the rank's tokens undone, its data gradient
      // reduced over TP, its weight gradient on the input gathered again.
      const uint32_t pj = width_gather_backward("mtp-proj-grad-allgather", "mtp-proj-grad-split", L, d, h, h);
      uint32_t pw = kNone;
      const uint32_t pd = column_backward("mtp-proj", L, pj, 2 * h, h / t_, kNone, pw);
      // The two norms' backward; the embedding's gradient scattered into the stage's table.
      uint32_t nb = add_memory("mtp-norms-backward", b, L, 6 * act, 4 * act, 24.0 * act / e, deps(pd, pw));
      const uint32_t eg = tp_gather("mtp-embedding-grad-allgather", b, L, nb);
      const double table = static_cast<double>(vocab_local_ * h);
      const double ge = dtype_bits(grad_dtype_) / 8.0;
      const uint32_t emb = add_memory("mtp-embedding-backward", b, L, 2 * full_act_bytes() + table * (e + ge),
                                      full_act_bytes() + table * (e + ge), 0, deps(eg));
      if (last_micro_batch)
        add_grads(L, static_cast<double>(2 * h * (h / t_) + 3 * h) + table, 0, emb);
      d = add_memory("mtp-hidden-grad-add", b, L, 2 * act, act, act / e, deps(nb, emb));
    }
    return join(g, d);
  }

  // Megatron-LM's loss_func on the last stage, between a micro-batch's forward and its
  // backward (training.loss_sync): the loss and token count (8 bytes) all-reduced over CP
  // when cp > 1; the NaN check (check_for_nan_in_loss_and_grad, on by default since
  // 2023-09: `assert not loss[0].isnan()`, then the rerun state machine's validate_result),
  // a host wait before the backward is launched; the reporting loss all-reduced over DP
  // (every micro-batch until 2025-04, then once a step). Synchronous torch.distributed
  // calls: the compute stream waits for each.
  uint32_t loss_sync(uint32_t x, int64_t chunk) {
    if (l_.cp > 1 && l_.loss_allreduce) {
      if (cp_ == 0xff) cp_ = p_.stream("cp");
      x = add_coll("loss-cp-allreduce", CollectiveKind::AllReduce, GroupKind::CP, cp_, Phase::Forward, -1, 8, deps(x));
    }
    if (l_.loss_host_syncs > 0) {
      // The wait, then loss.backward() launched from an empty queue, walking the chunk's graph
      // (compute.backward_relaunch, autograd_node).
      // Counted before the check joins the chunk's ops.
      const int64_t nodes = l_.plan_before_2026_12_05 ? 0 : autograd_nodes(chunk, chunk_begin_);
      x = host_wait("loss-nan-check", Phase::Forward, -1, x, l_.loss_host_syncs);
      p_.ops[x].n = 1;
      if (!l_.plan_before_2026_12_05) p_.ops[x].batch = nodes;
    }
    if (l_.dp > 1 && l_.loss_allreduce)
      x = add_coll("loss-dp-allreduce", CollectiveKind::AllReduce, GroupKind::DP, dp_, Phase::Forward, -1, 8, deps(x));
    return x;
  }

  // Pipeline sends and receives (parallel.overlap_p2p_comm). Overlapped, a receive is
  // posted ahead on its own stream and a send runs beside the next chunk. Blocking (Megatron's
  // p2p_communication with wait_on_reqs): the stage posts a block's receive together with
  // the previous block's send once its compute reaches them, as one batch, and computes on
  // only when both are done, so a send also waits for its receiver to reach the matching
  // receive. The interleaved schedule batches up to four transfers of two chunks at once
  // (send_forward_backward_recv_forward_backward), which block-by-block posting cannot
  // pair without a cycle: there the receives stay posted ahead and only the sends block.
  //
  // Overlapped, Megatron posts a block's receive with the send that follows the previous
  // block of the same direction (forward_backward_pipelining_with_interleaving, core_r0.8 to
  // core_r0.15: send_forward_recv_forward after each forward step, send_backward_recv_backward
  // after each backward step; the first backward's receive after the warm-up's last forward),
  // and ProcessGroupNCCL makes its stream wait for the kernels issued before the post: so
  // the receive starts when that block's compute has finished, not as soon as its stream is
  // free. The first forward's receive is posted at the step's start.
  std::vector<uint32_t> p2p_posted(bool forward) const {
    if (l_.overlap_p2p) {
      if (forward) return fwd_ends_.empty() ? std::vector<uint32_t>{} : deps(fwd_ends_.back());
      if (!bwd_ends_.empty()) return deps(bwd_ends_.back());
      const size_t w = std::min(warm_forwards_, fwd_ends_.size());
      return w == 0 ? std::vector<uint32_t>{} : deps(fwd_ends_[w - 1]);
    }
    if (l_.virtual_stages > 1 || prev_ == kNone) return {};
    return deps(prev_);
  }
  void sent(uint32_t send) {
    if (!l_.overlap_p2p) pending_send_ = join(pending_send_, send);
  }
  uint32_t after_sends() {
    const uint32_t s = pending_send_;
    pending_send_ = kNone;
    return s == kNone ? prev_ : join(prev_, s);
  }

  // Megatron's blocking p2p (batch_p2p_comm, whenever overlap_p2p_comm is off) ends each
  // batched send and receive with torch.cuda.synchronize() (batch_p2p_sync, on by default
  // through core_r0.15.0; unconditional in the 2021-22 code): the host waits for every op
  // issued so far on every stream, the DP bucket reductions in flight included, then issues
  // the next kernels into an empty queue; a backward is launched from there, walking the
  // chunk's graph (relaunch_nodes >= 0: compute.backward_relaunch and autograd_node a node).
  uint32_t device_sync(const char* name, Phase ph, int32_t L, uint32_t after, int64_t relaunch_nodes) {
    for (; scanned_ < p_.ops.size(); ++scanned_) {
      const size_t st = p_.ops[scanned_].stream;
      if (last_on_stream_.size() <= st) last_on_stream_.resize(st + 1, kNone);
      last_on_stream_[st] = static_cast<uint32_t>(scanned_);
    }
    // The DP stream: the gradient reductions issued so far (its parameter gathers, issued
    // at the step's start in the plan, go out bucket by bucket as the forward reaches them
    // in Megatron, so the host finds only the next one in flight).
    std::vector<uint32_t> d = deps(after);
    for (size_t st = 0; st < last_on_stream_.size(); ++st)
      if (st != compute_ && st != dp_ && last_on_stream_[st] != kNone && last_on_stream_[st] != after)
        d.push_back(last_on_stream_[st]);
    if (!grad_ops_.empty()) d.push_back(grad_ops_.back());
    const uint32_t op = accessed(add_memory(name, ph, L, 0, 0, 0, d), MemAccess::HostSync, 1);
    device_sync_name_ = p_.ops[op].name;
    if (relaunch_nodes >= 0) {
      p_.ops[op].n = 1;
      p_.ops[op].batch = relaunch_nodes;
    }
    return op;
  }

  uint32_t join(uint32_t a, uint32_t b) {
    if (a == kNone) return b;
    if (b == kNone) return a;
    return add_memory("wait", Phase::Other, -1, 0, 0, 0, deps(a, b));
  }

  // The layers the stage holds: its chunks' transformer layers, then on the last stage the
  // multi-token prediction modules' (numbered on from m_.layers).
  std::vector<int32_t> held_layers() const {
    std::vector<int32_t> out;
    for (int64_t c = 0; c < l_.virtual_stages; ++c) {
      for (int64_t i = 0; i < chunk_layers(c); ++i) out.push_back(layer_of(c, i));
      if (last_virtual(c))
        for (int64_t k = 0; k < m_.mtp_layers; ++k) out.push_back(static_cast<int32_t>(m_.layers + k));
    }
    return out;
  }

  // The stage's parameters: dense (expert = false) or expert, over all its chunks.
  double local_params(bool expert) const {
    double p = 0;
    for (int64_t c = 0; c < l_.virtual_stages; ++c) {
      for (int64_t i = 0; i < chunk_layers(c); ++i)
        p += expert ? layer_expert_params(layer_of(c, i)) : layer_dense_params(layer_of(c, i));
      if (!expert) p += embedding_params(first_virtual(c), last_virtual(c));
      if (last_virtual(c))
        for (int64_t k = 0; k < m_.mtp_layers; ++k) {
          const auto L = static_cast<int32_t>(m_.layers + k);
          p += expert ? layer_expert_params(L) : layer_dense_params(L) + mtp_extra_params();
        }
    }
    return p;
  }
  // A multi-token prediction module's own weights beside its layer: the projection (2h x
  // h over TP) and its three norms (the embedding's copy it reads: embedding_params).
  double mtp_extra_params() const {
    const double h = static_cast<double>(m_.hidden);
    return 2.0 * h * h / static_cast<double>(t_) + 3.0 * h;
  }
  double embedding_params_local() const {
    double p = 0;
    for (int64_t c = 0; c < l_.virtual_stages; ++c) p += embedding_params(first_virtual(c), last_virtual(c));
    return p;
  }

  // ---- distributed optimizer: parameter gathers overlapped with the next forward ----
  // Megatron-Core with --overlap-param-gather all-gathers each bucket's updated
  // parameters as the forward reaches it. The buckets are those the backward fills
  // (layers last to first); the gathers are issued in forward order at the start of the
  // step, and a layer's first forward op waits for its bucket.
  void plan_param_gathers() {
    if (!(l_.zero_stage >= 1 && l_.zero_stage <= 2 && l_.dp * l_.cp > 1 && l_.overlap_param_gather)) return;
    struct Gather {
      double params = 0, bytes = 0;
      std::vector<int32_t> layers;
    };
    std::vector<Gather> buckets(1);
    auto add = [&](int32_t L, double params) {
      buckets.back().params += params;
      buckets.back().bytes += params * gathered_bytes(L);
      buckets.back().layers.push_back(L);
      if (buckets.back().params >= static_cast<double>(l_.bucket_params)) buckets.emplace_back();
    };
    for (int64_t c = l_.virtual_stages - 1; c >= 0; --c) {
      for (int64_t i = chunk_layers(c) - 1; i >= 0; --i) add(layer_of(c, i), layer_dense_params(layer_of(c, i)));
      if (first_virtual(c) || last_virtual(c)) add(-1, embedding_params(first_virtual(c), last_virtual(c)));
    }
    for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) {
      if (it->params <= 0) continue;
      const uint32_t g = add_coll("zero-param-allgather", CollectiveKind::AllGather, GroupKind::DP, dp_,
                                  Phase::Forward, -1, it->bytes, {});
      for (int32_t L : it->layers) param_gather_[L] = g;
    }
  }
  // Bytes a parameter of layer L (-1: the embedding and output layer) moves in the ZeRO 1/2
  // parameter all-gather: FP8 weights (parallel.fp8_param_gather) 1, else the model's type.
  // (A layer's norm weights, a few thousandths of it, count with its FP8 weights.)
  double gathered_bytes(int32_t L) const { return l_.fp8_params && L >= 0 ? 1.0 : static_cast<double>(e_); }
  uint32_t param_gather_for(int32_t L) const {
    auto it = param_gather_.find(L);
    return it == param_gather_.end() ? kNone : it->second;
  }

  // One transformer layer's backward (Megatron path or eager), from its output gradient
  // to its input's; its gradients join the buckets in the last micro-batch.
  uint32_t layer_backward(int32_t L, uint32_t g, bool last_micro_batch) {
    const double act = act_bytes();
    const int64_t h = m_.hidden;
    if (l_.eager) {
      if (l_.recompute == "full") {
        recomputing_ = true;
        g = layer_forward_eager(L, g, Phase::Backward);
        recomputing_ = false;
      }
      g = layer_backward_eager(L, g, last_micro_batch);
      return g;
    }
    if (l_.recompute == "full") {
      // Full recompute: the layer's forward runs again from its stored input.
      recomputing_ = true;
      g = layer_forward(L, g, Phase::Backward);
      recomputing_ = false;
    }
    // MLP: row-parallel down projection, then column-parallel up projection whose
    // input-gradient reduction overlaps its weight-gradient GEMM.
    uint32_t mlp_w = kNone, up_w = kNone;
    uint32_t red = mlp_backward(L, bias_dropout_add_backward("dropout-backward-mlp", "bias-grad-fc2", L, g,
                                                               !m_.moe_layer(L)),
                                mlp_w, up_w);
    if (m_.moe_layer(L)) {
      tp_gather("allgather-mlp-input-wgrad", Phase::Backward, L, mlp_input_ready_);
      up_w = mlp_w;
    }
    // Before 2026-12-05 the dropout's mask was read by the LayerNorm backwards instead.
    const double mask = l_.plan_before_2026_12_05 && m_.dropout > 0 ? act / static_cast<double>(e_) : 0.0;
    uint32_t ln2 = add_memory("layernorm-2-backward", Phase::Backward, L, 3 * act + mask, 2 * act,
                              12.0 * act / static_cast<double>(e_), deps(red, up_w));
    ln2 = bias_dropout_add_backward("dropout-backward-attn", "bias-grad-proj", L, ln2);
    const int64_t attn_out = m_.attn_out_width() / t_;
    ln2 = fp8_cast("fp8-cast-attn-grad", Phase::Backward, L, seq_tokens_, m_.hidden, ln2, 0, true);
    uint32_t proj_d = ag_then_gemm("allgather-attn-grad", "attn-proj-dgrad", Phase::Backward, L, ln2, attn_out, h);
    uint32_t proj_w = main_grad_add("grad-accumulate-attn-proj", L, h, attn_out,
                                    add_gemm("attn-proj-wgrad", Phase::Backward, L, h, attn_out, tokens_,
                                             deps(gathered_)));
    // Selective recompute under a fused kernel: Megatron-Core checkpoints the core
    // attention (`checkpoint_core_attention`), so its forward kernel, ring exchange
    // included, runs again once the output gradient arrives, before its backward.
    if (l_.mla_up_recompute) {
      recomputing_ = true;
      proj_d = join(proj_d, mla_up(L, Phase::Backward, proj_d, proj_d));
      recomputing_ = false;
    }
    if (l_.recompute_core_attn && l_.flash_attention) {
      recomputing_ = true;
      proj_d = join(proj_d, ring_attention(L, Phase::Backward, proj_d, true));
      recomputing_ = false;
    }
    uint32_t red1 = kNone, qkv_w = kNone;
    if (m_.is_mla()) {
      red1 = mla_backward(L, ring_attention(L, Phase::Backward, proj_d), proj_w);
    } else {
      uint32_t at = rope_backward(L, ring_attention(L, Phase::Backward, proj_d));
      at = fp8_cast("fp8-cast-qkv-grad", Phase::Backward, L, tokens_, qkv_, at);
      // The input's all-gather (for the weight gradient) runs beside the data-gradient GEMM,
      // the data gradient's reduce-scatter beside the weight-gradient GEMM: Megatron's
      // LinearWithGradAccumulationAndAsyncCommunication and TE's bulk overlaps alike.
      // Without TP the order stays: TE's _Linear.backward runs the data gradient first.
      uint32_t x1 = tp_gather("allgather-qkv-input-wgrad", Phase::Backward, L, at, l_.tp_overlap_qkv_dgrad_sms);
      auto qkv_wgrad = [&] {
        qkv_w = main_grad_add("grad-accumulate-qkv", L, h, qkv_,
                              add_gemm("qkv-wgrad", Phase::Backward, L, h, qkv_, tokens_, deps(x1, proj_w)));
        return qkv_w;
      };
      red1 = gemm_then_reduce("qkv-dgrad", "tp-allreduce-qkv-grad", "reduce-scatter-qkv-grad",
                              Phase::Backward, L, deps(at), h, qkv_, qkv_wgrad);
      // Megatron-LM's own layer: each bias gradient is a sum of the output gradient over the
      // tokens, a reduction kernel of its own (TE's kernels reduce them as they go): QKV and
      // FC1 over their TP columns, the projection and FC2 biases over the (sequence-parallel)
      // hidden rows.
      if (l_.local_impl && m_.biases && !m_.moe_layer(L)) {
        const double cols = static_cast<double>(tokens_ * (qkv_ + m_.ffn_hidden / t_));
        const double rows = 2.0 * static_cast<double>(seq_tokens_ * h);
        red1 = add_memory("bias-grad-sums", Phase::Backward, L, (cols + rows) * static_cast<double>(e_),
                          static_cast<double>((qkv_ + m_.ffn_hidden / t_ + 2 * h) * 4), cols + rows, deps(red1));
      }
    }
    g = add_memory("layernorm-1-backward", Phase::Backward, L, 3 * act + mask, 2 * act,
                   12.0 * act / static_cast<double>(e_), deps(red1, qkv_w));
    g = small_param_grad_adds(L, g);
    if (last_micro_batch || (l_.zero_stage >= 3 && !l_.zero3_grad_once))
      add_grads(L, layer_dense_params(L), layer_expert_params(L), g);
    return g;
  }

  void backward_block(int64_t chunk, bool last_micro_batch) {
    const double act = act_bytes();
    const int64_t h = m_.hidden;
    uint32_t g;
    if (last_virtual(chunk) && l_.eager) {
      // nll_loss and log_softmax backward on a zero-filled FP32 gradient, cast to BF16 for
      // the logits' GEMMs; the logits' weight gradient is cast and accumulated in FP32.
      const double lg = static_cast<double>(tokens_ * vocab_local_);
      const double a32 = eager_act32();
      if (l_.fused_cross_entropy) {
        // The gradient softmax − one-hot, from the logits and the saved log-sum-exp, written
        // in the logits' type: one read and one write.
        g = add_memory("cross-entropy-fused-backward", Phase::Backward, -1,
                       lg * static_cast<double>(e_) + tokens_ * 12.0, lg * static_cast<double>(e_), 3.0 * lg, deps(prev_));
      } else {
        g = add_memory("nll-loss-backward", Phase::Backward, -1, static_cast<double>(tokens_) * 8, lg * 4, 0, deps(prev_));
        g = add_memory("log-softmax-backward", Phase::Backward, -1, lg * 12, lg * 4, 3.0 * lg, deps(g));
        g = add_memory("logits-grad-cast", Phase::Backward, -1, lg * 4, lg * static_cast<double>(e_), 0, deps(g));
      }
      uint32_t dgrad = add_gemm("logits-dgrad", Phase::Backward, -1, tokens_, h, vocab_local_, deps(g), 1, 1.0, act_dtype_);
      uint32_t wgrad = add_gemm("logits-wgrad", Phase::Backward, -1, vocab_local_, h, tokens_, deps(g), 1, 1.0, act_dtype_);
      wgrad = eager_grad_accumulate("grad-accumulate-logits", -1, static_cast<double>(vocab_local_ * h), wgrad);
      g = accessed(add_memory("autocast-cast-logits-input-grad", Phase::Backward, -1, eager_act16(), a32, 0, deps(dgrad)),
                   MemAccess::DynamicCast, static_cast<double>(tokens_ * h));
      g = add_memory("final-layernorm-backward", Phase::Backward, -1, 2 * a32, a32,
                     10.0 * static_cast<double>(tokens_ * h), deps(g));
      g = add_memory("final-layernorm-weight-grad", Phase::Backward, -1, 2 * a32, 0, 0, deps(g, wgrad));
    } else if (last_virtual(chunk)) {
      const double lg = static_cast<double>(tokens_ * vocab_local_);
      // Fused: the saved softmax read once, the gradient written in the logits' type.
      const bool fused = l_.fused_cross_entropy;
      // Unfused, the softmax is scaled by the loss gradient broadcast across each row
      // (grad_input.mul_(grad_output.unsqueeze(-1))): one broadcast pass, lg elements.
      g = add_memory("cross-entropy-backward", Phase::Backward, -1, lg * (fused ? 4.0 : 8.0),
                     lg * ((fused ? 0.0 : 4.0) + static_cast<double>(e_)), 3.0 * lg, deps(prev_));
      if (!fused) g = accessed(g, MemAccess::BroadcastLoop, lg);
      uint32_t dgrad = add_gemm("logits-dgrad", Phase::Backward, -1, tokens_, h, vocab_local_, deps(g), 1, 1.0, act_dtype_);
      // Deferred (training.defer_embedding_wgrad): the weight gradient waits for the end of
      // the step (drain_deferred_wgrads); the first wgrad_deferral_limit micro-batches' only.
      uint32_t wgrad = kNone;
      if (l_.defer_embedding_wgrad &&
          (l_.wgrad_deferral_limit == 0 || deferred_wgrads_ < l_.wgrad_deferral_limit)) {
        ++deferred_wgrads_;
      } else {
        wgrad = main_grad_add(
            "grad-accumulate-logits", -1, vocab_local_, h,
            add_gemm("logits-wgrad", Phase::Backward, -1, vocab_local_, h, tokens_, deps(g), 1, 1.0, act_dtype_));
      }
      uint32_t d = tp_reduce("logits-grad-allreduce", "logits-grad-reduce-scatter", Phase::Backward, -1, dgrad);
      g = add_memory("final-layernorm-backward", Phase::Backward, -1, 2 * act, act,
                     10.0 * act / static_cast<double>(e_), deps(d, wgrad));
      g = mtp_backward(g, last_micro_batch);
    } else {
      const uint32_t recv =
          add_p2p("pp-recv-grad", OpKind::Recv, GroupKind::PP, static_cast<int32_t>((stage_ + 1) % l_.pp),
                  "pp-recv-bwd", Phase::Backward, layer_of(chunk, chunk_layers(chunk) - 1), pp_bytes(),
                  p2p_posted(false), false, false, l_.overlap_p2p);
      const uint32_t in = pp_gather("pp-grad-allgather", Phase::Backward, layer_of(chunk, chunk_layers(chunk) - 1), recv);
      g = add_memory("pp-grad-in", Phase::Backward, layer_of(chunk, chunk_layers(chunk) - 1), 0, 0, 0,
                     deps(in, after_sends()));
      if (l_.p2p_device_sync)
        g = device_sync("pp-device-sync", Phase::Backward, layer_of(chunk, chunk_layers(chunk) - 1), g,
                        chunk_nodes_[static_cast<size_t>(chunk)]);
    }
    for (int64_t i = chunk_layers(chunk) - 1; i >= 0; --i) {
      const int32_t L = layer_of(chunk, i);
      const uint32_t zg = zero3_backward_gather(L, g);
      if (zg != g) g = join(g, zg);
      zero3_prefetch_below(i > 0 ? layer_of(chunk, i - 1) : -1);
      g = layer_backward(L, g, last_micro_batch);
    }
    if (first_virtual(chunk) && l_.eager) {
      // embedding_dense_backward: the token ids sorted, the FP32 rows summed per id into a
      // zero-filled FP32 table; tied to the logits, that table is added to their gradient.
      const double table = static_cast<double>(vocab_local_ * m_.hidden) * 4;
      g = add_memory("embedding-backward", Phase::Backward, -1, 2 * eager_act32(), eager_act32() + table, 0, deps(g));
      if (m_.tied_embeddings || mb_ > 0)
        g = add_memory("grad-accumulate-embedding", Phase::Backward, -1, 2 * table, table, table / 4, deps(g));
      if (m_.learned_positions)
        g = add_memory("position-grad", Phase::Backward, -1, eager_act32(),
                       static_cast<double>(m_.seq_len * m_.hidden) * 4, 0, deps(g));
    } else if (first_virtual(chunk)) {
      // The embedding's weight gradient is dense (vocab x h per TP rank): zero-filled,
      // scatter-added per token, then accumulated into the FP32 main gradient.
      const double table = static_cast<double>(vocab_local_ * m_.hidden);
      const double ge = dtype_bits(grad_dtype_) / 8.0;
      g = add_memory("embedding-backward", Phase::Backward, -1, 2 * full_act_bytes() + table * (e_ + ge),
                     full_act_bytes() + table * (e_ + ge), 0, deps(g));
      // The table's 16-bit gradient added into an FP32 main gradient: mixed dtypes, PyTorch's
      // dynamic-cast loop (DDP's hook, main_grad.add_(grad)).
      if (ge != static_cast<double>(e_) && !l_.plan_before_2026_12_05) g = accessed(g, MemAccess::DynamicCast, table);
    } else {
      sent(add_p2p("pp-send-grad", OpKind::Send, GroupKind::PP, static_cast<int32_t>((stage_ + l_.pp - 1) % l_.pp),
                   "pp-send-bwd", Phase::Backward, layer_of(chunk, 0), pp_bytes(), deps(g), false, false,
                   l_.overlap_p2p));
    }
    if (last_micro_batch && (first_virtual(chunk) || last_virtual(chunk))) {
      // With deferred output-layer weight gradients, its gradient is final only once they
      // are drained at the end of the step.
      if (last_virtual(chunk) && deferred_wgrads_ > 0 && !l_.eager)
        deferred_embedding_params_ = embedding_params(first_virtual(chunk), last_virtual(chunk));
      else
        add_grads(-1, embedding_params(first_virtual(chunk), last_virtual(chunk)), 0, g);
    }
    if (last_micro_batch) flush_buckets(g);
    if (last_virtual(chunk) && l_.train_metrics > 0) train_metrics(g);
    // Parameters the optimizer updates on this stage.
    if (last_micro_batch) {
      for (int64_t i = 0; i < chunk_layers(chunk); ++i) {
        params_dense_ += layer_dense_params(layer_of(chunk, i));
        params_expert_ += layer_expert_params(layer_of(chunk, i));
      }
      params_dense_ += embedding_params(first_virtual(chunk), last_virtual(chunk));
    }
    prev_ = g;
    bwd_ends_.push_back(g);
  }

 private:
  Plan& plan_;
  Program& p_;
  const ModelConfig& m_;
  const TrainingLayout& l_;
  int64_t stage_;
  bool adam_;
  uint8_t compute_ = 0, tp_ = 0, dp_ = 0, ep_ = 0xff, cp_ = 0xff;
  DType act_dtype_ = DType::BF16, lin_dtype_ = DType::BF16, attn_dtype_ = DType::BF16;
  uint32_t gathered_ = kNone;  // the op after which the last all-gathered input is whole
  std::map<int32_t, uint32_t> param_gather_;  // layer (-1: embedding, output) -> its bucket's gather
  struct Bucket {
    double dense, expert;
    int32_t layer;
    double gather_bytes;  // the ZeRO 1/2 all-gather of the bucket's updated parameters
  };
  bool defer_grads_ = false;
  std::vector<Bucket> deferred_;
  int64_t e_ = 2, t_ = 1, tokens_ = 0, seq_tokens_ = 0, vocab_local_ = 0, mlp_in_ = 0, qkv_ = 0;
  DType grad_dtype_ = DType::FP32;
  int32_t mb_ = -1;
  double load_sum_ = 0;  // the hot EP rank's load over the forward MoE layers built
  int64_t load_count_ = 0;
  uint32_t prev_ = kNone;
  uint32_t chunk_begin_ = 0;  // the first op of the chunk forward_block is planning
  std::vector<int64_t> chunk_nodes_;         // autograd nodes of each chunk's backward (-1: not yet counted)
  std::vector<uint32_t> last_on_stream_;     // device_sync: the last op issued on each stream
  size_t scanned_ = 0;                       // device_sync: ops already seen
  uint32_t device_sync_name_ = kNone;        // device_sync: its ops' name (no autograd node)
  uint32_t pending_send_ = kNone;  // blocking pipeline p2p: the send the next compute waits for
  // Overlapped pipeline p2p: each forward and backward block's last op, in schedule order,
  // and how many forward blocks the schedule runs before its first backward.
  std::vector<uint32_t> fwd_ends_, bwd_ends_;
  size_t warm_forwards_ = 0;
  uint32_t mlp_input_ready_ = kNone;
  bool recomputing_ = false;
  // ZeRO 3 backward prefetch: the gather issued ahead for `prefetched_layer_`.
  uint32_t prefetched_gather_ = kNone;
  int32_t prefetched_layer_ = -1;
  int64_t deferred_wgrads_ = 0;             // output-layer weight gradients awaiting the drain
  double deferred_embedding_params_ = 0;    // and the parameters whose gradient they complete
  std::vector<int64_t> last_mb_;
  std::vector<uint32_t> grad_ops_;
  std::vector<double> gather_buckets_;
  double bucket_dense_ = 0, bucket_expert_ = 0, bucket_gather_ = 0;
  uint32_t bucket_ready_ = kNone;
  int32_t bucket_layer_ = -1;
  double params_dense_ = 0, params_expert_ = 0;
  double model_flops_ = 0;
  double causal_attention_flops_ = 0;
};

}  // namespace

std::vector<PipelineBlock> pipeline_schedule(const std::string& schedule, int64_t pp, int64_t v, int64_t M, int64_t s,
                                             int64_t group) {
  std::vector<PipelineBlock> out;
  if (pp <= 1) {
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t c = 0; c < v; ++c) out.push_back({true, m, c});
      for (int64_t c = v - 1; c >= 0; --c) out.push_back({false, m, c});
    }
    return out;
  }
  if (schedule == "gpipe") {
    for (int64_t m = 0; m < M; ++m) out.push_back({true, m, 0});
    for (int64_t m = 0; m < M; ++m) out.push_back({false, m, 0});
    return out;
  }
  if (schedule == "1f1b" || v == 1) {
    const int64_t warm = std::min(pp - s - 1, M);
    for (int64_t m = 0; m < warm; ++m) out.push_back({true, m, 0});
    for (int64_t i = 0; i < M - warm; ++i) {
      out.push_back({true, warm + i, 0});
      out.push_back({false, i, 0});
    }
    for (int64_t m = M - warm; m < M; ++m) out.push_back({false, m, 0});
    return out;
  }
  // Interleaved 1F1B (Megatron-Core's get_schedule_table): forward order over (micro-batch,
  // chunk) in groups of N micro-batches per chunk (N = pp unless given; the last group
  // takes what is left); backward runs the chunks in reverse.
  const int64_t n = group > 0 ? group : pp;
  const int64_t total = M * v;
  auto block = [&](int64_t k, bool fwd) {
    const int64_t start = (k / (n * v)) * n;  // first micro-batch of k's group
    const int64_t size = std::min(n, M - start);
    const int64_t in_group = k - start * v;
    int64_t chunk = in_group / size;
    if (!fwd) chunk = v - 1 - chunk;
    return PipelineBlock{fwd, start + in_group % size, chunk};
  };
  const int64_t warm = std::min((pp - s - 1) * 2 + (v - 1) * n, total);
  for (int64_t k = 0; k < warm; ++k) out.push_back(block(k, true));
  for (int64_t i = 0; i < total - warm; ++i) {
    out.push_back(block(warm + i, true));
    out.push_back(block(i, false));
  }
  for (int64_t k = total - warm; k < total; ++k) out.push_back(block(k, false));
  return out;
}

std::vector<MemoryBreakdown> training_stage_memory(const Scenario& s, const TrainingLayout& l) {
  const ModelConfig& m = s.model;
  const bool adam = s.training.optimizer == "adam";
  std::vector<MemoryBreakdown> out;
  // Memory per stage: the schedule tells how many layer-activations are held at the peak.
  for (int64_t st = 0; st < l.pp; ++st) {
    MemoryInputs mi;
    mi.tp = l.tp;
    mi.cp = l.cp;
    mi.dp = l.dp;
    mi.ep = l.ep;
    mi.etp = l.expert_tp();
    mi.pp = l.pp;
    mi.zero_stage = l.zero_stage;
    mi.zero3_params_held = l.zero3_keep_for_backward;  // step mode keeps them too
    mi.zero3_gather_bytes = dtype_bits(l.fsdp_param_dtype) / 8.0;
    mi.zero3_grad_once = l.zero3_grad_once;
    if (l.zero_stage < 3 && !l.eager) mi.grad_bytes = dtype_bits(l.grad_dtype) / 8.0;
    mi.micro_batch = l.micro_batch;
    mi.sequence_parallel = l.sequence_parallel;
    mi.full_recompute = l.recompute == "full";
    mi.adam = adam;
    mi.fp8 = l.fp8;
    mi.fp8_params = l.fp8_params;
    mi.unfused_scores = !l.flash_attention && !l.recompute_core_attn && l.recompute != "full";
    mi.mla_up_recompute = l.mla_up_recompute;
    mi.fused_cross_entropy = l.fused_cross_entropy && l.eager;  // Megatron's fused loss keeps its FP32 softmax
    // Counted in layers, chunk by chunk: with an uneven split a chunk may hold a layer
    // fewer, or none (only the embedding or the output layer).
    std::vector<int64_t> chunk_layers(static_cast<size_t>(l.virtual_stages));
    for (int64_t c = 0; c < l.virtual_stages; ++c)
      chunk_layers[static_cast<size_t>(c)] = stage_layers(l, m.layers, c * l.pp + st).second;
    // The multi-token prediction modules' layers run in the last chunk of the last stage.
    if (st == l.pp - 1) chunk_layers.back() += m.mtp_layers;
    int64_t live = 0, peak = 0;
    for (const PipelineBlock& b :
         pipeline_schedule(l.schedule, l.pp, l.virtual_stages, l.micro_batches, st, l.microbatch_group)) {
      const int64_t layers = chunk_layers[static_cast<size_t>(b.chunk)];
      live += b.forward ? layers : -layers;
      peak = std::max(peak, live);
    }
    mi.in_flight_layers = static_cast<double>(peak);
    MemoryBreakdown total;
    for (int64_t c = 0; c < l.virtual_stages; ++c) {
      MemoryInputs ci = mi;
      const int64_t vs = c * l.pp + st;
      std::tie(ci.first_layer, ci.end_layer) = stage_layers(l, m.layers, vs);
      ci.end_layer += ci.first_layer;
      ci.embedding = vs == 0;
      ci.output = vs == l.pp * l.virtual_stages - 1;
      ci.mtp_layers = ci.output ? m.mtp_layers : 0;
      ci.in_flight_layers = c == 0 ? mi.in_flight_layers : 0;
      ci.pp = c == 0 ? l.pp : 1;
      const MemoryBreakdown b = training_memory(m, ci);
      total.weights += b.weights;
      total.gradients += b.gradients;
      total.optimizer += b.optimizer;
      total.activations += b.activations;
      total.buffers += b.buffers;
    }
    const int communicators = (l.tp > 1) + (l.dp * l.cp > 1) + (l.pp > 1) + (l.cp > 1) + (l.ep > 1);
    total.reserved =
        s.memory_reserve_bytes >= 0 ? static_cast<double>(s.memory_reserve_bytes) : default_memory_reserve(total, communicators);
    out.push_back(total);
  }
  return out;
}

TrainingPlan build_training_plan(const Scenario& s, const PlannerOptions& opt) {
  if (!s.model.blocks.empty()) return build_block_plan(s, opt);
  TrainingPlan tp;
  tp.layout = check_training_layout(s);
  const TrainingLayout& l = tp.layout;
  const ModelConfig& m = s.model;
  const bool adam = s.training.optimizer == "adam";
  tp.stage_memory = training_stage_memory(s, l);
  for (const MemoryBreakdown& b : tp.stage_memory)
    if (b.total() > tp.memory.total()) tp.memory = b;
  Plan& plan = tp.plan;
  const int64_t world = l.dp * l.tp * l.pp * l.cp;
  plan.world_size = static_cast<int32_t>(world);
  plan.rank_program.assign(static_cast<size_t>(world), 0);
  plan.rank_gpu.resize(static_cast<size_t>(world));
  std::array<int32_t, kGroupKinds> none;
  none.fill(-1);
  plan.rank_groups.assign(static_cast<size_t>(world), none);
  const PlacementStrides st = placement_strides(s.parallel.placement, l);
  auto rank_of = [&](int64_t t, int64_t c, int64_t d, int64_t p) {
    return static_cast<int32_t>(t * st.tp + c * st.cp + d * st.dp + p * st.pp);
  };
  // Ranks are numbered in placement order, so rank r sits on GPU r (node-major).
  for (int64_t r = 0; r < world; ++r) plan.rank_gpu[static_cast<size_t>(r)] = static_cast<int32_t>(r);
  for (int64_t p = 0; p < l.pp; ++p)
    for (int64_t d = 0; d < l.dp; ++d)
      for (int64_t c = 0; c < l.cp; ++c)
        for (int64_t t = 0; t < l.tp; ++t)
          plan.rank_program[static_cast<size_t>(rank_of(t, c, d, p))] = static_cast<uint32_t>(p);
  // Each stage's memory against the GPUs that hold it (a topology file may mix models).
  if (opt.check_memory) {
    const int64_t gpn = s.cluster.node.gpus;
    const bool one_model = s.cluster.one_gpu_model();
    for (int64_t r = 0; r < (one_model ? 1 : world); ++r) {
      const uint32_t stage = plan.rank_program[static_cast<size_t>(r)];
      const MemoryBreakdown& need =
          one_model ? tp.memory : tp.stage_memory[std::min<size_t>(stage, tp.stage_memory.size() - 1)];
      const GpuSpec& gpu = s.cluster.node_at(static_cast<int>(plan.rank_gpu[static_cast<size_t>(r)] / gpn)).gpu;
      if (need.total() <= gpu.hbm_bytes) continue;
      char buf[160];
      std::snprintf(buf, sizeof buf, "%.1f GiB per GPU needed, %.1f GiB available on %s", need.total() / (1 << 30),
                    gpu.hbm_bytes / (1 << 30), gpu.name.c_str());
      std::string where;
      if (!one_model)
        where = " (stage " + str(static_cast<int64_t>(stage)) + ", rank " + str(r) + ")";
      fail(s, "parallel", std::string("layout does not fit in memory: ") + buf + where + " (" + need.describe() + ")");
    }
  }
  auto group = [&](GroupKind kind, auto&& members) {
    std::vector<int32_t> g;
    members(g);
    if (g.size() > 1) plan.add_group(kind, std::move(g));
  };
  for (int64_t p = 0; p < l.pp; ++p)
    for (int64_t d = 0; d < l.dp; ++d)
      for (int64_t c = 0; c < l.cp; ++c) {
        group(GroupKind::TP, [&](auto& g) {
          for (int64_t t = 0; t < l.tp; ++t) g.push_back(rank_of(t, c, d, p));
        });
      }
  for (int64_t p = 0; p < l.pp; ++p)
    for (int64_t d = 0; d < l.dp; ++d)
      for (int64_t t = 0; t < l.tp; ++t)
        group(GroupKind::CP, [&](auto& g) {
          for (int64_t c = 0; c < l.cp; ++c) g.push_back(rank_of(t, c, d, p));
        });
  // Expert groups over n slots in Megatron-Core's order: EP groups of ep consecutive slots,
  // expert-DP groups of the slots that hold the same experts (slot ≡ r mod ep); `at` maps a
  // slot to its rank.
  auto expert_groups = [&](int64_t n, auto&& at) {
    for (int64_t r = 0; r < l.ep; ++r)
      group(GroupKind::EDP, [&](auto& g) {
        for (int64_t j = r; j < n; j += l.ep) g.push_back(at(j));
      });
    for (int64_t k = 0; k < n / l.ep; ++k)
      group(GroupKind::EP, [&](auto& g) {
        for (int64_t j = k * l.ep; j < (k + 1) * l.ep; ++j) g.push_back(at(j));
      });
  };
  for (int64_t p = 0; p < l.pp; ++p)
    for (int64_t t = 0; t < l.tp; ++t) {
      // Dense gradients are reduced over DP x CP (Megatron). Experts are laid out over the
      // same DP x CP ranks in Megatron-Core's order (CP innermost, then DP: j = c + cp·d):
      // an EP group is ep consecutive j, an expert-DP group the ranks that hold the same
      // experts (j ≡ r mod ep).
      group(GroupKind::DP, [&](auto& g) {
        for (int64_t d = 0; d < l.dp; ++d)
          for (int64_t c = 0; c < l.cp; ++c) g.push_back(rank_of(t, c, d, p));
      });
      if (m.moe.experts > 0 && l.expert_tp() == l.tp)
        expert_groups(l.dp * l.cp, [&](int64_t j) { return rank_of(t, j % l.cp, j / l.cp, p); });
    }
  // Whole experts on every rank (expert_tp 1 under TP): the stage's ranks in Megatron-Core's
  // order, u = t + tp·(c + cp·d), EP groups of ep consecutive u, the same experts at u ≡ r mod ep.
  if (m.moe.experts > 0 && l.expert_tp() < l.tp)
    for (int64_t p = 0; p < l.pp; ++p)
      expert_groups(l.tp * l.cp * l.dp,
                    [&](int64_t u) { return rank_of(u % l.tp, u / l.tp % l.cp, u / (l.tp * l.cp), p); });
  for (int64_t d = 0; d < l.dp; ++d)
    for (int64_t c = 0; c < l.cp; ++c)
      for (int64_t t = 0; t < l.tp; ++t)
        group(GroupKind::PP, [&](auto& g) {
          for (int64_t p = 0; p < l.pp; ++p) g.push_back(rank_of(t, c, d, p));
        });

  // Symmetry: when every TP group is one contiguous block inside a node, every DP replica
  // runs on an isomorphic part of the cluster and behaves like replica 0, which meets
  // every DP, EP and CP collective; only replica 0 is simulated.
  const int64_t gpn = s.cluster.node.gpus;
  const bool symmetric = opt.use_symmetry && st.tp == 1 && gpn % l.tp == 0;
  plan.mirror_of.resize(static_cast<size_t>(world));
  for (int64_t p = 0; p < l.pp; ++p)
    for (int64_t d = 0; d < l.dp; ++d)
      for (int64_t c = 0; c < l.cp; ++c)
        for (int64_t t = 0; t < l.tp; ++t)
          plan.mirror_of[static_cast<size_t>(rank_of(t, c, d, p))] =
              symmetric ? rank_of(t, c, 0, p) : rank_of(t, c, d, p);

  double model_flops = 0, causal_attention = 0, load_sum = 0;
  int64_t load_count = 0;
  for (int64_t p = 0; p < l.pp; ++p) {
    plan.programs.emplace_back();
    Program& prog = plan.programs.back();
    prog.name = l.pp > 1 ? "stage-" + std::to_string(p) : "rank";
    StageBuilder b(plan, prog, m, l, p, adam);
    b.build();
    model_flops += b.model_flops();
    causal_attention += b.causal_attention_flops();
    load_sum += b.moe_load_sum();
    load_count += b.moe_load_count();
    for (const Op& op : prog.ops)
      if (op.kind == OpKind::Gemm || op.kind == OpKind::Attention)
        tp.hardware_flops_per_rank += op.flops / static_cast<double>(l.pp);
  }
  tp.model_flops_per_rank = model_flops / static_cast<double>(l.pp);
  tp.causal_attention_flops_per_rank = causal_attention / static_cast<double>(l.pp);
  if (load_count > 0) tp.moe_hot_rank_load = load_sum / static_cast<double>(load_count);
  return tp;
}

}  // namespace clustersim
