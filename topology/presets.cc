#include "topology/presets.h"

namespace clustersim {
namespace {

constexpr double GBps = 1e9;

NodeSpec make(std::string name, const char* gpu, bool nvswitch, double nvlink, double pcie, int gpus_per_switch,
              int nics, double nic) {
  NodeSpec n;
  n.preset = std::move(name);
  n.gpu = *find_gpu_preset(gpu);
  n.gpus = 8;
  n.nvswitch = nvswitch;
  // NVLink SHARP came with the third-generation NVSwitch (NVLink 4, Hopper) and stays in
  // NVLink 5 (Blackwell).
  const std::string g = gpu;
  n.nvls = nvswitch && (g.rfind("h100-sxm", 0) == 0 || g.rfind("h200", 0) == 0 || g.rfind("b200", 0) == 0 ||
                        g.rfind("gb200", 0) == 0);
  n.nvlink_bandwidth = nvlink;
  // NVLink: about 0.25 us per hop (GPU to NVSwitch), so about 0.5 us GPU to GPU.
  n.nvlink_latency = 0.25e-6;
  n.pcie_bandwidth = pcie;
  n.pcie_latency = 0.5e-6;
  n.gpus_per_pcie_switch = gpus_per_switch;
  n.nics = nics;
  n.nic_bandwidth = nic;
  return n;
}

const std::vector<NodeSpec>& presets() {
  // NVLink3 600 GB/s and NVLink4 900 GB/s per GPU are bidirectional: 300 / 450 each way.
  // PCIe Gen4 x16 about 32 GB/s each way, Gen5 x16 about 64 GB/s. HDR 200 Gb/s, NDR 400 Gb/s.
  static const std::vector<NodeSpec> kPresets = {
      make("dgx-a100", "a100-sxm-80gb", true, 300 * GBps, 32 * GBps, 2, 8, 25 * GBps),
      make("dgx-h100", "h100-sxm", true, 450 * GBps, 64 * GBps, 2, 8, 50 * GBps),
      make("dgx-h200", "h200-sxm", true, 450 * GBps, 64 * GBps, 2, 8, 50 * GBps),
      make("dgx-b200", "b200", true, 900 * GBps, 64 * GBps, 2, 8, 50 * GBps),
      // Eight PCIe cards, four per PCIe switch, the two switches under one CPU root
      // complex; two 400 Gb/s NICs, one per switch.
      make("pcie-8gpu", "h100-pcie", false, 0, 64 * GBps, 4, 2, 50 * GBps),
      // GB200 NVL72: 72 Blackwell GPUs in one NVLink 5 domain (1.8 TB/s per GPU, 900 GB/s
      // each way, through the rack's NVLink switch trays), one 400 Gb/s ConnectX-7 per GPU
      // to the scale-out fabric; two GPUs per Grace CPU (NVLink-C2C, 450 GB/s each way).
      [] {
        NodeSpec n = make("dgx-gb200-nvl72", "gb200", true, 900 * GBps, 450 * GBps, 2, 72, 50 * GBps);
        n.gpus = 72;
        return n;
      }(),
      // MI300X platform: 8 GPUs fully connected by Infinity Fabric, one link of 64 GB/s
      // each way between every pair (seven per GPU, 896 GB/s bidirectional), no switch:
      // a pair moves at one link's rate, and RCCL's rings of an 8-GPU collective use the
      // seven links at once (Topology::mesh_rings). PCIe Gen5 x16 to one 400 Gb/s NIC per GPU.
      [] {
        NodeSpec n = make("mi300x-8gpu", "mi300x", false, 0, 64 * GBps, 2, 8, 50 * GBps);
        for (int a = 0; a < n.gpus; ++a)
          for (int b = a + 1; b < n.gpus; ++b) n.gpu_links.push_back({a, b, 64 * GBps});
        return n;
      }(),
  };
  return kPresets;
}

}  // namespace

const NodeSpec* find_node_preset(std::string_view name) {
  for (const auto& n : presets())
    if (n.preset == name) return &n;
  return nullptr;
}

std::vector<std::string> node_preset_names() {
  std::vector<std::string> out;
  for (const auto& n : presets()) out.push_back(n.preset);
  return out;
}

bool parse_fabric(std::string_view s, FabricKind& out) {
  for (FabricKind f :
       {FabricKind::Switch, FabricKind::FatTree, FabricKind::RailOptimized, FabricKind::Ring, FabricKind::Torus}) {
    if (s == to_string(f)) {
      out = f;
      return true;
    }
  }
  return false;
}

}  // namespace clustersim
