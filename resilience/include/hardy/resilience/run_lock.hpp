#pragma once
// One run at a time in a run directory. Two jobs writing the same run directory (a resubmission
// while the first job still runs, a `hardy train --resume latest` by hand next to a running
// job) would interleave their events, write checkpoints of the same steps over each other's and
// prune each other's, so the one that comes second must not start.
//
// RUN_DIR/lock is held with flock(2) by whoever owns the run: `hardy run` for as long as it
// supervises, or the lead rank of a `hardy train` started without it. The kernel drops the lock
// when its holder's process ends, however it ends, so a killed or requeued job never leaves a
// stale lock behind. The file says who holds it (for the message the next one gets) and a random
// token, which `hardy run` hands to the ranks it launches (`--run-lock-token`): they run under
// its lock instead of taking their own. A file system without flock (Lustre mounted without
// `flock`) gets no lock and a caveat to print, not a failure.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace hardy::resilience {

class RunDirectoryLock {
 public:
  // Takes RUN_DIR/lock for this process, described as `holder` ("hardy run", "hardy train").
  // Throws InvalidArgument naming the holder when another process has it, and IoError when the
  // file cannot be made (a symbolic link, permissions).
  RunDirectoryLock(const std::filesystem::path& run_dir, std::string_view holder);
  ~RunDirectoryLock();
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;

  const std::string& token() const { return token_; }
  // Why nothing is locked (the file system refused flock); empty when the lock is held.
  const std::optional<std::string>& caveat() const { return caveat_; }

  // Whether RUN_DIR/lock names `token` as its holder's: a launch of the `hardy run` that holds it.
  static bool holds(const std::filesystem::path& run_dir, std::string_view token);

 private:
  int fd_ = -1;
  std::string token_;
  std::optional<std::string> caveat_;
};

std::filesystem::path run_lock_file(const std::filesystem::path& run_dir);

// Whether the run of run_dir is over: its events end a `hardy run` (supervisor_finished) and no
// other has started since (supervisor_started). False for a run that never ran under `hardy run`
// (nothing says its end) and for a run directory that cannot be read here.
bool run_is_over(const std::filesystem::path& run_dir);

}  // namespace hardy::resilience
