#include "sample_window.hpp"

#include <fmt/format.h>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/random.hpp"

namespace hardy::core {

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

}  // namespace hardy::core
