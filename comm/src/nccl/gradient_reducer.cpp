#include "nccl/gradient_reducer.hpp"

#include <chrono>
#include <optional>
#include <type_traits>

#include "hardy/comm/nccl/communicator.hpp"
#include "hardy/comm/nccl/gradient_buckets.hpp"
#include "hardy/core/compute/cuda_backend.hpp"
#include "hardy/core/support/error.hpp"
#include "nccl_module.hpp"

namespace hardy::comm::detail {

namespace {

// The NCCL communicator that the reducers of one trainer share (two with lagged updates). One
// communicator and one stream: NCCL orders the operations of one communicator as they were
// queued, and two communicators' kernels on one GPU may wait on each other forever.
struct SharedNccl {
  std::unique_ptr<NcclCommunicator> current;
  // The one before the last rebuild, kept until every reducer has moved its buckets off it.
  std::unique_ptr<NcclCommunicator> retired;
  std::size_t generation = 0;  // rebuilds so far
  std::size_t reducers = 0;
  std::size_t behind = 0;  // reducers still on `retired`
};

class NcclGradientReducer final : public GradientReducer {
 public:
  NcclGradientReducer(std::shared_ptr<SharedNccl> shared, core::CudaBackend& backend,
                      std::vector<core::Parameter*> params, std::size_t bucket_bytes)
      : backend_(backend), shared_(std::move(shared)), generation_(shared_->generation) {
    ++shared_->reducers;
    buckets_.emplace(*shared_->current, backend_, backend_.stream(), std::move(params),
                     bucket_bytes);
  }
  ~NcclGradientReducer() override {
    buckets_.reset();  // before the communicator it uses may go
    --shared_->reducers;
  }

  void mark_ready(std::size_t index) override { buckets_->mark_ready(index); }
  void finish(float scale) override { buckets_->finish(scale); }
  bool has_non_finite() override { return buckets_->has_non_finite(); }  // one check a bucket

  void forget_step() override { buckets_->rebind(*shared_->current); }

  TransportRebuild rebind(Communicator& survivors, std::span<const int> lost) override {
    if (generation_ != shared_->generation) {
      // Another reducer of this trainer rebuilt the shared communicator in this recovery.
      buckets_->rebind(*shared_->current);
      generation_ = shared_->generation;
      if (--shared_->behind == 0) shared_->retired.reset();
      return {};
    }
    const auto started = std::chrono::steady_clock::now();
    // The survivors agreed on the failed ranks through ULFM; NCCL drops the same ones, aborting
    // what was stuck on them. If any survivor's NCCL communicator was aborted already (a
    // collective timed out), all of them start a fresh one over the shrunk MPI communicator; so
    // they do when nobody was lost (a revoke without a death), which NCCL cannot shrink.
    NcclCommunicator& old = *shared_->current;
    const bool all_usable = allreduce(survivors, old.usable() ? 1 : 0, ReduceOp::min) == 1;
    std::unique_ptr<NcclCommunicator> next;
    TransportRebuild report;
    if (all_usable && !lost.empty()) {
      next = old.shrink(lost);
      report.path = "nccl_shrink";
    } else {
      old.abort();
      next = NcclCommunicator::create(survivors);
      report.path = lost.empty() ? "nccl_recreate" : "nccl_abort_recreate";
    }
    buckets_->rebind(*next);  // before the old communicator goes away
    shared_->retired = std::move(shared_->current);
    shared_->current = std::move(next);
    generation_ = ++shared_->generation;
    shared_->behind = shared_->reducers - 1;
    if (shared_->behind == 0) shared_->retired.reset();
    report.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return report;
  }

  bool broadcasts_tensors() const override { return true; }
  void broadcast(std::span<core::Tensor* const> tensors, int root) override {
    broadcast_tensors(*shared_->current, backend_.stream(), tensors, root);
  }
  std::size_t bucket_count() const override { return buckets_->bucket_count(); }

 private:
  core::CudaBackend& backend_;
  std::shared_ptr<SharedNccl> shared_;
  std::size_t generation_;
  std::optional<NcclGradientBuckets> buckets_;  // refers to the shared communicator
};

}  // namespace

std::vector<std::unique_ptr<GradientReducer>> make_nccl_gradient_reducers(
    Communicator& comm, core::Backend& backend, std::vector<core::Parameter*> params,
    std::size_t bucket_bytes, std::size_t steps_in_flight) {
  auto* cuda = dynamic_cast<core::CudaBackend*>(&backend);
  if (cuda == nullptr)
    throw InvalidArgument("make_gradient_reducers: device gradients come from the cuda backend");
  auto shared = std::make_shared<SharedNccl>();
  shared->current = NcclCommunicator::create(comm);
  std::vector<std::unique_ptr<GradientReducer>> reducers;
  for (std::size_t i = 0; i < steps_in_flight; ++i)
    reducers.push_back(std::make_unique<NcclGradientReducer>(shared, *cuda, params, bucket_bytes));
  return reducers;
}

}  // namespace hardy::comm::detail

// The module's entry (nccl_module.hpp): make_gradient_reducers loads this module for it.
extern "C" __attribute__((visibility("default"))) void hardy_make_nccl_gradient_reducers(
    hardy::comm::nccl_module::ReducersRequest* request) {
  request->reducers = hardy::comm::detail::make_nccl_gradient_reducers(
      *request->comm, *request->backend, std::move(request->params), request->bucket_bytes,
      request->steps_in_flight);
}
static_assert(std::is_same_v<decltype(&hardy_make_nccl_gradient_reducers),
                             hardy::comm::nccl_module::MakeReducers>);
