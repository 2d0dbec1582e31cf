// `algorithm: auto`: pick the (algorithm, protocol) with the lowest predicted time, as
// NCCL's tuner does (src/graph/tuning.cc). Candidates are NCCL's own: ring, tree and
// in-switch reduction (NVLS) where the group allows them, and direct for all-to-all;
// halving-doubling and hierarchical run only when asked for by name. Predictions use the
// analytic network on the actual topology, so the choice sees the real routes.
#pragma once

#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cost_models/collective.h"
#include "cost_models/network.h"

namespace clustersim {

struct CollectiveChoice {
  Algorithm algo = Algorithm::Ring;
  Protocol proto = Protocol::Simple;
  double predicted_s = 0;
  bool measured = false;  // predicted_s is a calibration profile's measurement, not the model's
};

GroupLayout layout_of(const Topology& topo, std::span<const int32_t> gpus);

// The rings NCCL's topology search would build over a mesh node's direct GPU links for
// the group positions `members` (all in one node), as positions (Topology::mesh_rings:
// the largest packing over the links' lanes, 3 to 8 members, else none). Each ring is a
// channel carrying an equal share.
std::vector<std::vector<int32_t>> mesh_rings(const Topology& topo, std::span<const int32_t> gpus,
                                             const std::vector<int32_t>& members);

// A calibration profile's fitted time for this collective, when it has one for the
// (operation, algorithm, protocol, group size) and the group sits inside one node;
// otherwise -1.
double measured_collective_seconds(const NetworkProfile& profile, CollectiveKind op, Algorithm algo, Protocol proto,
                                   const GroupLayout& layout, double bytes);
// A measured series by its names as the profile spells them ("send-recv", "p2p", "LL").
double measured_series_seconds(const NetworkProfile& profile, std::string_view op, std::string_view algo,
                               std::string_view proto, const GroupLayout& layout, double bytes);
// The same for NCCL's own choice of algorithm and protocol (the "nccl" / "auto" series),
// which is what a run that leaves both to NCCL gets; -1 when the profile has none.
double measured_auto_seconds(const NetworkProfile& profile, CollectiveKind op, const GroupLayout& layout, double bytes);
// A send/recv between two GPUs of one node: NCCL's own protocol choice when measured,
// else the fastest measured protocol; -1 when the profile has none.
double measured_p2p_seconds(const NetworkProfile& profile, const GroupLayout& layout, double bytes);

// With neither algorithm nor protocol fixed and a measured "nccl" / "auto" series for the
// group, predicted_s is that measurement (the labels stay the model's pick). Throws
// std::invalid_argument when no candidate can run the operation on this group (e.g. a
// fixed algorithm the group does not support).
CollectiveChoice choose_collective(CollectiveKind op, double bytes, const GroupLayout& layout,
                                   std::span<const int32_t> gpus, AnalyticNetwork& net, const NetworkProfile& profile,
                                   std::optional<Algorithm> algo, std::optional<Protocol> proto);

}  // namespace clustersim
