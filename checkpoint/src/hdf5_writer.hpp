#pragma once
// Writes a list of fields as an HDF5 file whose every byte goes through hardy's own writes:
// HDF5 lays the file out in memory (core driver), hardy writes that metadata image and then each
// field's data at the offset HDF5 reserved for it. HDF5 never writes to the disk itself, so a
// full disk is an ENOSPC from hardy's pwrite (an IoError), never a failed H5Fclose, after which
// HDF5 1.10 keeps a half-closed file that crashes the process at exit.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "hardy/checkpoint/checkpoint_file.hpp"
#include "state_fields.hpp"

namespace hardy::checkpoint::detail {

// Attributes of the root group: fixed-length strings and int32 numbers.
struct RootAttributes {
  std::vector<std::pair<std::string, std::string>> text;
  std::vector<std::pair<std::string, int>> numbers;
};

// Writes `path` (not atomically: callers wrap it in write_atomically). Every dataset gets
// `checksum` (its field's checksum, uint64) and `checksum_algorithm` ("xxh64") attributes.
// Throws IoError naming the file, and the dataset being written when a write fails.
void write_hdf5_file(const std::vector<Field>& fields, const RootAttributes& root,
                     const std::filesystem::path& path, const WriteProgress& progress = {},
                     FileAccess access = FileAccess::shared);

}  // namespace hardy::checkpoint::detail
