#include "hardy/comm/gradient_buckets.hpp"

#include <algorithm>

#include "bucket_plan.hpp"
#include "hardy/comm/errors.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::comm {

GradientBuckets::GradientBuckets(Communicator& comm, std::vector<core::Parameter*> params,
                                 std::size_t bucket_bytes)
    : comm_(&comm),
      params_(std::move(params)),
      plan_(std::make_unique<detail::BucketPlan>(params_, bucket_bytes, "GradientBuckets")),
      buckets_(plan_->bucket_count()) {
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    buckets_[b].data.resize(plan_->bucket_floats(b));
  bucket_members_.resize(buckets_.size());
  for (std::size_t i = 0; i < plan_->parameter_count(); ++i)
    bucket_members_[plan_->slot(i).bucket].push_back(i);
}

GradientBuckets::~GradientBuckets() = default;  // each pending Request waits in its destructor

std::size_t GradientBuckets::bucket_of(std::size_t index) const {
  return plan_->slot(index).bucket;
}

void GradientBuckets::mark_ready(std::size_t index) {
  const auto& slot = plan_->check_mark(index, index < params_.size() ? params_[index]->name : "");
  const core::Parameter& param = *params_[index];
  const std::span<const float> grad = param.grad.f32();  // throws unless host f32
  if (grad.size() != slot.count) {
    throw hardy::Error("GradientBuckets: gradient of " + param.name + " has " +
                       std::to_string(grad.size()) + " elements, its value " +
                       std::to_string(slot.count));
  }
  std::copy(grad.begin(), grad.end(),
            buckets_[slot.bucket].data.begin() + static_cast<std::ptrdiff_t>(slot.offset));
  plan_->mark(index);
  try {
    launch_due_buckets();
    progress();
  } catch (const ProcessFailure&) {
    fail_and_drain();
    throw;
  }
}

void GradientBuckets::finish(float scale) {
  try {
    for (std::size_t i = 0; i < plan_->parameter_count(); ++i) {
      if (!plan_->ready(i)) mark_ready(i);
    }
    for (Bucket& bucket : buckets_) bucket.request->wait();
  } catch (const ProcessFailure&) {
    fail_and_drain();
    throw;
  }
  tell_listener();
  for (std::size_t i = 0; i < plan_->parameter_count(); ++i) {
    const auto& slot = plan_->slot(i);
    const float* sum = buckets_[slot.bucket].data.data() + slot.offset;
    std::span<float> grad = params_[i]->grad.f32();
    for (std::size_t j = 0; j < slot.count; ++j) grad[j] = sum[j] * scale;
  }
  rebind(*comm_);
}

void GradientBuckets::rebind(Communicator& comm) {
  forget_step();
  comm_ = &comm;
}

void GradientBuckets::forget_step() {
  for (Bucket& bucket : buckets_) {
    try {
      if (bucket.request && !bucket.request->done()) bucket.request->wait();
    } catch (const ProcessFailure&) {
      // A step forgotten after a failure: its sums are not wanted.
    }
    bucket.request.reset();
  }
  end_step();
}

void GradientBuckets::end_step() {
  plan_->reset();
  reduce_root_.reset();
  listener_ = nullptr;
  buckets_heard_ = 0;
}

void GradientBuckets::listen_next_step(BucketListener listener) {
  if (plan_->launched() > 0)
    throw hardy::Error("GradientBuckets: listen_next_step() after the step's first bucket");
  listener_ = std::move(listener);
}

void GradientBuckets::tell_listener() {
  if (!listener_) return;
  ReducedBucket heard;
  for (; buckets_heard_ < plan_->launched() && buckets_[buckets_heard_].request->done();
       ++buckets_heard_) {
    heard.index = buckets_heard_;
    heard.parts.clear();
    for (const std::size_t i : bucket_members_[buckets_heard_]) {
      const auto& slot = plan_->slot(i);
      heard.parts.push_back({.param = params_[i],
                             .sums = std::span<const float>(buckets_[buckets_heard_].data)
                                         .subspan(slot.offset, slot.count)});
    }
    listener_(heard);
  }
}

void GradientBuckets::reduce_next_step_to(int root) {
  if (plan_->launched() > 0)
    throw hardy::Error("GradientBuckets: reduce_next_step_to() after the step's first bucket");
  reduce_root_ = root;
}

void GradientBuckets::launch_due_buckets() {
  for (std::size_t b = plan_->next_due(); b != detail::BucketPlan::npos; b = plan_->next_due())
    buckets_[b].request = reduce_root_ ? comm_->ireduce_sum(buckets_[b].data, *reduce_root_)
                                       : comm_->iallreduce_sum(buckets_[b].data);
}

void GradientBuckets::progress() {
  // Open MPI's ob1 advances non-blocking collectives only inside MPI calls, so poke them while
  // backward runs; one MPI_Test drives all of them, the rest only update their state.
  for (std::size_t b = 0; b < plan_->launched(); ++b) {
    if (!buckets_[b].request->done()) buckets_[b].request->test();
  }
  tell_listener();
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
  for (Bucket& bucket : buckets_) bucket.request.reset();
  end_step();
}

}  // namespace hardy::comm
