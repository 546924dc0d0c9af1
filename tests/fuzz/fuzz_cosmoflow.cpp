// The CosmoFlow layout (core/data/cosmoflow.hpp) as a user's directory may hold it: a train/
// split of HDF5 or NumPy sample files with any shapes, element types, storage, headers (NumPy's
// dictionary, or the fuzzer's own bytes), missing datasets or label files, any values, truncated
// files. The target writes the files itself (HDF5 through HDF5, .npy byte by byte), opens the
// split and loads every sample twice into buffers of the shape the reader reports, as the
// trainer does. A rejection must be one of hardy's errors with a message (BadSample for one
// file's problem), the same each time; a claimed shape the files do not hold must be refused
// before anything is allocated for it.
//
// An empty input is a valid HDF5 split (every choice's zero is the regular one), so the seeds in
// corpus/cosmoflow are short and spell out what they vary.
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_climate_layout.hpp"
#include "fuzz_hdf5.hpp"
#include "fuzz_support.hpp"
#include "hardy/core/data/cosmoflow.hpp"

namespace {

using hardy::fuzz::claimed_extent;
using hardy::fuzz::FuzzInput;

// int16 (the regular x) and float32 (the regular y) first.
const hid_t* const kTypes[] = {&H5T_STD_I16LE_g, &H5T_NATIVE_FLOAT_g, &H5T_STD_I16BE_g,
                               &H5T_STD_U16LE_g, &H5T_NATIVE_INT32_g, &H5T_NATIVE_DOUBLE_g};
const char* const kDescrs[] = {"<i2", "<f4", ">i2", "<f8", "|u1", "<i4"};

enum FileFlags : std::uint8_t {
  kOtherShape = 1,    // claimed extents instead of the regular ones
  kNoY = 2,           // HDF5: no y; NumPy: no label file
  kTruncate = 4,      // cut the file short
  kRawHeader = 8,     // NumPy: the fuzzer's bytes as the header dictionary
  kNotTheFormat = 16  // the fuzzer's bytes as the whole file
};

std::vector<std::uint64_t> x_shape(std::uint8_t flags, FuzzInput& input) {
  if (!(flags & kOtherShape)) return {4, 4, 4, 4};
  std::vector<std::uint64_t> dims(input.pick(0, 5));
  for (auto& d : dims) d = claimed_extent(input);
  return dims;
}

void write_hdf5_sample(const std::filesystem::path& path, FuzzInput& input) {
  const std::uint8_t flags = input.byte();
  const auto created = hardy::fuzz::create_sample_file(path, input, flags & kNotTheFormat);
  if (!created) return;
  const hid_t file = *created;
  const auto dims = x_shape(flags, input);
  const hid_t x =
      hardy::fuzz::create_fuzzed_dataset(file, "x", std::vector<hsize_t>(dims.begin(), dims.end()),
                                         hardy::fuzz::pick_type(input, kTypes), input);
  if (x >= 0) H5Dclose(x);
  if (!(flags & kNoY)) {
    std::vector<hsize_t> y_dims = {4};
    if (input.byte() >= 220) y_dims = {claimed_extent(input)};
    const hid_t types[] = {H5T_NATIVE_FLOAT, H5T_NATIVE_DOUBLE, H5T_NATIVE_INT16};
    const hid_t y =
        hardy::fuzz::create_fuzzed_dataset(file, "y", y_dims, types[input.byte() % 3], input);
    if (y >= 0) H5Dclose(y);
  }
  H5Fclose(file);
  if (flags & kTruncate) hardy::fuzz::truncate_file(path, input);
}

// A .npy file: NumPy's header for `descr` and `dims` (or the fuzzer's), then `bytes` of data
// from the fuzzer (zeros once it has run out).
void write_npy(const std::filesystem::path& path, std::uint8_t flags, const std::string& descr,
               const std::vector<std::uint64_t>& dims, std::size_t bytes, FuzzInput& input) {
  std::string dict;
  if (flags & kRawHeader) {
    dict = input.text(200);
  } else {
    dict = "{'descr': '" + descr +
           "', 'fortran_order': " + (input.byte() >= 240 ? "True" : "False") + ", 'shape': (";
    for (auto d : dims) dict += std::to_string(d) + ", ";
    dict += "), }";
  }
  while ((10 + dict.size() + 1) % 64) dict += ' ';
  dict += '\n';
  std::string file = "\x93NUMPY";
  file += static_cast<char>(input.byte() >= 250 ? 2 + input.byte() % 3 : 1);
  file += '\0';
  file += static_cast<char>(dict.size() & 0xff);
  file += static_cast<char>(dict.size() >> 8);
  file += dict;
  for (std::size_t k = 0; k < bytes; ++k) file += static_cast<char>(input.byte());
  hardy::fuzz::write_file(path, file);
}

void write_numpy_sample(const std::filesystem::path& dir, const std::string& name,
                        FuzzInput& input) {
  const std::uint8_t flags = input.byte();
  const auto data = dir / (name + "_data.npy");
  if (flags & kNotTheFormat) {
    hardy::fuzz::write_file(data, input.text(64));
  } else {
    const auto dims = x_shape(flags, input);
    std::uint64_t elements = 1;
    for (auto d : dims) elements = d > 4096 ? 4097 : elements * d;  // bytes written: capped
    write_npy(data, flags, kDescrs[input.byte() % std::size(kDescrs)], dims,
              static_cast<std::size_t>(std::min<std::uint64_t>(elements, 4096)) * 2, input);
    if (flags & kTruncate) hardy::fuzz::truncate_file(data, input);
  }
  if (!(flags & kNoY)) {
    const std::uint8_t label_flags = input.byte() & (kRawHeader | kOtherShape);
    const std::vector<std::uint64_t> dims = label_flags & kOtherShape
                                                ? std::vector<std::uint64_t>{claimed_extent(input)}
                                                : std::vector<std::uint64_t>{4};
    write_npy(dir / (name + "_label.npy"), label_flags,
              kDescrs[(1 + input.byte()) % std::size(kDescrs)], dims, 16, input);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hardy;
  fuzz::silence_hdf5_errors();
  FuzzInput input(data, size);
  const auto root = fuzz::fresh_split_root("cosmoflow");
  const bool numpy = input.byte() & 1;
  const int files = static_cast<int>(input.pick(1, 3));
  for (int k = 0; k < files; ++k) {
    const std::string name = "univ-" + std::to_string(k);
    if (numpy)
      write_numpy_sample(root / "train", name, input);
    else
      write_hdf5_sample(root / "train" / (name + ".h5"), input);
  }
  fuzz::accepts("dataset", [&] {
    const core::CosmoFlowDataset dataset(root, "train");
    const core::SampleShape shape = dataset.shape();
    // What the trainer allocates for one sample.
    std::vector<float> fields(shape.field_elements());
    std::vector<std::int32_t> labels(shape.label_elements());
    for (std::size_t index = 0; index < dataset.size(); ++index) {
      const bool first = fuzz::accepts("load", [&] { dataset.load(index, fields, labels); });
      if (fuzz::accepts("load again", [&] { dataset.load(index, fields, labels); }) != first)
        fuzz::broken_promise("a second load of a sample gave another verdict than the first");
    }
  });
  // The header parser on the fuzzer's remaining bytes as they are.
  fuzz::accepts("npy header", [&] { core::parse_npy_header(input.rest()); });
  return 0;
}
