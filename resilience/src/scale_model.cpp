#include "hardy/resilience/scale_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hardy/core/support/error.hpp"

namespace hardy::resilience {

namespace {

std::vector<nlohmann::json> read_events(const std::filesystem::path& run_dir) {
  std::ifstream file(run_dir / "events.jsonl");
  if (!file) throw InvalidArgument(fmt::format("{} has no events.jsonl", run_dir.string()));
  std::vector<nlohmann::json> events;
  std::string line;
  while (std::getline(file, line))
    if (auto record = nlohmann::json::parse(line, nullptr, false); !record.is_discarded())
      events.push_back(record);
  return events;
}

double rounds(double ranks) { return std::max(1.0, std::ceil(std::log2(std::max(2.0, ranks)))); }

}  // namespace

MeasuredRecovery measure_recovery(const std::filesystem::path& run_dir) {
  const auto events = read_events(run_dir);
  MeasuredRecovery m;
  m.source = (run_dir / "events.jsonl").string();
  double relaunch_end = -1, last_commit = 0, relaunched_at = -1, restarted_at = -1;
  std::ifstream metrics(run_dir / "metrics.jsonl");
  std::vector<std::pair<double, double>> commits;  // (unix_time, step_s)
  for (std::string line; std::getline(metrics, line);)
    if (auto record = nlohmann::json::parse(line, nullptr, false); !record.is_discarded())
      commits.emplace_back(record.value("unix_time", 0.0), record.value("step_s", 0.0));
  for (const auto& e : events) {
    const std::string name = e.value("event", "");
    const double t = e.value("unix_time", 0.0);
    if (name == "job_started" && m.world_size == 0) m.world_size = e.value("world_size", 0);
    if (name == "failure_detected" && e.contains("detection_latency_s"))
      m.detection_s = e["detection_latency_s"];
    if (name == "communicator_shrunk") {
      m.shrink_s = e.value("seconds", 0.0);
      m.world_size = e.value("old_size", m.world_size);
    }
    if (name == "state_restored" && e.value("source", "") == "memory")
      m.restore_memory_s = e.value("seconds", 0.0);
    if (name == "state_restored" && e.value("source", "") == "checkpoint" && !e.contains("path"))
      m.restore_checkpoint_s = e.value("seconds", 0.0);
    if (name == "checkpoint_written") m.model_bytes = e.value("bytes", 0.0);
    if (name == "launch_ended" && m.relaunch_nodes == 0) {
      // The runtime's detection, bounded from below by the last step committed before it.
      for (const auto& [at, step_s] : commits)
        if (at > 0 && at <= t) last_commit = at;
      if (last_commit > 0) m.relaunch_detect_s = t - last_commit;
      if (e.contains("last_committed_step") && e["last_committed_step"].is_number())
        m.relaunch_steps_lost = e["last_committed_step"].get<long>();
    }
    if (name == "job_relaunched" && relaunch_end < 0 && m.relaunch_nodes == 0) {
      relaunch_end = t - e.value("seconds_since_end", 0.0) - e.value("backoff_s", 0.0);
      relaunched_at = t;
      m.relaunch_decide_s = e.value("decide_s", 0.0);
      m.relaunch_nodes = static_cast<int>(e.value("nodes", std::vector<std::string>{}).size());
    }
    if (name == "job_started" && relaunched_at > 0 && restarted_at < 0) {
      restarted_at = t;
      m.relaunch_launch_s = t - relaunched_at;
    }
    if (name == "state_restored" && e.contains("path") && relaunch_end > 0 && m.relaunch_s == 0) {
      m.relaunch_s = t - relaunch_end;
      if (restarted_at > 0) m.relaunch_restore_s = t - restarted_at;
      m.relaunch_restored_from = e.value("source", "");
      m.relaunch_steps_lost -= e.value("step", 0L);
    }
  }
  if (m.relaunch_s == 0) m.relaunch_steps_lost = 0;
  if (m.shrink_s == 0 && m.relaunch_s == 0)
    throw InvalidArgument(fmt::format(
        "{} records no recovery (no communicator_shrunk or job_relaunched event)", m.source));
  // The first step after a recovery pays for rebuilt buffers and cold caches: take the slowest.
  for (const auto& commit : commits) m.first_step_s = std::max(m.first_step_s, commit.second);
  return m;
}

std::vector<RecoveryProjection> project(const MeasuredRecovery& measured,
                                        const ScaleAssumptions& a) {
  const double ranks = static_cast<double>(a.nodes) * a.ranks_per_node;
  const double measured_rounds = rounds(std::max(2, measured.world_size));
  const double detect = a.failure_detection_s > 0 ? a.failure_detection_s : measured.detection_s;
  const double step = a.step_s > 0 ? a.step_s : measured.first_step_s;
  // Shrink and agreement run a constant number of tree-shaped rounds: the measured time per
  // round, times the rounds at scale, plus the network latency of each round.
  const double shrink =
      measured.shrink_s / measured_rounds * rounds(ranks) + rounds(ranks) * 4 * a.network_latency_s;
  // A pipelined tree broadcast of the state: one pass over the bytes plus log(P) latencies.
  const double broadcast =
      measured.model_bytes / a.network_bandwidth_bytes_s + rounds(ranks) * a.network_latency_s;
  const double read = measured.model_bytes / a.pfs_read_bandwidth_bytes_s;
  // A launch costs at least what it cost here, and grows with the nodes it starts.
  const double launch =
      std::max(measured.relaunch_launch_s, a.launch_s_per_1000_nodes * a.nodes / 1000.0);
  // The runtime notices a lost daemon through its own connection (a reset, or the keepalive): a
  // per-node event, like ULFM's detection; deciding probes every node at once.
  const double relaunch_detect =
      a.failure_detection_s > 0
          ? a.failure_detection_s
          : (measured.relaunch_detect_s > 0 ? measured.relaunch_detect_s : detect);
  const double decide = measured.relaunch_decide_s;
  const double node_local_read = measured.model_bytes / a.node_local_read_bytes_s;

  std::vector<RecoveryProjection> projections;
  if (measured.shrink_s > 0) {
    projections.push_back(
        {"in-job, memory rollback", detect, shrink, measured.restore_memory_s, step});
    projections.push_back({"in-job, checkpoint restore", detect, shrink, read + broadcast, step});
  }
  projections.push_back(
      {"relaunch, checkpoint", relaunch_detect + decide, launch, read + broadcast, step});
  projections.push_back({"relaunch, node-local snapshot", relaunch_detect + decide, launch,
                         node_local_read + broadcast, step});
  return projections;
}

}  // namespace hardy::resilience
