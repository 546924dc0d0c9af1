#include "hardy/comm/nccl/gradient_buckets.hpp"

#include <fmt/format.h>

#include <vector>

#include "bucket_plan.hpp"
#include "hardy/comm/errors.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::comm {

NcclGradientBuckets::NcclGradientBuckets(NcclCommunicator& comm, core::Backend& backend,
                                         cudaStream_t compute_stream,
                                         std::vector<core::Parameter*> params,
                                         std::size_t bucket_bytes,
                                         std::chrono::milliseconds timeout)
    : comm_(&comm),
      backend_(backend),
      compute_stream_(compute_stream),
      params_(std::move(params)),
      plan_(std::make_unique<detail::BucketPlan>(params_, bucket_bytes, "NcclGradientBuckets")),
      timeout_(timeout) {
  if (backend_.device() != core::Device::cuda)
    throw InvalidArgument(fmt::format(
        "NcclGradientBuckets: the {} backend keeps its gradients on the host; NCCL reduces device "
        "memory (use the MPI GradientBuckets)",
        backend_.name()));
  for (std::size_t b = 0; b < plan_->bucket_count(); ++b)
    buckets_.push_back(backend_.empty({static_cast<std::int64_t>(plan_->bucket_floats(b))},
                                      core::DType::f32, core::Layout::flat));
}

std::size_t NcclGradientBuckets::bucket_of(std::size_t index) const {
  return plan_->slot(index).bucket;
}

NcclGradientBuckets::~NcclGradientBuckets() {
  if (!in_flight_ || !comm_->usable()) return;
  try {
    comm_->synchronize(timeout_);
  } catch (const hardy::Error&) {
    // The communicator is aborted by now, which ends every kernel that used the buckets.
  }
}

void NcclGradientBuckets::mark_ready(std::size_t index) {
  const auto& slot = plan_->check_mark(index, index < params_.size() ? params_[index]->name : "");
  const core::Parameter& param = *params_[index];
  const core::Tensor& grad = param.grad;
  if (!grad.defined() || grad.device() != core::Device::cuda || grad.dtype() != core::DType::f32 ||
      static_cast<std::size_t>(grad.numel()) != slot.count)
    throw hardy::Error(
        fmt::format("NcclGradientBuckets: gradient of {} is {}, expected a device "
                    "f32 tensor of {} elements",
                    param.name, grad.defined() ? grad.describe() : "undefined", slot.count));
  try {
    // Copied on the backend's stream, in order with the backward pass: the gradient's memory is
    // the model's, and the next step's backward overwrites it, which with lagged updates runs
    // while this step's allreduces are still queued behind others on the NCCL stream. The NCCL
    // stream waits on the device for the copy.
    if (slot.count > 0)
      HARDY_CUDA_CHECK(cudaMemcpyAsync(bucket_data(slot.bucket) + slot.offset, grad.raw(),
                                       slot.count * sizeof(float), cudaMemcpyDeviceToDevice,
                                       compute_stream_));
    gradient_ready_.record(compute_stream_);
    gradient_ready_.make_wait(comm_->stream());
    in_flight_ = true;
    plan_->mark(index);
    launch_due_buckets();
  } catch (const ProcessFailure&) {
    plan_->reset();
    throw;
  }
}

void NcclGradientBuckets::launch_due_buckets() {
  for (std::size_t b = plan_->next_due(); b != detail::BucketPlan::npos; b = plan_->next_due())
    if (buckets_[b].numel() > 0)
      comm_->allreduce_sum(bucket_data(b), static_cast<std::size_t>(buckets_[b].numel()));
  // This step's last allreduce is queued: what finish() waits for. Recorded now, since another
  // bucket set (the next step's, with lagged updates) may queue its own behind it before then.
  if (plan_->launched() == plan_->bucket_count()) reduced_.record(comm_->stream());
}

void NcclGradientBuckets::finish(float scale) {
  try {
    for (std::size_t i = 0; i < plan_->parameter_count(); ++i)
      if (!plan_->ready(i)) mark_ready(i);
    if (plan_->bucket_count() == 0) reduced_.record(comm_->stream());
    // This step's allreduces only (reduced_ follows its last one): another bucket set's may be
    // queued after them on the same communicator.
    comm_->wait_for(reduced_, timeout_);
  } catch (const ProcessFailure&) {
    plan_->reset();
    throw;
  }
  in_flight_ = false;
  // The sums are complete (the host waited), so the backend's stream may read them directly.
  if (scale != 1.0f)
    for (core::Tensor& bucket : buckets_)
      if (bucket.numel() > 0) backend_.scale(bucket, scale);
  for (std::size_t i = 0; i < plan_->parameter_count(); ++i) {
    const auto& slot = plan_->slot(i);
    if (slot.count == 0) continue;
    HARDY_CUDA_CHECK(cudaMemcpyAsync(params_[i]->grad.raw(), bucket_data(slot.bucket) + slot.offset,
                                     slot.count * sizeof(float), cudaMemcpyDeviceToDevice,
                                     compute_stream_));
  }
  plan_->reset();
}

bool NcclGradientBuckets::has_non_finite() {
  std::vector<const core::Tensor*> filled;
  for (const core::Tensor& bucket : buckets_)
    if (bucket.numel() > 0) filled.push_back(&bucket);
  return backend_.has_non_finite(filled);  // one wait for the device, not one per bucket
}

void NcclGradientBuckets::rebind(NcclCommunicator& comm) {
  if (in_flight_ && comm_->usable()) {
    try {
      comm_->synchronize(timeout_);
    } catch (const ProcessFailure&) {
      // Aborted: nothing of the old communicator runs any more.
    }
  }
  in_flight_ = false;
  plan_->reset();
  comm_ = &comm;
}

}  // namespace hardy::comm
