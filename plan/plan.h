// The Plan: the one artifact both executors consume (the simulator in sim/ and the
// CUDA/NCCL backend in real_backend/). It holds ranks, communicator groups and, per
// *program*, an ordered op list on named streams with explicit dependencies.
//
// Ranks that run the same code share one Program, so a Plan for 16,384 GPUs costs
// O(ranks + ops of the distinct programs), never O(ranks x ops). A program names its
// collective's group by kind (TP, DP, ...); each rank resolves that kind to its own
// concrete group through `rank_groups`.
//
// `mirror_of` records symmetry the planner can prove: rank r behaves exactly like
// rank mirror_of[r] (same program, same group shapes on an isomorphic part of the
// topology), so an executor may simulate only the representatives.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "topology/dtype.h"

namespace clustersim {

enum class OpKind : uint8_t { Gemm, Attention, Memory, Collective, Send, Recv };
std::string_view to_string(OpKind k);
// Collectives, sends and receives: the network's to cost, no kernel of the compute model.
inline bool is_comm(OpKind k) { return k == OpKind::Collective || k == OpKind::Send || k == OpKind::Recv; }

enum class CollectiveKind : uint8_t { AllReduce, AllGather, ReduceScatter, AllToAll, Broadcast, Reduce };
std::string_view to_string(CollectiveKind k);
bool parse_collective(std::string_view s, CollectiveKind& out);

// EDP: the expert-data-parallel group (ranks holding the same experts), over which
// expert gradients are reduced when EP carves experts out of DP.
enum class GroupKind : uint8_t { TP, DP, PP, CP, EP, EDP, World };
inline constexpr int kGroupKinds = 7;
std::string_view to_string(GroupKind k);

enum class Phase : uint8_t { Forward, Backward, Optimizer, Other };
// How a memory-bound kernel walks its bytes (cost_models/compute.cc): a vectorized
// stream; PyTorch's dynamic-cast loop (operands of different dtypes: an extra cost per
// element, op.m elements); a multi-tensor-apply kernel over a list of tensors (foreach
// ops, fused optimizers); or Transformer Engine's FP8 cast-transpose of an op.m × op.n
// BF16 matrix (the FP8 copy and its transpose, and the tensor's amax), costed as a stream;
// PyTorch's dropout draws (RandomMask, op.m elements); an indexed write along the first axis,
// `scatter_` or `index_put_` (an index computation per element, op.m elements); the GPU's time
// through op.m host synchronizations inside the step (HostSync: `.item()`, `nonzero`); a
// log_softmax over 16-bit rows written in FP32 (MixedSoftmax: autocast's FP32 output type, op.m
// elements); a decode-attention kernel whose QKᵀ and PV run on CUDA cores (CudaCoreDecode:
// op.heads query heads over op.kv_len cached tokens, op.k query heads a thread block, op.n
// blocks, the longest block op.q_len tokens; its K/V in bytes_read); PyTorch's
// non-vectorized loops with per-element index arithmetic over a strided tensor (StridedCopy:
// `.contiguous()` of a permuted view; CatCopy: `torch.cat` of strided parts; op.m elements);
// the tanh GeLU of a TorchScript-fused kernel (TanhGelu: its arithmetic, op.m elements).
enum class MemAccess : uint8_t {
  Streaming, DynamicCast, MultiTensor, Fp8CastTranspose, RandomMask, Scatter, IndexPut, HostSync, MixedSoftmax,
  CudaCoreDecode, StridedCopy, CatCopy, TanhGelu, BroadcastLoop
};
inline constexpr MemAccess kLastMemAccess = MemAccess::BroadcastLoop;
std::string_view to_string(Phase p);
std::string_view to_string(MemAccess a);  // the plan file's name: "streaming", "dynamic-cast", ...

// One operation of a program. Field use by kind:
//   Gemm:       m, n, k, batch, dtype            (flops = 2·m·n·k·batch)
//   Attention:  batch, heads, kv_heads, q_len, kv_len, head_dim, causal, dtype
//   Memory:     bytes_read, bytes_written, flops (elementwise / memory-bound)
//   Collective: collective, group, bytes (per-rank buffer: the full array for
//               all-reduce, the gathered array for all-gather / reduce-scatter), dtype
//   Send/Recv:  group, peer (index inside the group, or an offset from the rank's own
//               position when relative_peer), bytes, phase (sends and receives match
//               per (source, destination, phase) in issue order)
struct Op {
  OpKind kind = OpKind::Memory;
  uint8_t stream = 0;
  Phase phase = Phase::Other;
  DType dtype = DType::BF16;
  CollectiveKind collective = CollectiveKind::AllReduce;
  GroupKind group = GroupKind::World;
  bool causal = false;
  // Attention: the fused kernel applies dropout to the probabilities, drawing its mask
  // inside the kernel (Philox, per score element) in the forward and again in the backward.
  bool dropout = false;
  // A forward op run again in the backward (activation recompute): its phase is the
  // backward's, its kernel the forward's (an attention op: the forward kernel's work and rate).
  bool recompute = false;
  bool relative_peer = false;  // Send/Recv: peer is an offset from this rank's own group position
  // Send/Recv: moved by a kernel that holds SMs beside the GEMM it overlaps, the GEMM told
  // to leave them (Transformer Engine userbuffers' pipelined reduce-scatter, num_sm SMs
  // with set_sm_margin); kernels starting beside it take compute.overlap_slowdown's
  // `userbuffers` row.
  bool holds_sms = false;
  // Gemm, a grouped GEMM over experts (group_experts > 0): each of the group_tokens tokens
  // chose group_top_k of the group_experts experts, so an expert's rows are its count of
  // them and each expert's problem is tiled on its own (cost_models/compute.cc). m and batch
  // stay the mean rows and the experts reached, which set the bytes.
  uint8_t group_top_k = 0;
  // With holds_sms (and on the GEMM chunks marked beside_sms): the SMs that kernel holds
  // (TE's num_sm; 0: its default 16) and whether the GEMMs beside it are told to leave them
  // (set_sm_margin).
  uint16_t held_sms = 0;
  bool sm_margin = false;
  // Send/Recv: an NCCL send or receive posted ahead of the compute it overlaps (the
  // interleaved schedule's --overlap-p2p-communication, context parallelism's ring), so its
  // kernel's channels hold SMs beside that compute. A blocking send or receive, which the
  // compute waits for, holds none beside it.
  bool overlaps_compute = false;
  // GEMMs: planned to run beside such a kernel (the forward's pipelined reduce-scatter
  // chunks after the first). The power cap's window counts its time at that slowdown: on
  // fewer SMs it draws less, and the clock its window settles at is higher for it.
  bool beside_sms = false;
  MemAccess access = MemAccess::Streaming;  // Memory ops: how the kernel walks its bytes
  uint16_t group_experts = 0;               // Gemm: see group_top_k
  int32_t layer = -1;          // -1: not a transformer layer (embedding, loss, optimizer)
  int32_t micro_batch = -1;    // -1: not tied to one micro-batch
  uint32_t name = 0;           // index into Plan::names
  int64_t m = 0, n = 0, k = 0, batch = 1;  // Memory ops with DynamicCast access: m = elements cast
  int64_t heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0;
  int64_t bytes_read = 0, bytes_written = 0;
  int64_t bytes = 0;
  int32_t peer = 0;
  int32_t group_tokens = 0;  // Gemm: see group_top_k
  double flops = 0;
  double fixed_seconds = 0;  // > 0: the op's time as measured elsewhere (a Chakra trace's), not costed
  uint32_t dep_begin = 0;  // dependencies: Program::deps[dep_begin, dep_begin + dep_count)
  uint32_t dep_count = 0;
};

// The kernel an op runs is the backward's: in the backward phase and not a recomputed forward.
inline bool backward_kernel(const Op& op) { return op.phase == Phase::Backward && !op.recompute; }

// A Memory op that stands for op.k small kernels launched back to back (the router's, the
// small gradient adds): every access but those whose op.k means something else (MultiTensor,
// BroadcastLoop, CudaCoreDecode: one kernel) and the host's waits (HostSync: none). The
// simulator charges each a floor and a launch gap; the real backend runs each, its share of
// the bytes.
inline int64_t memory_kernels(const Op& op) {
  switch (op.access) {
    case MemAccess::HostSync:
      return 0;
    case MemAccess::MultiTensor:
    case MemAccess::BroadcastLoop:
    case MemAccess::CudaCoreDecode:
      return 1;
    default:
      return op.k > 1 ? op.k : 1;
  }
}

struct Program {
  std::string name;
  std::vector<std::string> streams;  // stream index -> name ("compute", "tp", "dp", ...)
  std::vector<Op> ops;               // in issue order; each stream runs its ops in this order
  std::vector<uint32_t> deps;        // indices of earlier ops in `ops`

  // Appends an op depending on `after` (indices of earlier ops); returns its index.
  uint32_t add(const Op& op, std::initializer_list<uint32_t> after = {});
  uint32_t add(const Op& op, const std::vector<uint32_t>& after);
  uint8_t stream(std::string_view name);  // index of a stream, created on first use
};

struct Group {
  GroupKind kind = GroupKind::World;
  std::vector<int32_t> ranks;  // global ranks in group order (ring order)
};

struct Plan {
  int32_t world_size = 0;
  std::vector<std::string> names;  // op name table
  std::vector<Program> programs;
  std::vector<uint32_t> rank_program;  // rank -> program index
  std::vector<int32_t> rank_gpu;       // rank -> global GPU index (node-major)
  std::vector<Group> groups;
  std::vector<std::array<int32_t, kGroupKinds>> rank_groups;  // rank -> group per kind, -1 none
  std::vector<int32_t> mirror_of;                             // rank -> representative rank (itself if simulated)

  uint32_t intern(std::string_view name);  // index of an op name, added on first use

 private:
  // intern's index of `names` (a trace's nodes can each have a name of their own: a search
  // through the table would take the square of their count), extended to names added
  // directly before it is consulted.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> name_index_;
  size_t indexed_ = 0;

 public:
  // An op of `kind` named `name` (interned), with the fields every planner sets; the
  // caller fills in its shape and bytes.
  Op make_op(std::string_view name, OpKind kind, Phase phase, int32_t layer, int32_t micro_batch, uint8_t stream,
             DType dtype);
  int32_t group_of(int32_t rank, GroupKind kind) const {
    return rank_groups[static_cast<size_t>(rank)][static_cast<size_t>(kind)];
  }
  int32_t add_group(GroupKind kind, std::vector<int32_t> ranks);
  std::vector<int32_t> representatives() const;
  size_t total_ops() const;  // sum of program sizes (not ranks x ops)
};

// The global rank a Send/Recv talks to: its group resolved for `rank`, a relative peer
// applied to the rank's own group position; -1 when there is no such group or position.
int32_t p2p_peer(const Plan& plan, int32_t rank, const Op& op);

// Sends and receives paired as they meet: the k-th send a -> b of a phase with the k-th
// receive on b from a of that phase, each rank's ops in program order. Unmatched ops
// are left out.
struct P2pMatch {
  int32_t send_rank = 0;
  uint32_t send_op = 0;
  int32_t recv_rank = 0;
  uint32_t recv_op = 0;
};
std::vector<P2pMatch> match_p2p(const Plan& plan);

double gemm_flops(const Op& op);
double attention_flops(const Op& op);  // forward FLOPs, causal halves the score work
// A compute op's FLOPs: its own count where it has one, else its GEMM's or attention's
// from the shape; 0 for memory kernels and communication.
double kernel_flops(const Op& op);

}  // namespace clustersim
