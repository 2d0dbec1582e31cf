#include "cost_models/tuner.h"

#include <limits>
#include <stdexcept>

namespace clustersim {

GroupLayout layout_of(const Topology& topo, std::span<const int32_t> gpus) {
  GroupLayout l;
  l.nvswitch = topo.spec().node.nvswitch;
  for (int32_t g : gpus) l.node.push_back(topo.node_of(g));
  return l;
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
  if (proto)
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
      const double t = net.run(expand_collective(CollectiveRequest{op, a, p, bytes, 0}, layout, profile), gpus).seconds;
      if (t < best.predicted_s) best = CollectiveChoice{a, p, t};  // ties keep the earlier (ring, Simple last)
    }
  }
  if (best.predicted_s == std::numeric_limits<double>::infinity()) throw std::invalid_argument(why);
  return best;
}

}  // namespace clustersim
