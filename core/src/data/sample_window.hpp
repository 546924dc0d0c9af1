#pragma once
// What the readers of published climate layouts (deepcam.cpp, climatenet.cpp) share about the
// window they cut out of a sample: where a crop lies, the shape a crop and a downsampling give,
// and the label a downsampled block takes.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "hardy/core/compute/labels.hpp"
#include "hardy/core/data/sample_source.hpp"

namespace hardy::core {

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

// The label of a downsampled block from its pixels' votes: the majority, ties going to the
// rarer, higher class.
inline int majority_class(const std::array<int, kNumClasses>& votes) {
  int winner = 0;
  for (int k = 1; k < kNumClasses; ++k)
    if (votes[k] >= votes[winner]) winner = k;
  return winner;
}

}  // namespace hardy::core
