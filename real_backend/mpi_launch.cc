#include "real_backend/mpi_launch.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>

#include "real_backend/check.h"

namespace clustersim::real {

MpiRun run_plan_mpi(const Plan& plan, const RealOptions& opt) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(nullptr, nullptr);
  MpiRun out;
  MPI_Comm_rank(MPI_COMM_WORLD, &out.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &out.size);
  if (out.size != plan.world_size)
    throw RealBackendError("the plan has " + std::to_string(plan.world_size) + " ranks but mpirun started " +
                           std::to_string(out.size) + " processes; start one process per rank");
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, out.rank, MPI_INFO_NULL, &node);
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  const int devices = device_count();
  if (devices == 0) throw RealBackendError("rank " + std::to_string(out.rank) + ": no GPU on this node");
  const int device = local % devices;
  check_gemm_support(plan, device);

  ncclUniqueId id{};
  if (out.rank == 0) CS_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  Launch launch;
  launch.ranks = {out.rank};
  launch.devices = {device};
  const int rank = out.rank, size = out.size;
  launch.init_world = [&, rank, size](std::vector<ncclComm_t>& world) {
    CS_CUDA(cudaSetDevice(device));
    CS_NCCL(ncclCommInitRank(&world[0], size, id, rank));
  };
  launch.global_barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };
  RealResult local_result = run_local(plan, opt, std::move(launch));

  // Iteration times: the slowest rank of each iteration.
  std::vector<double> iters = local_result.iteration_s;
  MPI_Allreduce(MPI_IN_PLACE, iters.data(), static_cast<int>(iters.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  // Spans, as raw records, onto rank 0.
  const int bytes = static_cast<int>(local_result.spans.size() * sizeof(SpanRecord));
  std::vector<int> counts(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  MPI_Gather(&bytes, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int i = 0; i < size; ++i) offsets[static_cast<size_t>(i)] = total, total += counts[static_cast<size_t>(i)];
  std::vector<SpanRecord> all(out.rank == 0 ? static_cast<size_t>(total) / sizeof(SpanRecord) : 0);
  MPI_Gatherv(local_result.spans.data(), bytes, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE, 0,
              MPI_COMM_WORLD);
  out.result = std::move(local_result);
  out.result.iteration_s = iters;
  std::vector<double> sorted = iters;
  std::sort(sorted.begin(), sorted.end());
  out.result.median_iteration_s = sorted.empty() ? 0.0 : sorted[sorted.size() / 2];
  out.result.devices = size;
  if (out.rank == 0) out.result.spans = std::move(all);
  return out;
}

void mpi_finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized && !finalized) MPI_Finalize();
}

void mpi_abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

}  // namespace clustersim::real
