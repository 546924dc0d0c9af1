#pragma once
// What the readers of published climate layouts (deepcam.cpp, climatenet.cpp) share about the
// window they cut out of a sample: the checks of their split, channels, crop and downsampling,
// the sample files of a split, where a crop lies, the shape a crop and a downsampling give, the
// label a downsampled block takes, the channels' names and what describe() says of the window.
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hardy/core/compute/labels.hpp"
#include "hardy/core/data/sample_source.hpp"

namespace hardy::core {

// Throws InvalidArgument, naming `layout`, unless `split` is train, validation or test.
void check_split_name(std::string_view layout, std::string_view split);

// The channels a reader loads: `selected` (indices into kClimateChannelNames, in this order), or
// all `available` ones when it is empty. Throws InvalidArgument, naming `layout` and what it
// calls a channel (`channel`), for an index that does not exist or is selected twice.
std::vector<int> selected_channels(std::string_view layout, std::string_view channel,
                                   std::vector<int> selected, int available);

// Throws InvalidArgument for a downsampling factor under 1 or a crop that is not a positive
// height and width (or neither).
void check_window_options(int crop_height, int crop_width, int downsample);

// The regular files ending in `extension` in a split directory, in name order. Throws
// InvalidArgument, naming `layout`, when the directory is missing, cannot be listed, or holds none.
std::vector<std::filesystem::path> split_files(std::string_view layout,
                                               const std::filesystem::path& dir,
                                               std::string_view extension);

// The top-left corner of sample `index`'s crop window: a pure function of (seed, index), so that
// resumes and relaunches see the same data. `stream` keeps each layout's positions apart from
// the sampler's stream and from the other layout's.
std::pair<int, int> crop_origin(std::uint64_t stream, std::uint64_t seed, std::size_t index,
                                int height, int width, int crop_height, int crop_width);

// The sample shape of `channels` fields cut to crop_height x crop_width (0: the whole grid) out
// of a height x width grid and averaged over downsample x downsample blocks. Throws
// InvalidArgument, naming `layout`, for a crop larger than the grid or a window the factor does
// not divide.
SampleShape windowed_shape(std::string_view layout, int channels, int height, int width,
                           int crop_height, int crop_width, int downsample);

// The names (kClimateChannelNames) of `channels`, in this order.
std::vector<std::string> climate_channel_names(const std::vector<int>& channels);

// What a reader's describe() says of its window, after the reader's own details: the selected
// `channels` (named `channel`s, "variables" or "channels") unless they are all `available` ones in
// order, the crop, the downsampling, and the shape a sample takes when it is not the stored
// height x width grid's.
std::string window_details(std::string_view channel, const std::vector<int>& channels,
                           int available, int crop_height, int crop_width, int downsample,
                           const SampleShape& shape, int height, int width);

// The label of a downsampled block from its pixels' votes: the majority, ties going to the
// rarer, higher class.
inline int majority_class(const std::array<int, kNumClasses>& votes) {
  int winner = 0;
  for (int k = 1; k < kNumClasses; ++k)
    if (votes[k] >= votes[winner]) winner = k;
  return winner;
}

}  // namespace hardy::core
