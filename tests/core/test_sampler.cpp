#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>

#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/data/sampler.hpp"
#include "hardy/core/nn/segmentation_metrics.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy;
using namespace hardy::core;

TEST_CASE("sampler: shards are contiguous, cover the batch once, and differ by at most one",
          "[core]") {
  for (std::size_t batch : {1u, 7u, 8u, 13u}) {
    for (int world : {1, 3, 4, 8}) {
      std::size_t next = 0, smallest = batch, largest = 0;
      for (int rank = 0; rank < world; ++rank) {
        const Shard s = shard_of(batch, rank, world);
        CHECK(s.begin == next);
        next = s.end;
        smallest = std::min(smallest, s.size());
        largest = std::max(largest, s.size());
      }
      CHECK(next == batch);
      CHECK(largest - smallest <= 1);
    }
  }
  CHECK_THROWS_AS(shard_of(8, 4, 4), InvalidArgument);
}

TEST_CASE("sampler: weighted shares are whole samples that add up to the batch, at least one each",
          "[core]") {
  // Equal weights: the even split, the first ranks one more.
  for (std::size_t batch : {4u, 7u, 16u, 33u})
    for (int world : {1, 2, 3, 4}) {
      if (batch < static_cast<std::size_t>(world)) continue;
      const std::vector<double> equal(static_cast<std::size_t>(world), 0.7);
      for (int rank = 0; rank < world; ++rank) {
        CHECK(shard_of(batch, rank, world, equal).begin == shard_of(batch, rank, world).begin);
        CHECK(shard_of(batch, rank, world, equal).end == shard_of(batch, rank, world).end);
      }
    }
  // One rank at a third of the others' speed, 8 ranks, a global batch of 64: 7 x 8.7 + 2.9.
  std::vector<double> weights(8, 1.0);
  weights[5] = 1.0 / 3;
  const auto shares = weighted_shares(64, weights);
  std::size_t sum = 0;
  for (std::size_t share : shares) sum += share;
  CHECK(sum == 64);
  CHECK(shares[5] == 3);
  for (std::size_t r = 0; r < 8; ++r)
    if (r != 5) CHECK((shares[r] == 8 || shares[r] == 9));
  // Slices are contiguous and cover the batch once.
  std::size_t next = 0;
  for (int rank = 0; rank < 8; ++rank) {
    const Shard s = shard_of(64, rank, 8, weights);
    CHECK(s.begin == next);
    CHECK(s.size() == shares[static_cast<std::size_t>(rank)]);
    next = s.end;
  }
  CHECK(next == 64);
  // A weight so small it rounds to nothing still leaves the rank one sample.
  CHECK(weighted_shares(16, std::vector<double>{1, 1, 1e-9}) == std::vector<std::size_t>{7, 8, 1});
  // Whole-number weights that add up to the batch are the shares themselves.
  CHECK(weighted_shares(64, std::vector<double>{9, 9, 9, 9, 9, 9, 7, 3}) ==
        std::vector<std::size_t>{9, 9, 9, 9, 9, 9, 7, 3});
  // Random weights and batches: the sum and the floor of one always hold.
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t world = 1 + static_cast<std::size_t>(trial % 9);
    const std::size_t batch = world + static_cast<std::size_t>((trial * 37) % 101);
    std::vector<double> w(world);
    for (std::size_t r = 0; r < world; ++r)
      w[r] = 0.05 + static_cast<double>((trial * 13 + r * 7) % 23);
    const auto got = weighted_shares(batch, w);
    std::size_t total = 0;
    for (std::size_t share : got) {
      CHECK(share >= 1);
      total += share;
    }
    CHECK(total == batch);
  }
  CHECK_THROWS_AS(weighted_shares(2, std::vector<double>{1, 1, 1}), InvalidArgument);
  CHECK_THROWS_AS(weighted_shares(8, std::vector<double>{1, 0}), InvalidArgument);
  CHECK_THROWS_AS(weighted_shares(8, std::vector<double>{1, std::nan("")}), InvalidArgument);
  CHECK_THROWS_AS(shard_of(8, 2, 2, std::vector<double>{1, 1}), InvalidArgument);
}

TEST_CASE("sampler: every epoch sees every sample exactly once, also across batch boundaries",
          "[core]") {
  EpochSampler sampler(10, 42);
  std::map<std::int64_t, std::vector<std::size_t>> seen;
  for (int step = 0; step < 9; ++step) {  // 9 batches of 4 = 3.6 epochs, batches straddle epochs
    const auto batch = sampler.next(4);
    REQUIRE(batch.samples.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) seen[batch.epochs[i]].push_back(batch.samples[i]);
  }
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    auto samples = seen[epoch];
    std::sort(samples.begin(), samples.end());
    std::vector<std::size_t> all(10);
    for (std::size_t i = 0; i < 10; ++i) all[i] = i;
    CHECK(samples == all);
  }
  CHECK(sampler.permutation(0) != sampler.permutation(1));
}

TEST_CASE("sampler: a restored state continues the same sequence", "[core]") {
  EpochSampler a(17, 3);
  for (int i = 0; i < 5; ++i) a.next(5);
  const SamplerState saved = a.state();
  const auto expected = a.next(9).samples;
  EpochSampler b(17, 3);
  b.restore(saved);
  CHECK(b.next(9).samples == expected);
  CHECK_THROWS_AS(b.restore({3, 0, 17}), InvalidArgument);
}

TEST_CASE("metrics: IoU per class against a hand-counted confusion matrix", "[core]") {
  ConfusionMatrix m(3);
  // truth:     0 0 0 1 1 2
  // predicted: 0 0 1 1 2 2
  const std::vector<std::int32_t> truth{0, 0, 0, 1, 1, 2}, predicted{0, 0, 1, 1, 2, 2};
  m.add(truth, predicted);
  const auto iou = m.iou();
  CHECK(iou[0] == Approx(2.0 / 3.0));  // tp 2, fn 1, fp 0
  CHECK(iou[1] == Approx(1.0 / 3.0));  // tp 1, fn 1, fp 1
  CHECK(iou[2] == Approx(1.0 / 2.0));  // tp 1, fn 0, fp 1
  CHECK(m.mean_iou() == Approx((2.0 / 3 + 1.0 / 3 + 0.5) / 3));
  CHECK(m.pixel_accuracy() == Approx(4.0 / 6.0));
  // Predicting background everywhere: IoU 3/6 for it, 0 for the others.
  const auto baseline = m.with_constant_prediction(0);
  CHECK(baseline.mean_iou() == Approx(0.5 / 3));
  CHECK(baseline.pixel_accuracy() == Approx(3.0 / 6.0));
  // A skipped sample's pixels (kIgnoreLabel) change nothing.
  const std::vector<std::int32_t> ignored(4, hardy::core::kIgnoreLabel), any{0, 1, 2, 0};
  m.add(ignored, any);
  CHECK(m.mean_iou() == Approx((2.0 / 3 + 1.0 / 3 + 0.5) / 3));
  CHECK(m.pixel_accuracy() == Approx(4.0 / 6.0));
  const std::vector<std::int32_t> bad{3};
  CHECK_THROWS_AS(m.add(bad, bad), InvalidArgument);
}
