#pragma once
// The POSIX side of writing checkpoints: an owned file descriptor whose writes report errno in
// an IoError, fsync of files and directories, and the write-failure injection that tests use to
// simulate a full disk in exactly the path a real one takes.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace hardy::checkpoint::detail {

class PosixFile {
 public:
  // Creates a new file for writing with `mode` (core::create_exclusive_file: whatever was at
  // `path`, a stale temporary or a planted link, is unlinked, never truncated or followed);
  // throws IoError.
  static PosixFile create(const std::filesystem::path& path, mode_t mode);
  PosixFile(PosixFile&& other) noexcept;
  PosixFile& operator=(PosixFile&&) = delete;
  PosixFile(const PosixFile&) = delete;
  ~PosixFile();

  // Bytes to write and what they are (a dataset's path), for error messages.
  struct Piece {
    std::span<const std::byte> bytes;
    std::string_view what;
  };
  // Writes the pieces back to back from offset with as few pwritev calls as the system allows
  // (one per IOV_MAX pieces: many small writes are measurably slower than one large one),
  // retrying short and interrupted writes. Throws IoError with strerror(errno) and the piece
  // being written on failure. Counts the bytes against the injected failure budget, if any.
  void write_at(std::uint64_t offset, std::span<const Piece> pieces);
  // Extends the file to `bytes` (a hole, never written data); never shrinks it.
  void extend_to(std::uint64_t bytes);
  void sync();
  // Closes and throws IoError when close reports an error (NFS reports write errors there).
  void close();

 private:
  PosixFile(int fd, std::filesystem::path path);
  int fd_ = -1;
  std::filesystem::path path_;
  std::uint64_t written_ = 0;
  std::optional<std::uint64_t> fail_after_;  // bytes until the injected ENOSPC
};

// The injected failure budget in force: set by inject_write_failure_after(), else from the
// environment variable HARDY_CHECKPOINT_FAIL_AFTER_BYTES; nullopt when neither is set.
std::optional<std::uint64_t> injected_failure_budget();

}  // namespace hardy::checkpoint::detail
