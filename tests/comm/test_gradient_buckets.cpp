#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "hardy/comm/gradient_buckets.hpp"
#include "hardy/comm/mpi/communicator.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy::comm;
using namespace hardy::core;

namespace {

std::vector<Parameter> make_params(const std::vector<std::int64_t>& counts) {
  std::vector<Parameter> params;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    Parameter p;
    p.name = "p";
    p.name += std::to_string(i);
    p.value = Tensor::host({counts[i]}, hardy::core::DType::f32, Layout::flat);
    p.grad = Tensor::host({counts[i]}, hardy::core::DType::f32, Layout::flat);
    params.push_back(std::move(p));
  }
  return params;
}

// Small integers, so that sums are exact whatever order a reduction adds them in.
void fill_grads(std::vector<Parameter>& params, int rank, int step) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto g = params[i].grad.f32();
    for (std::size_t j = 0; j < g.size(); ++j) {
      g[j] = static_cast<float>((rank + 1) * (static_cast<int>((i + j + step) % 13) - 6));
    }
  }
}

std::vector<std::int64_t> random_counts(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);  // same seed on every rank: same model everywhere
  std::uniform_int_distribution<std::int64_t> size(1, 20000);
  std::vector<std::int64_t> counts(n);
  for (auto& c : counts) c = size(rng);
  return counts;
}

}  // namespace

TEST_CASE("GradientBuckets gives the same sums as a plain allreduce per gradient", "[mpi]") {
  auto comm = MpiCommunicator::world();
  const auto counts =
      GENERATE(std::vector<std::int64_t>{1000},
               std::vector<std::int64_t>{1000, 10, 5000, 3, 0, 20000, 7}, random_counts(60, 42));
  const std::size_t bucket_bytes = GENERATE(std::size_t{64}, std::size_t{4096}, std::size_t{40000},
                                            GradientBuckets::kDefaultBucketBytes);
  CAPTURE(counts.size(), bucket_bytes);
  const float scale = 0.5f;

  auto params = make_params(counts);
  GradientBuckets buckets(*comm, hardy::core::pointers_to(params), bucket_bytes);
  if (bucket_bytes == GradientBuckets::kDefaultBucketBytes) REQUIRE(buckets.bucket_count() == 1);
  if (bucket_bytes == 64) REQUIRE(buckets.bucket_count() >= counts.size() - 1);  // one per tensor

  for (int step = 0; step < 3; ++step) {
    fill_grads(params, comm->rank(), step);
    std::vector<std::vector<float>> expected;
    for (auto& p : params) {
      expected.emplace_back(p.grad.f32().begin(), p.grad.f32().end());
      comm->allreduce_sum(expected.back());
    }
    // Each rank marks gradients in its own order and leaves some for finish() to mark.
    std::vector<std::size_t> order(params.size());
    std::iota(order.begin(), order.end(), 0);
    std::mt19937 rng(static_cast<unsigned>(comm->rank() * 100 + step));
    std::shuffle(order.begin(), order.end(), rng);
    order.resize(order.size() - order.size() / 4);
    for (std::size_t i : order) buckets.mark_ready(i);
    buckets.finish(scale);

    for (std::size_t i = 0; i < params.size(); ++i) {
      auto g = params[i].grad.f32();
      for (std::size_t j = 0; j < g.size(); ++j) {
        if (g[j] != expected[i][j] * scale) FAIL("param " << i << " element " << j);
      }
    }
  }
}

TEST_CASE("GradientBuckets rejects misuse and can be rebound", "[mpi]") {
  auto comm = MpiCommunicator::world();
  auto params = make_params({10, 20});
  GradientBuckets buckets(*comm, hardy::core::pointers_to(params), 1);
  REQUIRE(buckets.bucket_count() == 2);
  REQUIRE(buckets.bucket_of(1) == 1);
  buckets.mark_ready(0);
  REQUIRE_THROWS_AS(buckets.mark_ready(0), hardy::Error);
  REQUIRE_THROWS_AS(buckets.mark_ready(2), hardy::Error);
  buckets.finish(1.0f);
  buckets.rebind(*comm);
  fill_grads(params, 0, 0);
  buckets.finish(1.0f);
  REQUIRE(params[1].grad.f32()[3] ==
          static_cast<float>(comm->size() * ((1 + 3) % 13 - 6)));  // -2 each
}

TEST_CASE("GradientBuckets reduces one step to a root, then allreduces again", "[mpi]") {
  // A fault domain's meeting step: only its leader needs the sums.
  auto comm = MpiCommunicator::world();
  const int n = comm->size(), me = comm->rank(), root = n - 1;
  auto params = make_params({1000, 10, 5000, 3, 20000});
  std::vector<Parameter*> ptrs;
  for (auto& p : params) ptrs.push_back(&p);
  GradientBuckets buckets(*comm, ptrs, 4096);
  auto expected_sum = [&](std::size_t i, std::size_t j, int step) {
    float sum = 0;
    for (int r = 0; r < n; ++r)
      sum += static_cast<float>((r + 1) * (static_cast<int>((i + j + step) % 13) - 6));
    return sum;
  };
  fill_grads(params, me, 0);
  buckets.reduce_next_step_to(root);
  for (std::size_t i = 0; i < params.size(); ++i) buckets.mark_ready(i);
  buckets.finish(1.0f);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto g = params[i].grad.f32();
    for (std::size_t j = 0; j < g.size(); ++j) {
      // The others keep their own gradients: nothing reached them.
      const float own = static_cast<float>((me + 1) * (static_cast<int>((i + j) % 13) - 6));
      REQUIRE(g[j] == (me == root ? expected_sum(i, j, 0) : own));
    }
  }
  // The next step is an allreduce again, without being asked.
  fill_grads(params, me, 1);
  for (std::size_t i = 0; i < params.size(); ++i) buckets.mark_ready(i);
  buckets.finish(1.0f);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto g = params[i].grad.f32();
    for (std::size_t j = 0; j < g.size(); ++j) REQUIRE(g[j] == expected_sum(i, j, 1));
  }
  // Asked too late, once a bucket is on its way, it refuses rather than mix the two.
  fill_grads(params, me, 2);
  for (std::size_t i = 0; i < params.size(); ++i) buckets.mark_ready(i);
  REQUIRE_THROWS_AS(buckets.reduce_next_step_to(root), hardy::Error);
  buckets.finish(1.0f);
}

TEST_CASE("GradientBuckets tells a listener each bucket's sums in order, for one step", "[mpi]") {
  // A fault domain's sharded exchange sends each bucket on as soon as the domain has summed it.
  auto comm = MpiCommunicator::world();
  const int n = comm->size(), me = comm->rank();
  auto params = make_params({1000, 10, 5000, 3, 20000, 7});
  GradientBuckets buckets(*comm, hardy::core::pointers_to(params), 4096);
  REQUIRE(buckets.bucket_count() >= 4);
  fill_grads(params, me, 0);
  std::vector<std::size_t> heard;
  buckets.listen_next_step([&](const ReducedBucket& bucket) {
    heard.push_back(bucket.index);
    for (const ReducedBucket::Part& part : bucket.parts) {
      const auto i = static_cast<std::size_t>(part.param - params.data());
      REQUIRE(buckets.bucket_of(i) == bucket.index);
      REQUIRE(part.sums.size() == params[i].grad.f32().size());
      for (std::size_t j = 0; j < part.sums.size(); ++j) {
        float sum = 0;  // unscaled: finish() has not scaled them yet
        for (int r = 0; r < n; ++r)
          sum += static_cast<float>((r + 1) * (static_cast<int>((i + j) % 13) - 6));
        if (part.sums[j] != sum) FAIL("param " << i << " element " << j);
      }
    }
  });
  for (std::size_t i = 0; i < params.size(); ++i) buckets.mark_ready(i);
  buckets.finish(0.5f);
  std::vector<std::size_t> all(buckets.bucket_count());
  std::iota(all.begin(), all.end(), 0);
  REQUIRE(heard == all);  // every bucket once, in bucket order
  // The next step has no listener unless asked again.
  heard.clear();
  fill_grads(params, me, 1);
  for (std::size_t i = 0; i < params.size(); ++i) buckets.mark_ready(i);
  buckets.finish(1.0f);
  REQUIRE(heard.empty());
  // Only before a step's first bucket.
  for (std::size_t i = 0; i < params.size() && buckets.bucket_of(i) == 0; ++i)
    buckets.mark_ready(i);
  REQUIRE_THROWS_AS(buckets.listen_next_step([](const ReducedBucket&) {}), hardy::Error);
  buckets.forget_step();
}
