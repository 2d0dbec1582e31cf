// GPU presets: peak dense throughput per dtype, HBM size and bandwidth, SM count.
// Datasheet values (REFERENCE.md "Hardware"); measured efficiencies live in
// calibration profiles, never here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "topology/dtype.h"

namespace clustersim {

struct GpuSpec {
  std::string name;
  double peak_fp32 = 0;  // FLOP/s, dense, non-tensor-core FP32
  double peak_tf32 = 0;  // FLOP/s, dense tensor-core TF32
  double peak_bf16 = 0;  // FLOP/s, dense (FP16 is the same on every preset)
  double peak_fp8 = 0;   // FLOP/s, dense; 0 where the GPU has no FP8 tensor cores
  double peak_int8 = 0;  // OP/s, dense
  double hbm_bytes = 0;
  double hbm_bandwidth = 0;  // bytes/s
  int sm_count = 0;
  // The board's power cap (docs/model.md, "Clocks under the power cap"); 0 where the
  // preset has no measurement: every kernel then runs at its burst rate.
  double power_limit_w = 0;       // board power limit
  double idle_power_w = 0;        // the board busy but between kernels (clocks up)
  double stream_power_w = 0;      // the board while a memory-bound kernel streams at full rate
  double capped_bf16_flops = 0;   // FLOP/s of BF16 tensor work alone at the cap (all GEMM shapes alike)
  double fp8_energy_ratio = 0.5;  // energy of an FP8 tensor FLOP over a BF16 one
  // SMs one thread-block cluster of the library's GEMM kernels spans: 2 on Hopper and
  // Blackwell (cuBLAS runs 2-CTA clusters on SM pairs), 1 before. A block of another
  // kernel on one SM of a pair leaves the pair to the GEMM unused.
  int gemm_cluster_sms = 1;
  // The library's GEMM kernels are persistent with a stream-K tile scheduler (CUTLASS 3's
  // on Hopper and Blackwell, which cuBLAS runs there): the tiles that do not fill a last wave
  // have their k-loop shared out over every SM, partial sums reduced after, instead of a
  // padded wave of whole tiles.
  bool gemm_stream_k = false;
  // Boost SM clock, Hz (datasheets); 0 where unknown. With sm_count it sets the rate of the
  // SMs' issue slots that per-element integer, conversion and special-function work takes
  // (alu_slot_rate); 0 falls back to the FP32 peak.
  double sm_clock_hz = 0;
  // CTAs NCCL gives an NVLS collective inside one node (src/transport/nvls.cc: 16 on
  // Hopper, 24 on Blackwell's NVL nodes).
  int nvls_channels = 16;

  // Peak for a GEMM whose inputs are `d` (FP32 GEMMs run on TF32 tensor cores is
  // *not* assumed: FP32 means true FP32). Falls back to the next wider type when the
  // GPU lacks a path for `d` (e.g. FP8 on A100 runs as BF16).
  double peak_flops(DType d) const;
  // Issue slots a second for per-element work that is not FP32 arithmetic (index math,
  // dtype conversions, Philox's integer multiplies, exponentials): sm_count x clock x 256,
  // the unit Hopper's FP32 peak counts (128 lanes, an FMA as 2), so a cost measured on an
  // H200 in its FP32-op slots carries over. Ampere and Volta SMs have half Hopper's FP32
  // lanes but the same 64 INT32 lanes and 16 special-function units an SM a clock, so their
  // FP32 peak would price this work at twice its time (docs/model.md, "Kernel classes").
  double alu_slot_rate() const;
  bool operator==(const GpuSpec&) const = default;
};

// Why `g`'s power model cannot be used ("" when it is whole, or absent: power_limit 0).
std::string power_model_problem(const GpuSpec& g);

const GpuSpec* find_gpu_preset(std::string_view name);
std::vector<std::string> gpu_preset_names();

// Whether a board's name as its driver reports it ("NVIDIA H100 80GB HBM3") is of the
// preset's model: the preset's first word (h100-sxm: h100) is one of the board's words.
// An empty name on either side matches (nothing to compare).
bool board_is_preset_model(const std::string& board, const std::string& preset);

}  // namespace clustersim
