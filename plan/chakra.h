// Chakra execution traces (MLCommons Chakra, schema/protobuf/et_def.proto), the format
// ASTRA-sim and other simulators read: a Plan written as one trace per rank, and traces
// read back as a Plan (docs/interchange.md).
//
// A file `<prefix>.<rank>.et` holds a GlobalMetadata message and then one Node per op,
// each preceded by its length as a varint (Chakra's encodeMessage). The process groups
// go to `comm_group.json` ({"<id>": [ranks]}, ASTRA-sim's communicator-group file),
// and each collective names its group in the attribute `pg_name`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "topology/gpu.h"

namespace clustersim {

// Chakra's NodeType and CollectiveCommType values.
enum class ChakraNodeType : uint32_t { Metadata = 1, Comp = 4, Send = 5, Recv = 6, Coll = 7 };
uint32_t chakra_comm_type(CollectiveKind k);

struct ChakraFile {
  std::string name;   // file name inside the directory
  std::string bytes;  // the encoded trace
};

// The plan as Chakra traces, one per rank, and comm_group.json (the last file). Compute
// nodes carry num_ops (FLOPs), tensor_size (bytes moved) and duration_micros, the op's
// time in `op_seconds` (per program and op, as the cost model gives it:
// program_compute_seconds in cost_models/compute.h); every node carries ctrl_deps on the
// previous op of its stream, so a consumer keeps the plan's stream order.
std::vector<ChakraFile> plan_to_chakra(const Plan& plan, const std::string& prefix,
                                       const std::vector<std::vector<double>>& op_seconds);

// One decoded node (what the importer and the tests read).
struct ChakraNode {
  uint64_t id = 0;
  std::string name;
  uint32_t type = 0;
  std::vector<uint64_t> data_deps, ctrl_deps;
  uint64_t duration_micros = 0;
  int64_t num_ops = 0, comm_size = 0, comm_type = 0;
  uint64_t tensor_size = 0;
  int32_t comm_src = -1, comm_dst = -1, comm_tag = 0;
  bool holds_sms = false, overlaps_compute = false;  // clustersim's own attributes of a send or receive
  uint16_t held_sms = 0;                             // with holds_sms: the kernel's SMs (Op::held_sms)
  bool sm_margin = false;                            // and the GEMMs' margin (Op::sm_margin)
  std::string pg_name;
  double duration_s = 0;  // clustersim's own exact time (attribute "duration_s"), 0 when absent
  std::string stream, group_kind, phase, op_kind;  // clustersim's own attributes, empty when absent
  // A compute node's kernel shape (clustersim's own attributes dtype, shape_m/n/k/batch,
  // bytes_read/written, mem_access, flops, and for attention heads, kv_heads, q_len,
  // kv_len, head_dim, causal); used when whole for its kind, else its time is.
  std::string dtype;
  Op shape;
  bool shape_invalid = false;
};
struct ChakraTrace {
  std::string version;
  std::vector<ChakraNode> nodes;
};
// Throws wire::ParseError (a std::runtime_error) on a malformed file.
ChakraTrace decode_chakra(const std::string& bytes);

// The FLOPs per rank of an imported plan: its GEMMs' and attention kernels' (kernel_flops,
// as a planned run counts its hardware FLOPs), the compute nodes' num_ops where they have
// no shape. Traces carry no model, so model and hardware FLOPs are the same.
double chakra_flops_per_rank(const Plan& plan);

// Plan from a directory of Chakra traces (`workload: {chakra: DIR}`): one rank per
// `*.<rank>.et` file, in rank order. Nodes become ops in dependency order: compute nodes
// with a whole kernel shape (clustersim's exports) become that kernel, costed by the
// compute model; others take duration_micros (or a roofline of num_ops and tensor_size
// on `gpu` when it is 0),
// collectives their group from pg_name and comm_group.json (all ranks without one),
// sends and receives their peers from comm_src / comm_dst. Throws InputError with the
// file's name for what cannot be imported.
Plan plan_from_chakra(const std::string& dir, const GpuSpec& gpu);

// A trace file's name as export-chakra writes it, NAME.<rank>.et: the workload NAME (all
// before the last ".<digits>.et") and the rank's digits; false for any other file name.
bool chakra_trace_name(const std::string& file, std::string& workload, std::string& rank);

}  // namespace clustersim
