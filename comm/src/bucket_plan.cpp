#include "bucket_plan.hpp"

#include <fmt/format.h>

#include "hardy/core/support/error.hpp"

namespace hardy::comm::detail {

BucketPlan::BucketPlan(const std::vector<core::Parameter*>& params, std::size_t bucket_bytes,
                       std::string_view owner)
    : owner_(owner), slots_(params.size()), ready_(params.size(), false) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    const core::Tensor& shape = params[i]->value.defined() ? params[i]->value : params[i]->grad;
    const auto count = static_cast<std::size_t>(shape.defined() ? shape.numel() : 0);
    if (buckets_.empty() || (buckets_.back().floats > 0 &&
                             (buckets_.back().floats + count) * sizeof(float) > bucket_bytes))
      buckets_.emplace_back();
    Bucket& bucket = buckets_.back();
    slots_[i] = Slot{buckets_.size() - 1, bucket.floats, count};
    bucket.floats += count;
    bucket.members += 1;
  }
  reset();
}

const BucketPlan::Slot& BucketPlan::check_mark(std::size_t index, std::string_view name) const {
  if (index >= slots_.size())
    throw hardy::Error(fmt::format("{}::mark_ready: index {} is beyond the {} parameters", owner_,
                                   index, slots_.size()));
  if (ready_[index])
    throw hardy::Error(fmt::format("{}: parameter {} marked ready twice in a step", owner_, name));
  return slots_[index];
}

void BucketPlan::mark(std::size_t index) {
  ready_[index] = true;
  buckets_[slots_[index].bucket].pending -= 1;
}

std::size_t BucketPlan::next_due() {
  if (next_launch_ >= buckets_.size() || buckets_[next_launch_].pending != 0) return npos;
  return next_launch_++;
}

void BucketPlan::reset() {
  for (Bucket& bucket : buckets_) bucket.pending = bucket.members;
  std::fill(ready_.begin(), ready_.end(), false);
  next_launch_ = 0;
}

}  // namespace hardy::comm::detail
