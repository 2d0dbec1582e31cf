// The builder of one pipeline stage's program for the training planner (plan/training_planner.cc):
// the ops of each forward and backward block in the schedule's order, with the streams, dependencies,
// communication and per-step work of the stack the layout names. Its members are defined by topic:
// stage_builder.cc (the step around the blocks, the op primitives, FP8 casts), stage_blocks.cc (the
// blocks and layers), stage_comm.cc (pipeline p2p, TP collectives and overlap, ZeRO 3, gradient
// buckets, the distributed optimizer), stage_attention.cc, stage_moe.cc, stage_eager.cc (plain
// PyTorch) and stage_mtp.cc (multi-token prediction).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "plan/block_planner.h"
#include "plan/moe_routing.h"
#include "plan/training_planner.h"

namespace clustersim {

// Builds the program of one pipeline stage. Every rank of a stage runs it.
class StageBuilder {
 public:
  StageBuilder(Plan& plan, Program& prog, const ModelConfig& m, const TrainingLayout& l, int64_t stage, bool adam);
  void build();
  std::vector<uint32_t> finalize_model_grads(std::vector<uint32_t> after, double gb);

  double model_flops() const { return model_flops_; }
  double causal_attention_flops() const { return causal_attention_flops_; }
  // The hot EP rank's load summed over this stage's forward MoE layers, and their count.
  double moe_load_sum() const { return load_sum_; }
  int64_t moe_load_count() const { return load_count_; }

 private:
  static constexpr uint32_t kNone = ~0u;
  static std::vector<uint32_t> deps(uint32_t a, uint32_t b = kNone, uint32_t c = kNone);
  Op base(const char* name, OpKind kind, Phase phase, int32_t layer, uint8_t stream);
  uint32_t add_gemm(const char* name, Phase ph, int32_t layer, int64_t m, int64_t n, int64_t k,
                    const std::vector<uint32_t>& after, int64_t batch = 1, double model_share = 1.0,
                    DType dt = DType::FP32);
  uint32_t add_memory(const char* name, Phase ph, int32_t layer, double read, double written, double flops,
                      const std::vector<uint32_t>& after, uint8_t stream = 0xff);
  uint32_t add_attention(const char* name, Phase ph, int32_t layer, int64_t q_len, int64_t kv_len,
                         const std::vector<uint32_t>& after);
  uint32_t add_coll(const char* name, CollectiveKind kind, GroupKind group, uint8_t stream, Phase ph, int32_t layer,
                    double bytes, const std::vector<uint32_t>& after);
  uint32_t add_p2p(const char* name, OpKind kind, GroupKind group, int32_t peer, const char* stream, Phase ph,
                   int32_t layer, double bytes, const std::vector<uint32_t>& after, bool relative = false,
                   bool holds_sms = false, bool overlaps_compute = false);

  double act_bytes() const { return static_cast<double>(seq_tokens_ * m_.hidden * e_); }
  // Pipeline activations and gradients: without SP every TP rank holds the whole tensor;
  // Megatron's scatter-gather (parallel.pp_scatter_gather) sends each rank's 1/tp slice
  // over its own NIC and all-gathers the slices on the receiving stage over NVLink.
  bool pp_scatter() const { return l_.pp_scatter_gather && !l_.sequence_parallel && t_ > 1; }
  double pp_bytes() const { return pp_scatter() ? act_bytes() / static_cast<double>(t_) : act_bytes(); }
  uint32_t pp_gather(const char* name, Phase ph, int32_t layer, uint32_t recv);
  double full_act_bytes() const { return static_cast<double>(tokens_ * m_.hidden * e_); }
  uint32_t tp_reduce(const char* ar, const char* rs, Phase ph, int32_t layer, uint32_t after);
  uint32_t tp_gather(const char* name, Phase ph, int32_t layer, uint32_t after, int bulk_sms = 0);
  uint32_t bulk(uint32_t op, int sms);

  uint32_t ag_then_gemm(const char* ag, const char* gemm, Phase ph, int32_t L, uint32_t in, int64_t n, int64_t k,
                        const std::vector<uint32_t>& extra = {});
  uint32_t gemm_then_reduce(const char* gemm, const char* ar, const char* rs, Phase ph, int32_t L,
                            const std::vector<uint32_t>& after, int64_t n, int64_t k,
                            const std::function<uint32_t()>& then = {});
  uint32_t bias_dropout_add_backward(const char* drop_name, const char* bias_name, int32_t L, uint32_t g,
                                     bool biased = true);
  int64_t autograd_nodes(int64_t chunk, uint32_t first) const;
  int64_t layer_param_tensors(int32_t L) const;
  uint32_t small_param_grad_adds(int32_t L, uint32_t g);

  uint32_t main_grad_add(const char* name, int32_t L, int64_t in, int64_t out, uint32_t wgrad);

  uint32_t fp8_expert_padding(const char* name, Phase ph, int32_t L, int64_t rows, uint32_t after);
  uint32_t fp8_cast(const char* name, Phase ph, int32_t L, int64_t rows, int64_t cols, uint32_t after, double held = 0,
                    bool amax_over_tp = false);
  uint32_t cast_transpose(const char* name, Phase ph, int32_t L, int64_t rows, int64_t cols, double read,
                          uint32_t after);
  uint32_t amax_allreduce(const char* name, Phase ph, int32_t L, uint32_t after);
  uint32_t fp8_quantize_fused(const char* name, Phase ph, int32_t L, int64_t rows, int64_t cols, uint32_t after,
                              bool amax_over_tp = false);

  uint32_t unfused_attention_forward(Phase ph, int32_t L, int64_t q, int64_t kv, uint32_t in);
  uint32_t context_permute(const char* name, Phase ph, int32_t L, uint32_t after);
  uint32_t strided_copy(const char* name, Phase ph, int32_t L, double elements, MemAccess a,
                        const std::vector<uint32_t>& after);
  uint32_t unfused_attention_backward(int32_t L, int64_t q, int64_t kv, uint32_t dout);
  int32_t layer_of(int64_t chunk, int64_t i) const;
  // Whether layer L's forward runs again in its backward (training.recompute full, within
  // training.recompute_num_layers of its chunk's first layer).
  bool full_recompute(int32_t L) const;
  int64_t chunk_layers(int64_t chunk) const;
  bool first_virtual(int64_t chunk) const { return chunk == 0 && stage_ == 0; }
  bool last_virtual(int64_t chunk) const { return chunk == l_.virtual_stages - 1 && stage_ == l_.pp - 1; }
  double layer_dense_params(int32_t L) const;
  double layer_expert_params(int32_t L) const;
  double embedding_params(bool first, bool last) const { return vocab_params(m_, t_, first, last, m_.mtp_layers); }

  bool zero3_backward_gathers() const;
  uint32_t zero3_backward_gather(int32_t L, uint32_t after);
  void zero3_prefetch_below(int32_t below);
  uint32_t zero3_gather(Phase ph, int32_t L, uint32_t after);
  // After layer L's gather `g` joined the stream at `joined`: FSDP2's copy-out on the
  // compute stream (parallel.fsdp_version 2), else `joined`.
  uint32_t zero3_copy_out(Phase ph, int32_t L, uint32_t joined);

  void drain_deferred_wgrads();
  void add_grads(int32_t L, double dense, double expert, uint32_t ready);
  void fsdp_reduce_scatter(int32_t L, double params, uint32_t ready);
  uint32_t add_grad_coll(const char* name, CollectiveKind kind, GroupKind group, int32_t L, double bytes,
                         uint32_t ready);
  void flush_buckets(uint32_t ready);

  uint32_t ring_attention(int32_t L, Phase ph, uint32_t input);
  uint32_t ring_attention(int32_t L, Phase ph, uint32_t input, bool fwd);
  double cp_kv_bytes() const;
  uint32_t allgather_attention(int32_t L, Phase ph, uint32_t input, bool fwd);

  // The rotary embedding (models without a learned position table) on each TP rank's
  // query and key heads, as Megatron-Core's SelfAttention applies it between the QKV GEMM
  // and the attention kernel (docs/model.md, "Rotary embedding"). Transformer Engine's
  // fused kernel (training.rope_fusion) reads and writes each element once;
  // apply_rotary_pos_emb's unfused chain (t·cos, rotate_half's negation and concatenation,
  // ·sin, the sum, the concatenation with the unrotated part) as measured below. Under GQA
  // the query's reshape out of the grouped QKV layout cannot be a view, so it is copied
  // first: a strided gather, measured at 2.3 times a copy's time (the same measurement).
  // In the backward the same passes run on the gradients, and the
  // split of the QKV output is undone by concatenating the three gradients (TE's
  // SplitAlongDim: they come from separate buffers, so a copy).
  // The unfused chain's ten kernels a tensor (two of them on the [s, 1, 1, d] angles) run
  // below copy rate: the broadcast multiplies and the half-width negation are strided, so
  // TensorIterator does not vectorize them, and the concatenations copy strided halves.
  // Timed as their kernels' sum on one H200, they take what a copy of 28.5 (forward) and
  // 30 (backward) elements per element would (calibrate/measurements/rope-h200-2026-12-03),
  // where their tensors' bytes alone would be 12; the op carries those copy-rate passes.
  double rope_reads(bool backward) const { return l_.rope_fusion ? 1.0 : backward ? 16.5 : 15.5; }
  double rope_writes(bool backward) const { return l_.rope_fusion ? 1.0 : backward ? 13.5 : 13.0; }
  double rope_elements() const;
  uint32_t rope_forward(Phase ph, int32_t L, uint32_t after);
  uint32_t rope_backward(int32_t L, uint32_t after);

  uint32_t sp_gemm(const char* ag, const char* gemm, Phase ph, int32_t L, uint32_t in, int64_t n, int64_t k);
  uint32_t latent_gather(const char* ag, const char* cat, const char* scatter, Phase ph, int32_t L, uint32_t in,
                         int64_t width, int64_t kept);
  uint32_t latent_norm(const char* name, Phase ph, int32_t L, uint32_t in, int64_t width);
  uint32_t mla_up(int32_t L, Phase ph, uint32_t q, uint32_t kv);
  uint32_t mla_forward(int32_t L, Phase ph, uint32_t ln);
  uint32_t column_backward(const std::string& nm, int32_t L, uint32_t dy, int64_t in, int64_t out, uint32_t after_w,
                           uint32_t& w);
  uint32_t width_gather_backward(const char* ag, const char* split, int32_t L, uint32_t dy, int64_t width,
                                 int64_t kept);
  uint32_t mla_backward(int32_t L, uint32_t dqkv, uint32_t proj_w);

  uint32_t mlp_forward(int32_t L, Phase ph, uint32_t ln);

  // The MoE layer's work on the most-loaded EP rank of this (layer, micro-batch): tokens
  // per local expert, the grouped GEMM's useful fraction, and the all-to-all's scale.
  // An even router pads every expert to capacity_factor × its share (useful 1/capacity);
  // a skewed one (plan/moe_routing.h) processes the hot rank's tokens, which every rank's
  // combine all-to-all waits for.
  struct ExpertLoad {
    int64_t per_expert = 0;
    double useful = 1, a2a_scale = 1;
  };
  ExpertLoad expert_load(int32_t L, bool forward);
  uint32_t router_cast(const char* name, Phase ph, int32_t L, int64_t rows, uint32_t after);
  void router_in_fp32(uint32_t gemm);
  // After its GEMM the router selects each token's experts and builds the routing map and
  // probabilities from small PyTorch ops on [tokens, experts] tensors, each a kernel of its
  // own (Megatron-Core's topk_softmax_with_capacity, group_limited_topk and the balancing
  // losses; core_r0.10.0 and core_r0.12.0 moe_utils.py and router.py). The counts are the
  // kernels one H100 launched running those paths forward and backward
  // (calibrate/measurements/moe-router-h100-2026-12-06; docs/model.md, "The router's own
  // kernels"); each kernel moves its [tokens, experts] tensor in and out.
  struct RouteKernels {
    int64_t fwd = 0, bwd = 0, aux_fwd = 0, aux_bwd = 0;
  };
  bool moe_aux_loss() const { return m_.moe.aux_loss_coeff > 0 && m_.moe.load_balancing != "none"; }
  RouteKernels route_kernels() const;
  // A [tokens, experts] tensor of the router's output type.
  double route_bytes(int64_t own) const { return static_cast<double>(own * m_.moe.experts) * probs_bytes(); }
  uint32_t route_op(const char* name, Phase ph, int32_t L, int64_t kernels, int64_t own, uint32_t after);
  uint32_t tp_cp_coll(const char* tp_name, const char* cp_name, CollectiveKind kind, Phase ph, int32_t L, double bytes,
                      uint32_t after);
  double aux_score_bytes(int64_t own) const;
  uint32_t route_forward(int32_t L, Phase ph, uint32_t router, int64_t own);
  uint32_t route_backward(int32_t L, uint32_t g, int64_t own);
  bool permute_masked_select() const;
  uint32_t dispatch_bookkeeping(int32_t L, Phase ph, uint32_t routed, int64_t own);
  uint32_t unpermute_bookkeeping(int32_t L, Phase ph, uint32_t combined);
  uint32_t permute_bookkeeping_backward(int32_t L, uint32_t g, int64_t own);

  // Megatron-Core's all-to-all token dispatcher (MoEAlltoAllTokenDispatcher, with the
  // experts split over the TP group as the dense layers are): under sequence parallelism the
  // layer takes the rank's own 1/tp of the tokens, no all-gather before it. The router scores
  // them, they are permuted into expert order (top_k rows a token) and exchanged over EP, and
  // the TP group all-gathers what its ranks received, each rank holding 1/tp of every local
  // expert; after the experts a reduce-scatter over TP, the combine all-to-all and the
  // unpermute (weighted by the router's probabilities) undo it. Without SP every TP rank
  // holds every token and the output is all-reduced.
  bool moe_sp() const { return l_.sequence_parallel && t_ > 1; }
  // The experts split over TP (expert_tp = tp): the TP group gathers what its ranks received.
  // With whole experts on every rank (expert_tp 1) each rank's own tokens go straight to EP.
  bool moe_tp_gather() const { return moe_sp() && l_.expert_tp() == t_; }
  int64_t moe_rows_tokens() const { return moe_sp() && !moe_tp_gather() ? seq_tokens_ : tokens_; }
  // The ranks that hold the same experts and reduce their gradients together.
  int64_t expert_dp() const { return (t_ / l_.expert_tp()) * l_.dp * l_.cp / l_.ep; }
  // What a MoE layer's forward or backward works on: its local experts, the rows each takes
  // and the share of them that is padding (cap), the experts' width on this rank, the tokens
  // the rank routes, the bytes of the EP all-to-all and of the TP gather.
  // a2a: the bytes an all-to-all moves for the rank (its own tokens' rows, times the most
  // loaded rank's share under skewed routing); permuted: the rank's own rows, which its
  // permutation and unpermutation move whatever the routing.
  struct MoeShape {
    int64_t local = 0, per_expert = 0, fe = 0, own = 0;
    double cap = 1, a2a = 0, gathered = 0, permuted = 0;
  };
  MoeShape moe_shape(int32_t L, bool forward);
  // Megatron-Core's allgather token dispatcher (MoEAllGatherTokenDispatcher, core_r0.12.0
  // token_dispatcher.py; parallel.moe_dispatcher: allgather): every EP rank's tokens are
  // all-gathered (with their routing map and probabilities, small), the host reads how many
  // rows each local expert takes (`tokens_per_expert ... .cpu()`: a wait for the GPU), the
  // local experts' rows are permuted out of the gathered tokens; after the experts they are
  // unpermuted into a zero-filled tensor of every gathered token, which is reduce-scattered
  // back in the router probabilities' type (FP32 under an FP32 router). The backward
  // all-gathers the output gradient, gathers the rows, and scatter-adds the experts' input
  // gradients into the gathered tokens before reduce-scattering them. `rows`: the local
  // experts' rows; `own`: the rank's tokens.
  double gathered_tokens(int64_t own) const { return static_cast<double>(own * l_.ep); }
  double probs_bytes() const { return m_.moe.router_fp32 ? 4.0 : static_cast<double>(e_); }
  uint32_t allgather_dispatch(int32_t L, Phase ph, uint32_t router, int64_t rows, int64_t own);
  uint32_t allgather_combine(int32_t L, Phase ph, uint32_t experts, int64_t rows, int64_t own);
  uint32_t allgather_combine_backward(int32_t L, uint32_t dy, int64_t rows, int64_t own);
  uint32_t allgather_dispatch_backward(int32_t L, uint32_t dx, int64_t rows, int64_t own);
  uint32_t moe_forward(int32_t L, Phase ph, uint32_t in);
  // Shared experts (Megatron-Core's SharedExpertMLP, a dense MLP of shared · f_e over TP):
  // the input gathered (SP), the up projection and its activation; the down projection and
  // its reduce-scatter (SP). Backward: the down projection's gradients and the activation's
  // backward (its weight gradient into `down_wgrad`), then the up projection's (into `up_wgrad`).
  uint32_t shared_expert_up(int32_t L, Phase ph, uint32_t from);
  uint32_t shared_expert_down(int32_t L, Phase ph, uint32_t act);
  uint32_t shared_expert_down_backward(int32_t L, uint32_t from, uint32_t& down_wgrad);
  uint32_t shared_expert_up_backward(int32_t L, uint32_t act_grad, uint32_t down_wgrad, uint32_t& up_wgrad);
  uint32_t mlp_backward(int32_t L, uint32_t g, uint32_t& wgrad, uint32_t& up_wgrad);
  uint32_t moe_backward(int32_t L, uint32_t dy, uint32_t& wgrad);
  uint8_t ep_stream();
  uint32_t layer_forward(int32_t L, uint32_t x, Phase ph);

  uint32_t accessed(uint32_t op, MemAccess a, double elements = 0);
  uint32_t host_wait(const char* name, Phase ph, int32_t L, uint32_t after, int64_t waits = 1, int64_t ops = 0);
  double eager_act32() const { return static_cast<double>(tokens_ * m_.hidden) * 4.0; }
  double eager_act16() const { return static_cast<double>(tokens_ * m_.hidden * e_); }
  uint32_t eager_weight_cast(const char* name, Phase ph, int32_t L, double params, uint32_t after);
  uint32_t eager_linear_weight(const char* autocast_name, const char* te_name, Phase ph, int32_t L, int64_t in,
                               int64_t out, uint32_t after);
  uint32_t eager_grad_accumulate(const char* name, int32_t L, double params, uint32_t after);
  uint32_t eager_bias_grad(const char* name, int32_t L, int64_t width, uint32_t after);
  double linear_params(int64_t in, int64_t out) const;
  uint32_t eager_norm(const char* norm, const char* cast, Phase ph, int32_t L, uint32_t after);
  uint32_t eager_linear_backward(const std::string& name, int32_t L, int64_t in, int64_t out, uint32_t dy,
                                 uint32_t& acc);
  uint32_t eager_norm_backward(const char* cast, const char* norm, const char* weight, const char* residual, int32_t L,
                               uint32_t dx, uint32_t also, uint32_t also2 = kNone);
  uint32_t eager_rotary(Phase ph, int32_t L, uint32_t after);
  double unpad_qkv_bytes() const;
  double pad_out_bytes() const { return static_cast<double>(tokens_ * m_.heads * m_.head_dim() * e_); }
  uint32_t unpad_qkv(Phase ph, int32_t L, uint32_t after);
  uint32_t pad_output(Phase ph, int32_t L, uint32_t after);
  void train_metrics(uint32_t after);
  void train_metrics_sync(uint32_t x);
  uint32_t host_ops(const char* name, int64_t count, uint32_t after);
  uint32_t layer_forward_eager(int32_t L, uint32_t x, Phase ph);
  uint32_t layer_backward_eager(int32_t L, uint32_t g, bool last_micro_batch);
  void forward_block(int64_t chunk);
  uint32_t logits_and_loss(uint32_t x, int32_t L, const std::string& pre);

  uint32_t mtp_forward(uint32_t x);
  uint32_t mtp_backward(uint32_t g, bool last_micro_batch);
  uint32_t loss_sync(uint32_t x, int64_t chunk);
  std::vector<uint32_t> p2p_posted(bool forward) const;
  void sent(uint32_t send);
  uint32_t after_sends();
  uint32_t device_sync(const char* name, Phase ph, int32_t L, uint32_t after, int64_t relaunch_nodes);
  uint32_t join(uint32_t a, uint32_t b);
  std::vector<int32_t> held_layers() const;
  double local_params(bool expert) const;
  double mtp_extra_params() const;
  double embedding_params_local() const;

  void plan_param_gathers();
  uint32_t zero3_vocab_gather(Phase ph, uint32_t after);
  bool zero3_gathers_in(Phase ph) const;
  bool vocab_gathered_with_embedding(int64_t chunk) const;
  // Bytes a parameter of layer L (-1: the embedding and output layer) moves in the ZeRO 1/2
  // parameter all-gather: FP8 weights (parallel.fp8_param_gather) 1, else the model's type.
  // (A layer's norm weights, a few thousandths of it, count with its FP8 weights.)
  double gathered_bytes(int32_t L) const { return l_.fp8_params && L >= 0 ? 1.0 : static_cast<double>(e_); }
  uint32_t param_gather_for(int32_t L) const;
  uint32_t layer_backward(int32_t L, uint32_t g, bool last_micro_batch);
  void backward_block(int64_t chunk, bool last_micro_batch);

 private:
  Plan& plan_;
  Program& p_;
  const ModelConfig& m_;
  const TrainingLayout& l_;
  int64_t stage_;
  bool adam_;
  uint8_t compute_ = 0, tp_ = 0, dp_ = 0, ep_ = 0xff, cp_ = 0xff;
  DType act_dtype_ = DType::BF16, lin_dtype_ = DType::BF16, attn_dtype_ = DType::BF16;
  uint32_t gathered_ = kNone;                 // the op after which the last all-gathered input is whole
  std::map<int32_t, uint32_t> param_gather_;  // layer (-1: embedding, output) -> its bucket's gather
  struct Bucket {
    double dense, expert;
    int32_t layer;
    double gather_bytes;  // the ZeRO 1/2 all-gather of the bucket's updated parameters
  };
  bool defer_grads_ = false;
  std::vector<Bucket> deferred_;
  int64_t e_ = 2, t_ = 1, tokens_ = 0, seq_tokens_ = 0, vocab_local_ = 0, mlp_in_ = 0, qkv_ = 0;
  DType grad_dtype_ = DType::FP32;
  int32_t mb_ = -1;
  double load_sum_ = 0;  // the hot EP rank's load over the forward MoE layers built
  int64_t load_count_ = 0;
  uint32_t prev_ = kNone;
  uint32_t chunk_begin_ = 0;              // the first op of the chunk forward_block is planning
  std::vector<int64_t> chunk_nodes_;      // autograd nodes of each chunk's backward (-1: not yet counted)
  std::vector<uint32_t> last_on_stream_;  // device_sync: the last op issued on each stream
  size_t scanned_ = 0;                    // device_sync: ops already seen
  uint32_t device_sync_name_ = kNone;     // device_sync: its ops' name (no autograd node)
  uint32_t pending_send_ = kNone;         // blocking pipeline p2p: the send the next compute waits for
  // Overlapped pipeline p2p: each forward and backward block's last op, in schedule order,
  // and how many forward blocks the schedule runs before its first backward.
  std::vector<uint32_t> fwd_ends_, bwd_ends_;
  size_t warm_forwards_ = 0;
  uint32_t mlp_input_ready_ = kNone;
  bool recomputing_ = false;
  // The recomputation under PyTorch's selective checkpointing with TorchTitan's op policy
  // (training.recompute: op): matmuls and attention saved but every second matmul.
  bool op_policy_ = false;
  // ZeRO 3 backward prefetch: the gather issued ahead for `prefetched_layer_`.
  uint32_t prefetched_gather_ = kNone;
  int32_t prefetched_layer_ = -1;
  int64_t deferred_wgrads_ = 0;           // output-layer weight gradients awaiting the drain
  double deferred_embedding_params_ = 0;  // and the parameters whose gradient they complete
  std::vector<int64_t> last_mb_;
  std::vector<uint32_t> grad_ops_;
  std::vector<double> gather_buckets_;
  double bucket_dense_ = 0, bucket_expert_ = 0, bucket_gather_ = 0;
  uint32_t bucket_ready_ = kNone;
  int32_t bucket_layer_ = -1;
  double params_dense_ = 0, params_expert_ = 0;
  double model_flops_ = 0;
  double causal_attention_flops_ = 0;
};

}  // namespace clustersim
