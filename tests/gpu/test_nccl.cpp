// The NCCL communicator on one rank (the GPU machines have one GPU, and NCCL puts at most one
// rank on a GPU): bootstrap, allreduce and broadcast on device memory, bucketed gradient
// allreduce with scaling and the overflow check, the restore broadcast, shrink and abort. The
// bootstrap is a single-process Communicator, standing in for the MPI one (which only has to
// broadcast the ncclUniqueId and, for shrink, sum a vector).
#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>

#include "gpu_test_support.hpp"
#include "hardy/comm/errors.hpp"
#include "hardy/comm/nccl/communicator.hpp"
#include "hardy/comm/nccl/gradient_buckets.hpp"
#include "hardy/comm/self_communicator.hpp"
#include "hardy/core/nn/model.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy;
using namespace hardy::core;
using namespace hardy::gpu_test;

namespace {

// A model of small tensors, so that several buckets of 16 KiB hold its gradients.
ModelConfig small_model() {
  ModelConfig config;
  config.width = 8;
  config.aspp_channels = 8;
  config.decoder_channels = 8;
  config.low_level_channels = 8;
  return config;
}

Tensor device_values(CudaBackend& cuda, const Tensor& host) {
  Tensor t = cuda.empty(host.dims(), DType::f32, host.layout());
  cuda.copy(host, t);
  return t;
}

}  // namespace

TEST_CASE("nccl: a one-rank communicator allreduces and broadcasts device memory", "[gpu]") {
  CudaBackend cuda;  // makes its device current, as the trainer's backend does
  comm::SelfCommunicator bootstrap;
  auto nccl = comm::NcclCommunicator::create(bootstrap);
  CHECK(nccl->rank() == 0);
  CHECK(nccl->size() == 1);
  CHECK(nccl->device() == cuda.device_index());

  const Tensor values = random_host({1000}, 91, 1.0f, Layout::flat);
  Tensor data = device_values(cuda, values);
  cuda.synchronize();
  nccl->allreduce_sum(data.data<float>(), static_cast<std::size_t>(data.numel()));
  nccl->broadcast(data.raw(), data.bytes(), 0);
  nccl->synchronize();
  check_close(cuda, data, values, 0.0, "allreduce and broadcast over one rank");
  CHECK_THROWS_AS(nccl->broadcast(data.raw(), data.bytes(), 1), InvalidArgument);

  // The restore broadcast: every tensor arrives unchanged.
  Tensor other = device_values(cuda, random_host({7, 3}, 92, 1.0f, Layout::flat));
  const Tensor other_values = to_host_f32(cuda, other);
  Tensor* tensors[] = {&data, &other};
  comm::broadcast_tensors(*nccl, cuda.stream(), tensors, 0);
  check_close(cuda, data, values, 0.0, "broadcast_tensors (first)");
  check_close(cuda, other, other_values, 0.0, "broadcast_tensors (second)");
  Tensor host_tensor = values.clone();
  Tensor* host_tensors[] = {&host_tensor};
  CHECK_THROWS_AS(comm::broadcast_tensors(*nccl, cuda.stream(), host_tensors, 0), InvalidArgument);
}

TEST_CASE("nccl: bucketed gradient allreduce writes scaled sums and finds overflows", "[gpu]") {
  CudaBackend cuda;
  comm::SelfCommunicator bootstrap;
  auto nccl = comm::NcclCommunicator::create(bootstrap);
  Model model(cuda, small_model());
  const auto& params = model.parameters();
  // Reverse order, as the trainer passes them; small buckets so that there are several.
  std::vector<Parameter*> reversed(params.rbegin(), params.rend());
  comm::NcclGradientBuckets buckets(*nccl, cuda, cuda.stream(), reversed, 16 << 10);
  CHECK(buckets.bucket_count() > 2);

  std::vector<Tensor> expected;
  for (std::size_t i = 0; i < reversed.size(); ++i) {
    const Tensor values =
        random_host(reversed[i]->grad.dims(), 100 + i, 1.0f, reversed[i]->grad.layout());
    cuda.copy(values, reversed[i]->grad);
    expected.push_back(values);
  }
  // Ready in an order other than bucket order, as backward may produce them.
  for (std::size_t i = reversed.size(); i-- > 0;)
    if (i % 2 == 0) buckets.mark_ready(i);
  CHECK_THROWS_AS(buckets.mark_ready(0), hardy::Error);  // twice in one step
  buckets.finish(0.5f);
  for (std::size_t i = 0; i < reversed.size(); ++i) {
    Tensor half = expected[i].clone();
    for (float& v : half.f32()) v *= 0.5f;
    check_close(cuda, reversed[i]->grad, half, 0.0, "scaled sum of " + reversed[i]->name);
  }
  CHECK_FALSE(buckets.has_non_finite());

  // A loss-scaling overflow in one gradient is seen after the allreduce.
  Tensor bad = expected[3].clone();
  bad.f32()[0] = std::numeric_limits<float>::infinity();
  cuda.copy(bad, reversed[3]->grad);
  buckets.finish(1.0f);
  CHECK(buckets.has_non_finite());
}

TEST_CASE("nccl: two steps' bucket sets on one communicator keep their own gradients (lag)",
          "[gpu]") {
  CudaBackend cuda;
  comm::SelfCommunicator bootstrap;
  auto nccl = comm::NcclCommunicator::create(bootstrap);
  Model model(cuda, small_model());
  std::vector<Parameter*> reversed(model.parameters().rbegin(), model.parameters().rend());
  comm::NcclGradientBuckets older(*nccl, cuda, cuda.stream(), reversed, 16 << 10);
  comm::NcclGradientBuckets newer(*nccl, cuda, cuda.stream(), reversed, 16 << 10);
  // Step N's gradients are all handed over; then the next backward (queued on the backend's
  // stream right behind) overwrites the same memory with step N+1's, which go to the other set.
  for (std::size_t i = 0; i < reversed.size(); ++i) {
    cuda.fill(reversed[i]->grad, 1.0f);
    older.mark_ready(i);
  }
  for (std::size_t i = 0; i < reversed.size(); ++i) {
    cuda.fill(reversed[i]->grad, 2.0f);
    newer.mark_ready(i);
  }
  older.finish(1.0f);  // its own allreduces only
  for (const Parameter* p : reversed) {
    Tensor ones = Tensor::host(p->grad.dims(), DType::f32, p->grad.layout());
    std::fill(ones.f32().begin(), ones.f32().end(), 1.0f);
    check_close(cuda, p->grad, ones, 0.0, "step N's sum of " + p->name);
  }
  newer.finish(1.0f);
  for (const Parameter* p : reversed) {
    Tensor twos = Tensor::host(p->grad.dims(), DType::f32, p->grad.layout());
    std::fill(twos.f32().begin(), twos.f32().end(), 2.0f);
    check_close(cuda, p->grad, twos, 0.0, "step N+1's sum of " + p->name);
  }
}

TEST_CASE("nccl: the survivors' list, shrink and abort", "[gpu]") {
  // Rank 0 of a former world of 3 is the only survivor: ranks 1 and 2 are gone.
  CHECK(comm::ranks_lost({0}, 3) == std::vector<int>{1, 2});
  CHECK(comm::ranks_lost({0}, 1).empty());

  CudaBackend cuda;
  comm::SelfCommunicator bootstrap;
  auto nccl = comm::NcclCommunicator::create(bootstrap);
  const int self[] = {0};
  CHECK_THROWS_AS(nccl->shrink(self), InvalidArgument);  // a rank cannot exclude itself
  // NCCL refuses a shrink that excludes nobody (2.28: invalid argument); the reducer starts a
  // fresh communicator then, and the refused call leaves this one as it was.
  CHECK_THROWS_AS(nccl->shrink({}, /*abort_in_flight=*/true), InvalidArgument);
  REQUIRE(nccl->usable());
  Tensor data = device_values(cuda, random_host({64}, 93, 1.0f, Layout::flat));
  cuda.synchronize();
  nccl->allreduce_sum(data.data<float>(), 64);
  nccl->synchronize();
  nccl->abort();
  CHECK_FALSE(nccl->usable());
  CHECK_THROWS_AS(nccl->allreduce_sum(data.data<float>(), 64), hardy::Error);
  cuda.synchronize();
  auto fresh = comm::NcclCommunicator::create(bootstrap);
  CHECK(fresh->size() == 1);
  fresh->allreduce_sum(data.data<float>(), 64);
  fresh->synchronize();

  fresh->abort();
  CHECK_FALSE(fresh->usable());
  CHECK_THROWS_AS(fresh->allreduce_sum(data.data<float>(), 64), hardy::Error);
}
