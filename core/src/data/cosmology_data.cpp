#include "hardy/core/data/cosmology_data.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "data/portable_math.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::core {
namespace {

using namespace portable;

constexpr int kWaves = 12;
constexpr std::int16_t kMaxCount = 32767;

// The four statistics the targets set (see the header).
struct Cosmology {
  double amplitude, waves_across, mean, growth;
  explicit Cosmology(std::span<const float> t)
      : amplitude(0.6 + 0.4 * t[0]),
        waves_across(3.75 + 2.25 * t[1]),
        mean(1.0 + 0.5 * t[2]),
        growth(0.6 + 0.35 * t[3]) {}
};

// Streams of a sample's random numbers.
enum Stream : std::uint64_t { kTargets = 1, kWaveStream = 2, kNoise = 3 };

}  // namespace

float log1p_count(std::int16_t count) {
  static const std::vector<float> table = [] {
    std::vector<float> values(static_cast<std::size_t>(kMaxCount) + 1);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<float>(log_portable(1.0 + static_cast<double>(i)));
    return values;
  }();
  return table[static_cast<std::size_t>(std::max<std::int16_t>(count, 0))];
}

SyntheticCosmology::SyntheticCosmology(int volume, std::size_t samples, std::uint64_t seed)
    : volume_(volume), samples_(samples), seed_(seed) {
  if (volume < 4)
    throw InvalidArgument(
        fmt::format("synthetic cosmology volume must be at least 4, got {}", volume));
  if (samples == 0) throw InvalidArgument("synthetic cosmology needs at least one sample");
}

SampleShape SyntheticCosmology::shape() const {
  return {.channels = kCosmologyChannels,
          .height = volume_,
          .width = volume_,
          .depth = volume_,
          .targets = kCosmologyTargets};
}

std::string SyntheticCosmology::describe() const {
  return fmt::format("synthetic cosmology {}, {} samples, seed {}", to_string(shape()), samples_,
                     seed_);
}

std::vector<std::string> SyntheticCosmology::channel_names() const {
  // CosmoFlow's four redshifts, the last at z = 0.
  return {"redshift_3", "redshift_2", "redshift_1", "redshift_0"};
}

void SyntheticCosmology::counts(std::size_t index, std::span<std::int16_t> counts_dhwc,
                                std::span<float> targets) const {
  const std::size_t v = static_cast<std::size_t>(volume_);
  if (index >= samples_)
    throw InvalidArgument(
        fmt::format("sample {} requested from {}, which has {}", index, describe(), samples_));
  if (counts_dhwc.size() != v * v * v * kCosmologyChannels ||
      targets.size() != static_cast<std::size_t>(kCosmologyTargets))
    throw InvalidArgument(fmt::format("buffers of {} counts and {} targets given for {}",
                                      counts_dhwc.size(), targets.size(), to_string(shape())));
  Random target_stream(seed_, index, kTargets);
  for (float& t : targets) t = static_cast<float>(target_stream.uniform(-1.0, 1.0));
  const Cosmology cosmology(targets);

  // The waves, e^{i (2 pi k . x / V + phase)} = ex[x] ey[y] ez[z] per axis, phase folded into ex.
  Random wave_stream(seed_, index, kWaveStream);
  std::vector<std::array<double, 2>> ex(kWaves * v), ey(kWaves * v), ez(kWaves * v);
  for (int m = 0; m < kWaves; ++m) {
    std::array<double, 3> direction{};
    double length2 = 0;
    do {
      for (double& d : direction) d = wave_stream.noise();
      length2 =
          direction[0] * direction[0] + direction[1] * direction[1] + direction[2] * direction[2];
    } while (length2 < 1e-6);
    const double k = cosmology.waves_across * wave_stream.uniform(0.7, 1.3) / std::sqrt(length2);
    const double phase = wave_stream.uniform(0.0, 2 * kPi);
    for (std::size_t i = 0; i < v; ++i) {
      const double position = 2 * kPi * (static_cast<double>(i) + 0.5) / static_cast<double>(v);
      auto& [cx, sx] = ex[m * v + i];
      auto& [cy, sy] = ey[m * v + i];
      auto& [cz, sz] = ez[m * v + i];
      sincos_portable(k * direction[0] * position + phase, sx, cx);
      sincos_portable(k * direction[1] * position, sy, cy);
      sincos_portable(k * direction[2] * position, sz, cz);
    }
  }
  const double wave_scale = std::sqrt(2.0 / kWaves);  // unit variance
  std::array<double, kCosmologyChannels> amplitude{};
  for (int c = 0; c < kCosmologyChannels; ++c) {
    amplitude[c] = cosmology.amplitude;
    for (int later = c + 1; later < kCosmologyChannels; ++later) amplitude[c] *= cosmology.growth;
  }
  Random noise(seed_, index, kNoise);
  std::vector<double> field(v);
  for (std::size_t z = 0; z < v; ++z) {
    for (std::size_t y = 0; y < v; ++y) {
      std::fill(field.begin(), field.end(), 0.0);
      for (int m = 0; m < kWaves; ++m) {
        // a = ey * ez; field += Re(a * ex)
        const auto [cy, sy] = ey[m * v + y];
        const auto [cz, sz] = ez[m * v + z];
        const double re = cy * cz - sy * sz, im = cy * sz + sy * cz;
        const auto* row = &ex[m * v];
        for (std::size_t x = 0; x < v; ++x) field[x] += re * row[x][0] - im * row[x][1];
      }
      std::int16_t* out = counts_dhwc.data() + ((z * v + y) * v) * kCosmologyChannels;
      for (std::size_t x = 0; x < v; ++x)
        for (int c = 0; c < kCosmologyChannels; ++c) {
          const double log_density = cosmology.mean + amplitude[c] * wave_scale * field[x] +
                                     0.1 * static_cast<double>(noise.noise());
          const double count = exp_portable(log_density);
          out[x * kCosmologyChannels + c] =
              static_cast<std::int16_t>(std::min<long long>(round_to_integer(count), kMaxCount));
        }
    }
  }
}

void SyntheticCosmology::load(std::size_t index, std::span<float> fields_cdhw,
                              std::span<std::int32_t> target_words) const {
  check_load_arguments(index, fields_cdhw, target_words);
  const std::size_t voxels = static_cast<std::size_t>(volume_) * volume_ * volume_;
  std::vector<std::int16_t> raw(voxels * kCosmologyChannels);
  std::array<float, kCosmologyTargets> targets{};
  counts(index, raw, targets);
  for (std::size_t voxel = 0; voxel < voxels; ++voxel)
    for (int c = 0; c < kCosmologyChannels; ++c)
      fields_cdhw[c * voxels + voxel] = log1p_count(raw[voxel * kCosmologyChannels + c]);
  for (int t = 0; t < kCosmologyTargets; ++t) target_words[t] = target_word(targets[t]);
}

}  // namespace hardy::core
