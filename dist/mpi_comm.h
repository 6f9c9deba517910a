// ember's MPI communicator, for calls dist.h lacks (built with MPI only).
#pragma once
#include <mpi.h>

namespace ember::dist {

// Every rank of the job: a duplicate of MPI_COMM_WORLD, so that ember's collectives never
// match a program's own.
MPI_Comm communicator();

}  // namespace ember::dist
