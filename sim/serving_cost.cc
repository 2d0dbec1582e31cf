#include "sim/serving_cost.h"

#include <utility>

#include "plan/plan.h"

namespace clustersim::serve {

bool fp8_context_attention(const Scenario& s, DType weights, DType kv) {
  const std::string& v = s.serving.fp8_context_fmha;
  if (v == "off") return false;
  const bool tensor_cores = s.cluster.node.gpu.peak_fp8 > 0;
  if (v == "on") return true;  // validated: an FP8 cache on FP8 tensor cores
  return s.serving.scheduler == "trtllm" && weights == DType::FP8 && kv == DType::FP8 && tensor_cores;
}

IterationCost::IterationCost(const Scenario& s, const ModelConfig& model, Topology& topo, ExecOptions opt)
    : gpu_(s.cluster.node.gpu), topo_(topo), opt_(std::move(opt)) {
  shape_.model = model;
  shape_.tp = s.parallel.tp;
  shape_.pp = s.parallel.pp;
  shape_.weight_dtype = s.serving.weight_dtype_for(model.dtype);
  shape_.kv_dtype = s.serving.kv_dtype_for(model.dtype);
  shape_.turbomind_decode = s.serving.decode_attention == "turbomind-v0.1";
  shape_.fp8_context_attention = fp8_context_attention(s, shape_.weight_dtype, shape_.kv_dtype);
  const std::string sampler = s.serving.sampler_for_engine();
  shape_.sampler = sampler == "trtllm"    ? ServingShape::Sampler::Trtllm
                   : sampler == "vllm-v0" ? ServingShape::Sampler::VllmV0
                   : sampler == "vllm-v1" ? ServingShape::Sampler::VllmV1
                                          : ServingShape::Sampler::None;
  // Within one iteration a replica's collectives run one at a time on its own links:
  // the analytic network is exact there.
  opt_.flow = false;
  opt_.record_link_usage = false;
  gap_ = opt_.compute.launch_overhead_s;
  // The executor runs the dense part at burst rates; the iteration's clock is applied
  // to the whole iteration (seconds()), attention included.
  capped_ = opt_.compute;
  opt_.compute.power_cap = false;
  tp_symmetric_ = s.cluster.node.gpus % shape_.tp == 0;
}

double IterationCost::kv_bytes_per_token(int64_t stage) const {
  return static_cast<double>(shape_.stage_layers(stage)) * shape_.kv_layer_bytes();
}

double IterationCost::weight_bytes_per_gpu() const {
  const ModelConfig& m = shape_.model;
  const double w = dtype_bits(shape_.weight_dtype) / 8.0;
  const double e = dtype_bits(m.dtype) / 8.0;
  const double tp = static_cast<double>(shape_.tp);
  const double table = static_cast<double>(m.vocab * m.hidden);
  if (shape_.pp == 1) {
    const double tables = std::min(table * (m.tied_embeddings ? 1 : 2), static_cast<double>(m.total_params()));
    return ((static_cast<double>(m.total_params()) - tables) * w + tables * e) / tp;
  }
  const double layers = static_cast<double>(shape_.stage_layers(0)) * static_cast<double>(m.layer_params());
  return (layers * w + table * e) / tp;
}

IterCost IterationCost::dense(int64_t tokens, int64_t emitting) {
  const uint64_t key = static_cast<uint64_t>(tokens) << 20 | static_cast<uint64_t>(emitting);
  auto it = memo_.find(key);
  if (it != memo_.end()) {
    ++hits_;
    return it->second;
  }
  ++misses_;
  IterationBatch b;
  b.tokens = tokens;
  b.emitting = emitting;
  const Plan plan = build_iteration_plan(shape_, b, false, 0, tp_symmetric_);
  IterCost c;
  c.burst = execute_plan(plan, topo_, opt_).makespan.seconds();
  // One program per pipeline stage, run one after another within the iteration: their
  // kernels together are the window (stages alike in their mix settle at one clock, and
  // each stretches its own clock-bound time), as the attention kernels of all layers are.
  for (const Program& prog : plan.programs)
    for (const Op& op : prog.ops)
      c.mix.add(op, SimTime::from_seconds(compute_seconds(op, gpu_, opt_.compute)).seconds(), gap_, gpu_, capped_);
  memo_.emplace(key, c);
  return c;
}

IterCost IterationCost::prefill_attention(int64_t q, int64_t past) {
  IterationBatch b;
  b.prefill.push_back({q, past});
  return attention(b);
}

IterCost IterationCost::decode_attention(int64_t context_tokens, int64_t seqs, int64_t longest) {
  IterationBatch b;
  b.decode_context = context_tokens;
  b.decode_seqs = seqs;
  b.decode_max_context = longest;
  return attention(b);
}

IterCost IterationCost::attention(const IterationBatch& b) const {
  IterCost c;
  for (const Op& op : iteration_attention_ops(shape_, b)) {
    const double k = SimTime::from_seconds(compute_seconds(op, gpu_, opt_.compute)).seconds();
    if (k > 0) c.burst += k + SimTime::from_seconds(gap_).seconds();
    c.mix.add(op, k, gap_, gpu_, capped_);
  }
  return c.scaled(static_cast<double>(shape_.model.layers));
}

}  // namespace clustersim::serve
