#include "hardy/comm/nccl/communicator.hpp"

#include <fmt/format.h>

#include <functional>
#include <thread>

#include "hardy/comm/errors.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::comm {

void nccl_check(ncclResult_t result, const char* call, ncclComm_t comm) {
  if (result == ncclSuccess) return;
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  const std::string message =
      fmt::format("NCCL call {} failed: {}{}{}", call, ncclGetErrorString(result),
                  last != nullptr && *last != '\0' ? ": " : "", last != nullptr ? last : "");
  if (result == ncclRemoteError || result == ncclSystemError) throw ProcessFailure(message);
  throw hardy::Error(message);
}

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int device) : comm_(comm), device_(device) {
  nccl_check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank", comm_);
  nccl_check(ncclCommCount(comm_, &size_), "ncclCommCount", comm_);
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(Communicator& bootstrap) {
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  bootstrap.broadcast(std::as_writable_bytes(std::span(&id, 1)), 0);
  int device = 0;
  HARDY_CUDA_CHECK(cudaGetDevice(&device));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;  // init and shrink return when done; collectives are still asynchronous
  config.commName = "hardy";
  ncclComm_t comm = nullptr;
  nccl_check(ncclCommInitRankConfig(&comm, bootstrap.size(), id, bootstrap.rank(), &config),
             "ncclCommInitRankConfig");
  // The constructor owns comm from here; if it throws, nobody else would free it.
  try {
    return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, device));
  } catch (...) {
    ncclCommAbort(comm);
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  // A healthy, idle communicator is destroyed; anything else is aborted, which never waits
  // for peers that may be gone.
  ncclResult_t async = ncclSuccess;
  const bool idle = cudaStreamQuery(stream_.get()) == cudaSuccess;
  const bool healthy = ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async == ncclSuccess;
  if (usable_ && idle && healthy)
    ncclCommDestroy(comm_);
  else
    ncclCommAbort(comm_);
}

void NcclCommunicator::require_usable(const char* operation) const {
  if (!usable_)
    throw hardy::Error(fmt::format("NCCL {}: the communicator was aborted or shrunk", operation));
}

void NcclCommunicator::allreduce_sum(float* device_data, std::size_t count) {
  require_usable("allreduce");
  nccl_check(
      ncclAllReduce(device_data, device_data, count, ncclFloat, ncclSum, comm_, stream_.get()),
      "ncclAllReduce", comm_);
}

void NcclCommunicator::broadcast(void* device_data, std::size_t bytes, int root) {
  require_usable("broadcast");
  if (root < 0 || root >= size_)
    throw InvalidArgument(fmt::format("NCCL broadcast: root {} outside [0, {})", root, size_));
  nccl_check(ncclBroadcast(device_data, device_data, bytes, ncclUint8, root, comm_, stream_.get()),
             "ncclBroadcast", comm_);
}

void NcclCommunicator::group_start() { nccl_check(ncclGroupStart(), "ncclGroupStart"); }
void NcclCommunicator::group_end() { nccl_check(ncclGroupEnd(), "ncclGroupEnd", comm_); }

void NcclCommunicator::synchronize(std::chrono::milliseconds timeout) {
  wait_until([this] { return cudaStreamQuery(stream_.get()); }, "cudaStreamQuery (NCCL stream)",
             timeout);
}

void NcclCommunicator::wait_for(const core::cuda::Event& done, std::chrono::milliseconds timeout) {
  wait_until([&done] { return cudaEventQuery(done.get()); }, "cudaEventQuery (NCCL stream)",
             timeout);
}

void NcclCommunicator::wait_until(const std::function<cudaError_t()>& query, const char* call,
                                  std::chrono::milliseconds timeout) {
  require_usable("synchronize");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const cudaError_t status = query();
    if (status != cudaSuccess && status != cudaErrorNotReady) core::cuda::cuda_check(status, call);
    // A peer that died is usually reported as an asynchronous error before the timeout.
    ncclResult_t async = ncclSuccess;
    nccl_check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError", comm_);
    if (async != ncclSuccess && async != ncclInProgress) {
      const std::string what =
          fmt::format("NCCL reported {} while rank {} of {} waited: {}", ncclGetErrorString(async),
                      rank_, size_, ncclGetLastError(comm_));
      abort();
      throw ProcessFailure(what + " (communicator aborted)");
    }
    if (status == cudaSuccess) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      abort();
      throw ProcessFailure(fmt::format(
          "NCCL operations on rank {} of {} did not finish within {:.1f} s (a peer may have "
          "died); communicator aborted",
          rank_, size_, std::chrono::duration<double>(timeout).count()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::shrink(std::span<const int> excluded_ranks,
                                                           bool abort_in_flight) {
  require_usable("shrink");
  std::vector<int> excluded(excluded_ranks.begin(), excluded_ranks.end());
  for (int r : excluded)
    if (r < 0 || r >= size_ || r == rank_)
      throw InvalidArgument(fmt::format(
          "NCCL shrink: cannot exclude rank {} (this is rank {} of {})", r, rank_, size_));
  // NCCL 2.28 refuses to exclude nobody (a null list, then a count of 0: invalid argument, seen
  // on the first GPU run); a caller that lost no rank starts a fresh communicator instead.
  if (excluded.empty())
    throw InvalidArgument("NCCL shrink: no rank to exclude (abort and create a new communicator)");
  ncclComm_t shrunk = nullptr;
  // config null: the new communicator inherits this one's configuration.
  nccl_check(ncclCommShrink(comm_, excluded.data(), static_cast<int>(excluded.size()), &shrunk,
                            nullptr, abort_in_flight ? NCCL_SHRINK_ABORT : NCCL_SHRINK_DEFAULT),
             "ncclCommShrink", comm_);
  // The parent may hold terminated operations: only an abort frees it safely from now on.
  usable_ = false;
  try {
    return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(shrunk, device_));
  } catch (...) {
    ncclCommAbort(shrunk);
    throw;
  }
}

void NcclCommunicator::abort() {
  if (comm_ == nullptr) return;
  ncclCommAbort(comm_);  // frees the communicator: nothing to report, nothing left to retry
  comm_ = nullptr;
  usable_ = false;
}

void broadcast_tensors(NcclCommunicator& comm, cudaStream_t writers,
                       std::span<core::Tensor* const> tensors, int root,
                       std::chrono::milliseconds timeout) {
  for (const core::Tensor* t : tensors)
    if (t == nullptr || !t->defined() || t->device() != core::Device::cuda)
      throw InvalidArgument(fmt::format("broadcast_tensors: {} is not a device tensor",
                                        t == nullptr ? "a null pointer" : t->describe()));
  // The tensors may still be being written by the backend (a restore's copies).
  core::cuda::Event ready;
  ready.record(writers);
  ready.make_wait(comm.stream());
  comm.group([&] {
    for (core::Tensor* t : tensors)
      if (t->bytes() > 0) comm.broadcast(t->raw(), t->bytes(), root);
  });
  comm.synchronize(timeout);
}

}  // namespace hardy::comm
