#pragma once
// The node-local tier of the committed state. When a whole node dies, the MPI runtime may end the
// job and the supervisor relaunches it; a copy of the last committed step in each surviving node's
// own memory (/dev/shm by default) lets the relaunch resume from there instead of from the last
// periodic checkpoint. The snapshots are flat, checksummed slot files (snapshot_file.hpp), two
// written in turn by a background CheckpointWriter into
//
//   ROOT/<run_key(run directory)>/<host>/slot-{0,1}.snapshot
//
// keyed by the run so that jobs sharing a node never read each other's state, and by host so that
// emulated nodes sharing one /dev/shm each read only their own directory. ROOT is the user's own
// (by default /dev/shm/hardy-<uid>): the whole tree is checked as core/support/private_tree.hpp
// says before anything in it is written, read or removed, directories are created 0700 and
// files 0600, and a tree that fails the checks throws core::UnsafeDirectory.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "hardy/checkpoint/checkpoint_writer.hpp"
#include "hardy/checkpoint/snapshot_file.hpp"

namespace hardy::checkpoint {

// ROOT/<run key>/.heartbeats: where the run's hang monitor keeps its heartbeats on the node
// (resilience/src/session/hang_monitor.hpp), beside the hosts' snapshot directories.
inline constexpr const char* kHeartbeatDirectory = ".heartbeats";

// ROOT/<run key>/run-dir: the run directory the key was made from (absolute), so that a later job
// on the node can tell whether the run is over (stale_snapshots.hpp); written with the tree.
inline constexpr const char* kRunDirectoryRecord = "run-dir";
// The run directory recorded under ROOT/<run key>, nullopt when there is none or it is unreadable.
std::optional<std::filesystem::path> recorded_run_directory(const std::filesystem::path& root,
                                                            const std::string& run_key);

// 16 hexadecimal digits: the xxHash64 of the run directory made absolute and lexically normal
// ("runs/x", "./runs/x/" and "/cwd/runs/x" give the same key).
std::string run_key(const std::filesystem::path& run_dir);

// ROOT/<run_key(run_dir)>/<host>. A host name that could not be a directory name ("", ".", "..",
// one holding '/') is replaced by a safe spelling, so it never escapes the run's directory.
std::filesystem::path node_snapshot_directory(const std::filesystem::path& root,
                                              const std::filesystem::path& run_dir,
                                              const std::string& host);

// Checks ROOT/<run key>/<host> (core::check_private_tree), creating what is missing when
// `create`; false when it does not exist. Throws core::UnsafeDirectory for a tree that fails.
bool check_node_snapshot_tree(const std::filesystem::path& root,
                              const std::filesystem::path& run_dir, const std::string& host,
                              bool create);

// Removes a host's snapshot directory and then the run's directory under ROOT if no other host's
// directory remains in it (ROOT itself stays), once the tree passed its checks. Throws
// core::UnsafeDirectory for a tree that fails them (nothing is removed), IoError naming what
// could not be removed.
void remove_node_snapshots(const std::filesystem::path& root, const std::filesystem::path& run_dir,
                           const std::string& host);

// A fault domain's own snapshot root under ROOT: ROOT/domain-<domain> (domains sharing a node on a
// small cluster must never write one file).
std::filesystem::path domain_snapshot_root(const std::filesystem::path& root, int domain);

// ROOT and the domain roots under it (domain_snapshot_root), those that are directories and not
// links: where a run's trees on this node may be, whichever layout it ran in.
std::vector<std::filesystem::path> node_snapshot_roots(const std::filesystem::path& root);

// Removes ROOT/<run key> once no host's directory is left in it: its record and its heartbeat
// directory (with what is in it when `heartbeats`: the run is over on this node; else only when
// empty, since other hosts sharing the node may still beat). Best effort, after the tree's checks.
void remove_node_run_directory(const std::filesystem::path& root,
                               const std::filesystem::path& run_dir, bool heartbeats);

// One host's writer of the tier. Keeps the last two snapshots: the newest may be cut short by the
// job's end, and then the one before it is complete (see submit()).
class NodeLocalSnapshots {
 public:
  static constexpr int kKeepLast = SnapshotSlots::kSlots;

  // Where the copy into the slot file runs: on a background thread (the default: for a node
  // whose training leaves cores idle, e.g. while its GPU computes; take_spare() and submit()) or
  // on the caller's thread (when training keeps every core busy, a thread more only competes
  // with it; write_now(), which copies straight from where the state lives, once).
  enum class Writing { background, in_step };

  // Creates the host's directory after checking the tree; throws core::UnsafeDirectory for a
  // tree that fails the checks, IoError when it cannot (a read-only or full /dev/shm).
  NodeLocalSnapshots(const std::filesystem::path& root, const std::filesystem::path& run_dir,
                     const std::string& host, CheckpointWriter::Report report = {},
                     Writing writing = Writing::background);

  // The buffers of the last snapshot written, to capture the next one into without allocating.
  TrainingState take_spare() { return writer_.take_spare(); }
  // Hands a committed state to the background writer. When the previous snapshot is still being
  // written this waits for it rather than dropping the new one: so at any moment the newest
  // complete snapshot is the last committed step or the one before it, never older. The wait is
  // part of the caller's stall (writes to node memory normally finish well within a step).
  // Write failures are reported, not thrown.
  void submit(TrainingState&& state, double stall_s);
  // Writing::in_step: writes the snapshot now, on the caller's thread, from a copy of the state
  // or straight from the model and optimizer. Failures are reported, not thrown.
  void write_now(const TrainingState& state);
  void write_now(const StateSources& tensors, const TrainingState& scalars);
  // Deletes the snapshots of steps after `step`: left by an earlier job in the same run directory
  // or by a timeline that was rolled back, they must neither win a later restore nor crowd the
  // new ones out of the retention. Call it before the first submit(); best effort.
  void discard_newer_than(long step);
  // Returns once the snapshot handed over last is written (or failed).
  void flush() { writer_.flush(); }
  // Whether a snapshot is being written on the background thread.
  bool busy() const { return writer_.busy(); }
  // Waits for the write in progress, then removes this host's directory (remove_node_snapshots).
  void remove();

  const std::filesystem::path& directory() const { return writer_.directory(); }

 private:
  template <class Write>
  void write_and_report(long step, const Write& write);

  std::filesystem::path root_, run_dir_;
  std::string host_;
  CheckpointWriter::Report report_;
  SnapshotSlots slots_;  // used by the writer's thread: declared first, destroyed last
  CheckpointWriter writer_;
};

}  // namespace hardy::checkpoint
