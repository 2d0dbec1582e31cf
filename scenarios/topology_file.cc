#include "scenarios/topology_file.h"

#include <cstdio>
#include <map>
#include <numeric>
#include <set>

#include "scenarios/readers.h"
#include "scenarios/yaml_tree.h"
#include "topology/presets.h"

namespace clustersim {
namespace {

const YNode& mapping(const YNode& n, const std::string& key) {
  if (n.kind != YNode::Kind::Map) throw InputError(n.mark, key + " must be a mapping, got " + n.kind_name());
  return n;
}

const YNode& list(const YNode& n, const std::string& key) {
  if (n.kind != YNode::Kind::Seq) throw InputError(n.mark, key + " must be a list, got " + n.kind_name());
  return n;
}

void only_keys(const YNode& n, const std::string& where, const std::vector<std::string>& allowed) {
  for (const auto& [k, v] : n.map)
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end())
      throw InputError(v.key_mark.known() ? v.key_mark : v.mark,
                       "unknown key '" + k + "' in " + where + ", expected one of: " + join(allowed));
}

void read_gpu_spec(const YNode& n, const std::string& where, GpuSpec& g, NodeSpec& node) {
  mapping(n, where);
  only_keys(n, where, {"name", "bf16_tflops", "fp8_tflops", "tf32_tflops", "fp32_tflops", "hbm", "hbm_bandwidth",
                       "sm_count", "sm_clock_mhz", "nvlink_bandwidth", "power_limit", "idle_power", "stream_power",
                       "capped_bf16_tflops", "fp8_energy_ratio"});
  g.name = "custom";
  for (const auto& [k, v] : n.map) {
    const std::string key = where + "." + k;
    if (k == "name") g.name = scalar(v, key, "a name");
    if (k == "bf16_tflops") g.peak_bf16 = 1e12 * as_number(v, key, 1e-3, 1e6);
    if (k == "fp8_tflops") g.peak_fp8 = 1e12 * as_number(v, key, 0, 1e6);
    if (k == "tf32_tflops") g.peak_tf32 = 1e12 * as_number(v, key, 0, 1e6);
    if (k == "fp32_tflops") g.peak_fp32 = 1e12 * as_number(v, key, 1e-3, 1e6);
    if (k == "hbm") g.hbm_bytes = static_cast<double>(as_size(v, key));
    if (k == "hbm_bandwidth") g.hbm_bandwidth = as_bandwidth(v, key);
    if (k == "sm_count") g.sm_count = static_cast<int>(as_int(v, key, 1, 100000));
    if (k == "sm_clock_mhz") g.sm_clock_hz = 1e6 * as_number(v, key, 0, 1e5);
    if (k == "nvlink_bandwidth") node.nvlink_bandwidth = as_bandwidth(v, key);
    // The power model (docs/model.md, "Clocks under the power cap"), as cluster.gpu_spec's keys.
    if (k == "power_limit") g.power_limit_w = as_number(v, key, 0, 1e5);
    if (k == "idle_power") g.idle_power_w = as_number(v, key, 0, 1e5);
    if (k == "stream_power") g.stream_power_w = as_number(v, key, 0, 1e5);
    if (k == "capped_bf16_tflops") g.capped_bf16_flops = 1e12 * as_number(v, key, 0, 1e6);
    if (k == "fp8_energy_ratio") g.fp8_energy_ratio = as_number(v, key, 0.01, 10);
  }
  if (const std::string why = power_model_problem(g); !why.empty()) throw InputError(n.mark, where + ": " + why);
}

// One entry of `nodes:`: `count` nodes of one build.
NodeSpec read_node(const YNode& n, const std::string& where, int& count) {
  mapping(n, where);
  only_keys(n, where, {"preset", "count", "gpu", "gpu_spec", "gpus", "nvswitch", "nvls", "nvlink_bandwidth",
                       "pcie_bandwidth", "gpus_per_pcie_switch", "nics", "nic_bandwidth", "gpu_links"});
  // The board it starts from: a node preset, else eight PCIe cards under one CPU.
  const YNode* p = n.find("preset");
  const NodeSpec* base =
      find_node_preset(p ? as_enum(*p, where + ".preset", node_preset_names()) : std::string("pcie-8gpu"));
  NodeSpec node = *base;
  count = 1;
  bool nics_given = false;
  for (const auto& [k, v] : n.map) {
    const std::string key = where + "." + k;
    if (k == "count") count = as_count(v, key);
    if (k == "gpu") node.gpu = *find_gpu_preset(as_enum(v, key, gpu_preset_names()));
    if (k == "gpus") node.gpus = as_count(v, key);
    if (k == "nvswitch") node.nvswitch = as_bool(v, key);
    if (k == "nvls") node.nvls = as_bool(v, key);
    if (k == "nvlink_bandwidth") node.nvlink_bandwidth = as_bandwidth(v, key);
    if (k == "pcie_bandwidth") node.pcie_bandwidth = as_bandwidth(v, key);
    if (k == "gpus_per_pcie_switch") node.gpus_per_pcie_switch = as_count(v, key);
    if (k == "nics") node.nics = as_count(v, key), nics_given = true;
    if (k == "nic_bandwidth") node.nic_bandwidth = as_bandwidth(v, key);
  }
  // The GPU's own fields over its preset, after it whatever the order written.
  if (const YNode* g = n.find("gpu_spec")) read_gpu_spec(*g, where + ".gpu_spec", node.gpu, node);
  if (!nics_given) node.nics = std::min(node.nics, node.gpus);
  if (const YNode* nv = n.find("nvswitch"); nv && node.nvswitch && node.nvlink_bandwidth <= 0)
    throw InputError(nv->mark, where + ": an NVSwitch needs nvlink_bandwidth, expected e.g. 450GB/s");
  if (!node.nvswitch) node.nvls = false;
  if (const YNode* nv = n.find("nvls"); nv && as_bool(*nv, where + ".nvls") && !node.nvswitch)
    throw InputError(nv->mark, where + ".nvls: in-switch reduction needs nvswitch: true");
  if (const YNode* links = n.find("gpu_links")) {
    list(*links, where + ".gpu_links");
    std::set<std::pair<int, int>> seen;
    for (size_t i = 0; i < links->seq.size(); ++i) {
      const YNode& l = links->seq[i];
      const std::string lw = where + ".gpu_links[" + std::to_string(i) + "]";
      mapping(l, lw);
      only_keys(l, lw, {"between", "bandwidth"});
      const YNode* between = l.find("between");
      const YNode* bw = l.find("bandwidth");
      if (!between || !bw) throw InputError(l.mark, lw + " needs between: [A, B] and bandwidth:, expected e.g. "
                                                         "{between: [0, 1], bandwidth: 50GB/s}");
      const std::vector<int64_t> ends = int_list(*between, lw + ".between", 0, node.gpus - 1);
      if (ends.size() != 2 || ends[0] == ends[1])
        throw InputError(between->mark, lw + ".between must name two different GPUs of the node, expected [A, B] "
                                             "with A, B < " + std::to_string(node.gpus));
      const std::pair<int, int> key{static_cast<int>(std::min(ends[0], ends[1])),
                                    static_cast<int>(std::max(ends[0], ends[1]))};
      if (!seen.insert(key).second)
        throw InputError(between->mark, lw + ": GPUs " + std::to_string(key.first) + " and " +
                                            std::to_string(key.second) + " are linked twice, expected one entry "
                                            "per pair (its bandwidth is all their links together)");
      node.gpu_links.push_back({key.first, key.second, as_bandwidth(*bw, lw + ".bandwidth")});
    }
  }
  if (p) node.preset = p->scalar;
  else node.preset = "custom";
  return node;
}

}  // namespace

ClusterSpec load_topology_file(const std::string& path, const SourceMark& from) {
  const YNode root = load_yaml_file(path, from, "a YAML topology file");
  if (root.kind != YNode::Kind::Map)
    throw InputError(SourceMark{path, 1, 1}, "a topology file is a mapping with nodes:, expected e.g. "
                                             "nodes: [{preset: dgx-h100, count: 2}]");
  only_keys(root, "the topology file", {"nodes", "fabric", "switches", "links"});
  ClusterSpec spec;
  spec.topology_file = path;
  const YNode* nodes = root.find("nodes");
  if (!nodes) throw InputError(SourceMark{path, 1, 1}, "nodes: is required, expected a list of node groups");
  list(*nodes, "nodes");
  if (nodes->seq.empty()) throw InputError(nodes->mark, "nodes: is empty, expected at least one node");
  int64_t total = 0;
  for (size_t i = 0; i < nodes->seq.size(); ++i) {
    const std::string where = "nodes[" + std::to_string(i) + "]";
    int count = 1;
    NodeSpec node = read_node(nodes->seq[i], where, count);
    if (!spec.node_specs.empty() && node.gpus != spec.node_specs.front().gpus)
      throw InputError(nodes->seq[i].mark, where + " has " + std::to_string(node.gpus) +
                                               " GPUs per node, expected " +
                                               std::to_string(spec.node_specs.front().gpus) +
                                               " as nodes[0] (every node of a topology file has the same GPU count)");
    total += count;
    // Each node keeps its own spec: a file stops at 65,536 nodes (presets go further).
    constexpr int64_t kMaxNodes = 65536;
    if (total > kMaxNodes)
      throw InputError(nodes->seq[i].mark, "more than " + std::to_string(kMaxNodes) +
                                               " nodes in a topology file, expected fewer (or cluster.preset)");
    spec.node_specs.insert(spec.node_specs.end(), static_cast<size_t>(count), node);
  }
  spec.nodes = static_cast<int>(total);
  spec.node = spec.node_specs.front();

  const YNode* fabric = root.find("fabric");
  const YNode* switches = root.find("switches");
  const YNode* links = root.find("links");
  if (fabric && (switches || links))
    throw InputError(fabric->key_mark, "fabric: does not go with switches: and links:, expected a generated fabric "
                                       "or one given switch by switch");
  if (static_cast<bool>(switches) != static_cast<bool>(links))
    throw InputError((switches ? switches : links)->key_mark,
                     "switches: and links: go together, expected both (the fabric given switch by switch)");
  if (fabric) {
    mapping(*fabric, "fabric");
    only_keys(*fabric, "fabric", {"topology", "oversubscription", "latency", "nics_per_leaf"});
    for (const auto& [k, v] : fabric->map) {
      const std::string key = "fabric." + k;
      if (k == "topology")
        parse_fabric(as_enum(v, key, {"fat-tree", "rail-optimized", "switch", "ring", "torus"}), spec.fabric.kind);
      if (k == "oversubscription") spec.fabric.oversubscription = as_number(v, key, 1.0, 1e6);
      if (k == "latency") spec.fabric.latency = as_latency(v, key);
      if (k == "nics_per_leaf") spec.fabric.nics_per_leaf = as_count(v, key);
    }
    // Rails need one NIC count on every node.
    for (size_t n = 1; n < spec.node_specs.size(); ++n)
      if (spec.fabric.kind == FabricKind::RailOptimized && spec.node_specs[n].nics != spec.node.nics)
        throw InputError(fabric->key_mark, "fabric: rail-optimized needs one NIC count on every node, node " +
                                               std::to_string(n) + " has " + std::to_string(spec.node_specs[n].nics) +
                                               ", node 0 " + std::to_string(spec.node.nics));
  }
  if (switches) {
    if (spec.nodes < 2) throw InputError(switches->key_mark, "switches: needs two nodes or more, expected none");
    list(*switches, "switches");
    std::map<std::string, size_t> index;
    for (const YNode& s : switches->seq) {
      const std::string& name = scalar(s, "switches[]", "a switch name");
      int a = 0, b = 0;
      if (name.empty() || parse_nic_name(name, a, b) || name.find('/') != std::string::npos)
        throw InputError(s.mark, "switch name '" + printable(name) + "' is not allowed, expected a name without '/'");
      if (!index.emplace(name, index.size()).second)
        throw InputError(s.mark, "switch '" + name + "' is named twice, expected each switch once");
      spec.switches.push_back(name);
    }
    list(*links, "links");
    if (links->seq.empty()) throw InputError(links->mark, "links: is empty, expected the fabric's links");
    // Union-find over nodes (0 .. N-1) and switches (N ..): the fabric must join them all.
    std::vector<size_t> parent(static_cast<size_t>(spec.nodes) + spec.switches.size());
    std::iota(parent.begin(), parent.end(), size_t{0});
    auto find = [&](size_t x) {
      while (parent[x] != x) x = parent[x] = parent[parent[x]];
      return x;
    };
    std::set<std::pair<std::string, std::string>> seen;
    for (size_t i = 0; i < links->seq.size(); ++i) {
      const YNode& l = links->seq[i];
      const std::string lw = "links[" + std::to_string(i) + "]";
      mapping(l, lw);
      only_keys(l, lw, {"between", "bandwidth", "latency"});
      const YNode* between = l.find("between");
      const YNode* bw = l.find("bandwidth");
      if (!between || !bw)
        throw InputError(l.mark, lw + " needs between: [A, B] and bandwidth:, expected e.g. "
                                      "{between: [node0/nic0, leaf0], bandwidth: 400Gbps}");
      list(*between, lw + ".between");
      if (between->seq.size() != 2)
        throw InputError(between->mark, lw + ".between must name two ends, expected [A, B]");
      FabricLink fl;
      size_t ends[2];
      for (int e = 0; e < 2; ++e) {
        const YNode& end = between->seq[static_cast<size_t>(e)];
        const std::string& name = scalar(end, lw + ".between", "a switch or NIC name");
        int node = 0, nic = 0;
        if (auto it = index.find(name); it != index.end()) {
          ends[e] = static_cast<size_t>(spec.nodes) + it->second;
        } else if (parse_nic_name(name, node, nic)) {
          if (node >= spec.nodes)
            throw InputError(end.mark, "'" + name + "': there are " + std::to_string(spec.nodes) +
                                           " nodes, expected node0 .. node" + std::to_string(spec.nodes - 1));
          if (nic >= spec.node_specs[static_cast<size_t>(node)].nics)
            throw InputError(end.mark, "'" + name + "': node " + std::to_string(node) + " has " +
                                           std::to_string(spec.node_specs[static_cast<size_t>(node)].nics) +
                                           " NICs, expected nic0 .. nic" +
                                           std::to_string(spec.node_specs[static_cast<size_t>(node)].nics - 1));
          ends[e] = static_cast<size_t>(node);
        } else {
          throw InputError(end.mark, "no switch or NIC named '" + printable(name) +
                                         "', expected a name from switches: or nodeN/nicK");
        }
        (e == 0 ? fl.a : fl.b) = name;
      }
      if (fl.a == fl.b) throw InputError(between->mark, lw + " joins '" + fl.a + "' to itself, expected two ends");
      if (ends[0] < static_cast<size_t>(spec.nodes) && ends[1] < static_cast<size_t>(spec.nodes))
        throw InputError(between->mark, lw + " joins two NICs, expected a switch at one end at least");
      if (!seen.insert(fl.a < fl.b ? std::pair{fl.a, fl.b} : std::pair{fl.b, fl.a}).second)
        throw InputError(between->mark, lw + ": '" + fl.a + "' and '" + fl.b + "' are linked twice, expected one "
                                             "link per pair (its bandwidth is all their cables together)");
      fl.bandwidth = as_bandwidth(*bw, lw + ".bandwidth");
      if (const YNode* lat = l.find("latency")) fl.latency = as_latency(*lat, lw + ".latency");
      spec.fabric_links.push_back(fl);
      parent[find(ends[0])] = find(ends[1]);
    }
    for (int n = 1; n < spec.nodes; ++n)
      if (find(static_cast<size_t>(n)) != find(0))
        throw InputError(links->key_mark, "node " + std::to_string(n) + " is not joined to node 0 by links:, "
                                          "expected a fabric that reaches every node");
  }
  // Nodes all alike on a generated fabric: a plain cluster, with its structured routing.
  if (spec.switches.empty()) {
    bool alike = true;
    for (const NodeSpec& n : spec.node_specs) alike = alike && n == spec.node;
    if (alike) spec.node_specs.clear();
  }
  return spec;
}

}  // namespace clustersim
