#pragma once
// SyntheticClimate: climate-like samples made on the fly, for tests, benchmarks and jobs without
// a dataset (`--data synthetic`), and class_frequencies over any SampleSource.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hardy/core/data/sample_source.hpp"

namespace hardy::core {

// The variables of the CAM5 runs behind ClimateNet, in its order; SyntheticClimate imitates them.
inline constexpr std::array<std::string_view, 16> kClimateChannelNames = {
    "TMQ",  "U850", "V850",  "UBOT", "VBOT",   "QREFHT", "PS",   "PSL",
    "T200", "T500", "PRECT", "TS",   "TREFHT", "Z1000",  "Z200", "ZBOT"};

// Climate-like samples made on the fly. Sample i is a pure function of (seed, i): it does not
// depend on the number of samples, on which thread or rank makes it, on the platform or on the
// compiler (the generator uses its own random numbers and transcendental functions, never the
// implementation-defined std:: distributions or libm). The grid resolution changes only the
// sampling: features keep their size relative to min(height, width), which must be >= 16.
//
// Each sample has smooth large-scale background fields (latitude structure, random planetary
// waves, a topography fixed per seed), 0-3 tropical cyclones (label 1: warm-core lows with
// rotating winds, a moist core and spiral rain bands), 0-2 atmospheric rivers (label 2: long
// narrow curved filaments of water vapour carried by a low-level jet; cyclones win where they
// overlap), plus unlabelled look-alikes (weak lows, round moisture plumes) and pixel noise, so
// that no single channel threshold finds the labels. Channels are roughly zero-mean and of unit
// variance. With channels < 16 the first `channels` variables are produced.
//
// load() is const and thread-safe.
class SyntheticClimate final : public SampleSource {
 public:
  SyntheticClimate(SampleShape shape, std::size_t samples, std::uint64_t seed);

  std::size_t size() const override { return samples_; }
  SampleShape shape() const override { return shape_; }
  void load(std::size_t index, std::span<float> fields_chw,
            std::span<std::int32_t> labels_hw) const override;
  std::string describe() const override;
  std::vector<std::string> channel_names() const override;
  int load_concurrency() const override { return 1 << 20; }
  std::uint64_t seed() const { return seed_; }

 private:
  SampleShape shape_;
  std::size_t samples_;
  std::uint64_t seed_;
  std::vector<float> elevation_;  // (H, W), the same for every sample of this seed
};

// Fraction of pixels of each class over the first min(size(), max_samples) samples; the input to
// class-balancing loss weights. Samples that cannot be read (BadSample) are left out: the training
// step meets them again and applies the job's --bad-samples policy.
std::array<double, kNumClasses> class_frequencies(const SampleSource& source,
                                                  std::size_t max_samples);

}  // namespace hardy::core
