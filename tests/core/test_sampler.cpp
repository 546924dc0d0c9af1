#include <algorithm>
#include <catch2/catch.hpp>
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
