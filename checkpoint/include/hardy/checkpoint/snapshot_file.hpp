#pragma once
// Node-local snapshots as flat files. A snapshot is written every step or every few, on the cores
// that train, so it must cost what copying the state costs and no more: no HDF5 library, no file
// created, renamed or synced per snapshot. Each host directory holds two slot files,
// slot-0.snapshot and slot-1.snapshot, written in turn and kept mapped between snapshots, so a
// snapshot is one copy of the state into pages that already exist, and one hash.
//
// A slot file is a 64-byte header and the state's byte stream (the fields of a checkpoint file,
// as broadcast_state sends them):
//
//   magic "hardy-snapshot" (16 bytes, NUL-padded), format version (u32), header size (u32),
//   step (i64), payload size (u64), the payload's checksum (u64: XXH3-64 of the XXH3-64
//   digests of its 256 KiB pieces, hashed on several cores at once), XXH3-64 of the header so
//   far (u64), completion mark (u64, written last)
//
// The slot being written is marked incomplete before its first byte changes, so a writer killed
// at any moment leaves the other slot, the previous snapshot, intact and the newest valid one;
// the checksums catch anything else. Snapshots only have to outlive the process (node memory does
// not outlive the node), so nothing is fsynced. `hardy ckpt inspect`, `verify` and `diff` and
// `--resume FILE` read slot files like checkpoint files (read_checkpoint_file recognises them).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hardy/checkpoint/checkpoint_directory.hpp"
#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/checkpoint/training_state.hpp"
#include "hardy/core/support/digest.hpp"

namespace hardy::checkpoint {

inline constexpr const char* kSnapshotFormatName = "hardy-snapshot";
inline constexpr int kSnapshotFormatVersion = 1;
inline constexpr const char* kSnapshotChecksumAlgorithm = "xxh3-64";

// Whether the file starts with a snapshot's magic (nothing else is checked).
bool is_snapshot_file(const std::filesystem::path& path);

// Reads and validates a slot file: magic, format version, header checksum, completion mark, size,
// the payload's checksum, then every field as a checkpoint's. Throws InvalidArgument when the
// file does not exist, is not a regular file (a symbolic link is refused, not followed) or is
// not a snapshot, CorruptCheckpoint (naming the file) for everything else. The datasets' checksums
// are the xxHash64 of their bytes, as a checkpoint file's manifest gives them.
CheckpointContents read_snapshot_file(const std::filesystem::path& path);

struct SnapshotEntry {
  std::filesystem::path path;
  std::optional<long> step;  // the header's step; nullopt when the header is not complete
};
// dir / "slot-<slot>.snapshot"
std::filesystem::path snapshot_slot_path(const std::filesystem::path& dir, int slot);
// The slot files of a directory that exist, by ascending step (incomplete ones first), with the
// step their header claims; only the header is read.
std::vector<SnapshotEntry> list_snapshots(const std::filesystem::path& dir);

// The newest slot of `dir` that reads and validates and that `unfit` (when given) does not pass
// over; one line per slot passed over goes to *skipped ("<file>: incomplete: ...", "<file> is not
// restored: ..."). A slot not owned by this user is passed over too. nullopt when none is valid.
std::optional<ValidCheckpoint> load_newest_snapshot(const std::filesystem::path& dir,
                                                    std::vector<std::string>* skipped = nullptr,
                                                    const UnfitReason& unfit = {});

// The writer of one directory's two slots. Not thread-safe: one thread writes (the snapshot
// writer's), and the owner calls the other members only while no write runs.
class SnapshotSlots {
 public:
  static constexpr int kSlots = 2;

  // Reads the headers of the slots already in `dir` (a private tree the caller has checked), so
  // that the first write goes to the older one.
  explicit SnapshotSlots(std::filesystem::path dir);
  ~SnapshotSlots();
  SnapshotSlots(const SnapshotSlots&) = delete;
  SnapshotSlots& operator=(const SnapshotSlots&) = delete;

  // Writes `state` into the slot that does not hold the newest snapshot, creating it (0600, never
  // through a link) or resizing it when the state's size changed. Throws IoError naming the file
  // when it cannot (a full /dev/shm: the space is reserved before the slot is touched); the
  // newest snapshot is then still intact. The inject_write_failure_after() budget applies.
  SavedCheckpoint write(const TrainingState& state);
  // The same, the tensors copied by their backend straight from where they live (the model and
  // optimizer, state_sources()) into the slot, the rest from `scalars` (whose tensor lists are
  // not read): one copy of the state instead of two.
  SavedCheckpoint write(const StateSources& tensors, const TrainingState& scalars);
  // Deletes the slots holding steps after `step` (see NodeLocalSnapshots::discard_newer_than).
  std::vector<std::filesystem::path> discard_newer_than(long step);
  // Unmaps and closes the slots (node memory is given back only when nothing maps the files).
  void close();

  const std::filesystem::path& directory() const { return dir_; }

 private:
  struct Slot {
    int fd = -1;
    std::byte* map = nullptr;
    std::size_t mapped = 0;
    std::optional<long> step;  // of the complete snapshot it holds
  };
  // Opens and sizes the older slot for a payload of `payload` bytes and marks it incomplete;
  // returns its index. finish() writes the header and the completion mark.
  int begin(std::uint64_t payload);
  SavedCheckpoint finish(int slot, long step, std::uint64_t payload, std::uint64_t checksum);
  void open(int slot);
  void reserve(int slot, std::size_t bytes);
  void release(Slot& slot);
  int older_slot() const;

  // The part of the stream before the scalars, for one set of tensors (names and shapes): the
  // encoded description before each tensor's bytes, and their count; `end` where they end.
  struct TensorLayout {
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> model, optimizer;
    std::size_t scalar_count = 0;
    std::vector<std::vector<std::byte>> descriptions;
    std::vector<std::uint64_t> data_bytes;
    std::uint64_t end = 0;
  };
  const TensorLayout& layout_for(const StateSources& tensors, std::size_t scalar_count);

  std::filesystem::path dir_;
  Slot slots_[kSlots];
  TensorLayout layout_;
};

}  // namespace hardy::checkpoint
