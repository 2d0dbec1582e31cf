// Compute model. Without measurements, a roofline: an op's kernel takes the longer of
// its math time and its memory time,
//
//   t = max(flops / (peak(dtype) · eff · wave), bytes / (hbm_bw · mem_eff))
//
// and each kernel on a stream starts a launch gap after the stream became ready (the
// executor adds the gap; spans hold kernel time, as CUDA events measure it).
//
// `wave` is GEMM wave quantization: a GEMM runs as ceil(m/Tm)·ceil(n/Tn)·batch output
// tiles over the SMs, and the last, partial wave leaves SMs idle:
//   wave = tiles / (ceil(tiles / SMs) · SMs).
// The efficiencies are what large, well-shaped kernels reach on the GPU; they are
// measured by calibration and the defaults below are documented starting points.
// With a calibration profile's measurements, each kind is interpolated instead:
//   GEMM       measured / roofline(eff = 1) ratios over a grid of (m, n, k), interpolated
//              trilinearly in log2 space between the 8 enclosing grid points (inverse-
//              distance weighting of the nearest 8 where the grid has holes), times the
//              op's own roofline (so wave effects and batch scale);
//   attention  measured / (FLOPs / peak) ratios over the sequence length, per phase,
//              head dim and mask, piecewise linear in log2(length);
//   memory     measured seconds per byte over the bytes moved, piecewise linear in
//              log-log; past the largest measurement its bandwidth holds; measured at
//              several shares of reads in the bytes, linear in the share between them.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "plan/plan.h"
#include "topology/gpu.h"

namespace clustersim {

struct GemmPoint {
  DType dtype = DType::BF16;
  int64_t m = 0, n = 0, k = 0;
  double seconds = 0;
};
struct AttentionPoint {
  bool backward = false;
  bool causal = true;
  int64_t head_dim = 128;
  int64_t seq = 0;          // q_len = kv_len
  int64_t batch_heads = 1;  // batch × heads of the measurement
  double seconds = 0;
  int64_t group = 1;  // query heads per K/V head (GQA)
};
struct MemoryPoint {
  double bytes = 0;  // read + written
  double seconds = 0;
  double read_share = 0.5;  // bytes read / bytes
};
struct MeasuredIndex;  // cost_models/compute.cc: the tables' axes and ratios, per GPU and op class
struct MeasuredTables {
  std::vector<GemmPoint> gemm;
  std::vector<AttentionPoint> attention;
  std::vector<MemoryPoint> memory;  // sorted by (read_share, bytes)
  // Built on first use from the rows above (which must not change after): the lookup
  // grids, and each op shape's seconds once costed. A calibrated run then costs what a
  // default run costs, where rebuilding the grid for every op made it 200x slower.
  mutable std::mutex index_mu;
  mutable std::map<std::string, std::shared_ptr<const MeasuredIndex>> index;
  mutable std::unordered_map<std::string, double> memo;
};

struct ComputeProfile {
  double gemm_efficiency = 0.80;       // large bf16 GEMMs: ~790 of 989 TFLOP/s on H200
  // FP8 GEMMs (per-tensor scales) at burst: twelve Llama layer shapes on an H100 and an H200 (1,312-1,499
  // TFLOP/s; 8192^3 at 1,471 and 1,482) in the tile form below (calibrate/measurements/power-h100-2026-12-05).
  // The cap, which holds them at ~1,200 back to back, is apply_power_cap's.
  double fp8_gemm_efficiency = 0.796;
  // true: on GPUs whose library runs persistent stream-K GEMM kernels (GpuSpec::gemm_stream_k)
  // the tiles of a partial last wave share their k-loop out over every SM, as the H200's
  // cuBLASLt table shows; false (the default): every GPU pads the last wave as a whole one,
  // the form the published training steps, held out, still agree with better (docs/model.md,
  // "GEMMs: waves of padded tiles").
  bool gemm_stream_k = false;
  double attention_efficiency = 0.71;  // fused attention's forward plateau: long sequences, many tiles (cuDNN on H200)
  double memory_efficiency = 0.88;     // device copy at GiB sizes: ~4.25 of 4.8 TB/s on H200
  double launch_overhead_s = 2.0e-6;   // back-to-back kernel gap
  // Kernels from a framework's full queue (docs/model.md, "Kernels from a full queue"). Every
  // kernel cost above (the floor, the gap, the calibration tables) was timed between the
  // kernel's own two CUDA events, as `clustersim calibrate` and the real backend time an op; a
  // framework's stream has no events between its kernels, and each kernel with its gap takes
  // queue_saving less, but no kernel less than queue_interval, the front end's launch rate.
  // Measured on one H100 over 22 kernels from 2 KiB adds to 2048-cube GEMMs: bracketed (the
  // kernel and the gap after it) minus back to back, median 3.25 µs (p10-p90 2.5-3.3); a tiny
  // kernel back to back 1.97 µs (calibrate/measurements/kernel-floor-h100-2026-12-06).
  double queue_saving_s = 3.25e-6;
  double queue_interval_s = 1.97e-6;
  // A kernel's start after the host issues it when launches block (CUDA_LAUNCH_BLOCKING=1,
  // training.launch_blocking): the eager framework's dispatch of the op and the launch's
  // return, with no queue ahead to hide them. An eager layer's step with blocking launches
  // over the same step without, per kernel, on one H200
  // (calibrate/measurements/launch-blocking-h200-2026-12-03; docs/model.md, "Blocking launches").
  double blocking_launch_s = 43e-6;
  // PyTorch's elementwise kernels (docs/model.md, "PyTorch eager"), measured on an H200
  // (calibrate/measurements/pytorch/run4/microbench.jsonl): operands of mixed dtypes run
  // a dynamic-cast loop that costs ~94 issue slots per element beyond its streaming
  // time (bf16->fp32 copy 2.09 TB/s, fp32+bf16 add 2.80, against 4.34 for same-dtype
  // streams); multi-tensor-apply kernels (foreach norm and scale, fused AdamW) move 3.37-3.39
  // TB/s where a plain copy moves 4.39: beyond their stream, 3.96 issue slots a byte
  // (multi_tensor_ops_per_byte). The same kernels on an H100, whose SMs and clock are the
  // H200's with 0.70 of its HBM bandwidth, move 2.58-2.73 TB/s (Adam, the foreach copy,
  // scale and norm of calibrate/measurements/mcore-step-h200/step-1.7b.json): the slots
  // give 2.51, where a fixed share of the copy's rate (0.77) gave 2.27.
  // Every *_ops_per_element below (and the attention dropout ops) counts issue slots,
  // priced at GpuSpec::alu_slot_rate (SMs x clock x 256: the H200's FP32 peak, where they
  // were measured; twice an A100's FP32 peak).
  double dynamic_cast_ops_per_element = 94;
  double multi_tensor_ops_per_byte = 3.96;
  double multi_tensor_efficiency = 0;  // > 0 (a profile's measured key): the stream's rate times this instead
  // PyTorch's elementwise loop without vectorized access (TensorIterator's elementwise_kernel
  // where an operand is broadcast, as Megatron's cross entropy divides and shifts FP32 logits
  // by a per-row scalar) is bound by its SMs, not the HBM: the same ~300 G elements/s on an
  // H100 (293-302) and an H200 (290-323), whose bandwidths differ by 1.43x: 220 issue slots
  // an element, against its stream, whichever is longer (MemAccess::BroadcastLoop;
  // calibrate/measurements/mcore-step-h200, megatron2021-step-h200-2026-12-05).
  double broadcast_loop_ops_per_element = 220;
  // PyTorch's dropout forward (native_dropout: Philox draws, the output and a 1-byte mask)
  // runs at 1.38x its stream time on an H200 whatever the size and 16-bit type, ~31 issue
  // slots per element beyond the stream; its backward streams
  // (calibrate/measurements/dropout-h200-2026-12-03; docs/model.md, "Attention implementation").
  double dropout_rng_ops_per_element = 31;
  // Indexed writes along the first axis with a row index (flash-attn's bert_padding, which
  // MPT's flash path runs; docs/model.md, "Padding around the kernel"), beyond their stream:
  // `scatter_` 148 and `index_put_` 266 issue slots per element; and the GPU time of one host
  // synchronization inside a step (`nonzero`, `.item()`) with the small mask kernels around
  // it, 55 us: bert_padding.unpad_input costs 110 us beyond its row gather, two of them. All on
  // one H200 at MPT-1B's shape (calibrate/measurements/mpt-unpad-h200-2026-12-04).
  double scatter_ops_per_element = 148;
  double index_put_ops_per_element = 266;
  double host_sync_s = 55e-6;
  // A backward launched from an empty queue after a host wait (a loss check before
  // loss.backward()): the GPU idles while autograd starts, walks the graph once to count
  // each node's dependencies, and launches its first, small kernels one by one. That is
  // backward_relaunch_s plus autograd_node_s a node of the graph (HostSync's op.batch). One
  // H200: a check costs 346 / 348 us a micro-batch at 4096 x 4096 x 4 / 8192 x 2048 x 2 MLP
  // blocks, 51 and 27 nodes (calibrate/measurements/loss-sync-h200-2026-12-04), less the wait
  // and a launch gap: 290 us. One H100, 4096 x 4096 blocks at 51 / 195 / 579 nodes: 0.30 /
  // 0.60 / 1.00 ms (means of two runs), a line of 1.27 us a node through 0.28 ms, whose
  // intercept less the wait is 0.23 ms; the host's time from the check's return to the
  // engine's first node rises alike, 0.43 / 0.65 / 0.88 ms
  // (calibrate/measurements/backward-release-h100-2026-12-05). So 225 us and 1.27 us a node.
  double backward_relaunch_s = 225e-6;
  double autograd_node_s = 1.27e-6;
  // One small eager op the host dispatches with the device waiting on it (a fill or a copy of
  // a scalar: torchmetrics' per-rank outputs of a state's all-gather and ProcessGroupNCCL's
  // copies into them): 8.1-14.0 us a fill and 10.5-15.9 us a copy on one H200's host, PyTorch
  // 2.11, over 256-4,096 of them (calibrate/measurements/metric-sync-h200-2026-12-04).
  double host_op_s = 12e-6;
  // log_softmax over 16-bit rows with an FP32 output (autocast's cross_entropy on BF16 logits):
  // three reads of the row and the FP32 write, plus 124 issue slots a logit; measured on one
  // H200 at 12-25 K tokens x 50,368 (calibrate/measurements/train-metrics-h200-2026-12-04).
  double mixed_softmax_ops_per_element = 124;
  // Megatron-LM's own layer of 2021-22 (training.transformer_impl: local), beyond each kernel's
  // floor and stream, in issue slots an element: PyTorch's non-vectorized copy of the permuted
  // attention context (`.contiguous()`: 111 and 115 at two shapes), `torch.cat` of the three
  // strided gradients into the fused QKV gradient (196, 193), and the TorchScript-fused tanh
  // GeLU under the 2021 fuser settings (forward 31, 34; backward 30, 34). One H200, PyTorch
  // 2.11 (calibrate/measurements/megatron2021-step-h200-2026-12-05, micro-legacy.json).
  double strided_copy_ops_per_element = 113;
  double cat_copy_ops_per_element = 194;
  double tanh_gelu_ops_per_element = 32;
  // A decode-attention kernel on CUDA cores (MemAccess::CudaCoreDecode), measured as TurboMind
  // v0.1.0a1's kernel on one H200 over batch 1-128, context 128-3,072 and 1, 2 or 4 query heads
  // a block (calibrate/measurements/decode-attention-turbomind-h200-2026-12-04): per element
  // (query head x cached token x dimension) the two FMAs of QKᵀ and PV (4 FP32 operations),
  // 4.5 issue slots more for the head and 31 for the K/V's handling (loads, conversion, the
  // pipeline) shared by a block's query heads; a block of four warps alone issues at 0.6 of
  // its SM; 9 µs for the kernel's prologue, epilogue and launch.
  double decode_fma_ops = 4;
  double decode_head_slots = 4.5;
  double decode_kv_slots = 31;
  double decode_block_sm_share = 0.6;
  double decode_kernel_latency_s = 9e-6;
  // Uncalibrated kernels by shape (docs/model.md, "Kernel efficiency by shape"):
  double kernel_latency_s = 4.4e-6;  // a kernel's own floor (ramp-up, tail): H200's smallest kernels
  double gemm_k_half = 128;          // 16-bit k at which a tile's main loop runs at half speed (fp8: twice)
  // Fused attention (docs/model.md, "Fused attention"), [forward, backward]: the sequence
  // at which a kernel runs at half its plateau, and the query tiles per SM its last, uneven
  // tiles leave idle (the rate scales by n / (n + tail)). Fitted to cuDNN's and
  // FlashAttention-2's kernels over sequence and batch x heads on one H200
  // (calibrate/measurements/attention-tiles-h200-2026-12-03). The backward's main kernel at
  // attention_backward_factor of the forward's plateau, with its small kernels
  // (attention_backward_aux_seconds: two, and GQA's two reductions) priced as streams of their
  // own and run from the call's queue: fitted to SDPA's H200 table (the median |error| of its
  // 228 backward calls, 2.3 %); held out, the H100's table 2.9 % and the tile measurement's
  // queued calls 3.4 % RMS (docs/model.md, "Fused attention").
  std::array<double, 2> attention_seq_half{430, 580};
  double attention_backward_factor = 0.905;
  // Dropout inside a fused attention kernel (model.dropout > 0): the mask is drawn per score
  // element by Philox in the forward and drawn again in the backward, integer work beside the
  // tensor cores' that does not overlap them. [forward, backward] ALU operations per score
  // element (under the causal mask, half the square), at the GPU's FP32 (ALU) rate: pooled
  // over six shapes of cuDNN's fused kernel and FlashAttention-2's, each with and without
  // dropout 0.1, on one H200 (calibrate/measurements/attention-dropout-h200-2026-12-03;
  // docs/model.md). cuDNN's forward doubles; FlashAttention-2's pays in its backward.
  std::array<double, 2> attention_dropout_ops{82, 32};
  std::array<double, 2> flash2_dropout_ops{28, 52};
  std::array<double, 2> attention_tail_tiles{1.3, 1.0};
  // Head dims under 128 move half the bytes a FLOP through the same pipeline at a lower rate:
  // (d/128)^x of the plateau, x per [forward, backward]. cuDNN's fused kernels (PyTorch SDPA),
  // each call timed queued behind a spin on an H100 and an H200 (calibrate/measurements/
  // pytorch/run6: 228 rows each): head dim 64 over 128 at 2,048-8,192 tokens is 0.71 forward,
  // 0.76 backward (x 0.50 and 0.40). FlashAttention-2 keeps the 0.6 the form was written with
  // (not measured apart).
  std::array<double, 2> attention_head_dim_exponent{0.50, 0.40};
  double flash2_head_dim_exponent = 0.6;
  // FlashAttention-2 (training.attention: flash2): the 2023 kernel, which uses neither
  // wgmma nor TMA. On Hopper-class GPUs its forward plateau is flash2_hopper_efficiency of
  // peak (measured 0.36 on an H200) and its forward tail longer; elsewhere it is the fused
  // kernel.
  bool flash2 = false;
  double flash2_hopper_efficiency = 0.376;
  double flash2_tail_tiles = 2.0;
  // FlashAttention-2's backward main kernel at this share of its forward plateau, and the
  // fused kernel's on GPUs before Hopper, which is FlashAttention-2 (the tile measurement's
  // fit; attention_backward_factor is cuDNN's on Hopper and later).
  double flash2_backward_factor = 0.885;
  // FP8 fused attention (a prefill's context attention under TensorRT-LLM's
  // use_fp8_context_fmha): its two products at the FP8 peak, at this share of the BF16
  // kernel's efficiency. FlashAttention-3 on an H100 reaches ~1.2 PFLOP/s in FP8 against
  // 740 TFLOP/s in FP16, 0.61 and 0.75 of the peaks (Shah et al. 2024, abstract): 0.81, a
  // 1.62x faster kernel where the tensor cores' doubling alone would give 2x, the softmax's
  // exponentials (3.9 TFLOP/s of special functions on an H100) taking the same time in both.
  double fp8_attention_efficiency = 0.81;
  // FlashAttention in Triton (training.attention: triton): the 2022-23 Triton kernel of
  // flash_attn_triton.py that MPT / LLM Foundry ran by default (attn_impl: triton), compiled
  // by Triton's pre-MLIR backend: FlashAttention-2's work (flash2 is set with it) at
  // triton_attention_factor its time at head dim 128, forward and backward alike, and at
  // head dim 64 the same FLOP rate as at 128 (docs/model.md, "FlashAttention in Triton").
  // 1.9: the kernel's share of LLM Foundry's published 16K- and 32K-token MPT-1B steps
  // (1.89-1.99 on A100 and H100 alike).
  bool triton_attention = false;
  double triton_attention_factor = 1.9;
  // A kernel's time while a communication kernel runs on the same GPU, over its time
  // alone: [waiting p2p | waiting collective | userbuffers][gemm | attention | memory].
  // A measured profile (`calibrate --suite overlap`) sets them; 0 (the p2p and collective
  // rows' default) derives the factor from the SMs NCCL's channels hold (beside_blocks). The
  // p2p row applies to sends and receives posted ahead of compute (Op::overlaps_compute):
  // Megatron's blocking pipeline p2p holds no SMs beside compute. The userbuffers row's GEMM
  // entry 0 likewise derives the factor from the SMs the pipelined reduce-scatter holds and
  // the GEMM's margin (beside_userbuffers; docs/model.md, "Kernels beside communication").
  std::array<std::array<double, 3>, 3> overlap_slowdown{{{0.0, 0.0, 0.0}, {0.0, 0.0, 0.0}, {0.0, 1.0, 1.0}}};
  // Channels of an NCCL collective, one thread block on one SM each for as long as it
  // runs: 16 on 8-GPU NVSwitch nodes, alone and across nodes (NCCL's "16 coll channels"
  // on 8 x H800, "Channel 00/16" on 2 x 8 H100; NVIDIA/nccl issues 892, 1538). A send or
  // receive uses as many ("16 p2p channels per peer") while its communicator is within one
  // node, two once any of its ranks is elsewhere, whatever the peer (ncclTopoGetNchannels:
  // 2 per NIC, NCCL_NCHANNELS_PER_NET_PEER; ncclTopoComputeP2pChannels takes the fewest of
  // any pair).
  int nccl_channels = 16;
  int nccl_net_peer_channels = 2;
  int gemm_tile_m = 128;
  int gemm_tile_n = 256;
  // Clocks under the board's power cap (docs/model.md, "Clocks under the power cap"):
  // off, every kernel runs at its burst rate (the rate tables and efficiencies are timed
  // at). The share of a math-bound kernel's burst time that scales with the SM clock, as
  // measured at the cap on one H200: GEMMs 0.46-0.57, fused attention 0.71-0.88. Fused
  // attention spends more energy per tensor FLOP than a GEMM (the softmax's exponentials
  // and rescaling beside the products): forward 1.28x, backward 1.60x (cuDNN's kernels).
  bool power_cap = true;
  // The job's slowest board, as a factor on the capped FLOP rate (1: every board the
  // nominal one). Boards of one SKU at one power limit settle at different rates under the
  // cap, and a synchronous step runs at its slowest board's pace: apply_calibration sets
  // 1 - cluster.board_spread * E[max of n standard normals] for the n GPUs that meet at
  // the job's collectives (docs/model.md, "Clocks under the power cap").
  double slowest_board = 1.0;
  double clock_share_gemm = 0.5;
  double clock_share_attention = 0.75;
  // A math-bound kernel's energy per FLOP falls with the clock (the voltage the clock needs).
  // [GEMMs, attention]: a FLOP at the boost clock over one where the kernel's anchor (the
  // 8192^3 product; cuDNN's causal attention over 8 x 32 heads of 4,096 x 128) settles back to
  // back at the cap, where the energies above were measured. Measured on one H100
  // (calibrate/measurements/power-dropout-h100-2026-12-06, duty_cycle.py): in 20-40 ms bursts
  // under the board's one-second average, 8192^3 drew 1.04 pJ a FLOP above the floor at 0.99
  // of its burst rate, 0.837 back to back at the cap (0.881 of it); the attention forward 1.368
  // and 1.085 (0.874). Between the two, a power of the kernel's slowdown (PowerMix::energy_at).
  // 1: one energy a FLOP at every clock.
  std::array<double, 2> boost_energy_ratio{1.24, 1.26};
  std::array<double, 2> attention_energy_ratio{1.28, 1.60};  // [forward, backward]
  // The energy of dropout's Philox draws, above the idle floor, per element drawn: a fused
  // attention kernel's [forward, backward] per score element (the backward draws its mask
  // again), and PyTorch's dropout kernel (MemAccess::RandomMask) per element beyond its bytes'
  // stream. The draws keep the SMs' integer pipes busy: at the cap, cuDNN's attention with
  // dropout 0.1 draws what the board allows at a higher clock than without it, and the dropout
  // kernel draws 608 W where a copy of its bytes' rate would draw 496 (one H100;
  // calibrate/measurements/power-dropout-h100-2026-12-06). The attention's draws are what its
  // energy at the cap leaves once its FLOPs are priced at the clock it ran at (within 4 % of
  // its burst rate, the boost clock's energy a FLOP: boost_energy_ratio).
  std::array<double, 2> attention_dropout_energy{0.288e-9, 0.155e-9};
  double dropout_rng_energy = 0.339e-9;
  std::shared_ptr<const MeasuredTables> measured;  // from a calibration profile, or none
};

// A kernel's time beside `blocks` one-per-SM thread blocks of another kernel (an NCCL
// kernel's channels), over its time alone. GEMMs of 2-SM clusters (gpu.gemm_cluster_sms,
// Hopper and Blackwell) lose SMs in steps, as measured on one H200 (the median of four
// large GEMMs; calibrate/measurements/overlap-sm-h200-2026-12-02 and
// flash2-h200-2026-12-03): 1-2 blocks 1.077, 3-8 1.145, 9-24 1.29, 25-32 1.45, then
// N / (N - 2·blocks) with its excess over 1 scaled to meet 1.45 at 32; other GEMMs and attention kernels (one-CTA
// blocks) N / (N - blocks); memory-bound kernels keep HBM's rate on the SMs left: 1 (docs/model.md, "Kernels beside
// communication").
double beside_blocks(OpKind kind, const GpuSpec& gpu, int blocks);
// The column of overlap_slowdown a kernel reads: 0 GEMM, 1 attention, 2 anything else.
size_t overlap_kind_index(OpKind kind);
// The same beside an NCCL collective (the profile's measured `collective` row, else
// nccl_channels blocks) and beside a send or receive posted ahead (the `p2p` row, else
// nccl_channels blocks in a group within one node, nccl_net_peer_channels in one that is not).
double beside_collective(OpKind kind, const GpuSpec& gpu, const ComputeProfile& profile);
double beside_p2p(OpKind kind, const GpuSpec& gpu, const ComputeProfile& profile, bool network_peer);
// The same beside a userbuffers kernel of `held_sms` blocks (Transformer Engine's pipelined
// reduce-scatter, num_sm; 0: TE's default 16), the GEMM told to leave them (`sm_margin`,
// set_sm_margin) or not: the profile's measured `userbuffers` row where it has one, else
// for a GEMM on 2-SM clusters the steps measured on an H200 with the margin (1 block 1.00,
// up to 8 1.05, 16 1.37, 24 1.38, 32 1.58, then N / (N - 2·blocks) scaled to meet 1.58 at
// 32, as beside_blocks past its steps) and beside_blocks
// without it (docs/model.md, "Kernels beside communication").
double beside_userbuffers(OpKind kind, const GpuSpec& gpu, const ComputeProfile& profile, int held_sms,
                          bool sm_margin);

// The uncalibrated GEMM model: the fastest of the tile shapes and split-K factors a
// library would pick, each costed as whole waves of padded tiles. A grouped GEMM over
// experts (Op::group_experts) takes its experts' row tiles from grouped_row_tiles and
// splits neither k nor a tile's depth.
double gemm_default_seconds(const Op& op, const GpuSpec& gpu, const ComputeProfile& profile);
// A grouped GEMM's row tiles of tile_m rows over all its experts, expected: each expert's rows
// are its count of the op's group_tokens tokens that chose it (binomial, p = top_k / experts),
// each tiled on its own. Exact below a variance of 16, the normal law with continuity
// correction above.
double grouped_row_tiles(const Op& op, int64_t tile_m);
// Kernel seconds for a GEMM, attention or memory op on one GPU (no launch gap).
// Collectives and p2p are the network's business and return 0 here.
double compute_seconds(const Op& op, const GpuSpec& gpu, const ComputeProfile& profile);
// How many kernels compute_seconds counted a floor and launch gap for, each timed between its
// own events: 1 for most ops; k for a memory op of k kernels; 3 for a fused attention backward
// costed with its two small kernels, 5 with GQA's reductions (1 where a measured table timed
// the whole call); 0 for an op with no kernel, a host wait, or a recorded time
// (op.fixed_seconds: a profiler's kernel time, no events in it).
int timed_kernel_count(const Op& op, const GpuSpec& gpu, const ComputeProfile& profile);
// An op of `seconds` (compute_seconds: its kernels as timed between events) as the GPU runs it
// from a framework's full queue, the launch gap of `gap_s` the executor adds before it
// excluded: n kernels take (seconds + gap_s - n · queue_saving), never less than
// n · queue_interval, so it returns that total less gap_s (at least 1 ps: the op stays a
// kernel). Ops with no timed kernel are returned as they are.
double queued_seconds(const Op& op, double seconds, double gap_s, const GpuSpec& gpu, const ComputeProfile& profile);
// Each program's op times, as `run` costs them: compute from a full queue (queued_seconds) at
// the clock the power cap leaves each phase (apply_power_cap); communication 0. What a
// Chakra export writes as duration_micros (plan/chakra.h).
std::vector<std::vector<double>> program_compute_seconds(const Plan& plan, const GpuSpec& gpu,
                                                         const ComputeProfile& profile);
// A CUDA-core decode-attention kernel's math (MemAccess::CudaCoreDecode; 0 for any other op):
// its latency plus the longer of the whole grid's work over every SM and its longest block's
// work at one block's share of an SM. compute_seconds takes the longer of this and its stream.
double cuda_core_decode_seconds(const Op& op, const GpuSpec& gpu, const ComputeProfile& profile);
// What drawing a dropout mask adds to a fused attention kernel (0 without dropout).
double attention_dropout_seconds(const Op& op, const GpuSpec& gpu, const ComputeProfile& profile);
// A fused attention backward's two small kernels beside its main one (0 for any other op):
// cuDNN's compute_dot_do_o and convert_dq_to_16bits, FlashAttention-2's flash_bwd_dot_do_o and
// convert_dq. The first reads the 16-bit O and dO for D = rowsum(dO ∘ O) and zeroes the FP32 dQ
// accumulator (8 bytes an element of Q), the last converts it to the 16-bit dQ (6 bytes); each
// a kernel's floor and launch gap and its stream. Part of the attention op's time, as the
// library call that runs all three is one op (docs/model.md, "Fused attention").
double attention_backward_aux_seconds(const Op& op, const GpuSpec& gpu, const ComputeProfile& profile);
// The score elements a fused attention's dropout mask draws: batch · heads · q · kv, half
// the square under the causal mask.
double attention_dropout_scores(const Op& op);
// Those small kernels' bytes (0 for any other op): 8 and 6 an element of Q, and with GQA the
// two reductions'.
double attention_backward_aux_bytes(const Op& op);
// What of an attention op's time its small kernels take: none where a measured table timed
// the whole library call, them with it.
double attention_aux_in_op(const Op& op, const GpuSpec& gpu, const ComputeProfile& profile);
double gemm_wave_efficiency(const Op& op, const GpuSpec& gpu, const ComputeProfile& profile);

}  // namespace clustersim
