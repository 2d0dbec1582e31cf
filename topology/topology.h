// The cluster as a Boost.Graph graph: GPUs, NVSwitches, PCIe switches, CPUs, NICs and
// scale-out switches are vertices; every physical link is two directed edges, each
// with its own bandwidth and latency (a full-duplex link carries its rate both ways).
//
// Routing is shortest path by serialization cost (1/bandwidth summed over hops), so
// GPU-to-GPU traffic inside a node takes NVLink rather than PCIe. Among equal-cost
// paths, a GPU leaves and enters its node through its own NIC when it can (NIC
// affinity, as NCCL pairs each GPU with the nearest NIC: local GPU i of g uses NIC
// i·nics/g); remaining ties (which spine) are broken by the destination's NIC index
// modulo the number of choices — InfiniBand's destination-mod-k fat-tree routing,
// under which shift permutations (rings) never collide on a link.
// GPUs are never transit vertices. Routes are computed on first use and cached; a Topology belongs
// to one run and is not shared between threads.
#pragma once

#include <array>
#include <boost/graph/adjacency_list.hpp>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "topology/gpu.h"
#include "topology/huge_pages.h"

namespace clustersim {

enum class VertexKind : uint8_t { Gpu, NvSwitch, PcieSwitch, Cpu, Nic, Switch };
enum class LinkClass : uint8_t { NvLink, Pcie, Network };
std::string_view to_string(LinkClass c);

struct VertexProps {
  VertexKind kind = VertexKind::Gpu;
  std::string name;
  int32_t node = -1;   // -1 for fabric switches
  int32_t local = -1;  // index of a GPU or NIC inside its node
};

// A route with the sums its users need, kept beside its links when it is cached (so a
// lookup need not walk the links again).
struct Route {
  std::span<const uint32_t> links;    // in hop order; empty when src == dst
  double latency = 0;                 // the hops' latencies summed
  LinkClass cls = LinkClass::NvLink;  // the slowest class on it (network over PCIe over NVLink)
};


struct Link {
  uint32_t id = 0;
  uint32_t src = 0, dst = 0;  // vertex ids
  LinkClass cls = LinkClass::Network;
  double bandwidth = 0;  // bytes/s, this direction
  double latency = 0;    // seconds, this hop
  int64_t cost = 0;      // the search's integer cost: attoseconds per byte, llround(1e18 / bandwidth)
};

// Edges carry no property (Boost keeps each edge's property on the heap): a vertex's
// links are Topology::out_links(v), in the order its edges were added.
using ClusterGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, VertexProps>;

// How GPUs inside a node are connected and how the node reaches the fabric.
struct NodeSpec {
  std::string preset;
  GpuSpec gpu;
  int gpus = 8;
  bool nvswitch = true;         // false: GPUs talk over PCIe (through their switch, then the CPU)
  // The switch reduces in place (NVLink SHARP, NCCL's NVLS): third-generation NVSwitch of
  // NVLink 4 systems (H100, H200) and NVLink 5 (B200, GB200). DGX A100's second-generation
  // NVSwitch and MI300X's Infinity Fabric have no in-switch reduction.
  bool nvls = false;
  double nvlink_bandwidth = 0;  // bytes/s per GPU per direction into the NVSwitch
  double nvlink_latency = 0;    // seconds per hop
  double pcie_bandwidth = 0;    // bytes/s per direction, GPU or NIC to its PCIe switch
  double pcie_latency = 0;
  int gpus_per_pcie_switch = 2;
  int nics = 8;              // NICs per node, spread evenly over the PCIe switches
  double nic_bandwidth = 0;  // bytes/s per NIC per direction
  // Direct GPU-to-GPU NVLinks (a topology file's mesh, as DGX-1's hybrid cube mesh),
  // beside or instead of the NVSwitch: local GPU indices and the bandwidth each way.
  struct GpuLink {
    int a = 0, b = 0;
    double bandwidth = 0;
    bool operator==(const GpuLink&) const = default;
  };
  std::vector<GpuLink> gpu_links;
  bool operator==(const NodeSpec&) const = default;  // built alike, field for field
};

enum class FabricKind : uint8_t { Switch, FatTree, RailOptimized, Ring, Torus };
std::string_view to_string(FabricKind f);

struct FabricSpec {
  FabricKind kind = FabricKind::FatTree;
  double latency = 0.5e-6;        // seconds per scale-out link (NIC-switch, switch-switch)
  double oversubscription = 1.0;  // leaf down-links : up-links bandwidth
  int nics_per_leaf = 32;         // leaf switch radix towards the hosts
};

// A scale-out link a topology file names: its ends are switches (by name) or NICs
// ("node3/nic1"), both directions at one bandwidth.
struct FabricLink {
  std::string a, b;
  double bandwidth = 0;  // bytes/s each way
  double latency = 0.5e-6;
};

struct ClusterSpec {
  NodeSpec node;  // every node's, or node 0's when node_specs is set
  int nodes = 1;
  FabricSpec fabric;
  // A topology file (`cluster.topology_file`, docs/topology-files.md): each node's own
  // spec (one per node; every node has the same GPU count), and, when `switches` is not
  // empty, the scale-out fabric as its switches and links instead of `fabric`.
  std::vector<NodeSpec> node_specs;
  std::vector<std::string> switches;
  std::vector<FabricLink> fabric_links;
  std::string topology_file;  // the file it came from, for outputs

  const NodeSpec& node_at(int n) const { return node_specs.empty() ? node : node_specs[static_cast<size_t>(n)]; }
  // Every node built alike on a generated fabric (what the structured routing needs).
  bool uniform() const;
  // Whether every GPU is the same model.
  bool one_gpu_model() const;
};

// "nodeN/nicK" (exactly: no leading zeros, nothing after) -> its node and NIC index.
bool parse_nic_name(const std::string& s, int& node, int& nic);

// "8 x dgx-h100 (8 x h100-sxm), fat-tree fabric"; a topology file's node groups joined
// by " + ", then its fabric ("3 switches, 18 links" when given link by link).
std::string describe(const ClusterSpec& c);
// The mean over the cluster's GPUs of their dense peak for `d` (MFU's denominator).
double mean_peak_flops(const ClusterSpec& c, DType d);

class Topology {
 public:
  explicit Topology(const ClusterSpec& spec);

  const ClusterSpec& spec() const { return spec_; }
  // Node 0's GPU: every GPU's, unless a topology file mixes models (gpu_of).
  const GpuSpec& gpu() const { return spec_.node.gpu; }
  const GpuSpec& gpu_of(int gpu) const { return spec_.node_at(node_of(gpu)).gpu; }
  // The distinct GPU models, in node order, and each GPU's index among them.
  const std::vector<GpuSpec>& gpu_models() const { return gpu_models_; }
  int gpu_model_of(int gpu) const { return gpu_model_[static_cast<size_t>(node_of(gpu))]; }
  const ClusterGraph& graph() const { return graph_; }
  const BigVector<Link>& links() const { return links_; }
  // A link's bandwidth, changed in place (variability: a slow cable). Routes and the
  // search's costs keep the nominal bandwidth, as a fabric's routing does not see it.
  void set_link_bandwidth(uint32_t id, double bandwidth) { links_[id].bandwidth = bandwidth; }
  const VertexProps& vertex(uint32_t v) const { return graph_[v]; }

  int num_gpus() const { return static_cast<int>(gpus_.size()); }
  int nodes() const { return spec_.nodes; }
  int gpus_per_node() const { return spec_.node.gpus; }
  int node_of(int gpu) const { return gpu / spec_.node.gpus; }
  uint32_t gpu_vertex(int gpu) const { return gpus_[static_cast<size_t>(gpu)]; }

  // Link ids from GPU `src` to GPU `dst`, in hop order; empty when src == dst.
  std::span<const uint32_t> route(int src, int dst) { return route_info(src, dst).links; }
  // The same, with its latency and class.
  Route route_info(int src, int dst);
  // The same route's links appended to `out`, its latency and class returned (links
  // empty): for a caller that keeps its own copy. A structured route not yet kept is
  // built from the structure and not stored, sparing the route table a route asked for
  // once; a searched route is kept as route_info keeps it.
  Route append_route(int src, int dst, std::vector<uint32_t>& out);
  // Asks the memory system for where route_info(src, dst) will look first (a caller
  // looking up many routes hides the cache misses of the later ones).
  void prefetch_route(int src, int dst) const;
  // The same route by plain Dijkstra over the whole graph, never from the structured
  // fast path (for tests that check the two agree).
  std::vector<uint32_t> route_by_search(int src, int dst) const;
  // Whether routes between nodes take the two-tier shortcut (no switch-level trees);
  // known once a route between nodes has been asked for.
  bool two_tier_routing() const { return two_tier_ && fast_state_ == 1; }
  // Whether route(src, dst) is built from the structure (templates, leaf-spine choice)
  // rather than searched; known once a route between nodes has been asked for.
  bool structured_route(int src, int dst) const {
    return fast_state_ == 1 && node_of(src) != node_of(dst) && (!rail_pairs_only_ || rail_pair_is_fast(src, dst));
  }
  // Whether the search for routes between nodes is pruned (prepare_search_pruning);
  // known once a route between nodes has been asked for.
  bool pruned_search() const { return prune_third_nics_ || !spine_of_vertex_.empty(); }
  // The NVLink hop between a GPU and its node's NVSwitch (in-switch reduction);
  // empty when the node has none.
  std::span<const uint32_t> switch_route(int gpu, bool to_switch) const;
  Route switch_route_info(int gpu, bool to_switch) const;
  // The bandwidth of a direct GPU-to-GPU link (a mesh node's NVLink), 0 when there is none.
  double gpu_link_bandwidth(int a, int b) const;
  // The rings NCCL's search would build over node `node`'s direct GPU links for its GPUs
  // `locals` (local indices, the first kept first), as local indices: the largest set of
  // directed Hamiltonian cycles (at most 16) that takes no more lanes of each link than
  // it has (a lane: the node's narrowest link), widest cycles first, by a bounded
  // depth-first search. Exhaustive, so for 3 to 8 GPUs; none otherwise. Computed once
  // per node build and set of GPUs.
  const std::vector<std::vector<int>>& mesh_rings(int node, const std::vector<int>& locals) const;
  // The slowest class on a route (network over PCIe over NVLink).
  LinkClass route_class(std::span<const uint32_t> r) const;
  double route_latency(std::span<const uint32_t> r) const;
  double route_bandwidth(std::span<const uint32_t> r) const;  // the bottleneck

 private:
  uint32_t add_vertex(VertexKind kind, std::string name, int node, int local = -1);
  void add_link(uint32_t a, uint32_t b, LinkClass cls, double bandwidth, double latency);
  void build_node(int n, std::vector<uint32_t>& nics);
  void build_fabric(const std::vector<std::vector<uint32_t>>& nics_by_node);
  // `prune`: skip what no shortest path between two nodes can use (prepare_search_pruning).
  // `unique`, when given, is cleared if the path passed a vertex with tied predecessors.
  // `node_only`: only vertices of src's node (empty when dst is not reached that way).
  // `max_cost`: only links of at most this serialization cost (at least that bandwidth).
  std::vector<uint32_t> shortest_path(uint32_t src, uint32_t dst, bool prune = false, bool* unique = nullptr,
                                      bool node_only = false,
                                      int64_t max_cost = std::numeric_limits<int64_t>::max()) const;
  // The searched route between two GPUs: inside their node where they share one, the
  // widest there (the largest slowest link, then the least cost).
  std::vector<uint32_t> searched_route(int src, int dst, bool prune) const;
  bool fast_routing_applies() const;
  void prepare_fast_routing();
  void fast_route(int src, int dst, std::vector<uint32_t>& path);  // into `path` (cleared first)
  int preferred_nic_local(int local_gpu) const { return preferred_nic_local(0, local_gpu); }
  int preferred_nic_local(int node, int local_gpu) const;
  void build_explicit_fabric(const std::vector<std::vector<uint32_t>>& nics_by_node);

  ClusterSpec spec_;
  std::vector<int> node_build_;  // per node: the first node wired as it is (mesh ring cache key)
  mutable std::map<std::pair<int, std::vector<int>>, std::vector<std::vector<int>>> mesh_rings_;
  std::vector<GpuSpec> gpu_models_;
  std::vector<int> gpu_model_;  // per node
  ClusterGraph graph_;
  BigVector<Link> links_;
  std::vector<uint32_t> gpus_;
  std::vector<std::array<uint32_t, 2>> gpu_switch_links_;  // per GPU: {to switch, from switch}; kNoLink without one
  static constexpr uint32_t kNoLink = ~uint32_t{0};
  // Routes between GPUs, computed once: an open-addressing table on (src, dst) whose
  // slots point into chunks of links that never move, so a returned span stays valid
  // while routes are added (a node-based map cost two cache misses a lookup at scale).
  // Each route's links follow a header of kRouteHeader words in its chunk: its latency
  // (a double's bits) and its class.
  struct RouteSlot {
    uint64_t key = ~uint64_t{0};  // empty
    uint32_t chunk = 0, offset = 0, length = 0;
  };
  const RouteSlot* find_route(uint64_t key) const;  // the kept route (src << 32 | dst), or null
  static constexpr uint32_t kRouteHeader = 3;
  BigVector<RouteSlot> route_slots_;
  size_t route_count_ = 0;
  std::vector<std::vector<uint32_t>> route_chunks_;  // each at its reserved capacity, never grown past it

  // Structured routing for homogeneous nodes on a switch or fat-tree fabric whose leaves
  // hold whole nodes: a route between nodes is the source node's GPU -> own-NIC path
  // (a template from node 0, shifted by the node's first link id), the NIC's up-link,
  // the switch path (Dijkstra over switches only, cached per source switch), the
  // destination NIC's down-link and its NIC -> GPU template. Same choices as the search.
  // Per switch (switch_index_) its equal-cost incoming links, ordered by the vertex they
  // come from, as the id of that set in the shared pool below: trees from different
  // source switches mostly hold the same sets (a leaf's links from every spine), and one
  // tree a leaf over every switch made their memory quadratic in the fabric.
  struct SwitchTree {
    std::vector<uint32_t> set;  // per switch: index into pred_first_
  };
  std::vector<uint32_t> pred_first_{0}, pred_links_;  // set k: pred_links_[pred_first_[k] .. pred_first_[k + 1])
  std::unordered_map<uint64_t, std::vector<uint32_t>> pred_sets_by_hash_;  // hash -> set ids
  std::vector<uint32_t> last_set_;  // per switch: its set in the tree built last (usually this one's too)
  // A two-tier fabric — every link between switches joins a leaf (a switch with NICs)
  // and a spine (one without), each leaf to each spine once, all at one bandwidth —
  // needs no tree: between two leaves the equal-cost paths are one per spine, and the
  // search's choice among them (destination-mod-k over spines in vertex order) is direct.
  // Checked when fast routing is prepared; any other fabric keeps the trees.
  bool two_tier_ = false;
  std::vector<int32_t> leaf_of_vertex_;  // vertex -> leaf index, -1 for other vertices
  size_t spine_count_ = 0;
  std::vector<uint32_t> leaf_up_, leaf_down_;  // [leaf * spine_count_ + spine]: leaf -> spine, spine -> leaf
  void prepare_two_tier();
  // Search pruning for routes between nodes, on any fabric (the plain search stays
  // available as route_by_search). Two rules, each applied only where it is exact:
  //  - a NIC of a third node is never entered, when a path through that node (two NIC
  //    links plus its internal links) can never tie or beat the switches' own path
  //    between its NICs' switches: every node's NICs on one switch (switch, ring, torus),
  //    or a two-tier fabric whose leaf-spine-leaf detour costs at most the two NIC links;
  //  - in a two-tier fabric, a spine enters only the leaves that hold a NIC of the
  //    source's or the destination's node: any other leaf leads only to third nodes or
  //    back to a spine, two hops longer.
  // Without them, a route on a rail-optimized fabric searched every NIC of the cluster.
  void index_nics();
  void prepare_search_pruning();
  bool prune_third_nics_ = false;
  // Out-links per vertex in the graph's edge order (CSR), for the search's inner loop.
  std::vector<uint32_t> out_first_, out_links_;  // each vertex's out-links (built with the graph)
  std::span<const uint32_t> out_links(uint32_t v) const {
    return {out_links_.data() + out_first_[v], out_first_[v + 1] - out_first_[v]};
  }
  std::vector<int32_t> nic_node_;  // per vertex: its node if it is a NIC, else -1
  std::vector<uint8_t> is_gpu_;    // per vertex
  std::vector<int32_t> spine_of_vertex_;  // two-tier fabrics: vertex -> spine index, -1 otherwise
  std::vector<int32_t> switch_index_;  // vertex -> dense switch index, -1 for other vertices
  size_t switch_count_ = 0;
  struct SwitchEdge {
    uint32_t link, dst_vertex;
    int32_t dst;  // switch index
    int64_t cost;
  };
  std::vector<std::vector<SwitchEdge>> switch_edges_;  // per switch index: links to other switches
  int fast_state_ = 0;                                 // 0 not prepared, 1 usable, -1 not applicable
  // Rail-optimized: the fast path holds only between GPUs whose NICs share a rail, on one
  // leaf, or across the spines where the search's tie-break among the node's equally
  // cheap NICs can be followed (rail_exit_nic).
  bool rail_pairs_only_ = false;
  // Per local GPU: the node-0 path to each NIC as cheap as the GPU's own (empty for the
  // others), and whether the ties on each side have the shape rail_exit_nic follows.
  std::vector<std::vector<std::vector<uint32_t>>> tied_exit_;
  std::vector<char> ties_followed_out_, ties_followed_in_;
  bool rail_pair_is_fast(int src, int dst) const;
  // The NIC (local index) the search leaves the source's node by, between GPUs of one rail
  // on different leaves; -1 where the structured route does not hold.
  int rail_exit_nic(int src, int dst) const;
  std::vector<uint32_t> node_link_base_;
  std::vector<std::vector<uint32_t>> exit_template_, enter_template_;  // per local GPU, node-0 link ids
  std::vector<uint32_t> nic_vertex_, nic_up_, nic_down_, nic_switch_;  // per global NIC
  std::unordered_map<uint32_t, SwitchTree> switch_trees_;
};

}  // namespace clustersim
