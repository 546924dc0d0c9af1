#pragma once
// What the MPI and NCCL gradient buckets share: how the gradients pack into buckets, which
// gradients of a step are in, and which buckets are complete and due, strictly in bucket order
// so that every rank issues the same sequence of collectives whatever order its gradients come
// in. Both transports therefore make the same buckets from the same parameters.
#include <cstddef>
#include <string_view>
#include <vector>

#include "hardy/core/nn/parameter.hpp"

namespace hardy::comm::detail {

class BucketPlan {
 public:
  struct Slot {
    std::size_t bucket = 0;
    std::size_t offset = 0;  // in floats, within the bucket
    std::size_t count = 0;
  };

  // Gradients take their values' element counts; a new bucket starts when the next gradient
  // would overflow a non-empty one, so a gradient larger than bucket_bytes has a bucket of its
  // own. `owner` names the user in error messages.
  BucketPlan(const std::vector<core::Parameter*>& params, std::size_t bucket_bytes,
             std::string_view owner);

  std::size_t parameter_count() const { return slots_.size(); }
  std::size_t bucket_count() const { return buckets_.size(); }
  std::size_t bucket_floats(std::size_t bucket) const { return buckets_[bucket].floats; }
  const Slot& slot(std::size_t index) const { return slots_[index]; }
  bool ready(std::size_t index) const { return ready_[index]; }

  // Checks that parameter `index` exists and is not in yet this step (hardy::Error naming it
  // otherwise) and returns its slot, for the caller to copy the gradient in.
  const Slot& check_mark(std::size_t index, std::string_view name) const;
  // Counts parameter `index` as copied into its bucket.
  void mark(std::size_t index);
  // The next bucket due for its allreduce, if complete (then counted as launched), else npos.
  std::size_t next_due();
  std::size_t launched() const { return next_launch_; }
  // A new step: nothing in, nothing launched.
  void reset();

  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

 private:
  struct Bucket {
    std::size_t floats = 0;
    std::size_t members = 0;
    std::size_t pending = 0;  // members not yet in this step
  };
  std::string_view owner_;
  std::vector<Slot> slots_;
  std::vector<bool> ready_;
  std::vector<Bucket> buckets_;
  std::size_t next_launch_ = 0;
};

}  // namespace hardy::comm::detail
