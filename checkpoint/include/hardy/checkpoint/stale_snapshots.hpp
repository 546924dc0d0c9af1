#pragma once
// Node-local state that no job will come back for. A job that crashes leaves its hosts'
// snapshots under ROOT/<run key>/ (a relaunch on the same nodes resumes from them); a run whose
// directory nobody has written for a grace period is taken as gone for good, and its state, two
// full copies of the model and optimizer per host in node memory, is removed: by the next job's
// snapshot writer on that node (kStaleSnapshotGrace) and by `hardy clean --node-local`.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace hardy::checkpoint {

// A requeued job normally runs again within a day; should it not, its checkpoints on shared
// storage still hold its state.
inline constexpr std::chrono::hours kStaleSnapshotGrace{24};

struct StaleRun {
  std::filesystem::path directory;  // ROOT/<run key>
  double idle_s = 0;                // since its newest file was written
  std::uintmax_t bytes = 0;
  bool run_over = false;  // removed because its run is over, not for its age
};

// Whether the run of a run directory is over for good (its supervisor logged its end and no
// other has started since): its node-local state is left-over, whatever its age.
using RunIsOver = std::function<bool(const std::filesystem::path& run_dir)>;

// Removes the run directories under `root` (names of 16 hexadecimal digits, as run_key() makes
// them: nothing else under ROOT is touched, so ROOT may be a shared /dev/shm) other than
// `keep_run_key`'s, whose newest file is older than `grace`, or whose recorded run directory
// (kRunDirectoryRecord) `over` says is over; returns those it removed. Best effort: a directory
// that cannot be read or removed stays, and no error is thrown.
std::vector<StaleRun> remove_stale_node_snapshots(const std::filesystem::path& root,
                                                  const std::string& keep_run_key,
                                                  std::chrono::seconds grace,
                                                  const RunIsOver& over = {});

}  // namespace hardy::checkpoint
