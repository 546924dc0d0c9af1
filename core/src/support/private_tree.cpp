#include "hardy/core/support/private_tree.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

namespace hardy::core {

namespace fs = std::filesystem;

namespace {

class Directory {
 public:
  explicit Directory(int fd) : fd_(fd) {}
  Directory(Directory&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Directory& operator=(Directory&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Directory() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string mode_text(mode_t mode) { return fmt::format("{:04o}", mode & 07777); }

struct stat status_of(const Directory& dir, const fs::path& path) {
  struct stat info {};
  if (::fstat(dir.get(), &info) != 0)
    throw IoError(fmt::format("cannot stat {}: {}", path.string(), std::strerror(errno)));
  return info;
}

// Why `name` in `parent` could not be opened as a directory without following a link.
[[noreturn]] void refuse_unopenable(const Directory& parent, const std::string& name,
                                    const fs::path& path, int error) {
  struct stat info {};
  if (::fstatat(parent.get(), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(info.st_mode))
      throw UnsafeDirectory(
          fmt::format("{} is a symbolic link (uid {}); hardy never follows one in "
                      "its node-local tree",
                      path.string(), info.st_uid));
    if (!S_ISDIR(info.st_mode))
      throw UnsafeDirectory(fmt::format("{} is not a directory", path.string()));
  }
  throw IoError(
      fmt::format("cannot open the directory {}: {}", path.string(), std::strerror(error)));
}

// An ancestor of the tree: root's or this user's, and sticky when others may write into it.
Directory open_ancestor(const Directory& parent, const std::string& name, const fs::path& path) {
  const uid_t me = ::geteuid();
  struct stat link {};
  if (::fstatat(parent.get(), name.c_str(), &link, AT_SYMLINK_NOFOLLOW) != 0)
    throw IoError(fmt::format("cannot stat {}: {}", path.string(), std::strerror(errno)));
  if (S_ISLNK(link.st_mode) && link.st_uid != 0 && link.st_uid != me)
    throw UnsafeDirectory(
        fmt::format("{} is a symbolic link owned by uid {}, neither root nor this user (uid {})",
                    path.string(), link.st_uid, me));
  // Following a link here is safe: its owner is trusted, and so is (checked next) its target.
  const int fd = ::openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) refuse_unopenable(parent, name, path, errno);
  Directory dir(fd);
  const struct stat info = status_of(dir, path);
  if (info.st_uid != 0 && info.st_uid != me)
    throw UnsafeDirectory(
        fmt::format("{} (above the tree) is owned by uid {}, neither root nor this "
                    "user (uid {})",
                    path.string(), info.st_uid, me));
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (info.st_mode & S_ISVTX) == 0)
    throw UnsafeDirectory(fmt::format(
        "{} (above the tree) is writable by other users and not sticky (mode {}): they could "
        "replace what is below it",
        path.string(), mode_text(info.st_mode)));
  return dir;
}

// A directory of the tree itself: this user's, a real directory, writable by nobody else.
// Returns an invalid Directory (-1) when it is missing and not to be created.
Directory open_owned(const Directory& parent, const std::string& name, const fs::path& path,
                     bool create) {
  int fd = ::openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    if (!create) return Directory(-1);
    if (::mkdirat(parent.get(), name.c_str(), 0700) != 0 && errno != EEXIST)
      throw IoError(
          fmt::format("cannot create the directory {}: {}", path.string(), std::strerror(errno)));
    fd = ::openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0) refuse_unopenable(parent, name, path, errno);
  Directory dir(fd);
  const struct stat info = status_of(dir, path);
  const uid_t me = ::geteuid();
  if (info.st_uid != me)
    throw UnsafeDirectory(fmt::format("{} is owned by uid {}, not by this user (uid {})",
                                      path.string(), info.st_uid, me));
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    throw UnsafeDirectory(fmt::format("{} is writable by other users (mode {})", path.string(),
                                      mode_text(info.st_mode)));
  return dir;
}

std::vector<std::string> components(const fs::path& path) {
  std::vector<std::string> names;
  for (const fs::path& part : path.relative_path())
    if (!part.empty() && part != ".") names.push_back(part.string());
  return names;
}

}  // namespace

fs::path default_node_local_root() {
  return fs::path("/dev/shm") / fmt::format("hardy-{}", ::geteuid());
}

bool check_private_tree(const fs::path& root, const fs::path& below, bool create) {
  if (below.is_absolute())
    throw InvalidArgument(fmt::format("{} is not a path below a tree", below.string()));
  const auto ancestors = components(fs::absolute(root).lexically_normal());
  if (ancestors.empty())
    throw UnsafeDirectory("/ cannot be a node-local tree: it is not this user's");
  std::vector<std::string> owned = components(below.lexically_normal());
  for (const std::string& name : owned)
    if (name == "..")
      throw InvalidArgument(fmt::format("{} leaves the tree {}", below.string(), root.string()));
  const int top = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (top < 0) throw IoError(fmt::format("cannot open /: {}", std::strerror(errno)));
  Directory dir(top);
  fs::path path = "/";
  std::size_t i = 0;
  // Ancestors as far as they exist; a missing one is created by this user and so owned.
  for (; i + 1 < ancestors.size(); ++i) {
    path /= ancestors[i];
    struct stat info {};
    if (::fstatat(dir.get(), ancestors[i].c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0 &&
        errno == ENOENT)
      break;
    dir = open_ancestor(dir, ancestors[i], path);
  }
  if (i + 1 < ancestors.size()) path = path.parent_path();
  owned.insert(owned.begin(), ancestors.begin() + static_cast<std::ptrdiff_t>(i), ancestors.end());
  for (const std::string& name : owned) {
    path /= name;
    Directory next = open_owned(dir, name, path, create);
    if (next.get() < 0) return false;
    dir = std::move(next);
  }
  return true;
}

int create_exclusive_file(const fs::path& path, mode_t mode) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    throw IoError(fmt::format("cannot replace {}: {}", path.string(), std::strerror(errno)));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0)
    throw IoError(fmt::format("cannot create {}: {}{}", path.string(), std::strerror(errno),
                              errno == EEXIST ? " (it appeared again while being replaced)" : ""));
  return fd;
}

void write_private_file(const fs::path& path, std::string_view text, mode_t mode) {
  const int fd = create_exclusive_file(path, mode);
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                       ::fsync(fd) == 0;
  ::close(fd);
  if (!written) throw IoError(fmt::format("cannot write {}", path.string()));
}

}  // namespace hardy::core
