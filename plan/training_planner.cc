#include "plan/training_planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <tuple>

namespace clustersim {
namespace {

[[noreturn]] void fail(const Scenario& s, const std::string& key, const std::string& msg) {
  throw InputError(s.mark(key), msg);
}

std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

std::pair<int64_t, int64_t> virtual_stage_layers(int64_t layers, int64_t n, int64_t vs) {
  const int64_t base = layers / n, extra = layers % n;
  return {vs * base + std::min(vs, extra), base + (vs < extra ? 1 : 0)};
}


TrainingLayout check_training_layout(const Scenario& s) {
  const ParallelConfig& p = s.parallel;
  const ModelConfig& m = s.model;
  if (s.inference)
    fail(s, "inference", "inference scenarios are not modelled yet; remove the inference block to simulate training");
  TrainingLayout l;
  l.tp = p.tp;
  l.pp = p.pp;
  l.cp = p.cp;
  l.ep = p.ep;
  l.virtual_stages = p.virtual_stages;
  l.micro_batch = p.micro_batch;
  l.zero_stage = p.zero_stage;
  l.bucket_params = p.bucket_params;
  l.schedule = p.schedule;
  l.recompute = s.training.recompute;
  l.sequence_parallel = p.sequence_parallel && p.tp > 1;
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
  if (m.moe.experts > 0 && m.moe.expert_ffn_hidden % p.tp != 0)
    fail(s, "parallel.tp",
         "tp = " + str(p.tp) + " does not divide model.moe.expert_ffn_hidden = " + str(m.moe.expert_ffn_hidden));
  if (m.layers < p.pp * p.virtual_stages)
    fail(s, p.virtual_stages > 1 ? "parallel.virtual_stages" : "parallel.pp",
         "pp·virtual_stages = " + str(p.pp * p.virtual_stages) + " is more than model.layers = " + str(m.layers) +
             ": every model chunk needs a layer");
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
    if (l.dp % p.ep != 0)
      fail(s, "parallel.ep",
           "ep = " + str(p.ep) + " must divide dp = " + str(l.dp) + " (experts are carved out of data parallelism)");
  }
  if (m.moe.experts > 0 && (m.moe.top_k < 1 || m.moe.top_k > m.moe.experts || m.moe.expert_ffn_hidden < 1))
    fail(s, "model.moe", "a mixture of experts needs 1 <= top_k <= experts and expert_ffn_hidden > 0");
  l.global_batch = s.training.global_batch > 0 ? s.training.global_batch : l.dp * l.micro_batch * (p.pp > 1 ? p.pp : 1);
  if (l.global_batch % (l.dp * l.micro_batch) != 0)
    fail(s, "training.global_batch",
         "training.global_batch = " + str(l.global_batch) +
             " is not a multiple of dp·micro_batch = " + str(l.dp * l.micro_batch));
  l.micro_batches = l.global_batch / (l.dp * l.micro_batch);
  if (p.schedule == "interleaved-1f1b" && p.pp > 1 && l.micro_batches % p.pp != 0)
    fail(s, "training.global_batch",
         "interleaved-1f1b needs the " + str(l.micro_batches) +
             " micro-batches per pipeline to be a multiple of pp = " + str(p.pp));
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
    e_ = dtype_bits(m.dtype) / 8;
    t_ = l.tp;
    tokens_ = l.micro_batch * m.seq_len / l.cp;
    seq_tokens_ = l.sequence_parallel ? tokens_ / t_ : tokens_;
    vocab_local_ = padded_vocab(m, t_) / t_;
    mlp_in_ = m.mlp_matrices() == 3 ? 2 * m.ffn_hidden / t_ : m.ffn_hidden / t_;
    qkv_ = (m.heads + 2 * m.kv_heads) * m.head_dim() / t_;

    grad_dtype_ = m.dtype == DType::FP16 ? DType::FP16 : DType::FP32;  // fp32 main grads for bf16 (Megatron)
  }

  void build() {
    const auto order = pipeline_schedule(l_.schedule, l_.pp, l_.virtual_stages, l_.micro_batches, stage_);
    last_mb_.assign(static_cast<size_t>(l_.virtual_stages), -1);
    for (const PipelineBlock& b : order)
      last_mb_[static_cast<size_t>(b.chunk)] = std::max(last_mb_[static_cast<size_t>(b.chunk)], b.micro_batch);
    for (const PipelineBlock& b : order) {
      mb_ = static_cast<int32_t>(b.micro_batch);
      if (b.forward)
        forward_block(b.chunk);
      else
        backward_block(b.chunk, b.micro_batch == last_mb_[static_cast<size_t>(b.chunk)]);
    }
    mb_ = -1;
    flush_buckets(prev_);
    std::vector<uint32_t> after = grad_ops_;
    if (prev_ != kNone) after.push_back(prev_);
    // Optimizer step on the local (ZeRO-sharded) parameters: reads weights, fp32 grads
    // and state; writes weights and state.
    const double shard = l_.zero_stage >= 1 ? static_cast<double>(l_.dp * l_.cp) : 1.0;
    const double params = (params_dense_ + params_expert_ * static_cast<double>(l_.ep)) / shard;
    const double state = adam_ ? 12.0 : 8.0;
    uint32_t opt = add_memory("optimizer-step", Phase::Optimizer, -1, params * (e_ + 4 + state), params * (e_ + state),
                              params * 12, after);
    // ZeRO 1/2: the updated shards are all-gathered back into every replica.
    if (l_.zero_stage >= 1 && l_.zero_stage <= 2 && l_.dp * l_.cp > 1) {
      for (double bytes : gather_buckets_)
        add_coll("zero-param-allgather", CollectiveKind::AllGather, GroupKind::DP, dp_, Phase::Optimizer, -1, bytes,
                 deps(opt));
    }
  }

  double model_flops() const { return model_flops_; }

 private:
  static constexpr uint32_t kNone = ~0u;

  static std::vector<uint32_t> deps(uint32_t a, uint32_t b = kNone, uint32_t c = kNone) {
    std::vector<uint32_t> d;
    for (uint32_t x : {a, b, c})
      if (x != kNone) d.push_back(x);
    return d;
  }

  Op base(const char* name, OpKind kind, Phase phase, int32_t layer, uint8_t stream) {
    Op op;
    op.kind = kind;
    op.name = plan_.intern(name);
    op.phase = phase;
    op.layer = layer;
    op.micro_batch = mb_;
    op.stream = stream;
    op.dtype = m_.dtype;
    return op;
  }

  // A GEMM; `model_share` is the part of its FLOPs that counts as model FLOPs (recompute
  // 0, capacity padding excluded).
  uint32_t add_gemm(const char* name, Phase ph, int32_t layer, int64_t m, int64_t n, int64_t k,
                    const std::vector<uint32_t>& after, int64_t batch = 1, double model_share = 1.0) {
    Op op = base(name, OpKind::Gemm, ph, layer, compute_);
    op.m = m;
    op.n = n;
    op.k = k;
    op.batch = batch;
    op.flops = gemm_flops(op);
    op.bytes_read = (m * k + k * n) * e_ * batch;
    op.bytes_written = m * n * e_ * batch;
    model_flops_ += op.flops * (recomputing_ ? 0.0 : model_share);
    return p_.add(op, after);
  }

  uint32_t add_memory(const char* name, Phase ph, int32_t layer, double read, double written, double flops,
                      const std::vector<uint32_t>& after) {
    Op op = base(name, OpKind::Memory, ph, layer, compute_);
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
    op.kv_heads = m_.kv_heads / t_;
    op.q_len = q_len;
    op.kv_len = kv_len;
    op.head_dim = m_.head_dim();
    op.causal = true;
    const double fwd = attention_flops(op);
    const int64_t q = l_.micro_batch * q_len * op.heads * op.head_dim * e_;
    const int64_t kv = l_.micro_batch * kv_len * op.kv_heads * op.head_dim * e_;
    if (ph == Phase::Forward) {
      op.flops = fwd;
      op.bytes_read = q + 2 * kv;
      op.bytes_written = q;
      model_flops_ += recomputing_ ? 0.0 : fwd;
    } else {
      // FlashAttention backward: five GEMM-sized products against the forward's two
      // (2.5x), of which the recomputed QK^T (0.5x) is not model FLOPs.
      op.flops = 2.5 * fwd;
      op.bytes_read = 3 * q + 2 * kv;
      op.bytes_written = q + 2 * kv;
      model_flops_ += 2.0 * fwd;
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
                   int32_t layer, double bytes, const std::vector<uint32_t>& after, bool relative = false) {
    Op op = base(name, kind, ph, layer, p_.stream(stream));
    op.group = group;
    op.peer = peer;
    op.relative_peer = relative;
    op.bytes = static_cast<int64_t>(bytes);
    return p_.add(op, after);
  }

  double act_bytes() const { return static_cast<double>(seq_tokens_ * m_.hidden * e_); }
  double full_act_bytes() const { return static_cast<double>(tokens_ * m_.hidden * e_); }

  // Activations leaving a row-parallel layer: all-reduce, or reduce-scatter under SP.
  uint32_t tp_reduce(const char* ar, const char* rs, Phase ph, int32_t layer, uint32_t after) {
    if (t_ == 1) return after;
    return add_coll(l_.sequence_parallel ? rs : ar,
                    l_.sequence_parallel ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, GroupKind::TP,
                    tp_, ph, layer, full_act_bytes(), deps(after));
  }
  // Activations entering a column-parallel layer under SP: all-gather the sequence.
  uint32_t tp_gather(const char* name, Phase ph, int32_t layer, uint32_t after) {
    if (t_ == 1 || !l_.sequence_parallel) return after;
    return add_coll(name, CollectiveKind::AllGather, GroupKind::TP, tp_, ph, layer, full_act_bytes(), deps(after));
  }

  int32_t layer_of(int64_t chunk, int64_t i) const {
    return static_cast<int32_t>(
        virtual_stage_layers(m_.layers, l_.pp * l_.virtual_stages, chunk * l_.pp + stage_).first + i);
  }
  int64_t chunk_layers(int64_t chunk) const {
    return virtual_stage_layers(m_.layers, l_.pp * l_.virtual_stages, chunk * l_.pp + stage_).second;
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
    return static_cast<double>(m_.moe.experts / l_.ep * m_.expert_params()) / static_cast<double>(t_);
  }
  double embedding_params(bool first, bool last) const {
    const double vocab = static_cast<double>(padded_vocab(m_, t_) / t_ * m_.hidden);
    double p = 0;
    if (first) p += vocab + (m_.learned_positions ? static_cast<double>(m_.seq_len * m_.hidden) : 0.0);
    if (last) p += (!m_.tied_embeddings || !first ? vocab : 0.0) + 2.0 * static_cast<double>(m_.hidden);
    return p;
  }

  // ---- ZeRO-3 parameter gathers and gradient scatters, per layer ----------------------
  uint32_t zero3_gather(Phase ph, int32_t L, uint32_t after) {
    if (l_.zero_stage < 3 || l_.dp * l_.cp == 1) return after;
    // Prefetched: the gather for this layer is issued on the DP stream as soon as the
    // previous gather finished, and the layer's first op waits for it.
    uint32_t g = add_coll(ph == Phase::Forward ? "zero3-param-allgather" : "zero3-param-allgather-bwd",
                          CollectiveKind::AllGather, GroupKind::DP, dp_, ph, L,
                          layer_dense_params(L) * static_cast<double>(e_), {});
    if (layer_expert_params(L) > 0 && l_.dp * l_.cp / l_.ep > 1)
      g = add_coll("zero3-expert-allgather", CollectiveKind::AllGather, GroupKind::EDP, dp_, ph, L,
                   layer_expert_params(L) * static_cast<double>(e_), {});
    (void)after;
    return g;
  }

  // ---- data-parallel gradient buckets -------------------------------------------------
  void add_grads(int32_t L, double dense, double expert, uint32_t ready) {
    const double gb = dtype_bits(grad_dtype_) / 8.0;
    if (l_.zero_stage >= 3) {
      // ZeRO-3 reduce-scatters each layer's gradients every micro-batch.
      if (l_.dp * l_.cp > 1 && dense > 0)
        grad_ops_.push_back(add_grad_coll("zero3-grad-reduce-scatter", CollectiveKind::ReduceScatter, GroupKind::DP, L,
                                          dense * gb, ready));
      if (l_.dp * l_.cp / l_.ep > 1 && expert > 0)
        grad_ops_.push_back(add_grad_coll("zero3-expert-grad-reduce-scatter", CollectiveKind::ReduceScatter,
                                          GroupKind::EDP, L, expert * gb, ready));
      return;
    }
    bucket_dense_ += dense;
    bucket_expert_ += expert;
    bucket_ready_ = ready;
    bucket_layer_ = L;
    if (bucket_dense_ + bucket_expert_ >= static_cast<double>(l_.bucket_params)) flush_buckets(ready);
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
    if (ready == kNone) ready = bucket_ready_;
    const double gb = dtype_bits(grad_dtype_) / 8.0;
    const bool sharded = l_.zero_stage >= 1;
    const CollectiveKind kind = sharded ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
    if (bucket_dense_ > 0 && l_.dp * l_.cp > 1) {
      grad_ops_.push_back(add_grad_coll(sharded ? "dp-grad-reduce-scatter" : "dp-grad-allreduce", kind, GroupKind::DP,
                                        bucket_layer_, bucket_dense_ * gb, ready));
      if (sharded) gather_buckets_.push_back(bucket_dense_ * static_cast<double>(e_));
    }
    if (bucket_expert_ > 0 && l_.dp * l_.cp / l_.ep > 1) {
      grad_ops_.push_back(add_grad_coll(sharded ? "expert-grad-reduce-scatter" : "expert-grad-allreduce", kind,
                                        GroupKind::EDP, bucket_layer_, bucket_expert_ * gb, ready));
    }
    bucket_dense_ = bucket_expert_ = 0;
  }

  // ---- attention, with ring attention across the CP group ----------------------------
  // Ring attention: the local K/V block first, then cp - 1 blocks arriving from the ring
  // predecessor while the block at hand is computed (load-balanced causal split). Forward
  // passes K and V on as they arrive; backward passes K, V and their gradients (twice the
  // bytes) once each block's gradients are done.
  uint32_t ring_attention(int32_t L, Phase ph, uint32_t input) {
    const bool fwd = ph == Phase::Forward;
    const int64_t q = m_.seq_len / l_.cp;
    const char* block = fwd ? "attention-block" : "attention-block-backward";
    if (l_.cp == 1) return add_attention(fwd ? "attention" : "attention-backward", ph, L, q, q, deps(input));
    const double kv =
        (fwd ? 2.0 : 4.0) * static_cast<double>(l_.micro_batch * q * (m_.kv_heads / t_) * m_.head_dim() * e_);
    uint32_t at = add_attention(block, ph, L, q, q, deps(input));
    uint32_t have = fwd ? input : at;
    for (int64_t i = 1; i < l_.cp; ++i) {
      add_p2p(fwd ? "cp-kv-send" : "cp-dkv-send", OpKind::Send, GroupKind::CP, 1, "cp-send", ph, L, kv, deps(have),
              true);
      const uint32_t recv = add_p2p(fwd ? "cp-kv-recv" : "cp-dkv-recv", OpKind::Recv, GroupKind::CP,
                                    static_cast<int32_t>(l_.cp - 1), "cp-recv", ph, L, kv, deps(have), true);
      at = add_attention(block, ph, L, q, q, deps(recv, at));
      have = fwd ? recv : at;
    }
    if (!fwd) return at;
    return add_memory("attention-merge", ph, L, 2 * act_bytes(), act_bytes(),
                      4.0 * act_bytes() / static_cast<double>(e_), deps(at));
  }

  // ---- the MLP: dense, or router + experts (+ shared experts) -------------------------
  uint32_t mlp_forward(int32_t L, Phase ph, uint32_t in) {
    const int64_t h = m_.hidden;
    const bool swiglu = m_.ffn_type == FfnType::Swiglu;
    if (!m_.moe_layer(L)) {
      uint32_t up = add_gemm("mlp-up", ph, L, tokens_, mlp_in_, h, deps(in));
      const double f = static_cast<double>(tokens_ * (m_.ffn_hidden / t_) * e_);
      uint32_t a = add_memory(swiglu ? "swiglu" : "bias-gelu", ph, L, swiglu ? 2 * f : f, f,
                              8.0 * f / static_cast<double>(e_), deps(up));
      return add_gemm("mlp-down", ph, L, tokens_, h, m_.ffn_hidden / t_, deps(a));
    }
    const MoeConfig& moe = m_.moe;
    const int64_t local = moe.experts / l_.ep;
    const double cap = moe.capacity_factor;
    const int64_t per_expert = static_cast<int64_t>(
        std::ceil(static_cast<double>(tokens_ * l_.ep * moe.top_k) * cap / static_cast<double>(moe.experts)));
    const int64_t fe = moe.expert_ffn_hidden / t_;
    uint32_t router = add_gemm("moe-router", ph, L, tokens_, moe.experts, h, deps(in));
    const double a2a = static_cast<double>(tokens_ * moe.top_k * h * e_);
    uint32_t disp = l_.ep > 1 ? add_coll("moe-dispatch-alltoall", CollectiveKind::AllToAll, GroupKind::EP, ep_stream(),
                                         ph, L, a2a, deps(router))
                              : add_memory("moe-permute", ph, L, a2a, a2a, 0, deps(router));
    uint32_t up = add_gemm("expert-up", ph, L, per_expert, (swiglu ? 2 : 1) * fe, h, deps(disp), local, 1.0 / cap);
    const double f = static_cast<double>(per_expert * local * fe * e_);
    uint32_t a = add_memory(swiglu ? "expert-swiglu" : "expert-gelu", ph, L, swiglu ? 2 * f : f, f,
                            8.0 * f / static_cast<double>(e_), deps(up));
    uint32_t down = add_gemm("expert-down", ph, L, per_expert, h, fe, deps(a), local, 1.0 / cap);
    uint32_t comb = l_.ep > 1 ? add_coll("moe-combine-alltoall", CollectiveKind::AllToAll, GroupKind::EP, ep_stream(),
                                         ph, L, a2a, deps(down))
                              : add_memory("moe-unpermute", ph, L, a2a, a2a, 0, deps(down));
    uint32_t out = comb;
    if (moe.shared_experts > 0) {
      const int64_t fs = moe.shared_experts * fe;
      uint32_t su = add_gemm("shared-expert-up", ph, L, tokens_, (swiglu ? 2 : 1) * fs, h, deps(in));
      uint32_t sd = add_gemm("shared-expert-down", ph, L, tokens_, h, fs, deps(su));
      out = add_memory("moe-merge", ph, L, 2 * full_act_bytes(), full_act_bytes(), 0, deps(comb, sd));
    }
    return out;
  }

  uint32_t mlp_backward(int32_t L, uint32_t dy, uint32_t& wgrad) {
    const int64_t h = m_.hidden;
    const bool swiglu = m_.ffn_type == FfnType::Swiglu;
    if (!m_.moe_layer(L)) {
      uint32_t down_d = add_gemm("mlp-down-dgrad", Phase::Backward, L, tokens_, m_.ffn_hidden / t_, h, deps(dy));
      uint32_t down_w = add_gemm("mlp-down-wgrad", Phase::Backward, L, m_.ffn_hidden / t_, h, tokens_, deps(dy));
      const double f = static_cast<double>(tokens_ * (m_.ffn_hidden / t_) * e_);
      uint32_t act_b =
          add_memory(swiglu ? "swiglu-backward" : "gelu-backward", Phase::Backward, L, swiglu ? 3 * f : 2 * f,
                     swiglu ? 2 * f : f, 10.0 * f / static_cast<double>(e_), deps(down_d));
      uint32_t up_d = add_gemm("mlp-up-dgrad", Phase::Backward, L, tokens_, h, mlp_in_, deps(act_b));
      mlp_input_ready_ = act_b;
      wgrad = down_w;
      return up_d;
    }
    const MoeConfig& moe = m_.moe;
    const int64_t local = moe.experts / l_.ep;
    const double cap = moe.capacity_factor;
    const int64_t per_expert = static_cast<int64_t>(
        std::ceil(static_cast<double>(tokens_ * l_.ep * moe.top_k) * cap / static_cast<double>(moe.experts)));
    const int64_t fe = moe.expert_ffn_hidden / t_;
    const double a2a = static_cast<double>(tokens_ * moe.top_k * h * e_);
    uint32_t comb = l_.ep > 1 ? add_coll("moe-combine-alltoall-backward", CollectiveKind::AllToAll, GroupKind::EP,
                                         ep_stream(), Phase::Backward, L, a2a, deps(dy))
                              : add_memory("moe-unpermute-backward", Phase::Backward, L, a2a, a2a, 0, deps(dy));
    uint32_t dd = add_gemm("expert-down-dgrad", Phase::Backward, L, per_expert, fe, h, deps(comb), local, 1.0 / cap);
    uint32_t dw = add_gemm("expert-down-wgrad", Phase::Backward, L, fe, h, per_expert, deps(comb), local, 1.0 / cap);
    const double f = static_cast<double>(per_expert * local * fe * e_);
    uint32_t ab = add_memory("expert-act-backward", Phase::Backward, L, swiglu ? 3 * f : 2 * f, swiglu ? 2 * f : f,
                             10.0 * f / static_cast<double>(e_), deps(dd));
    uint32_t ud = add_gemm("expert-up-dgrad", Phase::Backward, L, per_expert, h, (swiglu ? 2 : 1) * fe, deps(ab), local,
                           1.0 / cap);
    uint32_t uw = add_gemm("expert-up-wgrad", Phase::Backward, L, h, (swiglu ? 2 : 1) * fe, per_expert, deps(ab, dw),
                           local, 1.0 / cap);
    uint32_t disp = l_.ep > 1 ? add_coll("moe-dispatch-alltoall-backward", CollectiveKind::AllToAll, GroupKind::EP,
                                         ep_stream(), Phase::Backward, L, a2a, deps(ud))
                              : add_memory("moe-permute-backward", Phase::Backward, L, a2a, a2a, 0, deps(ud));
    uint32_t rd = add_gemm("moe-router-dgrad", Phase::Backward, L, tokens_, h, moe.experts, deps(disp));
    uint32_t rw = add_gemm("moe-router-wgrad", Phase::Backward, L, moe.experts, h, tokens_, deps(disp, uw));
    uint32_t out = rd;
    wgrad = rw;
    if (moe.shared_experts > 0) {
      const int64_t fs = moe.shared_experts * fe;
      uint32_t sdd = add_gemm("shared-expert-down-dgrad", Phase::Backward, L, tokens_, fs, h, deps(dy));
      uint32_t sdw = add_gemm("shared-expert-down-wgrad", Phase::Backward, L, fs, h, tokens_, deps(dy));
      uint32_t sud =
          add_gemm("shared-expert-up-dgrad", Phase::Backward, L, tokens_, h, (swiglu ? 2 : 1) * fs, deps(sdd));
      uint32_t suw =
          add_gemm("shared-expert-up-wgrad", Phase::Backward, L, h, (swiglu ? 2 : 1) * fs, tokens_, deps(sdd, sdw));
      out = add_memory("moe-merge-backward", Phase::Backward, L, 2 * full_act_bytes(), full_act_bytes(), 0,
                       deps(rd, sud));
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
    const double act = act_bytes();
    const int64_t h = m_.hidden;
    uint32_t ln = add_memory("layernorm-1", ph, L, act, act, 8.0 * act / static_cast<double>(e_), deps(x));
    uint32_t in = tp_gather("allgather-qkv-input", ph, L, ln);
    uint32_t qkv = add_gemm("qkv", ph, L, tokens_, qkv_, h, deps(in));
    uint32_t at = recomputing_ ? add_attention("attention", ph, L, m_.seq_len / l_.cp, m_.seq_len / l_.cp, deps(qkv))
                               : ring_attention(L, Phase::Forward, qkv);
    uint32_t proj = add_gemm("attn-proj", ph, L, tokens_, h, m_.heads * m_.head_dim() / t_, deps(at));
    uint32_t red = tp_reduce("tp-allreduce-attn", "reduce-scatter-attn", ph, L, proj);
    uint32_t ln2 =
        add_memory("residual-layernorm-2", ph, L, 2 * act, 2 * act, 10.0 * act / static_cast<double>(e_), deps(red));
    uint32_t in2 = tp_gather("allgather-mlp-input", ph, L, ln2);
    uint32_t mlp = mlp_forward(L, ph, in2);
    uint32_t red2 = tp_reduce("tp-allreduce-mlp", "reduce-scatter-mlp", ph, L, mlp);
    return add_memory("residual-add", ph, L, 2 * act, act, act / static_cast<double>(e_), deps(red2));
  }

  void forward_block(int64_t chunk) {
    uint32_t x = prev_;
    if (first_virtual(chunk)) {
      // Vocab-parallel embedding: each TP rank looks up its slice, then partial sums meet.
      x = add_memory("embedding", Phase::Forward, -1, full_act_bytes() + static_cast<double>(tokens_ * 8),
                     full_act_bytes(), 0, deps(prev_));
      x = tp_reduce("embedding-allreduce", "embedding-reduce-scatter", Phase::Forward, -1, x);
    } else {
      const uint32_t recv =
          add_p2p("pp-recv-activation", OpKind::Recv, GroupKind::PP, static_cast<int32_t>((stage_ + l_.pp - 1) % l_.pp),
                  "pp-recv-fwd", Phase::Forward, layer_of(chunk, 0), act_bytes(), {});
      x = add_memory("pp-activation-in", Phase::Forward, layer_of(chunk, 0), 0, 0, 0, deps(recv, prev_));
    }
    for (int64_t i = 0; i < chunk_layers(chunk); ++i) {
      const int32_t L = layer_of(chunk, i);
      const uint32_t g = zero3_gather(Phase::Forward, L, x);
      x = layer_forward(L, g == x ? x : join(x, g), Phase::Forward);
    }
    if (last_virtual(chunk)) {
      const double act = act_bytes();
      uint32_t ln =
          add_memory("final-layernorm", Phase::Forward, -1, act, act, 8.0 * act / static_cast<double>(e_), deps(x));
      uint32_t in = tp_gather("allgather-logits-input", Phase::Forward, -1, ln);
      uint32_t logits = add_gemm("logits", Phase::Forward, -1, tokens_, vocab_local_, m_.hidden, deps(in));
      const double lg = static_cast<double>(tokens_ * vocab_local_);
      x = add_memory("cross-entropy", Phase::Forward, -1, lg * static_cast<double>(e_), lg * 4, 5.0 * lg, deps(logits));
      if (t_ > 1)  // vocab-parallel cross-entropy: max, sum of exponentials and target logit
        x = add_coll("cross-entropy-allreduce", CollectiveKind::AllReduce, GroupKind::TP, tp_, Phase::Forward, -1,
                     3.0 * static_cast<double>(tokens_) * 4, deps(x));
    } else {
      add_p2p("pp-send-activation", OpKind::Send, GroupKind::PP, static_cast<int32_t>((stage_ + 1) % l_.pp),
              "pp-send-fwd", Phase::Forward, layer_of(chunk, chunk_layers(chunk) - 1), act_bytes(), deps(x));
    }
    prev_ = x;
  }

  uint32_t join(uint32_t a, uint32_t b) { return add_memory("wait", Phase::Other, -1, 0, 0, 0, deps(a, b)); }

  void backward_block(int64_t chunk, bool last_micro_batch) {
    const double act = act_bytes();
    const int64_t h = m_.hidden;
    uint32_t g;
    if (last_virtual(chunk)) {
      const double lg = static_cast<double>(tokens_ * vocab_local_);
      g = add_memory("cross-entropy-backward", Phase::Backward, -1, lg * 4, lg * static_cast<double>(e_), 3.0 * lg,
                     deps(prev_));
      uint32_t dgrad = add_gemm("logits-dgrad", Phase::Backward, -1, tokens_, h, vocab_local_, deps(g));
      uint32_t wgrad = add_gemm("logits-wgrad", Phase::Backward, -1, vocab_local_, h, tokens_, deps(g));
      uint32_t d = tp_reduce("logits-grad-allreduce", "logits-grad-reduce-scatter", Phase::Backward, -1, dgrad);
      g = add_memory("final-layernorm-backward", Phase::Backward, -1, 2 * act, act,
                     10.0 * act / static_cast<double>(e_), deps(d, wgrad));
    } else {
      const uint32_t recv =
          add_p2p("pp-recv-grad", OpKind::Recv, GroupKind::PP, static_cast<int32_t>((stage_ + 1) % l_.pp),
                  "pp-recv-bwd", Phase::Backward, layer_of(chunk, chunk_layers(chunk) - 1), act, {});
      g = add_memory("pp-grad-in", Phase::Backward, layer_of(chunk, chunk_layers(chunk) - 1), 0, 0, 0,
                     deps(recv, prev_));
    }
    for (int64_t i = chunk_layers(chunk) - 1; i >= 0; --i) {
      const int32_t L = layer_of(chunk, i);
      const uint32_t zg = zero3_gather(Phase::Backward, L, g);
      if (zg != g) g = join(g, zg);
      if (l_.recompute == "full") {
        // Full recompute: the layer's forward runs again from its stored input.
        recomputing_ = true;
        g = layer_forward(L, g, Phase::Backward);
        recomputing_ = false;
      }
      // MLP: row-parallel down projection, then column-parallel up projection whose
      // input-gradient reduction overlaps its weight-gradient GEMM.
      uint32_t dy = tp_gather("allgather-mlp-grad", Phase::Backward, L, g);
      uint32_t mlp_w = kNone;
      uint32_t up_d = mlp_backward(L, dy, mlp_w);
      uint32_t x2 = tp_gather("allgather-mlp-input-wgrad", Phase::Backward, L, mlp_input_ready_);
      uint32_t up_w =
          m_.moe_layer(L) ? mlp_w : add_gemm("mlp-up-wgrad", Phase::Backward, L, h, mlp_in_, tokens_, deps(x2, mlp_w));
      uint32_t red = tp_reduce("tp-allreduce-mlp-grad", "reduce-scatter-mlp-grad", Phase::Backward, L, up_d);
      uint32_t ln2 = add_memory("layernorm-2-backward", Phase::Backward, L, 3 * act, 2 * act,
                                12.0 * act / static_cast<double>(e_), deps(red, up_w));
      uint32_t dy2 = tp_gather("allgather-attn-grad", Phase::Backward, L, ln2);
      uint32_t proj_d =
          add_gemm("attn-proj-dgrad", Phase::Backward, L, tokens_, m_.heads * m_.head_dim() / t_, h, deps(dy2));
      uint32_t proj_w =
          add_gemm("attn-proj-wgrad", Phase::Backward, L, h, m_.heads * m_.head_dim() / t_, tokens_, deps(dy2));
      uint32_t at = ring_attention(L, Phase::Backward, proj_d);
      uint32_t qkv_d = add_gemm("qkv-dgrad", Phase::Backward, L, tokens_, h, qkv_, deps(at));
      uint32_t x1 = tp_gather("allgather-qkv-input-wgrad", Phase::Backward, L, at);
      uint32_t qkv_w = add_gemm("qkv-wgrad", Phase::Backward, L, h, qkv_, tokens_, deps(x1, proj_w));
      uint32_t red1 = tp_reduce("tp-allreduce-qkv-grad", "reduce-scatter-qkv-grad", Phase::Backward, L, qkv_d);
      g = add_memory("layernorm-1-backward", Phase::Backward, L, 3 * act, 2 * act, 12.0 * act / static_cast<double>(e_),
                     deps(red1, qkv_w));
      if (last_micro_batch || l_.zero_stage >= 3) add_grads(L, layer_dense_params(L), layer_expert_params(L), g);
    }
    if (first_virtual(chunk)) {
      g = add_memory("embedding-backward", Phase::Backward, -1, act, full_act_bytes(), 0, deps(g));
    } else {
      add_p2p("pp-send-grad", OpKind::Send, GroupKind::PP, static_cast<int32_t>((stage_ + l_.pp - 1) % l_.pp),
              "pp-send-bwd", Phase::Backward, layer_of(chunk, 0), act, deps(g));
    }
    if (last_micro_batch && (first_virtual(chunk) || last_virtual(chunk)))
      add_grads(-1, embedding_params(first_virtual(chunk), last_virtual(chunk)), 0, g);
    if (last_micro_batch) flush_buckets(g);
    // Parameters the optimizer updates on this stage.
    if (last_micro_batch) {
      for (int64_t i = 0; i < chunk_layers(chunk); ++i) {
        params_dense_ += layer_dense_params(layer_of(chunk, i));
        params_expert_ += layer_expert_params(layer_of(chunk, i));
      }
      params_dense_ += embedding_params(first_virtual(chunk), last_virtual(chunk));
    }
    prev_ = g;
  }

 private:
  Plan& plan_;
  Program& p_;
  const ModelConfig& m_;
  const TrainingLayout& l_;
  int64_t stage_;
  bool adam_;
  uint8_t compute_ = 0, tp_ = 0, dp_ = 0, ep_ = 0xff;
  int64_t e_ = 2, t_ = 1, tokens_ = 0, seq_tokens_ = 0, vocab_local_ = 0, mlp_in_ = 0, qkv_ = 0;
  DType grad_dtype_ = DType::FP32;
  int32_t mb_ = -1;
  uint32_t prev_ = kNone;
  uint32_t mlp_input_ready_ = kNone;
  bool recomputing_ = false;
  std::vector<int64_t> last_mb_;
  std::vector<uint32_t> grad_ops_;
  std::vector<double> gather_buckets_;
  double bucket_dense_ = 0, bucket_expert_ = 0;
  uint32_t bucket_ready_ = kNone;
  int32_t bucket_layer_ = -1;
  double params_dense_ = 0, params_expert_ = 0;
  double model_flops_ = 0;
};

}  // namespace

std::vector<PipelineBlock> pipeline_schedule(const std::string& schedule, int64_t pp, int64_t v, int64_t M, int64_t s) {
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
  // Interleaved 1F1B (Megatron-LM): forward order over (micro-batch, chunk) in groups of
  // pp micro-batches per chunk; backward runs the chunks in reverse.
  const int64_t total = M * v;
  auto block = [&](int64_t k, bool fwd) {
    const int64_t in_group = k % (pp * v);
    int64_t chunk = in_group / pp;
    if (!fwd) chunk = v - 1 - chunk;
    return PipelineBlock{fwd, (k / (pp * v)) * pp + k % pp, chunk};
  };
  const int64_t warm = std::min((pp - s - 1) * 2 + (v - 1) * pp, total);
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
  const int64_t chunks = l.pp * l.virtual_stages;
  for (int64_t st = 0; st < l.pp; ++st) {
    MemoryInputs mi;
    mi.tp = l.tp;
    mi.cp = l.cp;
    mi.dp = l.dp;
    mi.ep = l.ep;
    mi.pp = l.pp;
    mi.zero_stage = l.zero_stage;
    mi.micro_batch = l.micro_batch;
    mi.sequence_parallel = l.sequence_parallel;
    mi.full_recompute = l.recompute == "full";
    mi.adam = adam;
    int64_t live = 0, peak = 0;
    for (const PipelineBlock& b : pipeline_schedule(l.schedule, l.pp, l.virtual_stages, l.micro_batches, st)) {
      live += b.forward ? 1 : -1;
      peak = std::max(peak, live);
    }
    mi.in_flight_layers = static_cast<double>(peak * virtual_stage_layers(m.layers, chunks, st).second);
    MemoryBreakdown total;
    for (int64_t c = 0; c < l.virtual_stages; ++c) {
      MemoryInputs ci = mi;
      const int64_t vs = c * l.pp + st;
      std::tie(ci.first_layer, ci.end_layer) = virtual_stage_layers(m.layers, chunks, vs);
      ci.end_layer += ci.first_layer;
      ci.embedding = vs == 0;
      ci.output = vs == l.pp * l.virtual_stages - 1;
      ci.in_flight_layers = c == 0 ? mi.in_flight_layers : 0;
      ci.pp = c == 0 ? l.pp : 1;
      const MemoryBreakdown b = training_memory(m, ci);
      total.weights += b.weights;
      total.gradients += b.gradients;
      total.optimizer += b.optimizer;
      total.activations += b.activations;
      total.buffers += b.buffers;
    }
    out.push_back(total);
  }
  return out;
}

TrainingPlan build_training_plan(const Scenario& s, const PlannerOptions& opt) {
  TrainingPlan tp;
  tp.layout = check_training_layout(s);
  const TrainingLayout& l = tp.layout;
  const ModelConfig& m = s.model;
  const bool adam = s.training.optimizer == "adam";
  tp.stage_memory = training_stage_memory(s, l);
  for (const MemoryBreakdown& b : tp.stage_memory)
    if (b.total() > tp.memory.total()) tp.memory = b;
  const GpuSpec& gpu = s.cluster.node.gpu;
  if (tp.memory.total() > gpu.hbm_bytes) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "%.1f GiB per GPU needed, %.1f GiB available on %s", tp.memory.total() / (1 << 30),
                  gpu.hbm_bytes / (1 << 30), gpu.name.c_str());
    fail(s, "parallel", std::string("layout does not fit in memory: ") + buf + " (" + tp.memory.describe() + ")");
  }

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
  for (int64_t p = 0; p < l.pp; ++p)
    for (int64_t t = 0; t < l.tp; ++t) {
      // Dense gradients are reduced over DP x CP (Megatron); experts over the ranks that
      // hold the same experts (dp ≡ r mod ep), with CP.
      group(GroupKind::DP, [&](auto& g) {
        for (int64_t d = 0; d < l.dp; ++d)
          for (int64_t c = 0; c < l.cp; ++c) g.push_back(rank_of(t, c, d, p));
      });
      if (l.ep > 1) {
        for (int64_t r = 0; r < l.ep; ++r)
          group(GroupKind::EDP, [&](auto& g) {
            for (int64_t d = r; d < l.dp; d += l.ep)
              for (int64_t c = 0; c < l.cp; ++c) g.push_back(rank_of(t, c, d, p));
          });
        for (int64_t c = 0; c < l.cp; ++c)
          for (int64_t k = 0; k < l.dp / l.ep; ++k)
            group(GroupKind::EP, [&](auto& g) {
              for (int64_t d = k * l.ep; d < (k + 1) * l.ep; ++d) g.push_back(rank_of(t, c, d, p));
            });
      } else if (m.moe.experts > 0) {
        group(GroupKind::EDP, [&](auto& g) {
          for (int64_t d = 0; d < l.dp; ++d)
            for (int64_t c = 0; c < l.cp; ++c) g.push_back(rank_of(t, c, d, p));
        });
      }
    }
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

  double model_flops = 0;
  for (int64_t p = 0; p < l.pp; ++p) {
    plan.programs.emplace_back();
    Program& prog = plan.programs.back();
    prog.name = l.pp > 1 ? "stage-" + std::to_string(p) : "rank";
    StageBuilder b(plan, prog, m, l, p, adam);
    b.build();
    model_flops += b.model_flops();
    for (const Op& op : prog.ops)
      if (op.kind == OpKind::Gemm || op.kind == OpKind::Attention)
        tp.hardware_flops_per_rank += op.flops / static_cast<double>(l.pp);
  }
  tp.model_flops_per_rank = model_flops / static_cast<double>(l.pp);
  return tp;
}

}  // namespace clustersim
