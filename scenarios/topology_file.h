// Topology files (`cluster: {topology_file: T.yaml}`, docs/topology-files.md): a cluster
// described node by node, each node its own board and GPU, and the scale-out fabric
// either generated (`fabric:`) or given as its switches and links.
#pragma once

#include <string>

#include "scenarios/error.h"
#include "topology/topology.h"

namespace clustersim {

// Reads and checks `path`; every error names FILE:LINE:COL in it (or `from`, where the
// file cannot be read).
ClusterSpec load_topology_file(const std::string& path, const SourceMark& from);

}  // namespace clustersim
