// One process per GPU under MPI (OpenMPI): `mpirun -n N clustersim real S.yaml --mpi`.
// Rank 0 makes the NCCL unique id and broadcasts it over MPI; every process creates its
// world communicator with ncclCommInitRank, runs its rank on its node-local GPU, and
// meets the others at an MPI barrier before each iteration. Spans and iteration times
// are gathered on rank 0.
#pragma once

#include "plan/plan.h"
#include "real_backend/real_executor.h"

namespace clustersim::real {

struct MpiRun {
  int rank = 0, size = 1;
  RealResult result;  // on rank 0: every rank's spans; elsewhere: its own
};

MpiRun run_plan_mpi(const Plan& plan, const RealOptions& opt);
void mpi_finalize();
[[noreturn]] void mpi_abort(int code);

}  // namespace clustersim::real
