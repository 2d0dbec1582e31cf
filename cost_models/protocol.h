// NCCL-like execution constants: protocols (LL, LL128, Simple) as latency and
// bandwidth-efficiency parameters, per-step hop latencies by link class, and the
// fraction of a link's line rate that collectives reach. Defaults are NCCL's own tuning
// model (src/graph/tuning.cc, v2.30) and its Hopper topology figures; a calibration
// profile replaces them with measurements.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "topology/topology.h"

namespace clustersim {

enum class Protocol : uint8_t { LL, LL128, Simple };
inline constexpr int kProtocols = 3;
std::string_view to_string(Protocol p);
bool parse_protocol(std::string_view s, Protocol& out);

// Latency families: NCCL tunes rings and trees separately; direct, halving-doubling and
// hierarchical schedules use the ring figures, in-switch reduction its own.
enum class LatencyFamily : uint8_t { Ring, Tree, Nvls };

struct ProtocolParams {
  double bandwidth_efficiency = 1.0;  // payload bytes per wire byte
  int64_t chunk_bytes = 512 * 1024;   // pipelining unit of one channel
};

// A fitted collective from a calibration profile: t = alpha + beta·bytes for one
// (operation, NCCL algorithm, protocol, group size), measured inside one node.
struct CollectiveFitRow {
  std::string op, algo, proto;  // "all-reduce", "ring" / "tree" / "direct" / "p2p" / "nccl", "LL" / … / "auto"
  int ranks = 2;
  double alpha_s = 0, beta_s_per_byte = 0;  // least-squares line over every measured size
  // Measured (bytes, seconds), ascending bytes. When present, a time is interpolated
  // linearly in bytes between the two measured sizes around it — a line through each
  // pair, so α and β per segment — and extended beyond the last by its last segment;
  // below the smallest size, the smallest size's time (latency-bound).
  std::vector<std::pair<double, double>> points;

  double seconds(double bytes) const;
};

struct NetworkProfile {
  // LL: 8-byte lines carry 4 data bytes, and the polling SMs deliver a third of the link
  // (measured, docs/model.md "LL's rate"); LL128: 120 of 128 bytes; Simple: all.
  // Chunks: NCCL's per-channel buffer (LL 256 KiB, LL128 ~1 MiB, Simple 4 MiB) over 8 steps.
  std::array<ProtocolParams, kProtocols> protocols{
      {{1.0 / 3.0, 32 * 1024}, {120.0 / 128.0, 128 * 1024}, {1.0, 512 * 1024}}};
  // Base latency per collective, seconds: [family][protocol].
  std::array<std::array<double, kProtocols>, 3> base_latency{{
      {6.6e-6, 14.0e-6, 8.4e-6},    // ring
      {6.8e-6, 14.0e-6, 8.4e-6},    // tree
      {25.0e-6, 25.0e-6, 25.0e-6},  // NVLS (intra-node)
  }};
  // Latency of one step over a route whose slowest link class is [class], seconds:
  // [class][ring|tree|nvls][protocol]. NVLS inside a node takes the ring's NVLink step;
  // across nodes (NCCL's NVLS tree) a network step is NCCL's NET NVLS-tree latency, 20.9 us
  // (src/graph/tuning.cc, 2.28). NVLS runs Simple only: its LL and LL128 entries are unused.
  std::array<std::array<std::array<double, kProtocols>, 3>, 3> hop_latency{{
      {{{0.6e-6, 1.9e-6, 3.4e-6}, {0.6e-6, 1.25e-6, 4.0e-6}, {0.6e-6, 1.9e-6, 3.4e-6}}},     // NVLink
      {{{1.0e-6, 2.5e-6, 5.7e-6}, {1.0e-6, 2.5e-6, 5.7e-6}, {1.0e-6, 2.5e-6, 5.7e-6}}},      // PCIe
      {{{2.7e-6, 4.0e-6, 14.0e-6}, {5.0e-6, 8.5e-6, 14.0e-6}, {2.7e-6, 4.0e-6, 20.9e-6}}},  // network
  }};
  // The physical latency NCCL's per-step figures above already hold, per class: they were
  // measured end to end over a route through one switch, at the default link latencies
  // (NVLink 0.25 us, PCIe 0.5, scale-out 0.5): GPU, NVSwitch, GPU (0.5 us); GPU, PCIe
  // switch, GPU (1.0); GPU, PCIe switch, NIC, leaf, NIC, PCIe switch, GPU (four PCIe and
  // two scale-out links, 3.0). A route adds only what its links hold beyond that: spine
  // hops, a torus's hops, a detour over NVLink to another GPU's NIC, slower links.
  std::array<double, 3> figure_route_latency{0.5e-6, 1.0e-6, 3.0e-6};
  // Fraction of line rate collectives reach per link class. NVLink: NCCL models a
  // Hopper NVLink as 20.6 GB/s per link x 18 links = 370.8 of 450 GB/s.
  std::array<double, 3> link_efficiency{370.8 / 450.0, 0.80, 0.92};
  // In-switch reduction reaches this fraction of the links' collective rate: the switch's
  // reduction throughput, not the links, limits it. An 8-GPU H100 all-reduce peaks at
  // ~480 GB/s busbw, algbw ~275 GB/s (NCCL's maintainers, NVIDIA/nccl-tests#212; GTC
  // S62129): 275 / 370.8 = 0.7416. NCCL's own tuner assumes 0.85 on Hopper (src/graph/tuning.cc),
  // which would predict 551 GB/s.
  double nvls_efficiency = 0.7416;
  // Measured collectives (calibration); used for groups inside one node when present.
  std::shared_ptr<const std::vector<CollectiveFitRow>> collective_fits;

  const ProtocolParams& protocol(Protocol p) const { return protocols[static_cast<size_t>(p)]; }
  double base(LatencyFamily f, Protocol p) const {
    return base_latency[static_cast<size_t>(f)][static_cast<size_t>(p)];
  }
  double hop(LinkClass c, LatencyFamily f, Protocol p) const {
    const size_t family = f == LatencyFamily::Tree ? 1 : f == LatencyFamily::Nvls ? 2 : 0;
    return hop_latency[static_cast<size_t>(c)][family][static_cast<size_t>(p)];
  }
  double efficiency(LinkClass c) const { return link_efficiency[static_cast<size_t>(c)]; }
  // A step's latency over a route of class c whose links add up to `physical`: NCCL's
  // per-step figure and what the route has beyond the figure's route.
  double step_latency(LinkClass c, LatencyFamily f, Protocol p, double physical) const {
    return hop(c, f, p) + std::max(0.0, physical - figure_route_latency[static_cast<size_t>(c)]);
  }
};

}  // namespace clustersim
