#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/support/error.hpp"
#include "sample_fixtures.hpp"

using hardy::core::SampleShape;
using hardy::core::SyntheticClimate;
using hardy::testing::load;
using hardy::testing::Sample;

namespace {

bool identical(const Sample& a, const Sample& b) {
  return a.fields.size() == b.fields.size() && a.labels == b.labels &&
         std::memcmp(a.fields.data(), b.fields.data(), a.fields.size() * sizeof(float)) == 0;
}

// FNV-1a over the bytes of a sample.
std::uint64_t fingerprint(const Sample& sample) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  auto mix = [&](const void* data, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; ++i) {
      hash ^= static_cast<const unsigned char*>(data)[i];
      hash *= 0x100000001b3ULL;
    }
  };
  mix(sample.fields.data(), sample.fields.size() * sizeof(float));
  mix(sample.labels.data(), sample.labels.size() * sizeof(std::int32_t));
  return hash;
}

}  // namespace

TEST_CASE("data: a synthetic sample is a pure function of seed and index", "[core]") {
  const SampleShape shape{16, 64, 64};
  const SyntheticClimate small(shape, 10, 7);
  const SyntheticClimate large(shape, 100000, 7);
  const Sample sample = load(small, 3);

  CHECK(identical(sample, load(small, 3)));
  CHECK(identical(sample, load(large, 3)));  // independent of the number of samples
  CHECK_FALSE(identical(sample, load(small, 4)));
  CHECK_FALSE(identical(sample, load(SyntheticClimate(shape, 10, 8), 3)));

  Sample from_thread;
  std::thread([&] { from_thread = load(large, 3); }).join();
  CHECK(identical(sample, from_thread));
}

TEST_CASE("data: synthetic samples are the same on every platform and build", "[core]") {
  // The generator avoids libm and std:: distributions, so these bytes are fixed. A change here
  // changes every synthetic dataset and experiment: make it on purpose, never by accident.
  const SyntheticClimate source(SampleShape{16, 32, 32}, 4, 42);
  CHECK(fingerprint(load(source, 0)) == 0xf96ef4aa5d81069bULL);
  CHECK(fingerprint(load(source, 3)) == 0x127511e22e56ab8aULL);
}

TEST_CASE("data: synthetic class fractions are sane and every class appears", "[core]") {
  const SyntheticClimate source(SampleShape{16, 64, 64}, 32, 1);
  const auto fractions = hardy::core::class_frequencies(source, 32);
  INFO("background " << fractions[0] << ", cyclone " << fractions[1] << ", river " << fractions[2]);
  CHECK(fractions[0] + fractions[1] + fractions[2] == Approx(1.0));
  CHECK(fractions[0] > 0.75);
  CHECK(fractions[0] < 0.93);
  CHECK(fractions[1] > 0.01);
  CHECK(fractions[2] > 0.02);

  // max_samples caps the work; an empty request gives zeros rather than NaN.
  CHECK(hardy::core::class_frequencies(source, 0)[0] == 0.0);
}

TEST_CASE("data: synthetic channels are roughly normalized", "[core]") {
  const SyntheticClimate source(SampleShape{16, 64, 64}, 16, 5);
  const std::size_t plane = 64 * 64;
  std::vector<double> sum(16), sum_squares(16);
  bool all_finite = true;
  for (std::size_t index = 0; index < source.size(); ++index) {
    const Sample sample = load(source, index);
    for (std::size_t c = 0; c < 16; ++c) {
      for (std::size_t p = 0; p < plane; ++p) {
        const double value = sample.fields[c * plane + p];
        all_finite = all_finite && std::isfinite(value);
        sum[c] += value;
        sum_squares[c] += value * value;
      }
    }
  }
  CHECK(all_finite);
  const double count = static_cast<double>(source.size() * plane);
  for (std::size_t c = 0; c < 16; ++c) {
    const double mean = sum[c] / count;
    const double stddev = std::sqrt(sum_squares[c] / count - mean * mean);
    INFO("channel " << hardy::core::kClimateChannelNames[c] << ": mean " << mean << ", std "
                    << stddev);
    CHECK(std::abs(mean) < 0.35);
    CHECK(stddev > 0.6);
    CHECK(stddev < 1.6);
  }
}

TEST_CASE("data: synthetic features show in several channels", "[core]") {
  // Mean of a channel over the pixels of each class: cyclones are low-pressure, moist, rainy and
  // warm aloft; rivers moist with a strong low-level wind.
  const SyntheticClimate source(SampleShape{16, 64, 64}, 24, 11);
  const auto channel = [](std::string_view name) {
    for (std::size_t c = 0; c < 16; ++c)
      if (hardy::core::kClimateChannelNames[c] == name) return c;
    FAIL("no channel " << name);
    return std::size_t{0};
  };
  const std::size_t plane = 64 * 64;
  std::vector<std::array<double, 3>> sums(16), counts(16);
  for (std::size_t index = 0; index < source.size(); ++index) {
    const Sample sample = load(source, index);
    for (std::size_t c = 0; c < 16; ++c) {
      for (std::size_t p = 0; p < plane; ++p) {
        sums[c][sample.labels[p]] += sample.fields[c * plane + p];
        counts[c][sample.labels[p]] += 1;
      }
    }
  }
  auto mean = [&](std::string_view name, int label) {
    const std::size_t c = channel(name);
    return sums[c][label] / counts[c][label];
  };
  for (const char* name : {"TMQ", "PRECT", "T200", "Z200", "QREFHT"}) {
    INFO(name);
    CHECK(mean(name, 1) > mean(name, 0) + 0.5);
  }
  for (const char* name : {"PSL", "PS", "Z1000"}) {
    INFO(name);
    CHECK(mean(name, 1) < mean(name, 0) - 0.5);
  }
  for (const char* name : {"TMQ", "U850", "PRECT"}) {
    INFO(name);
    CHECK(mean(name, 2) > mean(name, 0) + 0.5);
  }
}

TEST_CASE("data: the synthetic generator works on any grid of at least 16x16", "[core]") {
  for (const SampleShape shape : {SampleShape{16, 16, 16}, SampleShape{16, 16, 40},
                                  SampleShape{16, 33, 17}, SampleShape{16, 128, 96}}) {
    INFO(hardy::core::to_string(shape));
    const SyntheticClimate source(shape, 4, 3);
    for (std::size_t index = 0; index < 4; ++index) {
      const Sample sample = load(source, index);
      CHECK(std::all_of(sample.fields.begin(), sample.fields.end(),
                        [](float value) { return std::isfinite(value); }));
      CHECK(std::all_of(sample.labels.begin(), sample.labels.end(),
                        [](std::int32_t label) { return label >= 0 && label < 3; }));
    }
  }

  // Fewer channels: the leading variables of the full sample.
  const Sample full = load(SyntheticClimate(SampleShape{16, 24, 24}, 2, 9), 1);
  const SyntheticClimate four(SampleShape{4, 24, 24}, 2, 9);
  const Sample partial = load(four, 1);
  CHECK(partial.labels == full.labels);
  CHECK(std::memcmp(partial.fields.data(), full.fields.data(), partial.fields.size() * 4) == 0);
  CHECK(four.channel_names() == std::vector<std::string>{"TMQ", "U850", "V850", "UBOT"});

  for (const SampleShape shape : {SampleShape{16, 15, 64}, SampleShape{16, 64, 8},
                                  SampleShape{0, 64, 64}, SampleShape{17, 64, 64}})
    CHECK_THROWS_AS(SyntheticClimate(shape, 4, 3), hardy::InvalidArgument);
}

TEST_CASE("data: load rejects bad indices and buffers", "[core]") {
  const SyntheticClimate source(SampleShape{16, 16, 16}, 2, 1);
  std::vector<float> fields(source.shape().field_elements());
  std::vector<std::int32_t> labels(source.shape().label_elements());
  CHECK_THROWS_AS(source.load(2, fields, labels), hardy::InvalidArgument);
  std::vector<float> short_fields(fields.size() - 1);
  CHECK_THROWS_AS(source.load(0, short_fields, labels), hardy::InvalidArgument);
  CHECK_THAT(source.describe(), Catch::Contains("seed 1") && Catch::Contains("16x16x16"));
}
