#pragma once
// SyntheticCosmology: CosmoFlow-like samples made on the fly (`hardy train --model cosmoflow
// --synthetic`, `hardy data generate --format cosmoflow`), for tests, benchmarks and jobs without
// the published data.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hardy/core/data/sample_source.hpp"

namespace hardy::core {

// MLPerf HPC CosmoFlow's sample: 4 redshifts of a dark-matter particle-count volume, stored as
// int16 counts (D, H, W, 4) channels last, fed to the network as log(1 + counts); the targets
// are the 4 cosmological parameters of the simulation scaled to [-1, 1].
inline constexpr int kCosmologyChannels = 4;
inline constexpr int kCosmologyTargets = 4;

// Sample i is a pure function of (seed, i), identical on every platform (portable arithmetic,
// its own random numbers). Its targets t are uniform in [-1, 1]^4, and each sets one statistic
// of the volume, so that a network can learn them back:
//   t0: the amplitude of the log-density fluctuations (0.2 to 1.0);
//   t1: their scale (1.5 to 6 waves across the box: smoother or rougher);
//   t2: the mean log density (0.5 to 1.5: a few particles per voxel; at 3 to 5, nearer the
//       published data, CosmoFlow's unnormalized network saturates its tanh at Adam's usual
//       rates from the first steps);
//   t3: the growth between redshifts (each earlier channel's fluctuations 0.25 to 0.95 times
//       the next one's, as structure grows towards redshift 0 in channel 3).
// The log density is a sum of 12 random plane waves (the same for all four channels), plus
// per-voxel noise; counts are exp of it, rounded and capped at int16's maximum. `volume` is the
// edge of the cube (CosmoFlow's 128; smaller for tests).
class SyntheticCosmology final : public SampleSource {
 public:
  SyntheticCosmology(int volume, std::size_t samples, std::uint64_t seed);

  std::size_t size() const override { return samples_; }
  SampleShape shape() const override;
  // fields (C, D, H, W) = log(1 + counts); label words: the targets' bits (target_word).
  void load(std::size_t index, std::span<float> fields_cdhw,
            std::span<std::int32_t> target_words) const override;
  std::string describe() const override;
  std::vector<std::string> channel_names() const override;
  int load_concurrency() const override { return 1 << 20; }

  // The sample as the published files hold it: counts (D, H, W, C) and the targets.
  void counts(std::size_t index, std::span<std::int16_t> counts_dhwc,
              std::span<float> targets) const;
  std::uint64_t seed() const { return seed_; }

 private:
  int volume_;
  std::size_t samples_;
  std::uint64_t seed_;
};

// CosmoFlow's input transform of a particle count: log(1 + count), the same bits everywhere.
float log1p_count(std::int16_t count);

}  // namespace hardy::core
