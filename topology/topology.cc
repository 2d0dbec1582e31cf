#include "topology/topology.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <queue>
#include <stdexcept>

namespace clustersim {

std::string_view to_string(LinkClass c) {
  switch (c) {
    case LinkClass::NvLink:
      return "nvlink";
    case LinkClass::Pcie:
      return "pcie";
    case LinkClass::Network:
      return "network";
  }
  return "?";
}

std::string_view to_string(FabricKind f) {
  switch (f) {
    case FabricKind::Switch:
      return "switch";
    case FabricKind::FatTree:
      return "fat-tree";
    case FabricKind::RailOptimized:
      return "rail-optimized";
    case FabricKind::Ring:
      return "ring";
    case FabricKind::Torus:
      return "torus";
  }
  return "?";
}

bool parse_nic_name(const std::string& s, int& node, int& nic) {
  char tail = 0;
  return std::sscanf(s.c_str(), "node%d/nic%d%c", &node, &nic, &tail) == 2 && node >= 0 && nic >= 0 &&
         s == "node" + std::to_string(node) + "/nic" + std::to_string(nic);
}

bool ClusterSpec::uniform() const { return node_specs.empty() && switches.empty(); }

bool ClusterSpec::one_gpu_model() const {
  for (const NodeSpec& n : node_specs)
    if (n.gpu != node.gpu) return false;
  return true;
}

std::string describe(const ClusterSpec& c) {
  auto group = [](int count, const NodeSpec& n) {
    return std::to_string(count) + " x " + n.preset + " (" + std::to_string(n.gpus) + " x " + n.gpu.name + ")";
  };
  std::string out;
  if (c.node_specs.empty()) {
    out = group(c.nodes, c.node);
  } else {
    int groups = 0, rest = 0;
    for (int n = 0; n < c.nodes;) {
      int k = n + 1;
      while (k < c.nodes && c.node_at(k).preset == c.node_at(n).preset && c.node_at(k).gpu.name == c.node_at(n).gpu.name)
        ++k;
      if (++groups <= 4)
        out += (out.empty() ? "" : " + ") + group(k - n, c.node_at(n));
      else
        rest += k - n;
      n = k;
    }
    if (rest > 0) out += " + " + std::to_string(rest) + " more nodes";
  }
  if (!c.switches.empty())
    return out + ", " + std::to_string(c.switches.size()) + " switches, " + std::to_string(c.fabric_links.size()) +
           " links";
  return out + ", " + std::string(to_string(c.fabric.kind)) + " fabric";
}

double mean_peak_flops(const ClusterSpec& c, DType d) {
  if (c.node_specs.empty()) return c.node.gpu.peak_flops(d);
  double sum = 0;
  for (const NodeSpec& n : c.node_specs) sum += n.gpu.peak_flops(d);
  return sum / static_cast<double>(c.node_specs.size());
}

Topology::Topology(const ClusterSpec& spec) : spec_(spec) {
  if (spec.nodes < 1 || spec.node.gpus < 1) throw std::invalid_argument("topology: need at least one node and one GPU");
  if (!spec.node_specs.empty()) {
    if (spec.node_specs.size() != static_cast<size_t>(spec.nodes))
      throw std::invalid_argument("topology: node_specs must give every node");
    for (const NodeSpec& n : spec.node_specs)
      if (n.gpus != spec.node.gpus) throw std::invalid_argument("topology: every node must have the same GPU count");
  }
  for (int n = 0; n < spec.nodes; ++n) {
    const GpuSpec& g = spec.node_at(n).gpu;
    size_t m = 0;
    while (m < gpu_models_.size() && gpu_models_[m] != g) ++m;
    if (m == gpu_models_.size()) gpu_models_.push_back(g);
    gpu_model_.push_back(static_cast<int>(m));
  }
  // Each node's build for the mesh-ring cache: the first node wired as it is, looked up
  // among the distinct wirings only.
  std::vector<int> wirings;
  for (int n = 0; n < spec.nodes; ++n) {
    size_t w = 0;
    while (w < wirings.size() && spec.node_at(wirings[w]).gpu_links != spec.node_at(n).gpu_links) ++w;
    if (w == wirings.size()) wirings.push_back(n);
    node_build_.push_back(wirings[w]);
  }
  std::vector<std::vector<uint32_t>> nics(static_cast<size_t>(spec.nodes));
  for (int n = 0; n < spec.nodes; ++n) {
    build_node(n, nics[static_cast<size_t>(n)]);
    // Room for every node's links and the fabric's (fewer than the nodes' own), so a
    // large cluster's link table is not copied as it grows.
    if (n == 0) {
      links_.reserve(2 * links_.size() * static_cast<size_t>(spec.nodes));
      graph_.m_vertices.reserve(2 * boost::num_vertices(graph_) * static_cast<size_t>(spec.nodes));
    }
  }
  if (spec.nodes > 1) {
    if (spec.switches.empty())
      build_fabric(nics);
    else
      build_explicit_fabric(nics);
  }
  // Each vertex's out-links in id order, which is the order its edges were added.
  const size_t nv = boost::num_vertices(graph_);
  out_first_.assign(nv + 1, 0);
  for (const Link& l : links_) ++out_first_[l.src + 1];
  for (size_t v = 0; v < nv; ++v) out_first_[v + 1] += out_first_[v];
  out_links_.resize(links_.size());
  std::vector<uint32_t> fill(out_first_.begin(), out_first_.end() - 1);
  for (const Link& l : links_) out_links_[fill[l.src]++] = l.id;
}

uint32_t Topology::add_vertex(VertexKind kind, std::string name, int node, int local) {
  auto v = static_cast<uint32_t>(boost::add_vertex(VertexProps{kind, std::move(name), node, local}, graph_));
  return v;
}

void Topology::add_link(uint32_t a, uint32_t b, LinkClass cls, double bandwidth, double latency) {
  for (auto [s, d] : {std::pair{a, b}, std::pair{b, a}}) {
    auto id = static_cast<uint32_t>(links_.size());
    links_.push_back(Link{id, s, d, cls, bandwidth, latency, std::llround(1e18 / bandwidth)});
    boost::add_edge(s, d, graph_);
  }
}

void Topology::build_node(int n, std::vector<uint32_t>& nics) {
  const NodeSpec& ns = spec_.node_at(n);
  node_link_base_.push_back(static_cast<uint32_t>(links_.size()));
  const std::string prefix = "node" + std::to_string(n) + "/";
  std::vector<uint32_t> local;
  for (int g = 0; g < ns.gpus; ++g) {
    local.push_back(add_vertex(VertexKind::Gpu, prefix + "gpu" + std::to_string(g), n, g));
    gpus_.push_back(local.back());
  }
  if (ns.nvswitch) {
    uint32_t sw = add_vertex(VertexKind::NvSwitch, prefix + "nvswitch", n);
    for (uint32_t g : local) {
      const auto first = static_cast<uint32_t>(links_.size());
      add_link(g, sw, LinkClass::NvLink, ns.nvlink_bandwidth, ns.nvlink_latency);
      gpu_switch_links_.push_back({first, first + 1});
    }
  } else {
    gpu_switch_links_.insert(gpu_switch_links_.end(), static_cast<size_t>(ns.gpus), {kNoLink, kNoLink});
  }
  for (const NodeSpec::GpuLink& l : ns.gpu_links) {
    // A preset trimmed to fewer GPUs (gpus_per_node) keeps the links among those it keeps.
    if (l.a >= ns.gpus || l.b >= ns.gpus) continue;
    if (l.a < 0 || l.b < 0 || l.a == l.b)
      throw std::invalid_argument("topology: a GPU link must join two different GPUs of its node");
    add_link(local[static_cast<size_t>(l.a)], local[static_cast<size_t>(l.b)], LinkClass::NvLink, l.bandwidth,
             ns.nvlink_latency);
  }
  const int per_switch = std::max(1, ns.gpus_per_pcie_switch);
  const int switches = (ns.gpus + per_switch - 1) / per_switch;
  uint32_t cpu = add_vertex(VertexKind::Cpu, prefix + "cpu", n);
  std::vector<uint32_t> pcie;
  for (int s = 0; s < switches; ++s) {
    pcie.push_back(add_vertex(VertexKind::PcieSwitch, prefix + "pcie" + std::to_string(s), n));
    add_link(pcie.back(), cpu, LinkClass::Pcie, ns.pcie_bandwidth, ns.pcie_latency);
  }
  for (int g = 0; g < ns.gpus; ++g)
    add_link(local[static_cast<size_t>(g)], pcie[static_cast<size_t>(g / per_switch)], LinkClass::Pcie,
             ns.pcie_bandwidth, ns.pcie_latency);
  if (spec_.nodes > 1) {
    for (int i = 0; i < ns.nics; ++i) {
      uint32_t nic = add_vertex(VertexKind::Nic, prefix + "nic" + std::to_string(i), n, i);
      // NICs are spread evenly over the PCIe switches, as on DGX/HGX boards.
      size_t sw = static_cast<size_t>(static_cast<int64_t>(i) * switches / ns.nics);
      add_link(nic, pcie[sw], LinkClass::Pcie, ns.pcie_bandwidth, ns.pcie_latency);
      nics.push_back(nic);
    }
  }
}

void Topology::build_explicit_fabric(const std::vector<std::vector<uint32_t>>& nics_by_node) {
  std::unordered_map<std::string, uint32_t> by_name;
  for (const std::string& name : spec_.switches) {
    if (by_name.count(name)) throw std::invalid_argument("topology: switch '" + name + "' is named twice");
    by_name[name] = add_vertex(VertexKind::Switch, name, -1);
  }
  auto end = [&](const std::string& name) -> uint32_t {
    if (auto it = by_name.find(name); it != by_name.end()) return it->second;
    int node = -1, nic = -1;
    if (parse_nic_name(name, node, nic) && node < static_cast<int>(nics_by_node.size()) &&
        nic < static_cast<int>(nics_by_node[static_cast<size_t>(node)].size()))
      return nics_by_node[static_cast<size_t>(node)][static_cast<size_t>(nic)];
    throw std::invalid_argument("topology: no switch or NIC named '" + name + "'");
  };
  for (const FabricLink& l : spec_.fabric_links) add_link(end(l.a), end(l.b), LinkClass::Network, l.bandwidth, l.latency);
}

void Topology::build_fabric(const std::vector<std::vector<uint32_t>>& nics_by_node) {
  const FabricSpec& f = spec_.fabric;
  // Each NIC's cable runs at its own rate; links between switches at the fastest NIC's
  // (a topology file may mix nodes whose NICs differ).
  double bw = spec_.node.nic_bandwidth;
  for (const NodeSpec& n : spec_.node_specs) bw = std::max(bw, n.nic_bandwidth);
  auto nic_bw = [&](uint32_t nic) { return spec_.node_at(graph_[nic].node).nic_bandwidth; };
  const double lat = f.latency;
  const int nics_per_node = spec_.node.nics;

  // Leaves with `members` NICs each, every leaf linked to every spine; the spine count
  // sets the up-link capacity: radix / oversubscription links of NIC bandwidth.
  auto leaf_spine = [&](const std::vector<std::vector<uint32_t>>& leaf_members, const std::string& name) {
    std::vector<uint32_t> leaves;
    for (size_t l = 0; l < leaf_members.size(); ++l) {
      leaves.push_back(add_vertex(VertexKind::Switch, name + "leaf" + std::to_string(l), -1));
      for (uint32_t nic : leaf_members[l]) add_link(nic, leaves.back(), LinkClass::Network, nic_bw(nic), lat);
    }
    return leaves;
  };
  auto connect_spines = [&](const std::vector<uint32_t>& leaves) {
    if (leaves.size() < 2) return;
    const int uplinks = std::max(1, static_cast<int>(std::lround(f.nics_per_leaf / f.oversubscription)));
    for (int s = 0; s < uplinks; ++s) {
      uint32_t spine = add_vertex(VertexKind::Switch, "spine" + std::to_string(s), -1);
      for (uint32_t leaf : leaves) add_link(leaf, spine, LinkClass::Network, bw, lat);
    }
  };

  switch (f.kind) {
    case FabricKind::Switch: {
      uint32_t sw = add_vertex(VertexKind::Switch, "switch", -1);
      for (const auto& nics : nics_by_node)
        for (uint32_t nic : nics) add_link(nic, sw, LinkClass::Network, nic_bw(nic), lat);
      break;
    }
    case FabricKind::FatTree: {
      std::vector<std::vector<uint32_t>> members;
      size_t count = 0;
      for (const auto& nics : nics_by_node)
        for (uint32_t nic : nics) {
          if (count++ % static_cast<size_t>(f.nics_per_leaf) == 0) members.emplace_back();
          members.back().push_back(nic);
        }
      connect_spines(leaf_spine(members, ""));
      break;
    }
    case FabricKind::RailOptimized: {
      // NIC i of every node joins rail i; a rail's leaves take nics_per_leaf nodes each.
      std::vector<uint32_t> all_leaves;
      for (int rail = 0; rail < nics_per_node; ++rail) {
        std::vector<std::vector<uint32_t>> members;
        for (size_t n = 0; n < nics_by_node.size(); ++n) {
          if (n % static_cast<size_t>(f.nics_per_leaf) == 0) members.emplace_back();
          members.back().push_back(nics_by_node[n][static_cast<size_t>(rail)]);
        }
        auto leaves = leaf_spine(members, "rail" + std::to_string(rail) + "/");
        all_leaves.insert(all_leaves.end(), leaves.begin(), leaves.end());
      }
      connect_spines(all_leaves);
      break;
    }
    case FabricKind::Ring:
    case FabricKind::Torus: {
      // A router per node aggregates its NICs; routers form a ring or a 2-D torus and
      // split the node's NIC bandwidth evenly over their neighbour links.
      const int nodes = spec_.nodes;
      int dx = nodes, dy = 1;
      if (f.kind == FabricKind::Torus) {
        for (int a = static_cast<int>(std::sqrt(static_cast<double>(nodes))); a >= 1; --a)
          if (nodes % a == 0) {
            dy = a;
            dx = nodes / a;
            break;
          }
      }
      std::vector<uint32_t> routers;
      for (int n = 0; n < nodes; ++n) {
        routers.push_back(add_vertex(VertexKind::Switch, "node" + std::to_string(n) + "/router", n));
        for (uint32_t nic : nics_by_node[static_cast<size_t>(n)])
          add_link(nic, routers.back(), LinkClass::Network, nic_bw(nic), lat);
      }
      const int neighbours = (dx > 2 ? 2 : dx - 1) + (dy > 2 ? 2 : dy - 1);
      const double link_bw = bw * nics_per_node / std::max(1, neighbours);
      auto id = [&](int x, int y) { return routers[static_cast<size_t>(y * dx + x)]; };
      for (int y = 0; y < dy; ++y)
        for (int x = 0; x < dx; ++x) {
          if (dx > 1 && (x + 1 < dx || dx > 2))
            add_link(id(x, y), id((x + 1) % dx, y), LinkClass::Network, link_bw, lat);
          if (dy > 1 && (y + 1 < dy || dy > 2))
            add_link(id(x, y), id(x, (y + 1) % dy), LinkClass::Network, link_bw, lat);
        }
      break;
    }
  }
}

namespace {
// A pair's key in the route table.
uint64_t route_key(int src, int dst) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(src)) << 32) | static_cast<uint32_t>(dst);
}
uint64_t mix(uint64_t x) {  // splitmix64 finalizer: a fixed, portable hash for ECMP
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

std::vector<uint32_t> Topology::shortest_path(uint32_t src, uint32_t dst, bool prune, bool* unique,
                                             bool node_only) const {
  // Dijkstra on integer serialization cost (attoseconds per byte) so equal-cost paths
  // compare exactly; every equal-cost predecessor edge is kept for ECMP.
  const size_t nv = boost::num_vertices(graph_);
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  // Distances and predecessors live across calls (per thread), and only the vertices a
  // search reached are reset: a search inside a node stops within a few hops, and
  // clearing arrays over the whole cluster for each pair made routing quadratic.
  thread_local std::vector<int64_t> dist;
  thread_local std::vector<std::vector<uint32_t>> pred;
  thread_local std::vector<uint32_t> reached;
  if (dist.size() < nv) dist.resize(nv, kInf), pred.resize(nv);
  struct Reset {
    ~Reset() {
      for (uint32_t v : reached) dist[v] = kInf, pred[v].clear();
      reached.clear();
    }
  } reset;
  using Item = std::pair<int64_t, uint32_t>;
  // A binary heap in a vector kept across calls (no allocation per search).
  thread_local std::vector<Item> heap;
  heap.clear();
  auto push = [&](Item it) {
    heap.push_back(it);
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  dist[src] = 0;
  reached.push_back(src);
  push({0, src});
  const int na = graph_[src].node, nb = graph_[dst].node;
  const bool third = prune && prune_third_nics_ && na >= 0 && nb >= 0 && nic_node_.size() == nv;
  const bool spines = prune && !spine_of_vertex_.empty() && na >= 0 && nb >= 0;
  // The leaves a spine may enter: those holding a NIC of either end's node.
  uint32_t leaves[64];
  size_t leaf_count = 0;
  if (spines) {
    const size_t nics = static_cast<size_t>(spec_.node.nics);
    for (int n : {na, nb})
      for (size_t k = 0; k < nics; ++k) {
        const int32_t leaf = leaf_of_vertex_[nic_switch_[static_cast<size_t>(n) * nics + k]];
        if (std::find(leaves, leaves + leaf_count, static_cast<uint32_t>(leaf)) != leaves + leaf_count) continue;
        if (leaf_count == std::size(leaves)) {
          leaf_count = SIZE_MAX;  // too many to list: no spine pruning
          break;
        }
        leaves[leaf_count++] = static_cast<uint32_t>(leaf);
      }
  }
  auto relax = [&](const Link& l, int64_t d) {
    const int64_t c = d + l.cost;
    const uint32_t w = l.dst;
    if (c < dist[w]) {
      if (dist[w] == kInf) reached.push_back(w);
      dist[w] = c;
      pred[w].assign(1, l.id);
      push({c, w});
    } else if (c == dist[w]) {
      pred[w].push_back(l.id);
    }
  };
  const int home = graph_[src].node;
  auto visit = [&](const Link& l, int64_t d) {
    if (node_only && graph_[l.dst].node != home) return;
    if (third) {
      const int32_t n = nic_node_[l.dst];
      if (n >= 0 && n != na && n != nb) return;
    }
    relax(l, d);
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const auto [d, v] = heap.back();
    heap.pop_back();
    if (d != dist[v]) continue;
    if (d > dist[dst]) break;
    if (v != src && (is_gpu_.size() == nv ? is_gpu_[v] != 0 : graph_[v].kind == VertexKind::Gpu))
      continue;  // GPUs do not forward
    if (spines && leaf_count != SIZE_MAX && spine_of_vertex_[v] >= 0) {
      for (size_t i = 0; i < leaf_count; ++i)
        relax(links_[leaf_down_[leaves[i] * spine_count_ + static_cast<size_t>(spine_of_vertex_[v])]], d);
      continue;
    }
    // A leaf's links go to its NICs and to every spine: only the two ends' NICs matter.
    if (spines && third && leaf_of_vertex_[v] >= 0) {
      const size_t leaf = static_cast<size_t>(leaf_of_vertex_[v]);
      for (size_t sp = 0; sp < spine_count_; ++sp) relax(links_[leaf_up_[leaf * spine_count_ + sp]], d);
      const size_t nics = static_cast<size_t>(spec_.node.nics);
      for (int n : {na, nb}) {
        if (n == nb && na == nb) break;
        for (size_t k = 0; k < nics; ++k) {
          const size_t idx = static_cast<size_t>(n) * nics + k;
          if (nic_switch_[idx] == v) relax(links_[nic_down_[idx]], d);
        }
      }
      continue;
    }
    for (uint32_t l : out_links(v)) visit(links_[l], d);
  }
  if (dist[dst] == kInf && node_only) return {};
  if (dist[dst] == kInf)
    throw std::runtime_error("topology: no route from " + graph_[src].name + " to " + graph_[dst].name);
  std::vector<uint32_t> path;
  const uint64_t h = mix((static_cast<uint64_t>(src) << 32) | dst);
  auto preferred_nic = [&](uint32_t gpu) { return preferred_nic_local(graph_[gpu].node, graph_[gpu].local); };
  std::vector<uint32_t> affine;
  for (uint32_t v = dst; v != src;) {
    const auto& p = pred[v];
    uint32_t link = p[0];
    if (p.size() > 1) {
      if (unique) *unique = false;
      affine.clear();
      for (uint32_t l : p) {
        const VertexProps& a = graph_[links_[l].src];
        const VertexProps& b = graph_[links_[l].dst];
        const VertexProps& nic = a.kind == VertexKind::Nic ? a : b;
        if (nic.kind != VertexKind::Nic) continue;
        const uint32_t end = nic.node == graph_[src].node ? src : dst;
        if (nic.node == graph_[end].node && nic.local == preferred_nic(end)) affine.push_back(l);
      }
      if (affine.size() == 1) {
        link = affine[0];
      } else {
        // Destination-mod-k, as InfiniBand's fat-tree routing does: the spine (or any other
        // tie) is picked by the destination's NIC, so a shift permutation never puts two
        // flows on one link. Candidates are ordered by the vertex they come from.
        std::vector<uint32_t> choices = affine.empty() ? p : affine;
        std::sort(choices.begin(), choices.end(),
                  [&](uint32_t a, uint32_t b) { return links_[a].src < links_[b].src; });
        const uint64_t key = spec_.nodes > 1
                                 ? static_cast<uint64_t>(graph_[dst].node) * static_cast<uint64_t>(spec_.node.nics) +
                                       static_cast<uint64_t>(preferred_nic(dst))
                                 : h;
        link = choices[key % choices.size()];
      }
    }
    path.push_back(link);
    v = links_[link].src;
  }
  std::reverse(path.begin(), path.end());
  return path;
}

void Topology::prefetch_route(int src, int dst) const {
  if (route_slots_.empty()) return;
  const uint64_t key = route_key(src, dst);
  __builtin_prefetch(&route_slots_[mix(key) & (route_slots_.size() - 1)]);
}

const Topology::RouteSlot* Topology::find_route(uint64_t key) const {
  if (route_slots_.empty()) return nullptr;
  const size_t mask = route_slots_.size() - 1;
  for (size_t i = mix(key) & mask;; i = (i + 1) & mask) {
    const RouteSlot& s = route_slots_[i];
    if (s.key == key) return &s;
    if (s.key == ~uint64_t{0}) return nullptr;
  }
}

Route Topology::append_route(int src, int dst, std::vector<uint32_t>& out) {
  if (src == dst) return {};
  const uint64_t key = route_key(src, dst);
  if (find_route(key) == nullptr) {
    if (fast_state_ == 0) prepare_fast_routing();
    if (structured_route(src, dst)) {
      thread_local std::vector<uint32_t> links;
      fast_route(src, dst, links);
      out.insert(out.end(), links.begin(), links.end());
      return Route{{}, route_latency(links), route_class(links)};
    }
  }
  Route r = route_info(src, dst);
  out.insert(out.end(), r.links.begin(), r.links.end());
  r.links = {};
  return r;
}

Route Topology::route_info(int src, int dst) {
  if (src == dst) return {};
  const uint64_t key = route_key(src, dst);
  auto stored = [&](const RouteSlot& s) {
    const uint32_t* at = route_chunks_[s.chunk].data() + s.offset;
    Route r{std::span<const uint32_t>(at, s.length), 0, static_cast<LinkClass>(at[-1])};
    std::memcpy(&r.latency, at - kRouteHeader, sizeof r.latency);
    return r;
  };
  if (const RouteSlot* s = find_route(key)) return stored(*s);
  if (fast_state_ == 0) prepare_fast_routing();
  thread_local std::vector<uint32_t> built;
  if (structured_route(src, dst))
    fast_route(src, dst, built);
  else
    built = shortest_path(gpu_vertex(src), gpu_vertex(dst), /*prune=*/true);
  const std::vector<uint32_t>& links = built;
  // Store the header and links where they will not move.
  constexpr size_t kChunk = size_t{1} << 16;
  const size_t need = kRouteHeader + links.size();
  if (route_chunks_.empty() || route_chunks_.back().size() + need > route_chunks_.back().capacity()) {
    route_chunks_.emplace_back();
    route_chunks_.back().reserve(std::max(kChunk, need));
  }
  std::vector<uint32_t>& chunk = route_chunks_.back();
  uint32_t header[kRouteHeader];
  const double latency = route_latency(links);
  static_assert(sizeof latency == 2 * sizeof(uint32_t));
  std::memcpy(header, &latency, sizeof latency);
  header[2] = static_cast<uint32_t>(route_class(links));
  chunk.insert(chunk.end(), header, header + kRouteHeader);
  RouteSlot slot{key, static_cast<uint32_t>(route_chunks_.size() - 1), static_cast<uint32_t>(chunk.size()),
                 static_cast<uint32_t>(links.size())};
  chunk.insert(chunk.end(), links.begin(), links.end());
  // At most half full: grow (and re-place every slot) before adding.
  if (2 * (route_count_ + 1) > route_slots_.size()) {
    BigVector<RouteSlot> old(std::max<size_t>(1024, 2 * route_slots_.size()));
    old.swap(route_slots_);
    const size_t mask = route_slots_.size() - 1;
    for (const RouteSlot& s : old)
      if (s.key != ~uint64_t{0}) {
        size_t i = mix(s.key) & mask;
        while (route_slots_[i].key != ~uint64_t{0}) i = (i + 1) & mask;
        route_slots_[i] = s;
      }
  }
  const size_t mask = route_slots_.size() - 1;
  size_t i = mix(key) & mask;
  while (route_slots_[i].key != ~uint64_t{0}) i = (i + 1) & mask;
  route_slots_[i] = slot;
  ++route_count_;
  return stored(slot);
}

std::span<const uint32_t> Topology::switch_route(int gpu, bool to_switch) const {
  const auto& pair = gpu_switch_links_[static_cast<size_t>(gpu)];
  if (pair[0] == kNoLink) return {};
  return {&pair[to_switch ? 0 : 1], 1};
}

Route Topology::switch_route_info(int gpu, bool to_switch) const {
  const auto links = switch_route(gpu, to_switch);
  return Route{links, route_latency(links), route_class(links)};
}

double Topology::gpu_link_bandwidth(int a, int b) const {
  const uint32_t va = gpu_vertex(a), vb = gpu_vertex(b);
  for (uint32_t id : out_links(va)) {
    const Link& l = links_[id];
    if (l.dst == vb) return l.bandwidth;
  }
  return 0;
}

const std::vector<std::vector<int>>& Topology::mesh_rings(int node, const std::vector<int>& locals) const {
  const int build = node_build_[static_cast<size_t>(node)];
  auto [it, fresh] = mesh_rings_.try_emplace({build, locals});
  if (!fresh) return it->second;
  std::vector<std::vector<int>>& rings = it->second;
  const size_t k = locals.size();
  if (k < 3 || k > 8) return rings;
  const int base = build * spec_.node.gpus;  // the build's own node: same wiring
  std::vector<double> lanes(k * k, 0);
  double lane = std::numeric_limits<double>::infinity();
  for (size_t a = 0; a < k; ++a)
    for (size_t b = 0; b < k; ++b) {
      if (a == b) continue;
      const double bw = gpu_link_bandwidth(base + locals[a], base + locals[b]);
      lanes[a * k + b] = bw;
      if (bw > 0) lane = std::min(lane, bw);
    }
  if (!std::isfinite(lane)) return rings;
  std::vector<int> cap(k * k, 0);
  for (size_t e = 0; e < k * k; ++e) cap[e] = static_cast<int>(std::floor(lanes[e] / lane + 1e-9));
  // Every directed Hamiltonian cycle over the links, the first GPU first (rotations are
  // one ring), widest first: the most lanes on its narrowest hop, then in all.
  std::vector<std::vector<size_t>> cycles;
  std::vector<size_t> order(k);
  for (size_t i = 0; i < k; ++i) order[i] = i;
  do {
    bool ok = true;
    for (size_t i = 0; i < k && ok; ++i) ok = cap[order[i] * k + order[(i + 1) % k]] > 0;
    if (ok) cycles.push_back(order);
  } while (std::next_permutation(order.begin() + 1, order.end()));
  auto width = [&](const std::vector<size_t>& c) {
    int least = 1 << 30, sum = 0;
    for (size_t i = 0; i < k; ++i) {
      const int v = cap[c[i] * k + c[(i + 1) % k]];
      least = std::min(least, v);
      sum += v;
    }
    return std::pair{least, sum};
  };
  std::stable_sort(cycles.begin(), cycles.end(),
                   [&](const auto& x, const auto& y) { return width(x) > width(y); });
  // The most rings whose hops together take no more lanes than each link has: a
  // depth-first search over the cycles (each may repeat where lanes allow), bounded by
  // the fewest lanes any GPU has left to send on (every ring takes one from each), and
  // cut off after 10^6 steps with the best packing found so far.
  std::vector<int> left = cap;
  std::vector<size_t> chosen, best;
  int64_t steps = 0;
  auto bound = [&] {
    int least = 1 << 30;
    for (size_t a = 0; a < k; ++a) {
      int out = 0;
      for (size_t b = 0; b < k; ++b) out += left[a * k + b];
      least = std::min(least, out);
    }
    return least;
  };
  auto fits = [&](const std::vector<size_t>& c, int d) {
    bool ok = true;
    for (size_t i = 0; i < k; ++i) {
      int& v = left[c[i] * k + c[(i + 1) % k]];
      v -= d;
      ok = ok && v >= 0;
    }
    return ok;
  };
  auto search = [&](auto&& self, size_t from) -> void {
    if (chosen.size() > best.size()) best = chosen;
    if (chosen.size() >= 16 || ++steps > 1'000'000) return;
    if (chosen.size() + static_cast<size_t>(bound()) <= best.size()) return;
    for (size_t i = from; i < cycles.size(); ++i) {
      if (fits(cycles[i], 1)) {
        chosen.push_back(i);
        self(self, i);
        chosen.pop_back();
      }
      fits(cycles[i], -1);
      if (steps > 1'000'000) return;
    }
  };
  search(search, 0);
  for (size_t i : best) {
    rings.emplace_back();
    for (size_t g : cycles[i]) rings.back().push_back(locals[g]);
  }
  return rings;
}

LinkClass Topology::route_class(std::span<const uint32_t> r) const {
  LinkClass c = LinkClass::NvLink;
  for (uint32_t l : r) {
    const LinkClass k = links_[l].cls;
    if (k == LinkClass::Network) return k;
    if (k == LinkClass::Pcie) c = k;
  }
  return c;
}

int Topology::preferred_nic_local(int node, int local_gpu) const {
  // A GPU's own NIC when there is one per GPU, else the share of NICs it sits in.
  const NodeSpec& ns = spec_.node_at(node);
  return local_gpu * ns.nics / std::max(1, ns.gpus);
}

std::vector<uint32_t> Topology::route_by_search(int src, int dst) const {
  if (src == dst) return {};
  return shortest_path(gpu_vertex(src), gpu_vertex(dst));
}

bool Topology::fast_routing_applies() const {
  if (spec_.nodes < 2) return false;
  const FabricSpec& f = spec_.fabric;
  if (f.kind == FabricKind::Switch) return true;
  // Whole nodes under each leaf: every NIC of a node reaches the fabric at one leaf.
  return f.kind == FabricKind::FatTree && f.nics_per_leaf % spec_.node.nics == 0;
}

void Topology::index_nics() {
  // NICs: their vertex, fabric switch and the links between.
  for (uint32_t l = 0; l < links_.size(); ++l) {
    const VertexProps& a = graph_[links_[l].src];
    const VertexProps& b = graph_[links_[l].dst];
    if (a.kind == VertexKind::Nic && b.kind == VertexKind::Switch) {
      const size_t idx =
          static_cast<size_t>(a.node) * static_cast<size_t>(spec_.node.nics) + static_cast<size_t>(a.local);
      if (nic_up_.size() <= idx)
        nic_up_.resize(idx + 1), nic_down_.resize(idx + 1), nic_switch_.resize(idx + 1), nic_vertex_.resize(idx + 1);
      nic_up_[idx] = l;
      nic_down_[idx] = l + 1;  // links are added in pairs: a -> b, then b -> a
      nic_switch_[idx] = links_[l].dst;
      nic_vertex_[idx] = links_[l].src;
    }
  }
}

void Topology::prepare_search_pruning() {
  prune_third_nics_ = false;
  spine_of_vertex_.clear();
  const size_t nics = static_cast<size_t>(spec_.node.nics);
  if (nic_switch_.size() != static_cast<size_t>(spec_.nodes) * nics || nics == 0) return;
  bool one_switch = true;
  for (size_t n = 0; n < static_cast<size_t>(spec_.nodes) && one_switch; ++n)
    for (size_t k = 1; k < nics; ++k) one_switch = one_switch && nic_switch_[n * nics + k] == nic_switch_[n * nics];
  if (two_tier_) {
    spine_of_vertex_.assign(boost::num_vertices(graph_), -1);
    for (size_t i = 0; i < spine_count_; ++i) spine_of_vertex_[links_[leaf_up_[i]].dst] = static_cast<int32_t>(i);
    // Every NIC link and every leaf-spine link: the detour leaf -> spine -> leaf must cost
    // no more than NIC -> node -> NIC's two links.
    int64_t nic_min = std::numeric_limits<int64_t>::max();
    for (uint32_t l : nic_up_) nic_min = std::min<int64_t>(nic_min, std::llround(1e18 / links_[l].bandwidth));
    const int64_t spine_cost = std::llround(1e18 / links_[leaf_up_[0]].bandwidth);
    prune_third_nics_ = 2 * spine_cost <= 2 * nic_min;
  } else {
    prune_third_nics_ = one_switch;
  }
}

void Topology::prepare_fast_routing() {
  fast_state_ = -1;
  {
    const size_t nv = boost::num_vertices(graph_);
    nic_node_.assign(nv, -1);
    is_gpu_.assign(nv, 0);
    for (size_t v = 0; v < nv; ++v) {
      if (graph_[v].kind == VertexKind::Nic) nic_node_[v] = graph_[v].node;
      is_gpu_[v] = graph_[v].kind == VertexKind::Gpu;
    }
  }
  // The search's pruning needs a generated fabric and one NIC count on every node (its
  // NIC index is node · nics + k); a fabric given link by link keeps the plain search.
  if (spec_.nodes < 2 || !spec_.switches.empty()) return;
  for (const NodeSpec& n : spec_.node_specs)
    if (n.nics != spec_.node.nics) return;
  index_nics();
  prepare_two_tier();
  prepare_search_pruning();
  // The structured routes copy node 0's links: nodes built alike only.
  if (!spec_.uniform()) return;
  // Rail-optimized two-tier fabrics: between two GPUs on one rail, every route leaves the
  // source node by some NIC and enters the destination's by some NIC, and the rail's own
  // leaf (or the equal spines to the rail's other leaf) is as short a fabric part as any:
  // the route is exit template, rail, enter template where no other NIC ties
  // (rail_pair_is_fast). Pairs on different rails keep the search: a costlier exit onto
  // the destination's rail can save two fabric links.
  const bool rails = spec_.fabric.kind == FabricKind::RailOptimized && two_tier_;
  if (!fast_routing_applies() && !rails) return;
  const int g = spec_.node.gpus;
  // Templates from node 0: GPU -> own NIC and back, each a shortest path whose cost
  // equals the cheapest way to any NIC of the node (else the search is needed).
  auto cost = [&](const std::vector<uint32_t>& path) {
    int64_t c = 0;
    for (uint32_t l : path) c += std::llround(1e18 / links_[l].bandwidth);
    return c;
  };
  const uint32_t n0_end = node_link_base_.size() > 1 ? node_link_base_[1] : static_cast<uint32_t>(links_.size());
  auto in_node0 = [&](const std::vector<uint32_t>& path) {
    return std::all_of(path.begin(), path.end(), [&](uint32_t l) { return l < n0_end; });
  };
  // A path that leaves the node and comes back runs inside the node to some NIC, crosses
  // at least two fabric links, and runs inside the node from some NIC: a path inside the
  // node cheaper than the least such sum is the search's, ties and all (the search over
  // the whole graph floods the fabric first where the way through PCIe costs more).
  int64_t fabric_least = std::numeric_limits<int64_t>::max() / 4;
  for (const Link& l : links_)
    if (graph_[l.src].node < 0 || graph_[l.dst].node < 0) fabric_least = std::min(fabric_least, l.cost);
  constexpr int64_t kFar = std::numeric_limits<int64_t>::max() / 4;
  auto cost_or_far = [&](const std::vector<uint32_t>& p) { return p.empty() ? kFar : cost(p); };
  const int nics = spec_.node.nics;
  for (int a = 0; a < g; ++a) {
    const uint32_t gpu = gpus_[static_cast<size_t>(a)];
    const size_t nic = static_cast<size_t>(preferred_nic_local(a));
    std::vector<std::vector<uint32_t>> out(static_cast<size_t>(nics)), in(static_cast<size_t>(nics));
    std::vector<char> out_unique(static_cast<size_t>(nics), 1), in_unique(static_cast<size_t>(nics), 1);
    int64_t near_out = kFar, near_in = kFar;  // inside the node: GPU to its nearest NIC, and back
    for (size_t k = 0; k < static_cast<size_t>(nics); ++k) {
      bool u = true;
      out[k] = shortest_path(gpu, nic_vertex_[k], false, &u, /*node_only=*/true);
      out_unique[k] = u;
      u = true;
      in[k] = shortest_path(nic_vertex_[k], gpu, false, &u, /*node_only=*/true);
      in_unique[k] = u;
      near_out = std::min(near_out, cost_or_far(out[k]));
      near_in = std::min(near_in, cost_or_far(in[k]));
    }
    int64_t best_out = std::numeric_limits<int64_t>::max(), best_in = best_out;
    for (size_t k = 0; k < static_cast<size_t>(nics); ++k) {
      bool u = true;
      if (cost_or_far(out[k]) >= std::min(kFar, near_out + 2 * fabric_least)) {
        out[k] = shortest_path(gpu, nic_vertex_[k], false, &u);
        out_unique[k] = u;
      }
      u = true;
      if (cost_or_far(in[k]) >= std::min(kFar, 2 * fabric_least + near_in)) {
        in[k] = shortest_path(nic_vertex_[k], gpu, false, &u);
        in_unique[k] = u;
      }
      best_out = std::min(best_out, cost(out[k]));
      best_in = std::min(best_in, cost(in[k]));
    }
    if (cost(out[nic]) != best_out || !in_node0(out[nic]) || !in_node0(in[nic])) return;
    // Where another NIC ties with the GPU's own, the search chooses among them at the
    // fabric (the spine's equal-cost leaves), so each tied exit path must be the only one
    // to its NIC; on the way in, the tied NICs must meet at one vertex next to them, where
    // the search's affinity rule picks the GPU's own NIC.
    std::vector<std::vector<uint32_t>> tied(static_cast<size_t>(nics));
    bool follow_out = true, follow_in = cost(in[nic]) == best_in;
    uint32_t before_nic = UINT32_MAX, after_nic = UINT32_MAX;
    for (size_t k = 0; k < static_cast<size_t>(nics); ++k) {
      if (rails && cost(out[k]) == best_out) {
        const uint32_t v = links_[out[k].back()].src;
        follow_out = follow_out && out_unique[k] && in_node0(out[k]) && (before_nic == UINT32_MAX || v == before_nic);
        before_nic = v;
        tied[k] = out[k];
      }
      if (rails && cost(in[k]) == best_in) {
        const uint32_t v = links_[in[k].front()].dst;
        follow_in = follow_in && in_unique[k] && (after_nic == UINT32_MAX || v == after_nic);
        after_nic = v;
      }
    }
    tied[nic] = out[nic];
    ties_followed_out_.push_back(follow_out);
    ties_followed_in_.push_back(follow_in);
    tied_exit_.push_back(std::move(tied));
    exit_template_.push_back(std::move(out[nic]));
    enter_template_.push_back(std::move(in[nic]));
  }
  rail_pairs_only_ = !fast_routing_applies();
  fast_state_ = 1;
}

bool Topology::rail_pair_is_fast(int src, int dst) const {
  const int g = spec_.node.gpus;
  const int la = src % g, lb = dst % g;
  if (preferred_nic_local(la) != preferred_nic_local(lb)) return false;
  // On one leaf the rail is two fabric links, shorter than any way through another NIC
  // (another rail's leaf, a spine, back down: four).
  const size_t nics = static_cast<size_t>(spec_.node.nics);
  const size_t nic_a = static_cast<size_t>(node_of(src)) * nics + static_cast<size_t>(preferred_nic_local(la));
  const size_t nic_b = static_cast<size_t>(node_of(dst)) * nics + static_cast<size_t>(preferred_nic_local(lb));
  return nic_switch_[nic_a] == nic_switch_[nic_b] || rail_exit_nic(src, dst) >= 0;
}

int Topology::rail_exit_nic(int src, int dst) const {
  // Across the spines every route is four fabric links, so each NIC of the source's node
  // as cheap as the GPU's own ties with it. The search walks back from the destination:
  // into its GPU by its own NIC (affinity, where the tied NICs meet), down from the spine
  // chosen by destination-mod-k, and up from one of the tied NICs' leaves, again chosen by
  // the destination's NIC among those leaves in vertex order.
  const int g = spec_.node.gpus;
  const int la = src % g, lb = dst % g;
  if (!ties_followed_out_[static_cast<size_t>(la)] || !ties_followed_in_[static_cast<size_t>(lb)]) return -1;
  const size_t nics = static_cast<size_t>(spec_.node.nics);
  const size_t base_a = static_cast<size_t>(node_of(src)) * nics;
  const size_t nic_b = static_cast<size_t>(node_of(dst)) * nics + static_cast<size_t>(preferred_nic_local(lb));
  const uint32_t leaf_b = nic_switch_[nic_b];
  std::pair<uint32_t, int> leaves[64];
  size_t count = 0;
  const auto& tied = tied_exit_[static_cast<size_t>(la)];
  for (size_t k = 0; k < nics; ++k) {
    if (tied[k].empty()) continue;
    const uint32_t leaf = nic_switch_[base_a + k];
    if (leaf == leaf_b || count == std::size(leaves)) return -1;  // a shorter way, or too many to list
    for (size_t i = 0; i < count; ++i)
      if (leaves[i].first == leaf) return -1;  // two tied NICs on one leaf: left to the search
    leaves[count++] = {leaf, static_cast<int>(k)};
  }
  if (count == 1) return leaves[0].second;
  std::sort(leaves, leaves + count);
  return leaves[nic_b % count].second;
}

void Topology::prepare_two_tier() {
  const size_t nv = boost::num_vertices(graph_);
  std::vector<char> has_nic(nv, 0);
  for (uint32_t sw : nic_switch_) has_nic[sw] = 1;
  leaf_of_vertex_.assign(nv, -1);
  std::vector<int32_t> spine_of(nv, -1);
  std::vector<uint32_t> leaves, spines;
  for (uint32_t v = 0; v < nv; ++v) {
    if (graph_[v].kind != VertexKind::Switch) continue;
    if (has_nic[v]) {
      leaf_of_vertex_[v] = static_cast<int32_t>(leaves.size());
      leaves.push_back(v);
    } else {
      spine_of[v] = static_cast<int32_t>(spines.size());
      spines.push_back(v);  // in vertex order, as the search orders equal-cost links
    }
  }
  if (leaves.size() < 2 || spines.empty()) return;
  spine_count_ = spines.size();
  constexpr uint32_t kNone = UINT32_MAX;
  leaf_up_.assign(leaves.size() * spine_count_, kNone);
  leaf_down_.assign(leaves.size() * spine_count_, kNone);
  double bw = -1;
  auto fail = [&] {
    leaf_up_.clear(), leaf_down_.clear(), leaf_of_vertex_.clear();
    spine_count_ = 0;
  };
  for (const Link& l : links_) {
    const bool a_sw = graph_[l.src].kind == VertexKind::Switch, b_sw = graph_[l.dst].kind == VertexKind::Switch;
    if (!a_sw || !b_sw) continue;
    if (bw < 0) bw = l.bandwidth;
    if (l.bandwidth != bw) return fail();
    uint32_t* slot = nullptr;
    if (leaf_of_vertex_[l.src] >= 0 && spine_of[l.dst] >= 0)
      slot =
          &leaf_up_[static_cast<size_t>(leaf_of_vertex_[l.src]) * spine_count_ + static_cast<size_t>(spine_of[l.dst])];
    else if (spine_of[l.src] >= 0 && leaf_of_vertex_[l.dst] >= 0)
      slot = &leaf_down_[static_cast<size_t>(leaf_of_vertex_[l.dst]) * spine_count_ +
                         static_cast<size_t>(spine_of[l.src])];
    else
      return fail();                    // leaf to leaf or spine to spine: not two tiers
    if (*slot != kNone) return fail();  // parallel links
    *slot = l.id;
  }
  for (size_t i = 0; i < leaf_up_.size(); ++i)
    if (leaf_up_[i] == kNone || leaf_down_[i] == kNone) return fail();
  two_tier_ = true;
}

void Topology::fast_route(int src, int dst, std::vector<uint32_t>& path) {
  const int g = spec_.node.gpus;
  const int na = node_of(src), nb = node_of(dst), la = src % g, lb = dst % g;
  const size_t nics = static_cast<size_t>(spec_.node.nics);
  const size_t nic_b = static_cast<size_t>(nb) * nics + static_cast<size_t>(preferred_nic_local(lb));
  size_t nic_a = static_cast<size_t>(na) * nics + static_cast<size_t>(preferred_nic_local(la));
  const std::vector<uint32_t>* exit = &exit_template_[static_cast<size_t>(la)];
  if (rail_pairs_only_ && nic_switch_[nic_a] != nic_switch_[nic_b]) {
    const int k = rail_exit_nic(src, dst);
    nic_a = static_cast<size_t>(na) * nics + static_cast<size_t>(k);
    exit = &tied_exit_[static_cast<size_t>(la)][static_cast<size_t>(k)];
  }
  path.clear();
  for (uint32_t l : *exit) path.push_back(l + node_link_base_[static_cast<size_t>(na)]);
  path.push_back(nic_up_[nic_a]);
  const uint32_t sa = nic_switch_[nic_a], sb = nic_switch_[nic_b];
  if (sa != sb && two_tier_) {
    const size_t leaf_a = static_cast<size_t>(leaf_of_vertex_[sa]), leaf_b = static_cast<size_t>(leaf_of_vertex_[sb]);
    const size_t spine = spine_count_ == 1 ? 0 : static_cast<size_t>(nic_b) % spine_count_;
    path.push_back(leaf_up_[leaf_a * spine_count_ + spine]);
    path.push_back(leaf_down_[leaf_b * spine_count_ + spine]);
  } else if (sa != sb) {
    auto it = switch_trees_.find(sa);
    if (it == switch_trees_.end()) {
      // Dijkstra over switches only, from sa, keeping every equal-cost predecessor; its
      // state is indexed by switch, so a tree costs O(switch links), not O(vertices).
      if (switch_index_.empty()) {
        switch_index_.assign(boost::num_vertices(graph_), -1);
        for (size_t v = 0; v < switch_index_.size(); ++v)
          if (graph_[v].kind == VertexKind::Switch) switch_index_[v] = static_cast<int32_t>(switch_count_++);
        switch_edges_.resize(switch_count_);
        for (size_t v = 0; v < switch_index_.size(); ++v) {
          if (switch_index_[v] < 0) continue;
          for (uint32_t id : out_links(static_cast<uint32_t>(v))) {
            const Link& l = links_[id];
            if (switch_index_[l.dst] >= 0)
              switch_edges_[static_cast<size_t>(switch_index_[v])].push_back(
                  SwitchEdge{l.id, l.dst, switch_index_[l.dst], std::llround(1e18 / l.bandwidth)});
          }
        }
      }
      constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
      std::vector<int64_t> dist(switch_count_, kInf);
      thread_local std::vector<std::vector<uint32_t>> pred;  // per switch, emptied below
      if (pred.size() < switch_count_) pred.resize(switch_count_);
      using Item = std::pair<int64_t, uint32_t>;
      std::priority_queue<Item, std::vector<Item>, std::greater<>> pq;
      dist[static_cast<size_t>(switch_index_[sa])] = 0;
      pq.push({0, sa});
      while (!pq.empty()) {
        auto [d, v] = pq.top();
        pq.pop();
        if (d != dist[static_cast<size_t>(switch_index_[v])]) continue;
        for (const SwitchEdge& se : switch_edges_[static_cast<size_t>(switch_index_[v])]) {
          const size_t w = static_cast<size_t>(se.dst);
          const int64_t c = d + se.cost;
          if (c < dist[w]) {
            dist[w] = c;
            pred[w].assign(1, se.link);
            pq.push({c, se.dst_vertex});
          } else if (c == dist[w]) {
            pred[w].push_back(se.link);
          }
        }
      }
      SwitchTree tree;
      tree.set.resize(switch_count_);
      if (last_set_.size() < switch_count_) last_set_.resize(switch_count_, UINT32_MAX);
      auto same = [&](const std::vector<uint32_t>& p, uint32_t k) {
        return std::equal(p.begin(), p.end(), pred_links_.begin() + pred_first_[k],
                          pred_links_.begin() + pred_first_[k + 1]);
      };
      for (size_t w = 0; w < switch_count_; ++w) {
        auto& p = pred[w];
        // Switches leave the queue by (distance, vertex), so a set is usually in order already.
        const auto by_src = [&](uint32_t a, uint32_t b) { return links_[a].src < links_[b].src; };
        if (!std::is_sorted(p.begin(), p.end(), by_src)) std::sort(p.begin(), p.end(), by_src);
        if (last_set_[w] != UINT32_MAX && same(p, last_set_[w])) {
          tree.set[w] = last_set_[w];
          p.clear();
          continue;
        }
        uint64_t h = p.size();
        for (uint32_t l : p) h = mix(h ^ l);
        auto& ids = pred_sets_by_hash_[h];
        uint32_t id = UINT32_MAX;
        for (uint32_t k : ids)
          if (same(p, k)) {
            id = k;
            break;
          }
        if (id == UINT32_MAX) {
          id = static_cast<uint32_t>(pred_first_.size() - 1);
          pred_links_.insert(pred_links_.end(), p.begin(), p.end());
          pred_first_.push_back(static_cast<uint32_t>(pred_links_.size()));
          ids.push_back(id);
        }
        tree.set[w] = last_set_[w] = id;
        p.clear();
      }
      it = switch_trees_.emplace(sa, std::move(tree)).first;
    }
    std::vector<uint32_t> middle;
    const uint64_t key = nic_b;  // destination-mod-k, as in shortest_path()
    const SwitchTree& tree = it->second;
    for (uint32_t v = sb; v != sa;) {
      const uint32_t k = tree.set[static_cast<size_t>(switch_index_[v])];
      const std::span<const uint32_t> choices(pred_links_.data() + pred_first_[k], pred_first_[k + 1] - pred_first_[k]);
      if (choices.empty()) throw std::runtime_error("topology: no switch path to " + graph_[sb].name);
      const uint32_t link = choices[choices.size() == 1 ? 0 : key % choices.size()];
      middle.push_back(link);
      v = links_[link].src;
    }
    path.insert(path.end(), middle.rbegin(), middle.rend());
  }
  path.push_back(nic_down_[nic_b]);
  for (uint32_t l : enter_template_[static_cast<size_t>(lb)])
    path.push_back(l + node_link_base_[static_cast<size_t>(nb)]);
}

double Topology::route_latency(std::span<const uint32_t> r) const {
  double s = 0;
  for (uint32_t l : r) s += links_[l].latency;
  return s;
}

double Topology::route_bandwidth(std::span<const uint32_t> r) const {
  double b = std::numeric_limits<double>::infinity();
  for (uint32_t l : r) b = std::min(b, links_[l].bandwidth);
  return b;
}

}  // namespace clustersim
