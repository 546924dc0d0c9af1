#include "hardy/core/support/atomic_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "hardy/core/support/error.hpp"

namespace hardy::core {

void fsync_path(const std::filesystem::path& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0)
    throw IoError(
        fmt::format("cannot open {} to sync it: {}", path.string(), std::strerror(errno)));
  const int result = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (result != 0)
    throw IoError(fmt::format("cannot sync {}: {}", path.string(), std::strerror(saved)));
}

void write_atomically(const std::filesystem::path& path,
                      const std::function<void(const std::filesystem::path&)>& write) {
  const std::filesystem::path temporary = path.string() + ".tmp";
  try {
    write(temporary);
    fsync_path(temporary, false);
    std::error_code error;
    std::filesystem::rename(temporary, path, error);
    if (error)
      throw IoError(fmt::format("cannot rename {} to {}: {}", temporary.string(), path.string(),
                                error.message()));
    fsync_path(path.parent_path().empty() ? "." : path.parent_path(), true);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw;
  }
}

}  // namespace hardy::core
