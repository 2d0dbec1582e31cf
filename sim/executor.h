// The simulator's Plan executor. Every simulated rank runs its program: each stream
// issues its ops in order, an op starts when its stream is free and its dependencies
// are done, compute ops take the cost model's time, and a collective starts when all
// simulated members of its group have reached it (NCCL semantics: the k-th
// collective a rank issues on a communicator matches the k-th of every other member)
// and ends for all of them at once.
//
// Symmetry: only representative ranks (Plan::mirror_of[r] == r) are simulated;
// collectives are still costed over their full group on the topology. On the analytic
// network, with no variability and no link usage to record, the TP ranks of a stage are
// folded onto its first as well, where every cost they meet is checked equal to the first's
// (sim/executor_symmetry.cc). Running with `simulate_all_ranks` ignores the shortcuts, and
// tests check both give one answer.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "cost_models/collective.h"
#include "cost_models/compute.h"
#include "cost_models/power_cap.h"
#include "cost_models/protocol.h"
#include "plan/plan.h"
#include "plan/time.h"
#include "plan/timeline.h"
#include "topology/topology.h"

namespace clustersim {

// Collective costs shared by executions of one plan on topologies whose links are equal
// (the draws of run --samples without link variability): a collective's cost does not
// depend on when it runs, so later draws reuse what an earlier one computed. Thread-safe.
struct CollectiveCache;
std::shared_ptr<CollectiveCache> make_collective_cache();

struct ExecOptions {
  ComputeProfile compute;
  NetworkProfile network;
  std::optional<Algorithm> algorithm;  // empty: auto, per collective (cost_models/tuner.h)
  std::optional<Protocol> protocol;    // empty: auto
  bool flow = false;                   // flow-level network (contention) instead of analytic
  bool simulate_all_ranks = false;
  bool record_link_usage = true;
  // Flow network: steps alone on their links are solved apart (FlowNetwork, solo steps);
  // false runs every step in the shared system (the plain path, for tests).
  bool solo_steps = true;
  bool keep_spans = true;  // false: metrics only (ExecResult::spans left empty)
  // Variability (sim/variability.h): each simulated rank's kernels take rank_slowdown[rank]
  // times as long (empty: 1), and each kernel's time is multiplied by a lognormal draw of
  // mean 1 and coefficient of variation kernel_jitter, a function of (jitter_seed, rank, op).
  std::vector<double> rank_slowdown;
  double kernel_jitter = 0;
  uint64_t jitter_seed = 0;
  // CUDA_LAUNCH_BLOCKING=1 (training.launch_blocking): < 0, launches are asynchronous; >= 0,
  // a rank issues each op only once every op before it (program order, any stream) has
  // finished, and a kernel then starts this many seconds later (the host's dispatch of the
  // op and the launch's return, no longer hidden behind a queue of kernels).
  double blocking_launch_s = -1;
  // true: every kernel is timed between its own two CUDA events, as the real backend runs a
  // plan (validate against it), so kernels cost what the calibration tables say; false: a
  // framework's full queue, each kernel queue_saving shorter (cost_models/compute.h,
  // queued_seconds). Blocking launches have no queue either way.
  bool timed_kernels = false;
  std::shared_ptr<CollectiveCache> collective_cache;  // empty: each execution costs its own
  // Called now and then with (ops done, ops in all) over the simulated ranks.
  std::function<void(uint64_t, uint64_t)> progress;
};

struct ExecResult {
  SimTime makespan;
  uint64_t events = 0;
  std::vector<int32_t> simulated_ranks;
  // Per rank: the simulated rank whose timeline it has (Plan::mirror_of, and a stage's TP
  // ranks folded onto its first where the executor proves them equal; itself if simulated).
  std::vector<int32_t> representative;
  std::vector<SpanRecord> spans;      // simulated ranks, ordered by (rank, start, stream)
  LinkLoads link_usage;  // ordered by collective start (flow: by when each load ended)
  std::vector<SimTime> rank_finish;   // per rank: when its last op ended (simulated ranks; zero for the rest)
  // Means over the simulated ranks: time each rank's compute stream was busy, and
  // communication time not hidden behind compute, in total and per group kind.
  double compute_busy_s = 0;
  std::vector<double> rank_compute_busy_s;  // per rank (simulated ranks; zero for the rest)
  double exposed_comm_s = 0;
  // Time the compute stream was idle with no communication running either: waiting for
  // a pipeline neighbour (the bubble), or for a dependency.
  double bubble_s = 0;
  std::array<double, kGroupKinds> exposed_comm_by_kind{};
  // The lowest SM clock, as a fraction of boost, that the board's power cap leaves any
  // phase of any program (1: the cap never binds; docs/model.md, "Clocks under the power cap").
  double power_clock = 1.0;
};

// Send/Recv: the k-th send from rank a to rank b meets the k-th receive on b from a;
// the transfer starts when both (of those simulated) have arrived.
//
// Throws std::runtime_error if the plan cannot finish (a dependency cycle, or a
// collective some member never reaches).
ExecResult execute_plan(const Plan& plan, Topology& topo, const ExecOptions& opt);

}  // namespace clustersim
