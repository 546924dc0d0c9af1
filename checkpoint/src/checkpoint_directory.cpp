#include "hardy/checkpoint/checkpoint_directory.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <set>

#include "first_valid.hpp"
#include "hardy/core/support/atomic_file.hpp"
#include "posix_file.hpp"

namespace hardy::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPrefix = "ckpt-";
constexpr std::string_view kSuffix = ".h5";
constexpr std::string_view kTemporarySuffix = ".tmp";

// The step of "ckpt-<step>.h5", nullopt for any other name.
std::optional<long> step_of(const std::string& name) {
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return std::nullopt;
  const std::string_view digits(name.data() + kPrefix.size(),
                                name.size() - kPrefix.size() - kSuffix.size());
  long step = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() || step < 0)
    return std::nullopt;
  return step;
}

}  // namespace

fs::path checkpoint_path(const fs::path& dir, long step) {
  return dir / fmt::format("{}{}{}", kPrefix, step, kSuffix);
}

std::vector<CheckpointEntry> list_checkpoints(const fs::path& dir) {
  std::vector<CheckpointEntry> entries;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    if (const auto step = step_of(it->path().filename().string()); step && it->is_regular_file())
      entries.push_back({*step, it->path()});
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.step < b.step; });
  return entries;
}

std::optional<fs::path> read_latest(const fs::path& dir) {
  std::error_code error;
  const fs::path target = fs::read_symlink(dir / kLatestLink, error);
  if (error) return std::nullopt;
  return target.is_absolute() ? target : dir / target;
}

void set_latest(const fs::path& dir, const fs::path& file) {
  // A new link under a temporary name, renamed over the old one: rename(2) replaces atomically,
  // so a reader sees either the old target or the new one, never no link.
  const fs::path link = dir / kLatestLink;
  const fs::path temporary = dir / (std::string(kLatestLink) + std::string(kTemporarySuffix));
  std::error_code error;
  fs::remove(temporary, error);
  fs::create_symlink(file.filename(), temporary, error);
  if (error)
    throw IoError(
        fmt::format("cannot create the link {}: {}", temporary.string(), error.message()));
  fs::rename(temporary, link, error);
  if (error) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw IoError(fmt::format("cannot point {} at {}: {}", link.string(), file.filename().string(),
                              error.message()));
  }
  core::fsync_path(dir, true);
}

std::vector<fs::path> apply_retention(const fs::path& dir, const Retention& retention) {
  const auto entries = list_checkpoints(dir);
  std::set<fs::path> keep;
  const std::size_t last = static_cast<std::size_t>(std::max(0, retention.keep_last));
  for (std::size_t i = entries.size() > last ? entries.size() - last : 0; i < entries.size(); ++i)
    keep.insert(entries[i].path);
  for (const CheckpointEntry& entry : entries)
    if (retention.keep_every > 0 && entry.step % retention.keep_every == 0) keep.insert(entry.path);
  if (const auto latest = read_latest(dir)) keep.insert(dir / latest->filename());

  std::vector<fs::path> doomed;
  for (const CheckpointEntry& entry : entries)
    if (!keep.contains(entry.path)) doomed.push_back(entry.path);
  // .tmp files left by a writer that was killed (never the one being written: see the header).
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.ends_with(kTemporarySuffix) &&
        step_of(name.substr(0, name.size() - kTemporarySuffix.size())))
      doomed.push_back(it->path());
  }
  std::vector<fs::path> removed;
  for (const fs::path& path : doomed) {
    std::error_code ignored;
    if (fs::remove(path, ignored)) removed.push_back(path);
  }
  return removed;
}

std::vector<fs::path> discard_checkpoints_newer_than(const fs::path& dir, long step) {
  std::vector<fs::path> removed;
  const auto latest = read_latest(dir);
  for (const CheckpointEntry& entry : list_checkpoints(dir)) {
    std::error_code ignored;
    if (entry.step > step && fs::remove(entry.path, ignored)) removed.push_back(entry.path);
  }
  if (latest &&
      std::find(removed.begin(), removed.end(), dir / latest->filename()) != removed.end()) {
    std::error_code ignored;
    fs::remove(dir / kLatestLink, ignored);
  }
  return removed;
}

SavedCheckpoint save_checkpoint(const TrainingState& state, const fs::path& dir,
                                const Retention& retention, const WriteProgress& progress,
                                FileAccess access) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error)
    throw IoError(fmt::format("cannot create the checkpoint directory {}: {}", dir.string(),
                              error.message()));
  SavedCheckpoint saved;
  saved.path = checkpoint_path(dir, state.step);
  saved.bytes = write_checkpoint_file(state, saved.path, progress, access);
  set_latest(dir, saved.path);
  saved.removed = apply_retention(dir, retention);
  return saved;
}

std::optional<ValidCheckpoint> load_latest_valid(const fs::path& dir,
                                                 std::vector<std::string>* skipped,
                                                 const UnfitReason& unfit) {
  std::vector<fs::path> candidates;
  if (const auto latest = read_latest(dir)) {
    if (fs::exists(*latest))
      candidates.push_back(*latest);
    else if (skipped)
      skipped->push_back(fmt::format("{} names {}, which does not exist",
                                     (dir / kLatestLink).string(), latest->string()));
  }
  const auto entries = list_checkpoints(dir);
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    std::error_code error;
    if (candidates.empty() || !fs::equivalent(candidates.front(), it->path, error))
      candidates.push_back(it->path);
  }
  // read_checkpoint throws CorruptCheckpoint, or an Error for a file that is not a checkpoint
  // or an I/O error.
  return detail::first_valid(
      candidates, [](const fs::path& path) { return read_checkpoint(path); }, unfit, skipped);
}

namespace detail {

std::optional<ValidCheckpoint> first_valid(
    std::span<const fs::path> candidates, const std::function<TrainingState(const fs::path&)>& read,
    const UnfitReason& unfit, std::vector<std::string>* skipped) {
  for (const fs::path& candidate : candidates) {
    try {
      ValidCheckpoint found{candidate, read(candidate)};
      if (const auto reason = unfit ? unfit(found.state) : std::nullopt) {
        if (skipped)
          skipped->push_back(fmt::format("{} is not restored: {}", candidate.string(), *reason));
        continue;
      }
      return found;
    } catch (const Error& e) {
      if (skipped) skipped->push_back(e.what());
    }
  }
  return std::nullopt;
}

}  // namespace detail

std::optional<fs::path> find_latest_valid(const fs::path& dir, std::vector<std::string>* skipped) {
  auto found = load_latest_valid(dir, skipped);
  if (!found) return std::nullopt;
  return std::move(found->path);
}

}  // namespace hardy::checkpoint
