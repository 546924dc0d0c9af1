#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/data/batch_assembler.hpp"
#include "hardy/core/data/cosmology_data.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy::core;

namespace {

struct Sample {
  std::vector<float> fields;
  std::array<float, 4> targets{};
};

Sample load(const SyntheticCosmology& source, std::size_t index) {
  Sample s;
  s.fields.resize(source.shape().field_elements());
  std::vector<std::int32_t> words(source.shape().label_elements());
  source.load(index, s.fields, words);
  for (int t = 0; t < 4; ++t) s.targets[t] = target_value(words[t]);
  return s;
}

double channel_mean(const Sample& s, int channel, std::size_t voxels) {
  return std::accumulate(s.fields.begin() + channel * voxels,
                         s.fields.begin() + (channel + 1) * voxels, 0.0) /
         static_cast<double>(voxels);
}

}  // namespace

TEST_CASE("synthetic cosmology: samples are a function of seed and index", "[core]") {
  const SyntheticCosmology a(16, 10, 7), b(16, 20, 7), other(16, 10, 8);
  CHECK(a.shape() ==
        SampleShape{.channels = 4, .height = 16, .width = 16, .depth = 16, .targets = 4});
  CHECK(to_string(a.shape()) == "4x16x16x16 -> 4 targets");
  CHECK(a.shape().label_elements() == 4);
  const Sample first = load(a, 3), again = load(b, 3), elsewhere = load(other, 3);
  CHECK(first.fields == again.fields);
  CHECK(first.targets == again.targets);
  CHECK(first.targets != elsewhere.targets);
  for (float t : first.targets) CHECK((t >= -1 && t <= 1));
  // Fields are log(1 + counts) of whole particle counts.
  std::vector<std::int16_t> counts(16 * 16 * 16 * 4);
  std::array<float, 4> targets{};
  a.counts(3, counts, targets);
  CHECK(targets == first.targets);
  CHECK(first.fields[0] == log1p_count(counts[0]));             // voxel 0, channel 0
  CHECK(first.fields[16 * 16 * 16] == log1p_count(counts[1]));  // voxel 0, channel 1
  CHECK(first.fields[1] == log1p_count(counts[4]));             // voxel 1, channel 0
  CHECK(std::abs(log1p_count(99) - std::log(100.0)) < 1e-6);
  CHECK(std::all_of(counts.begin(), counts.end(), [](std::int16_t c) { return c >= 0; }));
  CHECK_THROWS_AS(load(a, 10), hardy::InvalidArgument);
}

TEST_CASE("synthetic cosmology: each target moves its statistic of the volume", "[core]") {
  // Over 64 samples, the mean log density follows t2 and the last channel's spread (the
  // fluctuations' amplitude at redshift 0) follows t0: a network can learn them back.
  const SyntheticCosmology source(16, 64, 3);
  const std::size_t voxels = 16 * 16 * 16;
  std::vector<double> t0, t2, spread, mean;
  for (std::size_t i = 0; i < source.size(); ++i) {
    const Sample s = load(source, i);
    t0.push_back(s.targets[0]);
    t2.push_back(s.targets[2]);
    const double m = channel_mean(s, 3, voxels);
    double squares = 0;
    for (std::size_t v = 0; v < voxels; ++v) squares += std::pow(s.fields[3 * voxels + v] - m, 2);
    spread.push_back(std::sqrt(squares / voxels));
    mean.push_back(m);
  }
  const auto correlation = [](const std::vector<double>& x, const std::vector<double>& y) {
    const double n = static_cast<double>(x.size());
    const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n;
    const double my = std::accumulate(y.begin(), y.end(), 0.0) / n;
    double sxy = 0, sxx = 0, syy = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      sxy += (x[i] - mx) * (y[i] - my);
      sxx += (x[i] - mx) * (x[i] - mx);
      syy += (y[i] - my) * (y[i] - my);
    }
    return sxy / std::sqrt(sxx * syy);
  };
  INFO("corr(t2, mean) " << correlation(t2, mean) << ", corr(t0, spread) "
                         << correlation(t0, spread));
  CHECK(correlation(t2, mean) > 0.7);
  CHECK(correlation(t0, spread) > 0.7);
}

TEST_CASE("batch assembler: regression targets reach the loss as floats, a bad sample's as NaN",
          "[core]") {
  auto backend = make_backend("cpu");
  const SyntheticCosmology source(8, 4, 1);
  BatchAssembler assembler(*backend, source.shape());
  Tensor fields, targets;
  const std::vector<std::size_t> indices{2, 0};
  assembler.load(source, indices, fields, targets);
  CHECK(fields.dims() == std::vector<std::int64_t>{2, 4, 8, 8, 8});
  CHECK(targets.dims() == std::vector<std::int64_t>{2, 4});
  CHECK(targets.dtype() == DType::f32);
  const Sample second = load(source, 2), first = load(source, 0);
  for (int t = 0; t < 4; ++t) {
    CHECK(targets.f32()[t] == second.targets[t]);
    CHECK(targets.f32()[4 + t] == first.targets[t]);
  }
  // MSE leaves a NaN target out: no loss, no gradient.
  Tensor prediction = Tensor::host({2, 2}, DType::f32, Layout::flat);
  Tensor truth = Tensor::host({2, 2}, DType::f32, Layout::flat);
  Tensor gradient = Tensor::host({2, 2}, DType::f32, Layout::flat);
  std::copy_n(std::array<float, 4>{1, 2, 3, 4}.begin(), 4, prediction.f32().begin());
  std::copy_n(std::array<float, 4>{0, std::numeric_limits<float>::quiet_NaN(), 3, 2}.begin(), 4,
              truth.f32().begin());
  const double loss =
      backend->mse_loss({.prediction = prediction, .target = truth, .grad_scale = 0.5f}, gradient);
  CHECK(loss == 1.0 + 0.0 + 0.0 + 4.0);
  CHECK(gradient.f32()[1] == 0.0f);
  CHECK(gradient.f32()[3] == 2.0f);  // 0.5 * 2 * (4 - 2)
}
