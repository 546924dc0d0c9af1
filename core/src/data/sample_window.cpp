#include "sample_window.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/random.hpp"

namespace hardy::core {
namespace fs = std::filesystem;

void check_split_name(std::string_view layout, std::string_view split) {
  if (split != "train" && split != "validation" && split != "test")
    throw InvalidArgument(fmt::format(
        "unknown {} split '{}'; the splits are train, validation and test", layout, split));
}

std::vector<int> selected_channels(std::string_view layout, std::string_view channel,
                                   std::vector<int> selected, int available) {
  if (selected.empty())
    for (int c = 0; c < available; ++c) selected.push_back(c);
  for (std::size_t k = 0; k < selected.size(); ++k) {
    const int c = selected[k];
    if (c < 0 || c >= available)
      throw InvalidArgument(fmt::format("{} {} {} does not exist; {}s are 0 to {}", layout, channel,
                                        c, channel, available - 1));
    if (std::find(selected.begin(), selected.begin() + k, c) != selected.begin() + k)
      throw InvalidArgument(fmt::format("{} {} {} ({}) is selected twice", layout, channel, c,
                                        kClimateChannelNames[c]));
  }
  return selected;
}

void check_window_options(int crop_height, int crop_width, int downsample) {
  if (downsample < 1)
    throw InvalidArgument(
        fmt::format("the downsampling factor must be at least 1 (got {})", downsample));
  if (crop_height < 0 || crop_width < 0 || (crop_height == 0) != (crop_width == 0))
    throw InvalidArgument(
        fmt::format("a crop needs a positive height and width, or neither (got {}x{})", crop_height,
                    crop_width));
}

std::vector<fs::path> split_files(std::string_view layout, const fs::path& dir,
                                  std::string_view extension) {
  const std::string quoted_dir = fmt::format("'{}'", dir.string());
  std::error_code error;
  if (!fs::is_directory(dir, error))
    throw InvalidArgument(fmt::format("{} split directory {} does not exist", layout, quoted_dir));
  const fs::path wanted(extension);
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error))
    if (entry.path().extension() == wanted && entry.is_regular_file(error))
      files.push_back(entry.path());
  if (error) throw InvalidArgument(fmt::format("cannot list {}: {}", quoted_dir, error.message()));
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  if (files.empty())
    throw InvalidArgument(
        fmt::format("{} split directory {} holds no {} files", layout, quoted_dir, extension));
  return files;
}

std::pair<int, int> crop_origin(std::uint64_t stream, std::uint64_t seed, std::size_t index,
                                int height, int width, int crop_height, int crop_width) {
  SplitMix64 mix(seed ^ stream);
  SplitMix64 position(mix.next() ^ static_cast<std::uint64_t>(index));
  const auto y =
      static_cast<int>(position.next() % static_cast<std::uint64_t>(height - crop_height + 1));
  const auto x =
      static_cast<int>(position.next() % static_cast<std::uint64_t>(width - crop_width + 1));
  return {y, x};
}

SampleShape windowed_shape(std::string_view layout, int channels, int height, int width,
                           int crop_height, int crop_width, int downsample) {
  const bool cropped = crop_height != 0;
  const int window_height = cropped ? crop_height : height;
  const int window_width = crop_width ? crop_width : width;
  if (window_height > height || window_width > width)
    throw InvalidArgument(fmt::format("a crop of {}x{} does not fit the {} grid of {}x{}",
                                      window_height, window_width, layout, height, width));
  if (window_height % downsample != 0 || window_width % downsample != 0)
    throw InvalidArgument(fmt::format("downsampling by {} needs a {} of {}x{} that it divides",
                                      downsample, cropped ? "crop" : "grid", window_height,
                                      window_width));
  return {channels, window_height / downsample, window_width / downsample};
}

std::vector<std::string> climate_channel_names(const std::vector<int>& channels) {
  std::vector<std::string> names;
  for (int c : channels) names.emplace_back(kClimateChannelNames[c]);
  return names;
}

std::string window_details(std::string_view channel, const std::vector<int>& channels,
                           int available, int crop_height, int crop_width, int downsample,
                           const SampleShape& shape, int height, int width) {
  std::string details;
  if (channels.size() != static_cast<std::size_t>(available) ||
      !std::is_sorted(channels.begin(), channels.end()))
    details += fmt::format(", {} {}", channel, fmt::join(climate_channel_names(channels), ","));
  if (crop_height) details += fmt::format(", crop {}x{}", crop_height, crop_width);
  if (downsample > 1) details += fmt::format(", downsample {}", downsample);
  if (shape != SampleShape{available, height, width})
    details += fmt::format(" -> {}", to_string(shape));
  return details;
}

}  // namespace hardy::core
