// Per-rank training memory (bytes), following Korthikanti et al. 2022 for activations
// and Megatron-LM's mixed-precision layout for states. For the layers a pipeline stage
// holds:
//   weights     params_local · bytes(dtype)        (÷ dp·cp under ZeRO-3)
//   gradients   params_local · 4                    (fp32 main gradients; 2 for fp16;
//                                                    ÷ dp·cp under ZeRO-2 and -3 where
//                                                    they do not accumulate unsharded)
//   optimizer   params_local · 12                   (Adam: fp32 master, m, v; SGD 8;
//                                                    training.optimizer_state: 10, 4;
//                                                    ÷ dp·cp under ZeRO-1, -2, -3)
//   activations per layer and in-flight micro-batch, s' = s/cp tokens (GPT layer):
//               s'·b·h·(10 + 24/t)   without SP       s'·b·h·34/t   with SP
//               2·s'·b·h (÷t with SP) under full recompute, plus one layer's worth
//               + logits s'·b·V/t · (bytes(dtype) + 4) on the last stage
//   p2p buffers 2 · s'·b·h · bytes(dtype) per pipeline neighbour
//   reserved    what the stack keeps from the model: CUDA context and library
//               workspaces, NCCL's buffers per communicator, allocator fragmentation
// Expert weights shard over EP (experts/ep local) and their ZeRO sharding is over the
// expert-data-parallel group (dp·cp/ep). Fused (flash) attention keeps only its output
// and softmax statistics, so the score term of Korthikanti's formula is absent and
// selective recompute changes nothing; unfused attention keeps the softmax output
// (2·a·s'²·b/t bytes) and, with dropout, its mask and output (3·a·s'²·b/t more): the
// 5·a·s/h term, which selective recompute removes. Under Transformer Engine's FP8 the
// weights keep a BF16 copy and a cached FP8 copy (3 bytes a parameter) and the linear
// layers' saved inputs are FP8. The per-layer activations are counted tensor by tensor
// for the model's shapes (GQA, SwiGLU, dropout or not); a GPT layer gives Korthikanti's 34.
#pragma once

#include <cstdint>
#include <string>

#include "scenarios/model.h"

namespace clustersim {

struct MemoryBreakdown {
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;
  double activations = 0;
  double buffers = 0;   // pipeline p2p buffers, ZeRO-3 gathered layers
  double reserved = 0;  // CUDA context, NCCL buffers, allocator fragmentation
  double total() const { return weights + gradients + optimizer + activations + buffers + reserved; }
  std::string describe() const;  // "weights 1.2 GiB, gradients ..."
};

struct MemoryInputs {
  int64_t tp = 1, cp = 1, dp = 1, ep = 1, pp = 1;
  int64_t etp = 0;  // the experts' TP degree (0: tp)
  int64_t expert_tp() const { return etp > 0 ? etp : tp; }
  int64_t zero_stage = 0;
  bool zero3_params_held = false;  // ZeRO 3 keeps gathered parameters from forward to backward (not re-gathered)
  // The gradients accumulate unsharded until the step's one reduce-scatter: ZeRO 3 syncing
  // once a step over several micro-batches, and ZeRO 2 over several (its distributed
  // optimizers, Megatron's and Apex's DistributedFusedAdam, reduce-scatter in the last
  // micro-batch only); sharded where the reduce-scatter follows each backward.
  bool grads_unsharded = false;
  double zero3_gather_bytes = 2;   // ZeRO 3: bytes of a gathered parameter
  double grad_bytes = 0;           // the main gradient's bytes a parameter (0: 2 for fp16 models, else 4)
  int64_t micro_batch = 1;
  double in_flight_layers = 0;  // layer-activations held at the peak (layers × micro-batches)
  double in_flight_kept_layers = 0;  // full recompute: those of them not recomputed, holding all they keep
  bool sequence_parallel = false;
  bool full_recompute = false;
  bool op_recompute = false;  // TorchTitan's selective op policy: the matmuls' and attention's outputs kept
  bool adam = true;
  double master_bytes = 4, moment_bytes = 4;  // training.optimizer_state's, a parameter
  bool fp8 = false;               // Transformer Engine FP8 linear layers
  bool fp8_params = false;  // parallel.fp8_param_gather: FP8 weights (and their transpose), no 16-bit copy
  bool unfused_scores = false;    // unfused attention whose scores are kept for the backward
  bool mla_up_recompute = false;  // MLA's query, key and value rebuilt in the backward, not kept
  int64_t mtp_layers = 0;         // with output: the multi-token prediction modules after it
  bool fused_cross_entropy = false;  // the loss keeps only the 16-bit logits (no FP32 softmax)
  int64_t first_layer = 0, end_layer = -1;  // the stage's layers; end -1: all
  bool embedding = true;                    // the stage holds the token embedding
  bool output = true;                       // the stage holds the output layer and loss
};

int64_t padded_vocab(const ModelConfig& m, int64_t tp);  // Megatron: a multiple of 128 · tp
// The vocabulary tables and the final norm a pipeline stage holds, a TP rank's share: the
// token embedding (and a learned position table) on the first stage; on the last, the
// output layer (its own weights when untied; tied and pipelined, a copy of the embedding)
// and the final norm; with multi-token prediction away from the first stage, the copy of
// the embedding its modules read (Megatron-Core's GPTModel builds one where mtp_process;
// tied, the output layer's copy is that one).
double vocab_params(const ModelConfig& m, int64_t tp, bool first, bool last, int64_t mtp_layers);

struct StageParams {
  double dense = 0;   // local parameters sharded over DP (attention, dense MLP, norms, embeddings)
  double expert = 0;  // local expert parameters (sharded over the expert-DP group)
};
StageParams stage_params(const ModelConfig& m, const MemoryInputs& in);
int64_t params_per_rank(const ModelConfig& m, int64_t tp);  // the whole model at this TP, no PP/EP
MemoryBreakdown training_memory(const ModelConfig& m, const MemoryInputs& in);
// The default reserve (cluster.memory_reserve: auto): 0.75 GiB for the CUDA context and
// library workspaces, 0.25 GiB of NCCL buffers for each communicator kind the layout
// uses, and 3 % of the rest for the caching allocator's fragmentation.
double default_memory_reserve(const MemoryBreakdown& model_memory, int communicators);

}  // namespace clustersim
