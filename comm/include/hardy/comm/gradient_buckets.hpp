#pragma once
// Gradient fusion for data parallelism: gradients are copied into a few flat buckets as backward
// produces them, and each bucket's allreduce starts as soon as the bucket is full, overlapping
// communication with the rest of backward (as PyTorch DDP and Horovod do).
//
// One step: mark_ready(i) for each parameter as its gradient becomes final, then finish(scale).
// Buckets are launched in bucket order whatever order mark_ready() is called in, so ranks may
// finish their gradients in different orders and still match collectives.
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "hardy/comm/communicator.hpp"
#include "hardy/comm/gradient_reducer.hpp"
#include "hardy/core/nn/parameter.hpp"

namespace hardy::comm {

namespace detail {
class BucketPlan;
}

class GradientBuckets {
 public:
  static constexpr std::size_t kDefaultBucketBytes = 25u << 20;  // PyTorch DDP's default

  // params: the model's parameters (which it owns and which must outlive this object); bucket
  // order follows this list, so pass it in the order gradients become ready in backward. Gradients
  // are host f32 tensors with as many elements as their values. A parameter larger than
  // bucket_bytes gets a bucket of its own.
  GradientBuckets(Communicator& comm, std::vector<core::Parameter*> params,
                  std::size_t bucket_bytes = kDefaultBucketBytes);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // Copies params[index].grad into its bucket; starts that bucket's allreduce (and any later
  // full ones, in order) when it is complete. Also drives earlier allreduces forward. Throws
  // hardy::Error if the parameter was already marked this step, ProcessFailure as finish().
  void mark_ready(std::size_t index);

  // Marks every parameter not yet marked, waits for all allreduces and writes
  // scale * (sum over ranks) back into every params[i].grad. Afterwards the next step may begin.
  // On ProcessFailure the communicator has been revoked (when fault tolerant) so that no
  // allreduce is left pending; the gradients are then undefined and the step must be retried
  // after rebind() to a shrunk communicator.
  void finish(float scale);

  // Uses comm from the next step on (e.g. the survivors after shrink()) and forgets the current
  // step, as forget_step().
  void rebind(Communicator& comm);
  // Forgets the current step: waits for any allreduce still in flight, ignoring a ProcessFailure
  // (a revoked communicator ends them with one), so that the next mark_ready() starts a step.
  void forget_step();

  // For the step about to start only, before its first mark_ready(): the sums are needed at
  // `root` alone (a fault domain's leader, which exchanges them with the other domains and
  // broadcasts the result), so each bucket is reduced there instead of allreduced. The other
  // ranks' gradients are undefined after finish().
  void reduce_next_step_to(int root);
  // For the step about to start only (GradientReducer::listen_next_step): `listener` hears each
  // bucket's sums, in bucket order, as soon as its collective completed.
  void listen_next_step(BucketListener listener);

  std::size_t bucket_count() const { return buckets_.size(); }
  std::size_t bucket_of(std::size_t index) const;

 private:
  struct Bucket {
    std::vector<float> data;
    std::unique_ptr<Request> request;
  };
  void launch_due_buckets();
  void progress();
  void fail_and_drain();  // revokes and completes every request after a ProcessFailure
  // Tells the listener of the completed buckets it has not heard of yet, in bucket order.
  void tell_listener();
  void end_step();  // nothing launched, nobody listening

  Communicator* comm_;
  std::optional<int> reduce_root_;  // this step's, when only one rank needs the sums
  BucketListener listener_;         // this step's, if any
  std::size_t buckets_heard_ = 0;   // buckets the listener heard of this step
  std::vector<std::vector<std::size_t>> bucket_members_;  // the parameters of each bucket
  std::vector<core::Parameter*> params_;
  std::unique_ptr<detail::BucketPlan> plan_;
  std::vector<Bucket> buckets_;
};

}  // namespace hardy::comm
