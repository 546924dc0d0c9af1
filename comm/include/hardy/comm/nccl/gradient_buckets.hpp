#pragma once
// GradientBuckets (gradient_buckets.hpp) for device gradients over NCCL: the same buckets,
// bucket order and interface, but the buckets live in device memory and everything runs on
// the NCCL communicator's own stream. mark_ready(i) copies gradient i into its bucket on the
// backend's stream, makes the NCCL stream wait (on the device) for that copy and starts the
// bucket's allreduce once the bucket is complete, so communication overlaps the rest of the
// backward pass without blocking the host. finish(scale) waits (with a timeout) for this
// object's allreduces and writes scale * sum back into the gradients on the backend's stream.
// Two bucket sets may share one communicator (lagged updates: a step's allreduces in flight
// while the next step's backward fills the other set); their collectives run in the order they
// were queued, the same on every rank.
#ifndef HARDY_HAVE_NCCL
#error "hardy/comm/nccl/gradient_buckets.hpp needs a build with the CUDA backend"
#endif
#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "hardy/comm/nccl/communicator.hpp"
#include "hardy/core/compute/backend.hpp"
#include "hardy/core/compute/cuda_runtime.hpp"
#include "hardy/core/nn/parameter.hpp"

namespace hardy::comm {

namespace detail {
class BucketPlan;
}

class NcclGradientBuckets {
 public:
  static constexpr std::size_t kDefaultBucketBytes = 25u << 20;  // PyTorch DDP's default

  // params: device f32 gradients (the model's parameters, which must outlive this object), in
  // the order they become ready in backward, computed by `backend` on `compute_stream` (the
  // backend's stream: a bucket's copy waits for it, the scaled sums go back on it). A parameter
  // larger than bucket_bytes gets a bucket of its own. `timeout` bounds finish()'s wait for the
  // allreduces.
  NcclGradientBuckets(NcclCommunicator& comm, core::Backend& backend, cudaStream_t compute_stream,
                      std::vector<core::Parameter*> params,
                      std::size_t bucket_bytes = kDefaultBucketBytes,
                      std::chrono::milliseconds timeout = NcclCommunicator::kDefaultTimeout);
  // Waits for allreduces still in flight (the buckets' memory must not be freed under NCCL).
  ~NcclGradientBuckets();
  NcclGradientBuckets(const NcclGradientBuckets&) = delete;
  NcclGradientBuckets& operator=(const NcclGradientBuckets&) = delete;

  // As GradientBuckets::mark_ready; queues work and returns without waiting.
  void mark_ready(std::size_t index);
  // Marks every parameter not yet marked, waits for all allreduces and writes scale * (sum over
  // ranks) into every gradient. On ProcessFailure (a peer died or NCCL hung; the communicator
  // is aborted) the gradients are undefined; retry the step after rebind() to the shrunk
  // communicator.
  void finish(float scale);
  // After finish(): whether any reduced gradient holds an Inf or NaN (loss-scaling overflow),
  // one check per bucket instead of one per parameter.
  bool has_non_finite();
  // Uses comm from the next step on (after NcclCommunicator::shrink) and forgets the current
  // step; waits for work still in flight on the old communicator if it is usable.
  void rebind(NcclCommunicator& comm);

  std::size_t bucket_count() const { return buckets_.size(); }
  std::size_t bucket_of(std::size_t index) const;

 private:
  void launch_due_buckets();
  float* bucket_data(std::size_t bucket) { return buckets_[bucket].data<float>(); }

  NcclCommunicator* comm_;
  core::Backend& backend_;
  cudaStream_t compute_stream_;
  std::vector<core::Parameter*> params_;
  std::unique_ptr<detail::BucketPlan> plan_;
  std::vector<core::Tensor> buckets_;  // device f32
  bool in_flight_ = false;             // work queued on comm_ since the last finish/reset
  std::chrono::milliseconds timeout_;
  core::cuda::Event gradient_ready_;
  core::cuda::Event reduced_;  // recorded after this step's last allreduce was queued
};

}  // namespace hardy::comm
