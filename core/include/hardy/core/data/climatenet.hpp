#pragma once
// The ClimateNet release (Kashinath et al., 2021, https://doi.org/10.5194/gmd-14-107-2021; files
// at https://portal.nersc.gov/project/ClimateNet/), read in place: expert-labelled CAM5 snapshots
// in netCDF-4 files, which are HDF5 files, so hardy reads them with the HDF5 it links.
//
//   ROOT/train/, ROOT/test/, optionally ROOT/validation/ (often symlinks; followed)
//     *.nc, e.g. data-2003-06-01-01-1.nc   one snapshot each, in name order
//       TMQ, U850, V850, UBOT, VBOT, QREFHT, PS, PSL, T200, T500, PRECT, TS, TREFHT, Z1000,
//       Z200, ZBOT   float32 (time = 1, lat, lon), or (lat, lon); 768 x 1152 in the release
//                    (lat from -90 to 90: row 0 is the south, as stored; lon from 0 to 359.6875)
//       LABELS       integer (time = 1, lat, lon), or (lat, lon): 0 background, 1 tropical
//                    cyclone, 2 atmospheric river
//       lat, lon, time  the netCDF coordinate variables (not read)
//   ROOT/hardy_climatenet_stats.json   the normalisation statistics (below); hardy writes it
// Each variable may have the time axis or not, independently of the others.
//
// Variables may be stored contiguously, chunked or compressed (nccopy -d); a float variable with
// the netCDF attributes scale_factor or add_offset is unpacked with them, and values equal to its
// _FillValue (or, without one, to netCDF's default float fill, which unwritten data reads as)
// are missing.
//
// Normalisation, as ClimateNet's own loader does it: (x - mean) / std per variable, with the mean
// and standard deviation of every pixel of the training split. The statistics file is JSON in the
// shape of ClimateNet's config.json, whose "fields" can be given as they are:
//   {"format": "hardy-climatenet-stats", "split": "train", "files": 219, "skipped_files": [],
//    "fields": {"TMQ": {"mean": 19.2, "std": 15.8}, "U850": {...}, ...}}
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/data/sample_files.hpp"

namespace hardy::core {

inline constexpr int kClimateNetVariables = 16;  // kClimateChannelNames, in ClimateNet's order
inline constexpr std::string_view kClimateNetLabels = "LABELS";
inline constexpr std::string_view kClimateNetStatsFile = "hardy_climatenet_stats.json";

// Whether root looks like the layout above: a train/ directory holding at least one .nc file.
bool is_climatenet_layout(const std::filesystem::path& root);

// The .nc files of ROOT/split, in name order. Throws InvalidArgument when the directory is missing
// or holds none.
std::vector<std::filesystem::path> climatenet_files(const std::filesystem::path& root,
                                                    std::string_view split);

struct ClimateNetStatistic {
  double mean = 0, std = 1;
};

struct ClimateNetStatistics {
  std::map<std::string, ClimateNetStatistic> fields;  // by variable name
  std::size_t files = 0;                              // training files they cover
  std::vector<std::string> skipped_files;             // that could not be read
};

// Reads a statistics file: any JSON object with "fields": {NAME: {"mean": M, "std": S}, ...}
// (hardy's, or ClimateNet's config.json). Throws InvalidArgument naming the file and what is
// wrong: not JSON, no fields, a mean that is not finite, a std that is not positive.
ClimateNetStatistics read_climatenet_statistics(const std::filesystem::path& path);

// Mean and standard deviation of every variable over every pixel of ROOT/train's files, written
// to `out` (default ROOT/kClimateNetStatsFile) under a temporary name and renamed, so readers see
// the whole file or none. A file that cannot be read is left out and named in skipped_files; a
// variable that no file holds is left out of the fields (a set cut down to the variables a model
// takes is fine); a constant variable gets std 1. Returns them. Throws InvalidArgument when no
// file can be read, IoError when `out` cannot be written.
ClimateNetStatistics write_climatenet_statistics(const std::filesystem::path& root,
                                                 const std::filesystem::path& out = {});

struct ClimateNetOptions {
  std::vector<int> channels{};  // indices into kClimateChannelNames, in this order; empty = all
  int crop_height = 0, crop_width = 0;  // a window of this size per sample; 0 = the full grid
  int downsample = 1;                   // average fields over K x K blocks (after the crop)
  std::uint64_t seed = 1;               // crop positions
  // The statistics to normalise with; empty: ROOT/kClimateNetStatsFile, written by
  // write_climatenet_statistics when it does not exist yet.
  std::filesystem::path statistics{};
};

// One split of a ClimateNet dataset as a SampleSource: the selected variables, normalised, and
// LABELS. Crop and downsampling as for the DeepCAM layout (DeepCamDataset): the crop window of
// sample i is a pure function of (seed, i); a K x K block gets the mean of its fields and the
// majority class of its labels, ties going to the rarer (higher) class.
//
// The first file is opened and validated at construction (it defines the grid); every other file
// when it is first loaded.
//
// Exceptions: InvalidArgument at construction for what makes the split unusable as a whole (no
// or empty split directory, statistics that cannot be read or written or lack a selected
// variable, a bad first file, options that do not fit the grid). load() throws BadSample (naming
// the file) for anything wrong with one sample's file: not netCDF-4/HDF5 (a netCDF-3 file is
// named as such), a missing variable, a shape other than the first file's, a type that is not
// float (fields) or a number (labels), missing or non-finite values in the region read, labels
// outside {0, 1, 2}, a truncated file. A bad file is remembered: loading it again throws again at
// once. The caller decides whether that skips the sample or ends the job.
//
// Thread-safety: every const member may be called from any number of threads at once, and
// set_file_locator() too; HDF5 calls are serialized (HDF5's own lock, in a thread-safe build).
class ClimateNetDataset final : public FileSampleSource {
 public:
  // split: "train", "validation" or "test".
  ClimateNetDataset(const std::filesystem::path& root, std::string_view split,
                    ClimateNetOptions options = {});
  ~ClimateNetDataset() override;

  void load(std::size_t index, std::span<float> fields_chw,
            std::span<std::int32_t> labels_hw) const override;
  // "ClimateNet train split of ROOT: 219 samples of 16x768x1152 (normalised by FILE, ...)".
  std::string describe() const override;
  std::vector<std::string> channel_names() const override;
  // 1 or 0: HDF5 reads each sample's file (or its staged copy) and serializes the loads.
  int load_concurrency() const override;

 private:
  struct Sample;  // one file's selected window, as read

  // Reads file `path` (the sample's or its copy) into `sample`; throws InvalidArgument saying
  // what is wrong, without the file's name.
  void read_file(const std::filesystem::path& path, int y0, int x0, Sample& sample) const;

  std::filesystem::path root_;
  std::string split_;
  ClimateNetOptions options_;
  int height_ = 0, width_ = 0;  // of the stored grid
  std::filesystem::path statistics_path_;
  std::vector<double> mean_, inverse_std_;  // per selected channel (double: PS is ~1e5 Pa)

  mutable std::mutex mutex_;              // guards bad_
  mutable std::vector<std::string> bad_;  // why file i is bad; empty: not known to be
};

}  // namespace hardy::core
