#include "hardy/jobs/run_directory.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "hardy/core/support/error.hpp"

namespace hardy::jobs {

RunDirectory::RunDirectory(std::filesystem::path path) : path_(std::move(path)) {
  std::error_code error;
  std::filesystem::create_directories(checkpoints(), error);
  if (error)
    throw IoError(
        fmt::format("cannot create run directory {}: {}", path_.string(), error.message()));
}

void RunDirectory::write_file(const std::filesystem::path& name, const std::string& text) const {
  const auto target = path_ / name;
  const auto temporary = target.string() + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(fmt::format("cannot create {}: {}", temporary, std::strerror(errno)));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                       ::fsync(fd) == 0;
  const int saved_errno = errno;
  ::close(fd);
  if (!written || std::rename(temporary.c_str(), target.c_str()) != 0) {
    ::unlink(temporary.c_str());
    throw IoError(fmt::format("cannot write {}: {}", target.string(),
                              std::strerror(written ? errno : saved_errno)));
  }
}

}  // namespace hardy::jobs
