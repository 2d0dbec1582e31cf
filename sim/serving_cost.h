// One iteration of a serving replica, costed as the engine needs it: the attention-free
// part of the iteration's Plan (plan/serving_plan.h) run on the executor over the
// replica's GPUs and memoized per (tokens, emitting rows), plus the batch's attention
// kernels, which depend on each request's context; the whole at the clock the power cap
// leaves the iteration's kernels.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "cost_models/compute.h"
#include "cost_models/power_cap.h"
#include "plan/serving_plan.h"
#include "scenarios/scenario.h"
#include "sim/executor.h"
#include "topology/topology.h"

namespace clustersim::serve {

// A part of an iteration at burst rates, and its kernels as the power controller sees
// them: an iteration is one window, so its clock comes from all its parts together.
struct IterCost {
  double burst = 0;
  PowerMix mix;
  IterCost& operator+=(const IterCost& o) {
    burst += o.burst;
    mix += o.mix;
    return *this;
  }
  IterCost scaled(double k) const { return IterCost{burst * k, mix.scaled(k)}; }
};

// Whether a prefill's context attention runs in FP8 (inference.fp8_context_fmha). TensorRT-LLM
// runs it so for the engines trtllm-bench builds with FP8 quantization (bench/build/build.py:
// use_fp8_context_fmha when the quantization is FP8, which also sets an FP8 KV cache), and its
// builder turns it on for any paged context FMHA over an FP8 cache; it needs FP8 tensor cores.
bool fp8_context_attention(const Scenario& s, DType weights, DType kv);

// An iteration's time is its Plan's (plan/serving_plan.h): the attention-free part runs
// on the executor over the replica's GPUs, once per distinct (tokens, emitting rows);
// the attention kernels, which depend on each request's context, are costed per batch
// by the same compute model and added (every kernel of an iteration runs on one
// stream, so the sum is the plan's time — a test checks it against the whole plan).
class IterationCost {
 public:
  IterationCost(const Scenario& s, const ModelConfig& model, Topology& topo, ExecOptions opt);
  const ServingShape& shape() const { return shape_; }
  double kv_bytes_per_token(int64_t stage = 0) const;  // one GPU: its stage's layers (stage 0 is the fullest), K and V
  // One GPU's weights: the fullest stage's layers over tp, and the embedding (first
  // stage; the untied output layer sits on the last). Weight quantization (FP8, INT8, INT4)
  // covers the layers' linears only: the embedding table is a lookup and the output layer
  // is left out by the quantizers' defaults, so both keep the model's dtype.
  double weight_bytes_per_gpu() const;

  // Everything but attention, for `tokens` rows of which `emitting` reach the logits.
  IterCost dense(int64_t tokens, int64_t emitting);

  // A prefill chunk of `q` tokens appended to a context of `past` tokens, all layers.
  IterCost prefill_attention(int64_t q, int64_t past);
  // One paged decode-attention kernel per layer reading `context_tokens` tokens of KV for
  // `seqs` requests, the longest `longest` tokens.
  IterCost decode_attention(int64_t context_tokens, int64_t seqs, int64_t longest);
  // An iteration's seconds: its parts' burst time, with the clock-bound kernels at the
  // clock the power cap leaves their mix (cost_models/compute.h, power_capped_seconds).
  double seconds(const IterCost& c) const { return power_capped_seconds(c.burst, c.mix, gpu_, capped_); }

  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  IterCost attention(const IterationBatch& b) const;

  const GpuSpec& gpu_;
  Topology& topo_;
  ExecOptions opt_;
  ComputeProfile capped_;  // the scenario's compute profile, its power cap as set
  ServingShape shape_;
  double gap_ = 0;
  bool tp_symmetric_ = false;
  std::unordered_map<uint64_t, IterCost> memo_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace clustersim::serve
