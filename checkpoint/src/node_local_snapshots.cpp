#include "hardy/checkpoint/node_local_snapshots.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "hardy/core/support/digest.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/private_tree.hpp"
#include "hardy/core/support/process_info.hpp"

namespace hardy::checkpoint {

namespace fs = std::filesystem;

namespace {

std::string directory_name_for(const std::string& host) {
  if (host.empty() || host == "." || host == "..")
    return "host-" + (host.empty() ? "unnamed" : host);
  std::string name = host;
  std::replace(name.begin(), name.end(), '/', '_');
  return name;
}

CheckpointWriter::Options writer_options(NodeLocalSnapshots::Writing writing) {
  CheckpointWriter::Options options;
  options.asynchronous = writing == NodeLocalSnapshots::Writing::background;
  options.skip_when_busy = false;  // see submit() in the header
  return options;
}

fs::path checked_directory(const fs::path& root, const fs::path& run_dir, const std::string& host) {
  check_node_snapshot_tree(root, run_dir, host, true);
  return node_snapshot_directory(root, run_dir, host);
}

}  // namespace

std::string run_key(const fs::path& run_dir) {
  fs::path normal = fs::absolute(run_dir).lexically_normal();
  // "/a/b/" normalizes to "/a/b/" (an empty last element); the key must not depend on it.
  if (!normal.has_filename() && normal.has_parent_path() && normal != normal.root_path())
    normal = normal.parent_path();
  const std::string text = normal.string();
  return fmt::format("{:016x}", core::xxhash64(std::as_bytes(std::span(text.data(), text.size()))));
}

fs::path node_snapshot_directory(const fs::path& root, const fs::path& run_dir,
                                 const std::string& host) {
  return root / run_key(run_dir) / directory_name_for(host);
}

bool check_node_snapshot_tree(const fs::path& root, const fs::path& run_dir,
                              const std::string& host, bool create) {
  return core::check_private_tree(root, fs::path(run_key(run_dir)) / directory_name_for(host),
                                  create);
}

void remove_node_snapshots(const fs::path& root, const fs::path& run_dir, const std::string& host) {
  if (!check_node_snapshot_tree(root, run_dir, host, false)) return;
  const fs::path dir = node_snapshot_directory(root, run_dir, host);
  std::error_code error;
  fs::remove_all(dir, error);
  if (error)
    throw IoError(fmt::format("cannot remove the node-local snapshots {}: {}", dir.string(),
                              error.message()));
  // Other hosts' directories (on a node that shares this file system) keep it: not an error.
  const fs::path run = dir.parent_path();
  if (fs::is_empty(run, error) && !error) fs::remove(run, error);
}

NodeLocalSnapshots::NodeLocalSnapshots(const fs::path& root, const fs::path& run_dir,
                                       const std::string& host, CheckpointWriter::Report report,
                                       Writing writing)
    : root_(root),
      run_dir_(run_dir),
      host_(host),
      report_(report),
      slots_(checked_directory(root, run_dir, host)),
      writer_(slots_.directory(), writer_options(writing), std::move(report),
              [this](const TrainingState& state, const WriteProgress&) {
                return slots_.write(state);
              }) {}

void NodeLocalSnapshots::submit(TrainingState&& state, double stall_s) {
  writer_.submit(std::move(state), stall_s);
}

template <class Write>
void NodeLocalSnapshots::write_and_report(long step, const Write& write) {
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = core::thread_cpu_seconds();
  WriteReport report;
  report.step = step;
  report.path = slots_.directory();
  try {
    const SavedCheckpoint saved = write();
    report.path = saved.path;
    report.bytes = saved.bytes;
  } catch (const std::exception& e) {
    report.error = e.what();
  }
  report.write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.cpu_s = core::thread_cpu_seconds() - cpu_start;
  if (report_) report_(report);
}

void NodeLocalSnapshots::write_now(const TrainingState& state) {
  write_and_report(state.step, [&] { return slots_.write(state); });
}

void NodeLocalSnapshots::write_now(const StateSources& tensors, const TrainingState& scalars) {
  write_and_report(scalars.step, [&] { return slots_.write(tensors, scalars); });
}

void NodeLocalSnapshots::discard_newer_than(long step) {
  writer_.flush();
  slots_.discard_newer_than(step);
}

void NodeLocalSnapshots::remove() {
  writer_.flush();
  slots_.close();  // node memory comes back only once nothing maps the files
  remove_node_snapshots(root_, run_dir_, host_);
}

}  // namespace hardy::checkpoint
