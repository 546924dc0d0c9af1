// `hardy clean --node-local`: removes the node-local snapshot state that crashed runs left on this
// node (checkpoint/stale_snapshots.hpp), as the next job's snapshot writer does after a day, and
// the shared-memory files of killed MPI ranks (comm/mpi/segments.hpp), as every job's start does.
// With --run-dir it removes one run's state on this node at once: what `hardy run` has every
// node it used do when the run ends (resilience/src/supervisor/node_cleanup.cpp), keeping the
// newest committed state as a checkpoint first when asked.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <optional>

#include "command_line.hpp"
#include "hardy/checkpoint/checkpoint.hpp"
#include "hardy/checkpoint/stale_snapshots.hpp"
#include "hardy/comm/mpi/segments.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/process_info.hpp"
#include "hardy/jobs/commands.hpp"
#include "hardy/resilience/run_identity.hpp"
#include "hardy/resilience/run_lock.hpp"

namespace fs = std::filesystem;
namespace po = boost::program_options;

namespace hardy::jobs {

namespace {

constexpr const char* kCleanUsage =
    R"(Usage: hardy clean --node-local [--snapshot-dir DIR] [--older-than HOURS]
       hardy clean --node-local --run-dir RUN_DIR [--snapshot-dir DIR] [--keep-newest]

Removes the node-local snapshots that runs left on this node (a crash leaves them for a relaunch
on the same nodes): every run under --snapshot-dir that nothing has written for --older-than
hours. A running job writes its snapshots every few steps, so it is never idle that long; a job
also removes such state itself, a day after the last write, when it starts on the node. Run it on
each node, e.g. `srun --ntasks-per-node=1 hardy clean --node-local`.

With --run-dir it removes that run's snapshots on this node now, whatever their age (in the
layout of one job and of fault domains alike), and refuses while the run is running. `hardy run`
has every node the run used do so when the run ends, however it ends. With --keep-newest the
newest valid snapshot of the run (its run id checked) is first written as a checkpoint of the
run when it is newer than the run's newest checkpoint, so that nothing committed is lost with it.

It also removes the shared-memory files that killed MPI ranks left in /dev/shm (Open MPI's
sm_segment.* files of this user that no process maps any more), as every job does on its nodes
when it starts.
)";

std::string megabytes(std::uintmax_t bytes) {
  return fmt::format("{:.1f} MB", static_cast<double>(bytes) / 1e6);
}

std::uintmax_t tree_bytes(const fs::path& dir) {
  std::uintmax_t bytes = 0;
  std::error_code error;
  for (fs::recursive_directory_iterator file(dir, error), end; !error && file != end;
       file.increment(error)) {
    std::error_code unreadable;
    if (file->is_regular_file(unreadable)) bytes += file->file_size(unreadable);
  }
  return bytes;
}

// The run's newest valid snapshot on this node, written as RUN_DIR/checkpoints/ckpt-<step>.h5
// when no checkpoint of that step or a later one exists. Only a snapshot that records this run's
// id qualifies: nothing another run wrote becomes this run's state.
void keep_newest(const fs::path& run_dir, const std::vector<fs::path>& directories) {
  const auto run_id = resilience::read_run_id(run_dir);
  if (!run_id) {
    std::cout << fmt::format("hardy clean: {} has no run id: no snapshot is kept\n",
                             run_dir.string());
    return;
  }
  std::optional<checkpoint::ValidCheckpoint> newest;
  for (const auto& dir : directories) {
    std::vector<std::string> skipped;
    auto found = checkpoint::load_newest_snapshot(
        dir, &skipped, [&](const checkpoint::TrainingState& state) -> std::optional<std::string> {
          if (state.run_id == *run_id) return std::nullopt;
          return fmt::format("it belongs to run '{}', not to {}'s run {}", state.run_id,
                             run_dir.string(), *run_id);
        });
    for (const auto& reason : skipped) std::cout << "hardy clean: passed over " << reason << "\n";
    if (found && (!newest || found->state.step > newest->state.step)) newest = std::move(found);
  }
  if (!newest) return;
  const fs::path checkpoints = run_dir / "checkpoints";
  const auto existing = checkpoint::list_checkpoints(checkpoints);
  if (!existing.empty() && existing.back().step >= newest->state.step) {
    std::cout << fmt::format(
        "hardy clean: the newest snapshot (step {}) is no newer than the run's newest checkpoint "
        "(step {}): nothing to keep\n",
        newest->state.step, existing.back().step);
    return;
  }
  fs::create_directories(checkpoints);
  const fs::path kept = checkpoint::checkpoint_path(checkpoints, newest->state.step);
  const auto bytes = checkpoint::write_checkpoint_file(newest->state, kept);
  checkpoint::set_latest(checkpoints, kept);
  std::cout << fmt::format("hardy clean: kept step {} of {} as {} ({}), the run's newest state\n",
                           newest->state.step, newest->path.string(), kept.string(),
                           megabytes(bytes));
}

// Removes the run's trees of this host under every snapshot root (one job's and each fault
// domain's), keeping the newest state first when asked. The run must not be running: its
// supervisor (which holds the run's lock and hands its token) or nobody.
int clean_run(const fs::path& root, const fs::path& run_dir, bool keep, const std::string& token) {
  std::unique_ptr<resilience::RunDirectoryLock> lock;
  std::error_code error;
  if (fs::is_directory(run_dir, error) &&
      (token.empty() || !resilience::RunDirectoryLock::holds(run_dir, token)))
    lock = std::make_unique<resilience::RunDirectoryLock>(run_dir, "hardy clean");
  const std::string host = core::host_name();
  std::vector<fs::path> roots, directories;
  for (const auto& snapshot_root : checkpoint::node_snapshot_roots(root))
    if (checkpoint::check_node_snapshot_tree(snapshot_root, run_dir, host, false)) {
      roots.push_back(snapshot_root);
      directories.push_back(checkpoint::node_snapshot_directory(snapshot_root, run_dir, host));
    }
  if (keep && !directories.empty()) keep_newest(run_dir, directories);
  for (std::size_t i = 0; i < roots.size(); ++i) {
    const auto bytes = tree_bytes(directories[i]);
    checkpoint::remove_node_snapshots(roots[i], run_dir, host);
    std::cout << fmt::format("removed {} ({})\n", directories[i].string(), megabytes(bytes));
  }
  // The run's heartbeats on this node (resilience/src/session/hang_monitor.hpp), its record, and
  // its directory once no host's is left in it.
  for (const auto& snapshot_root : checkpoint::node_snapshot_roots(root))
    checkpoint::remove_node_run_directory(snapshot_root, run_dir, /*heartbeats=*/true);
  std::cout << fmt::format("hardy clean: {} node-local snapshot tree(s) of {} removed on {}\n",
                           roots.size(), run_dir.string(), host);
  return 0;
}

}  // namespace

po::options_description clean_options() {
  po::options_description options("hardy clean options");
  options.add_options()("help,h", "print this help")(
      "node-local", po::bool_switch(), "remove stale node-local snapshots (the only kind so far)")(
      "snapshot-dir", po::value<std::string>()->default_value(train_default("snapshot-dir")),
      "the snapshot root that `hardy train --snapshot-dir` used")(
      "older-than", po::value<double>()->default_value(1.0),
      "hours since a run's last snapshot write")(
      "run-dir", po::value<std::string>(),
      "remove this run's snapshots on this node now, whatever their age")(
      "keep-newest", po::bool_switch(),
      "with --run-dir: first write the newest snapshot as a checkpoint of the run when it is "
      "newer than the run's newest checkpoint")(
      "run-lock-token", po::value<std::string>()->default_value(""),
      "with --run-dir: the token of the `hardy run` that holds the run's lock (set by it)");
  return options;
}

int clean_command(const std::vector<std::string>& args) {
  po::variables_map vm;
  if (!parse_command_line(args, clean_options(), {"hardy clean", kCleanUsage}, vm)) return 0;
  if (!vm["node-local"].as<bool>())
    throw InvalidArgument("say what to clean: --node-local (see hardy clean --help)");
  const double hours = vm["older-than"].as<double>();
  if (!std::isfinite(hours) || hours < 0)
    throw InvalidArgument(fmt::format("--older-than {}: expected hours, 0 or more", hours));
  const std::string root = vm["snapshot-dir"].as<std::string>();
  if (vm.count("run-dir")) {
    const fs::path run_dir = vm["run-dir"].as<std::string>();
    if (run_dir.empty()) throw InvalidArgument("--run-dir must not be empty");
    return clean_run(root, run_dir, vm["keep-newest"].as<bool>(),
                     vm["run-lock-token"].as<std::string>());
  }
  if (vm["keep-newest"].as<bool>())
    throw InvalidArgument("--keep-newest needs --run-dir: the run whose state to keep");
  const auto grace = std::chrono::seconds(std::llround(hours * 3600));
  const auto removed = checkpoint::remove_stale_node_snapshots(root, "", grace);
  for (const auto& run : removed)
    std::cout << fmt::format("removed {} ({:.1f} MB, idle {:.1f} h)\n", run.directory.string(),
                             static_cast<double>(run.bytes) / 1e6, run.idle_s / 3600);
  std::cout << fmt::format("hardy clean: {} stale run(s) removed under {}\n", removed.size(), root);
  std::uintmax_t segment_bytes = 0;
  const auto segments = comm::remove_orphaned_mpi_segments();
  for (const auto& segment : segments) segment_bytes += segment.bytes;
  std::cout << fmt::format(
      "hardy clean: {} shared-memory file(s) of killed MPI ranks removed ({:.1f} MB)\n",
      segments.size(), static_cast<double>(segment_bytes) / 1e6);
  return 0;
}

}  // namespace hardy::jobs
