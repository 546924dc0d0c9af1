#include "hardy/core/data/climatenet.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>

#include "hardy/core/data/dataset.hpp"  // kMaxSampleBytes
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/hdf5.hpp"
#include "hardy/core/support/random.hpp"
#include "sample_window.hpp"

namespace hardy::core {
namespace fs = std::filesystem;

namespace {

// What netCDF reads back for float data never written (NC_FILL_FLOAT), when a variable names no
// _FillValue of its own.
constexpr float kNetcdfFillFloat = 9.9692099683868690e+36f;

std::string quoted(const fs::path& path) { return fmt::format("'{}'", path.string()); }

// netCDF's classic formats (CDF-1, -2, -5) start with "CDF" and a version byte; they are not HDF5.
bool is_netcdf3(const fs::path& path) {
  std::ifstream stream(path, std::ios::binary);
  char magic[4] = {};
  stream.read(magic, 4);
  return stream && magic[0] == 'C' && magic[1] == 'D' && magic[2] == 'F' &&
         (magic[3] == 1 || magic[3] == 2 || magic[3] == 5);
}

// The grid of a file's variables, each stored as (time = 1, lat, lon) or (lat, lon).
struct Grid {
  int height = 0, width = 0;
};

enum class Kind { field, labels };

// Opens variable `name` and checks it against `grid` (learning the grid when its height is 0,
// bounded so that no claimed shape makes anyone allocate more than kMaxSampleBytes): shape, type
// class, and that the file stores its data. Throws InvalidArgument saying what is wrong.
h5::Handle open_variable(h5::Id file, std::string_view name, Kind kind, Grid& grid) {
  if (!h5::exists(file, name)) throw InvalidArgument(fmt::format("has no variable {}", name));
  h5::Handle dataset = h5::open_dataset(file, name);
  const std::vector<h5::Extent> dims = h5::dataset_dims(dataset.id());
  const bool time_axis = dims.size() == 3;
  if ((dims.size() != 2 && dims.size() != 3) || (time_axis && dims[0] != 1)) {
    if (time_axis && dims[0] > 1)
      throw InvalidArgument(fmt::format(
          "holds {} time steps of {}; hardy reads files of one snapshot each, as ClimateNet "
          "publishes them",
          dims[0], name));
    throw InvalidArgument(fmt::format("has {} of shape ({}); expected (time = 1, lat, lon)", name,
                                      fmt::join(dims, ", ")));
  }
  const h5::Extent H = dims[dims.size() - 2], W = dims[dims.size() - 1];
  if (grid.height == 0) {
    if (H == 0 || W == 0 || H > (1u << 20) || W > (1u << 20))
      throw InvalidArgument(fmt::format("has {} of shape ({}); expected (time = 1, lat, lon)", name,
                                        fmt::join(dims, ", ")));
    if (H * W * kClimateNetVariables * sizeof(float) > kMaxSampleBytes)
      throw InvalidArgument(
          fmt::format("has a grid of {} x {}: {} variables of it exceed hardy's {} GiB a sample", H,
                      W, kClimateNetVariables, kMaxSampleBytes >> 30));
    grid = {static_cast<int>(H), static_cast<int>(W)};
  } else if (H != static_cast<h5::Extent>(grid.height) ||
             W != static_cast<h5::Extent>(grid.width)) {
    throw InvalidArgument(fmt::format("has {} of shape ({}); the dataset's grid is {} x {}", name,
                                      fmt::join(dims, ", "), grid.height, grid.width));
  }
  const h5::TypeClass type = h5::dataset_type_class(dataset.id());
  if (kind == Kind::field && type != h5::TypeClass::floating_point)
    throw InvalidArgument(fmt::format(
        "stores {} as {}; hardy reads floating-point variables, as ClimateNet publishes them", name,
        type == h5::TypeClass::integer ? "integers (packed)" : "something other than numbers"));
  if (kind == Kind::labels && type != h5::TypeClass::integer &&
      type != h5::TypeClass::floating_point)
    throw InvalidArgument(fmt::format("stores {} as something other than numbers", name));
  // A shape is a claim until the bytes are there: HDF5 reads data never written as fill values.
  // Chunked (and compressed) data must have every chunk; contiguous data all its bytes.
  const std::string what(name);
  const h5::StoredData stored = h5::stored_data(dataset.id());
  h5::Handle properties{H5Dget_create_plist(dataset.id()), "H5Dget_create_plist", what};
  bool complete = stored.bytes >= H * W * stored.element_bytes;
  if (H5Pget_layout(properties.id()) == H5D_CHUNKED) {
    std::vector<hsize_t> chunk(dims.size());
    h5::check(H5Pget_chunk(properties.id(), static_cast<int>(chunk.size()), chunk.data()),
              "H5Pget_chunk", what);
    hsize_t expected = 1, written = 0;
    for (std::size_t d = 0; d < dims.size(); ++d)
      expected *= (dims[d] + chunk[d] - 1) / std::max<hsize_t>(chunk[d], 1);
    h5::Handle space{H5Dget_space(dataset.id()), "H5Dget_space", what};
    h5::check(H5Dget_num_chunks(dataset.id(), space.id(), &written), "H5Dget_num_chunks", what);
    complete = written >= expected;
  }
  if (!complete)
    throw InvalidArgument(
        fmt::format("stores only {} bytes of {} ({} x {} values): the file is truncated or the "
                    "variable was never completely written",
                    stored.bytes, name, H, W));
  return dataset;
}

// A numeric attribute of one value, or `otherwise` when there is none.
double attribute_or(h5::Id object, const char* name, double otherwise) {
  return h5::has_attribute(object, name) ? h5::read_attribute<double>(object, name) : otherwise;
}

// Rows [y0, y0 + h) and columns [x0, x0 + w) of a variable that open_variable checked, converted
// by HDF5 to memory_type.
void read_window(h5::Id dataset, int y0, int x0, int h, int w, h5::Id memory_type, void* out) {
  const std::string what = "a ClimateNet variable";
  h5::Handle file_space{H5Dget_space(dataset), "H5Dget_space", what};
  std::vector<hsize_t> start = {static_cast<hsize_t>(y0), static_cast<hsize_t>(x0)};
  std::vector<hsize_t> count = {static_cast<hsize_t>(h), static_cast<hsize_t>(w)};
  if (H5Sget_simple_extent_ndims(file_space.id()) == 3) {  // (time = 1, lat, lon)
    start.insert(start.begin(), 0);
    count.insert(count.begin(), 1);
  }
  h5::check(H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, start.data(), nullptr,
                                count.data(), nullptr),
            "H5Sselect_hyperslab", what);
  const hsize_t values = static_cast<hsize_t>(h) * static_cast<hsize_t>(w);
  h5::Handle memory_space{H5Screate_simple(1, &values, nullptr), "H5Screate_simple", what};
  h5::check(H5Dread(dataset, memory_type, memory_space.id(), file_space.id(), H5P_DEFAULT, out),
            "H5Dread", what);
}

// A field's window as values in its own units: unpacked by scale_factor and add_offset, and
// checked for missing (_FillValue) and non-finite values. Throws InvalidArgument.
void read_field(h5::Id file, std::string_view name, Grid grid, int y0, int x0, int h, int w,
                float* out) {
  h5::Handle dataset = open_variable(file, name, Kind::field, grid);
  const double scale = attribute_or(dataset.id(), "scale_factor", 1.0);
  const double offset = attribute_or(dataset.id(), "add_offset", 0.0);
  const auto fill = static_cast<float>(attribute_or(dataset.id(), "_FillValue", kNetcdfFillFloat));
  read_window(dataset.id(), y0, x0, h, w, H5T_NATIVE_FLOAT, out);
  const std::size_t values = static_cast<std::size_t>(h) * static_cast<std::size_t>(w);
  for (std::size_t i = 0; i < values; ++i) {
    if (out[i] == fill)
      throw InvalidArgument(
          fmt::format("has a missing value (_FillValue) of {} at row {}, column {}", name,
                      y0 + static_cast<int>(i / w), x0 + static_cast<int>(i % w)));
    if (scale != 1.0 || offset != 0.0) out[i] = static_cast<float>(out[i] * scale + offset);
    if (!std::isfinite(out[i]))
      throw InvalidArgument(fmt::format("has a non-finite value of {} at row {}, column {}", name,
                                        y0 + static_cast<int>(i / w),
                                        x0 + static_cast<int>(i % w)));
  }
}

// This layout's crop positions: "climnet1", apart from the sampler's and the other layout's.
constexpr std::uint64_t kCropStream = 0x636c696d6e657431ULL;

// Writes text to path under a temporary name of this process's own and renames it. Not
// core::write_atomically: every rank of a job that starts without the statistics computes and
// writes them at once, and that one's fixed ".tmp" name would let them overwrite each other's.
void write_file_atomically(const fs::path& path, const std::string& text) {
  const fs::path temporary = fmt::format("{}.tmp.{}", path.string(), ::getpid());
  {
    std::ofstream stream(temporary);
    stream << text;
    stream.close();
    if (!stream) {
      std::error_code ignored;
      fs::remove(temporary, ignored);
      throw IoError(fmt::format("cannot write {}", quoted(temporary)));
    }
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw IoError(fmt::format("cannot rename {} to {}: {}", quoted(temporary), quoted(path),
                              error.message()));
  }
}

}  // namespace

bool is_climatenet_layout(const fs::path& root) {
  std::error_code error;
  if (!fs::is_directory(root / "train", error)) return false;
  for (const fs::directory_entry& entry : fs::directory_iterator(root / "train", error))
    if (entry.path().extension() == ".nc") return true;
  return false;
}

std::vector<fs::path> climatenet_files(const fs::path& root, std::string_view split) {
  return split_files("ClimateNet", root / split, ".nc");
}

// ---- statistics ----

ClimateNetStatistics read_climatenet_statistics(const fs::path& path) {
  auto bad = [&](const std::string& what) {
    return InvalidArgument(fmt::format("normalisation statistics {}: {}", quoted(path), what));
  };
  std::ifstream stream(path);
  if (!stream) throw bad("cannot be read");
  const nlohmann::json json = nlohmann::json::parse(stream, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) throw bad("is not JSON");
  if (!json.is_object() || !json.contains("fields") || !json["fields"].is_object())
    throw bad(R"(has no "fields" object ({"fields": {"TMQ": {"mean": M, "std": S}, ...}}))");
  ClimateNetStatistics statistics;
  for (const auto& [name, entry] : json["fields"].items()) {
    if (!entry.is_object() || !entry.contains("mean") || !entry["mean"].is_number() ||
        !entry.contains("std") || !entry["std"].is_number())
      throw bad(fmt::format("field {} has no numbers \"mean\" and \"std\"", name));
    const double mean = entry["mean"].get<double>(), std = entry["std"].get<double>();
    if (!std::isfinite(mean) || !std::isfinite(std) || !(std > 0) || !std::isfinite(1.0 / std))
      throw bad(fmt::format(
          "field {} has mean {} and std {}; normalisation needs a finite mean and std > 0", name,
          mean, std));
    statistics.fields[name] = {mean, std};
  }
  if (json.contains("files") && json["files"].is_number_unsigned())
    statistics.files = json["files"].get<std::size_t>();
  if (json.contains("skipped_files") && json["skipped_files"].is_array())
    for (const auto& name : json["skipped_files"])
      if (name.is_string()) statistics.skipped_files.push_back(name.get<std::string>());
  return statistics;
}

ClimateNetStatistics write_climatenet_statistics(const fs::path& root, const fs::path& out) {
  const std::vector<fs::path> files = climatenet_files(root, "train");
  // Per variable, over the files read so far: pixels, mean and the sum of squared deviations,
  // each file's combined with Chan et al.'s pairwise update (no cancellation for PS ~ 1e5 Pa).
  // A variable no file holds is left out of the statistics (a dataset cut down to the variables
  // a model takes is fine); one that a file holds but cannot be read leaves the file out.
  std::array<double, kClimateNetVariables> count{}, mean{}, m2{};
  ClimateNetStatistics statistics;
  Grid grid;
  std::vector<float> values;
  for (const fs::path& path : files) {
    std::array<double, kClimateNetVariables> file_mean{}, file_m2{};
    std::array<bool, kClimateNetVariables> present{};
    std::size_t pixels = 0;
    try {
      if (!h5::is_hdf5_file(path))
        throw InvalidArgument(is_netcdf3(path) ? "is a netCDF-3 (classic) file, not netCDF-4"
                                               : "is not a netCDF-4 (HDF5) file");
      h5::Handle file = h5::open_file(path);
      Grid file_grid = grid;
      open_variable(file.id(), kClimateNetLabels, Kind::labels, file_grid);
      pixels = static_cast<std::size_t>(file_grid.height) * file_grid.width;
      values.resize(pixels);
      for (int c = 0; c < kClimateNetVariables; ++c) {
        if (!h5::exists(file.id(), kClimateChannelNames[c])) continue;
        present[c] = true;
        read_field(file.id(), kClimateChannelNames[c], file_grid, 0, 0, file_grid.height,
                   file_grid.width, values.data());
        double sum = 0;
        for (float v : values) sum += v;
        file_mean[c] = sum / static_cast<double>(pixels);
        double squares = 0;
        for (float v : values) squares += (v - file_mean[c]) * (v - file_mean[c]);
        file_m2[c] = squares;
      }
      grid = file_grid;  // the first readable file sets the grid for the rest
    } catch (const Error& error) {
      statistics.skipped_files.push_back(
          fmt::format("{}: {}", path.filename().string(), error.what()));
      continue;
    }
    for (int c = 0; c < kClimateNetVariables; ++c) {
      if (!present[c]) continue;
      const double n = static_cast<double>(pixels), total = count[c] + n;
      const double delta = file_mean[c] - mean[c];
      mean[c] += delta * n / total;
      m2[c] += file_m2[c] + delta * delta * count[c] * n / total;
      count[c] = total;
    }
    ++statistics.files;
  }
  if (statistics.files == 0)
    throw InvalidArgument(fmt::format(
        "none of the {} training files of {} could be read to compute normalisation statistics; "
        "the first: {}",
        files.size(), quoted(root), statistics.skipped_files.front()));
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
  for (int c = 0; c < kClimateNetVariables; ++c) {
    if (count[c] == 0) continue;
    const double std = std::sqrt(m2[c] / count[c]);
    // A constant variable carries nothing; std 1 keeps its normalised value at 0.
    const ClimateNetStatistic statistic{mean[c], std > 0 && std::isfinite(1.0 / std) ? std : 1.0};
    statistics.fields[std::string(kClimateChannelNames[c])] = statistic;
    fields[std::string(kClimateChannelNames[c])] = {{"mean", statistic.mean},
                                                    {"std", statistic.std}};
  }
  const nlohmann::ordered_json json = {{"format", "hardy-climatenet-stats"},
                                       {"split", "train"},
                                       {"files", statistics.files},
                                       {"skipped_files", statistics.skipped_files},
                                       {"fields", fields}};
  write_file_atomically(out.empty() ? root / kClimateNetStatsFile : out, json.dump(2) + "\n");
  return statistics;
}

// ---- the reader ----

struct ClimateNetDataset::Sample {
  std::vector<float> fields;   // (selected channels, crop height, crop width), in their units
  std::vector<double> labels;  // (crop height, crop width), as stored
};

ClimateNetDataset::ClimateNetDataset(const fs::path& root, std::string_view split,
                                     ClimateNetOptions options)
    : root_(root), split_(split), options_(std::move(options)) {
  check_split_name("ClimateNet", split_);
  options_.channels = selected_channels("ClimateNet", "variable", std::move(options_.channels),
                                        kClimateNetVariables);
  check_window_options(options_.crop_height, options_.crop_width, options_.downsample);
  files_ = climatenet_files(root, split_);
  bad_.resize(files_.size());

  // Normalisation: the given file, else the one beside the data, computed over train/ once.
  statistics_path_ =
      options_.statistics.empty() ? root / kClimateNetStatsFile : options_.statistics;
  if (options_.statistics.empty() && !fs::exists(statistics_path_)) {
    try {
      write_climatenet_statistics(root, statistics_path_);
    } catch (const IoError& error) {
      throw InvalidArgument(fmt::format(
          "cannot keep normalisation statistics beside the data ({}); write them elsewhere with "
          "`hardy data stats --dataset {} --out FILE` and give --normalization FILE",
          error.what(), root.string()));
    }
  }
  const ClimateNetStatistics statistics = read_climatenet_statistics(statistics_path_);
  std::vector<std::string> missing;
  for (int c : options_.channels) {
    const auto found = statistics.fields.find(std::string(kClimateChannelNames[c]));
    if (found == statistics.fields.end()) {
      missing.emplace_back(kClimateChannelNames[c]);
      continue;
    }
    mean_.push_back(found->second.mean);
    inverse_std_.push_back(1.0 / found->second.std);
  }
  if (!missing.empty()) {
    // Not std::views::keys: clang (the sanitizer builds) rejects it over libstdc++ 12's map.
    std::vector<std::string> covered;
    for (const auto& [name, statistic] : statistics.fields) covered.push_back(name);
    throw InvalidArgument(fmt::format(
        "normalisation statistics {} have no mean and std for {}; choose variables they cover "
        "with --channels ({})",
        quoted(statistics_path_), fmt::join(missing, ", "), fmt::join(covered, ",")));
  }

  Grid grid;
  try {
    if (!h5::is_hdf5_file(files_[0]))
      throw InvalidArgument(is_netcdf3(files_[0]) ? "is a netCDF-3 (classic) file, not netCDF-4"
                                                  : "is not a netCDF-4 (HDF5) file");
    h5::Handle file = h5::open_file(files_[0]);
    open_variable(file.id(), kClimateNetLabels, Kind::labels, grid);
    for (int c : options_.channels)
      open_variable(file.id(), kClimateChannelNames[c], Kind::field, grid);
  } catch (const Error& error) {
    throw InvalidArgument(fmt::format("{}: {}", quoted(files_[0]), error.what()));
  }
  height_ = grid.height;
  width_ = grid.width;

  shape_ = windowed_shape("ClimateNet", static_cast<int>(options_.channels.size()), height_, width_,
                          options_.crop_height, options_.crop_width, options_.downsample);
}

ClimateNetDataset::~ClimateNetDataset() = default;

int ClimateNetDataset::load_concurrency() const {
  // HDF5 serializes its calls when built thread-safe; otherwise only the owning thread may load.
  return h5::library_is_thread_safe() ? 1 : 0;
}

void ClimateNetDataset::read_file(const fs::path& path, int y0, int x0, Sample& sample) const {
  if (!h5::is_hdf5_file(path))
    throw InvalidArgument(is_netcdf3(path) ? "is a netCDF-3 (classic) file, not netCDF-4"
                                           : "is not a netCDF-4 (HDF5) file");
  const int K = options_.downsample;
  const int h = shape_.height * K, w = shape_.width * K;
  const std::size_t plane = static_cast<std::size_t>(h) * static_cast<std::size_t>(w);
  h5::Handle file = h5::open_file(path);
  Grid grid{height_, width_};
  sample.fields.resize(options_.channels.size() * plane);
  sample.labels.resize(plane);
  for (std::size_t k = 0; k < options_.channels.size(); ++k)
    read_field(file.id(), kClimateChannelNames[options_.channels[k]], grid, y0, x0, h, w,
               sample.fields.data() + k * plane);
  h5::Handle labels = open_variable(file.id(), kClimateNetLabels, Kind::labels, grid);
  read_window(labels.id(), y0, x0, h, w, H5T_NATIVE_DOUBLE, sample.labels.data());
  for (std::size_t i = 0; i < plane; ++i) {
    const double label = sample.labels[i];
    if (label != 0.0 && label != 1.0 && label != 2.0)
      throw InvalidArgument(fmt::format(
          "has label {} at row {}, column {} of {}; classes are 0, "
          "1 and 2",
          label, y0 + static_cast<int>(i / w), x0 + static_cast<int>(i % w), kClimateNetLabels));
  }
}

void ClimateNetDataset::load(std::size_t index, std::span<float> fields_chw,
                             std::span<std::int32_t> labels_hw) const {
  check_load_arguments(index, fields_chw, labels_hw);
  const fs::path& source = files_[index];
  {
    const std::lock_guard lock(mutex_);
    if (!bad_[index].empty()) throw BadSample(index, source.string(), bad_[index]);
  }
  const auto [path, copy_note] = location_.of(source);
  const int K = options_.downsample;
  const int h = shape_.height * K, w = shape_.width * K;
  const auto [y0, x0] = options_.crop_height
                            ? crop_origin(kCropStream, options_.seed, index, height_, width_, h, w)
                            : std::pair{0, 0};
  thread_local Sample sample;
  try {
    read_file(path, y0, x0, sample);
  } catch (const Error& error) {
    // Remembered, so that the next load of this file fails at once.
    std::string reason = error.what();
    reason += copy_note;
    {
      const std::lock_guard lock(mutex_);
      bad_[index] = reason;
    }
    throw BadSample(index, source.string(), reason);
  }

  const std::size_t channels = options_.channels.size(), in_plane = static_cast<std::size_t>(h) * w;
  const std::size_t out_width = static_cast<std::size_t>(shape_.width);
  const std::size_t out_plane = static_cast<std::size_t>(shape_.height) * out_width;
  const double block_mean = 1.0 / (K * K);
  for (std::size_t oy = 0; oy < static_cast<std::size_t>(shape_.height); ++oy)
    for (std::size_t ox = 0; ox < out_width; ++ox) {
      for (std::size_t c = 0; c < channels; ++c) {
        const float* plane = sample.fields.data() + c * in_plane;
        double sum = 0;
        for (int dy = 0; dy < K; ++dy)
          for (int dx = 0; dx < K; ++dx) sum += plane[(oy * K + dy) * w + ox * K + dx];
        fields_chw[c * out_plane + oy * out_width + ox] =
            static_cast<float>((sum * block_mean - mean_[c]) * inverse_std_[c]);
      }
      std::array<int, kNumClasses> votes{};
      for (int dy = 0; dy < K; ++dy)
        for (int dx = 0; dx < K; ++dx)
          ++votes[static_cast<int>(sample.labels[(oy * K + dy) * w + ox * K + dx])];
      labels_hw[oy * out_width + ox] = majority_class(votes);
    }
}

std::string ClimateNetDataset::describe() const {
  const std::string details =
      fmt::format("normalised by {}", statistics_path_.string()) +
      window_details("variables", options_.channels, kClimateNetVariables, options_.crop_height,
                     options_.crop_width, options_.downsample, shape_, height_, width_);
  return fmt::format("ClimateNet {} split of {}: {} samples of {}x{}x{} ({})", split_,
                     quoted(root_), files_.size(), kClimateNetVariables, height_, width_, details);
}

std::vector<std::string> ClimateNetDataset::channel_names() const {
  return climate_channel_names(options_.channels);
}

}  // namespace hardy::core
