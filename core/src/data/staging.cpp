#include "hardy/core/data/staging.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "hardy/core/data/sampler.hpp"
#include "hardy/core/support/digest.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/private_tree.hpp"

namespace fs = std::filesystem;

namespace hardy::core {

std::string staging_node_name(std::string_view host, int place) {
  return fmt::format("{}/{}", host, place);
}

std::uint64_t node_key(std::string_view node_name) {
  return xxhash64(std::as_bytes(std::span(node_name.data(), node_name.size())));
}

fs::path staging_directory(const fs::path& stage_dir, const fs::path& dataset_root,
                           std::string_view host) {
  const auto root = fs::weakly_canonical(dataset_root);
  const auto name = root.filename().empty() ? root.parent_path().filename() : root.filename();
  const std::string text = root.string();
  const auto hash = xxhash64(std::as_bytes(std::span(text.data(), text.size())));
  return stage_dir / std::string(host) /
         fmt::format("{}-{:08x}", name.string(), hash & 0xffffffffu);
}

std::size_t home_node(std::string_view file, std::span<const std::uint64_t> nodes) {
  if (nodes.empty()) throw InvalidArgument("home_node: no nodes to place " + std::string(file));
  const std::uint64_t file_hash = xxhash64(std::as_bytes(std::span(file.data(), file.size())));
  std::size_t best = 0;
  std::uint64_t best_weight = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const std::uint64_t key[2] = {nodes[i], file_hash};
    const std::uint64_t weight = xxhash64(std::as_bytes(std::span(key)));
    if (i == 0 || weight > best_weight || (weight == best_weight && nodes[i] < nodes[best])) {
      best = i;
      best_weight = weight;
    }
  }
  return best;
}

std::vector<std::vector<std::size_t>> place_batch(std::span<const int> home_of_sample,
                                                  std::span<const int> node_of_rank,
                                                  std::span<const double> weights) {
  const int world = static_cast<int>(node_of_rank.size());
  if (world == 0) throw InvalidArgument("place_batch: no ranks");
  std::vector<std::size_t> room(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r)
    room[static_cast<std::size_t>(r)] = shard_of(home_of_sample.size(), r, world, weights).size();
  std::vector<std::vector<std::size_t>> placed(static_cast<std::size_t>(world));
  std::vector<std::size_t> homeless;
  for (std::size_t i = 0; i < home_of_sample.size(); ++i) {
    bool taken = false;
    for (int r = 0; r < world && home_of_sample[i] >= 0 && !taken; ++r) {
      const auto rank = static_cast<std::size_t>(r);
      if (node_of_rank[rank] == home_of_sample[i] && room[rank] > 0) {
        placed[rank].push_back(i);
        --room[rank];
        taken = true;
      }
    }
    if (!taken) homeless.push_back(i);
  }
  std::size_t next_rank = 0;
  for (std::size_t i : homeless) {
    while (room[next_rank] == 0) ++next_rank;  // the rooms add up to the batch: never past world
    placed[next_rank].push_back(i);
    --room[next_rank];
  }
  for (auto& positions : placed) std::sort(positions.begin(), positions.end());
  return placed;
}

namespace {

struct FileStatus {
  bool exists = false;
  std::uint64_t size = 0;
  timespec modified{};
};

FileStatus status_of(const fs::path& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return {};
  return {true, static_cast<std::uint64_t>(info.st_size), info.st_mtim};
}

// A file descriptor closed when it goes out of scope.
class Descriptor {
 public:
  Descriptor(const fs::path& path, int flags, const char* what)
      : fd_(::open(path.c_str(), flags | O_CLOEXEC, 0644)) {
    if (fd_ < 0)
      throw IoError(
          fmt::format("cannot open {} {}: {}", what, path.string(), std::strerror(errno)));
  }
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }
  // close() reports a failed write-back that a destructor would have to swallow.
  void close(const fs::path& path) {
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0)
      throw IoError(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
  }

 private:
  int fd_;
};

// Holds an exclusive advisory lock on DIR/.staging.lock (created 0600, never through a link)
// while this copier stages into DIR. The kernel releases it when its holder dies, so a copier
// that holds it knows that any *.part in DIR was left by one that was killed mid-copy (a rank on
// a node that crashed, a job ended by its launcher), and removes it: otherwise a half-copied
// file whose source has another home now would stay on the node for good.
class DirectoryLock {
 public:
  explicit DirectoryLock(const fs::path& dir)
      : lock_(::open((dir / ".staging.lock").c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
                     0600)) {
    if (lock_.get() < 0)
      throw IoError(fmt::format("cannot open the staging lock in {}: {}", dir.string(),
                                std::strerror(errno)));
    while (::flock(lock_.get(), LOCK_EX) != 0)
      if (errno != EINTR)
        throw IoError(fmt::format("cannot lock the staging directory {}: {}", dir.string(),
                                  std::strerror(errno)));
  }

 private:
  Descriptor lock_;
};

// Removes the *.part files a killed copier left in dir (whose lock this copier holds).
void remove_stale_parts(const fs::path& dir) {
  std::error_code error;
  for (fs::directory_iterator entry(dir, error), end; !error && entry != end;
       entry.increment(error)) {
    std::error_code ignored;
    if (entry->path().extension() == ".part" &&
        entry->symlink_status(ignored).type() == fs::file_type::regular)
      fs::remove(entry->path(), ignored);
  }
}

// Copies in the kernel where it can (copy_file_range: no trip through user memory, and server
// side on NFS 4.2 and Lustre), otherwise through a buffer. Returns the bytes copied.
std::uint64_t copy_contents(int from, int to, std::uint64_t size, const StageCopy& copy) {
  std::uint64_t done = 0;
  bool in_kernel = true;
  std::vector<char> buffer;
  while (done < size) {
    const std::size_t chunk =
        static_cast<std::size_t>(std::min<std::uint64_t>(size - done, 64u << 20));
    ssize_t moved = -1;
    if (in_kernel) {
      moved = ::copy_file_range(from, nullptr, to, nullptr, chunk, 0);
      if (moved < 0 &&
          (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
        in_kernel = false;
        continue;
      }
    } else {
      buffer.resize(8u << 20);
      moved = ::read(from, buffer.data(), std::min(chunk, buffer.size()));
      for (ssize_t written = 0; moved > 0 && written < moved;) {
        const ssize_t n =
            ::write(to, buffer.data() + written, static_cast<std::size_t>(moved - written));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0)
          throw IoError(
              fmt::format("cannot write {}: {}", copy.destination.string(), std::strerror(errno)));
        written += n;
      }
    }
    if (moved < 0 && errno == EINTR) continue;
    if (moved < 0)
      throw IoError(fmt::format("cannot copy {} to {}: {}", copy.source.string(),
                                copy.destination.string(), std::strerror(errno)));
    if (moved == 0)
      throw IoError(
          fmt::format("{} ended after {} of {} bytes while it was copied (changed "
                      "under the copy?)",
                      copy.source.string(), done, size));
    done += static_cast<std::uint64_t>(moved);
  }
  return done;
}

// Whether two files of `size` bytes hold the same bytes; false when either cannot be read.
bool same_contents(const fs::path& a, const fs::path& b, std::uint64_t size) {
  const int fa = ::open(a.c_str(), O_RDONLY | O_CLOEXEC);
  if (fa < 0) return false;
  Descriptor first(fa);
  const int fb = ::open(b.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fb < 0) return false;
  Descriptor second(fb);
  std::vector<char> x(4u << 20), y(4u << 20);
  for (std::uint64_t done = 0; done < size;) {
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(size - done, x.size()));
    const ssize_t n = ::pread(first.get(), x.data(), want, static_cast<off_t>(done));
    const ssize_t m = ::pread(second.get(), y.data(), want, static_cast<off_t>(done));
    if (n <= 0 || n != m || std::memcmp(x.data(), y.data(), static_cast<std::size_t>(n)) != 0)
      return false;
    done += static_cast<std::uint64_t>(n);
  }
  return true;
}

// Copies one file unless its copy is current and verified; returns the bytes copied, nothing
// when the copy there holds the source's bytes.
std::optional<std::uint64_t> stage_one(const StageCopy& copy) {
  const FileStatus source = status_of(copy.source);
  if (!source.exists)
    throw IoError(fmt::format("cannot stage {}: {}", copy.source.string(), std::strerror(ENOENT)));
  if (is_current_copy(copy.source, copy.destination) &&
      same_contents(copy.source, copy.destination, source.size))
    return std::nullopt;
  fs::path part = copy.destination;
  part += ".part";
  std::error_code ignored;
  try {
    Descriptor from(copy.source, O_RDONLY, "the source");
    Descriptor to(create_exclusive_file(part, 0600));
    const std::uint64_t bytes = copy_contents(from.get(), to.get(), source.size, copy);
    const timespec times[2] = {source.modified, source.modified};
    if (::futimens(to.get(), times) != 0)
      throw IoError(
          fmt::format("cannot set the time of {}: {}", part.string(), std::strerror(errno)));
    to.close(part);
    fs::rename(part, copy.destination);
    return bytes;
  } catch (...) {
    fs::remove(part, ignored);
    throw;
  }
}

}  // namespace

bool is_current_copy(const fs::path& source, const fs::path& copy) {
  const FileStatus a = status_of(source), b = status_of(copy);
  return a.exists && b.exists && a.size == b.size && a.modified.tv_sec == b.modified.tv_sec &&
         a.modified.tv_nsec == b.modified.tv_nsec;
}

StageReport stage_files(const fs::path& root, std::span<const StageCopy> copies, int threads,
                        const std::function<void(const StageProgress&)>& progress,
                        const std::function<void(std::size_t)>& staged) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  // The whole tree first, each directory once: nothing is written into one that fails.
  std::set<fs::path> directories;
  for (const StageCopy& copy : copies) {
    const fs::path below = copy.destination.parent_path().lexically_relative(root);
    if (below.empty() || *below.begin() == "..")
      throw InvalidArgument(fmt::format("staging copy {} is not below the staging directory {}",
                                        copy.destination.string(), root.string()));
    directories.insert(below);
  }
  for (const fs::path& below : directories) check_private_tree(root, below, /*create=*/true);
  // In the set's order, so that two copiers with overlapping directories never wait on each other.
  std::vector<std::unique_ptr<DirectoryLock>> locks;
  for (const fs::path& below : directories) {
    locks.push_back(std::make_unique<DirectoryLock>(root / below));
    remove_stale_parts(root / below);
  }
  std::atomic<std::size_t> next{0}, done{0}, copied{0};
  std::atomic<std::uint64_t> bytes{0};
  std::mutex report_mutex;
  std::exception_ptr failure;
  auto last_report = start;
  const auto report = [&](bool final) {
    if (!progress) return;
    std::unique_lock lock(report_mutex, std::defer_lock);
    if (final)
      lock.lock();
    else if (!lock.try_lock())
      return;
    const auto now = Clock::now();
    if (!final && now - last_report < std::chrono::seconds(1)) return;
    last_report = now;
    progress({done.load(), copies.size(), bytes.load(),
              std::chrono::duration<double>(now - start).count()});
  };
  const auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < copies.size();) {
      try {
        if (const auto copied_bytes = stage_one(copies[i])) {
          bytes += *copied_bytes;
          ++copied;
        }
        if (staged) staged(i);
      } catch (...) {
        std::lock_guard lock(report_mutex);
        if (!failure) failure = std::current_exception();
        next.store(copies.size());  // the others stop after their current file
      }
      ++done;
      report(false);
    }
  };
  const int count =
      std::clamp<int>(threads, 1, static_cast<int>(std::max<std::size_t>(copies.size(), 1)));
  std::vector<std::jthread> workers;
  for (int t = 1; t < count; ++t) workers.emplace_back(work);
  work();
  workers.clear();
  if (failure) std::rethrow_exception(failure);
  report(true);
  StageReport result;
  result.copied = copied.load();
  result.current = copies.size() - result.copied;
  result.bytes_copied = bytes.load();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

}  // namespace hardy::core
