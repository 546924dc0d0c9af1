#include "hardy/comm/gradient_buckets.hpp"

#include <algorithm>
#include <string>

#include "hardy/comm/errors.hpp"
#include "hardy/core/error.hpp"

namespace hardy::comm {

GradientBuckets::GradientBuckets(Communicator& comm, std::vector<core::Parameter*> params,
                                 std::size_t bucket_bytes)
    : comm_(&comm), params_(std::move(params)), slots_(params_.size()) {
  std::size_t filled = 0;  // floats in the current (last) bucket
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const core::Tensor& shape = params_[i]->value.defined() ? params_[i]->value : params_[i]->grad;
    const auto count = static_cast<std::size_t>(shape.defined() ? shape.numel() : 0);
    // A new bucket when the next gradient would overflow a non-empty one.
    if (buckets_.empty() || (filled > 0 && (filled + count) * sizeof(float) > bucket_bytes)) {
      buckets_.emplace_back();
      filled = 0;
    }
    slots_[i] = Slot{buckets_.size() - 1, filled, count, false};
    filled += count;
    buckets_.back().members += 1;
    buckets_.back().data.resize(filled);
  }
  for (Bucket& bucket : buckets_) bucket.pending = bucket.members;
}

GradientBuckets::~GradientBuckets() = default;  // each pending Request waits in its destructor

void GradientBuckets::mark_ready(std::size_t index) {
  if (index >= slots_.size()) {
    throw hardy::Error("GradientBuckets::mark_ready: index " + std::to_string(index) +
                       " is beyond the " + std::to_string(slots_.size()) + " parameters");
  }
  Slot& slot = slots_[index];
  const core::Parameter& param = *params_[index];
  if (slot.ready) {
    throw hardy::Error("GradientBuckets: parameter " + param.name +
                       " marked ready twice in a step");
  }
  const std::span<const float> grad = param.grad.f32();  // throws unless host f32
  if (grad.size() != slot.count) {
    throw hardy::Error("GradientBuckets: gradient of " + param.name + " has " +
                       std::to_string(grad.size()) + " elements, its value " +
                       std::to_string(slot.count));
  }
  Bucket& bucket = buckets_[slot.bucket];
  std::copy(grad.begin(), grad.end(),
            bucket.data.begin() + static_cast<std::ptrdiff_t>(slot.offset));
  slot.ready = true;
  bucket.pending -= 1;
  try {
    launch_complete_buckets();
    progress();
  } catch (const ProcessFailure&) {
    fail_and_drain();
    throw;
  }
}

void GradientBuckets::finish(float scale) {
  try {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      if (!slots_[i].ready) mark_ready(i);
    }
    for (Bucket& bucket : buckets_) bucket.request->wait();
  } catch (const ProcessFailure&) {
    fail_and_drain();
    throw;
  }
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    const float* sum = buckets_[slot.bucket].data.data() + slot.offset;
    std::span<float> grad = params_[i]->grad.f32();
    for (std::size_t j = 0; j < slot.count; ++j) grad[j] = sum[j] * scale;
  }
  rebind(*comm_);
}

void GradientBuckets::rebind(Communicator& comm) {
  for (Bucket& bucket : buckets_) {
    if (bucket.request && !bucket.request->done()) bucket.request->wait();
    bucket.request.reset();
    bucket.pending = bucket.members;
  }
  for (Slot& slot : slots_) slot.ready = false;
  next_launch_ = 0;
  comm_ = &comm;
}

void GradientBuckets::launch_complete_buckets() {
  // Strictly in bucket order, so that every rank issues the same sequence of collectives.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& bucket = buckets_[next_launch_];
    bucket.request = comm_->iallreduce_sum(bucket.data);
    ++next_launch_;
  }
}

void GradientBuckets::progress() {
  // Open MPI's ob1 advances non-blocking collectives only inside MPI calls, so poke them while
  // backward runs; one MPI_Test drives all of them, the rest only update their state.
  for (std::size_t b = 0; b < next_launch_; ++b) {
    if (!buckets_[b].request->done()) buckets_[b].request->test();
  }
}

void GradientBuckets::fail_and_drain() {
  // A failure seen by one request need not be seen by the others yet; revoking makes every
  // pending collective (here and at the other survivors) complete with an error instead of
  // waiting for a peer that will never answer.
  if (comm_->fault_tolerant()) {
    try {
      comm_->revoke();
    } catch (const hardy::Error&) {
    }
    for (Bucket& bucket : buckets_) {
      try {
        if (bucket.request) bucket.request->wait();
      } catch (const ProcessFailure&) {
      }
    }
  }
  for (Bucket& bucket : buckets_) {
    bucket.request.reset();
    bucket.pending = bucket.members;
  }
  for (Slot& slot : slots_) slot.ready = false;
  next_launch_ = 0;
}

}  // namespace hardy::comm
