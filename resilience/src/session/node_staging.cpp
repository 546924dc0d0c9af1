#include "session/node_staging.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "hardy/core/support/atomic_file.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/private_tree.hpp"

namespace fs = std::filesystem;

namespace hardy::resilience {

NodeStaging::NodeStaging(const fs::path& stage_dir, const fs::path& dataset_root,
                         std::vector<fs::path> files, const std::string& host, std::string launch,
                         int copy_threads)
    : stage_dir_(stage_dir),
      directory_(core::staging_directory(stage_dir, dataset_root, host)),
      files_(std::move(files)),
      copy_threads_(std::max(1, copy_threads)),
      manifest_prefix_(".verified-" + launch + "-"),
      // One list per copier: nodes emulated on one host share the directory.
      manifest_(directory_ / fmt::format("{}{}", manifest_prefix_, ::getpid())) {
  if (launch.empty() || launch.find('/') != std::string::npos)
    throw InvalidArgument(fmt::format("'{}' is not a launch token", launch));
  // Relative paths as the dataset spells them: a split directory that is a symlink stays a
  // directory of the copy, not the path it points to.
  const auto given_root = dataset_root.lexically_normal();
  for (const auto& file : files_) {
    auto relative = file.lexically_normal().lexically_relative(given_root);
    if (relative.empty() || *relative.begin() == "..") relative = file.filename();
    relative_[file.string()] = relative;
  }
}

NodeStaging::~NodeStaging() { join(); }

void NodeStaging::join() {
  if (background_.joinable()) background_.join();
}

std::string NodeStaging::background_error() const {
  std::lock_guard lock(error_mutex_);
  return background_error_;
}

NodeStagingPlan NodeStaging::plan(const std::vector<std::string>& node_of_rank, int rank,
                                  bool copier, bool wait,
                                  const std::function<void(const core::StageProgress&)>& progress) {
  join();
  // Nodes are identified by host name, in first-seen order; their keys by hash, so that the
  // homes do not depend on that order.
  std::vector<std::string> nodes;
  node_of_rank_.assign(node_of_rank.size(), 0);
  for (std::size_t r = 0; r < node_of_rank.size(); ++r) {
    auto at = std::find(nodes.begin(), nodes.end(), node_of_rank[r]);
    if (at == nodes.end()) at = nodes.insert(nodes.end(), node_of_rank[r]);
    node_of_rank_[r] = static_cast<int>(at - nodes.begin());
  }
  std::vector<std::uint64_t> keys;
  for (const auto& node : nodes) keys.push_back(core::node_key(node));
  const int mine = node_of_rank_.at(static_cast<std::size_t>(rank));
  NodeStagingPlan result;
  std::vector<int> homes(files_.size());
  std::vector<core::StageCopy> copies;
  for (std::size_t i = 0; i < files_.size(); ++i) {
    const auto& relative = relative_.at(files_[i].string());
    homes[i] = static_cast<int>(core::home_node(relative.string(), keys));
    if (homes[i] == mine) {
      ++result.homed_here;
      copies.push_back({files_[i], directory_ / relative});
    }
  }
  if (home_nodes_.empty()) {
    result.moved = files_.size();
  } else {
    for (std::size_t i = 0; i < files_.size(); ++i)
      result.moved += home_nodes_[i] != nodes[static_cast<std::size_t>(homes[i])];
  }
  home_nodes_.resize(files_.size());
  for (std::size_t i = 0; i < files_.size(); ++i)
    home_nodes_[i] = nodes[static_cast<std::size_t>(homes[i])];
  home_of_file_ = std::move(homes);
  report_ = {};
  if (!copier || copies.empty()) return result;
  if (wait) {
    report_ = core::stage_files(stage_dir_, copies, copy_threads_, progress);
    record_verified(copies);
    return result;
  }
  background_ = std::thread([this, copies = std::move(copies)] {
    try {
      core::stage_files(stage_dir_, copies, copy_threads_);
      record_verified(copies);
    } catch (const std::exception& e) {
      std::lock_guard lock(error_mutex_);
      background_error_ = e.what();
    }
  });
  return result;
}

std::vector<std::size_t> NodeStaging::local_positions(std::span<const std::size_t> samples,
                                                      int rank,
                                                      std::span<const double> weights) const {
  std::vector<int> home(samples.size());
  for (std::size_t i = 0; i < home.size(); ++i) home[i] = home_of_file_.at(samples[i]);
  return core::place_batch(home, node_of_rank_, weights).at(static_cast<std::size_t>(rank));
}

void NodeStaging::record_verified(const std::vector<core::StageCopy>& copies) {
  std::lock_guard lock(verified_mutex_);
  if (verified_.empty()) {
    // Earlier launches' lists: nothing reads them any more.
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(directory_, error))
      if (const auto name = entry.path().filename().string();
          name.starts_with(".verified-") && !name.starts_with(manifest_prefix_))
        fs::remove(entry.path(), error);
  }
  for (const auto& copy : copies)
    verified_.insert(copy.destination.lexically_relative(directory_).string());
  // The list goes into the node's private staging tree (core::stage_files checked it), written
  // whole (0600, never through a link) and renamed, so a reader on another rank sees the old list
  // or the new one.
  std::string text;
  for (const auto& relative : verified_) text += relative + "\n";
  core::write_atomically(
      manifest_, [&](const fs::path& temporary) { core::write_private_file(temporary, text); });
}

bool NodeStaging::verified(const fs::path& relative) const {
  std::lock_guard lock(verified_mutex_);
  if (verified_.contains(relative.string())) return true;
  // A list written or replaced since the last look renamed a file in the directory.
  std::error_code error;
  const auto changed = fs::last_write_time(directory_, error);
  if (error || changed == lists_seen_) return false;
  lists_seen_ = changed;
  for (const auto& entry : fs::directory_iterator(directory_, error))
    if (entry.path().filename().string().starts_with(manifest_prefix_)) {
      std::ifstream file(entry.path());
      for (std::string line; std::getline(file, line);) verified_.insert(line);
    }
  return verified_.contains(relative.string());
}

fs::path NodeStaging::locate(const fs::path& source) const {
  const auto relative = relative_.find(source.string());
  if (relative == relative_.end() || !verified(relative->second)) return source;
  fs::path copy = directory_ / relative->second;
  std::error_code error;
  return fs::exists(copy, error) ? copy : source;
}

void read_through(core::SampleFiles& dataset, std::shared_ptr<NodeStaging> staging) {
  dataset.set_file_locator([staged = std::move(staging)](const std::filesystem::path& source) {
    return staged->locate(source);
  });
}

}  // namespace hardy::resilience
