// `mpirun -n K clustersim sweep S.yaml --mpi`: rank 0 looks up the points already in the
// database and hands the rest out round-robin; every rank runs its share (with --jobs
// threads); the results are gathered on rank 0, which writes them to the one SQLite
// file and prints the ranking. Built where MPI is installed; elsewhere --mpi is an error.
#pragma once

#include <string>

#include "sim/sweep.h"

namespace clustersim {

// Returns the process exit code (rank 0: 0 when some point ran, else 1; others: 0).
int sweep_mpi(const std::string& path, SweepOptions opt, bool json);

}  // namespace clustersim
