#include "hardy/core/data/deepcam.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hdf5.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>

#include "file_reads.hpp"
#include "hardy/core/data/dataset.hpp"  // kMaxSampleBytes
#include "hardy/core/support/atomic_file.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/hdf5.hpp"
#include "hardy/core/support/random.hpp"
#include "sample_window.hpp"

namespace hardy::core {
namespace fs = std::filesystem;

// pread hands back the file's bytes as they are: float32 little-endian in memory too.
static_assert(std::endian::native == std::endian::little,
              "the DeepCAM reader reads little-endian float32 straight into memory");

namespace {

constexpr std::size_t kPixelBytes = kDeepCamChannels * sizeof(float);

std::string quoted(const fs::path& path) { return fmt::format("'{}'", path.string()); }

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  return text;
}

// ---- validating files through HDF5 (callers hold the dataset's mutex) ----

// The dataset's raw type is exactly what pread copies into floats.
bool is_float32_le(h5::Id dataset) {
  h5::Handle type{H5Dget_type(dataset), "H5Dget_type", "a DeepCAM dataset"};
  return h5::check(H5Tequal(type.id(), H5T_IEEE_F32LE), "H5Tequal", "a DeepCAM dataset") > 0;
}

// Opens `name` in file, checks that it is a float32 array of `dims` stored contiguously and
// unfiltered with all its bytes inside the file, and returns its offset in the file.
// Throws InvalidArgument saying what is wrong.
std::uint64_t contiguous_offset(h5::Id file, std::string_view name,
                                const std::vector<h5::Extent>& dims, std::uint64_t file_bytes) {
  if (!h5::exists(file, name)) throw InvalidArgument(fmt::format("has no dataset {}", name));
  h5::Handle dataset = h5::open_dataset(file, name);
  const std::vector<h5::Extent> found = h5::dataset_dims(dataset.id());
  if (found != dims)
    throw InvalidArgument(fmt::format("has {} of shape ({}); expected ({})", name,
                                      fmt::join(found, ", "), fmt::join(dims, ", ")));
  if (!is_float32_le(dataset.id()))
    throw InvalidArgument(fmt::format("has {} of a type other than little-endian float32", name));
  h5::Handle properties{H5Dget_create_plist(dataset.id()), "H5Dget_create_plist",
                        std::string(name)};
  const H5D_layout_t layout = H5Pget_layout(properties.id());
  const int filters =
      h5::check(H5Pget_nfilters(properties.id()), "H5Pget_nfilters", std::string(name));
  if (layout != H5D_CONTIGUOUS || filters != 0)
    throw InvalidArgument(fmt::format(
        "stores {} {}; the DeepCAM reader reads contiguous, unfiltered datasets (as published)",
        name, layout != H5D_CONTIGUOUS ? "chunked or compact" : "compressed or filtered"));
  std::uint64_t bytes = sizeof(float);
  for (h5::Extent extent : dims) bytes *= extent;  // bounded by the caller
  const haddr_t offset = H5Dget_offset(dataset.id());
  const std::uint64_t stored = H5Dget_storage_size(dataset.id());
  h5::take_error_stack();  // H5Dget_offset leaves one behind for data never written
  if (offset == HADDR_UNDEF || stored < bytes)
    throw InvalidArgument(
        fmt::format("stores only {} of the {} bytes of {}: it was never "
                    "completely written",
                    offset == HADDR_UNDEF ? 0 : stored, bytes, name));
  if (offset > file_bytes || file_bytes - offset < bytes)
    throw InvalidArgument(fmt::format("is truncated: {} needs bytes [{}, {}) but the file has {}",
                                      name, offset, offset + bytes, file_bytes));
  return offset;
}

}  // namespace

struct DeepCamDataset::FileLayout {
  std::string bad_reason;  // empty: the file is good
  std::uint64_t data_offset = 0, labels_offset = 0;
  int height = 0, width = 0;
};

namespace {

// Checks one sample file through HDF5. height, width: those of the first file, or 0 to learn
// them (bounded so that no claimed shape makes anyone allocate more than kMaxSampleBytes).
// Throws InvalidArgument (or IoError from HDF5) saying what is wrong, without the file's name.
template <class Layout>
Layout inspect_sample_file(const fs::path& path, int label_set, int height, int width) {
  const h5::Exclusive exclusive;  // on loader threads, beside the writers' HDF5 calls
  std::error_code error;
  const std::uint64_t file_bytes = fs::file_size(path, error);
  if (error) throw InvalidArgument(fmt::format("cannot be read: {}", error.message()));
  if (!h5::is_hdf5_file(path)) throw InvalidArgument("is not an HDF5 file");
  h5::Handle file = h5::open_file(path);
  Layout layout;
  if (height == 0) {
    if (!h5::exists(file.id(), "climate/data"))
      throw InvalidArgument("has no dataset climate/data");
    h5::Handle data = h5::open_dataset(file.id(), "climate/data");
    const std::vector<h5::Extent> dims = h5::dataset_dims(data.id());
    if (dims.size() != 3 || dims[2] != kDeepCamChannels || dims[0] == 0 || dims[1] == 0 ||
        dims[0] > (1u << 20) || dims[1] > (1u << 20))
      throw InvalidArgument(fmt::format("has climate/data of shape ({}); expected (H, W, {})",
                                        fmt::join(dims, ", "), kDeepCamChannels));
    if (dims[0] * dims[1] * kPixelBytes > kMaxSampleBytes)
      throw InvalidArgument(
          fmt::format("has samples of {} x {} x {} values; hardy reads samples of up to {} GiB",
                      dims[0], dims[1], kDeepCamChannels, kMaxSampleBytes >> 30));
    height = static_cast<int>(dims[0]);
    width = static_cast<int>(dims[1]);
  }
  const auto H = static_cast<h5::Extent>(height), W = static_cast<h5::Extent>(width);
  layout.height = height;
  layout.width = width;
  layout.data_offset =
      contiguous_offset(file.id(), "climate/data", {H, W, kDeepCamChannels}, file_bytes);
  layout.labels_offset =
      contiguous_offset(file.id(), fmt::format("climate/labels_{}", label_set), {H, W}, file_bytes);
  return layout;
}

// Reads one float dataset of stats.h5 with exactly `count` values (0: a scalar).
template <class T>
std::vector<T> read_stat(h5::Id file, const char* name, std::size_t count, h5::TypeClass type) {
  const std::string path = fmt::format("climate/{}", name);
  if (!h5::exists(file, path)) throw InvalidArgument(fmt::format("has no dataset {}", path));
  h5::Handle dataset = h5::open_dataset(file, path);
  const std::vector<h5::Extent> dims = h5::dataset_dims(dataset.id());
  const bool shape_fits = count == 0 ? dims.empty() || dims == std::vector<h5::Extent>{1}
                                     : dims == std::vector<h5::Extent>{count};
  if (!shape_fits || h5::dataset_type_class(dataset.id()) != type)
    throw InvalidArgument(
        fmt::format("has {} of shape ({}) and the wrong type or shape; expected {} {}", path,
                    fmt::join(dims, ", "), type == h5::TypeClass::integer ? "an integer" : "float",
                    count == 0 ? std::string("scalar") : fmt::format("({})", count)));
  return h5::read_dataset<T>(file, path);
}

// minval and (maxval - minval)^-1 per channel from ROOT/stats.h5.
void read_statistics(const fs::path& path, std::vector<float>& minval,
                     std::vector<float>& inverse_range) {
  if (!fs::is_regular_file(path))
    throw InvalidArgument(
        fmt::format("{} does not exist; a DeepCAM dataset keeps its per-channel "
                    "statistics there",
                    quoted(path)));
  try {
    const h5::Exclusive exclusive;
    if (!h5::is_hdf5_file(path)) throw InvalidArgument("is not an HDF5 file");
    h5::Handle file = h5::open_file(path);
    read_stat<std::int64_t>(file.id(), "count", 0, h5::TypeClass::integer);
    for (const char* name : {"mean", "sqmean"})
      read_stat<float>(file.id(), name, kDeepCamChannels, h5::TypeClass::floating_point);
    minval = read_stat<float>(file.id(), "minval", kDeepCamChannels, h5::TypeClass::floating_point);
    const std::vector<float> maxval =
        read_stat<float>(file.id(), "maxval", kDeepCamChannels, h5::TypeClass::floating_point);
    inverse_range.resize(kDeepCamChannels);
    for (int c = 0; c < kDeepCamChannels; ++c) {
      const double range = static_cast<double>(maxval[c]) - minval[c];
      if (!std::isfinite(minval[c]) || !std::isfinite(maxval[c]) || !(range > 0) ||
          !std::isfinite(1.0 / range))
        throw InvalidArgument(fmt::format(
            "gives channel {} ({}) minval {} and maxval {}; normalisation needs finite values "
            "with maxval > minval",
            c, kClimateChannelNames[c], minval[c], maxval[c]));
      inverse_range[c] = static_cast<float>(1.0 / range);
    }
  } catch (const Error& error) {
    throw InvalidArgument(fmt::format("{}: {}", quoted(path), error.what()));
  }
}

// This layout's crop positions: "deepcam1", apart from the sampler's and the other layout's.
constexpr std::uint64_t kCropStream = 0x6465657063616d31ULL;

}  // namespace

bool is_deepcam_layout(const fs::path& root) {
  std::error_code error;
  return fs::is_regular_file(root / "stats.h5", error) && fs::is_directory(root / "train", error);
}

std::vector<int> parse_channel_selection(std::string_view text) {
  std::vector<int> channels;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string_view token = trim(text.substr(begin, end - begin));
    begin = end + 1;
    int channel = -1;
    for (int c = 0; c < kDeepCamChannels; ++c)
      if (lowercase(token) == lowercase(kClimateChannelNames[c])) channel = c;
    if (channel < 0 && !token.empty() &&
        std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
        token.size() <= 2) {
      const int value = std::stoi(std::string(token));
      if (value < kDeepCamChannels) channel = value;
    }
    if (channel < 0)
      throw InvalidArgument(fmt::format(
          "'{}' in channel selection '{}' is not a channel: give names ({}) or indices 0 to {}",
          token, text, fmt::join(kClimateChannelNames, ", "), kDeepCamChannels - 1));
    if (std::find(channels.begin(), channels.end(), channel) != channels.end())
      throw InvalidArgument(fmt::format("'{}' in channel selection '{}' repeats channel {} ({})",
                                        token, text, channel, kClimateChannelNames[channel]));
    channels.push_back(channel);
  }
  return channels;
}

DeepCamDataset::DeepCamDataset(const fs::path& root, std::string_view split, DeepCamOptions options)
    : root_(root), split_(split), options_(std::move(options)) {
  check_split_name("DeepCAM", split_);
  if (options_.label_set != 0 && options_.label_set != 1)
    throw InvalidArgument(
        fmt::format("DeepCAM label set {} does not exist; it is 0 (labels_0) or "
                    "1 (labels_1, relaxed thresholds)",
                    options_.label_set));
  options_.channels =
      selected_channels("DeepCAM", "channel", std::move(options_.channels), kDeepCamChannels);
  check_window_options(options_.crop_height, options_.crop_width, options_.downsample);
  files_ = split_files("DeepCAM", root / split_, ".h5");

  read_statistics(root / "stats.h5", minval_, inverse_range_);

  FileLayout first;
  try {
    first = inspect_sample_file<FileLayout>(files_[0], options_.label_set, 0, 0);
  } catch (const Error& error) {
    throw InvalidArgument(fmt::format("{}: {}", quoted(files_[0]), error.what()));
  }
  height_ = first.height;
  width_ = first.width;
  inspected_.reset(files_.size(), first);

  shape_ = windowed_shape("DeepCAM", static_cast<int>(options_.channels.size()), height_, width_,
                          options_.crop_height, options_.crop_width, options_.downsample);
}

DeepCamDataset::~DeepCamDataset() = default;

const fs::path& DeepCamDataset::file(std::size_t index) const {
  if (index >= files_.size())
    throw InvalidArgument(
        fmt::format("sample {} is outside {}, which has {}", index, describe(), files_.size()));
  return files_[index];
}

DeepCamDataset::FileLayout DeepCamDataset::layout_of(std::size_t index) const {
  return inspected_.get(index, files_[index], [&] {
    return inspect_sample_file<FileLayout>(files_[index], options_.label_set, height_, width_);
  });
}

void DeepCamDataset::load(std::size_t index, std::span<float> fields_chw,
                          std::span<std::int32_t> labels_hw) const {
  check_load_arguments(index, fields_chw, labels_hw);
  const auto sample = inspected_.read(index, files_[index], layout_of(index), location_);

  const FileDescriptor fd(sample.path());
  if (fd.get() < 0) sample.fail(fmt::format("cannot be opened: {}", std::strerror(errno)));

  const int K = options_.downsample;
  const int crop_height = shape_.height * K, crop_width = shape_.width * K;
  const auto [y0, x0] = options_.crop_height ? crop_origin(kCropStream, options_.seed, index,
                                                           height_, width_, crop_height, crop_width)
                                             : std::pair{0, 0};
  const std::size_t W = static_cast<std::size_t>(width_),
                    w = static_cast<std::size_t>(shape_.width);
  const std::size_t plane = static_cast<std::size_t>(shape_.height) * w;
  const std::size_t channels = options_.channels.size();
  const std::size_t row_values = static_cast<std::size_t>(crop_width) * kDeepCamChannels;
  const bool full_rows = crop_width == width_;  // then a block of rows is one read

  // Output rows per read: about 4 MiB of input at a time keeps the scratch buffers small.
  const std::size_t block =
      std::max<std::size_t>(1, (std::size_t{4} << 20) / (K * row_values * sizeof(float)));
  thread_local std::vector<float> data, labels;
  data.resize(block * K * row_values);
  labels.resize(block * K * crop_width);

  std::array<double, kDeepCamChannels> sums{};
  const double block_mean = 1.0 / (K * K);
  for (int oy0 = 0; oy0 < shape_.height; oy0 += static_cast<int>(block)) {
    const int oy1 = std::min(shape_.height, oy0 + static_cast<int>(block));
    const int rows = (oy1 - oy0) * K, first_row = y0 + oy0 * K;
    std::string problem;
    if (full_rows) {
      problem = read_exactly(fd.get(), data.data(), rows * row_values * sizeof(float),
                             sample.layout.data_offset + first_row * W * kPixelBytes);
      if (problem.empty())
        problem = read_exactly(fd.get(), labels.data(), rows * W * sizeof(float),
                               sample.layout.labels_offset + first_row * W * sizeof(float));
    } else {
      for (int r = 0; r < rows && problem.empty(); ++r) {
        const std::size_t pixel = (first_row + r) * W + x0;
        problem = read_exactly(fd.get(), data.data() + r * row_values, row_values * sizeof(float),
                               sample.layout.data_offset + pixel * kPixelBytes);
        if (problem.empty())
          problem =
              read_exactly(fd.get(), labels.data() + r * crop_width, crop_width * sizeof(float),
                           sample.layout.labels_offset + pixel * sizeof(float));
      }
    }
    if (!problem.empty()) sample.fail(problem);

    for (int r = 0; r < rows; ++r)
      for (int x = 0; x < crop_width; ++x) {
        const float value = labels[static_cast<std::size_t>(r) * crop_width + x];
        if (value != 0.0f && value != 1.0f && value != 2.0f)
          sample.fail(
              fmt::format("has label {} at row {}, column {} of climate/labels_{}; classes are "
                          "0, 1 and 2",
                          value, first_row + r, x0 + x, options_.label_set));
      }

    if (K == 1) {
      // At full resolution each output row is one input row: per channel, a strided read and a
      // contiguous write, the same arithmetic as below (in double, so the values are the same
      // bit for bit), with the non-finite check folded into a sum that only a non-finite input
      // turns into NaN; the per-pixel voting and sums below cost ten times more.
      for (int oy = oy0; oy < oy1; ++oy) {
        const std::size_t local_row = static_cast<std::size_t>(oy - oy0);
        const float* row = data.data() + local_row * row_values;
        const float* row_labels = labels.data() + local_row * w;
        float* out_row = fields_chw.data() + static_cast<std::size_t>(oy) * w;
        bool finite = true;
        for (std::size_t c = 0; c < channels; ++c) {
          const int stored = options_.channels[c];
          const double low = minval_[stored], scale = inverse_range_[stored];
          const float* in = row + stored;
          float* out = out_row + c * plane;
          float poison = 0.0f;
          for (std::size_t x = 0; x < w; ++x) {
            const float value = in[x * kDeepCamChannels];
            poison += value * 0.0f;  // NaN from here on when the value is infinite or NaN
            out[x] = static_cast<float>((static_cast<double>(value) - low) * scale);
          }
          finite = finite && poison == 0.0f;
        }
        if (!finite)  // the first one in pixel order, as the general path says it
          for (std::size_t x = 0; x < w; ++x)
            for (std::size_t c = 0; c < channels; ++c)
              if (!std::isfinite(row[x * kDeepCamChannels + options_.channels[c]]))
                sample.fail(fmt::format(
                    "has a non-finite value of {} near row {}, column {} of climate/data",
                    kClimateChannelNames[options_.channels[c]], y0 + oy, x0 + x));
        std::int32_t* out_labels = labels_hw.data() + static_cast<std::size_t>(oy) * w;
        for (std::size_t x = 0; x < w; ++x)
          out_labels[x] = static_cast<std::int32_t>(row_labels[x]);
      }
      continue;
    }
    for (int oy = oy0; oy < oy1; ++oy) {
      const std::size_t local_row = static_cast<std::size_t>(oy - oy0) * K;
      for (std::size_t ox = 0; ox < w; ++ox) {
        std::array<int, kNumClasses> votes{};
        sums.fill(0.0);
        for (int dy = 0; dy < K; ++dy)
          for (int dx = 0; dx < K; ++dx) {
            const std::size_t pixel = (local_row + dy) * crop_width + ox * K + dx;
            const float* values = data.data() + pixel * kDeepCamChannels;
            for (std::size_t c = 0; c < channels; ++c) sums[c] += values[options_.channels[c]];
            ++votes[static_cast<int>(labels[pixel])];
          }
        for (std::size_t c = 0; c < channels; ++c) {
          const int stored = options_.channels[c];
          if (!std::isfinite(sums[c]))
            sample.fail(
                fmt::format("has a non-finite value of {} near row {}, column {} of climate/data",
                            kClimateChannelNames[stored], y0 + oy * K, x0 + ox * K));
          fields_chw[c * plane + oy * w + ox] =
              static_cast<float>((sums[c] * block_mean - minval_[stored]) * inverse_range_[stored]);
        }
        labels_hw[oy * w + ox] = majority_class(votes);
      }
    }
  }
}

std::string DeepCamDataset::describe() const {
  const std::string details =
      fmt::format("labels_{}", options_.label_set) +
      window_details("channels", options_.channels, kDeepCamChannels, options_.crop_height,
                     options_.crop_width, options_.downsample, shape_, height_, width_);
  return fmt::format("DeepCAM {} split of {}: {} samples of {}x{}x{} ({})", split_, quoted(root_),
                     files_.size(), kDeepCamChannels, height_, width_, details);
}

std::vector<std::string> DeepCamDataset::channel_names() const {
  return climate_channel_names(options_.channels);
}

// ---- the generator ----

namespace {

// Physical value = offset + scale * synthetic value (roughly zero-mean, unit variance), at least
// `floor`: typical magnitudes of the CAM5 variables in their own units.
struct PhysicalUnits {
  float offset, scale, floor;
};
constexpr float kNoFloor = -3.0e38f;
constexpr std::array<PhysicalUnits, kDeepCamChannels> kUnits = {{
    {24.0f, 14.0f, 0.0f},            // TMQ, kg/m2 (0..70)
    {2.0f, 9.0f, kNoFloor},          // U850, m/s
    {0.0f, 7.0f, kNoFloor},          // V850, m/s
    {1.0f, 7.0f, kNoFloor},          // UBOT, m/s
    {0.0f, 6.0f, kNoFloor},          // VBOT, m/s
    {0.010f, 0.005f, 0.0f},          // QREFHT, kg/kg
    {98500.0f, 1500.0f, kNoFloor},   // PS, Pa
    {101300.0f, 1100.0f, kNoFloor},  // PSL, Pa
    {218.0f, 6.0f, kNoFloor},        // T200, K
    {257.0f, 9.0f, kNoFloor},        // T500, K
    {0.0f, 5.0e-8f, 0.0f},           // PRECT, m/s (already >= 0)
    {288.0f, 14.0f, kNoFloor},       // TS, K
    {287.0f, 13.0f, kNoFloor},       // TREFHT, K
    {120.0f, 80.0f, kNoFloor},       // Z1000, m
    {11800.0f, 300.0f, kNoFloor},    // Z200, m
    {62.0f, 6.0f, kNoFloor},         // ZBOT, m
}};

// "data-2000-01-01-00-1.h5" for sample 0, three hours later for each next one.
std::string sample_file_name(std::size_t sample) {
  using namespace std::chrono;
  const year_month_day date{sys_days{year{2000} / January / 1} +
                            days{static_cast<int>(sample / 8)}};
  return fmt::format("data-{:04d}-{:02d}-{:02d}-{:02d}-1.h5", static_cast<int>(date.year()),
                     static_cast<unsigned>(date.month()), static_cast<unsigned>(date.day()),
                     sample % 8);
}

// Everything one sample file holds, in its stored order.
struct GeneratedSample {
  std::vector<float> data;             // (H, W, 16)
  std::vector<float> labels[2];        // (H, W)
  std::vector<float> data_stats;       // (4, 16): mean, max, min, std
  std::vector<float> labels_stats[2];  // (7, 1)
  std::array<double, kDeepCamChannels> sum{}, square_sum{};
  std::array<float, kDeepCamChannels> min{}, max{};
};

std::vector<float> label_stats(const std::vector<float>& labels) {
  std::array<double, kNumClasses> counts{};
  for (float label : labels) counts[static_cast<int>(label)] += 1;
  const double pixels = static_cast<double>(labels.size());
  std::vector<float> stats = {static_cast<float>(pixels)};
  for (double count : counts) stats.push_back(static_cast<float>(count));
  for (double count : counts) stats.push_back(static_cast<float>(count / pixels));
  return stats;
}

void generate_sample(const SyntheticClimate& source, std::size_t index, GeneratedSample& out,
                     std::vector<float>& fields, std::vector<std::int32_t>& labels) {
  const SampleShape shape = source.shape();
  const std::size_t H = shape.height, W = shape.width, pixels = H * W;
  source.load(index, fields, labels);
  out.data.resize(pixels * kDeepCamChannels);
  out.min.fill(std::numeric_limits<float>::max());
  out.max.fill(std::numeric_limits<float>::lowest());
  out.sum.fill(0);
  out.square_sum.fill(0);
  for (std::size_t c = 0; c < kDeepCamChannels; ++c) {
    const PhysicalUnits units = kUnits[c];
    const float* plane = fields.data() + c * pixels;
    double sum = 0, square_sum = 0;
    float low = out.min[c], high = out.max[c];
    for (std::size_t p = 0; p < pixels; ++p) {
      const float value = std::max(units.floor, units.offset + units.scale * plane[p]);
      out.data[p * kDeepCamChannels + c] = value;
      sum += value;
      square_sum += static_cast<double>(value) * value;
      low = std::min(low, value);
      high = std::max(high, value);
    }
    out.sum[c] = sum;
    out.square_sum[c] = square_sum;
    out.min[c] = low;
    out.max[c] = high;
  }
  out.data_stats.assign(4 * kDeepCamChannels, 0.0f);
  for (std::size_t c = 0; c < kDeepCamChannels; ++c) {
    const double mean = out.sum[c] / pixels;
    out.data_stats[c] = static_cast<float>(mean);
    out.data_stats[kDeepCamChannels + c] = out.max[c];
    out.data_stats[2 * kDeepCamChannels + c] = out.min[c];
    out.data_stats[3 * kDeepCamChannels + c] =
        static_cast<float>(std::sqrt(std::max(0.0, out.square_sum[c] / pixels - mean * mean)));
  }
  // labels_1: labels_0 grown by one pixel into the background (3x3), cyclones first, as looser
  // thresholds would mark more pixels around every feature.
  out.labels[0].assign(labels.begin(), labels.end());
  out.labels[1] = out.labels[0];
  for (std::size_t y = 0; y < H; ++y)
    for (std::size_t x = 0; x < W; ++x) {
      if (labels[y * W + x] != kBackground) continue;
      int grown = kBackground;
      for (std::size_t ny = y ? y - 1 : 0; ny <= std::min(H - 1, y + 1); ++ny)
        for (std::size_t nx = x ? x - 1 : 0; nx <= std::min(W - 1, x + 1); ++nx) {
          const int neighbour = labels[ny * W + nx];
          if (neighbour == kTropicalCyclone || (neighbour == kAtmosphericRiver && !grown))
            grown = neighbour;
        }
      out.labels[1][y * W + x] = static_cast<float>(grown);
    }
  for (int set = 0; set < 2; ++set) out.labels_stats[set] = label_stats(out.labels[set]);
}

void write_sample_file(const fs::path& path, const GeneratedSample& sample, h5::Extent H,
                       h5::Extent W) {
  write_atomically(path, [&](const fs::path& temporary) {
    const h5::Exclusive exclusive;
    h5::Handle file = h5::create_file(temporary);
    h5::Handle group = h5::create_groups(file.id(), "climate");
    const h5::Id climate = group.id();
    h5::write_dataset<float>(climate, "data", sample.data, {H, W, kDeepCamChannels});
    for (int set = 0; set < 2; ++set) {
      h5::write_dataset<float>(climate, fmt::format("labels_{}", set), sample.labels[set], {H, W});
      h5::write_dataset<float>(climate, fmt::format("labels_{}_stats", set),
                               sample.labels_stats[set], {7, 1});
    }
    h5::write_dataset<float>(climate, "data_stats", sample.data_stats, {4, kDeepCamChannels});
    group.close();
    file.close();  // flushes: a full disk shows up here, before the rename
  });
}

}  // namespace

void write_deepcam_dataset(const fs::path& root, const DeepCamGenerateOptions& options) {
  if (options.train == 0)
    throw InvalidArgument(
        "a DeepCAM dataset needs training samples: stats.h5 is computed from them");
  if (options.height < 16 || options.width < 16)
    throw InvalidArgument(fmt::format("a DeepCAM grid must be at least 16x16 (got {}x{})",
                                      options.height, options.width));
  if (static_cast<std::uint64_t>(options.height) * options.width * kPixelBytes > kMaxSampleBytes)
    throw InvalidArgument(fmt::format("a grid of {}x{} makes samples over hardy's limit of {} GiB",
                                      options.height, options.width, kMaxSampleBytes >> 30));
  const std::array<std::pair<const char*, std::size_t>, 3> splits = {
      {{"train", options.train}, {"validation", options.validation}, {"test", options.test}}};
  const std::size_t total = options.train + options.validation + options.test;
  std::vector<fs::path> paths;
  for (const auto& [split, count] : splits) {
    if (count == 0 && std::string_view(split) == "test") continue;
    const fs::path dir = root / split;
    std::error_code error;
    fs::create_directories(dir, error);
    if (error) throw IoError(fmt::format("cannot create {}: {}", quoted(dir), error.message()));
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, error))
      if (entry.path().extension() == ".h5")
        throw InvalidArgument(
            fmt::format("{} already holds {}: write a new DeepCAM dataset into an empty directory",
                        quoted(dir), entry.path().filename().string()));
    for (std::size_t k = 0; k < count; ++k) paths.push_back(dir / sample_file_name(paths.size()));
  }

  const SyntheticClimate source({kDeepCamChannels, options.height, options.width}, total,
                                options.seed);
  const auto H = static_cast<h5::Extent>(options.height),
             W = static_cast<h5::Extent>(options.width);
  std::array<double, kDeepCamChannels> sum{}, square_sum{};
  std::array<float, kDeepCamChannels> minval, maxval;
  minval.fill(std::numeric_limits<float>::max());
  maxval.fill(std::numeric_limits<float>::lowest());
  std::exception_ptr failure;  // the first one; `failed` says so without a race
  std::atomic<bool> failed{false};
  // Samples are made in parallel (SyntheticClimate is the cost) and written one at a time in
  // order (HDF5 is not reentrant); the training statistics add up in sample order, so the files
  // do not depend on the number of threads.
#pragma omp parallel
  {
    GeneratedSample sample;
    std::vector<float> fields(source.shape().field_elements());
    std::vector<std::int32_t> labels(source.shape().label_elements());
#pragma omp for ordered schedule(static, 1)
    for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(total); ++i) {
      bool made = false;
      try {
        if (!failed) {
          generate_sample(source, static_cast<std::size_t>(i), sample, fields, labels);
          made = true;
        }
      } catch (...) {
#pragma omp critical(deepcam_failure)
        if (!failed.exchange(true)) failure = std::current_exception();
      }
#pragma omp ordered
      {
        try {
          if (made && !failed) {
            write_sample_file(paths[i], sample, H, W);
            if (static_cast<std::size_t>(i) < options.train)
              for (int c = 0; c < kDeepCamChannels; ++c) {
                sum[c] += sample.sum[c];
                square_sum[c] += sample.square_sum[c];
                minval[c] = std::min(minval[c], sample.min[c]);
                maxval[c] = std::max(maxval[c], sample.max[c]);
              }
          }
        } catch (...) {
#pragma omp critical(deepcam_failure)
          if (!failed.exchange(true)) failure = std::current_exception();
        }
      }
    }
  }
  if (failure) std::rethrow_exception(failure);

  const double pixels = static_cast<double>(options.train) * options.height * options.width;
  std::vector<float> mean(kDeepCamChannels), square_mean(kDeepCamChannels);
  for (int c = 0; c < kDeepCamChannels; ++c) {
    mean[c] = static_cast<float>(sum[c] / pixels);
    square_mean[c] = static_cast<float>(square_sum[c] / pixels);
  }
  write_atomically(root / "stats.h5", [&](const fs::path& temporary) {
    const h5::Exclusive exclusive;
    h5::Handle file = h5::create_file(temporary);
    h5::Handle group = h5::create_groups(file.id(), "climate");
    const std::int64_t count = static_cast<std::int64_t>(options.train);
    h5::write_dataset<std::int64_t>(group.id(), "count", std::span(&count, 1), {});
    h5::write_dataset<float>(group.id(), "mean", mean, {kDeepCamChannels});
    h5::write_dataset<float>(group.id(), "sqmean", square_mean, {kDeepCamChannels});
    h5::write_dataset<float>(group.id(), "minval", std::vector<float>(minval.begin(), minval.end()),
                             {kDeepCamChannels});
    h5::write_dataset<float>(group.id(), "maxval", std::vector<float>(maxval.begin(), maxval.end()),
                             {kDeepCamChannels});
    group.close();
    file.close();
  });
}

}  // namespace hardy::core
