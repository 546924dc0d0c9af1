#include "posix_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/core/error.hpp"

namespace hardy::checkpoint {

namespace {

constexpr const char* kFailAfterVariable = "HARDY_CHECKPOINT_FAIL_AFTER_BYTES";
// -1: not set by inject_write_failure_after(), the environment decides.
std::atomic<std::int64_t> injected_budget{-1};

}  // namespace

void inject_write_failure_after(std::optional<std::uint64_t> bytes) {
  injected_budget.store(bytes ? static_cast<std::int64_t>(*bytes) : -1);
}

namespace detail {

std::optional<std::uint64_t> injected_failure_budget() {
  if (const std::int64_t budget = injected_budget.load(); budget >= 0)
    return static_cast<std::uint64_t>(budget);
  const char* text = std::getenv(kFailAfterVariable);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long bytes = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || *text == '-')
    throw InvalidArgument(fmt::format("{}='{}' is not a byte count", kFailAfterVariable, text));
  return bytes;
}

PosixFile PosixFile::create(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(fmt::format("cannot create {}: {}", path.string(), std::strerror(errno)));
  return PosixFile(fd, path);
}

PosixFile::PosixFile(int fd, std::filesystem::path path)
    : fd_(fd), path_(std::move(path)), fail_after_(injected_failure_budget()) {}

PosixFile::PosixFile(PosixFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      written_(other.written_),
      fail_after_(other.fail_after_) {}

PosixFile::~PosixFile() {
  if (fd_ >= 0) ::close(fd_);  // an error path: the file is being abandoned anyway
}

void PosixFile::write_at(std::uint64_t offset, std::span<const std::byte> bytes, const std::string& what) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    std::size_t chunk = bytes.size() - done;
    bool injected = false;
    if (fail_after_) {
      // Write what the budget allows, as a disk that fills up midway would.
      const std::uint64_t left = *fail_after_ > written_ ? *fail_after_ - written_ : 0;
      if (left == 0) injected = true;
      chunk = std::min<std::uint64_t>(chunk, left);
    }
    ssize_t result = -1;
    if (injected) {
      errno = ENOSPC;
    } else {
      result = ::pwrite(fd_, bytes.data() + done, chunk, static_cast<off_t>(offset + done));
    }
    if (result < 0) {
      if (errno == EINTR) continue;
      throw IoError(fmt::format("writing {} into {} failed after {} of its {} bytes: {}{}", what, path_.string(),
                                done, bytes.size(), std::strerror(errno),
                                injected ? fmt::format(" (injected by {})", kFailAfterVariable) : ""));
    }
    done += static_cast<std::size_t>(result);
    written_ += static_cast<std::uint64_t>(result);
  }
}

void PosixFile::extend_to(std::uint64_t bytes) {
  struct stat info {};
  if (::fstat(fd_, &info) != 0) throw IoError(fmt::format("cannot stat {}: {}", path_.string(), std::strerror(errno)));
  if (static_cast<std::uint64_t>(info.st_size) < bytes && ::ftruncate(fd_, static_cast<off_t>(bytes)) != 0)
    throw IoError(fmt::format("cannot extend {} to {} bytes: {}", path_.string(), bytes, std::strerror(errno)));
}

void PosixFile::sync() {
  if (::fsync(fd_) != 0) throw IoError(fmt::format("cannot sync {}: {}", path_.string(), std::strerror(errno)));
}

void PosixFile::close() {
  const int fd = std::exchange(fd_, -1);
  if (fd >= 0 && ::close(fd) != 0)
    throw IoError(fmt::format("closing {} failed: {}", path_.string(), std::strerror(errno)));
}

void fsync_path(const std::filesystem::path& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throw IoError(fmt::format("cannot open {} to sync it: {}", path.string(), std::strerror(errno)));
  const int result = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (result != 0) throw IoError(fmt::format("cannot sync {}: {}", path.string(), std::strerror(saved)));
}

}  // namespace detail

}  // namespace hardy::checkpoint
