#pragma once
// Samples for climate segmentation: a stack of 2-D atmospheric fields (channels, latitude rows,
// longitude columns) and a per-pixel class label. SampleSource is what the training loop reads
// from; SyntheticClimate makes samples on the fly, Hdf5Dataset (dataset.hpp) reads them from disk.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hardy::core {

struct SampleShape {
  int channels = 16;
  int height = 64;  // latitude rows, north at row 0
  int width = 64;   // longitude columns, periodic

  std::size_t field_elements() const { return static_cast<std::size_t>(channels) * height * width; }
  std::size_t label_elements() const { return static_cast<std::size_t>(height) * width; }
  bool operator==(const SampleShape&) const = default;
};
std::string to_string(const SampleShape& shape);  // "16x64x64"

inline constexpr int kNumClasses = 3;
inline constexpr int kBackground = 0;
inline constexpr int kTropicalCyclone = 1;
inline constexpr int kAtmosphericRiver = 2;
// A pixel that counts for nothing: not in the loss, its gradient or the metrics (the pixels of a
// sample skipped under --bad-samples skip).
inline constexpr std::int32_t kIgnoreLabel = -1;
inline constexpr std::array<std::string_view, kNumClasses> kClassNames = {
    "background", "tropical_cyclone", "atmospheric_river"};

// The variables of the CAM5 runs behind ClimateNet, in its order; SyntheticClimate imitates them.
inline constexpr std::array<std::string_view, 16> kClimateChannelNames = {
    "TMQ",  "U850", "V850",  "UBOT", "VBOT",   "QREFHT", "PS",   "PSL",
    "T200", "T500", "PRECT", "TS",   "TREFHT", "Z1000",  "Z200", "ZBOT"};

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual std::size_t size() const = 0;
  virtual SampleShape shape() const = 0;
  // Writes sample `index`: fields in (C, H, W) order, labels (H, W) in [0, kNumClasses).
  // Throws InvalidArgument for an index >= size() or spans of the wrong size.
  virtual void load(std::size_t index, std::span<float> fields_chw,
                    std::span<std::int32_t> labels_hw) const = 0;
  // One line for logs and provenance, e.g. "synthetic climate 16x64x64, 1000 samples, seed 7".
  virtual std::string describe() const = 0;
  // One name per channel; "channel_0", ... unless the source knows better.
  virtual std::vector<std::string> channel_names() const;
  // How many threads may be inside load() at once and actually overlap: 0 when only the thread
  // that owns the source may call it, 1 when any one thread at a time may (a library lock
  // serializes them anyway), more when loads run in parallel.
  virtual int load_concurrency() const { return 0; }

 protected:
  void check_load_arguments(std::size_t index, std::span<float> fields_chw,
                            std::span<std::int32_t> labels_hw) const;
};

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
