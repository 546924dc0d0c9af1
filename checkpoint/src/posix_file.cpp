#include "posix_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/private_tree.hpp"

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

PosixFile PosixFile::create(const std::filesystem::path& path, mode_t mode) {
  return PosixFile(core::create_exclusive_file(path, mode), path);
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

void PosixFile::write_at(std::uint64_t offset, std::span<const Piece> pieces) {
  std::size_t first = 0;  // the piece being written
  std::size_t done = 0;   // bytes of it already written
  std::vector<iovec> vectors;
  while (first < pieces.size()) {
    if (done == pieces[first].bytes.size()) {
      ++first;
      done = 0;
      continue;
    }
    // Write what the injected budget allows, as a disk that fills up midway would.
    std::uint64_t allowed = std::numeric_limits<std::uint64_t>::max();
    if (fail_after_) allowed = *fail_after_ > written_ ? *fail_after_ - written_ : 0;
    vectors.clear();
    for (std::size_t i = first, skip = done;
         i < pieces.size() && vectors.size() < IOV_MAX && allowed > 0; ++i, skip = 0) {
      const auto bytes = pieces[i].bytes.subspan(skip);
      const std::size_t length =
          static_cast<std::size_t>(std::min<std::uint64_t>(bytes.size(), allowed));
      vectors.push_back({const_cast<std::byte*>(bytes.data()), length});
      allowed -= length;
    }
    const bool injected = vectors.empty();
    ssize_t result = -1;
    if (injected)
      errno = ENOSPC;
    else
      result = ::pwritev(fd_, vectors.data(), static_cast<int>(vectors.size()),
                         static_cast<off_t>(offset));
    if (result < 0) {
      if (errno == EINTR) continue;
      throw IoError(fmt::format(
          "writing {} into {} failed after {} of its {} bytes: {}{}", pieces[first].what,
          path_.string(), done, pieces[first].bytes.size(), std::strerror(errno),
          injected ? fmt::format(" (injected by {})", kFailAfterVariable) : ""));
    }
    offset += static_cast<std::uint64_t>(result);
    written_ += static_cast<std::uint64_t>(result);
    for (auto left = static_cast<std::size_t>(result); left > 0;) {  // step past what was written
      const std::size_t step = std::min(left, pieces[first].bytes.size() - done);
      done += step;
      left -= step;
      if (done == pieces[first].bytes.size() && left > 0) {
        ++first;
        done = 0;
      }
    }
  }
}

void PosixFile::extend_to(std::uint64_t bytes) {
  struct stat info {};
  if (::fstat(fd_, &info) != 0)
    throw IoError(fmt::format("cannot stat {}: {}", path_.string(), std::strerror(errno)));
  if (static_cast<std::uint64_t>(info.st_size) < bytes &&
      ::ftruncate(fd_, static_cast<off_t>(bytes)) != 0)
    throw IoError(fmt::format("cannot extend {} to {} bytes: {}", path_.string(), bytes,
                              std::strerror(errno)));
}

void PosixFile::sync() {
  if (::fsync(fd_) != 0)
    throw IoError(fmt::format("cannot sync {}: {}", path_.string(), std::strerror(errno)));
}

void PosixFile::close() {
  const int fd = std::exchange(fd_, -1);
  if (fd >= 0 && ::close(fd) != 0)
    throw IoError(fmt::format("closing {} failed: {}", path_.string(), std::strerror(errno)));
}

}  // namespace detail

}  // namespace hardy::checkpoint
