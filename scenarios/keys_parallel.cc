// Scenario keys of the layout: TP, PP, CP, EP, DP, ZeRO and the stacks' overlap settings (scenarios/key_table.h).
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
void add_parallel_keys(KeyList& t) {
  using S = Scenario;
  using N = YNode;
  t.insert(
      t.end(),
      {
          {"parallel", "mapping", "", "the parallel layout", nullptr},
          {"parallel.dp", "integer", "GPUs/(tp·pp·cp)", "data-parallel degree (auto: GPUs / (tp·pp·cp))",
           [](const N& n, S& s) {
             s.parallel.dp = n.kind == YNode::Kind::Scalar && n.scalar == "auto" ? 0 : as_degree(n, "parallel.dp");
           }},
          {"parallel.tp", "integer", "1", "tensor-parallel degree",
           [](const N& n, S& s) { s.parallel.tp = as_degree(n, "parallel.tp"); }},
          {"parallel.pp", "integer", "1", "pipeline-parallel degree",
           [](const N& n, S& s) { s.parallel.pp = as_degree(n, "parallel.pp"); }},
          {"parallel.cp", "integer", "1", "context-parallel degree",
           [](const N& n, S& s) { s.parallel.cp = as_degree(n, "parallel.cp"); }},
          {"parallel.cp_comm", "name", "p2p",
           "how context parallelism exchanges K and V (Megatron-Core's --cp-comm-type): p2p (Transformer Engine's "
           "ring: "
           "cp attention blocks, each beside the send of the next K/V block) | all-gather (K and V all-gathered over "
           "the "
           "CP group before one attention over the whole sequence, and the K/V gradients reduce-scattered after the "
           "backward; the all-gather in the attention's path, as Llama 3's training ran it); docs/model.md",
           [](const N& n, S& s) {
             s.parallel.cp_comm = as_enum(n, "parallel.cp_comm", {"p2p", "all-gather"});
           }},
          {"parallel.ep", "integer", "1",
           "expert-parallel degree: experts carved out of the DP x CP ranks in Megatron-Core's order (CP innermost), "
           "so ep "
           "divides dp·cp; the experts' own TP is parallel.tp",
           [](const N& n, S& s) { s.parallel.ep = as_degree(n, "parallel.ep"); }},
          {"parallel.expert_tp", "integer", "parallel.tp",
           "the experts' TP degree (Megatron-Core's --expert-tensor-parallel-size): tp (each expert split over the TP "
           "group as the dense layers are; the dispatcher all-gathers over TP what its ranks received) or 1 (whole "
           "experts on every rank, EP carved out of TP x DP x CP, no gather; needs sequence_parallel when tp > 1)",
           [](const N& n, S& s) { s.parallel.expert_tp = as_degree(n, "parallel.expert_tp"); }},
          {"parallel.moe_dispatcher", "name", "alltoall",
           "a mixture of experts' token dispatcher (Megatron-Core's --moe-token-dispatcher-type): alltoall (the rank's "
           "own "
           "tokens' rows sent to their experts' ranks; NeMo's and Megatron-Bridge's MoE recipes) | allgather (every EP "
           "rank's tokens all-gathered, the local experts' rows permuted out after the host reads their counts, the "
           "output reduce-scattered back; Megatron-Core's own default through core_r0.12; needs expert_tp 1 or tp 1); "
           "docs/model.md",
           [](const N& n, S& s) {
             s.parallel.moe_dispatcher = as_enum(n, "parallel.moe_dispatcher", {"alltoall", "allgather"});
           }},
          {"parallel.moe_shared_expert_overlap", "bool", "false",
           "a mixture of experts' shared experts run beside the token dispatcher's all-to-alls and TP collectives "
           "(Megatron-Core's --moe-shared-expert-overlap; NeMo's DeepSeek configs set it); false: after the routed "
           "experts' combine, on the same stream (Megatron-Core's MoELayer: output + shared_experts(input)); "
           "docs/model.md",
           [](const N& n, S& s) {
             s.parallel.moe_shared_expert_overlap = as_bool(n, "parallel.moe_shared_expert_overlap");
           }},
          {"parallel.sequence_parallel", "bool", "false",
           "Megatron SP: all-gather / reduce-scatter instead of all-reduce",
           [](const N& n, S& s) { s.parallel.sequence_parallel = as_bool(n, "parallel.sequence_parallel"); }},
          {"parallel.zero_stage", "integer", "0", "0..3 (3 = FSDP-like)",
           [](const N& n, S& s) {
             s.parallel.zero_stage = as_int(n, "parallel.zero_stage", 0);
             if (s.parallel.zero_stage > 3)
               throw InputError(n.mark, "parallel.zero_stage must be 0, 1, 2 or 3, got " + n.scalar);
           }},
          {"parallel.schedule", "name", "1f1b", "gpipe | 1f1b | interleaved-1f1b",
           [](const N& n, S& s) {
             s.parallel.schedule = as_enum(n, "parallel.schedule", {"gpipe", "1f1b", "interleaved-1f1b"});
           }},
          {"parallel.virtual_stages", "integer", "1", "model chunks per pipeline rank",
           [](const N& n, S& s) { s.parallel.virtual_stages = as_degree(n, "parallel.virtual_stages"); }},
          {"parallel.first_stage_layers", "integer", "an even split",
           "layers on the first pipeline stage, where it holds fewer or more than the rest (Megatron-Core's "
           "--decoder-first-pipeline-num-layers, NeMo's num_layers_in_first_pipeline_stage); the stages not given "
           "share "
           "the remaining layers evenly, and each stage's layers split evenly over its virtual_stages chunks",
           [](const N& n, S& s) {
             s.parallel.first_stage_layers = as_int(n, "parallel.first_stage_layers", 0, kMaxModelDim);
           }},
          {"parallel.last_stage_layers", "integer", "an even split",
           "layers on the last pipeline stage (--decoder-last-pipeline-num-layers; DeepSeek-V3's recipes leave it "
           "short "
           "for the output layer and the multi-token prediction module)",
           [](const N& n, S& s) {
             s.parallel.last_stage_layers = as_int(n, "parallel.last_stage_layers", 0, kMaxModelDim);
           }},
          {"parallel.microbatch_group", "integer", "pp",
           "interleaved-1f1b: micro-batches each model chunk runs back to back before the next chunk (Megatron-Core's "
           "--microbatch-group-size-per-virtual-pipeline-stage, from pp to the micro-batches per pipeline; pp is the "
           "depth-first schedule; more holds more activations and leaves the pipeline sends more time)",
           [](const N& n, S& s) { s.parallel.microbatch_group = as_degree(n, "parallel.microbatch_group"); }},
          {"parallel.micro_batch", "integer", "1", "sequences per micro-batch",
           [](const N& n, S& s) { s.parallel.micro_batch = as_degree(n, "parallel.micro_batch"); }},
          {"parallel.bucket_size", "integer", "40000000",
           "parameters per DP gradient bucket (reduced as soon as its layers' gradients are final)",
           [](const N& n, S& s) { s.parallel.bucket_params = as_int(n, "parallel.bucket_size", 1); }},
          {"parallel.tp_comm_overlap", "bool", "false",
           "Megatron-Core --tp-comm-overlap: with sequence_parallel, each TP all-gather / reduce-scatter is split into "
           "tp "
           "chunks exchanged around the ring while the GEMM it feeds (or drains) runs chunk by chunk",
           [](const N& n, S& s) { s.parallel.tp_comm_overlap = as_bool(n, "parallel.tp_comm_overlap"); }},
          {"parallel.tp_overlap_reduce_scatter", "name", "pipeline",
           "with tp_comm_overlap, how Transformer Engine's userbuffers overlap the forward's reduce-scatters "
           "(proj_fprop, "
           "fc2_fprop): pipeline (a reduce-scatter kernel of num_sm SMs beside the GEMM's chunks, TE's default and "
           "NeMo's "
           "BF16 configurations) | ring-exchange (the chunks' partial sums sent over the ring by copy engines and "
           "added at "
           "the end, the GEMM leaving one SM: Megatron-Bridge's FP8 configurations); docs/model.md",
           [](const N& n, S& s) {
             s.parallel.tp_overlap_reduce_scatter =
                 as_enum(n, "parallel.tp_overlap_reduce_scatter", {"pipeline", "ring-exchange"});
           }},
          {"parallel.tp_overlap_proj_sms", "integer", "16",
           "with tp_comm_overlap and pipelined reduce-scatters: the SMs the forward projection's reduce-scatter kernel "
           "holds beside its GEMM's chunks (TE userbuffers' num_sm for proj_fprop; TE's default 16, NeMo's Llama 3.1 "
           "configurations 24); docs/model.md",
           [](const N& n, S& s) {
             s.parallel.tp_overlap_proj_sms = as_int(n, "parallel.tp_overlap_proj_sms", 1, 1024);
           }},
          {"parallel.tp_overlap_fc2_sms", "integer", "16",
           "the same for FC2's reduce-scatter (fc2_fprop: TE's default 16, NeMo's Llama 3.1 70B 16, 405B 8)",
           [](const N& n, S& s) { s.parallel.tp_overlap_fc2_sms = as_int(n, "parallel.tp_overlap_fc2_sms", 1, 1024); }},
          {"parallel.tp_overlap_sm_margin", "bool", "false",
           "with tp_comm_overlap: the GEMMs beside those kernels are planned for the SMs they leave (TE's "
           "set_sm_margin; "
           "off in TE's defaults, on in NeMo's and Megatron-Bridge's configurations); the slowdown measured either way "
           "is in docs/model.md",
           [](const N& n, S& s) { s.parallel.tp_overlap_sm_margin = as_bool(n, "parallel.tp_overlap_sm_margin"); }},
          {"parallel.tp_async_grad_reduce", "bool", "true",
           "the backward of a column-parallel layer (QKV, MLP up) reduces its input gradient (all-reduce, or "
           "reduce-scatter under SP) beside its weight-gradient GEMM and all-gathers the weight gradient's input "
           "beside "
           "its data-gradient GEMM (Megatron-LM's LinearWithGradAccumulationAndAsyncCommunication since 2021-09, "
           "Transformer Engine's layers); false: Megatron-LM before, whose reduction ran once both GEMMs were done "
           "(the "
           "backward of copy_to_tensor_model_parallel_region); docs/model.md",
           [](const N& n, S& s) { s.parallel.tp_async_grad_reduce = as_bool(n, "parallel.tp_async_grad_reduce"); }},
          {"parallel.tp_overlap_qkv_dgrad_sms", "integer", "16",
           "with tp_comm_overlap: the SMs of the backward's bulk all-gather of the QKV input (for its weight gradient) "
           "beside the QKV data-gradient GEMM (TE userbuffers' num_sm for qkv_dgrad, no margin; TE's default 16, "
           "NeMo's "
           "and Megatron-Bridge's configurations 2-8); docs/model.md",
           [](const N& n, S& s) {
             s.parallel.tp_overlap_qkv_dgrad_sms = as_int(n, "parallel.tp_overlap_qkv_dgrad_sms", 1, 1024);
           }},
          {"parallel.tp_overlap_fc1_dgrad_sms", "integer", "16",
           "the same for the MLP's first layer: its input's bulk all-gather beside its data-gradient GEMM (fc1_dgrad: "
           "TE's "
           "default 16, the configurations 2)",
           [](const N& n, S& s) {
             s.parallel.tp_overlap_fc1_dgrad_sms = as_int(n, "parallel.tp_overlap_fc1_dgrad_sms", 1, 1024);
           }},
          {"parallel.tp_overlap_qkv_wgrad_sms", "integer", "16",
           "with tp_comm_overlap: the SMs of the backward's bulk reduce-scatter of the QKV input gradient beside the "
           "QKV "
           "weight-gradient GEMM (TE userbuffers' num_sm for qkv_wgrad, no margin; TE's default 16, NeMo's and "
           "Megatron-Bridge's configurations 24-32)",
           [](const N& n, S& s) {
             s.parallel.tp_overlap_qkv_wgrad_sms = as_int(n, "parallel.tp_overlap_qkv_wgrad_sms", 1, 1024);
           }},
          {"parallel.tp_overlap_fc1_wgrad_sms", "integer", "16",
           "the same for the MLP's first layer's input gradient beside its weight-gradient GEMM (fc1_wgrad: TE's "
           "default "
           "16, the configurations 2-8)",
           [](const N& n, S& s) {
             s.parallel.tp_overlap_fc1_wgrad_sms = as_int(n, "parallel.tp_overlap_fc1_wgrad_sms", 1, 1024);
           }},
          {"parallel.overlap_grad_reduce", "bool", "true",
           "reduce each gradient bucket as soon as its layers' gradients are final (--overlap-grad-reduce); false: all "
           "buckets after the backward",
           [](const N& n, S& s) { s.parallel.overlap_grad_reduce = as_bool(n, "parallel.overlap_grad_reduce"); }},
          {"parallel.overlap_p2p_comm", "name", "auto",
           "pipeline sends and receives: true (posted ahead, overlapped with the forward and backward chunks: "
           "Megatron's interleaved schedule, --overlap-p2p-communication, the default since 2023-10) | false (each "
           "send and receive blocks the compute stream until done, as Megatron's non-interleaved 1F1B always does and "
           "its interleaved schedule did before 2023-05) | auto (true for interleaved-1f1b, else false)",
           [](const N& n, S& s) {
             s.parallel.overlap_p2p_comm = as_enum(n, "parallel.overlap_p2p_comm", {"auto", "true", "false"});
           }},
          {"parallel.batch_p2p_sync", "name", "auto",
           "with blocking pipeline sends and receives (parallel.overlap_p2p_comm false), Megatron ends each batched "
           "send and receive with torch.cuda.synchronize() (--batch-p2p-sync, on by default; unconditional in the "
           "2021-22 code): the host waits for every stream of the device, DP bucket reductions still running "
           "included, and the next chunk's kernels, a backward's after compute.backward_relaunch, start from an empty "
           "queue: true | false | auto (true under training.framework megatron with blocking p2p); docs/model.md",
           [](const N& n, S& s) {
             s.parallel.batch_p2p_sync = as_enum(n, "parallel.batch_p2p_sync", {"auto", "true", "false"});
           }},
          {"parallel.pp_scatter_gather", "bool", "true",
           "without sequence parallelism, each TP rank sends its 1/tp slice of a pipeline activation or gradient and "
           "the "
           "receiving stage all-gathers the slices over its TP group (Megatron's scatter-gather optimization, on by "
           "default since 2021-02: Narayanan et al. 2021, Section 4.1); false: every TP rank sends the whole tensor",
           [](const N& n, S& s) { s.parallel.pp_scatter_gather = as_bool(n, "parallel.pp_scatter_gather"); }},
          {"parallel.overlap_param_gather", "bool", "true",
           "ZeRO 1/2 (distributed optimizer): all-gather each bucket's updated parameters ahead of its layers in the "
           "next "
           "forward (--overlap-param-gather); false: after the optimizer step",
           [](const N& n, S& s) { s.parallel.overlap_param_gather = as_bool(n, "parallel.overlap_param_gather"); }},
          {"parallel.fp8_param_gather", "bool", "false",
           "with model.dtype fp8 under training.framework megatron and zero_stage >= 1: the linear layers' weights are "
           "FP8 tensors (Megatron-Core's --fp8-param-gather, TE's fp8_model_init): the optimizer casts its FP32 shard "
           "to FP8, the DP all-gather moves 1 byte a weight, no BF16 copy is kept (ZeRO 3 gathers FP8 unless "
           "parallel.fsdp_param_dtype says otherwise); docs/model.md",
           [](const N& n, S& s) { s.parallel.fp8_param_gather = as_bool(n, "parallel.fp8_param_gather"); }},
          {"parallel.zero3_param_gather", "name", "micro-batch",
           "ZeRO 3 / FSDP: micro-batch (each layer's parameters all-gathered before its forward and again before its "
           "backward, every micro-batch) | forward (before each forward only, kept through that micro-batch's "
           "backward: "
           "FSDP SHARD_GRAD_OP, reshard_after_forward off) | step (gathered in the first micro-batch's forward and "
           "kept unsharded until the "
           "step ends: FSDP with reshard_after_forward and reshard_after_backward off, as pipeline schedules run it)",
           [](const N& n, S& s) {
             s.parallel.zero3_param_gather =
                 as_enum(n, "parallel.zero3_param_gather", {"micro-batch", "forward", "step"});
           }},
          {"parallel.zero3_backward_prefetch", "name", "pre",
           "ZeRO 3 / FSDP, gathering before each backward: when the backward's all-gather of the next layer down is "
           "issued on the DP communicator's stream: pre (from this layer's pre-backward hook: PyTorch FSDP's "
           "BackwardPrefetch.BACKWARD_PRE default, Megatron-FSDP's prefetch) | post (from its post-backward hook: "
           "BACKWARD_POST, Composer's default) | none (when the layer below's backward begins, behind this layer's "
           "reduce-scatter). The hooks run on the host ahead of the GPU, so pre and post put the gather ahead of this "
           "layer's reduce-scatter, beside its kernels, alike; docs/model.md",
           [](const N& n, S& s) {
             s.parallel.zero3_backward_prefetch =
                 as_enum(n, "parallel.zero3_backward_prefetch", {"pre", "post", "none"});
           }},
          {"parallel.fsdp_param_dtype", "name", "auto",
           "ZeRO 3 / FSDP: the dtype parameters are all-gathered and computed in: auto (megatron: the model dtype; "
           "pytorch-eager: fp32, FSDP without a mixed-precision policy) | fp32 | bf16 | fp16 (FSDP MixedPrecision "
           "param_dtype: the linear layers then need no autocast weight casts)",
           [](const N& n, S& s) {
             s.parallel.fsdp_param_dtype = as_enum(n, "parallel.fsdp_param_dtype", {"auto", "fp32", "bf16", "fp16"});
           }},
          {"parallel.fsdp_reduce_dtype", "name", "auto",
           "ZeRO 3 / FSDP: the dtype gradients are reduce-scattered in: auto (fp32, or fp16 for fp16 models) | fp32 | "
           "bf16 | fp16 (FSDP MixedPrecision reduce_dtype)",
           [](const N& n, S& s) {
             s.parallel.fsdp_reduce_dtype = as_enum(n, "parallel.fsdp_reduce_dtype", {"auto", "fp32", "bf16", "fp16"});
           }},
          {"parallel.fsdp_version", "integer", "1",
           "ZeRO 3 under training.framework pytorch-eager: 1 (FullyShardedDataParallel: each layer's flat parameter "
           "gathered into its unsharded buffer, the layers' tensors views of it) | 2 (fully_shard, per-parameter "
           "sharding: after each all-gather the compute stream copies the gathered bytes out into every "
           "parameter's own tensor, split_with_sizes_copy; TorchTitan's and torchtune's); docs/model.md",
           [](const N& n, S& s) { s.parallel.fsdp_version = as_int(n, "parallel.fsdp_version", 1, 2); }},
          {"parallel.grad_reduce_dtype", "name", "auto",
           "ZeRO 0-2 under training.framework megatron: the dtype of the main-gradient buffer the micro-batches "
           "accumulate into and the DP all-reduce / reduce-scatter moves: auto (fp32 for bf16 and fp8 models, as "
           "Megatron sets accumulate_allreduce_grads_in_fp32 for bf16; the model's type for fp16) | fp32 | bf16 "
           "(Megatron-Core grad_reduce_in_fp32 False, NeMo's grad_sync_dtype bf16: 2 bytes a parameter, copied to "
           "FP32 before the optimizer step) | fp16; ZeRO 3 reduces in parallel.fsdp_reduce_dtype",
           [](const N& n, S& s) {
             s.parallel.grad_reduce_dtype = as_enum(n, "parallel.grad_reduce_dtype", {"auto", "fp32", "bf16", "fp16"});
           }},
          {"parallel.zero3_grad_sync", "name", "micro-batch",
           "ZeRO 3 / FSDP: micro-batch (each layer's gradients reduce-scattered in every micro-batch's backward) | "
           "step "
           "(accumulated unsharded and reduce-scattered in the last micro-batch's backward: FSDP's "
           "set_requires_gradient_sync(False) / no_sync for all but the last)",
           [](const N& n, S& s) {
             s.parallel.zero3_grad_sync = as_enum(n, "parallel.zero3_grad_sync", {"micro-batch", "step"});
           }},
          {"parallel.placement", "order", "tp-cp-ep-dp-pp",
           "rank order, innermost first (a permutation of tp, cp, ep, dp, pp)",
           [](const N& n, S& s) {
             const std::string& v = scalar(n, "parallel.placement", "an order such as tp-cp-ep-dp-pp");
             std::vector<std::string> parts;
             size_t start = 0;
             for (size_t i = 0; i <= v.size(); ++i)
               if (i == v.size() || v[i] == '-') {
                 parts.push_back(v.substr(start, i - start));
                 start = i + 1;
               }
             std::vector<std::string> sorted = parts;
             std::sort(sorted.begin(), sorted.end());
             if (sorted != std::vector<std::string>{"cp", "dp", "ep", "pp", "tp"})
               throw InputError(n.mark, "parallel.placement '" + v +
                                            "' must name each of tp, cp, ep, dp, pp once, e.g. tp-cp-ep-dp-pp");
             s.parallel.placement = v;
           }},
      });
}

}  // namespace clustersim
