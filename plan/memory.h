// Per-rank training memory (bytes), following Korthikanti et al. 2022 for activations
// and Megatron-LM's mixed-precision layout for states:
//   weights     params_local · bytes(dtype)
//   gradients   params_local · 4            (fp32 main gradients; 2 for fp16 models)
//   optimizer   params_local · 12           (Adam: fp32 master copy, m, v; SGD: 8)
//   activations layers · s·b·h·(10 + 24/t)  per in-flight micro-batch, without SP
//               layers · s·b·h·34/t         with sequence parallelism
//               + logits s·b·V/t · (bytes(dtype) + 4)
// The 5·a·s/h score term of Korthikanti's formula is absent: attention runs as a
// fused kernel that keeps only its output and the softmax statistics.
#pragma once

#include <cstdint>
#include <string>

#include "plan/model.h"

namespace clustersim {

struct MemoryBreakdown {
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;
  double activations = 0;
  double total() const { return weights + gradients + optimizer + activations; }
  std::string describe() const;  // "weights 1.2 GiB, gradients ..."
};

struct MemoryInputs {
  int64_t tp = 1;
  int64_t micro_batch = 1;
  int64_t in_flight_micro_batches = 1;
  bool sequence_parallel = false;
  bool adam = true;
};

int64_t padded_vocab(const ModelConfig& m, int64_t tp);  // Megatron: a multiple of 128 · tp
int64_t params_per_rank(const ModelConfig& m, int64_t tp);
MemoryBreakdown training_memory(const ModelConfig& m, const MemoryInputs& in);

}  // namespace clustersim
