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

#include "fuzz_hdf5.hpp"
#include "fuzz_support.hpp"
#include "hardy/core/data/deepcam.hpp"

namespace {

using hardy::fuzz::claimed_extent;
using hardy::fuzz::FuzzInput;

// float32 (the regular type) first.
hid_t pick_type(FuzzInput& input) {
  static const hid_t* const kTypes[] = {&H5T_NATIVE_FLOAT_g, &H5T_NATIVE_DOUBLE_g,
                                        &H5T_NATIVE_INT32_g, &H5T_IEEE_F32BE_g,
                                        &H5T_NATIVE_INT64_g};
  H5open();
  return *kTypes[input.byte() % std::size(kTypes)];
}

enum StorageFlags : std::uint8_t { kChunked = 1, kCompressed = 2, kEarlyAllocation = 4 };

// A dataset of the given extents and the fuzzer's type and storage; small ones are filled with
// the fuzzer's bytes (all zeros when it has run out: valid fields and background labels).
void add_dataset(hid_t parent, const char* name, const std::vector<hsize_t>& dims,
                 FuzzInput& input) {
  hsize_t elements = 1;
  bool overflow = false;
  for (hsize_t d : dims) {
    overflow |= d != 0 && elements > (hsize_t{1} << 62) / d;
    elements *= d;
  }
  const hid_t type = pick_type(input);
  const std::uint8_t storage = input.byte();
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t properties = H5Pcreate(H5P_DATASET_CREATE);
  if ((storage & kChunked) && !dims.empty() && !overflow) {
    std::vector<hsize_t> chunk(dims.size());
    for (std::size_t d = 0; d < dims.size(); ++d)
      chunk[d] = std::max<hsize_t>(1, std::min<hsize_t>(dims[d], 8));
    H5Pset_chunk(properties, static_cast<int>(chunk.size()), chunk.data());
    if (storage & kCompressed) H5Pset_deflate(properties, 1);
  } else if ((storage & kEarlyAllocation) && !overflow && elements <= 4096) {
    H5Pset_alloc_time(properties, H5D_ALLOC_TIME_EARLY);
  }
  const hid_t dataset = H5Dcreate2(parent, name, type, space, H5P_DEFAULT, properties, H5P_DEFAULT);
  if (dataset >= 0 && !overflow && elements <= 4096 && !(storage & kEarlyAllocation)) {
    std::vector<std::uint8_t> bytes(elements * H5Tget_size(type));
    for (auto& b : bytes) b = input.byte();
    H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
  }
  if (dataset >= 0) H5Dclose(dataset);
  H5Pclose(properties);
  H5Sclose(space);
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
  if (flags & kNotHdf5) {
    hardy::fuzz::write_file(path, input.text(64));
    return;
  }
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
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
  if (flags & kTruncate) {
    std::error_code ignored;
    const auto size = std::filesystem::file_size(path, ignored);
    std::filesystem::resize_file(path, size * input.byte() / 256, ignored);
  }
}

// fuzz::accepts, saying what happened under HARDY_FUZZ_VERBOSE=1.
template <class Action>
bool accepts(const char* what, Action&& action) {
  return hardy::fuzz::accepts([&] {
    try {
      action();
      if (hardy::fuzz::verbose()) std::fprintf(stderr, "  %s: accepted\n", what);
    } catch (const hardy::Error& error) {
      if (hardy::fuzz::verbose()) std::fprintf(stderr, "  %s: rejected: %s\n", what, error.what());
      throw;
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hardy;
  static const bool quiet = [] { return H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) >= 0; }();
  (void)quiet;
  FuzzInput input(data, size);
  const auto root = fuzz::scratch_directory() / "deepcam";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root / "train");
  write_stats(root / "stats.h5", input);
  const int files = static_cast<int>(input.pick(1, 3));
  for (int k = 0; k < files; ++k)
    write_sample(root / "train" / ("data-2000-01-01-0" + std::to_string(k) + "-1.h5"), input);

  core::DeepCamOptions options;
  options.label_set = input.byte() % 3;  // 2 does not exist
  for (int k = 0, n = input.byte() % 4; k < n; ++k)
    options.channels.push_back(static_cast<int>(input.byte() % 18) - 1);  // -1 and 16 are bad
  if (input.byte() & 1) {
    options.crop_height = input.byte() % 8;
    options.crop_width = input.byte() % 8;
  }
  options.downsample = input.byte() % 4;  // 0 is bad
  if (options.downsample == 0 && !(input.byte() & 1)) options.downsample = 1;
  options.seed = input.byte();

  accepts("dataset", [&] {
    const core::DeepCamDataset dataset(root, "train", options);
    const core::SampleShape shape = dataset.shape();
    // What the trainer allocates for one sample.
    std::vector<float> fields(shape.field_elements());
    std::vector<std::int32_t> labels(shape.label_elements());
    for (std::size_t index = 0; index < dataset.size(); ++index) {
      const bool first = accepts("load", [&] { dataset.load(index, fields, labels); });
      if (accepts("load again", [&] { dataset.load(index, fields, labels); }) != first)
        fuzz::broken_promise("a second load of a sample gave another verdict than the first");
    }
  });
  return 0;
}
