#pragma once
// The published MLPerf HPC DeepCAM (Gordon Bell 2018 CAM5 segmentation) layout, read in place:
// users hold terabytes of it and do not convert it.
//
//   ROOT/stats.h5       climate/count int64 scalar (training samples the statistics cover);
//                       climate/mean, sqmean, minval, maxval float32 (16): per channel over
//                       every pixel of the training split
//   ROOT/train/, ROOT/validation/, optionally ROOT/test/ (often symlinks; followed)
//     data-YYYY-MM-DD-TT-R.h5  one sample each (TT: 3-hourly step 00..07, R: run), in name order
//       climate/data            float32 (H, W, 16), channel fastest; H x W = 768 x 1152
//       climate/labels_0        float32 (H, W): 0 background, 1 tropical cyclone, 2 atm. river
//       climate/labels_1        float32 (H, W): the same with relaxed thresholds
//       climate/data_stats      float32 (4, 16): mean, max, min, std of each channel
//       climate/labels_0_stats, climate/labels_1_stats  float32 (7, 1): pixels, pixels of class
//                               0, 1, 2, fraction of class 0, 1, 2 (as hardy's generator writes
//                               them; the reader does not use them)
//   Channels, in order: kClimateChannelNames (TMQ, U850, ..., ZBOT). Datasets are contiguous and
//   unfiltered, which lets the reader skip HDF5 when loading (see DeepCamDataset).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/data/sample_files.hpp"

namespace hardy::core {

inline constexpr int kDeepCamChannels = 16;

// Whether root looks like the layout above: a stats.h5 file and a train/ directory.
bool is_deepcam_layout(const std::filesystem::path& root);

struct DeepCamOptions {
  int label_set = 0;            // 0: climate/labels_0, 1: climate/labels_1 (relaxed)
  std::vector<int> channels{};  // indices into the 16 stored channels, in this order; empty = all
  int crop_height = 0, crop_width = 0;  // a window of this size per sample; 0 = the full grid
  int downsample = 1;                   // average fields over K x K blocks (after the crop)
  std::uint64_t seed = 1;               // crop positions
};

// "TMQ,U850,psl" or "0,1,7" (mixed is fine): channel names (case-insensitive, from
// kClimateChannelNames) or indices, comma-separated, each at most once. Throws InvalidArgument
// naming the token that is not a channel or is repeated.
std::vector<int> parse_channel_selection(std::string_view text);

// One split of a DeepCAM dataset as a SampleSource. Fields are normalised per channel by
// stats.h5: (x - minval) / (maxval - minval).
//
// Sample shape: the selected channels x (crop or full H x W) / downsample. The crop window of
// sample i sits at a position that is a pure function of (seed, i), so a resumed or relaunched
// job sees exactly the same data. Downsampling averages fields over K x K blocks and gives each
// block the majority class of its labels, ties going to the rarer (higher) class.
//
// The first file is opened and validated at construction (it defines H and W); every other file
// when it is first loaded: HDF5 checks its datasets once (under a mutex; HDF5 is not reentrant),
// then the reader remembers where climate/data and the labels lie in the file and reads only
// the rows it needs with pread, without HDF5, so any number of threads load in parallel.
//
// Exceptions: InvalidArgument at construction for a dataset that cannot be used as a whole (no
// stats.h5 or a bad one, no or empty split directory, a bad first file, options that do not fit
// the grid). load() throws BadSample (naming the file) for anything wrong with one sample's file:
// missing or mis-shaped datasets, wrong types, chunked or compressed storage, a truncated file,
// non-finite values among the selected channels of the region read, labels outside {0, 1, 2}.
// A bad file is remembered: loading it again throws again at once. The caller decides whether
// that skips the sample or ends the job.
//
// Thread-safety: every const member, load() included, may be called from any number of threads
// at once; set_file_locator() too.
class DeepCamDataset final : public FileSampleSource {
 public:
  // split: "train", "validation" or "test".
  DeepCamDataset(const std::filesystem::path& root, std::string_view split,
                 DeepCamOptions options = {});
  ~DeepCamDataset() override;

  void load(std::size_t index, std::span<float> fields_chw,
            std::span<std::int32_t> labels_hw) const override;
  // "DeepCAM train split of ROOT: 1536 samples of 16x768x1152 (labels_0, crop 384x576, ...)".
  std::string describe() const override;
  std::vector<std::string> channel_names() const override;

  // Sample `index`'s file (files()[index]). Staged (set_file_locator), HDF5 checks the source
  // file and pread reads the copy at the same offsets.
  const std::filesystem::path& file(std::size_t index) const;

 private:
  struct FileLayout;  // where a validated file keeps its datasets, or why it is bad
  FileLayout layout_of(std::size_t index) const;

  std::filesystem::path root_;
  std::string split_;
  DeepCamOptions options_;
  int height_ = 0, width_ = 0;                 // of the stored grid
  std::vector<float> minval_, inverse_range_;  // per stored channel

  InspectedFiles<FileLayout> inspected_;
};

struct DeepCamGenerateOptions {
  std::size_t train = 16, validation = 4, test = 0;  // samples per split
  int height = 768, width = 1152;                    // at least 16 each
  std::uint64_t seed = 1;
};

// Writes a synthetic dataset in the layout above: SyntheticClimate's samples (train first, then
// validation, then test: sample indices 0, 1, ... of one source), the same files for the same
// options. Fields are mapped to plausible physical units per channel (TMQ in kg/m2, pressures in
// Pa, temperatures in K, heights in m, ...) so that normalisation matters; labels_0 are the
// synthetic labels, labels_1 them dilated by one pixel (cyclones win). Files are named by
// consecutive 3-hourly times from 2000-01-01 (run 1) across the splits; stats.h5 covers the
// training files (count = their number). Each file is written under a ".tmp" name and renamed,
// stats.h5 last. Throws InvalidArgument for bad options (no training samples, a grid under 16),
// IoError when a file cannot be written.
void write_deepcam_dataset(const std::filesystem::path& root,
                           const DeepCamGenerateOptions& options);

}  // namespace hardy::core
