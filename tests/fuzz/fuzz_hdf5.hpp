#pragma once
// HDF5 writing the structure-aware fuzz targets share (they build their files through HDF5).
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"

namespace hardy::fuzz {

// One of `types` (pointers to HDF5's type globals, which H5open sets), as the fuzzer picks.
inline hid_t pick_type(FuzzInput& input, std::span<const hid_t* const> types) {
  H5open();
  return *types[input.byte() % types.size()];
}

// Sets a fixed-length string attribute, replacing one of that name.
inline void write_string_attribute(hid_t object, const char* name, const std::string& value) {
  if (H5Aexists(object, name) > 0) H5Adelete(object, name);
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, std::max<std::size_t>(1, value.size()));
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attribute = H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attribute, type, value.empty() ? "" : value.data());
  H5Aclose(attribute);
  H5Sclose(space);
  H5Tclose(type);
}

// Sets a scalar attribute of HDF5 type `type` (which `value` must be), replacing one of that name.
template <class T>
void write_scalar_attribute(hid_t object, const char* name, hid_t type, const T& value) {
  if (H5Aexists(object, name) > 0) H5Adelete(object, name);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attribute = H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attribute, type, &value);
  H5Aclose(attribute);
  H5Sclose(space);
}

// A dataset extent for a fuzzer to claim: mostly small real ones, sometimes edges and claims far
// beyond any file (which a reader must refuse before allocating for them).
inline hsize_t claimed_extent(FuzzInput& input) {
  static constexpr hsize_t kChoices[] = {0, 1, 2, 3, 4, 5, 8, 16, 1u << 20, 1ull << 31, 1ull << 40};
  const std::uint8_t choice = input.byte();
  return choice < 200 ? 1 + choice % 6 : kChoices[choice % std::size(kChoices)];
}

// HDF5 prints its error stack for every call that fails, and the targets make it fail on
// purpose: once per process, before the first input.
inline void silence_hdf5_errors() {
  static const bool silenced = H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) >= 0;
  (void)silenced;
}

// A dataset of the given extents and type, stored as the fuzzer chooses (contiguous, chunked,
// compressed, allocated early); small ones are filled with the fuzzer's bytes (all zeros once it
// has run out). Returns the open dataset for the caller to finish and close, or a negative id
// when HDF5 refuses the dataset.
inline hid_t create_fuzzed_dataset(hid_t parent, const char* name, const std::vector<hsize_t>& dims,
                                   hid_t type, FuzzInput& input) {
  enum StorageFlags : std::uint8_t { kChunked = 1, kCompressed = 2, kEarlyAllocation = 4 };
  hsize_t elements = 1;
  bool overflow = false;
  for (hsize_t d : dims) {
    overflow |= d != 0 && elements > (hsize_t{1} << 62) / d;
    elements *= d;
  }
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
  H5Pclose(properties);
  H5Sclose(space);
  return dataset;
}

// A sample file as the fuzzer chose it: its bytes (after `magic`, the start of another format)
// when `garbage`, else a new HDF5 file, returned open.
inline std::optional<hid_t> create_sample_file(const std::filesystem::path& path, FuzzInput& input,
                                               bool garbage, std::string_view magic = {}) {
  if (garbage) {
    write_file(path, std::string(magic) + input.text(64));
    return std::nullopt;
  }
  return H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
}

// Cuts the file to a fraction of its size the fuzzer picks.
inline void truncate_file(const std::filesystem::path& path, FuzzInput& input) {
  std::error_code ignored;
  const auto size = std::filesystem::file_size(path, ignored);
  std::filesystem::resize_file(path, size * input.byte() / 256, ignored);
}

}  // namespace hardy::fuzz
