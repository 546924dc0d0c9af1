#pragma once
// Files that appear complete or not at all, and stay so across a crash of the machine: written
// under a temporary name, fsynced, renamed into place, and the directory fsynced (the rename is
// durable only then). The one implementation for every layer: datasets, checkpoints, models,
// config.ini and the supervisor's files.
#include <filesystem>
#include <functional>

namespace hardy::core {

// Writes `path` by calling `write(temporary_path)` and then, only if that succeeded, fsyncing the
// file, renaming it over `path` and fsyncing the directory; throws IoError. On failure the
// temporary file (`path` + ".tmp") is removed and whatever was at `path` before stays untouched.
void write_atomically(const std::filesystem::path& path,
                      const std::function<void(const std::filesystem::path&)>& write);

// Opens path (a directory when `directory`) and fsyncs it; throws IoError.
void fsync_path(const std::filesystem::path& path, bool directory);

}  // namespace hardy::core
