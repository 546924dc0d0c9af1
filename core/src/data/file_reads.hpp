#pragma once
// What the readers that skip a library for their sample bytes (deepcam.cpp, packed_samples.cpp)
// share: a read-only descriptor that closes itself, and a positioned read of an exact count.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace hardy::core {

// A file descriptor (read-only, close-on-exec) that closes itself; get() < 0 when the open
// failed (errno says why).
class FileDescriptor {
 public:
  explicit FileDescriptor(const std::filesystem::path& path);
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads exactly `bytes` at `offset`; returns an empty string or why it could not (for a
// BadSample's reason: "cannot read ...", "is truncated: ...").
std::string read_exactly(int fd, void* buffer, std::size_t bytes, std::uint64_t offset);

}  // namespace hardy::core
