#include "plan/serving_plan.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

namespace clustersim {

int64_t ServingShape::stage_layers(int64_t stage) const {
  return model.layers / pp + (stage < model.layers % pp ? 1 : 0);
}

int64_t ServingShape::kv_heads_local() const { return std::max<int64_t>(1, model.kv_heads / tp); }

double ServingShape::kv_layer_bytes() const {
  // Multi-head latent attention caches its latent and the shared rotary key, whole on every
  // TP rank (vLLM's and TensorRT-LLM's MLA backends).
  if (model.is_mla())
    return static_cast<double>(model.mla.kv_lora_rank + model.mla.rope_head_dim) * dtype_bits(kv_dtype) / 8.0;
  return 2.0 * static_cast<double>(kv_heads_local() * model.head_dim()) * dtype_bits(kv_dtype) / 8.0;
}

DType ServingShape::gemm_dtype() const {
  return (weight_dtype == DType::FP8 || weight_dtype == DType::INT8) ? weight_dtype : model.dtype;
}

namespace {

// TurboMind v0.1.0a1's decode-attention launch (LlamaDecoderSelfAttentionLayer.cc and
// invokeDecoderMultiheadAttention in decoder_multihead_attention.cu): 4 query heads a block
// where the KV group is a multiple of 4, else 2, else 1 (1 over an INT8 cache); the context cut into 1,024-token
// slices, split over ceil(16 / average batch) blocks a head at most (average batch = the
// contexts' sum over the longest); a grid of heads / per-block x batch x split.
void turbomind_decode_grid(const ServingShape& sh, const IterationBatch& b, Op& op) {
  const int64_t heads = std::max<int64_t>(1, sh.model.heads / sh.tp);
  const int64_t group = std::max<int64_t>(1, heads / sh.kv_heads_local());
  // An INT8 cache runs the one-head kernel (quant_policy kCacheKVInt8).
  const int64_t per_block = sh.kv_dtype == DType::INT8 ? 1 : group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1;
  const int64_t seqs = std::max<int64_t>(1, b.decode_seqs);
  const int64_t longest =
      std::max<int64_t>(1, b.decode_max_context > 0 ? b.decode_max_context : b.decode_context / seqs);
  constexpr int64_t kSlice = 1024, kMaxSplit = 16;
  const double average_batch = std::max(1.0, static_cast<double>(b.decode_context) / static_cast<double>(longest));
  const int64_t max_split = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(kMaxSplit / average_batch)));
  const int64_t slices = (longest + kSlice - 1) / kSlice;
  const int64_t split = std::min(max_split, slices);
  op.access = MemAccess::CudaCoreDecode;
  op.heads = heads;
  op.kv_heads = sh.kv_heads_local();
  op.head_dim = sh.model.head_dim();
  op.k = per_block;
  op.kv_len = b.decode_context;
  op.q_len = std::min(longest, (slices + split - 1) / split * kSlice);
  op.n = heads / per_block * seqs * split;
}

}  // namespace

std::vector<Op> iteration_attention_ops(const ServingShape& sh, const IterationBatch& b) {
  const ModelConfig& m = sh.model;
  const double kv_e = dtype_bits(sh.kv_dtype) / 8.0;
  std::vector<Op> ops;
  for (const PrefillChunk& c : b.prefill) {
    Op op;
    op.kind = OpKind::Attention;
    op.dtype = sh.fp8_context_attention ? DType::FP8 : m.dtype;
    op.heads = m.heads / sh.tp;
    op.kv_heads = m.is_mla() ? op.heads : sh.kv_heads_local();  // MLA's prefill: keys and values up-projected
    op.q_len = c.tokens;
    op.kv_len = c.past + c.tokens;
    op.head_dim = m.attn_head_dim();
    op.causal = true;
    // The chunk's queries are the last of its keys (the causal mask aligned at the bottom
    // right): query i sees the past and the chunk's first i + 1 tokens, q · (past + q / 2)
    // score pairs, where half of q · (past + q) would count q · past / 2 short.
    op.flops = attention_flops(op) * (static_cast<double>(c.past) + 0.5 * static_cast<double>(c.tokens)) /
               (0.5 * static_cast<double>(op.kv_len));
    const double q = static_cast<double>(c.tokens * op.heads * op.head_dim) * (dtype_bits(op.dtype) / 8.0);
    op.bytes_read = static_cast<int64_t>(q + static_cast<double>(2 * op.kv_len * op.kv_heads * op.head_dim) * kv_e);
    op.bytes_written = static_cast<int64_t>(q);
    ops.push_back(op);
  }
  if (b.decode_context > 0) {
    // One paged decode-attention kernel streams every decoding request's cached K and V.
    Op op;
    op.kind = OpKind::Memory;
    op.dtype = m.dtype;
    op.bytes_read = static_cast<int64_t>(static_cast<double>(b.decode_context) * sh.kv_layer_bytes());
    if (sh.turbomind_decode) turbomind_decode_grid(sh, b, op);
    ops.push_back(op);
  }
  return ops;
}

namespace {

class IterationBuilder {
 public:
  IterationBuilder(Plan& plan, Program& prog, const ServingShape& sh, const IterationBatch& b, int64_t stage)
      : plan_(plan), p_(prog), sh_(sh), m_(sh.model), b_(b), stage_(stage) {
    e_ = dtype_bits(m_.dtype) / 8.0;
    w_ = dtype_bits(sh.weight_dtype) / 8.0;
    compute_ = p_.stream("compute");
    if (sh.tp > 1) tp_ = p_.stream("tp");
    if (sh.pp > 1) pp_ = p_.stream("pp");
  }

  void build(bool with_attention) {
    const double T = static_cast<double>(b_.tokens);
    const double h = static_cast<double>(m_.hidden);
    const int64_t tp = sh_.tp;
    if (stage_ > 0) {
      p2p(OpKind::Recv, "recv_activations", static_cast<int32_t>(sh_.pp - 1));  // the previous stage
    } else {
      memory("embedding", T * h * e_, T * h * e_, -1);
    }
    const auto attention = iteration_attention_ops(sh_, b_);
    const int64_t first = first_layer();
    const int64_t hd = m_.head_dim();
    const int64_t qkv_out = (m_.heads + 2 * m_.kv_heads) * hd / tp;
    const int64_t attn_out = m_.heads * hd / tp;
    const int64_t ffn = m_.ffn_hidden / tp;
    const int64_t mlp_in = m_.mlp_matrices() == 3 ? 2 * ffn : ffn;
    const double rope = T * static_cast<double>((m_.heads + m_.kv_heads) * hd / tp) * e_;
    for (int64_t i = 0; i < sh_.stage_layers(stage_); ++i) {
      const auto layer = static_cast<int32_t>(first + i);
      memory("add_norm", 2 * T * h * e_, 2 * T * h * e_, layer);
      if (m_.is_mla()) {
        mla(layer, attention, with_attention);
      } else {
        gemm("qkv", b_.tokens, qkv_out, m_.hidden, layer);
        memory("rotary", rope, rope, layer);
        if (with_attention)
          for (Op op : attention) {
            op.name = plan_.intern(op.kind == OpKind::Attention ? "prefill_attention" : "decode_attention");
            add(op, compute_, layer);
          }
      }
      gemm("attn_out", b_.tokens, m_.hidden, m_.is_mla() ? m_.attn_out_width() / tp : attn_out, layer);
      all_reduce("attn_all_reduce", T * h * e_, layer);
      memory("add_norm", 2 * T * h * e_, 2 * T * h * e_, layer);
      if (m_.moe_layer(layer)) {
        moe(layer);
      } else {
        gemm("mlp_in", b_.tokens, mlp_in, m_.hidden, layer);
        const double f = T * static_cast<double>(ffn) * e_;
        memory("activation", m_.mlp_matrices() == 3 ? 2 * f : f, f, layer);
        gemm("mlp_out", b_.tokens, m_.hidden, ffn, layer);
      }
      all_reduce("mlp_all_reduce", T * h * e_, layer);
    }
    if (stage_ < sh_.pp - 1) {
      p2p(OpKind::Send, "send_activations", 1);
      return;
    }
    memory("final_norm", 2 * T * h * e_, T * h * e_, -1);
    if (b_.emitting > 0) {
      // The output layer keeps the model's 16-bit weights under FP8, INT8 or INT4 weight
      // quantization (ModelOpt's default configurations leave `*lm_head*` unquantized; vLLM's
      // ParallelLMHead is not a quantized linear), so its GEMM streams two bytes a weight.
      // TensorRT-LLM marks the logits FP32 (logits_dtype), its GEMM's epilogue writing them.
      const double logit_e = sh_.sampler == ServingShape::Sampler::Trtllm ? 4.0 : e_;
      gemm("logits", b_.emitting, m_.vocab / tp, m_.hidden, -1, false, logit_e);
      if (tp > 1) {
        Op op;
        op.kind = OpKind::Collective;
        op.collective = CollectiveKind::AllGather;
        op.group = GroupKind::TP;
        op.bytes = static_cast<int64_t>(static_cast<double>(b_.emitting * m_.vocab) * logit_e);
        op.name = plan_.intern("logits_gather");
        add(op, tp_, -1);
      }
      sampler(logit_e);
    }
  }

 private:
  int64_t first_layer() const {
    int64_t l = 0;
    for (int64_t s = 0; s < stage_; ++s) l += sh_.stage_layers(s);
    return l;
  }

  // Every op waits for the one before it: one stream of kernels per GPU.
  void add(Op op, uint8_t stream, int32_t layer) {
    op.stream = stream;
    op.layer = layer;
    op.phase = Phase::Forward;
    last_ = have_last_ ? p_.add(op, {last_}) : p_.add(op);
    have_last_ = true;
  }

  // `out_e`: bytes an output element, where it is not the model's dtype.
  void gemm(const char* name, int64_t m, int64_t n, int64_t k, int32_t layer, bool quantized = true,
            double out_e = 0) {
    if (m <= 0 || n <= 0) return;
    Op op;
    op.kind = OpKind::Gemm;
    op.name = plan_.intern(name);
    op.dtype = quantized ? sh_.gemm_dtype() : m_.dtype;
    op.m = m;
    op.n = n;
    op.k = k;
    op.flops = gemm_flops(op);
    const double w = quantized ? w_ : e_;
    op.bytes_read = static_cast<int64_t>(static_cast<double>(m * k) * e_ + static_cast<double>(k * n) * w);
    op.bytes_written = static_cast<int64_t>(static_cast<double>(m * n) * (out_e > 0 ? out_e : e_));
    add(op, compute_, layer);
  }

  // The engine's passes over every emitting row of the whole (gathered) vocabulary, greedy
  // requests, on every rank of a TP group (docs/model.md, "Sampling on the logits"); `logit_e`
  // the bytes of an entry as the output layer wrote it.
  //   TensorRT-LLM's decoder (DynamicDecodeLayer in TopKTopP mode, as trtllm-bench's requests
  //   run it) on FP32 logits: the penalty layer copies the row into its workspace
  //   (batchApplyPenalty: a read and a write, whatever the penalties), the sampling layer's
  //   softmax makes three passes that each read and write it (addBiasSoftMax), top-k with
  //   k = 1 copies it once more and reads the copy (topKStage1).
  //   vLLM V0's Sampler: the cast to FP32, the in-place temperature division (1 for greedy, still
  //   run), torch.softmax and torch.log_softmax (each reads its FP32 input three times, for the
  //   maximum, the sum and the output, and writes it once) and the argmax over the log-probs.
  //   vLLM V1's Sampler with every request greedy: the cast to FP32 and the argmax.
  void sampler(double logit_e) {
    const double rows = static_cast<double>(b_.emitting) * static_cast<double>(m_.vocab);
    const double f = rows * 4.0;
    switch (sh_.sampler) {
      case ServingShape::Sampler::Trtllm:
        memory("decoder_penalty", f, f, -1);
        memory("decoder_softmax", 3 * f, 3 * f, -1);
        memory("decoder_topk", 2 * f, f, -1);
        break;
      case ServingShape::Sampler::VllmV0:
        to_float(rows, logit_e);
        memory("sampler_temperature", f, f, -1);
        memory("sampler_softmax", 3 * f, f, -1);
        memory("sampler_log_softmax", 3 * f, f, -1);
        memory("sampler_argmax", f, 0, -1);
        break;
      case ServingShape::Sampler::VllmV1:
        to_float(rows, logit_e);
        memory("sampler_argmax", f, 0, -1);
        break;
      case ServingShape::Sampler::None:
        break;
    }
  }

  // `logits.to(torch.float)`: nothing for FP32 logits, else PyTorch's copy with a dtype change,
  // a dynamic-cast loop (MemAccess::DynamicCast): its stream and issue slots an element beyond it
  // (measured with the samplers on one H200: calibrate/measurements/sampler-h200-2026-12-04).
  void to_float(double entries, double logit_e) {
    if (logit_e >= 4) return;
    memory("sampler_to_float", entries * logit_e, entries * 4.0, -1);
    p_.ops[last_].access = MemAccess::DynamicCast;
    p_.ops[last_].m = static_cast<int64_t>(entries);
  }

  // A mixture-of-experts layer as TensorRT-LLM's and vLLM's fused MoE kernels run it under
  // tensor parallelism (each GPU holds 1/tp of every expert): the router's GEMM, the tokens
  // permuted into expert order, one grouped GEMM a matrix over the experts the batch reaches,
  // the activation, and the weighted sum back into token order. T tokens choosing top_k of E
  // experts (taken as uniform and independent) reach E·(1 − (1 − k/E)^T) experts, whose
  // weights the grouped GEMM streams: a token's decode step reads k experts, a full batch all
  // of them. Shared experts run as a dense MLP on every token.
  void moe(int32_t layer) {
    const MoeConfig& moe = m_.moe;
    const double T = static_cast<double>(b_.tokens);
    const double h = static_cast<double>(m_.hidden);
    const double E = static_cast<double>(moe.experts), k = static_cast<double>(moe.top_k);
    const int64_t fe = moe.expert_ffn_hidden / sh_.tp;
    const int64_t in = m_.mlp_matrices() == 3 ? 2 * fe : fe;
    gemm("router", b_.tokens, moe.experts, m_.hidden, layer, false);
    const double routed = T * k;  // token-expert pairs
    // The routing's own kernels between the router's GEMM and the permutation: the top-k
    // softmax over the FP32 logits (scales, experts and source rows out), the sort of the
    // token-expert pairs by expert, and each expert's first row in that order.
    memory("moe_routing", T * E * 4.0 + routed * 12.0, routed * 20.0, layer);
    p_.ops[last_].k = 3;
    memory("moe_permute", routed * h * e_, routed * h * e_, layer);
    const double reached = std::max(1.0, E * (1.0 - std::pow(1.0 - k / E, T)));
    expert_gemm("expert_in", routed, reached, in, m_.hidden, layer);
    const double f = routed * static_cast<double>(fe) * e_;
    memory("expert_activation", m_.mlp_matrices() == 3 ? 2 * f : f, f, layer);
    expert_gemm("expert_out", routed, reached, m_.hidden, fe, layer);
    memory("moe_unpermute", routed * h * e_, T * h * e_, layer);
    if (moe.shared_experts > 0) {
      const int64_t fs = moe.shared_experts * moe.expert_ffn_hidden / sh_.tp;
      gemm("shared_expert_in", b_.tokens, m_.mlp_matrices() == 3 ? 2 * fs : fs, m_.hidden, layer);
      const double g = T * static_cast<double>(fs) * e_;
      memory("shared_expert_activation", m_.mlp_matrices() == 3 ? 2 * g : g, g, layer);
      gemm("shared_expert_out", b_.tokens, m_.hidden, fs, layer);
    }
  }

  // Multi-head latent attention as vLLM's and TensorRT-LLM's MLA backends serve it
  // (docs/model.md, "Multi-head latent attention"): the down projections of every token (one
  // replicated GEMM to the query's bottleneck, the latent and the rotary key), the latents'
  // norms, the query's up projection (column-parallel), the rotary part. A prefill
  // up-projects its context's latents to every head's key and value and runs attention of
  // qk + rope query/key heads and v value heads; a decode token's query is absorbed into
  // the latent space (its non-rotary part times each head's key up-projection), attends over
  // the cached latents as one key/value head shared by the rank's heads, and its output is
  // projected out of the latent by each head's value up-projection.
  void mla(int32_t layer, const std::vector<Op>& attention, bool with_attention) {
    const MlaConfig& a = m_.mla;
    const int64_t tp = sh_.tp, n = m_.heads / tp, qk = a.qk_head_dim + a.rope_head_dim;
    const double T = static_cast<double>(b_.tokens);
    gemm("mla_down", b_.tokens, a.q_lora_rank + a.kv_lora_rank + a.rope_head_dim, m_.hidden, layer);
    const double lat = T * static_cast<double>(a.q_lora_rank + a.kv_lora_rank) * e_;
    memory("mla_latent_norms", lat, lat, layer);
    if (a.q_lora_rank > 0) gemm("q_up", b_.tokens, n * qk, a.q_lora_rank, layer);
    const double rot = T * static_cast<double>((n + 1) * a.rope_head_dim) * e_;
    memory("rotary", rot, rot, layer);
    int64_t prefill = 0, context = 0;
    for (const PrefillChunk& c : b_.prefill) prefill += c.tokens, context += c.past + c.tokens;
    const int64_t decode = b_.tokens - prefill;
    if (context > 0) gemm("kv_up", context, n * (a.qk_head_dim + a.v_head_dim), a.kv_lora_rank, layer);
    if (decode > 0) batched_gemm("q_absorb", decode, a.kv_lora_rank, a.qk_head_dim, n, layer);
    if (with_attention)
      for (Op op : attention) {
        op.name = plan_.intern(op.kind == OpKind::Attention ? "prefill_attention" : "decode_attention");
        add(op, compute_, layer);
      }
    if (decode > 0) batched_gemm("v_absorb", decode, a.v_head_dim, a.kv_lora_rank, n, layer);
  }
  // `batch` GEMMs of m × n × k, each with its own weights (a head's slice of an up
  // projection): torch.bmm over the heads.
  void batched_gemm(const char* name, int64_t m, int64_t n, int64_t k, int64_t batch, int32_t layer) {
    Op op;
    op.kind = OpKind::Gemm;
    op.name = plan_.intern(name);
    op.dtype = m_.dtype;
    op.m = m;
    op.n = n;
    op.k = k;
    op.batch = batch;
    op.flops = gemm_flops(op);
    op.bytes_read = static_cast<int64_t>(static_cast<double>(batch * (m * k + k * n)) * e_);
    op.bytes_written = static_cast<int64_t>(static_cast<double>(batch * m * n) * e_);
    add(op, compute_, layer);
  }

  // A grouped GEMM over the `experts` (a mean, fractional) the batch reaches, n × k weights
  // each, and `rows` routed rows in all: every reached expert's weights are read once, and
  // the tile model sees each expert's own rows, its count of the iteration's tokens that
  // chose it (the op's group fields; cost_models/compute.cc).
  void expert_gemm(const char* name, double rows, double experts, int64_t n, int64_t k, int32_t layer) {
    Op op;
    op.kind = OpKind::Gemm;
    op.name = plan_.intern(name);
    op.dtype = sh_.gemm_dtype();
    op.batch = static_cast<int64_t>(std::llround(experts));
    op.m = static_cast<int64_t>(std::ceil(rows / static_cast<double>(op.batch)));
    op.n = n;
    op.k = k;
    op.flops = 2.0 * rows * static_cast<double>(n) * static_cast<double>(k);
    op.bytes_read =
        static_cast<int64_t>(rows * static_cast<double>(k) * e_ + experts * static_cast<double>(k * n) * w_);
    op.bytes_written = static_cast<int64_t>(rows * static_cast<double>(n) * e_);
    const MoeConfig& moe = m_.moe;
    if (moe.experts <= UINT16_MAX && moe.top_k <= UINT8_MAX && b_.tokens <= INT32_MAX) {
      op.group_experts = static_cast<uint16_t>(moe.experts);
      op.group_top_k = static_cast<uint8_t>(moe.top_k);
      op.group_tokens = static_cast<int32_t>(b_.tokens);
    }
    add(op, compute_, layer);
  }

  void memory(const char* name, double read, double written, int32_t layer) {
    Op op;
    op.kind = OpKind::Memory;
    op.name = plan_.intern(name);
    op.dtype = m_.dtype;
    op.bytes_read = static_cast<int64_t>(read);
    op.bytes_written = static_cast<int64_t>(written);
    add(op, compute_, layer);
  }

  void all_reduce(const char* name, double bytes, int32_t layer) {
    if (sh_.tp == 1) return;
    Op op;
    op.kind = OpKind::Collective;
    op.collective = CollectiveKind::AllReduce;
    op.group = GroupKind::TP;
    op.bytes = static_cast<int64_t>(bytes);
    op.name = plan_.intern(name);
    add(op, tp_, layer);
  }

  void p2p(OpKind kind, const char* name, int32_t peer) {
    Op op;
    op.kind = kind;
    op.name = plan_.intern(name);
    op.group = GroupKind::PP;
    op.peer = peer;
    op.relative_peer = true;
    // Forward activations only: sends and receives match per (source, destination, phase).
    op.bytes = static_cast<int64_t>(static_cast<double>(b_.tokens * m_.hidden) * e_ / static_cast<double>(sh_.tp));
    add(op, pp_, -1);
  }

  Plan& plan_;
  Program& p_;
  const ServingShape& sh_;
  const ModelConfig& m_;
  const IterationBatch& b_;
  int64_t stage_;
  double e_ = 2, w_ = 2;
  uint8_t compute_ = 0, tp_ = 0, pp_ = 0;
  uint32_t last_ = 0;
  bool have_last_ = false;
};

}  // namespace

Plan build_iteration_plan(const ServingShape& sh, const IterationBatch& b, bool with_attention, int32_t first_gpu,
                          bool tp_symmetric) {
  Plan plan;
  const int64_t world = sh.tp * sh.pp;
  plan.world_size = static_cast<int32_t>(world);
  plan.rank_program.resize(static_cast<size_t>(world));
  plan.rank_gpu.resize(static_cast<size_t>(world));
  plan.mirror_of.resize(static_cast<size_t>(world));
  std::array<int32_t, kGroupKinds> none;
  none.fill(-1);
  plan.rank_groups.assign(static_cast<size_t>(world), none);
  for (int32_t r = 0; r < plan.world_size; ++r) {
    plan.rank_program[static_cast<size_t>(r)] = static_cast<uint32_t>(r / sh.tp);
    plan.rank_gpu[static_cast<size_t>(r)] = first_gpu + r;
    plan.mirror_of[static_cast<size_t>(r)] = tp_symmetric ? r - r % static_cast<int32_t>(sh.tp) : r;
  }
  for (int64_t s = 0; s < sh.pp && sh.tp > 1; ++s) {
    std::vector<int32_t> g;
    for (int64_t t = 0; t < sh.tp; ++t) g.push_back(static_cast<int32_t>(s * sh.tp + t));
    plan.add_group(GroupKind::TP, std::move(g));
  }
  for (int64_t t = 0; t < sh.tp && sh.pp > 1; ++t) {
    std::vector<int32_t> g;
    for (int64_t s = 0; s < sh.pp; ++s) g.push_back(static_cast<int32_t>(s * sh.tp + t));
    plan.add_group(GroupKind::PP, std::move(g));
  }
  for (int64_t s = 0; s < sh.pp; ++s) {
    plan.programs.emplace_back();
    Program& prog = plan.programs.back();
    prog.name = sh.pp > 1 ? "stage-" + std::to_string(s) : "replica";
    IterationBuilder(plan, prog, sh, b, s).build(with_attention);
  }
  return plan;
}

}  // namespace clustersim
