#include "plan/block_planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "plan/memory.h"
#include "scenarios/error.h"

namespace clustersim {
namespace {

[[noreturn]] void fail(const Scenario& s, const std::string& key, const std::string& msg) {
  throw InputError(s.mark(key), msg);
}

constexpr uint32_t kNone = ~uint32_t{0};

// One pipeline stage's program: its blocks' layers, micro-batch by micro-batch in the
// schedule's order, then the gradients' all-reduce over the ranks holding the same
// weights and the optimizer step.
class BlockStage {
 public:
  // `trains_before`: a block of an earlier stage trains, so gradients go back to it.
  // `next_first`: the next stage's first block, whose input is what this stage sends on
  // and whose input's gradient comes back (null on the last stage).
  BlockStage(Plan& plan, Program& prog, const Scenario& s, const TrainingLayout& l, int64_t stage,
             std::vector<const BlockSpec*> layers, bool trains_before, const BlockSpec* next_first)
      : plan_(plan),
        p_(prog),
        s_(s),
        l_(l),
        stage_(stage),
        layers_(std::move(layers)),
        trains_before_(trains_before),
        next_first_(next_first) {
    e_ = dtype_bits(s.model.dtype) / 8;
    compute_ = p_.stream("compute");
  }

  void build() {
    const std::vector<PipelineBlock> order = pipeline_schedule(l_.schedule, l_.pp, 1, l_.micro_batches, stage_);
    std::vector<uint32_t> wgrad_last(layers_.size(), kNone);
    for (const PipelineBlock& b : order) {
      mb_ = static_cast<int32_t>(b.micro_batch);
      if (b.forward) forward();
      else backward(b.micro_batch + 1 == l_.micro_batches, wgrad_last);
    }
    // Gradients: each layer's once its last micro-batch's weight gradient is done, over
    // the ranks of this stage (DP replicas and, with DAP, the tp shards of one sample).
    std::vector<uint32_t> reduced;
    mb_ = -1;
    const uint8_t dp = p_.stream("dp");
    const int64_t replicas = l_.dp * l_.tp;
    for (size_t i = layers_.size(); i-- > 0;) {
      if (wgrad_last[i] == kNone || replicas < 2) continue;
      reduced.push_back(coll("grad-allreduce", CollectiveKind::AllReduce, GroupKind::DP, dp, Phase::Backward,
                             static_cast<int32_t>(i), static_cast<double>(layers_[i]->params()) * 4.0,
                             {wgrad_last[i]}));
    }
    double params = 0;
    for (const BlockSpec* b : layers_)
      if (!b->frozen) params += static_cast<double>(b->params());
    if (params > 0) {
      std::vector<uint32_t> after = reduced;
      after.push_back(last_);
      // Adam over FP32 master weights, moments and gradients; the 16-bit copy written back.
      last_ = memory("optimizer-step", Phase::Optimizer, -1, params * 16.0, params * (12.0 + e_), after);
    }
  }

  double model_flops() const { return model_flops_; }
  double causal_attention_flops() const { return causal_attention_flops_; }

 private:
  Op base(const char* name, OpKind kind, Phase ph, int32_t layer, uint8_t stream) {
    return plan_.make_op(name, kind, ph, layer, mb_, stream, s_.model.dtype);
  }
  uint32_t add(const Op& op, std::vector<uint32_t> after) {
    after.erase(std::remove(after.begin(), after.end(), kNone), after.end());
    return last_ = p_.add(op, after);
  }
  uint32_t gemm(const char* name, Phase ph, int32_t layer, int64_t m, int64_t n, int64_t k, int64_t batch,
                std::vector<uint32_t> after) {
    Op op = base(name, OpKind::Gemm, ph, layer, compute_);
    op.m = m, op.n = n, op.k = k, op.batch = batch;
    op.flops = gemm_flops(op);
    op.bytes_read = (m * k + k * n) * e_ * batch;
    op.bytes_written = m * n * e_ * batch;
    model_flops_ += op.flops;
    return add(op, std::move(after));
  }
  uint32_t memory(const char* name, Phase ph, int32_t layer, double read, double written, std::vector<uint32_t> after) {
    Op op = base(name, OpKind::Memory, ph, layer, compute_);
    op.bytes_read = static_cast<int64_t>(read);
    op.bytes_written = static_cast<int64_t>(written);
    return add(op, std::move(after));
  }
  uint32_t attention(Phase ph, int32_t layer, const BlockSpec& b, int64_t rows, std::vector<uint32_t> after) {
    Op op = base(ph == Phase::Forward ? "attention" : "attention-backward", OpKind::Attention, ph, layer, compute_);
    op.batch = rows;
    op.heads = op.kv_heads = b.heads;
    op.q_len = op.kv_len = b.tokens;
    op.head_dim = b.hidden / b.heads;
    op.causal = b.causal;
    const double fwd = attention_flops(op);
    const int64_t q = rows * b.tokens * b.hidden * e_;
    op.flops = ph == Phase::Forward ? fwd : 2.5 * fwd;
    op.bytes_read = ph == Phase::Forward ? 3 * q : 5 * q;
    op.bytes_written = ph == Phase::Forward ? q : 3 * q;
    model_flops_ += ph == Phase::Forward ? fwd : 2.0 * fwd;
    if (op.causal) causal_attention_flops_ += ph == Phase::Forward ? fwd : 2.0 * fwd;
    return add(op, std::move(after));
  }
  uint32_t coll(const char* name, CollectiveKind kind, GroupKind g, uint8_t stream, Phase ph, int32_t layer,
                double bytes, std::vector<uint32_t> after) {
    Op op = base(name, OpKind::Collective, ph, layer, stream);
    op.collective = kind;
    op.group = g;
    op.bytes = static_cast<int64_t>(bytes);
    return add(op, std::move(after));
  }
  uint32_t p2p(const char* name, OpKind kind, int32_t peer, const char* stream, Phase ph, double bytes,
               std::vector<uint32_t> after) {
    Op op = base(name, kind, ph, -1, p_.stream(stream));
    op.group = GroupKind::PP;
    op.peer = peer;
    op.bytes = static_cast<int64_t>(bytes);
    const uint32_t saved = last_;
    const uint32_t id = add(op, std::move(after));
    last_ = saved;  // a send does not hold the compute stream's order
    return id;
  }

  // Rows of one block on this rank: the micro-batch's samples times the block's rows,
  // split over the tp shards (DAP); an image's height instead for convolutions.
  int64_t rows(const BlockSpec& b) const { return l_.micro_batch * b.batch / l_.tp; }
  double act_bytes(const BlockSpec& b) const {
    return b.activation_elements() * static_cast<double>(l_.micro_batch * e_) / static_cast<double>(l_.tp);
  }

  // The tensors change axis between two layers under DAP: an all-to-all over the tp group.
  uint32_t axis_change(const BlockSpec& from, const BlockSpec& to, Phase ph, int32_t layer, uint32_t x) {
    if (l_.tp < 2 || from.column == to.column) return x;
    const uint8_t st = p_.stream("tp");
    return coll(ph == Phase::Forward ? "dap-all-to-all" : "dap-all-to-all-backward", CollectiveKind::AllToAll,
                GroupKind::TP, st, ph, layer, act_bytes(ph == Phase::Forward ? to : from), {x});
  }

  uint32_t layer_forward(const BlockSpec& b, int32_t L, uint32_t x) {
    const Phase f = Phase::Forward;
    const double act = act_bytes(b);
    const int64_t r = rows(b), h = b.hidden;
    switch (b.type) {
      case BlockSpec::Type::Attention: {
        x = memory("attention-norm", f, L, act, act, {x});
        x = gemm("qkv", f, L, r * b.tokens, 3 * h, h, 1, {x});
        x = attention(f, L, b, r, {x});
        x = gemm("attention-out", f, L, r * b.tokens, h, h, 1, {x});
        return memory("residual-add", f, L, 2 * act, act, {x});
      }
      case BlockSpec::Type::Mlp: {
        x = memory("mlp-norm", f, L, act, act, {x});
        x = gemm("mlp-up", f, L, r * b.tokens, b.ffn_hidden, h, 1, {x});
        const double mid = act * static_cast<double>(b.ffn_hidden) / static_cast<double>(h);
        x = memory("activation", f, L, mid, mid, {x});
        x = gemm("mlp-down", f, L, r * b.tokens, h, b.ffn_hidden, 1, {x});
        return memory("residual-add", f, L, 2 * act, act, {x});
      }
      case BlockSpec::Type::Moe: {
        x = memory("moe-norm", f, L, act, act, {x});
        x = gemm("router", f, L, r * b.tokens, b.experts, h, 1, {x});
        // Every expert on this rank (no expert parallelism): the routed tokens, spread evenly.
        const int64_t per = std::max<int64_t>(1, r * b.tokens * b.top_k / b.experts);
        x = gemm("expert-up", f, L, per, b.ffn_hidden, h, b.experts, {x});
        x = gemm("expert-down", f, L, per, h, b.ffn_hidden, b.experts, {x});
        return memory("moe-combine", f, L, act * static_cast<double>(b.top_k + 1), act, {x});
      }
      case BlockSpec::Type::Conv: {
        // Implicit GEMM: one row per output pixel, one column per output channel.
        const int64_t out = r * (b.height / b.stride) * (b.width / b.stride);
        return gemm("conv", f, L, out, b.channels_out, b.channels_in * b.kernel * b.kernel, 1, {x});
      }
      case BlockSpec::Type::Norm:
        return memory("norm", f, L, act, act, {x});
      case BlockSpec::Type::Embedding:
        return memory("embedding", f, L, act + static_cast<double>(r * b.tokens * 8), act, {x});
    }
    return x;
  }

  // `dgrad`: the gradient must flow on to the layers before; `wgrad`: the weights train.
  uint32_t layer_backward(const BlockSpec& b, int32_t L, uint32_t g, bool dgrad, bool wgrad, uint32_t& wg) {
    const Phase B = Phase::Backward;
    const double act = act_bytes(b);
    const int64_t r = rows(b), h = b.hidden;
    wg = kNone;
    auto linear = [&](const char* dname, const char* wname, int64_t m, int64_t n, int64_t k, int64_t batch,
                      uint32_t in, bool need_dgrad) {
      // y = x W (m x k times k x n): dX = dY Wᵀ, dW = Xᵀ dY.
      if (wgrad) wg = gemm(wname, B, L, k, n, m, batch, {in, wg});
      return need_dgrad ? gemm(dname, B, L, m, k, n, batch, {in}) : in;
    };
    switch (b.type) {
      case BlockSpec::Type::Attention: {
        g = linear("attention-out-dgrad", "attention-out-wgrad", r * b.tokens, h, h, 1, g, true);
        g = attention(B, L, b, r, {g});
        g = linear("qkv-dgrad", "qkv-wgrad", r * b.tokens, 3 * h, h, 1, g, dgrad);
        return dgrad ? memory("attention-norm-backward", B, L, 2 * act, act, {g}) : g;
      }
      case BlockSpec::Type::Mlp: {
        g = linear("mlp-down-dgrad", "mlp-down-wgrad", r * b.tokens, h, b.ffn_hidden, 1, g, true);
        const double mid = act * static_cast<double>(b.ffn_hidden) / static_cast<double>(h);
        g = memory("activation-backward", B, L, 2 * mid, mid, {g});
        g = linear("mlp-up-dgrad", "mlp-up-wgrad", r * b.tokens, b.ffn_hidden, h, 1, g, dgrad);
        return dgrad ? memory("mlp-norm-backward", B, L, 2 * act, act, {g}) : g;
      }
      case BlockSpec::Type::Moe: {
        const int64_t per = std::max<int64_t>(1, r * b.tokens * b.top_k / b.experts);
        g = memory("moe-combine-backward", B, L, act * 2, act * static_cast<double>(b.top_k), {g});
        g = linear("expert-down-dgrad", "expert-down-wgrad", per, h, b.ffn_hidden, b.experts, g, true);
        g = linear("expert-up-dgrad", "expert-up-wgrad", per, b.ffn_hidden, h, b.experts, g, true);
        g = linear("router-dgrad", "router-wgrad", r * b.tokens, b.experts, h, 1, g, dgrad);
        return dgrad ? memory("moe-norm-backward", B, L, 2 * act, act, {g}) : g;
      }
      case BlockSpec::Type::Conv: {
        const int64_t out = r * (b.height / b.stride) * (b.width / b.stride);
        return linear("conv-dgrad", "conv-wgrad", out, b.channels_out, b.channels_in * b.kernel * b.kernel, 1, g,
                      dgrad);
      }
      case BlockSpec::Type::Norm:
        if (wgrad) wg = memory("norm-wgrad", B, L, act * 2, 0, {g});
        return dgrad ? memory("norm-backward", B, L, 2 * act, act, {g}) : g;
      case BlockSpec::Type::Embedding:
        // The table's gradient: scatter-add of each position's gradient into its row.
        if (wgrad) wg = memory("embedding-backward", B, L, act * 2, act, {g});
        return g;
    }
    return g;
  }

  void forward() {
    uint32_t x = last_;
    if (stage_ > 0) {
      const uint32_t recv = p2p("pp-recv-activation", OpKind::Recv, static_cast<int32_t>(stage_ - 1), "pp-recv-fwd",
                                Phase::Forward, act_bytes(*layers_.front()), {});
      x = memory("pp-activation-in", Phase::Forward, 0, 0, 0, {recv, last_});
    }
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (i > 0) x = axis_change(*layers_[i - 1], *layers_[i], Phase::Forward, static_cast<int32_t>(i), x);
      x = layer_forward(*layers_[i], static_cast<int32_t>(i), x);
    }
    if (stage_ + 1 < l_.pp)
      p2p("pp-send-activation", OpKind::Send, static_cast<int32_t>(stage_ + 1), "pp-send-fwd", Phase::Forward,
          act_bytes(*next_first_), {x});
    last_ = x;
  }

  void backward(bool last_micro_batch, std::vector<uint32_t>& wgrad_last) {
    // A stage with nothing trained here or before it has no backward (a frozen encoder).
    if (!trains_before_ && !has_trained_layer()) return;
    uint32_t g = last_;
    if (stage_ + 1 < l_.pp) {
      const uint32_t recv = p2p("pp-recv-gradient", OpKind::Recv, static_cast<int32_t>(stage_ + 1), "pp-recv-bwd",
                                Phase::Backward, act_bytes(*next_first_), {});
      g = memory("pp-gradient-in", Phase::Backward, -1, 0, 0, {recv, last_});
    } else if (stage_ + 1 == l_.pp) {
      g = memory("loss-backward", Phase::Backward, -1, act_bytes(*layers_.back()), act_bytes(*layers_.back()), {g});
    }
    bool needed = trains_before_;  // a gradient is wanted below layer i
    std::vector<bool> need(layers_.size());
    for (size_t i = 0; i < layers_.size(); ++i) {
      need[i] = needed;
      needed = needed || !layers_[i]->frozen;
    }
    for (size_t i = layers_.size(); i-- > 0;) {
      const BlockSpec& b = *layers_[i];
      if (!need[i] && b.frozen) break;  // nothing below trains
      uint32_t wg = kNone;
      g = layer_backward(b, static_cast<int32_t>(i), g, need[i], !b.frozen, wg);
      if (wg != kNone && last_micro_batch) wgrad_last[i] = wg;
      if (i > 0 && need[i]) g = axis_change(*layers_[i - 1], b, Phase::Backward, static_cast<int32_t>(i), g);
    }
    if (stage_ > 0 && trains_before_)
      p2p("pp-send-gradient", OpKind::Send, static_cast<int32_t>(stage_ - 1), "pp-send-bwd", Phase::Backward,
          act_bytes(*layers_.front()), {g});
    last_ = g;
  }

  bool has_trained_layer() const {
    for (const BlockSpec* b : layers_)
      if (!b->frozen) return true;
    return false;
  }

  Plan& plan_;
  Program& p_;
  const Scenario& s_;
  const TrainingLayout& l_;
  int64_t stage_;
  std::vector<const BlockSpec*> layers_;
  bool trains_before_;
  const BlockSpec* next_first_;
  int64_t e_ = 2;
  uint8_t compute_ = 0;
  int32_t mb_ = -1;
  uint32_t last_ = kNone;
  double model_flops_ = 0;
  double causal_attention_flops_ = 0;
};

}  // namespace

std::vector<int64_t> block_stages(const std::vector<BlockSpec>& blocks, int64_t pp) {
  std::vector<int64_t> out;
  bool given = false;
  for (const BlockSpec& b : blocks) given = given || b.stage >= 0;
  if (given) {
    // A block without a stage goes where the block before it went (the first: stage 0).
    for (const BlockSpec& b : blocks) out.push_back(b.stage >= 0 ? b.stage : out.empty() ? 0 : out.back());
    return out;
  }
  double total = 0;
  for (const BlockSpec& b : blocks) total += static_cast<double>(b.count) * std::max(1.0, b.forward_flops());
  double seen = 0;
  for (const BlockSpec& b : blocks) {
    const double mid = seen + 0.5 * static_cast<double>(b.count) * std::max(1.0, b.forward_flops());
    out.push_back(std::min<int64_t>(pp - 1, static_cast<int64_t>(mid / total * static_cast<double>(pp))));
    seen += static_cast<double>(b.count) * std::max(1.0, b.forward_flops());
  }
  return out;
}

TrainingPlan build_block_plan(const Scenario& s, const PlannerOptions& opt) {
  const ParallelConfig& p = s.parallel;
  const std::vector<BlockSpec>& blocks = s.model.blocks;
  // What the block planner does not model is refused, not ignored.
  for (const char* key : {"parallel.cp",
                          "parallel.ep",
                          "parallel.sequence_parallel",
                          "parallel.virtual_stages",
                          "parallel.tp_comm_overlap",
                          "parallel.zero3_param_gather",
                          "parallel.zero3_grad_sync",
                          "parallel.fsdp_param_dtype",
                          "parallel.fsdp_reduce_dtype",
                          "parallel.fp8_param_gather",
                          "parallel.tp_overlap_reduce_scatter",
                          "parallel.tp_overlap_proj_sms",
                          "parallel.tp_overlap_fc2_sms",
                          "parallel.tp_overlap_sm_margin",
                          "parallel.tp_overlap_qkv_dgrad_sms",
                          "parallel.tp_overlap_fc1_dgrad_sms",
                          "parallel.tp_overlap_qkv_wgrad_sms",
                          "parallel.tp_overlap_fc1_wgrad_sms",
                          "parallel.tp_async_grad_reduce",
                          "training.defer_embedding_wgrad",
                          "training.wgrad_deferral_limit",
                          "training.fp8_attention",
                          "training.fp8_recipe",
                          "training.recompute_num_layers",
                          "parallel.fsdp_version"})
    if (s.marks.count(key)) fail(s, key, std::string(key) + " does not apply to model.blocks, expected it left out");
  if (p.zero_stage != 0) fail(s, "parallel.zero_stage", "model.blocks trains with plain data parallelism, expected zero_stage 0");
  if (s.training.recompute != "none") fail(s, "training.recompute", "model.blocks keeps its activations, expected recompute none");
  if (s.model.dtype == DType::FP8 || s.model.dtype == DType::INT8 || s.model.dtype == DType::INT4)
    fail(s, "model.dtype", "model.blocks trains in bf16, fp16 or fp32, expected one of them");
  if (s.training.framework != "megatron")
    fail(s, "training.framework", "model.blocks has one stack (fused kernels, 16-bit weights), expected megatron");
  TrainingPlan tp;
  TrainingLayout& l = tp.layout;
  const int64_t gpus = s.gpus();
  l.tp = p.tp;
  l.pp = p.pp;
  l.dp = p.dp > 0 ? p.dp : gpus / (p.tp * p.pp);
  l.micro_batch = p.micro_batch;
  l.schedule = p.schedule;
  if (l.dp < 1 || l.dp * l.tp * l.pp != gpus)
    fail(s, "parallel", "dp " + std::to_string(l.dp) + " x tp " + std::to_string(l.tp) + " x pp " +
                            std::to_string(l.pp) + " must equal the cluster's " + std::to_string(gpus) + " GPUs");
  l.global_batch = s.training.global_batch > 0 ? s.training.global_batch : l.dp * l.micro_batch * l.pp;
  if (l.global_batch % (l.dp * l.micro_batch) != 0)
    fail(s, "training.global_batch", "training.global_batch must be a multiple of dp x micro_batch (" +
                                         std::to_string(l.dp * l.micro_batch) + ")");
  l.micro_batches = l.global_batch / (l.dp * l.micro_batch);
  // DAP splits each sample's rows over the tp GPUs.
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockSpec& b = blocks[i];
    // A micro-batch's tensors stay far inside the int64 shapes and byte counts.
    if (b.activation_elements() * static_cast<double>(l.micro_batch) *
            static_cast<double>(std::max<int64_t>({1, b.ffn_hidden, b.channels_out, b.experts, 4 * b.hidden})) >
        1e18)
      fail(s, "parallel.micro_batch", "model.blocks[" + std::to_string(i) + "] with micro_batch " +
                                          std::to_string(l.micro_batch) + " passes 10^18 elements, expected smaller");
    const int64_t rows = b.type == BlockSpec::Type::Conv ? 0 : l.micro_batch * b.batch;
    if (l.tp > 1 && b.type == BlockSpec::Type::Conv)
      fail(s, "parallel.tp", "model.blocks[" + std::to_string(i) + "] is a convolution: splitting an image over "
                             "GPUs (spatial parallelism) is not modelled, expected tp 1");
    if (l.tp > 1 && rows % l.tp != 0)
      fail(s, "parallel.tp", "model.blocks[" + std::to_string(i) + "] has " + std::to_string(rows) +
                             " rows per micro-batch, not divisible by tp " + std::to_string(l.tp));
  }
  {
    // The plan's size is counted before it is built: layers x micro-batches.
    int64_t layers = 0;
    for (const BlockSpec& b : blocks) layers += b.count;
    if (!s.allow_large && static_cast<double>(layers) * static_cast<double>(l.micro_batches) > 4e6)
      fail(s, "training.global_batch", std::to_string(layers) + " layers x " + std::to_string(l.micro_batches) +
                                           " micro-batches is past the budget of 4,000,000 layer passes "
                                           "(--allow-large lifts it), expected fewer");
  }
  const std::vector<int64_t> stage_of = block_stages(blocks, l.pp);
  std::vector<std::vector<const BlockSpec*>> stages(static_cast<size_t>(l.pp));
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (stage_of[i] >= l.pp)
      fail(s, "model.blocks", "model.blocks[" + std::to_string(i) + "] is on stage " + std::to_string(stage_of[i]) +
                                  ", past parallel.pp " + std::to_string(l.pp));
    if (i > 0 && stage_of[i] < stage_of[i - 1])
      fail(s, "model.blocks", "model.blocks[" + std::to_string(i) + "] is on an earlier stage than the block "
                              "before it, expected stages in order");
    for (int64_t c = 0; c < blocks[i].count; ++c) stages[static_cast<size_t>(stage_of[i])].push_back(&blocks[i]);
  }
  for (int64_t st = 0; st < l.pp; ++st)
    if (stages[static_cast<size_t>(st)].empty())
      fail(s, "model.blocks", "pipeline stage " + std::to_string(st) + " has no blocks, expected every stage used");

  // Memory per stage: 16-bit weights, FP32 gradients, master weights and Adam moments for
  // what trains; the activations of the micro-batches in flight (1F1B: pp - stage).
  const double e = dtype_bits(s.model.dtype) / 8.0;
  for (int64_t st = 0; st < l.pp; ++st) {
    MemoryBreakdown mb;
    double trained = 0, all = 0, acts = 0;
    for (const BlockSpec* b : stages[static_cast<size_t>(st)]) {
      all += static_cast<double>(b->params());
      if (!b->frozen) trained += static_cast<double>(b->params());
      // Inputs kept for the backward: the block's input and its widest inner tensor.
      const double wide = b->type == BlockSpec::Type::Mlp || b->type == BlockSpec::Type::Moe
                              ? static_cast<double>(b->ffn_hidden) / static_cast<double>(std::max<int64_t>(1, b->hidden))
                              : b->type == BlockSpec::Type::Attention ? 4.0 : 1.0;
      if (!b->frozen) acts += b->activation_elements() * (1.0 + wide) * e * static_cast<double>(l.micro_batch) /
                              static_cast<double>(l.tp);
    }
    const int64_t in_flight = l.schedule == "gpipe" ? l.micro_batches : std::min<int64_t>(l.micro_batches, l.pp - st);
    mb.weights = all * e;
    mb.gradients = trained * 4.0;
    mb.optimizer = trained * 12.0;
    mb.activations = acts * static_cast<double>(in_flight);
    const int communicators = (l.tp > 1) + (l.dp * l.tp > 1) + (l.pp > 1);
    mb.reserved = s.memory_reserve_bytes >= 0 ? static_cast<double>(s.memory_reserve_bytes)
                                             : default_memory_reserve(mb, communicators);
    tp.stage_memory.push_back(mb);
    if (mb.total() > tp.memory.total()) tp.memory = mb;
  }

  Plan& plan = tp.plan;
  const int64_t world = l.dp * l.tp * l.pp;
  plan.world_size = static_cast<int32_t>(world);
  plan.rank_program.assign(static_cast<size_t>(world), 0);
  plan.rank_gpu.resize(static_cast<size_t>(world));
  std::array<int32_t, kGroupKinds> none;
  none.fill(-1);
  plan.rank_groups.assign(static_cast<size_t>(world), none);
  auto rank_of = [&](int64_t t, int64_t d, int64_t st) { return static_cast<int32_t>(t + l.tp * (d + l.dp * st)); };
  for (int64_t r = 0; r < world; ++r) plan.rank_gpu[static_cast<size_t>(r)] = static_cast<int32_t>(r);
  plan.mirror_of.resize(static_cast<size_t>(world));
  for (int64_t st = 0; st < l.pp; ++st)
    for (int64_t d = 0; d < l.dp; ++d)
      for (int64_t t = 0; t < l.tp; ++t) {
        const int32_t r = rank_of(t, d, st);
        plan.rank_program[static_cast<size_t>(r)] = static_cast<uint32_t>(st);
        plan.mirror_of[static_cast<size_t>(r)] = opt.use_symmetry ? rank_of(0, 0, st) : r;
      }
  // Groups: TP (the shards of a sample), DP (every rank of a stage: the same weights), PP.
  for (int64_t st = 0; st < l.pp; ++st) {
    for (int64_t d = 0; d < l.dp && l.tp > 1; ++d) {
      std::vector<int32_t> g;
      for (int64_t t = 0; t < l.tp; ++t) g.push_back(rank_of(t, d, st));
      plan.add_group(GroupKind::TP, std::move(g));
    }
    if (l.dp * l.tp > 1) {
      std::vector<int32_t> g;
      for (int64_t d = 0; d < l.dp; ++d)
        for (int64_t t = 0; t < l.tp; ++t) g.push_back(rank_of(t, d, st));
      plan.add_group(GroupKind::DP, std::move(g));
    }
  }
  for (int64_t d = 0; d < l.dp && l.pp > 1; ++d)
    for (int64_t t = 0; t < l.tp; ++t) {
      std::vector<int32_t> g;
      for (int64_t st = 0; st < l.pp; ++st) g.push_back(rank_of(t, d, st));
      plan.add_group(GroupKind::PP, std::move(g));
    }
  double flops = 0, causal_attention = 0;
  for (int64_t st = 0; st < l.pp; ++st) {
    bool before = false;
    for (int64_t o = 0; o < st; ++o)
      for (const BlockSpec* b : stages[static_cast<size_t>(o)]) before = before || !b->frozen;
    plan.programs.emplace_back();
    Program& prog = plan.programs.back();
    prog.name = l.pp > 1 ? "stage-" + std::to_string(st) : "rank";
    const BlockSpec* next = st + 1 < l.pp ? stages[static_cast<size_t>(st + 1)].front() : nullptr;
    BlockStage b(plan, prog, s, l, st, stages[static_cast<size_t>(st)], before, next);
    b.build();
    flops += b.model_flops() * static_cast<double>(l.dp * l.tp);
    causal_attention += b.causal_attention_flops() * static_cast<double>(l.dp * l.tp);
  }
  tp.model_flops_per_rank = tp.hardware_flops_per_rank = flops / static_cast<double>(world);
  tp.causal_attention_flops_per_rank = causal_attention / static_cast<double>(world);
  if (opt.check_memory) {
    for (int64_t r = 0; r < world; ++r) {
      const uint32_t st = plan.rank_program[static_cast<size_t>(r)];
      const GpuSpec& gpu = s.cluster.node_at(static_cast<int>(r / s.cluster.node.gpus)).gpu;
      const MemoryBreakdown& need = tp.stage_memory[st];
      if (need.total() > gpu.hbm_bytes) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "layout does not fit in memory: %.1f GiB per GPU needed on stage %u, %.1f GiB "
                                       "available on %s",
                      need.total() / (1 << 30), st, gpu.hbm_bytes / (1 << 30), gpu.name.c_str());
        fail(s, "parallel", std::string(buf) + " (" + need.describe() + ")");
      }
    }
  }
  return tp;
}

}  // namespace clustersim
