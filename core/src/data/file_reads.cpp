#include "file_reads.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hardy::core {

FileDescriptor::FileDescriptor(const std::filesystem::path& path)
    : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

std::string read_exactly(int fd, void* buffer, std::size_t bytes, std::uint64_t offset) {
  auto* out = static_cast<char*>(buffer);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::pread(fd, out + done, bytes - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      return fmt::format("cannot read bytes [{}, {}): {}", offset, offset + bytes,
                         std::strerror(errno));
    if (got == 0)
      return fmt::format("is truncated: it ends at byte {}, inside bytes [{}, {}) of a sample",
                         offset + done, offset, offset + bytes);
    done += static_cast<std::size_t>(got);
  }
  return {};
}

}  // namespace hardy::core
