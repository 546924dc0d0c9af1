#pragma once
// --stage-to: the job's side of node-local staging (core/data/staging.hpp has the rules). Every
// rank knows every file's home node (a pure function of the live hosts), so every rank computes
// the same placement of each global batch; the lowest rank on each host copies the files homed
// there. Before training the copy is complete; after a shrink, each node fetches the files that
// moved to it on a background thread while its ranks read them from the shared file system.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "hardy/core/data/sample_files.hpp"
#include "hardy/core/data/sampler.hpp"
#include "hardy/core/data/staging.hpp"

namespace hardy::resilience {

struct NodeStagingPlan {
  std::size_t homed_here = 0;  // files homed on this rank's node
  std::size_t moved = 0;       // files whose home changed since the previous plan (all: first)
};

class NodeStaging {
 public:
  // files[i] is sample i's file below dataset_root; this host's copies go below
  // core::staging_directory(stage_dir, dataset_root, host) with the same relative path.
  // `launch` is this launch's token (RunIdentity::launch), shared by its ranks: a copy counts
  // only once this launch's copier on the node made or verified it.
  NodeStaging(const std::filesystem::path& stage_dir, const std::filesystem::path& dataset_root,
              std::vector<std::filesystem::path> files, const std::string& host, std::string launch,
              int copy_threads);
  ~NodeStaging();  // waits for a background copy
  NodeStaging(const NodeStaging&) = delete;
  NodeStaging& operator=(const NodeStaging&) = delete;

  // The nodes of the current ranks (nodes[r] names rank r's node) decide every file's home. When
  // `copier` (the lowest rank on its host) is true this rank copies its node's files: before
  // returning when `wait`, otherwise in the background (an earlier background copy is finished
  // first). Throws IoError from a failed copy when waiting; a failed background copy only leaves
  // its files to be read from the shared file system (reported by background_error()).
  NodeStagingPlan plan(const std::vector<std::string>& nodes, int rank, bool copier, bool wait,
                       const std::function<void(const core::StageProgress&)>& progress = {});
  // What the last waited-for copy did (zero when this rank copies nothing).
  const core::StageReport& last_report() const { return report_; }
  std::string background_error() const;

  // This rank's positions in `samples` (a global batch's sample indices, or the slice of one
  // that this job's ranks share: a fault domain's; see core::place_batch), under the current
  // plan, each rank taking its share of them by `weights` (none: even shares).
  std::vector<std::size_t> local_positions(std::span<const std::size_t> samples, int rank,
                                           std::span<const double> weights = {}) const;
  // The staged copy of `source` when this launch's copier on the node made or verified it (it
  // lists them in DIRECTORY/.verified-<launch>-<pid>, which any rank on the node reads), else
  // `source`:
  // a copy another job left, or one whose size and time were forged, is never read.
  // Thread-safe.
  std::filesystem::path locate(const std::filesystem::path& source) const;
  const std::filesystem::path& directory() const { return directory_; }

 private:
  void join();
  // The copier: `copies` are now verified; adds them to the launch's list on the node.
  void record_verified(const std::vector<core::StageCopy>& copies);
  // Whether `relative` is listed, re-reading the list when it changed since the last read.
  bool verified(const std::filesystem::path& relative) const;

  std::filesystem::path stage_dir_;  // the root of the private tree (core::stage_files)
  std::filesystem::path directory_;
  std::vector<std::filesystem::path> files_;                         // canonical
  std::unordered_map<std::string, std::filesystem::path> relative_;  // as the dataset names them
  int copy_threads_;
  std::vector<int> home_of_file_;        // node index into the current plan's hosts
  std::vector<std::string> home_nodes_;  // by host name, to count the files a plan moves
  std::vector<int> node_of_rank_;
  core::StageReport report_;
  std::thread background_;
  mutable std::mutex error_mutex_;
  std::string background_error_;
  // This launch's lists of verified copies: DIRECTORY/.verified-<launch>-<copier's pid>.
  std::string manifest_prefix_;
  std::filesystem::path manifest_;  // this process's, when it copies
  // The relative paths this launch's lists hold, as last read, and the directory's time then.
  mutable std::mutex verified_mutex_;
  mutable std::unordered_set<std::string> verified_;
  mutable std::filesystem::file_time_type lists_seen_{};
};

// Points `dataset`'s loads at `staging`'s copies on this node. The locator shares `staging`, so
// the dataset's loader threads (the prefetcher's) may read through it for as long as the dataset
// lives, whatever order their owners are destroyed in.
void read_through(core::SampleFiles& dataset, std::shared_ptr<NodeStaging> staging);

}  // namespace hardy::resilience
