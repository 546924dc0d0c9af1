#include "hardy/checkpoint/node_local_snapshots.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>

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
  const fs::path record = root / run_key(run_dir) / kRunDirectoryRecord;
  std::error_code error;
  if (!fs::exists(fs::symlink_status(record, error)))
    core::write_private_file(record, fs::absolute(run_dir).lexically_normal().string() + "\n");
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

std::optional<fs::path> recorded_run_directory(const fs::path& root, const std::string& run_key) {
  const fs::path record = root / run_key / kRunDirectoryRecord;
  std::error_code error;
  if (!fs::is_regular_file(fs::symlink_status(record, error))) return std::nullopt;
  std::ifstream in(record);
  std::string line;
  if (!std::getline(in, line) || line.empty() || line.front() != '/') return std::nullopt;
  return fs::path(line);
}

fs::path domain_snapshot_root(const fs::path& root, int domain) {
  return root / fmt::format("domain-{}", domain);
}

std::vector<fs::path> node_snapshot_roots(const fs::path& root) {
  std::vector<fs::path> roots;
  std::error_code error;
  if (!fs::is_directory(fs::symlink_status(root, error))) return roots;
  roots.push_back(root);
  for (fs::directory_iterator entry(root, error), end; !error && entry != end;
       entry.increment(error)) {
    const std::string name = entry->path().filename().string();
    const std::string_view digits =
        std::string_view(name).substr(std::min(std::string_view("domain-").size(), name.size()));
    if (!name.starts_with("domain-") || digits.empty() ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    std::error_code status_error;
    if (fs::is_directory(entry->symlink_status(status_error))) roots.push_back(entry->path());
  }
  std::sort(roots.begin() + 1, roots.end());
  return roots;
}

void remove_node_snapshots(const fs::path& root, const fs::path& run_dir, const std::string& host) {
  if (!check_node_snapshot_tree(root, run_dir, host, false)) return;
  const fs::path dir = node_snapshot_directory(root, run_dir, host);
  std::error_code error;
  fs::remove_all(dir, error);
  if (error)
    throw IoError(fmt::format("cannot remove the node-local snapshots {}: {}", dir.string(),
                              error.message()));
  // Other hosts' directories (on a node that shares this file system) keep it, and so do other
  // hosts' heartbeats: not an error.
  remove_node_run_directory(root, run_dir, /*heartbeats=*/false);
}

void remove_node_run_directory(const fs::path& root, const fs::path& run_dir, bool heartbeats) {
  const fs::path key = run_key(run_dir);
  if (!core::check_private_tree(root, key, false)) return;
  const fs::path run = root / key;
  std::error_code error;
  if (heartbeats && core::check_private_tree(root, key / kHeartbeatDirectory, false))
    fs::remove_all(run / kHeartbeatDirectory, error);
  for (fs::directory_iterator entry(run, error), end; !error && entry != end;
       entry.increment(error)) {
    const std::string name = entry->path().filename().string();
    if (name != kRunDirectoryRecord && name != kHeartbeatDirectory) return;  // a host's
  }
  fs::remove(run / kHeartbeatDirectory, error);  // fails, and it stays, unless empty
  if (fs::exists(run / kHeartbeatDirectory, error)) return;
  fs::remove(run / kRunDirectoryRecord, error);
  fs::remove(run, error);
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
