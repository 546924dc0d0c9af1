#include "nccl_gradient_reducer.hpp"

#include <optional>

#include "hardy/comm/nccl_communicator.hpp"
#include "hardy/comm/nccl_gradient_buckets.hpp"
#include "hardy/core/compute/cuda_backend.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::comm::detail {

namespace {

class NcclGradientReducer final : public GradientReducer {
 public:
  NcclGradientReducer(Communicator& comm, core::CudaBackend& backend,
                      std::vector<core::Parameter*> params, std::size_t bucket_bytes)
      : backend_(backend), nccl_(NcclCommunicator::create(comm)) {
    buckets_.emplace(*nccl_, backend_, backend_.stream(), std::move(params), bucket_bytes);
  }

  void mark_ready(std::size_t index) override { buckets_->mark_ready(index); }
  void finish(float scale) override { buckets_->finish(scale); }
  bool has_non_finite() override { return buckets_->has_non_finite(); }  // one check a bucket

  void forget_step() override { buckets_->rebind(*nccl_); }
  void rebind(Communicator& survivors, std::span<const int> lost) override {
    // The survivors agreed on the failed ranks through ULFM; NCCL drops the same ones, aborting
    // what was stuck on them. If any survivor's NCCL communicator was aborted already (a
    // collective timed out), all of them start a fresh one over the shrunk MPI communicator; so
    // they do when nobody was lost (a revoke without a death), which NCCL cannot shrink.
    const bool shrinkable =
        allreduce(survivors, nccl_->usable() ? 1 : 0, ReduceOp::min) == 1 && !lost.empty();
    std::unique_ptr<NcclCommunicator> next;
    if (shrinkable) {
      next = nccl_->shrink(lost);
    } else {
      nccl_->abort();
      next = NcclCommunicator::create(survivors);
    }
    buckets_->rebind(*next);  // before the old communicator goes away
    nccl_ = std::move(next);
  }

  bool broadcasts_tensors() const override { return true; }
  void broadcast(std::span<core::Tensor* const> tensors, int root) override {
    broadcast_tensors(*nccl_, backend_.stream(), tensors, root);
  }
  std::size_t bucket_count() const override { return buckets_->bucket_count(); }

 private:
  core::CudaBackend& backend_;
  std::unique_ptr<NcclCommunicator> nccl_;
  std::optional<NcclGradientBuckets> buckets_;  // refers to *nccl_: declared after it
};

}  // namespace

std::unique_ptr<GradientReducer> make_nccl_gradient_reducer(Communicator& comm,
                                                            core::Backend& backend,
                                                            std::vector<core::Parameter*> params,
                                                            std::size_t bucket_bytes) {
  auto* cuda = dynamic_cast<core::CudaBackend*>(&backend);
  if (cuda == nullptr)
    throw InvalidArgument("make_gradient_reducer: device gradients come from the cuda backend");
  return std::make_unique<NcclGradientReducer>(comm, *cuda, std::move(params), bucket_bytes);
}

}  // namespace hardy::comm::detail
