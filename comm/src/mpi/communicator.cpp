#include "hardy/comm/mpi/communicator.hpp"

#include <climits>
#include <string>

#include "hardy/comm/errors.hpp"
#include "hardy/core/support/error.hpp"
#include "mpi/ulfm.hpp"

namespace hardy::comm {

namespace {

int checked_count(std::size_t count, const char* call) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw hardy::Error(std::string(call) + ": " + std::to_string(count) +
                       " elements exceed MPI's int count; split the buffer");
  }
  return static_cast<int>(count);
}

class MpiRequest final : public Request {
 public:
  MpiRequest(MPI_Request request, MPI_Comm comm, const char* call)
      : request_(request), comm_(comm), call_(call) {}
  // MPI forbids freeing a pending collective request, so destruction waits. After a peer
  // failure, revoke the communicator first so that the wait ends.
  ~MpiRequest() override {
    if (!done()) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  void wait() override {
    if (done()) return;
    complete(MPI_Wait(&request_, MPI_STATUS_IGNORE));
  }
  bool test() override {
    if (done()) return true;
    int flag = 0;
    complete(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
    return done();
  }
  bool done() const override { return request_ == MPI_REQUEST_NULL; }

 private:
  void complete(int code) {
    // A collective that failed is complete (and released by MPI); forget the handle so that
    // nobody waits on it again.
    if (code != MPI_SUCCESS) request_ = MPI_REQUEST_NULL;
    mpi_check(code, call_, comm_);
  }
  MPI_Request request_;
  MPI_Comm comm_;
  const char* call_;
};

}  // namespace

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() {
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  mpi_check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  fault_tolerant_ = ulfm_enabled();
}

MpiCommunicator::~MpiCommunicator() {
  // No mpi_check: destructors do not throw, and freeing a revoked communicator may report the
  // failure again.
  if (owned_ && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::allreduce_sum(std::span<float> data) {
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, data.data(), checked_count(data.size(), "MPI_Allreduce"),
                          MPI_FLOAT, MPI_SUM, comm_),
            "MPI_Allreduce", comm_);
}

void MpiCommunicator::allreduce_sum(std::span<double> data) {
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, data.data(), checked_count(data.size(), "MPI_Allreduce"),
                          MPI_DOUBLE, MPI_SUM, comm_),
            "MPI_Allreduce", comm_);
}

void MpiCommunicator::allreduce(std::span<std::int64_t> data, ReduceOp op) {
  const MPI_Op mpi_op = op == ReduceOp::sum ? MPI_SUM : op == ReduceOp::min ? MPI_MIN : MPI_MAX;
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, data.data(), checked_count(data.size(), "MPI_Allreduce"),
                          MPI_INT64_T, mpi_op, comm_),
            "MPI_Allreduce", comm_);
}

std::vector<std::int64_t> MpiCommunicator::allgather(std::int64_t value) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(size_));
  mpi_check(MPI_Allgather(&value, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, comm_),
            "MPI_Allgather", comm_);
  return all;
}

std::unique_ptr<Request> MpiCommunicator::iallreduce_sum(std::span<float> data) {
  MPI_Request request = MPI_REQUEST_NULL;
  mpi_check(MPI_Iallreduce(MPI_IN_PLACE, data.data(), checked_count(data.size(), "MPI_Iallreduce"),
                           MPI_FLOAT, MPI_SUM, comm_, &request),
            "MPI_Iallreduce", comm_);
  return std::make_unique<MpiRequest>(request, comm_, "MPI_Iallreduce (wait)");
}

std::unique_ptr<Request> MpiCommunicator::ireduce_sum(std::span<float> data, int root) {
  check_root(root, "ireduce_sum");
  MPI_Request request = MPI_REQUEST_NULL;
  const int count = checked_count(data.size(), "MPI_Ireduce");
  // In place at the root; the others' buffers are only read.
  const void* send = rank_ == root ? MPI_IN_PLACE : data.data();
  void* receive = rank_ == root ? data.data() : nullptr;
  mpi_check(MPI_Ireduce(send, receive, count, MPI_FLOAT, MPI_SUM, root, comm_, &request),
            "MPI_Ireduce", comm_);
  return std::make_unique<MpiRequest>(request, comm_, "MPI_Ireduce (wait)");
}

void MpiCommunicator::check_root(int root, const char* call) const {
  if (root < 0 || root >= size_) {
    throw hardy::Error(std::string(call) + ": root " + std::to_string(root) +
                       " is not a rank of a " + std::to_string(size_) + "-rank communicator");
  }
}

void MpiCommunicator::broadcast(std::span<std::byte> data, int root) {
  check_root(root, "broadcast");
  mpi_check(MPI_Bcast(data.data(), checked_count(data.size(), "MPI_Bcast"), MPI_BYTE, root, comm_),
            "MPI_Bcast", comm_);
}

std::unique_ptr<Request> MpiCommunicator::ibroadcast(std::span<std::byte> data, int root) {
  check_root(root, "ibroadcast");
  MPI_Request request = MPI_REQUEST_NULL;
  mpi_check(MPI_Ibcast(data.data(), checked_count(data.size(), "MPI_Ibcast"), MPI_BYTE, root, comm_,
                       &request),
            "MPI_Ibcast", comm_);
  return std::make_unique<MpiRequest>(request, comm_, "MPI_Ibcast (wait)");
}

std::unique_ptr<Request> MpiCommunicator::iallgather_blocks(std::span<const std::byte> mine,
                                                            std::span<std::byte> all) {
  if (all.size() != mine.size() * static_cast<std::size_t>(size_))
    throw hardy::InvalidArgument("MPI_Iallgather: " + std::to_string(all.size()) +
                                 " bytes cannot hold " + std::to_string(size_) + " blocks of " +
                                 std::to_string(mine.size()));
  const int count = checked_count(mine.size(), "MPI_Iallgather");
  MPI_Request request = MPI_REQUEST_NULL;
  mpi_check(
      MPI_Iallgather(mine.data(), count, MPI_BYTE, all.data(), count, MPI_BYTE, comm_, &request),
      "MPI_Iallgather", comm_);
  return std::make_unique<MpiRequest>(request, comm_, "MPI_Iallgather (wait)");
}

void MpiCommunicator::barrier() { mpi_check(MPI_Barrier(comm_), "MPI_Barrier", comm_); }

std::vector<std::string> MpiCommunicator::hostnames() {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  mpi_check(MPI_Get_processor_name(name, &length), "MPI_Get_processor_name");
  std::vector<char> all(static_cast<std::size_t>(size_) * MPI_MAX_PROCESSOR_NAME);
  mpi_check(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(),
                          MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm_),
            "MPI_Allgather", comm_);
  std::vector<std::string> result;
  for (int r = 0; r < size_; ++r)
    result.emplace_back(&all[r * std::size_t{MPI_MAX_PROCESSOR_NAME}]);
  return result;
}

void MpiCommunicator::require_fault_tolerance(const char* operation) const {
  if (fault_tolerant_) return;
#if HARDY_HAVE_ULFM
  const char* why = "ULFM is not enabled at run time (launch with `mpirun --with-ft ulfm`)";
#else
  const char* why = "hardy was built without ULFM (it needs an MPI with MPIX_Comm_shrink)";
#endif
  throw hardy::Error(std::string(operation) + ": fault tolerance is unavailable: " + why);
}

void MpiCommunicator::revoke() {
  require_fault_tolerance("revoke");
#if HARDY_HAVE_ULFM
  mpi_check(MPIX_Comm_revoke(comm_), "MPIX_Comm_revoke", comm_);
#endif
}

int MpiCommunicator::agree(int flag) {
  if (!fault_tolerant_) {
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &flag, 1, MPI_INT, MPI_BAND, comm_),
              "MPI_Allreduce(BAND)", comm_);
    return flag;
  }
#if HARDY_HAVE_ULFM
  const int code = MPIX_Comm_agree(comm_, &flag);
  if (code != MPI_SUCCESS) {
    int error_class = code;
    mpi_check(MPI_Error_class(code, &error_class), "MPI_Error_class");
    // PROC_FAILED here is raised at every survivor alike and the flag is still the AND over
    // the survivors' contributions; acknowledging stops later agreements raising it again.
    if (error_class != MPIX_ERR_PROC_FAILED) mpi_check(code, "MPIX_Comm_agree", comm_);
    acknowledge_failures(comm_);
  }
#endif
  return flag;
}

std::vector<int> MpiCommunicator::failed_ranks() {
  return fault_tolerant_ ? known_failed_ranks(comm_) : std::vector<int>{};
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  MPI_Comm part = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &part), "MPI_Comm_split",
            comm_);
  if (part == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiCommunicator>(part, true);
}

Survivors MpiCommunicator::shrink() {
  require_fault_tolerance("shrink");
  MPI_Comm shrunk = MPI_COMM_NULL;
#if HARDY_HAVE_ULFM
  mpi_check(MPIX_Comm_shrink(comm_, &shrunk), "MPIX_Comm_shrink", comm_);
#endif
  Survivors survivors{std::make_unique<MpiCommunicator>(shrunk, true), {}};
  // The survivors' old ranks come from the two groups, locally: no collective that a further
  // failure could break between the shrink and the agreement on who is left.
  MPI_Group old_group = MPI_GROUP_NULL, new_group = MPI_GROUP_NULL;
  mpi_check(MPI_Comm_group(comm_, &old_group), "MPI_Comm_group");
  mpi_check(MPI_Comm_group(shrunk, &new_group), "MPI_Comm_group");
  const int count = survivors.comm->size();
  std::vector<int> new_ranks(static_cast<std::size_t>(count));
  for (int r = 0; r < count; ++r) new_ranks[static_cast<std::size_t>(r)] = r;
  survivors.old_ranks.resize(new_ranks.size());
  mpi_check(MPI_Group_translate_ranks(new_group, count, new_ranks.data(), old_group,
                                      survivors.old_ranks.data()),
            "MPI_Group_translate_ranks");
  mpi_check(MPI_Group_free(&new_group), "MPI_Group_free");
  mpi_check(MPI_Group_free(&old_group), "MPI_Group_free");
  // Open MPI 5.0.11 crashes (in ompi_comm_revoke_local) when a revoke of the new communicator
  // reaches a rank still activating it inside MPIX_Comm_shrink. An agreement is a fence that
  // holds every survivor until all have returned from the shrink; unlike a barrier it ends
  // the same way everywhere, even if another rank dies meanwhile.
  survivors.comm->agree(1);
  return survivors;
}

}  // namespace hardy::comm
