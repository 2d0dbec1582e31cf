// Scenario keys of the cluster: node and GPU presets, a GPU nobody has preset, the fabric, power and memory reserve
// (scenarios/key_table.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "scenarios/key_table.h"
#include "scenarios/readers.h"
#include "scenarios/topology_file.h"
#include "scenarios/units.h"
#include "topology/presets.h"

namespace clustersim {
namespace {
namespace fs = std::filesystem;
}  // namespace

void add_cluster_keys(KeyList& t) {
  using S = Scenario;
  using N = YNode;
  t.insert(
      t.end(),
      {
          {"cluster", "mapping", "", "the machines and the fabric between them", nullptr},
          {"cluster.preset", "name", "(required)",
           "node preset: dgx-a100, dgx-h100, dgx-h200, dgx-b200, pcie-8gpu, dgx-gb200-nvl72 (72 GPUs in one NVLink "
           "domain), mi300x-8gpu",
           [](const N& n, S& s) {
             const NodeSpec* p = find_node_preset(as_enum(n, "cluster.preset", node_preset_names()));
             s.cluster.node = *p;
           }},
          {"cluster.topology_file", "path", "none",
           "the cluster node by node, with its own GPUs, boards and fabric (docs/topology-files.md; relative to this "
           "file), instead of preset, nodes, gpu, gpu_spec and scale_out",
           [](const N& n, S& s) {
             const fs::path p = as_path(n, "cluster.topology_file");
             s.cluster = load_topology_file(p.string(), n.mark);
             std::error_code ec;
             s.inputs.push_back(fs::weakly_canonical(p, ec).string());
           }},
          {"cluster.nodes", "integer", "1", "number of nodes",
           [](const N& n, S& s) { s.cluster.nodes = as_count(n, "cluster.nodes"); }},
          {"cluster.gpus_per_node", "integer", "preset's", "GPUs per node (1 for a single GPU)",
           [](const N& n, S& s) { s.cluster.node.gpus = as_count(n, "cluster.gpus_per_node"); }},
          {"cluster.gpu", "name", "preset's",
           "GPU preset: v100-sxm2-32gb, a100-sxm-80gb, a100-sxm-40gb, a100-pcie-80gb, h100-sxm, h100-pcie, h200-sxm, "
           "b200, gb200, mi300x",
           [](const N& n, S& s) {
             s.cluster.node.gpu = *find_gpu_preset(as_enum(n, "cluster.gpu", gpu_preset_names()));
           }},
          {"cluster.gpu_spec", "mapping", "", "a GPU nobody has preset: its fields over the node's GPU (dense rates)",
           nullptr},
          {"cluster.gpu_spec.name", "string", "custom", "the GPU's name in outputs",
           [](const N& n, S& s) { s.cluster.node.gpu.name = scalar(n, "cluster.gpu_spec.name", "a name"); }},
          {"cluster.gpu_spec.bf16_tflops", "number", "GPU's", "dense BF16/FP16 tensor TFLOP/s",
           [](const N& n, S& s) {
             s.cluster.node.gpu.peak_bf16 = 1e12 * as_number(n, "cluster.gpu_spec.bf16_tflops", 1e-3, 1e6);
           }},
          {"cluster.gpu_spec.fp8_tflops", "number", "GPU's", "dense FP8 tensor TFLOP/s (0: no FP8 tensor cores)",
           [](const N& n, S& s) {
             s.cluster.node.gpu.peak_fp8 = 1e12 * as_number(n, "cluster.gpu_spec.fp8_tflops", 0, 1e6);
           }},
          {"cluster.gpu_spec.tf32_tflops", "number", "GPU's", "dense TF32 tensor TFLOP/s",
           [](const N& n, S& s) {
             s.cluster.node.gpu.peak_tf32 = 1e12 * as_number(n, "cluster.gpu_spec.tf32_tflops", 0, 1e6);
           }},
          {"cluster.gpu_spec.fp32_tflops", "number", "GPU's", "FP32 (non-tensor) TFLOP/s",
           [](const N& n, S& s) {
             s.cluster.node.gpu.peak_fp32 = 1e12 * as_number(n, "cluster.gpu_spec.fp32_tflops", 1e-3, 1e6);
           }},
          {"cluster.gpu_spec.hbm", "size", "GPU's",
           "HBM capacity (e.g. 192GB; at least 1GiB: a size without a unit is bytes)",
           [](const N& n, S& s) {
             s.cluster.node.gpu.hbm_bytes = as_size(n, "cluster.gpu_spec.hbm");
             if (s.cluster.node.gpu.hbm_bytes < (int64_t{1} << 30))
               throw InputError(n.mark, "cluster.gpu_spec.hbm = " + n.scalar +
                                            " is under 1 GiB (a size without a unit is bytes), expected e.g. 80GB");
           }},
          {"cluster.gpu_spec.hbm_bandwidth", "bandwidth", "GPU's", "HBM bandwidth (e.g. 8TB/s)",
           [](const N& n, S& s) {
             s.cluster.node.gpu.hbm_bandwidth = as_bandwidth(n, "cluster.gpu_spec.hbm_bandwidth");
           }},
          {"cluster.gpu_spec.sm_count", "integer", "GPU's", "streaming multiprocessors (compute units)",
           [](const N& n, S& s) {
             s.cluster.node.gpu.sm_count = static_cast<int>(as_int(n, "cluster.gpu_spec.sm_count", 1, 100000));
           }},
          {"cluster.gpu_spec.sm_clock_mhz", "number", "GPU's",
           "boost SM clock in MHz (0: unknown); with sm_count, the rate of the issue slots that per-element integer, "
           "conversion and special-function work takes (sm_count x clock x 256; 0 prices it at the FP32 peak)",
           [](const N& n, S& s) {
             s.cluster.node.gpu.sm_clock_hz = 1e6 * as_number(n, "cluster.gpu_spec.sm_clock_mhz", 0, 1e5);
           }},
          {"cluster.gpu_spec.power_limit", "number", "GPU's", "board power limit in W (0: no power model, burst rates)",
           [](const N& n, S& s) {
             s.cluster.node.gpu.power_limit_w = as_number(n, "cluster.gpu_spec.power_limit", 0, 1e5);
           }},
          {"cluster.gpu_spec.idle_power", "number", "GPU's", "W the board draws busy between kernels, clocks up",
           [](const N& n, S& s) {
             s.cluster.node.gpu.idle_power_w = as_number(n, "cluster.gpu_spec.idle_power", 0, 1e5);
           }},
          {"cluster.gpu_spec.stream_power", "number", "GPU's",
           "W the board draws while a memory-bound kernel streams at full HBM rate",
           [](const N& n, S& s) {
             s.cluster.node.gpu.stream_power_w = as_number(n, "cluster.gpu_spec.stream_power", 0, 1e5);
           }},
          {"cluster.gpu_spec.capped_bf16_tflops", "number", "GPU's",
           "BF16 tensor TFLOP/s back to back at the power limit (sets the energy per FLOP)",
           [](const N& n, S& s) {
             s.cluster.node.gpu.capped_bf16_flops = 1e12 * as_number(n, "cluster.gpu_spec.capped_bf16_tflops", 0, 1e6);
           }},
          {"cluster.gpu_spec.fp8_energy_ratio", "number", "GPU's", "energy of an FP8 tensor FLOP over a BF16 one",
           [](const N& n, S& s) {
             s.cluster.node.gpu.fp8_energy_ratio = as_number(n, "cluster.gpu_spec.fp8_energy_ratio", 0.01, 10);
           }},
          {"cluster.gpu_spec.nvlink_bandwidth", "bandwidth", "preset's", "GPU-to-switch scale-up link, each way",
           [](const N& n, S& s) {
             s.cluster.node.nvlink_bandwidth = as_bandwidth(n, "cluster.gpu_spec.nvlink_bandwidth");
           }},
          {"cluster.scale_out", "mapping", "", "the fabric between nodes", nullptr},
          {"cluster.scale_out.topology", "name", "fat-tree", "fat-tree | rail-optimized | switch | ring | torus",
           [](const N& n, S& s) {
             parse_fabric(
                 as_enum(n, "cluster.scale_out.topology", {"fat-tree", "rail-optimized", "switch", "ring", "torus"}),
                 s.cluster.fabric.kind);
           }},
          {"cluster.scale_out.nic_bandwidth", "bandwidth", "preset's", "per NIC, each direction (e.g. 400Gbps)",
           [](const N& n, S& s) { s.cluster.node.nic_bandwidth = as_bandwidth(n, "cluster.scale_out.nic_bandwidth"); }},
          {"cluster.scale_out.nics_per_node", "integer", "preset's", "NICs per node (DGX presets: one per GPU)",
           [](const N& n, S& s) { s.cluster.node.nics = as_count(n, "cluster.scale_out.nics_per_node"); }},
          {"cluster.scale_out.oversubscription", "number", "1.0",
           "leaf down-link : up-link bandwidth ratio (1 to 1e6); whole spines: max(1, round(nics_per_leaf / this)) "
           "of them",
           [](const N& n, S& s) {
             s.cluster.fabric.oversubscription = as_number(n, "cluster.scale_out.oversubscription", 1.0, 1e6);
           }},
          {"cluster.scale_out.latency", "time", "0.5us", "latency of each scale-out link (NIC-switch, switch-switch)",
           [](const N& n, S& s) { s.cluster.fabric.latency = as_latency(n, "cluster.scale_out.latency"); }},
          {"cluster.scale_out.nics_per_leaf", "integer", "32", "NICs under one leaf switch (its down-link radix)",
           [](const N& n, S& s) { s.cluster.fabric.nics_per_leaf = as_count(n, "cluster.scale_out.nics_per_leaf"); }},
      });
}

}  // namespace clustersim
