#include "hardy/comm/nccl_gradient_buckets.hpp"

#include <fmt/format.h>

#include "hardy/comm/errors.hpp"
#include "hardy/core/error.hpp"

namespace hardy::comm {

NcclGradientBuckets::NcclGradientBuckets(NcclCommunicator& comm, core::CudaBackend& backend,
                                         std::vector<core::Parameter*> params,
                                         std::size_t bucket_bytes,
                                         std::chrono::milliseconds timeout)
    : comm_(&comm),
      backend_(backend),
      params_(std::move(params)),
      slots_(params_.size()),
      timeout_(timeout) {
  // The same packing as GradientBuckets, so that both paths make the same buckets.
  std::vector<std::size_t> sizes;
  std::size_t filled = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const core::Tensor& shape = params_[i]->value.defined() ? params_[i]->value : params_[i]->grad;
    const auto count = static_cast<std::size_t>(shape.defined() ? shape.numel() : 0);
    if (sizes.empty() || (filled > 0 && (filled + count) * sizeof(float) > bucket_bytes)) {
      sizes.push_back(0);
      buckets_.emplace_back();
      filled = 0;
    }
    slots_[i] = Slot{buckets_.size() - 1, filled, count, false};
    filled += count;
    sizes.back() = filled;
    buckets_.back().members += 1;
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b].data =
        backend_.empty({static_cast<std::int64_t>(sizes[b])}, core::DType::f32, core::Layout::flat);
    buckets_[b].pending = buckets_[b].members;
  }
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
  if (index >= slots_.size())
    throw hardy::Error(
        fmt::format("NcclGradientBuckets::mark_ready: index {} is beyond the {} "
                    "parameters",
                    index, slots_.size()));
  Slot& slot = slots_[index];
  const core::Parameter& param = *params_[index];
  if (slot.ready)
    throw hardy::Error("NcclGradientBuckets: parameter " + param.name +
                       " marked ready twice in a step");
  const core::Tensor& grad = param.grad;
  if (!grad.defined() || grad.device() != core::Device::cuda || grad.dtype() != core::DType::f32 ||
      static_cast<std::size_t>(grad.numel()) != slot.count)
    throw hardy::Error(
        fmt::format("NcclGradientBuckets: gradient of {} is {}, expected a device "
                    "f32 tensor of {} elements",
                    param.name, grad.defined() ? grad.describe() : "undefined", slot.count));
  try {
    // The NCCL stream waits on the device for the backward pass to have produced this gradient.
    gradient_ready_.record(backend_.stream());
    gradient_ready_.make_wait(comm_->stream());
    if (slot.count > 0)
      HARDY_CUDA_CHECK(cudaMemcpyAsync(bucket_data(slot.bucket) + slot.offset, grad.raw(),
                                       slot.count * sizeof(float), cudaMemcpyDeviceToDevice,
                                       comm_->stream()));
    in_flight_ = true;
    slot.ready = true;
    buckets_[slot.bucket].pending -= 1;
    launch_complete_buckets();
  } catch (const ProcessFailure&) {
    reset();
    throw;
  }
}

void NcclGradientBuckets::launch_complete_buckets() {
  // Strictly in bucket order, so that every rank issues the same sequence of collectives.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    const core::Tensor& data = buckets_[next_launch_].data;
    if (data.numel() > 0)
      comm_->allreduce_sum(bucket_data(next_launch_), static_cast<std::size_t>(data.numel()));
    ++next_launch_;
  }
}

void NcclGradientBuckets::finish(float scale) {
  try {
    for (std::size_t i = 0; i < slots_.size(); ++i)
      if (!slots_[i].ready) mark_ready(i);
    comm_->synchronize(timeout_);
  } catch (const ProcessFailure&) {
    reset();
    throw;
  }
  in_flight_ = false;
  // The sums are complete (the host waited), so the backend's stream may read them directly.
  if (scale != 1.0f)
    for (Bucket& bucket : buckets_)
      if (bucket.data.numel() > 0) backend_.scale(bucket.data, scale);
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    if (slot.count == 0) continue;
    HARDY_CUDA_CHECK(cudaMemcpyAsync(params_[i]->grad.raw(), bucket_data(slot.bucket) + slot.offset,
                                     slot.count * sizeof(float), cudaMemcpyDeviceToDevice,
                                     backend_.stream()));
  }
  reset();
}

bool NcclGradientBuckets::has_non_finite() {
  for (Bucket& bucket : buckets_)
    if (bucket.data.numel() > 0 && backend_.has_non_finite(bucket.data)) return true;
  return false;
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
  reset();
  comm_ = &comm;
}

void NcclGradientBuckets::reset() {
  for (Bucket& bucket : buckets_) bucket.pending = bucket.members;
  for (Slot& slot : slots_) slot.ready = false;
  next_launch_ = 0;
}

}  // namespace hardy::comm
