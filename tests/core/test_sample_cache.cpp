// The sample cache against a source that counts its loads and fails on demand.
#include <atomic>
#include <catch2/catch.hpp>
#include <set>
#include <thread>
#include <vector>

#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/data/sample_cache.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy;
using namespace hardy::core;

namespace {

constexpr SampleShape kShape{3, 4, 5};

// Sample i: field value j is i * 1000 + j, label j is (i + j) % 3; `bad` samples throw.
class CountingSource final : public SampleSource {
 public:
  explicit CountingSource(std::set<std::size_t> bad = {}) : bad_(std::move(bad)) {}
  std::size_t size() const override { return 50; }
  SampleShape shape() const override { return kShape; }
  std::string describe() const override { return "counting"; }
  int load_concurrency() const override { return 4; }
  void load(std::size_t index, std::span<float> fields,
            std::span<std::int32_t> labels) const override {
    check_load_arguments(index, fields, labels);
    loads.fetch_add(1);
    if (bad_.count(index)) throw Error("sample " + std::to_string(index) + " is damaged");
    for (std::size_t j = 0; j < fields.size(); ++j)
      fields[j] = static_cast<float>(index * 1000 + j);
    for (std::size_t j = 0; j < labels.size(); ++j)
      labels[j] = static_cast<std::int32_t>((index + j) % 3);
  }
  mutable std::atomic<int> loads{0};

 private:
  std::set<std::size_t> bad_;
};

const std::size_t kSampleBytes = kShape.field_elements() * 4 + kShape.label_elements() * 4;

}  // namespace

TEST_CASE("the sample cache gives the source's samples and loads each from it once") {
  auto owned = std::make_unique<CountingSource>();
  const CountingSource& source = *owned;
  CachedSamples cache(std::move(owned), 1 << 20);
  std::vector<float> fields(kShape.field_elements()), expected_fields(fields.size());
  std::vector<std::int32_t> labels(kShape.label_elements()), expected_labels(labels.size());
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (std::size_t i = 0; i < cache.size(); i += 7) {
      cache.load(i, fields, labels);
      CountingSource().load(i, expected_fields, expected_labels);
      REQUIRE(fields == expected_fields);
      REQUIRE(labels == expected_labels);
    }
  }
  CHECK(source.loads.load() == 8);  // samples 0, 7, ..., 49: once each
  CHECK(cache.cached_bytes() == 8 * kSampleBytes);
  REQUIRE_THROWS_AS(cache.load(50, fields, labels), InvalidArgument);
}

TEST_CASE("the sample cache keeps no more than its budget, and never a sample that failed") {
  auto owned = std::make_unique<CountingSource>(std::set<std::size_t>{3});
  const CountingSource& source = *owned;
  CachedSamples cache(std::move(owned), 2 * kSampleBytes);  // room for two
  std::vector<float> fields(kShape.field_elements());
  std::vector<std::int32_t> labels(kShape.label_elements());
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (std::size_t i : {0, 1, 2}) cache.load(i, fields, labels);
    REQUIRE_THROWS_AS(cache.load(3, fields, labels), Error);
  }
  // 0 and 1 kept after the first epoch; 2 and the damaged 3 went to the source both times.
  CHECK(source.loads.load() == 2 + 2 * 2);
  CHECK(cache.cached_bytes() == 2 * kSampleBytes);
}

TEST_CASE("the sample cache serves loader threads at once, and the synthetic samples bit for bit") {
  const SampleShape shape{4, 16, 16};
  CachedSamples cache(std::make_unique<SyntheticClimate>(shape, 64, 7), 64 << 20);
  const SyntheticClimate direct(shape, 64, 7);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> loaders;
  for (int t = 0; t < 4; ++t)
    loaders.emplace_back([&, t] {
      std::vector<float> fields(shape.field_elements()), want(fields.size());
      std::vector<std::int32_t> labels(shape.label_elements()), want_labels(labels.size());
      for (int round = 0; round < 3; ++round)
        for (std::size_t i = static_cast<std::size_t>(t); i < 64; i += 3) {
          cache.load(i, fields, labels);
          direct.load(i, want, want_labels);
          if (fields != want || labels != want_labels) mismatches.fetch_add(1);
        }
    });
  for (auto& loader : loaders) loader.join();
  CHECK(mismatches.load() == 0);
  CHECK(cache.cached_bytes() == 64 * (shape.field_elements() * 4 + shape.label_elements() * 4));
}
