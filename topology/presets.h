// Node presets (DGX/HGX boards, a PCIe server) and the fabric-name table.
// Link figures are line rates per direction from the vendors' datasheets; the
// efficiencies actually reached are a calibration matter (cost_models/).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "topology/topology.h"

namespace clustersim {

const NodeSpec* find_node_preset(std::string_view name);
std::vector<std::string> node_preset_names();
bool parse_fabric(std::string_view s, FabricKind& out);

}  // namespace clustersim
