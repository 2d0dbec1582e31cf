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
      while (k < c.nodes && c.node_at(k).preset == c.node_at(n).preset &&
             c.node_at(k).gpu.name == c.node_at(n).gpu.name)
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
  for (const FabricLink& l : spec_.fabric_links)
    add_link(end(l.a), end(l.b), LinkClass::Network, l.bandwidth, l.latency);
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
