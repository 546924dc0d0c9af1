// mpi_check(), ulfm_enabled() and the ULFM failure queries they share.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "hardy/comm/errors.hpp"
#include "hardy/comm/mpi/communicator.hpp"
#include "mpi/ulfm.hpp"

namespace hardy::comm {

namespace {

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) {
    if (!text.empty()) text += ',';
    text += std::to_string(rank);
  }
  return text;
}

}  // namespace

void mpi_check(int code, const char* call, MPI_Comm comm) {
  if (code == MPI_SUCCESS) return;
  // MPI_Error_class and MPI_Error_string cannot go through mpi_check themselves.
  int error_class = code;
  if (MPI_Error_class(code, &error_class) != MPI_SUCCESS) error_class = code;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  std::string message = std::string(call) + ": ";
  if (MPI_Error_string(code, text, &length) == MPI_SUCCESS) {
    message.append(text, static_cast<std::size_t>(length));
  } else {
    message += "MPI error " + std::to_string(code);
  }
  if (is_process_failure_class(error_class)) {
    std::vector<int> failed;
    if (comm != MPI_COMM_NULL && ulfm_enabled()) {
      try {
        failed = known_failed_ranks(comm);
      } catch (const hardy::Error&) {  // the report is best effort; the failure is what matters
      }
    }
    if (!failed.empty()) message += " (failed ranks: " + ranks_text(failed) + ")";
    note_peer_failure();  // whoever catches this, this process must now skip MPI_Finalize
    throw ProcessFailure(message, std::move(failed));
  }
  // A non-blocking collective whose peer died over TCP ends with a generic error: Open MPI's
  // libnbc aborts its schedule ("NBC_Progress: an error 75 was found") and completes the request
  // with MPI_ERR_INTERN, not a failure class. With a failure known on the communicator (or the
  // communicator revoked), the error is that failure, and recovery is the right answer to it.
  if (comm != MPI_COMM_NULL && ulfm_enabled()) {
    std::vector<int> failed;
    bool revoked = false;
    try {
      failed = known_failed_ranks(comm);
#if HARDY_HAVE_ULFM && defined(OPEN_MPI)
      int flag = 0;
      revoked = MPIX_Comm_is_revoked(comm, &flag) == MPI_SUCCESS && flag != 0;
#endif
    } catch (const hardy::Error&) {  // the query failed too: report the original error
    }
    if (!failed.empty() || revoked) {
      message += failed.empty() ? " (the communicator was revoked)"
                                : " after a peer failed (failed ranks: " + ranks_text(failed) + ")";
      note_peer_failure();
      throw ProcessFailure(message, std::move(failed));
    }
  }
  throw hardy::Error(message);
}

bool is_process_failure_class(int error_class) {
#if HARDY_HAVE_ULFM
  return error_class == MPIX_ERR_PROC_FAILED || error_class == MPIX_ERR_PROC_FAILED_PENDING ||
         error_class == MPIX_ERR_REVOKED;
#else
  (void)error_class;
  return false;
#endif
}

bool ulfm_enabled() {
#if HARDY_HAVE_ULFM && defined(MPIX_FT)
  // Open MPI 5 sets the predefined attribute MPI_FT (MPIX_FT) on MPI_COMM_WORLD from its
  // mpi_ft_enable parameter, which `mpirun --with-ft ulfm` turns on. (MPIX_Query_ulfm_support()
  // only exists from Open MPI 6.) MPICH has no such attribute, and its ULFM did not survive a
  // killed peer in our tests, so it counts as not fault tolerant.
  static const bool enabled = [] {
    int* value = nullptr;
    int found = 0;
    mpi_check(MPI_Comm_get_attr(MPI_COMM_WORLD, MPIX_FT, &value, &found),
              "MPI_Comm_get_attr(MPI_FT)");
    return found != 0 && value != nullptr && *value != 0;
  }();
  return enabled;
#else
  return false;
#endif
}

std::vector<int> known_failed_ranks(MPI_Comm comm) {
#if HARDY_HAVE_ULFM
  MPI_Group failed_group;
#if defined(OMPI_HAVE_MPIX_COMM_GET_FAILED)
  mpi_check(MPIX_Comm_get_failed(comm, &failed_group), "MPIX_Comm_get_failed");
#else
  // The older ULFM API only lists acknowledged failures.
  mpi_check(MPIX_Comm_failure_ack(comm), "MPIX_Comm_failure_ack");
  mpi_check(MPIX_Comm_failure_get_acked(comm, &failed_group), "MPIX_Comm_failure_get_acked");
#endif
  MPI_Group comm_group;
  mpi_check(MPI_Comm_group(comm, &comm_group), "MPI_Comm_group");
  int count = 0;
  mpi_check(MPI_Group_size(failed_group, &count), "MPI_Group_size");
  std::vector<int> in(static_cast<std::size_t>(count)), out(in.size());
  std::iota(in.begin(), in.end(), 0);
  if (count > 0) {
    mpi_check(MPI_Group_translate_ranks(failed_group, count, in.data(), comm_group, out.data()),
              "MPI_Group_translate_ranks");
  }
  mpi_check(MPI_Group_free(&comm_group), "MPI_Group_free");
  mpi_check(MPI_Group_free(&failed_group), "MPI_Group_free");
  std::erase(out, MPI_UNDEFINED);
  std::sort(out.begin(), out.end());
  return out;
#else
  (void)comm;
  return {};
#endif
}

void acknowledge_failures(MPI_Comm comm) {
#if HARDY_HAVE_ULFM
#if defined(OMPI_HAVE_MPIX_COMM_ACK_FAILED)
  int size = 0, acked = 0;
  mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  mpi_check(MPIX_Comm_ack_failed(comm, size, &acked), "MPIX_Comm_ack_failed");
#else
  mpi_check(MPIX_Comm_failure_ack(comm), "MPIX_Comm_failure_ack");
#endif
#else
  (void)comm;
#endif
}

}  // namespace hardy::comm
