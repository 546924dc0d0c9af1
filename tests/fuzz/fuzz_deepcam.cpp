// The DeepCAM layout (core/data/deepcam.hpp) as a user's directory may hold it: stats.h5 with
// missing, mis-shaped or degenerate statistics, sample files with any shapes, types, storage
// (contiguous, chunked, compressed), missing groups and datasets, any values, truncated files,
// and any reader options (label set, channels, crop, downsampling). The target writes the
// directory with HDF5 itself (so the findings are hardy's, not HDF5's parser's), opens the split
// and loads every sample into buffers of the shape the reader reports, as the trainer does. A
// rejection must be one of hardy's errors with a message (BadSample for one file's problem);
// a claimed shape the files do not hold must be refused before anything is allocated for it.
//
// An empty input is a valid dataset (every choice's zero is the regular one), so the seeds in
// corpus/deepcam are short and spell out what they vary.
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fuzz_climate_layout.hpp"
#include "fuzz_hdf5.hpp"
#include "fuzz_support.hpp"
#include "hardy/core/data/deepcam.hpp"

namespace {

using hardy::fuzz::claimed_extent;
using hardy::fuzz::FuzzInput;

// float32 (the regular type) first.
const hid_t* const kTypes[] = {&H5T_NATIVE_FLOAT_g, &H5T_NATIVE_DOUBLE_g, &H5T_NATIVE_INT32_g,
                               &H5T_IEEE_F32BE_g, &H5T_NATIVE_INT64_g};

// A dataset of the given extents and the fuzzer's type and storage; small ones are filled with
// the fuzzer's bytes (all zeros when it has run out: valid fields and background labels).
void add_dataset(hid_t parent, const char* name, const std::vector<hsize_t>& dims,
                 FuzzInput& input) {
  const hid_t dataset = hardy::fuzz::create_fuzzed_dataset(
      parent, name, dims, hardy::fuzz::pick_type(input, kTypes), input);
  if (dataset >= 0) H5Dclose(dataset);
}

enum StatsFlags : std::uint8_t {
  kNoMinval = 1,
  kShortMaxval = 2,
  kDegenerateRange = 4,
  kFloatCount = 8,
  kFuzzedMaxval = 16,
  kNoStats = 32
};

void write_stats(const std::filesystem::path& path, FuzzInput& input) {
  const std::uint8_t flags = input.byte();
  if (flags & kNoStats) return;
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t group = H5Gcreate2(file, "climate", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  auto write = [&](const char* name, hid_t type, const std::vector<hsize_t>& dims,
                   const void* data) {
    const hid_t space = dims.empty()
                            ? H5Screate(H5S_SCALAR)
                            : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const hid_t dataset =
        H5Dcreate2(group, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    H5Dclose(dataset);
    H5Sclose(space);
  };
  const std::int64_t count = 1;
  const double count_as_float = 1;
  if (flags & kFloatCount)
    write("count", H5T_NATIVE_DOUBLE, {}, &count_as_float);
  else
    write("count", H5T_NATIVE_INT64, {}, &count);
  std::vector<float> zeros(16, 0.0f), ones(16, 1.0f);
  if (flags & kDegenerateRange) ones[input.byte() % 16] = 0.0f;
  if (flags & kFuzzedMaxval)
    for (float& value : ones) {
      std::uint32_t bits = static_cast<std::uint32_t>(input.u64());
      std::memcpy(&value, &bits, sizeof value);
    }
  write("mean", H5T_NATIVE_FLOAT, {16}, zeros.data());
  write("sqmean", H5T_NATIVE_FLOAT, {16}, zeros.data());
  if (!(flags & kNoMinval)) write("minval", H5T_NATIVE_FLOAT, {16}, zeros.data());
  write("maxval", H5T_NATIVE_FLOAT, {static_cast<hsize_t>(flags & kShortMaxval ? 15 : 16)},
        ones.data());
  H5Gclose(group);
  H5Fclose(file);
}

enum FileFlags : std::uint8_t { kNoGroup = 1, kNoLabels = 2, kTruncate = 4, kNotHdf5 = 8 };

void write_sample(const std::filesystem::path& path, FuzzInput& input) {
  const std::uint8_t flags = input.byte();
  const auto created = hardy::fuzz::create_sample_file(path, input, flags & kNotHdf5);
  if (!created) return;
  const hid_t file = *created;
  const hid_t group = flags & kNoGroup
                          ? H5Gcreate2(file, "other", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
                          : H5Gcreate2(file, "climate", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  std::vector<hsize_t> dims;
  if (input.byte() < 220) {
    const hsize_t height = claimed_extent(input), width = claimed_extent(input);
    dims = {height, width, input.byte() < 220 ? hsize_t{16} : claimed_extent(input)};
  } else {
    dims.resize(input.pick(0, 5));
    for (hsize_t& d : dims) d = claimed_extent(input);
  }
  add_dataset(group, "data", dims, input);
  if (!(flags & kNoLabels)) {
    for (const char* name : {"labels_0", "labels_1"}) {
      std::vector<hsize_t> label_dims;
      if (input.byte() < 220 && dims.size() >= 2)
        label_dims = {dims[0], dims[1]};
      else
        label_dims = {claimed_extent(input), claimed_extent(input)};
      add_dataset(group, name, label_dims, input);
    }
  }
  H5Gclose(group);
  H5Fclose(file);
  if (flags & kTruncate) hardy::fuzz::truncate_file(path, input);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hardy;
  return fuzz::fuzz_split<core::DeepCamDataset>(
      data, size, "deepcam", [](const std::filesystem::path& root, FuzzInput& input) {
        write_stats(root / "stats.h5", input);
        const int files = static_cast<int>(input.pick(1, 3));
        for (int k = 0; k < files; ++k)
          write_sample(root / "train" / ("data-2000-01-01-0" + std::to_string(k) + "-1.h5"), input);
        core::DeepCamOptions options;
        options.label_set = input.byte() % 3;  // 2 does not exist
        return options;
      });
}
