#include "hardy/comm/mpi/segments.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <ctime>
#include <fstream>
#include <regex>
#include <set>
#include <string>

namespace hardy::comm {

namespace {

// Every file some process maps, as /proc/PID/maps names it.
std::set<std::string> mapped_files() {
  std::set<std::string> mapped;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const std::string pid = entry.path().filename().string();
    if (pid.empty() || !std::isdigit(static_cast<unsigned char>(pid.front()))) continue;
    std::ifstream maps(entry.path() / "maps");  // another user's: unreadable, skipped
    for (std::string line; std::getline(maps, line);) {
      const auto slash = line.find('/');
      if (slash != std::string::npos) mapped.insert(line.substr(slash));
    }
  }
  return mapped;
}

}  // namespace

std::vector<RemovedSegment> remove_orphaned_mpi_segments(const std::filesystem::path& directory,
                                                         std::chrono::seconds min_age) {
  std::vector<RemovedSegment> removed;
  std::error_code error;
  const auto real = std::filesystem::weakly_canonical(directory, error);  // as maps names it
  if (error) return removed;
  const uid_t uid = ::geteuid();
  const std::regex own(fmt::format(R"(sm_segment\..+\.{}\.[0-9a-f]+\.[0-9]+)", uid));
  const int dir = ::open(real.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return removed;
  std::vector<std::string> candidates;
  const std::time_t now = std::time(nullptr);
  if (DIR* listing = ::fdopendir(::dup(dir))) {
    while (const dirent* entry = ::readdir(listing)) {
      const std::string name = entry->d_name;
      struct stat info {};
      if (!std::regex_match(name, own) ||
          ::fstatat(dir, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(info.st_mode) ||
          info.st_uid != uid || now - info.st_mtime < min_age.count())
        continue;
      candidates.push_back(name);
    }
    ::closedir(listing);
  }
  if (!candidates.empty()) {
    const auto mapped = mapped_files();
    for (const auto& name : candidates) {
      const auto path = real / name;
      struct stat info {};
      if (mapped.count(path.string()) ||
          ::fstatat(dir, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0 ||
          ::unlinkat(dir, name.c_str(), 0) != 0)
        continue;
      removed.push_back({path, static_cast<std::uintmax_t>(info.st_blocks) * 512});
    }
  }
  ::close(dir);
  return removed;
}

}  // namespace hardy::comm
