#include "hardy/resilience/scale_model.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hardy/core/error.hpp"

namespace hardy::resilience {

namespace {

std::vector<nlohmann::json> read_events(const std::filesystem::path& run_dir) {
  std::ifstream file(run_dir / "events.jsonl");
  if (!file) throw InvalidArgument(fmt::format("{} has no events.jsonl", run_dir.string()));
  std::vector<nlohmann::json> events;
  std::string line;
  while (std::getline(file, line))
    if (auto record = nlohmann::json::parse(line, nullptr, false); !record.is_discarded()) events.push_back(record);
  return events;
}

double rounds(double ranks) { return std::max(1.0, std::ceil(std::log2(std::max(2.0, ranks)))); }

}  // namespace

MeasuredRecovery measure_recovery(const std::filesystem::path& run_dir) {
  const auto events = read_events(run_dir);
  MeasuredRecovery m;
  m.source = (run_dir / "events.jsonl").string();
  double relaunch_end = -1;
  for (const auto& e : events) {
    const std::string name = e.value("event", "");
    const double t = e.value("unix_time", 0.0);
    if (name == "job_started" && m.world_size == 0) m.world_size = e.value("world_size", 0);
    if (name == "failure_detected" && e.contains("detection_latency_s")) m.detection_s = e["detection_latency_s"];
    if (name == "communicator_shrunk") {
      m.shrink_s = e.value("seconds", 0.0);
      m.world_size = e.value("old_size", m.world_size);
    }
    if (name == "state_restored" && e.value("source", "") == "memory") m.restore_memory_s = e.value("seconds", 0.0);
    if (name == "state_restored" && e.value("source", "") == "checkpoint" && !e.contains("path"))
      m.restore_checkpoint_s = e.value("seconds", 0.0);
    if (name == "checkpoint_written") m.model_bytes = e.value("bytes", 0.0);
    if (name == "job_relaunched") relaunch_end = t - e.value("seconds_since_end", 0.0) - e.value("backoff_s", 0.0);
    if (name == "state_restored" && e.contains("path") && relaunch_end > 0) {
      m.relaunch_s = t - relaunch_end;
      relaunch_end = -1;
    }
  }
  if (m.shrink_s == 0 && m.relaunch_s == 0)
    throw InvalidArgument(fmt::format("{} records no recovery (no communicator_shrunk or job_relaunched event)", m.source));
  // The first step after a recovery pays for rebuilt buffers and cold caches: take the slowest.
  std::ifstream metrics(run_dir / "metrics.jsonl");
  std::string line;
  std::vector<double> steps;
  while (std::getline(metrics, line))
    if (auto record = nlohmann::json::parse(line, nullptr, false); !record.is_discarded())
      steps.push_back(record.value("step_s", 0.0));
  if (!steps.empty()) m.first_step_s = *std::max_element(steps.begin(), steps.end());
  return m;
}

std::vector<RecoveryProjection> project(const MeasuredRecovery& measured, const ScaleAssumptions& a) {
  const double ranks = static_cast<double>(a.nodes) * a.ranks_per_node;
  const double measured_rounds = rounds(std::max(2, measured.world_size));
  const double detect = a.failure_detection_s > 0 ? a.failure_detection_s : measured.detection_s;
  const double step = a.step_s > 0 ? a.step_s : measured.first_step_s;
  // Shrink and agreement run a constant number of tree-shaped rounds: the measured time per
  // round, times the rounds at scale, plus the network latency of each round.
  const double shrink = measured.shrink_s / measured_rounds * rounds(ranks) + rounds(ranks) * 4 * a.network_latency_s;
  // A pipelined tree broadcast of the state: one pass over the bytes plus log(P) latencies.
  const double broadcast = measured.model_bytes / a.network_bandwidth_bytes_s + rounds(ranks) * a.network_latency_s;
  const double read = measured.model_bytes / a.pfs_read_bandwidth_bytes_s;
  const double launch = a.launch_s_per_1000_nodes * a.nodes / 1000.0;

  std::vector<RecoveryProjection> projections;
  projections.push_back({"in-job, memory rollback", detect, shrink, measured.restore_memory_s, step});
  projections.push_back({"in-job, checkpoint restore", detect, shrink, read + broadcast, step});
  projections.push_back({"supervisor relaunch", detect, launch, read + broadcast, step});
  return projections;
}

}  // namespace hardy::resilience
