#pragma once
// Internal: the ULFM (MPIX_) names and the queries built on them, all guarded by
// HARDY_HAVE_ULFM so that comm builds with any MPI.
#include <mpi.h>
#if HARDY_HAVE_MPI_EXT_H
#include <mpi-ext.h>  // Open MPI declares the MPIX_ extensions here, MPICH in mpi.h
#endif

#include <vector>

namespace hardy::comm {

// Whether an MPI error class means "a peer failed" or "the communicator was revoked".
bool is_process_failure_class(int error_class);
// Ranks of comm this process knows to have failed, ascending.
std::vector<int> known_failed_ranks(MPI_Comm comm);
// Acknowledges the known failures so that agreement stops reporting them.
void acknowledge_failures(MPI_Comm comm);

}  // namespace hardy::comm
