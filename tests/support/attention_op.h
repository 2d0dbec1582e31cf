// Test helper: a causal self-attention op as the planner builds one.
#pragma once

#include <cstdint>

#include "plan/plan.h"

namespace clustersim::testing {

// BF16, `heads` query and key/value heads over `len` tokens: the forward's FLOPs (the
// backward's 2.5x), Q, K and V read and the output written.
inline Op causal_attention(int64_t batch, int64_t heads, int64_t len, int64_t head_dim,
                           Phase phase = Phase::Forward) {
  Op a;
  a.kind = OpKind::Attention;
  a.dtype = DType::BF16;
  a.phase = phase;
  a.batch = batch;
  a.heads = a.kv_heads = heads;
  a.q_len = a.kv_len = len;
  a.head_dim = head_dim;
  a.causal = true;
  a.flops = attention_flops(a) * (phase == Phase::Backward ? 2.5 : 1.0);
  a.bytes_read = 3 * batch * heads * len * head_dim * 2;
  a.bytes_written = batch * heads * len * head_dim * 2;
  return a;
}

}  // namespace clustersim::testing
