#include "cost_models/tuner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace clustersim {

std::vector<std::vector<int32_t>> mesh_rings(const Topology& topo, std::span<const int32_t> gpus,
                                             const std::vector<int32_t>& members) {
  std::vector<std::vector<int32_t>> rings;
  if (members.size() < 3 || members.size() > 8) return rings;
  const int node = topo.node_of(gpus[static_cast<size_t>(members[0])]);
  const int per = topo.gpus_per_node();
  std::vector<int> locals;
  for (int32_t m : members) locals.push_back(gpus[static_cast<size_t>(m)] % per);
  for (const std::vector<int>& ring : topo.mesh_rings(node, locals)) {
    rings.emplace_back();
    for (int local : ring)
      rings.back().push_back(members[static_cast<size_t>(std::find(locals.begin(), locals.end(), local) - locals.begin())]);
  }
  return rings;
}

GroupLayout layout_of(const Topology& topo, std::span<const int32_t> gpus) {
  GroupLayout l;
  // Every node of the group must have the switch (and its in-switch reduction).
  l.nvswitch = true;
  l.nvls = true;
  for (int32_t g : gpus) {
    const int n = topo.node_of(g);
    l.node.push_back(n);
    l.nvswitch = l.nvswitch && topo.spec().node_at(n).nvswitch;
    l.nvls = l.nvls && topo.spec().node_at(n).nvls;
    l.nvls_channels = topo.spec().node_at(n).gpu.nvls_channels;
  }
  // Mesh nodes (direct GPU links, no switch): NCCL's search builds its channels' rings
  // over the links (mesh_rings below). Each node's members follow the first ring found;
  // across nodes the rings then pass through each node along its links.
  if (!l.nvswitch) {
    std::vector<std::vector<int32_t>> members;  // positions, per node in order of first appearance
    std::vector<int32_t> seen;
    for (size_t i = 0; i < gpus.size(); ++i) {
      const auto at = static_cast<size_t>(std::find(seen.begin(), seen.end(), l.node[i]) - seen.begin());
      if (at == seen.size()) {
        seen.push_back(l.node[i]);
        members.emplace_back();
      }
      members[at].push_back(static_cast<int32_t>(i));
    }
    bool changed = false;
    std::vector<int32_t> ring;
    for (size_t n = 0; n < members.size(); ++n) {
      std::vector<int32_t>& m = members[n];
      if (!topo.spec().node_at(seen[n]).gpu_links.empty()) {
        std::vector<std::vector<int32_t>> rings = mesh_rings(topo, gpus, m);
        if (!rings.empty()) {
          if (members.size() == 1) l.mesh_rings = rings;
          changed = changed || rings.front() != m;
          m = rings.front();
        }
      }
      ring.insert(ring.end(), m.begin(), m.end());
    }
    if (changed) l.ring = std::move(ring);
  }
  return l;
}

double measured_series_seconds(const NetworkProfile& profile, std::string_view op, std::string_view algo,
                               std::string_view proto, const GroupLayout& layout, double bytes) {
  if (!profile.collective_fits || layout.nodes() != 1) return -1;
  for (const CollectiveFitRow& f : *profile.collective_fits)
    if (f.ranks == layout.ranks() && f.op == op && f.algo == algo && f.proto == proto) return f.seconds(bytes);
  return -1;
}

double measured_collective_seconds(const NetworkProfile& profile, CollectiveKind op, Algorithm algo, Protocol proto,
                                   const GroupLayout& layout, double bytes) {
  return measured_series_seconds(profile, to_string(op), to_string(algo), to_string(proto), layout, bytes);
}

double measured_auto_seconds(const NetworkProfile& profile, CollectiveKind op, const GroupLayout& layout,
                             double bytes) {
  return measured_series_seconds(profile, to_string(op), "nccl", "auto", layout, bytes);
}

double measured_p2p_seconds(const NetworkProfile& profile, const GroupLayout& layout, double bytes) {
  const double t = measured_series_seconds(profile, "send-recv", "p2p", "auto", layout, bytes);
  if (t >= 0) return t;
  double best = -1;
  for (std::string_view p : {"LL", "LL128", "Simple"}) {
    const double m = measured_series_seconds(profile, "send-recv", "p2p", p, layout, bytes);
    if (m >= 0 && (best < 0 || m < best)) best = m;
  }
  return best;
}

CollectiveChoice choose_collective(CollectiveKind op, double bytes, const GroupLayout& layout,
                                   std::span<const int32_t> gpus, AnalyticNetwork& net, const NetworkProfile& profile,
                                   std::optional<Algorithm> algo, std::optional<Protocol> proto) {
  std::vector<Algorithm> algos;
  if (algo)
    algos = {*algo};
  else if (op == CollectiveKind::AllToAll)
    algos = {Algorithm::Direct};
  else
    algos = {Algorithm::Ring, Algorithm::Tree, Algorithm::Nvls};
  std::vector<Protocol> protos;
  if (op == CollectiveKind::AllToAll)  // grouped send/recv: NCCL's p2p rule, whatever was asked
    protos = {nccl_p2p_protocol(bytes / std::max(1, layout.ranks()), layout.nodes() > 1)};
  else if (proto)
    protos = {*proto};
  else
    protos = {Protocol::LL, Protocol::LL128, Protocol::Simple};

  CollectiveChoice best;
  best.predicted_s = std::numeric_limits<double>::infinity();
  std::string why;
  for (Algorithm a : algos) {
    const std::string reason = unsupported_reason(op, a, layout);
    if (!reason.empty()) {
      why = reason;
      continue;
    }
    for (Protocol p : protos) {
      if (const std::string r = unsupported_protocol_reason(a, p); !r.empty()) {
        why = r;
        continue;
      }
      // A calibration's series for the protocol asked is what NCCL ran when asked it.
      const Protocol series = op == CollectiveKind::AllToAll && proto ? *proto : p;
      double t = measured_collective_seconds(profile, op, a, series, layout, bytes);
      const bool measured = t >= 0;
      if (!measured)
        t = net.run(expand_collective(CollectiveRequest{op, a, p, bytes, 0}, layout, profile), gpus, false).seconds;
      if (t < best.predicted_s)
        best = CollectiveChoice{a, p, t, measured};  // ties keep the earlier (ring, Simple last)
    }
  }
  if (best.predicted_s == std::numeric_limits<double>::infinity()) throw std::invalid_argument(why);
  if (!algo && !proto) {
    const double t = measured_auto_seconds(profile, op, layout, bytes);
    if (t >= 0) best.predicted_s = t, best.measured = true;
  }
  return best;
}

}  // namespace clustersim
