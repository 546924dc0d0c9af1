#include "hardy/resilience/run_lock.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/core/support/json_fields.hpp"
#include "hardy/core/support/process_info.hpp"

namespace hardy::resilience {

using core::host_name;
using core::iso_time;
using core::read_field;
using core::unix_time;

namespace {

std::string random_token() {
  std::random_device device;
  return fmt::format("{:08x}{:08x}{:08x}{:08x}", device(), device(), device(), device());
}

std::string read_all(int fd) {
  std::string text;
  std::array<char, 512> buffer{};
  for (off_t at = 0;;) {
    const ssize_t got = ::pread(fd, buffer.data(), buffer.size(), at);
    if (got <= 0) break;
    text.append(buffer.data(), static_cast<std::size_t>(got));
    at += got;
  }
  return text;
}

// "hardy run (pid 4711 on node07, since 2026-11-26T18:00:00Z)", from what the holder wrote.
std::string describe_holder(const std::string& text) {
  const auto record = nlohmann::json::parse(text, nullptr, false);
  const auto holder = read_field<std::string>(record, "holder");
  if (!holder) return "another process (it has not written its name yet)";
  return fmt::format("{} (pid {} on {}, since {})", *holder,
                     read_field<long>(record, "pid").value_or(0),
                     read_field<std::string>(record, "host").value_or("?"),
                     read_field<std::string>(record, "since").value_or("?"));
}

bool flock_unsupported(int error) {
  return error == ENOLCK || error == ENOSYS || error == EOPNOTSUPP || error == EINVAL;
}

}  // namespace

std::filesystem::path run_lock_file(const std::filesystem::path& run_dir) {
  return run_dir / "lock";
}

RunDirectoryLock::RunDirectoryLock(const std::filesystem::path& run_dir, std::string_view holder)
    : token_(random_token()) {
  const auto path = run_lock_file(run_dir);
  // Not inherited by the launcher and its ranks: the lock is this process's.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0)
    throw IoError(fmt::format("cannot open the run directory's lock {}: {}", path.string(),
                              errno == ELOOP ? "it is a symbolic link" : std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EWOULDBLOCK) {
      const std::string who = describe_holder(read_all(fd_));
      ::close(fd_);
      fd_ = -1;
      throw InvalidArgument(fmt::format(
          "run directory {} is in use: {} holds {}; wait for that run to end (or cancel it), or "
          "choose another --run-dir",
          run_dir.string(), who, path.string()));
    }
    if (!flock_unsupported(error)) {
      ::close(fd_);
      fd_ = -1;
      throw IoError(fmt::format("cannot lock {}: {}", path.string(), std::strerror(error)));
    }
    caveat_ = fmt::format(
        "the file system of {} does not lock files (flock: {}), so nothing stops a second run in "
        "the same directory",
        run_dir.string(), std::strerror(error));
  }
  const std::string text = nlohmann::json{{"holder", holder},
                                          {"pid", ::getpid()},
                                          {"host", host_name()},
                                          {"since", iso_time(unix_time())},
                                          {"token", token_}}
                               .dump() +
                           "\n";
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    throw IoError(fmt::format("cannot write {}: {}", path.string(), std::strerror(error)));
  }
}

RunDirectoryLock::~RunDirectoryLock() {
  // The file stays: removing it would let a process that opened it a moment ago lock a file
  // nobody else can find any more.
  if (fd_ >= 0) ::close(fd_);
}

bool RunDirectoryLock::holds(const std::filesystem::path& run_dir, std::string_view token) {
  const int fd = ::open(run_lock_file(run_dir).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const auto record = nlohmann::json::parse(read_all(fd), nullptr, false);
  ::close(fd);
  return !token.empty() && read_field<std::string>(record, "token") == token;
}

bool run_is_over(const std::filesystem::path& run_dir) {
  std::ifstream events(run_dir / "events.jsonl");
  bool over = false;
  for (std::string line; std::getline(events, line);) {
    // Only the supervisor's own two kinds matter; most lines are neither.
    if (line.find("\"supervisor_") == std::string::npos) continue;
    const auto record = nlohmann::json::parse(line, nullptr, false);
    const auto event = core::read_field<std::string>(record, "event");
    if (event == "supervisor_started") over = false;
    if (event == "supervisor_finished") over = true;
  }
  return over;
}

}  // namespace hardy::resilience
