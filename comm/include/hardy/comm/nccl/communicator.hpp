#pragma once
// NCCL collectives on device memory, next to (not instead of) the MPI communicator: MPI starts
// NCCL (rank 0's ncclUniqueId is broadcast over it), carries the small host-side collectives and
// decides about failures (ULFM revoke, agree, shrink); NCCL moves gradients and restored weights
// between GPUs. After the survivors of a failure have agreed and shrunk the MPI communicator,
// shrink() drops the same ranks from the NCCL communicator with ncclCommShrink, aborting what
// was in flight on the dead ranks; abort() (ncclCommAbort) ends a communicator that hangs.
//
// Only the CUDA build (HARDY_HAVE_NCCL) has this header. Operations are queued on the
// communicator's own stream (stream()); synchronize() waits for them with a timeout, so that a
// dead peer turns into ProcessFailure instead of a hang.
#ifndef HARDY_HAVE_NCCL
#error \
    "hardy/comm/nccl/communicator.hpp needs a build with the CUDA backend (HARDY_CUDA=ON or AUTO)"
#endif
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "hardy/comm/communicator.hpp"
#include "hardy/core/compute/cuda_runtime.hpp"
#include "hardy/core/compute/tensor.hpp"

namespace hardy::comm {

// The one place NCCL results become exceptions: ncclSuccess returns; ncclRemoteError and
// ncclSystemError (a peer or the network went away) throw ProcessFailure; anything else throws
// hardy::Error. Messages name the call and carry ncclGetErrorString and, with comm, the
// communicator's ncclGetLastError.
void nccl_check(ncclResult_t result, const char* call, ncclComm_t comm = nullptr);

class NcclCommunicator {
 public:
  // How long synchronize() waits by default before declaring the communicator hung.
  static constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::minutes(5)};

  // Collective over the ranks of `bootstrap` (an MpiCommunicator): one NCCL rank per bootstrap
  // rank, same numbering, on the CUDA device current in the calling thread (CudaBackend makes
  // its device current when it is constructed).
  static std::unique_ptr<NcclCommunicator> create(Communicator& bootstrap);
  // Destroys the communicator, or aborts it when it failed or still has work in flight.
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_.get(); }
  ncclComm_t handle() const { return comm_; }
  // False after abort(), after a failed synchronize(), and for a parent after shrink().
  bool usable() const { return usable_; }

  // Queued on stream(): in-place sum over all ranks, and a copy of root's bytes to every rank.
  void allreduce_sum(float* device_data, std::size_t count);
  void broadcast(void* device_data, std::size_t bytes, int root);
  // Runs `enqueue` (several allreduce_sum/broadcast calls) as one NCCL group.
  template <class Enqueue>
  void group(Enqueue&& enqueue) {
    group_start();
    try {
      enqueue();
    } catch (...) {
      ncclGroupEnd();
      throw;
    }
    group_end();
  }

  // Waits until everything queued on stream() is done. If NCCL reports an asynchronous error
  // or the work does not finish within `timeout` (a peer died mid-collective), aborts the
  // communicator and throws ProcessFailure.
  void synchronize(std::chrono::milliseconds timeout = kDefaultTimeout);
  // The same, until `done` (recorded on stream()) has completed: work queued after it (the next
  // step's buckets, with lagged updates) may still run.
  void wait_for(const core::cuda::Event& done, std::chrono::milliseconds timeout = kDefaultTimeout);

  // The survivors' communicator without `excluded_ranks` (ranks of this communicator, e.g.
  // comm::ranks_lost() of the MPI shrink), renumbered in their old order like MPIX_Comm_shrink.
  // Collective over the survivors. With abort_in_flight (NCCL_SHRINK_ABORT), operations still stuck
  // on the dead ranks are terminated first. This communicator is unusable afterwards.
  std::unique_ptr<NcclCommunicator> shrink(std::span<const int> excluded_ranks,
                                           bool abort_in_flight = true);
  // ncclCommAbort: frees the communicator and kills its kernels, whatever state peers are in.
  void abort();

 private:
  NcclCommunicator(ncclComm_t comm, int device);
  void require_usable(const char* operation) const;
  // Polls `query` (cudaSuccess: done) and NCCL's asynchronous error until done or `timeout`.
  void wait_until(const std::function<cudaError_t()>& query, const char* call,
                  std::chrono::milliseconds timeout);
  void group_start();
  void group_end();

  ncclComm_t comm_ = nullptr;
  core::cuda::Stream stream_;
  int rank_ = 0;
  int size_ = 0;
  int device_ = 0;
  bool usable_ = true;
};

// Broadcasts device tensors (a restored checkpoint's weights, optimizer state, buffers) from
// root to every rank, in one NCCL group after the work queued so far on `writers` (the stream
// that wrote them: the backend's); returns when done.
void broadcast_tensors(NcclCommunicator& comm, cudaStream_t writers,
                       std::span<core::Tensor* const> tensors, int root,
                       std::chrono::milliseconds timeout = NcclCommunicator::kDefaultTimeout);

}  // namespace hardy::comm
