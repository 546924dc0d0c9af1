// The ClimateNet layout (core/data/climatenet.hpp) as a user's directory may hold it: netCDF-4
// files whose variables have any shapes (with and without the time axis), types, storage
// (contiguous, chunked, compressed), netCDF attributes (scale_factor, add_offset, _FillValue, of
// any type), missing variables, any values, truncated files, netCDF-3 and non-HDF5 files; a
// statistics file that is missing (computed from the files), not JSON, or with missing,
// non-numeric or degenerate fields; and any reader options (variables, crop, downsampling). The
// target writes the directory with HDF5 itself (a netCDF-4 file is an HDF5 file with the variables
// as datasets at its root), opens the split and loads every sample into buffers of the shape the
// reader reports, as the trainer does. A rejection must be one of hardy's errors with a message
// (BadSample for one file's problem); a claimed shape the files do not hold must be refused
// before anything is allocated for it.
//
// An empty input is a valid dataset (every choice's zero is the regular one: all variables,
// float32, contiguous, zeros, statistics computed), so the seeds in corpus/climatenet are short.
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "fuzz_climate_layout.hpp"
#include "fuzz_hdf5.hpp"
#include "fuzz_support.hpp"
#include "hardy/core/data/climatenet.hpp"

namespace {

using hardy::fuzz::claimed_extent;
using hardy::fuzz::FuzzInput;

// float32 (the regular type of a field) first; LABELS is int64 in the release.
hid_t pick_type(FuzzInput& input, bool labels) {
  static const hid_t* const kTypes[] = {&H5T_NATIVE_FLOAT_g,  &H5T_NATIVE_INT64_g,
                                        &H5T_NATIVE_DOUBLE_g, &H5T_IEEE_F32BE_g,
                                        &H5T_NATIVE_INT32_g,  &H5T_NATIVE_UINT8_g};
  H5open();
  const std::uint8_t choice = input.byte();
  return labels && choice == 0 ? H5T_NATIVE_INT64 : *kTypes[choice % std::size(kTypes)];
}

enum AttributeFlags : std::uint8_t { kScale = 1, kOffset = 2, kFill = 4, kStringScale = 8 };

void add_attribute(hid_t dataset, const char* name, FuzzInput& input) {
  const double value =
      static_cast<double>(static_cast<std::int64_t>(input.u64() % 2001) - 1000) / 8;
  hardy::fuzz::write_scalar_attribute(dataset, name, H5T_NATIVE_DOUBLE, value);
}

// A variable of the given extents and the fuzzer's type, storage and attributes; small ones are
// filled with the fuzzer's bytes (all zeros when it has run out: valid fields, background).
void add_variable(hid_t file, const char* name, const std::vector<hsize_t>& dims, bool labels,
                  FuzzInput& input) {
  const hid_t dataset =
      hardy::fuzz::create_fuzzed_dataset(file, name, dims, pick_type(input, labels), input);
  if (dataset < 0) return;
  const std::uint8_t attributes = input.byte();
  if (attributes & kScale) add_attribute(dataset, "scale_factor", input);
  if (attributes & kOffset) add_attribute(dataset, "add_offset", input);
  if (attributes & kFill) add_attribute(dataset, "_FillValue", input);
  if ((attributes & kStringScale) && !(attributes & kScale))
    hardy::fuzz::write_string_attribute(dataset, "scale_factor", input.text(8));
  H5Dclose(dataset);
}

enum FileFlags : std::uint8_t { kTruncate = 1, kNotHdf5 = 2, kNetcdf3 = 4 };

void write_sample(const std::filesystem::path& path, FuzzInput& input) {
  const std::uint8_t flags = input.byte();
  const auto created = hardy::fuzz::create_sample_file(
      path, input, flags & kNotHdf5,
      flags & kNetcdf3 ? std::string_view("CDF\x01", 4) : std::string_view());
  if (!created) return;
  const hid_t file = *created;
  const hsize_t height = claimed_extent(input), width = claimed_extent(input);
  // Each variable: (time = 1, lat, lon) by default, or (lat, lon), or something else.
  auto dims_of = [&](std::uint8_t choice) -> std::vector<hsize_t> {
    if (choice < 200) return {1, height, width};
    if (choice < 230) return {height, width};
    std::vector<hsize_t> dims(input.pick(0, 4));
    for (hsize_t& d : dims) d = claimed_extent(input);
    return dims;
  };
  for (const auto& name : hardy::core::kClimateChannelNames)
    if (input.byte() < 240)
      add_variable(file, std::string(name).c_str(), dims_of(input.byte()), false, input);
  if (input.byte() < 240) add_variable(file, "LABELS", dims_of(input.byte()), true, input);
  H5Fclose(file);
  if (flags & kTruncate) hardy::fuzz::truncate_file(path, input);
}

enum StatsFlags : std::uint8_t {
  kGiven = 1,
  kNotJson = 2,
  kMissingField = 4,
  kZeroStd = 8,
  kTextMean = 16,
  kNoFields = 32
};

// A statistics file for the options, or none (then the reader computes them from the files).
std::filesystem::path write_statistics(const std::filesystem::path& root, FuzzInput& input) {
  const std::uint8_t flags = input.byte();
  if (!(flags & kGiven)) return {};
  const auto path = root / "given-stats.json";
  std::string text;
  if (flags & kNotJson) {
    text = input.text(64);
  } else if (flags & kNoFields) {
    text = R"({"format": "hardy-climatenet-stats"})";
  } else {
    text = R"({"fields": {)";
    const int missing = flags & kMissingField ? input.byte() % 16 : -1;
    bool first = true;
    for (int c = 0; c < 16; ++c) {
      if (c == missing) continue;
      const std::string mean = flags & kTextMean && c == 0 ? "\"x\"" : "1.5";
      const std::string std = flags & kZeroStd && c == 1 ? "0" : "2.0";
      text += (first ? "" : ", ") + std::string("\"") +
              std::string(hardy::core::kClimateChannelNames[c]) + "\": {\"mean\": " + mean +
              ", \"std\": " + std + "}";
      first = false;
    }
    text += "}}";
  }
  hardy::fuzz::write_file(path, text);
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hardy;
  return fuzz::fuzz_split<core::ClimateNetDataset>(
      data, size, "climatenet", [](const std::filesystem::path& root, FuzzInput& input) {
        const int files = static_cast<int>(input.pick(1, 3));
        for (int k = 0; k < files; ++k)
          write_sample(root / "train" / ("data-2003-06-0" + std::to_string(k + 1) + "-01-1.nc"),
                       input);
        core::ClimateNetOptions options;
        options.statistics = write_statistics(root, input);
        return options;
      });
}
