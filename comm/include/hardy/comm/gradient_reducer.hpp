#pragma once
// The gradient allreduce of a data-parallel step, whichever transport carries it: MPI buckets
// for host gradients (gradient_buckets.hpp), NCCL buckets for device gradients (started and
// shrunk through the MPI communicator). The training session holds one and never asks which.
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hardy/comm/communicator.hpp"
#include "hardy/core/compute/backend.hpp"
#include "hardy/core/nn/parameter.hpp"

namespace hardy::comm {

// What rebind() did to a transport of its own, for the event log: the path taken (one of
// resilience::event_fields::device_transport_paths) and its seconds. An empty path: nothing of its
// own to rebuild (MPI buckets follow the shrunk communicator; a reducer whose transport another one
// of the same trainer rebuilt already).
struct TransportRebuild {
  std::string path;
  double seconds = 0;
};

// One bucket's sums over the communicator as soon as its collective completed, before finish():
// each gradient of the bucket with its summed values, not yet scaled.
struct ReducedBucket {
  std::size_t index = 0;  // buckets come in order: 0, 1, ...
  struct Part {
    const core::Parameter* param = nullptr;
    std::span<const float> sums;
  };
  std::vector<Part> parts;  // valid during the call only
};
using BucketListener = std::function<void(const ReducedBucket&)>;

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  // One step, as GradientBuckets: mark_ready(i) as gradient i becomes final in backward, then
  // finish(scale) writes scale * (sum over ranks) into every gradient. ProcessFailure when a
  // peer died; the gradients are then undefined until rebind().
  virtual void mark_ready(std::size_t index) = 0;
  virtual void finish(float scale) = 0;
  // For the step about to start only: the sums are needed at `root` alone (a fault domain's
  // leader); the other ranks' gradients are undefined after finish() and must be overwritten
  // (the domain's broadcast of the result does). By default every rank still gets them.
  virtual void reduce_next_step_to(int /*root*/) {}
  // For the step about to start only: `listener` hears every bucket's sums as soon as they are
  // there, in bucket order, on the calling thread (inside mark_ready() or finish()), so that the
  // caller can send them on while backward still runs (a fault domain's shards to the other
  // domains). False where the reducer cannot (device gradients: the sums live on the device);
  // it never calls the listener then.
  virtual bool listen_next_step(BucketListener /*listener*/) { return false; }
  // After finish(): whether a reduced gradient holds an Inf or NaN (a loss-scale overflow).
  virtual bool has_non_finite() = 0;
  // Forgets the step in flight (one computed but never finished, as a rollback abandons it):
  // waits for its collectives to end, whatever their outcome. Local; the next mark_ready() starts
  // a step.
  virtual void forget_step() = 0;
  // The MPI communicator was shrunk to `survivors`; `lost` are ranks of the one before. From the
  // next step on, reduce over the survivors. Collective over them.
  virtual TransportRebuild rebind(Communicator& survivors, std::span<const int> lost) = 0;
  // Whether restored tensors should travel over this reducer's transport (device to device)
  // rather than as bytes through MPI; broadcast() sends them then (collective).
  virtual bool broadcasts_tensors() const = 0;
  virtual void broadcast(std::span<core::Tensor* const> tensors, int root) = 0;
  virtual std::size_t bucket_count() const = 0;
};

// Host gradients: MPI buckets over comm. Device gradients (the cuda backend): NCCL buckets over
// an NCCL communicator that this call creates through comm (collective). One reducer per step
// that may be in flight at once (`steps_in_flight`: 2 with lagged updates), each with buckets of
// its own, over one transport: one MPI communicator, or one NCCL communicator and stream, so that
// two steps' collectives run in the order they were started, the same on every rank. params are
// the model's parameters in the order backward makes their gradients final; they and the
// backend must outlive the reducers.
std::vector<std::unique_ptr<GradientReducer>> make_gradient_reducers(
    Communicator& comm, core::Backend& backend, std::vector<core::Parameter*> params,
    std::size_t bucket_bytes, std::size_t steps_in_flight = 1);

}  // namespace hardy::comm
