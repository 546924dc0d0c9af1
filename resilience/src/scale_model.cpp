#include "hardy/resilience/scale_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"

namespace hardy::resilience {

// Event kinds and fields by name, checked against core/support/event_schema.hpp at compile time.
using core::event_field;
using core::event_kind;

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
    // A field of the wrong type, or of another hardy version's event, counts as missing.
    const auto field = [&e]<class T>(std::string_view key, T otherwise) {
      return core::read_field<T>(e, key).value_or(otherwise);
    };
    const std::string name = field("event", std::string());
    const double t = field("unix_time", 0.0);
    if (name == event_kind("job_started") && m.world_size == 0)
      m.world_size = field(event_field("job_started", "world_size"), 0);
    if (name == event_kind("failure_detected"))
      m.detection_s = field(event_field("failure_detected", "detection_latency_s"), m.detection_s);
    if (name == event_kind("communicator_shrunk")) {
      m.shrink_s = field(event_field("communicator_shrunk", "seconds"), 0.0);
      m.world_size = field(event_field("communicator_shrunk", "old_size"), m.world_size);
    }
    const std::string restored_from = field(event_field("state_restored", "source"), std::string());
    const bool restored_by_relaunch = e.contains(event_field("state_restored", "path"));
    if (name == event_kind("state_restored") && restored_from == "memory")
      m.restore_memory_s = field(event_field("state_restored", "seconds"), 0.0);
    if (name == event_kind("state_restored") && restored_from == "checkpoint" &&
        !restored_by_relaunch)
      m.restore_checkpoint_s = field(event_field("state_restored", "seconds"), 0.0);
    if (name == event_kind("checkpoint_written"))
      m.model_bytes = field(event_field("checkpoint_written", "bytes"), 0.0);
    if (name == event_kind("launch_ended") && m.relaunch_nodes == 0) {
      // The runtime's detection, bounded from below by the last step committed before it.
      for (const auto& [at, step_s] : commits)
        if (at > 0 && at <= t) last_commit = at;
      if (last_commit > 0) m.relaunch_detect_s = t - last_commit;
      if (const auto step =
              core::read_field<long>(e, event_field("launch_ended", "last_committed_step")))
        m.relaunch_steps_lost = *step;
    }
    if (name == event_kind("job_relaunched") && relaunch_end < 0 && m.relaunch_nodes == 0) {
      relaunch_end = t - field(event_field("job_relaunched", "seconds_since_end"), 0.0) -
                     field(event_field("job_relaunched", "backoff_s"), 0.0);
      relaunched_at = t;
      m.relaunch_decide_s = field(event_field("job_relaunched", "decide_s"), 0.0);
      m.relaunch_nodes = static_cast<int>(
          field(event_field("job_relaunched", "nodes"), std::vector<std::string>{}).size());
    }
    if (name == event_kind("job_started") && relaunched_at > 0 && restarted_at < 0) {
      restarted_at = t;
      m.relaunch_launch_s = t - relaunched_at;
    }
    if (name == event_kind("state_restored") && restored_by_relaunch && relaunch_end > 0 &&
        m.relaunch_s == 0) {
      m.relaunch_s = t - relaunch_end;
      if (restarted_at > 0) m.relaunch_restore_s = t - restarted_at;
      m.relaunch_restored_from = restored_from;
      m.relaunch_steps_lost -= field(event_field("state_restored", "step"), 0L);
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
