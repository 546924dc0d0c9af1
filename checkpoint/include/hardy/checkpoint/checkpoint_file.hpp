#pragma once
// One checkpoint is one self-describing HDF5 file (docs/checkpoint-format.md): /model, /optimizer,
// /train and /job, every dataset with an xxHash64 checksum attribute, and a root manifest that
// lists every dataset with its dtype, shape and checksum. h5ls, h5dump and h5py read it as is.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hardy/checkpoint/training_state.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::checkpoint {

inline constexpr const char* kFormatName = "hardy-checkpoint";
inline constexpr int kFormatVersion = 1;
inline constexpr const char* kChecksumAlgorithm = "xxh64";

// A checkpoint file that exists and is HDF5 but cannot be trusted: truncated, a checksum that
// does not match, a dataset missing, a format version this hardy does not read. The message
// names the file and the problem. An IoError, so code that retries or falls back on a damaged
// file catches it there.
class CorruptCheckpoint : public IoError {
 public:
  using IoError::IoError;
};

// Called while the data of a checkpoint is being written, with the fraction of its bytes
// written so far (0 < fraction <= 1), before the file is complete: tests kill the writer here.
using WriteProgress = std::function<void(double fraction)>;

// Who may read the files hardy creates: `shared` (mode 0644 less the umask: the run directory's
// checkpoints, which a project may share) or `owner_only` (0600: node-local snapshots, in a tree
// on a node that other users share).
enum class FileAccess { shared, owner_only };

// Writes `state` to `path` atomically: everything goes to "<path>.tmp", which is fsynced and
// renamed to `path`, and the directory is fsynced. The .tmp file is created anew (O_EXCL), never
// through a link or a file already there. Returns the file's size in bytes. Any failure
// (a full disk included) throws IoError naming the file and the cause, removes the .tmp file and
// leaves whatever was at `path` untouched.
std::uint64_t write_checkpoint_file(const TrainingState& state, const std::filesystem::path& path,
                                    const WriteProgress& progress = {},
                                    FileAccess access = FileAccess::shared);

// One dataset as the manifest lists it.
struct DatasetInfo {
  std::string path;                  // "/model/encoder.stem.conv.weight"
  std::string dtype;                 // "f32", "f64", "i64", "u64" or "str" (fixed-length UTF-8)
  std::vector<std::uint64_t> shape;  // empty for a scalar
  std::uint64_t checksum = 0;        // xxHash64 of the stored bytes
};

struct CheckpointContents {
  TrainingState state;
  std::vector<DatasetInfo> datasets;  // in manifest order
  int format_version = 0;
  std::uint64_t file_bytes = 0;
};

// Reads and validates a checkpoint: the format name, the format version, the manifest, every
// dataset's presence, dtype, shape and checksum. Throws InvalidArgument when the file does not
// exist or is not HDF5 at all, CorruptCheckpoint for everything else that is wrong with it.
// A node-local snapshot's slot file (snapshot_file.hpp) is read as read_snapshot_file says.
CheckpointContents read_checkpoint_file(const std::filesystem::path& path);
TrainingState read_checkpoint(const std::filesystem::path& path);

// Fault injection for tests. After `bytes` bytes of a checkpoint's data have been written, the
// next write fails as if the disk were full (ENOSPC), in the same code path as a real full disk.
// Otherwise (never called, or called with std::nullopt) the environment variable
// HARDY_CHECKPOINT_FAIL_AFTER_BYTES, read at each write, does the same when it is set.
void inject_write_failure_after(std::optional<std::uint64_t> bytes);

}  // namespace hardy::checkpoint
