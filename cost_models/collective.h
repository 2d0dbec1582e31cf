// Collective algorithms as data: an algorithm turns (operation, group layout, bytes,
// protocol) into steps of point-to-point transfers between group positions; a network
// model (network.h analytic, flow_network.h flow) executes the steps over topology
// routes. Each algorithm's closed-form α-β cost lives beside it (closed_form_*), and
// tests check the expansion and the closed form agree on an uncontended network.
//
// Bytes follow nccl-tests: S is the full array for all-reduce, broadcast and reduce, the
// gathered array for all-gather and reduce-scatter, one rank's whole send buffer for
// all-to-all, and each rank's message for send/recv.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cost_models/protocol.h"
#include "plan/plan.h"

namespace clustersim {

enum class Algorithm : uint8_t { Ring, Tree, Direct, HalvingDoubling, Hierarchical, Nvls };
inline constexpr Algorithm kAlgorithms[] = {Algorithm::Ring,         Algorithm::Tree,
                                            Algorithm::Direct,       Algorithm::HalvingDoubling,
                                            Algorithm::Hierarchical, Algorithm::Nvls};
std::string_view to_string(Algorithm a);
bool parse_algorithm(std::string_view s, Algorithm& out);
LatencyFamily latency_family(Algorithm a);

// A transfer endpoint is a group position, or kSwitch: the NVSwitch of the other
// endpoint's node (in-switch reduction and multicast).
inline constexpr int32_t kSwitch = -1;

struct Transfer {
  int32_t src = 0, dst = 0;
  double bytes = 0;
  uint16_t channel = 0;  // which ring (RingMean latency)
};

// How the latencies of a repeated step add up.
//   Max:      lock-step rounds: repeat × max over transfers of (latency + bytes/rate).
//   RingMean: a pipelined ring: a piece of data crosses one ring edge per round, so over
//             the rounds it pays the ring's mean edge latency each time (NCCL: only the
//             node-crossing steps pay the network latency): repeat × max over channels of
//             the mean latency, plus repeat × the slowest transfer's bytes/rate.
//   Path:     a pipelined tree or chain: the first chunk pays every latency along the
//             deepest path, each later chunk one more round: Σ path latencies +
//             (repeat − |path|) × max latency, plus repeat × the slowest bytes/rate.
enum class StepLatency : uint8_t { Max, RingMean, Path };

struct CollectiveStep {
  std::vector<Transfer> transfers;  // run at once
  int64_t repeat = 1;               // identical consecutive steps
  StepLatency latency = StepLatency::Max;
  std::vector<uint32_t> path;  // Path: indices into transfers, the deepest route
};

// The latency part of a step (RingMean, Path) given each transfer's latency; for Max
// steps latency is not separable from bandwidth and this returns 0.
// Chunks a connection keeps in flight (NCCL_STEPS, src/include/device.h).
constexpr double kSlotsInFlight = 8;
// `round_data_s`: how long one round's data takes on its route (for Path steps, whose
// per-round latency overlaps the data of the chunks in flight).
double step_latency(const CollectiveStep& step, const std::vector<double>& transfer_latency, double round_data_s = 0);

// Where a group's members sit: node of each position, and whether nodes have NVSwitch.
struct GroupLayout {
  std::vector<int32_t> node;  // per position
  bool nvswitch = false;
  bool nvls = false;  // the switch reduces in place (NodeSpec::nvls)
  // Nodes without an NVSwitch whose GPUs have direct links (a mesh): the order, as
  // positions, that rings follow, each node's members along its links as NCCL's topology
  // search would find them (the widest bottleneck; tuner.cc). Empty: group order.
  std::vector<int32_t> ring;
  // A group inside one mesh node: its channels' rings over the links (tuner.h, mesh_rings).
  std::vector<std::vector<int32_t>> mesh_rings;
  int nvls_channels = 16;  // the nodes' GpuSpec::nvls_channels
  int ranks() const { return static_cast<int>(node.size()); }
  int nodes() const;     // distinct nodes
  int per_node() const;  // members per node when every node has the same count, else 0
};

// NCCL's NVLS chunk for an all-reduce of `bytes` over `concurrent_ops` (channels x heads):
// NCCL_NVLS_CHUNKSIZE (128 KiB) halved to 64, 32 and 16 KiB as the message shrinks below
// 64, 8 and 2 rounds of it (src/enqueue.cc, the NCCL_ALGO_NVLS branch of the chunk choice).
double nvls_chunk_bytes(double bytes, int concurrent_ops);
// Warp groups a chunk of NCCL's one-node NVLS all-reduce passes through in turn: scatter
// into the head's buffer, reduce and multicast through the switch, gather out
// (src/device/all_reduce.h, RunWorkColl<..., NCCL_ALGO_NVLS, NCCL_PROTO_SIMPLE>).
constexpr int kNvlsPipelineStages = 3;
// The same for its one-node all-gather (multicast the rank's chunk, then copy the received
// chunks out: the Bcast and Gather groups of src/device/all_gather.h) and reduce-scatter
// (scatter into the buffers, then reduce through the switch and out: src/device/reduce_scatter.h).
constexpr int kNvlsGatherScatterStages = 2;

struct CollectiveRequest {
  CollectiveKind op = CollectiveKind::AllReduce;
  Algorithm algo = Algorithm::Ring;
  Protocol proto = Protocol::Simple;
  double bytes = 0;
  int32_t root = 0;  // broadcast / reduce
};

struct Expansion {
  std::vector<CollectiveStep> steps;
  LatencyFamily family = LatencyFamily::Ring;
  Protocol proto = Protocol::Simple;
  double base_latency = 0;  // paid once
};

// Why (op, algorithm) cannot run on this layout, or "" when it can.
std::string unsupported_reason(CollectiveKind op, Algorithm algo, const GroupLayout& layout);
// NCCL's protocol for point-to-point transfers (send/recv, and all-to-all as its grouped
// send/recv): LL while a peer's bytes fit NCCL_P2P_LL_THRESHOLD (16 KiB) on each of the
// pair's channels, else Simple; never LL128, and NCCL_PROTO does not apply to them
// (src/enqueue.cc, addP2pToPlan). Two H200s run send/recv and all-to-all alike under
// NCCL_PROTO=LL, LL128 and Simple at every size (calibrate/measurements/h200x2-collectives-*).
// Channels a peer: 16 inside a node, 2 (NCCL_NCHANNELS_PER_NET_PEER) across nodes.
constexpr double kP2pLlThresholdBytes = 16 * 1024;
constexpr int kP2pChannelsInNode = 16;
constexpr int kP2pChannelsAcrossNodes = 2;
Protocol nccl_p2p_protocol(double bytes_per_peer, bool across_nodes);

// Why the algorithm cannot run under this protocol, or "" when it can: NCCL runs NVLS
// (in-switch reduction) with the Simple protocol only (src/graph/tuning.cc skips NVLS and
// NVLS tree under LL and LL128).
std::string unsupported_protocol_reason(Algorithm algo, Protocol proto);
// Throws std::invalid_argument with unsupported_reason() when it cannot.
Expansion expand_collective(const CollectiveRequest& req, const GroupLayout& layout, const NetworkProfile& profile);
// All-to-all with per-pair sizes: bytes[i][j] is what position i sends to j (direct).
Expansion expand_all_to_allv(const std::vector<std::vector<double>>& bytes, Protocol proto,
                             const NetworkProfile& profile);
// nccl-tests' sendrecv: each position sends `bytes` to its successor.
Expansion expand_sendrecv(int ranks, double bytes, Protocol proto, const NetworkProfile& profile);

// ---- closed forms on a uniform network: α per step, B bytes/s per transfer ---------
// Ring all-reduce 2(p−1)α + 2(p−1)/p·S/B; ring all-gather / reduce-scatter and direct
// all-to-all / all-gather / reduce-scatter (p−1)α + (p−1)/p·S/B; direct all-reduce twice
// that; halving-doubling all-reduce 2·lg p·α + 2(p−1)/p·S/B (Thakur et al. 2005).
double closed_form_seconds(CollectiveKind op, Algorithm algo, int p, double bytes, double alpha, double bandwidth);
// A pipelined chain or tree D transfers deep (a tree all-reduce: reduce up and broadcast
// down at once, so twice the tree's depth), C chunks of c bytes, k transfers on the
// busiest link: the first chunk pays D·α; every round moves k·c/B; after the first
// chunk a round's α hides behind the kSlotsInFlight chunks ahead of it:
// D·α + (D + C − 1)·k·c/B + (C − 1)·max(0, α/kSlotsInFlight − k·c/B).
double closed_form_pipelined(int depth, int64_t chunks, double chunk_bytes, int link_load, double alpha,
                             double bandwidth);
// Hierarchical all-reduce: ring reduce-scatter in the node (g ranks, α1, B1), ring
// all-reduce of S/g across n nodes (α2, B2), ring all-gather in the node.
double closed_form_hierarchical(int g, int n, double bytes, double alpha1, double bw1, double alpha2, double bw2);

// nccl-tests busbw = algbw × factor (doc/PERFORMANCE.md).
double busbw_factor(CollectiveKind op, int ranks);

// NCCL's double binary tree over n ranks (ncclGetBtree / ncclGetDtree): parent of each
// rank in the two trees, −1 at a root.
void double_binary_tree(int n, std::vector<int32_t>& parent_a, std::vector<int32_t>& parent_b);

}  // namespace clustersim
