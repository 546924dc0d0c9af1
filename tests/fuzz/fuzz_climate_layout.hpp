#pragma once
// What the targets of the published climate layouts (fuzz_deepcam.cpp, fuzz_climatenet.cpp)
// share: a fresh dataset directory, the reader options both layouts take, the way the trainer
// uses a split (open it, then load every sample into buffers of the shape it reports), and the
// run of a target around its own files.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_hdf5.hpp"
#include "fuzz_support.hpp"
#include "hardy/core/data/sample_source.hpp"

namespace hardy::fuzz {

// An empty dataset root with an empty train/ split, under this process's scratch directory.
inline std::filesystem::path fresh_split_root(const std::string& name) {
  const auto root = scratch_directory() / name;
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root / "train");
  return root;
}

// The options both readers take (channels, crop, downsampling, seed), bad values included.
template <class Options>
void fuzz_window_options(Options& options, FuzzInput& input) {
  for (int k = 0, n = input.byte() % 4; k < n; ++k)
    options.channels.push_back(static_cast<int>(input.byte() % 18) - 1);  // -1 and 16 are bad
  if (input.byte() & 1) {
    options.crop_height = input.byte() % 8;
    options.crop_width = input.byte() % 8;
  }
  options.downsample = input.byte() % 4;  // 0 is bad
  if (options.downsample == 0 && !(input.byte() & 1)) options.downsample = 1;
  options.seed = input.byte();
}

// Opens ROOT's train split and loads every sample twice: a reader must give a file the same
// verdict each time (it remembers the bad ones).
template <class Dataset, class Options>
void load_every_sample(const std::filesystem::path& root, const Options& options) {
  accepts("dataset", [&] {
    const Dataset dataset(root, "train", options);
    const core::SampleShape shape = dataset.shape();
    // What the trainer allocates for one sample.
    std::vector<float> fields(shape.field_elements());
    std::vector<std::int32_t> labels(shape.label_elements());
    for (std::size_t index = 0; index < dataset.size(); ++index) {
      const bool first = accepts("load", [&] { dataset.load(index, fields, labels); });
      if (accepts("load again", [&] { dataset.load(index, fields, labels); }) != first)
        broken_promise("a second load of a sample gave another verdict than the first");
    }
  });
}

// A target's whole run: HDF5 quiet, a fresh root named `name`, its split written and its
// layout's own options chosen by `write_split(root, input)` (which returns the options), then
// the window options, and every sample loaded as the trainer does.
template <class Dataset, class WriteSplit>
int fuzz_split(const std::uint8_t* data, std::size_t size, const std::string& name,
               WriteSplit&& write_split) {
  silence_hdf5_errors();
  FuzzInput input(data, size);
  const auto root = fresh_split_root(name);
  auto options = write_split(root, input);
  fuzz_window_options(options, input);
  load_every_sample<Dataset>(root, options);
  return 0;
}

}  // namespace hardy::fuzz
