#include "plan/training_planner.h"

#include <algorithm>
#include <array>

namespace clustersim {
namespace {

[[noreturn]] void fail(const Scenario& s, const std::string& key, const std::string& msg) {
  throw InputError(s.mark(key), msg);
}

std::string str(int64_t v) { return std::to_string(v); }

TrainingLayout check_layout(const Scenario& s) {
  const ParallelConfig& p = s.parallel;
  const ModelConfig& m = s.model;
  if (s.inference)
    fail(s, "inference", "inference scenarios are not modelled yet; remove the inference block to simulate training");
  if (p.pp > 1) fail(s, "parallel.pp", "pipeline parallelism (pp > 1) is not modelled yet, expected pp: 1");
  if (p.cp > 1) fail(s, "parallel.cp", "context parallelism (cp > 1) is not modelled yet, expected cp: 1");
  if (p.ep > 1) fail(s, "parallel.ep", "expert parallelism (ep > 1) is not modelled yet, expected ep: 1");
  if (m.moe.experts > 0)
    fail(s, "model.moe", "mixture-of-experts layers are not modelled yet, expected model.moe.experts: 0");
  if (p.zero_stage > 0)
    fail(s, "parallel.zero_stage", "ZeRO stages above 0 are not modelled yet, expected zero_stage: 0");
  if (p.virtual_stages > 1)
    fail(s, "parallel.virtual_stages", "virtual pipeline stages need pp > 1, expected virtual_stages: 1");
  if (s.training.recompute != "none")
    fail(s, "training.recompute", "activation recompute is not modelled yet, expected recompute: none");

  TrainingLayout l;
  l.tp = p.tp;
  l.pp = p.pp;
  l.cp = p.cp;
  l.ep = p.ep;
  l.micro_batch = p.micro_batch;
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
  if (l.sequence_parallel && m.seq_len % p.tp != 0)
    fail(s, "parallel.sequence_parallel",
         "sequence parallelism needs tp = " + str(p.tp) + " to divide model.seq_len = " + str(m.seq_len));
  l.global_batch = s.training.global_batch > 0 ? s.training.global_batch : l.dp * l.micro_batch;
  if (l.global_batch % (l.dp * l.micro_batch) != 0)
    fail(s, "training.global_batch",
         "training.global_batch = " + str(l.global_batch) +
             " is not a multiple of dp·micro_batch = " + str(l.dp * l.micro_batch));
  l.micro_batches = l.global_batch / (l.dp * l.micro_batch);
  return l;
}

// Builds the per-rank program. All ranks of a DP x TP layout run the same program.
class ProgramBuilder {
 public:
  ProgramBuilder(Plan& plan, Program& prog, const ModelConfig& m, const TrainingLayout& l, bool adam)
      : plan_(plan), p_(prog), m_(m), l_(l), adam_(adam) {
    compute_ = p_.stream("compute");
    tp_ = p_.stream("tp");
    dp_ = p_.stream("dp");
    e_ = dtype_bits(m.dtype) / 8;
    t_ = l.tp;
    tokens_ = l.micro_batch * m.seq_len;
    seq_tokens_ = l.sequence_parallel ? tokens_ / t_ : tokens_;
    vocab_local_ = padded_vocab(m, t_) / t_;
    mlp_in_ = (m.ffn_type == FfnType::Swiglu ? 2 : 1) * m.ffn_hidden / t_;
    qkv_ = (m.heads + 2 * m.kv_heads) * m.head_dim() / t_;
  }

  void build() {
    std::vector<uint32_t> layer_last_bwd(static_cast<size_t>(m_.layers));
    uint32_t prev = kNone;
    std::vector<uint32_t> dp_ops;
    for (int64_t mb = 0; mb < l_.micro_batches; ++mb) {
      mb_ = static_cast<int32_t>(mb);
      prev = forward(prev);
      prev = backward(prev, mb + 1 == l_.micro_batches, dp_ops);
    }
    // Embedding / output-layer / final-norm gradients: the last bucket.
    if (l_.dp > 1) dp_ops.push_back(dp_allreduce(static_cast<double>(embedding_params()), -1, prev));
    mb_ = -1;
    std::vector<uint32_t> after = dp_ops;
    after.push_back(prev);
    const double params = static_cast<double>(params_per_rank(m_, t_));
    const double state = adam_ ? 12.0 : 8.0;
    // Reads weights, fp32 grads and optimizer state; writes weights and state back.
    add_memory("optimizer-step", Phase::Optimizer, -1, params * (e_ + 4 + state), params * (e_ + state), params * 12,
               after);
  }

  double model_flops() const { return model_flops_; }

 private:
  static constexpr uint32_t kNone = ~0u;

  std::vector<uint32_t> deps(uint32_t a, uint32_t b = kNone) {
    std::vector<uint32_t> d;
    if (a != kNone) d.push_back(a);
    if (b != kNone) d.push_back(b);
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

  uint32_t add_gemm(const char* name, Phase ph, int32_t layer, int64_t m, int64_t n, int64_t k,
                    const std::vector<uint32_t>& after) {
    Op op = base(name, OpKind::Gemm, ph, layer, compute_);
    op.m = m;
    op.n = n;
    op.k = k;
    op.flops = gemm_flops(op);
    op.bytes_read = (m * k + k * n) * e_;
    op.bytes_written = m * n * e_;
    model_flops_ += op.flops;
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

  uint32_t add_attention(const char* name, Phase ph, int32_t layer, const std::vector<uint32_t>& after) {
    Op op = base(name, OpKind::Attention, ph, layer, compute_);
    op.batch = l_.micro_batch;
    op.heads = m_.heads / t_;
    op.kv_heads = m_.kv_heads / t_;
    op.q_len = op.kv_len = m_.seq_len;
    op.head_dim = m_.head_dim();
    op.causal = true;
    const double fwd = attention_flops(op);
    const int64_t q = l_.micro_batch * m_.seq_len * op.heads * op.head_dim * e_;
    const int64_t kv = l_.micro_batch * m_.seq_len * op.kv_heads * op.head_dim * e_;
    if (ph == Phase::Forward) {
      op.flops = fwd;
      op.bytes_read = q + 2 * kv;
      op.bytes_written = q;
      model_flops_ += fwd;
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

  uint32_t add_tp(const char* name, CollectiveKind kind, Phase ph, int32_t layer, double bytes,
                  const std::vector<uint32_t>& after) {
    Op op = base(name, OpKind::Collective, ph, layer, tp_);
    op.collective = kind;
    op.group = GroupKind::TP;
    op.bytes = static_cast<int64_t>(bytes);
    return p_.add(op, after);
  }

  // Activations leaving a row-parallel layer: all-reduce, or reduce-scatter under SP.
  uint32_t tp_reduce(const char* ar, const char* rs, Phase ph, int32_t layer, uint32_t after) {
    if (t_ == 1) return after;
    const double full = static_cast<double>(tokens_ * m_.hidden * e_);
    return add_tp(l_.sequence_parallel ? rs : ar,
                  l_.sequence_parallel ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, ph, layer, full,
                  deps(after));
  }
  // Activations entering a column-parallel layer under SP: all-gather the sequence.
  uint32_t tp_gather(const char* name, Phase ph, int32_t layer, uint32_t after) {
    if (t_ == 1 || !l_.sequence_parallel) return after;
    return add_tp(name, CollectiveKind::AllGather, ph, layer, static_cast<double>(tokens_ * m_.hidden * e_),
                  deps(after));
  }

  uint32_t dp_allreduce(double params, int32_t layer, uint32_t after) {
    Op op = base("dp-grad-allreduce", OpKind::Collective, Phase::Backward, layer, dp_);
    op.collective = CollectiveKind::AllReduce;
    op.group = GroupKind::DP;
    op.dtype = m_.dtype == DType::FP16 ? DType::FP16 : DType::FP32;  // fp32 main grads for bf16 (Megatron)
    op.bytes = static_cast<int64_t>(params * (dtype_bits(op.dtype) / 8));
    op.micro_batch = -1;
    return p_.add(op, deps(after));
  }

  int64_t embedding_params() const {
    return padded_vocab(m_, t_) / t_ * m_.hidden * (m_.tied_embeddings ? 1 : 2) +
           (m_.learned_positions ? m_.seq_len * m_.hidden : 0) + 2 * m_.hidden;
  }

  uint32_t forward(uint32_t prev) {
    const double act = static_cast<double>(seq_tokens_ * m_.hidden * e_);
    const int64_t h = m_.hidden;
    // Vocab-parallel embedding: each TP rank looks up its slice, then partial sums meet.
    uint32_t x = add_memory("embedding", Phase::Forward, -1, static_cast<double>(tokens_ * h * e_ + tokens_ * 8),
                            static_cast<double>(tokens_ * h * e_), 0, deps(prev));
    x = tp_reduce("embedding-allreduce", "embedding-reduce-scatter", Phase::Forward, -1, x);
    for (int32_t L = 0; L < m_.layers; ++L) {
      uint32_t ln = add_memory("layernorm-1", Phase::Forward, L, act, act, 8.0 * act / e_, deps(x));
      uint32_t in = tp_gather("allgather-qkv-input", Phase::Forward, L, ln);
      uint32_t qkv = add_gemm("qkv", Phase::Forward, L, tokens_, qkv_, h, deps(in));
      uint32_t at = add_attention("attention", Phase::Forward, L, deps(qkv));
      uint32_t proj = add_gemm("attn-proj", Phase::Forward, L, tokens_, h, m_.heads * m_.head_dim() / t_, deps(at));
      uint32_t red = tp_reduce("tp-allreduce-attn", "reduce-scatter-attn", Phase::Forward, L, proj);
      uint32_t ln2 =
          add_memory("residual-layernorm-2", Phase::Forward, L, 2 * act, 2 * act, 10.0 * act / e_, deps(red));
      uint32_t in2 = tp_gather("allgather-mlp-input", Phase::Forward, L, ln2);
      uint32_t up = add_gemm("mlp-up", Phase::Forward, L, tokens_, mlp_in_, h, deps(in2));
      const double f = static_cast<double>(tokens_ * (m_.ffn_hidden / t_) * e_);
      const bool swiglu = m_.ffn_type == FfnType::Swiglu;
      uint32_t act_op =
          add_memory(swiglu ? "swiglu" : "bias-gelu", Phase::Forward, L, swiglu ? 2 * f : f, f, 8.0 * f / e_, deps(up));
      uint32_t down = add_gemm("mlp-down", Phase::Forward, L, tokens_, h, m_.ffn_hidden / t_, deps(act_op));
      uint32_t red2 = tp_reduce("tp-allreduce-mlp", "reduce-scatter-mlp", Phase::Forward, L, down);
      x = add_memory("residual-add", Phase::Forward, L, 2 * act, act, act / e_, deps(red2));
    }
    uint32_t ln = add_memory("final-layernorm", Phase::Forward, -1, act, act, 8.0 * act / e_, deps(x));
    uint32_t in = tp_gather("allgather-logits-input", Phase::Forward, -1, ln);
    uint32_t logits = add_gemm("logits", Phase::Forward, -1, tokens_, vocab_local_, h, deps(in));
    const double lg = static_cast<double>(tokens_ * vocab_local_);
    uint32_t ce = add_memory("cross-entropy", Phase::Forward, -1, lg * e_, lg * 4, 5.0 * lg, deps(logits));
    if (t_ > 1)  // vocab-parallel cross-entropy: max, sum of exponentials and target logit
      ce =
          add_tp("cross-entropy-allreduce", CollectiveKind::AllReduce, Phase::Forward, -1, 3.0 * tokens_ * 4, deps(ce));
    return ce;
  }

  uint32_t backward(uint32_t prev, bool last_micro_batch, std::vector<uint32_t>& dp_ops) {
    const double act = static_cast<double>(seq_tokens_ * m_.hidden * e_);
    const int64_t h = m_.hidden;
    const double lg = static_cast<double>(tokens_ * vocab_local_);
    uint32_t g = add_memory("cross-entropy-backward", Phase::Backward, -1, lg * 4, lg * e_, 3.0 * lg, deps(prev));
    uint32_t dgrad = add_gemm("logits-dgrad", Phase::Backward, -1, tokens_, h, vocab_local_, deps(g));
    uint32_t wgrad = add_gemm("logits-wgrad", Phase::Backward, -1, vocab_local_, h, tokens_, deps(g));
    uint32_t d = tp_reduce("logits-grad-allreduce", "logits-grad-reduce-scatter", Phase::Backward, -1, dgrad);
    g = add_memory("final-layernorm-backward", Phase::Backward, -1, 2 * act, act, 10.0 * act / e_, deps(d, wgrad));
    for (int32_t L = static_cast<int32_t>(m_.layers) - 1; L >= 0; --L) {
      // MLP: row-parallel down projection, then column-parallel up projection whose
      // input-gradient reduction overlaps its weight-gradient GEMM.
      uint32_t dy = tp_gather("allgather-mlp-grad", Phase::Backward, L, g);
      uint32_t down_d = add_gemm("mlp-down-dgrad", Phase::Backward, L, tokens_, m_.ffn_hidden / t_, h, deps(dy));
      uint32_t down_w = add_gemm("mlp-down-wgrad", Phase::Backward, L, m_.ffn_hidden / t_, h, tokens_, deps(dy));
      const double f = static_cast<double>(tokens_ * (m_.ffn_hidden / t_) * e_);
      const bool swiglu = m_.ffn_type == FfnType::Swiglu;
      uint32_t act_b = add_memory(swiglu ? "swiglu-backward" : "gelu-backward", Phase::Backward, L,
                                  swiglu ? 3 * f : 2 * f, swiglu ? 2 * f : f, 10.0 * f / e_, deps(down_d));
      uint32_t up_d = add_gemm("mlp-up-dgrad", Phase::Backward, L, tokens_, h, mlp_in_, deps(act_b));
      uint32_t x2 = tp_gather("allgather-mlp-input-wgrad", Phase::Backward, L, act_b);
      uint32_t up_w = add_gemm("mlp-up-wgrad", Phase::Backward, L, h, mlp_in_, tokens_, deps(x2, down_w));
      uint32_t red = tp_reduce("tp-allreduce-mlp-grad", "reduce-scatter-mlp-grad", Phase::Backward, L, up_d);
      uint32_t ln2 =
          add_memory("layernorm-2-backward", Phase::Backward, L, 3 * act, 2 * act, 12.0 * act / e_, deps(red, up_w));
      // Attention block, the same pattern.
      uint32_t dy2 = tp_gather("allgather-attn-grad", Phase::Backward, L, ln2);
      uint32_t proj_d =
          add_gemm("attn-proj-dgrad", Phase::Backward, L, tokens_, m_.heads * m_.head_dim() / t_, h, deps(dy2));
      uint32_t proj_w =
          add_gemm("attn-proj-wgrad", Phase::Backward, L, h, m_.heads * m_.head_dim() / t_, tokens_, deps(dy2));
      uint32_t at = add_attention("attention-backward", Phase::Backward, L, deps(proj_d));
      uint32_t qkv_d = add_gemm("qkv-dgrad", Phase::Backward, L, tokens_, h, qkv_, deps(at));
      uint32_t x1 = tp_gather("allgather-qkv-input-wgrad", Phase::Backward, L, at);
      uint32_t qkv_w = add_gemm("qkv-wgrad", Phase::Backward, L, h, qkv_, tokens_, deps(x1, proj_w));
      uint32_t red1 = tp_reduce("tp-allreduce-qkv-grad", "reduce-scatter-qkv-grad", Phase::Backward, L, qkv_d);
      g = add_memory("layernorm-1-backward", Phase::Backward, L, 3 * act, 2 * act, 12.0 * act / e_, deps(red1, qkv_w));
      if (last_micro_batch && l_.dp > 1) {
        // The layer's gradients are final: reduce them over DP while earlier layers run backward.
        const double layer_params = static_cast<double>(params_per_rank(m_, t_) - embedding_params()) / m_.layers;
        dp_ops.push_back(dp_allreduce(layer_params, L, g));
      }
    }
    return add_memory("embedding-backward", Phase::Backward, -1, act, static_cast<double>(tokens_ * h * e_), 0,
                      deps(g));
  }

  Plan& plan_;
  Program& p_;
  const ModelConfig& m_;
  const TrainingLayout& l_;
  bool adam_;
  uint8_t compute_ = 0, tp_ = 0, dp_ = 0;
  int64_t e_ = 2, t_ = 1, tokens_ = 0, seq_tokens_ = 0, vocab_local_ = 0, mlp_in_ = 0, qkv_ = 0;
  int32_t mb_ = -1;
  double model_flops_ = 0;
};

// Strides of each parallel dimension from the placement order (innermost first).
std::array<int64_t, 5> strides(const std::string& placement, const TrainingLayout& l) {
  // index: 0 tp, 1 cp, 2 ep, 3 dp, 4 pp. EP is carved out of DP in Megatron; with
  // ep = 1 it is a dimension of size 1 here.
  const std::array<std::pair<std::string, int64_t>, 5> dims = {
      std::pair{std::string("tp"), l.tp}, {"cp", l.cp}, {"ep", 1}, {"dp", l.dp}, {"pp", l.pp}};
  std::array<int64_t, 5> out{};
  int64_t stride = 1;
  size_t start = 0;
  while (start <= placement.size()) {
    size_t dash = placement.find('-', start);
    std::string name = placement.substr(start, dash == std::string::npos ? std::string::npos : dash - start);
    for (size_t i = 0; i < dims.size(); ++i)
      if (dims[i].first == name) {
        out[i] = stride;
        stride *= dims[i].second;
      }
    if (dash == std::string::npos) break;
    start = dash + 1;
  }
  return out;
}

}  // namespace

TrainingPlan build_training_plan(const Scenario& s, const PlannerOptions& opt) {
  TrainingPlan tp;
  tp.layout = check_layout(s);
  const TrainingLayout& l = tp.layout;

  MemoryInputs mi;
  mi.tp = l.tp;
  mi.micro_batch = l.micro_batch;
  mi.sequence_parallel = l.sequence_parallel;
  mi.adam = s.training.optimizer == "adam";
  tp.memory = training_memory(s.model, mi);
  const GpuSpec& gpu = s.cluster.node.gpu;
  if (tp.memory.total() > gpu.hbm_bytes) {
    char buf[96];
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

  const auto st = strides(s.parallel.placement, l);
  for (int64_t r = 0; r < world; ++r) plan.rank_gpu[static_cast<size_t>(r)] = static_cast<int32_t>(r);
  // Ranks are numbered in placement order, so rank r sits on GPU r (node-major).
  auto rank_of = [&](int64_t tpi, int64_t dpi) { return static_cast<int32_t>(tpi * st[0] + dpi * st[3]); };
  for (int64_t d = 0; d < l.dp; ++d) {
    std::vector<int32_t> g;
    for (int64_t t = 0; t < l.tp; ++t) g.push_back(rank_of(t, d));
    plan.add_group(GroupKind::TP, std::move(g));
  }
  for (int64_t t = 0; t < l.tp; ++t) {
    std::vector<int32_t> g;
    for (int64_t d = 0; d < l.dp; ++d) g.push_back(rank_of(t, d));
    plan.add_group(GroupKind::DP, std::move(g));
  }

  // Symmetry: when every TP group is one contiguous block inside a node, all TP
  // groups sit on isomorphic copies of the node and every DP replica behaves like
  // replica 0; replica 0 meets every DP group exactly once.
  const int64_t gpn = s.cluster.node.gpus;
  const bool symmetric = opt.use_symmetry && st[0] == 1 && gpn % l.tp == 0;
  plan.mirror_of.resize(static_cast<size_t>(world));
  for (int64_t r = 0; r < world; ++r) {
    const int64_t tpi = (r / st[0]) % l.tp;
    plan.mirror_of[static_cast<size_t>(r)] = symmetric ? rank_of(tpi, 0) : static_cast<int32_t>(r);
  }

  plan.programs.emplace_back();
  Program& prog = plan.programs.back();
  prog.name = "dp-tp-rank";
  ProgramBuilder b(plan, prog, s.model, l, mi.adam);
  b.build();
  tp.model_flops_per_rank = b.model_flops();
  for (const Op& op : prog.ops)
    if (op.kind == OpKind::Gemm || op.kind == OpKind::Attention) tp.hardware_flops_per_rank += op.flops;
  return tp;
}

}  // namespace clustersim
