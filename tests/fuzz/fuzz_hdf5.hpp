#pragma once
// HDF5 writing the structure-aware fuzz targets share (they build their files through HDF5).
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>

#include "fuzz_support.hpp"

namespace hardy::fuzz {

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

// A dataset extent for a fuzzer to claim: mostly small real ones, sometimes edges and claims far
// beyond any file (which a reader must refuse before allocating for them).
inline hsize_t claimed_extent(FuzzInput& input) {
  static constexpr hsize_t kChoices[] = {0, 1, 2, 3, 4, 5, 8, 16, 1u << 20, 1ull << 31, 1ull << 40};
  const std::uint8_t choice = input.byte();
  return choice < 200 ? 1 + choice % 6 : kChoices[choice % std::size(kChoices)];
}

}  // namespace hardy::fuzz
