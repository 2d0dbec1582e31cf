// Scenario keys of the training step: batch, recompute, optimizer, precision recipes and per-step costs
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
void add_training_keys(KeyList& t) {
  using S = Scenario;
  using N = YNode;
  t.insert(
      t.end(),
      {
          {"training", "mapping", "", "the training run", nullptr},
          {"training.global_batch", "integer", "dp · micro_batch · pp",
           "sequences per iteration (default: pp micro-batches a DP rank, so a pipeline has one to fill each stage; "
           "one without)",
           [](const N& n, S& s) { s.training.global_batch = as_int(n, "training.global_batch", 1, int64_t{1} << 32); }},
          {"training.iterations", "integer", "1", "iterations (identical in a deterministic model: one is simulated)",
           [](const N& n, S& s) { s.training.iterations = as_int(n, "training.iterations", 1, int64_t{1} << 32); }},
          {"training.recompute", "name", "none",
           "none | selective (Megatron-Core's: training.recompute_modules) | full (each layer's forward again from "
           "its input) | op (pytorch-eager: PyTorch's selective checkpointing with TorchTitan's op policy, each "
           "layer's matmul and attention outputs kept but every second matmul's, the other ops run again; "
           "docs/model.md)",
           [](const N& n, S& s) {
             s.training.recompute = as_enum(n, "training.recompute", {"none", "selective", "full", "op"});
           }},
          {"training.recompute_num_layers", "integer", "all",
           "with recompute: full, all or how many layers of each pipeline chunk run their forward again in the "
           "backward, "
           "from the chunk's first; the rest keep their activations (Megatron-Core's --recompute-method block "
           "--recompute-num-layers N; TorchTitan's selective layer checkpointing of every k-th layer is layers / k); "
           "docs/model.md",
           [](const N& n, S& s) {
             s.training.recompute_num_layers = n.kind == YNode::Kind::Scalar && n.scalar == "all"
                                                   ? -1
                                                   : as_int(n, "training.recompute_num_layers", 0, int64_t{1} << 20);
           }},
          {"training.checkpoint_reentrant", "bool", "false",
           "pytorch-eager with recompute: full: the layers checkpointed with torch.utils.checkpoint's reentrant "
           "variant (use_reentrant=True, Composer's activation_checkpointing_reentrant default), which reruns each "
           "layer whole; false: the non-reentrant one (PyTorch's recommendation; TorchTitan's, LLM Foundry's "
           "yamls), which stops once the saved tensors are back, before the down projection; docs/model.md",
           [](const N& n, S& s) { s.training.checkpoint_reentrant = as_bool(n, "training.checkpoint_reentrant"); }},
          {"training.recompute_modules", "list", "[core_attn]",
           "with recompute: selective, what runs again in the backward instead of keeping its outputs (Megatron-Core's "
           "--recompute-modules): core_attn (the attention kernel's forward) | mla_up_proj (multi-head latent "
           "attention's up projections, rotary embedding and the query, key and value assembled from them, rebuilt "
           "from "
           "the kept latents); docs/model.md",
           [](const N& n, S& s) {
             if (n.kind != YNode::Kind::Seq)
               throw InputError(
                   n.mark,
                   "training.recompute_modules must be a list, e.g. [core_attn, mla_up_proj], got " + n.kind_name());
             s.training.recompute_modules.clear();
             for (const YNode& v : n.seq)
               s.training.recompute_modules.push_back(
                   as_enum(v, "training.recompute_modules", {"core_attn", "mla_up_proj"}));
           }},
          {"training.optimizer", "name", "adam", "adam | sgd",
           [](const N& n, S& s) {
             s.training.optimizer = as_enum(n, "training.optimizer", {"adam", "sgd"});
           }},
          {"training.optimizer_state", "name", "fp32",
           "the optimizer's state and master weights a parameter of its shard: fp32 (Megatron's distributed optimizer: "
           "FP32 moments and master weights, the master then copied to the 16-bit parameter) | fp32-remainders (Apex's "
           "DistributedFusedAdam under a BF16 model, NeMo's distributed_fused_adam with optim.dtype fp32: FP32 "
           "moments, "
           "the master's low 16 bits stored beside the BF16 parameter, store_param_remainders) | bf16 (the same with "
           "optim.dtype bf16: BF16 moments, the BF16 parameters updated in place, no master); the last two need "
           "model.dtype bf16, training.framework megatron and parallel.zero_stage 1 or 2; docs/model.md",
           [](const N& n, S& s) {
             s.training.optimizer_state = as_enum(n, "training.optimizer_state", {"fp32", "fp32-remainders", "bf16"});
           }},
          {"training.attention", "name", "flash",
           "flash (fused, IO-aware: cuDNN / FlashAttention-3 on Hopper) | flash2 (FlashAttention-2: no wgmma or TMA, "
           "~35 % of Hopper's peak; the fused kernel elsewhere) | unfused (QK^T and PV as batched GEMMs, the scores, "
           "softmax and dropout through HBM, as Megatron-LM before 2023) | triton (FlashAttention in Triton, "
           "flash_attn_triton.py "
           "on Triton's pre-MLIR backend: MPT / LLM Foundry's attn_impl: triton of 2023; FlashAttention-2's work at "
           "compute.triton_attention_factor its time; no dropout)",
           [](const N& n, S& s) {
             s.training.attention = as_enum(n, "training.attention", {"flash", "flash2", "unfused", "triton"});
           }},
          {"training.attention_padding", "name", "none",
           "none | unpad (training.framework pytorch-eager with a FlashAttention kernel: flash-attn's bert_padding "
           "around "
           "a variable-length kernel, as MPT's flash path runs it: unpad_input gathers q, k and v row by row, its mask "
           "arithmetic synchronizing the host twice a call, and pad_input scatters the output back into zeros; their "
           "backwards scatter and gather; docs/model.md, \"Padding around the kernel\")",
           [](const N& n, S& s) {
             s.training.attention_padding = as_enum(n, "training.attention_padding", {"none", "unpad"});
           }},
          {"training.train_metrics", "int", "0",
           "with training.framework pytorch-eager: how many metrics the trainer updates from the logits after each "
           "micro-batch's backward, each a cross-entropy under autocast (log_softmax on the 16-bit logits with an FP32 "
           "output, nll_loss) with no gradient (Composer's _eval_train_metrics), and computes once a step, syncing "
           "each "
           "metric's two states over every rank (torchmetrics' barrier, n fills, all-gather and n copies, dispatched "
           "by "
           "the host at compute.host_op each); 2 for MPT (LanguageCrossEntropy and LanguagePerplexity, LLM Foundry's "
           "use_train_metrics default); docs/model.md, \"Training metrics\"",
           [](const N& n, S& s) {
             s.training.train_metrics = static_cast<int>(as_int(n, "training.train_metrics", 0, 16));
           }},
          {"training.loss_sync", "name", "auto",
           "what the stack does with each micro-batch's loss before its backward, on the last pipeline stage: check "
           "(Megatron-LM since 2025-04 and Megatron-Bridge: the NaN and Inf checks' two host waits and the backward's "
           "relaunch after them, 2 x compute.host_sync + compute.backward_relaunch + compute.autograd_node a node of "
           "the "
           "graph the backward walks; the reporting loss is all-reduced once a step) | check-allreduce (Megatron-LM "
           "2023-09 to 2025-04: the wait, then the "
           "reporting loss all-reduced over DP every micro-batch; the NaN check alone) | allreduce (before 2023-09: "
           "average_losses_across_data_parallel_group, no check) | none (Composer: the loss is reduced once a step) | "
           "auto (check under megatron, none under pytorch-eager); with cp > 1 the modes that all-reduce also "
           "all-reduce the loss over CP; docs/model.md, \"Per-step costs\"",
           [](const N& n, S& s) {
             s.training.loss_sync =
                 as_enum(n, "training.loss_sync", {"auto", "none", "check", "allreduce", "check-allreduce"});
           }},
          {"training.plan_revision", "name", "current",
           "which revision of the Megatron plan to build: current | 2026-12-04 (the plan as built before 2026-12-05: "
           "the hidden dropout's backward folded into the LayerNorm backwards, no bias-gradient reductions outside "
           "Transformer Engine, the optimizer step as one streaming pass with the parameter copy; for replaying real "
           "runs recorded then with validate --real-from, whose plans must match op by op); docs/model.md, "
           "\"Megatron-Core's layer, kernel by kernel\"",
           [](const N& n, S& s) {
             s.training.plan_revision = as_enum(n, "training.plan_revision", {"current", "2026-12-04"});
           }},
          {"training.fp8_attention", "bool", "false",
           "with model.dtype fp8: run the attention core in FP8 too (Transformer Engine keeps it in BF16 unless "
           "asked); "
           "refused with training.framework: pytorch-eager (SDPA runs BF16)",
           [](const N& n, S& s) { s.training.fp8_attention = as_bool(n, "training.fp8_attention"); }},
          {"training.fp8_recipe", "name", "delayed",
           "with model.dtype fp8, Transformer Engine's scaling recipe (Megatron-Core's --fp8-recipe): delayed "
           "(DelayedScaling: "
           "each cast scales by an amax history and records the new amax as it writes, so TE's norms write FP8 "
           "directly) | "
           "tensorwise (Float8CurrentScaling, 'FP8-CS': each tensor's own amax before its cast, a read pass of its "
           "own; "
           "TE's norms write BF16 with the amax, then a quantize kernel; amaxes of sequence-parallel tensors "
           "all-reduced "
           "over TP); docs/model.md",
           [](const N& n, S& s) {
             s.training.fp8_recipe = as_enum(n, "training.fp8_recipe", {"delayed", "tensorwise"});
           }},
          {"training.framework", "name", "megatron",
           "megatron (Megatron-Core / Transformer Engine: fused norms and bias-activations, BF16 weights with FP32 "
           "main "
           "grads) | pytorch-eager (plain PyTorch under torch.autocast(bfloat16): FP32 parameters cast at every "
           "linear, the residual stream, norms and loss in FP32, every elementwise op its own kernel, fused AdamW; "
           "with model.dtype fp8 the linears are Transformer Engine's te.Linear under fp8_autocast, casting input, "
           "weight and gradient to FP8 at every micro-batch; docs/model.md)",
           [](const N& n, S& s) {
             s.training.framework = as_enum(n, "training.framework", {"megatron", "pytorch-eager"});
           }},
          {"training.grad_accumulation_fusion", "bool", "true",
           "megatron: each linear layer's weight-gradient GEMM accumulates into the main gradient buffer in place "
           "(--gradient-accumulation-fusion, Megatron-LM since 2022-02); false: the GEMM writes a 16-bit gradient that "
           "a separate kernel adds into the buffer at every micro-batch, as Megatron-LM of 2021 did",
           [](const N& n, S& s) {
             s.training.grad_accumulation_fusion = as_bool(n, "training.grad_accumulation_fusion");
           }},
          {"training.grad_nan_check", "name", "auto",
           "megatron, ZeRO 0-2: before each gradient bucket's DP all-reduce or reduce-scatter, Megatron-Core's DDP "
           "takes "
           "the bucket's norm and asserts it is not NaN, a host wait in the backward (check_for_nan_in_grad, "
           "--check-for-nan-in-loss-and-grad: on by default since 2023, set by NeMo's recipes, turned off by "
           "Megatron-Bridge's performance scripts): true | false | auto (true where training.loss_sync checks the "
           "loss: "
           "the one flag governs both); docs/model.md, \"Per-step costs\"",
           [](const N& n, S& s) {
             s.training.grad_nan_check = as_enum(n, "training.grad_nan_check", {"auto", "true", "false"});
           }},
          {"training.transformer_impl", "name", "transformer-engine",
           "megatron: transformer-engine (Megatron-Core's Transformer Engine modules: vectorized fused norms and "
           "activations whose kernels also reduce the bias gradients) | local (Megatron-LM's own layer of 2021-22, "
           "--transformer-impl local: the GeLU as a TorchScript-fused tanh kernel, each bias gradient a separate sum "
           "over the tokens, and with training.attention: unfused the attention context made contiguous after its "
           "permute, forward and backward, and the query, key and value gradients concatenated into the fused QKV "
           "gradient, all through PyTorch's strided loops); docs/model.md, \"Megatron-LM's own layer\"",
           [](const N& n, S& s) {
             s.training.transformer_impl = as_enum(n, "training.transformer_impl", {"transformer-engine", "local"});
           }},
          {"training.rope_fusion", "bool", "true",
           "megatron, rotary models: Megatron-Core applies the rotary embedding to the query and key with Transformer "
           "Engine's fused kernel, one read and one write of each (Megatron-LM's --no-rope-fusion off by default; "
           "NeMo's "
           "and Megatron-Bridge's Llama configs apply_rope_fusion: true); false: apply_rotary_pos_emb's unfused "
           "elementwise chain (TransformerConfig's own default), which takes what 28.5 (forward) and 30 (backward) "
           "copies of the tensors would on an H200; "
           "docs/model.md",
           [](const N& n, S& s) { s.training.rope_fusion = as_bool(n, "training.rope_fusion"); }},
          {"training.moe_permute", "name", "unfused",
           "megatron, MoE: how the dispatcher permutes the tokens into expert order (docs/model.md, \"The router's own "
           "kernels\"): unfused (core_r0.12: a padded router's rows sorted on the device and its probabilities "
           "masked_select-ed, whose output size the host reads: one host wait; dropless, the tokens and the "
           "probabilities "
           "masked_select-ed: two) | masked-select (core_r0.10: the permutation's tokens and the unpermutation's "
           "probabilities masked_select-ed, padded or not: two) | fused (Transformer Engine's permute kernels, "
           "--moe-permute-fusion: no index bookkeeping, no wait but a dropless dispatcher's own)",
           [](const N& n, S& s) {
             s.training.moe_permute = as_enum(n, "training.moe_permute", {"unfused", "masked-select", "fused"});
           }},
          {"training.defer_embedding_wgrad", "bool", "false",
           "megatron: the output layer's weight-gradient GEMMs are deferred from each micro-batch's backward to after "
           "the last one (Megatron-Core's defer_embedding_wgrad_compute, drained by finish_embedding_wgrad_compute at "
           "the schedule's end), so on the last pipeline stage they run in the pipeline's flush; docs/model.md",
           [](const N& n, S& s) { s.training.defer_embedding_wgrad = as_bool(n, "training.defer_embedding_wgrad"); }},
          {"training.wgrad_deferral_limit", "integer", "0",
           "with defer_embedding_wgrad: how many micro-batches' output-layer weight gradients are deferred, the first "
           "ones of the step (Megatron-Core's wgrad_deferral_limit; 0: all)",
           [](const N& n, S& s) {
             s.training.wgrad_deferral_limit = as_int(n, "training.wgrad_deferral_limit", 0, 1 << 30);
           }},
          {"training.launch_blocking", "bool", "false",
           "true: the job ran with CUDA_LAUNCH_BLOCKING=1, so each op is issued only after every earlier op of its "
           "rank "
           "finished (no kernel queue, no overlap of streams) and each kernel waits for its own dispatch "
           "(compute.blocking_launch, docs/model.md)",
           [](const N& n, S& s) { s.training.launch_blocking = as_bool(n, "training.launch_blocking"); }},
          {"training.cross_entropy", "name", "unfused",
           "unfused (F.cross_entropy on logits.float(), or Megatron's vocab-parallel loss: the FP32 copy, log_softmax "
           "or its "
           "max, exp and softmax passes, and their backwards through HBM; Megatron-LM's default) | fused "
           "(pytorch-eager: one "
           "kernel each way on the 16-bit logits, FlashAttention's xentropy, MPT / LLM Foundry's loss_fn default; "
           "megatron: "
           "--cross-entropy-loss-fusion, three jit-fused passes, NeMo's and Megatron-Bridge's default); docs/model.md",
           [](const N& n, S& s) {
             s.training.cross_entropy = as_enum(n, "training.cross_entropy", {"unfused", "fused"});
           }},
          {"training.step_overhead", "time", "3ms",
           "host and framework work per iteration that the GPUs wait for (scheduling, loss and grad-norm bookkeeping, "
           "logging); docs/model.md gives the source",
           [](const N& n, S& s) {
             s.training.step_overhead_s = as_time(n, "training.step_overhead");
             s.training.step_overhead_set = true;
           }},
          {"training.duration", "duration", "24h",
           "wall-clock time of the job; with faults: the goodput is over it (s, min, h, d)",
           [](const N& n, S& s) { s.training.duration_s = as_positive_duration(n, "training.duration"); }},
      });
}

}  // namespace clustersim
