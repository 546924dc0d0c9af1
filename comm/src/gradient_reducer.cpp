#include "hardy/comm/gradient_reducer.hpp"

#include <vector>

#include "hardy/comm/gradient_buckets.hpp"
#include "hardy/core/support/error.hpp"
#ifdef HARDY_HAVE_NCCL
#include "hardy/core/support/modules.hpp"
#include "nccl_module.hpp"
#endif

namespace hardy::comm {

namespace {

class MpiGradientReducer final : public GradientReducer {
 public:
  MpiGradientReducer(Communicator& comm, core::Backend& backend,
                     std::vector<core::Parameter*> params, std::size_t bucket_bytes)
      : backend_(backend), params_(params), buckets_(comm, std::move(params), bucket_bytes) {}

  void mark_ready(std::size_t index) override { buckets_.mark_ready(index); }
  void finish(float scale) override { buckets_.finish(scale); }
  void reduce_next_step_to(int root) override { buckets_.reduce_next_step_to(root); }
  bool listen_next_step(BucketListener listener) override {
    buckets_.listen_next_step(std::move(listener));
    return true;
  }
  bool has_non_finite() override {
    std::vector<const core::Tensor*> grads;
    for (const core::Parameter* p : params_) grads.push_back(&p->grad);
    return backend_.has_non_finite(grads);
  }
  void forget_step() override { buckets_.forget_step(); }
  TransportRebuild rebind(Communicator& survivors, std::span<const int>) override {
    buckets_.rebind(survivors);
    return {};
  }
  bool broadcasts_tensors() const override { return false; }
  void broadcast(std::span<core::Tensor* const>, int) override {
    throw Error("MpiGradientReducer: host tensors travel through MPI (broadcast_state)");
  }
  std::size_t bucket_count() const override { return buckets_.bucket_count(); }

 private:
  core::Backend& backend_;
  std::vector<core::Parameter*> params_;
  GradientBuckets buckets_;
};

}  // namespace

std::vector<std::unique_ptr<GradientReducer>> make_gradient_reducers(
    Communicator& comm, core::Backend& backend, std::vector<core::Parameter*> params,
    std::size_t bucket_bytes, std::size_t steps_in_flight) {
  if (steps_in_flight < 1)
    throw InvalidArgument("make_gradient_reducers: at least one step in flight");
  if (backend.device() == core::Device::host) {
    std::vector<std::unique_ptr<GradientReducer>> reducers;
    for (std::size_t i = 0; i < steps_in_flight; ++i)
      reducers.push_back(std::make_unique<MpiGradientReducer>(comm, backend, params, bucket_bytes));
    return reducers;
  }
#ifdef HARDY_HAVE_NCCL
  const auto make = reinterpret_cast<nccl_module::MakeReducers>(core::module_symbol(
      nccl_module::kFile, nccl_module::kMakeReducers, "the NCCL gradient exchange"));
  nccl_module::ReducersRequest request{&comm,        &backend,        std::move(params),
                                       bucket_bytes, steps_in_flight, {}};
  make(&request);
  return std::move(request.reducers);
#else
  throw Error(
      "make_gradient_reducers: device gradients need NCCL, and this build has no CUDA backend");
#endif
}

}  // namespace hardy::comm
