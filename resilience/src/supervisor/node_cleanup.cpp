#include "supervisor/node_cleanup.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "hardy/checkpoint/checkpoint_directory.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/core/support/json_fields.hpp"
#include "supervisor/launched_job.hpp"

namespace hardy::resilience {

namespace {

// A node's cleanup reads and may rewrite a snapshot (hundreds of MB at DeepCAM's size) before it
// removes the files: more than a probe's answer takes.
constexpr std::chrono::seconds kKeepTimeout{180};
constexpr std::chrono::seconds kRemoveTimeout{60};
// Nodes asked in turn to keep their newest snapshot, at most: the run's first nodes hold the
// last committed step unless several of them died with the job.
constexpr std::size_t kKeepAttempts = 8;

long newest_checkpoint_step(const std::filesystem::path& run_dir) {
  const auto entries = checkpoint::list_checkpoints(run_dir / "checkpoints");
  return entries.empty() ? -1 : entries.back().step;
}

// remove_node_state's work; throws what it meets.
void clean_nodes(const SupervisorConfig& config, bool completed, core::EventLog& events,
                 const std::vector<std::string>& left_out) {
  if (config.snapshot_dir.empty()) return;  // the ranks keep no snapshots
  const double started = core::unix_time();
  std::vector<std::string> program{config.hardy.string(),
                                   "clean",
                                   "--node-local",
                                   "--run-dir",
                                   std::filesystem::absolute(config.run_dir).lexically_normal(),
                                   "--run-lock-token",
                                   config.run_lock_token,
                                   "--snapshot-dir",
                                   config.snapshot_dir.string()};
  std::vector<std::string> nodes;
  for (const auto* list : {&config.nodes, &config.spare_nodes})
    for (const auto& node : *list)
      if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);

  const auto on_nodes = [&](const std::vector<std::string>& hosts, bool keep,
                            std::chrono::seconds timeout) {
    auto command = program;
    if (keep) command.push_back("--keep-newest");
    auto on_one =
        config.launcher->node_command(hosts, static_cast<double>(timeout.count()), command);
    if (on_one == command)  // this host alone: once is enough
      return std::vector<std::optional<std::string>>(
          hosts.size(), run_on_hosts(command, {"localhost"}, timeout).front());
    if (!on_one.empty()) return run_on_hosts(on_one, hosts, timeout);
    // No way to aim at one node (jsrun under LSF): one process on each node, all at once.
    const auto all = config.launcher->command(hosts, 1, command);
    return std::vector<std::optional<std::string>>(hosts.size(),
                                                   run_on_hosts(all, {"all"}, timeout).front());
  };

  // Only nodes that answer are asked: one that is frozen or cut off would hold the cleanup for
  // its whole timeout.
  auto unreachable = nlohmann::json::array();
  const auto leave_out = [&](const std::string& host, const std::string& why) {
    unreachable.push_back({{"host", host}, {"why", why}});
    std::cerr << fmt::format(
        "hardy run: the node-local snapshots on {} could not be removed ({}); the next hardy job "
        "of yours on that node removes them\n",
        host, why);
  };
  if (const auto probe = config.launcher->probe_command(nodes, config.probe_timeout_s);
      !probe.empty()) {
    std::vector<bool> settled(nodes.size());
    for (std::size_t i = 0; i < nodes.size(); ++i)
      settled[i] = std::find(left_out.begin(), left_out.end(), nodes[i]) != left_out.end();
    const auto answers = run_on_hosts(
        probe, nodes, std::chrono::milliseconds(std::llround(config.probe_timeout_s * 1000)),
        settled);
    std::vector<std::string> answering;
    for (std::size_t i = 0; i < nodes.size(); ++i)
      if (answers[i])
        leave_out(nodes[i], "probe: " + *answers[i]);
      else
        answering.push_back(nodes[i]);
    nodes = std::move(answering);
  }

  nlohmann::json kept = nullptr;
  auto left = nlohmann::json::array();
  std::vector<std::string> cleaned;
  const auto last = core::last_json_record(config.run_dir / "metrics.jsonl");
  const long target = last ? core::read_field<long>(*last, "step").value_or(-1) : -1;
  if (!completed && newest_checkpoint_step(config.run_dir) < target) {
    std::vector<std::string> removable;
    std::size_t attempts = 0;
    for (const auto& node : nodes) {
      if (attempts == kKeepAttempts || newest_checkpoint_step(config.run_dir) >= target) {
        removable.push_back(node);
        continue;
      }
      ++attempts;
      const long before = newest_checkpoint_step(config.run_dir);
      const auto failed = on_nodes({node}, true, kKeepTimeout).front();
      const long after = newest_checkpoint_step(config.run_dir);
      if (after > before) kept = {{"host", node}, {"step", after}};
      if (!failed) {  // kept, or had nothing newer: its snapshots are gone
        cleaned.push_back(node);
        continue;
      }
      // Its snapshots may hold the newest state, which could not be written out (a full disk):
      // they stay for a `--resume latest` on the node rather than go unkept.
      left.push_back({{"host", node}, {"why", *failed}});
      std::cerr << fmt::format(
          "hardy run: {}'s newest snapshot could not be kept as a checkpoint ({}); its snapshots "
          "stay there\n",
          node, *failed);
    }
    nodes = std::move(removable);
  }
  if (!nodes.empty()) {
    const auto answers = on_nodes(nodes, false, kRemoveTimeout);
    for (std::size_t i = 0; i < nodes.size(); ++i)
      if (answers[i])
        leave_out(nodes[i], *answers[i]);
      else
        cleaned.push_back(nodes[i]);
  }
  events.emit("node_state_removed", {{"nodes", cleaned},
                                     {"unreachable", unreachable},
                                     {"kept", kept},
                                     {"left", left},
                                     {"seconds", core::unix_time() - started}});
}

}  // namespace

void remove_node_state(const SupervisorConfig& config, bool completed, core::EventLog& events,
                       const std::vector<std::string>& left_out) {
  // The run's outcome is decided: a cleanup that cannot be done must not change its exit status.
  try {
    clean_nodes(config, completed, events, left_out);
  } catch (const std::exception& e) {
    std::cerr << "hardy run: the node-local snapshots of the run could not be removed: " << e.what()
              << "\n";
  }
}

}  // namespace hardy::resilience
