#pragma once
// A run's checkpoints/ directory: ckpt-<step>.h5 files, and `latest`, a relative symbolic link
// to the newest complete one (`h5ls checkpoints/latest` works). `latest` is replaced atomically
// (a new link renamed over it) and only after the file it names was fsynced, renamed into place
// and the directory fsynced, so it never names a missing or partial file. A writer killed at any
// moment leaves at worst a stale ckpt-<step>.h5.tmp, which nothing reads and the next retention
// pass removes.
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/checkpoint/training_state.hpp"

namespace hardy::checkpoint {

inline constexpr const char* kLatestLink = "latest";

// dir / "ckpt-<step>.h5"
std::filesystem::path checkpoint_path(const std::filesystem::path& dir, long step);

struct CheckpointEntry {
  long step = 0;
  std::filesystem::path path;
};
// The ckpt-<step>.h5 files of a directory by ascending step, valid or not (empty when the
// directory does not exist).
std::vector<CheckpointEntry> list_checkpoints(const std::filesystem::path& dir);

// The file `latest` names (which may have disappeared since), or nullopt when there is none.
std::optional<std::filesystem::path> read_latest(const std::filesystem::path& dir);
// Points `latest` at `file` (a file in dir) atomically and fsyncs the directory; throws IoError.
void set_latest(const std::filesystem::path& dir, const std::filesystem::path& file);

// Keep the last `keep_last` checkpoints by step, plus every one whose step is a multiple of
// `keep_every` (0: none of those), plus always the one `latest` names.
struct Retention {
  int keep_last = 3;
  int keep_every = 0;
};
// Deletes the checkpoints the policy does not keep and any stale .tmp file; returns what it
// deleted. Best effort: a file that cannot be deleted stays until the next pass.
// Call it only while no write is in progress in `dir` (its .tmp file would be removed).
std::vector<std::filesystem::path> apply_retention(const std::filesystem::path& dir,
                                                   const Retention& retention);

// A job that resumed from step `step` starts a new timeline: the directory's checkpoints of
// later steps belong to the one it left, and the retention above (which keeps the highest steps)
// would prune the new timeline's instead of them. Deletes them, and `latest` when it names one of
// them; returns what it deleted. Best effort, as apply_retention.
std::vector<std::filesystem::path> discard_checkpoints_newer_than(const std::filesystem::path& dir,
                                                                  long step);

struct SavedCheckpoint {
  std::filesystem::path path;
  std::uint64_t bytes = 0;
  std::vector<std::filesystem::path> removed;  // by retention
};
// Writes ckpt-<state.step>.h5 in dir (created if needed) with write_checkpoint_file, then points
// `latest` at it, then applies the retention policy. On failure (IoError) the previous
// checkpoints and `latest` are untouched.
SavedCheckpoint save_checkpoint(const TrainingState& state, const std::filesystem::path& dir,
                                const Retention& retention = {}, const WriteProgress& progress = {},
                                FileAccess access = FileAccess::shared);

// The newest checkpoint that reads and validates: first the one `latest` names, then the others
// by descending step. Every one passed over adds a line to *skipped (when given) saying which
// file and why ("ckpt-20.h5: checksum mismatch in /model/...", "latest names ckpt-30.h5, which
// does not exist"). nullopt when none is valid or the directory does not exist. `unfit` (when
// given) passes over a valid one too: it returns why the state must not be used, nullopt when
// it may ("ckpt-20.h5 is not restored: it belongs to run ...").
struct ValidCheckpoint {
  std::filesystem::path path;
  TrainingState state;
};
using UnfitReason = std::function<std::optional<std::string>(const TrainingState&)>;
std::optional<ValidCheckpoint> load_latest_valid(const std::filesystem::path& dir,
                                                 std::vector<std::string>* skipped = nullptr,
                                                 const UnfitReason& unfit = {});
// The same, for callers that read the file later (reads and validates the file once here).
std::optional<std::filesystem::path> find_latest_valid(const std::filesystem::path& dir,
                                                       std::vector<std::string>* skipped = nullptr);

}  // namespace hardy::checkpoint
