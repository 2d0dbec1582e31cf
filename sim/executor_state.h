// The executor's state, shared by its two files: the event loop (sim/executor.cc) and the
// set-up and summary around it (sim/executor_setup.cc). Private to sim/: the interface is
// sim/executor.h.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "cost_models/flow_network.h"
#include "cost_models/network.h"
#include "sim/event_queue.h"
#include "sim/executor.h"

namespace clustersim {

// A collective's cost on its group: its expansion into steps, and (analytic) its time
// and the bytes each link carried.
struct CollectiveResult {
  Expansion expansion;
  SimTime duration;  // analytic
  std::vector<std::pair<uint32_t, double>> link_bytes;
};

struct CollectiveCache {
  std::mutex mu;
  std::map<std::tuple<int32_t, int, int64_t>, CollectiveResult> memo;  // node-based: references stay valid
};

namespace exec {

// What is shared by every rank running one program: durations, dependents, stream order.
struct ProgramInfo {
  std::vector<SimTime> compute_time;                   // per op (0 for collectives)
  std::vector<uint32_t> dependents_begin, dependents;  // CSR: ops waiting on each op
  std::vector<std::vector<uint32_t>> stream_ops;       // per stream, ops in issue order
};

struct RankState {
  int32_t rank = 0;
  const Program* program = nullptr;
  const ProgramInfo* info = nullptr;
  const std::vector<SimTime>* compute_time = nullptr;  // its GPU's kernel times (info's, or a mixed cluster's)
  std::vector<uint32_t> pending;                       // unmet dependencies per op
  std::vector<uint32_t> cursor;                        // next position in each stream
  std::vector<uint8_t> busy;                           // stream running (or waiting in a collective)
  std::vector<SimTime> stream_start;                   // start of the op running on each stream
  std::array<uint32_t, kGroupKinds> coll_seq{};
  uint32_t done = 0;
  uint32_t waiting_p2p = 0, waiting_coll = 0;  // NCCL kernels on the GPU: reached, not finished
  uint32_t waiting_sms = 0;  // userbuffers kernels (Op::holds_sms: p2p, or bulk collectives not counted above)
  // Their factors [gemm, attention, memory] (beside_userbuffers), by op: a kernel starting
  // beside them takes the largest.
  std::vector<std::pair<uint32_t, std::array<double, 3>>> sms_factors;
  uint32_t waiting_p2p_node = 0, waiting_p2p_net = 0;  // and those posted ahead of compute (Op::overlaps_compute)
  // The kernel in flight on each stream and its progress: a bulk userbuffers kernel (a
  // collective that holds SMs) can start or end while it runs, and its rest then runs at
  // the new factor (retime()).
  struct Running {
    uint32_t op = ~0u;
    SimTime seg_start, end;            // since seg_start at factor f; its completion event's time
    double base = 0, done = 0, f = 1;  // seconds alone; fraction done before seg_start
  };
  std::vector<Running> running;
  // Blocking launches (ExecOptions::blocking_launch_s): ops finished, and the first op in
  // program order that has not, which alone may be issued.
  std::vector<uint8_t> finished, issued;
  uint32_t first_open = 0;
};

// Factors [gemm, attention, memory] beside NCCL's kernels (cost_models/compute.h).
struct BesideNccl {
  std::array<double, 3> collective{}, p2p_node{}, p2p_net{};
};

struct Completion {
  uint32_t slot;
  uint32_t op;
};

struct Rendezvous {
  uint32_t arrived = 0;
  SimTime last;
  std::vector<std::pair<uint32_t, uint32_t>> members;  // (slot, op)
};

inline constexpr uint32_t kWake = ~0u;  // Completion::slot of a network wake-up event

class Executor {
 public:
  Executor(const Plan& plan, Topology& topo, const ExecOptions& opt);

  ExecResult run();

 private:
  void prepare();

  // The factors a GEMM, attention or memory kernel takes beside NCCL's kernels on rank r's
  // GPU (cost_models/compute.h, beside_collective and beside_p2p), per GPU model.
  const BesideNccl& beside_nccl_of(int32_t r);

  // A send or receive posted ahead of compute that runs on a network peer's channel count
  // (nccl_net_peer_channels, not nccl_channels). NCCL gives every peer of a communicator the
  // same count, the fewest any pair of its ranks allows (ncclTopoComputeP2pChannels: the
  // minimum of ncclTopoGetNchannels over the local GPUs and every rank, a rank outside the
  // node counting as a network peer): so the count is the network's as soon as the group
  // (the communicator the op runs on) leaves the node, even to a peer in the same node.
  bool network_peer(int32_t rank, const Op& op) const;

  // Kernel times for rank `r` of program `p`. Every GPU the same model: the program's
  // own. A topology file that mixes models: costed on each model the rank stands for
  // (itself and, unless every rank is simulated, the ranks mirroring it), kernel by
  // kernel the slowest, as a synchronous step waits for its slowest member (the
  // variability rule, sim/variability.h).
  const std::vector<SimTime>& compute_times_for(int32_t r, uint32_t p);

  // Each op's kernel time on `gpu`: its burst-rate cost (from a full queue unless timed),
  // then the clock the board's power cap leaves each phase's mix of kernels
  // (cost_models/compute.h, apply_power_cap).
  std::vector<SimTime> kernel_times(const Program& prog, const GpuSpec& gpu);

  void try_start(uint32_t slot, uint32_t stream);

  void arrive(uint32_t slot, uint32_t op_index, const Op& op);

  // The k-th send a -> b meets the k-th receive on b from a.
  void arrive_p2p(uint32_t slot, uint32_t op_index, const Op& op);

  // Runs a collective (or p2p transfer) for its members: at once in the analytic
  // model, as flows in the flow model.
  void launch(const Expansion& e, const std::vector<int32_t>& gpus, const CollectiveResult& c,
              std::vector<std::pair<uint32_t, uint32_t>> members);

  void rearm_wake();

  void network_wake();

  const CollectiveResult& collective_cost(int32_t group, const Op& op);

  // A send's time from one GPU to another (analytic network, or the profile's measured
  // time inside a node), memoized with the bytes it puts on each link.
  const std::pair<SimTime, std::vector<std::pair<uint32_t, double>>>& p2p_cost(int32_t src_gpu, int32_t dst_gpu,
                                                                              int64_t bytes);

  // Folds the TP ranks of each simulated stage onto the group's first (rep_, tp_rep_) when
  // the simulation provably gives them its timeline (sim/executor_symmetry.cc); false, and
  // nothing folded, when it cannot tell.
  bool fold_tensor_parallel();
  // On the flow network: whether every send the planner's mirrored replicas make beside a
  // representative's gets the representative's share of its route, so that their
  // timelines are its own (sim/executor_symmetry.cc); false, and no replica is folded, when
  // a fabric splits those flows unevenly.
  bool mirrored_sends_alike();

  CollectiveResult cost_collective(int32_t group, const Op& op);

  // An NCCL kernel on the GPU (waiting or moving data) holds SMs: a kernel beside a
  // collective, a send or receive posted ahead of compute, or a userbuffers kernel runs at
  // the profile's measured slowdown, else at the one the NCCL kernel's channels imply on
  // this GPU (beside_collective, beside_p2p); the largest of those in flight.
  double beside(RankState& r, const Op& op);

  // A bulk userbuffers kernel started or ended on the slot's GPU: each kernel in flight runs
  // the rest of its work at the factor that holds from now on (its completion event moves;
  // complete() drops the old one).
  void retime(uint32_t slot);

  void complete(uint32_t slot, uint32_t op_index);

  // Exposed communication: comm time during which the compute stream was idle.
  void summarize();

  const Plan& plan_;
  Topology& topo_;
  const ExecOptions& opt_;
  AnalyticNetwork net_;
  SimTime launch_gap_;
  SimTime blocking_gap_;  // a kernel's start after its issue when launches block
  uint64_t completed_ = 0, total_ops_ = 0;
  std::unique_ptr<FlowNetwork> flow_;
  uint32_t wake_version_ = 0;
  std::map<uint64_t, std::vector<std::pair<uint32_t, uint32_t>>> in_flight_;
  std::vector<uint8_t> simulated_;
  std::vector<int32_t> rep_;     // per rank: the simulated rank whose timeline it has (mirror_of, TP folded)
  std::vector<int32_t> tp_rep_;  // per rank: its TP group's first where folded, else itself (p2p pairing)
  std::vector<int64_t> fold_weight_;  // per rank: 1 + the TP ranks folded onto it (the means' weights)
  std::vector<std::vector<int32_t>> mirrors_;  // flow network: representative -> the ranks it stands for
  std::map<std::tuple<int32_t, int32_t, int>, uint32_t> send_seq_, recv_seq_;
  std::map<std::tuple<int32_t, int32_t, int, uint32_t>, Rendezvous> p2p_;
  std::map<std::tuple<int32_t, int32_t, int64_t>, std::pair<SimTime, std::vector<std::pair<uint32_t, double>>>>
      p2p_memo_;
  Simulation<Completion> sim_;
  std::vector<ProgramInfo> infos_;
  std::vector<uint64_t> model_mask_;     // per simulated rank: the GPU models it stands for (mixed clusters)
  std::vector<BesideNccl> beside_nccl_;  // beside_nccl_of, per GPU model
  std::map<std::pair<uint32_t, uint64_t>, std::vector<SimTime>> mixed_compute_;
  std::vector<RankState> slots_;
  std::vector<uint32_t> group_expected_;
  std::vector<std::vector<int32_t>> group_gpus_;
  std::vector<uint8_t> group_spans_nodes_;  // a group's GPUs are on more than one node
  std::unordered_map<uint64_t, Rendezvous> rendezvous_;
  std::map<std::tuple<int32_t, int, int64_t>, CollectiveResult> memo_;
  std::vector<std::vector<SpanRecord>> slot_spans_;  // by slot, in completion order
  ExecResult result_;
};

}  // namespace exec
}  // namespace clustersim
