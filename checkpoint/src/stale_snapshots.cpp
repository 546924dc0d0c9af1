#include "hardy/checkpoint/stale_snapshots.hpp"

#include <algorithm>

#include "hardy/checkpoint/node_local_snapshots.hpp"

namespace hardy::checkpoint {

namespace fs = std::filesystem;

namespace {

bool is_run_key(const std::string& name) {
  return name.size() == 16 && std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

std::vector<StaleRun> remove_stale_node_snapshots(const fs::path& root,
                                                  const std::string& keep_run_key,
                                                  std::chrono::seconds grace,
                                                  const RunIsOver& over) {
  std::vector<StaleRun> removed;
  const auto now = fs::file_time_type::clock::now();
  std::error_code error;
  for (fs::directory_iterator run(root, error), end; !error && run != end; run.increment(error)) {
    const std::string name = run->path().filename().string();
    if (!is_run_key(name) || name == keep_run_key || run->is_symlink() || !run->is_directory())
      continue;
    // The run's newest write: its directory's own time (a host directory created or removed)
    // and every file below it.
    std::error_code ignored;
    fs::file_time_type newest = fs::last_write_time(run->path(), ignored);
    std::uintmax_t bytes = 0;
    for (fs::recursive_directory_iterator file(run->path(), ignored), last;
         !ignored && file != last; file.increment(ignored)) {
      std::error_code unreadable;
      newest = std::max(newest, file->last_write_time(unreadable));
      if (file->is_regular_file(unreadable)) bytes += file->file_size(unreadable);
    }
    const auto idle = now - newest;
    if (ignored) continue;
    bool run_over = false;
    if (idle < grace) {
      const auto run_dir = over ? recorded_run_directory(root, name) : std::nullopt;
      if (!run_dir || !over(*run_dir)) continue;
      run_over = true;
    }
    if (fs::remove_all(run->path(), ignored) == static_cast<std::uintmax_t>(-1) || ignored)
      continue;
    removed.push_back({run->path(), std::chrono::duration<double>(idle).count(), bytes, run_over});
  }
  return removed;
}

}  // namespace hardy::checkpoint
