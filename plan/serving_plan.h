// One serving iteration of one replica as a Plan: the batch's prefill chunks and decode
// tokens run through every layer of every pipeline stage — fused add+norm, QKV, rotary,
// attention, output projection, TP all-reduce, add+norm, MLP in, activation, MLP out,
// TP all-reduce — then the final norm, the logits GEMM over the rows that emit a token
// and the gather of the vocabulary shards; stage s receives the batch's activations
// from stage s − 1 (each GPU its 1/tp share) before its first layer.
//
// Every kernel of a replica runs on one stream, one after another, as in vLLM: the
// iteration's time is the sum of its ops. The serving engine relies on that: it runs the
// attention-free part (which depends only on the batch's token and emitting-row counts)
// on the executor once per distinct (tokens, emitting) and adds the attention kernels,
// costed by the same model, per batch. A test checks that sum against the whole plan.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/plan.h"
#include "scenarios/model.h"

namespace clustersim {

struct ServingShape {
  ModelConfig model;
  int64_t tp = 1, pp = 1;
  DType weight_dtype = DType::BF16;  // fp8 / int8: W8A8 GEMMs; int4: weight-only (bf16 math)
  DType kv_dtype = DType::BF16;
  // inference.decode_attention turbomind-v0.1: decode attention on CUDA cores, TurboMind
  // v0.1.0a1's kernel and grid (MemAccess::CudaCoreDecode); false: a stream of the K/V.
  bool turbomind_decode = false;
  // inference.fp8_context_fmha: a prefill's context attention runs in FP8 (TensorRT-LLM's
  // FP8 context FMHA: FP8 queries, keys and values from an FP8 cache, FP8 output for the
  // FP8 projection GEMM after it).
  bool fp8_context_attention = false;
  // The engine's work on each emitting row of the whole vocabulary after the output layer
  // (inference.sampler; docs/model.md, "Sampling on the logits"): none, TensorRT-LLM's
  // runtime (FP32 logits, its decoder's greedy layers), or vLLM's sampler, V0 or V1.
  enum class Sampler { None, Trtllm, VllmV0, VllmV1 };
  Sampler sampler = Sampler::None;

  int64_t stage_layers(int64_t stage) const;  // the first layers % pp stages take one more
  int64_t kv_heads_local() const;             // at least one KV head per GPU (replicated below tp)
  double kv_layer_bytes() const;              // K and V of one token, one layer, one GPU
  DType gemm_dtype() const;
};

struct PrefillChunk {
  int64_t tokens = 0;
  int64_t past = 0;  // context already cached before the chunk
};

struct IterationBatch {
  int64_t tokens = 0;    // rows through every GEMM: prefill chunks + decode tokens
  int64_t emitting = 0;  // rows through the logits
  std::vector<PrefillChunk> prefill;
  int64_t decode_context = 0;  // KV tokens read by the decode-attention kernel (0: none)
  int64_t decode_seqs = 0;         // decoding requests (0: as if one)
  int64_t decode_max_context = 0;  // the longest one's context (0: decode_context / decode_seqs)
};

// Ranks stage·tp + t on GPUs first_gpu + rank; a TP group per stage, a PP group per t.
// `with_attention` false leaves the attention kernels out (the engine's memoized part).
// `tp_symmetric`: every TP group sits inside one node on identical links (the caller
// knows the topology), so each stage's TP ranks mirror its first and only those run.
Plan build_iteration_plan(const ServingShape& shape, const IterationBatch& batch, bool with_attention,
                          int32_t first_gpu = 0, bool tp_symmetric = false);

// The attention kernels one layer runs for the batch, as the plan holds them.
std::vector<Op> iteration_attention_ops(const ServingShape& shape, const IterationBatch& batch);

}  // namespace clustersim
