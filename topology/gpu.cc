#include "topology/gpu.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace clustersim {
namespace {

constexpr double T = 1e12;
constexpr double GB = 1e9;
constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

// Hopper and Blackwell GEMMs run as 2-CTA clusters on SM pairs (cuBLAS's sm90 / sm100
// kernels; calibrate/measurements/overlap-sm-h200-2026-12-02 shows the pairs lost).
// Boost SM clocks (datasheets): V100 SXM2 1,530 MHz; A100 (SXM and PCIe) 1,410; H100 and
// H200 SXM 1,980; H100 PCIe 1,755. B200 and GB200 publish none: their FP32 peak over 148 SMs
// of 128 FP32 lanes gives 1,980. Each times its SM count and 256 is within 0.2 % of its
// FP32 peak on Hopper and Blackwell and twice it on Volta and Ampere (64 FP32 lanes an SM).
// MI300X: none (its FP32 peak prices its per-element work).
std::vector<GpuSpec> with_sm_details(std::vector<GpuSpec> v) {
  for (GpuSpec& g : v) {
    if (g.name.starts_with("h100") || g.name.starts_with("h200") || g.name == "b200" || g.name == "gb200") {
      g.gemm_cluster_sms = 2;
      g.gemm_stream_k = true;
    }
    if (g.name.starts_with("v100")) g.sm_clock_hz = 1530e6;
    if (g.name.starts_with("a100")) g.sm_clock_hz = 1410e6;
    if (g.name == "h100-sxm" || g.name == "h200-sxm" || g.name == "b200" || g.name == "gb200") g.sm_clock_hz = 1980e6;
    if (g.name == "h100-pcie") g.sm_clock_hz = 1755e6;
    if (g.name == "b200" || g.name == "gb200") g.nvls_channels = 24;  // NVLS_NCHANNELS_SM100_NVL
  }
  return v;
}

// Sources: NVIDIA A100 / H100 / H200 / B200 datasheets (dense, no sparsity).
// Memory: what CUDA reports as the device's total (cudaMemGetInfo, torch.cuda.mem_get_info),
// the figure PyTorch, vLLM and TensorRT-LLM budget from, not the datasheet's: the driver keeps
// a part of the HBM (NVML's "reserved"). Measured on one H200 (calibrate/measurements/
// hbm-capacity-h200-2026-12-04): 139.80 GiB of nvidia-smi's 143,771 MiB, of which 616 MiB
// reserved; the "141GB" of the datasheet taken as 10^9 bytes would be 131.3 GiB. Others as
// their runtimes print it: H100 80GB 79.10 GiB (TensorRT-LLM's log, "Memory usage when
// calculating max tokens in paged kv cache: total: 79.10 GiB", docs/source/reference/memory.md
// and the trtllm-bench guide's log), A100 80GB 79.15, A100 40GB 39.39, V100 32GB 31.75,
// B200 178.35, GB200 184.31 GiB (PyTorch's out-of-memory message, "GPU 0 has a total capacity
// of ..."), MI300X 191.98 GiB (HIP, the same message). The PCIe boards are taken as their SXM
// siblings' (not seen printed).
const std::vector<GpuSpec>& presets() {
  static const std::vector<GpuSpec> kPresets = with_sm_details({
      // Tesla V100 SXM2 32 GB datasheet: FP32 15.7 TF, tensor (FP16) 125 TF, 900 GB/s HBM2,
      // 80 SMs. No BF16 or TF32 paths: BF16 is listed at the FP16 tensor rate (the
      // model's 16-bit type), TF32 at FP32.
      {"v100-sxm2-32gb", 15.7 * T, 15.7 * T, 125 * T, 0, 62 * T, 31.75 * GiB, 900 * GB, 80},
      {"a100-sxm-80gb", 19.5 * T, 156 * T, 312 * T, 0, 624 * T, 79.15 * GiB, 2039 * GB, 108},
      {"a100-sxm-40gb", 19.5 * T, 156 * T, 312 * T, 0, 624 * T, 39.39 * GiB, 1555 * GB, 108},
      {"a100-pcie-80gb", 19.5 * T, 156 * T, 312 * T, 0, 624 * T, 79.15 * GiB, 1935 * GB, 108},
      // Power (H100 and H200 SXM: the same GH100 die on a 700 W board), measured on one
      // H200 (calibrate/measurements/power-h200-2026-12-02, sustained-h200-2026-12-02,
      // clock-sensitivity-h200-2026-12-02): 122-125 W busy between kernels; ten BF16 GEMM
      // shapes from 2048^3 to 8192 x 28672 x 4096 all settle at 644-685 TFLOP/s at the cap
      // whatever their burst rate or clock (1,440-1,740 MHz); FP8 8192^3 at 1,199, so an
      // FP8 FLOP costs 0.55 of a BF16 one; 1 GiB streams (add, copy) draw 627-651 W at
      // 1,980 MHz, below the cap. The H100's HBM3 streams 0.71 of the H200's bytes a second
      // and draws the less for it: 1 GiB streams at 3.0 TB/s draw 498-513 W on two H100
      // boards (calibrate/measurements/power-h100-2026-12-05), the same ~125 pJ a byte above
      // the idle floor as the H200's. Its idle floor (125 W), FP8 energy ratio (0.544-0.570
      // over twelve shapes) and attention's energy are the H200's; its boards settled BF16 at
      // 681-687 TFLOP/s at the cap, which the preset does not take (docs/model.md, "Clocks
      // under the power cap").
      {"h100-sxm", 67 * T, 494.5 * T, 989.5 * T, 1979 * T, 1979 * T, 79.10 * GiB, 3350 * GB, 132, 700, 124, 505,
       660 * T, 0.55},
      {"h100-pcie", 51 * T, 378 * T, 756 * T, 1513 * T, 1513 * T, 79.10 * GiB, 2000 * GB, 114},
      {"h200-sxm", 67 * T, 494.5 * T, 989.5 * T, 1979 * T, 1979 * T, 139.80 * GiB, 4800 * GB, 132, 700, 124, 640,
       660 * T, 0.55},
      // B200 as DGX / HGX B200 carry it (datasheets, per GPU = the system's / 8): BF16 2.25,
      // FP8 4.5 PFLOP/s dense (18 and 72 PF sparse for eight), 1,440 GB of HBM3e -> 180 GB
      // at 8 TB/s (64 TB/s for eight). FP32 and TF32 dense as on the HGX B200 sheet.
      // Power: the HGX B200 board's 1,000 W. BF16 GEMMs from 4096^3 to 8192^3 reach one rate
      // whatever their shape, 1.41-1.45 PFLOP/s (pytorch/ao #2427, benchmarks/float8/bench_matmul.py
      // on a B200; XLA's measured sm_100 table, matmul_interpolator_data.h, 4096^3 at 1,417),
      // where 256 x 256 tiles on 74 SM pairs leave 4096^3 at 86 % of 8192^3's wave efficiency:
      // a flat rate over shapes is the cap's signature, as on the H200 (644-685 over ten shapes).
      // An FP8 FLOP at Hopper's measured 0.55 of a BF16 one (the same sources bracket it:
      // XLA's FP8 4096^3 at 2,765, 0.51; TE.Linear's FP8 8192^3 at 2,377 with its casts,
      // TransformerEngine #1747, 0.60). Idle and streaming power: no Blackwell measurement;
      // the H200's 124 and 640 W scaled by the board limit (177, 914 W).
      {"b200", 75 * T, 1100 * T, 2250 * T, 4500 * T, 4500 * T, 178.35 * GiB, 8000 * GB, 148, 1000, 177, 914,
       1420 * T, 0.55},
      // GB200 NVL72 datasheet, per GPU (the rack's figures / 72, sparsity halved): TF32
      // 1.25 PF, BF16 2.5 PF, FP8 5 PF dense; 13.4 TB HBM3e at 576 TB/s -> 186 GB at
      // 8 TB/s. FP32 (not on the sheet) as B200's; 148 SMs as B200.
      // Power: the same dies and HBM as B200, sustaining B200's rate under a training load. The
      // board is rated 1,200 W, which at B200's energy per FLOP, (1,000 - 177) W / 1,420
      // TFLOP/s, would buy 1,765 TFLOP/s at the cap; every published GB200 run sits at B200's
      // sustained rate instead: Megatron-Bridge's archive, five GB200/B200 pairs on one layout
      // (25.09 and 25.11, 8B and 405B, FP8-CS and FP8-MX), 0.93-1.05, mean 1.006; DGX Cloud
      // v25.05's 405B on 128-512 GB200, 23-25 % slower than 1,200 W gives, 5-12 % from B200's
      // power; Megatron-Bridge's GB200 405B row at PP 16, +16 % against -5 %. So the budget a
      // GB200 in an NVL72 rack spends is taken as B200's 1,000 W (docs/model.md, "Clocks under
      // the power cap"); cluster.gpu_spec.power_limit and capped_bf16_tflops give 1,200 and 1,765.
      {"gb200", 75 * T, 1250 * T, 2500 * T, 5000 * T, 5000 * T, 184.31 * GiB, 8000 * GB, 148, 1000, 177, 914,
       1420 * T, 0.55},
      // AMD Instinct MI300X datasheet, dense matrix rates: FP32 163.4 TF, TF32 653.7,
      // BF16 1,307.4, FP8 2,614.9, INT8 2,614.9 TOPS; 192 GB HBM3 at 5.3 TB/s; 304 CUs.
      {"mi300x", 163.4 * T, 653.7 * T, 1307.4 * T, 2614.9 * T, 2614.9 * T, 191.98 * GiB, 5300 * GB, 304},
  });
  return kPresets;
}

}  // namespace

double GpuSpec::alu_slot_rate() const {
  return sm_clock_hz > 0 && sm_count > 0 ? static_cast<double>(sm_count) * sm_clock_hz * 256.0 : peak_fp32;
}

double GpuSpec::peak_flops(DType d) const {
  switch (d) {
    case DType::FP32:
      return peak_fp32;
    case DType::BF16:
    case DType::FP16:
      return peak_bf16;
    case DType::FP8:
      return peak_fp8 > 0 ? peak_fp8 : peak_bf16;
    case DType::INT8:
      return peak_int8 > 0 ? peak_int8 : peak_bf16;
    case DType::INT4:
      return peak_int8 > 0 ? peak_int8 : peak_bf16;  // int4 weights dequantize into int8/bf16 math
  }
  return peak_bf16;
}

std::string power_model_problem(const GpuSpec& g) {
  if (g.power_limit_w <= 0) return "";
  if (g.capped_bf16_flops > 0 && g.idle_power_w < g.power_limit_w && g.stream_power_w >= g.idle_power_w) return "";
  auto num = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return std::string(b);
  };
  return "the GPU's power model is incomplete (power_limit " + num(g.power_limit_w) + " W, idle_power " +
         num(g.idle_power_w) + " W, stream_power " + num(g.stream_power_w) + " W, capped_bf16_tflops " +
         num(g.capped_bf16_flops / 1e12) +
         "), expected idle_power <= stream_power, idle_power < power_limit and capped_bf16_tflops > 0 (power_limit "
         "0: no power model)";
}

const GpuSpec* find_gpu_preset(std::string_view name) {
  for (const auto& g : presets())
    if (g.name == name) return &g;
  return nullptr;
}

std::vector<std::string> gpu_preset_names() {
  std::vector<std::string> out;
  for (const auto& g : presets()) out.push_back(g.name);
  return out;
}

namespace {

// Lower-case alphanumeric words of a name: "NVIDIA H100 80GB HBM3" -> nvidia, h100, 80gb, hbm3.
std::vector<std::string> name_words(const std::string& name) {
  std::vector<std::string> words(1);
  for (const char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      words.back() += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!words.back().empty())
      words.emplace_back();
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

}  // namespace

bool board_is_preset_model(const std::string& board, const std::string& preset) {
  const std::vector<std::string> b = name_words(board), p = name_words(preset);
  return b.empty() || p.empty() || std::find(b.begin(), b.end(), p.front()) != b.end();
}

}  // namespace clustersim
