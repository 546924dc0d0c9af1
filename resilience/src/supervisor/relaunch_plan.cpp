#include "hardy/resilience/relaunch_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "hardy/core/support/event_log.hpp"
#include "hardy/resilience/events.hpp"
#include "supervisor/launch_event_reader.hpp"

namespace hardy::resilience {

// Event kinds and fields by name, checked against hardy/resilience/events.hpp at compile time.
using resilience::event_field;
using resilience::event_kind;
using resilience::event_value;

namespace {

void add_evidence(std::map<std::size_t, std::vector<std::string>>& evidence, std::size_t node,
                  std::string what) {
  auto& list = evidence[node];
  if (std::find(list.begin(), list.end(), what) == list.end()) list.push_back(std::move(what));
}

}  // namespace

namespace {

// What one record of events.jsonl says of its launch.
void note_event(LaunchEvents& launch, const nlohmann::json& record) {
  // Fields of another type or range count as missing (core::read_field): a damaged line must
  // not stop the supervisor. Kinds and fields are named through hardy/resilience/events.hpp (a name
  // it lacks does not compile); kinds it does not know (another hardy version's) fall through every
  // branch.
  const std::string event = core::read_field<std::string>(record, "event").value_or("");
  if (event == event_kind("job_started")) {
    if (const auto steps = core::read_field<long>(record, event_field("job_started", "steps")))
      launch.total_steps = steps;
    launch.started_unix = core::read_field<double>(record, "unix_time");
  } else if (event == event_kind("job_finished")) {
    launch.finished_status =
        core::read_field<std::string>(record, event_field("job_finished", "status")).value_or("");
    launch.finished_steps = core::read_field<long>(record, event_field("job_finished", "steps"));
  } else if (event == event_kind("checkpoint_written") || event == event_kind("final_checkpoint")) {
    launch.checkpoint_written = true;
  } else if (event == event_kind("node_evicted")) {
    if (const auto node =
            core::read_field<std::size_t>(record, event_field("node_evicted", "node")))
      add_evidence(launch.evicted_nodes, *node,
                   evicted_as_slow(core::read_field<std::string>(
                                       record, event_field("node_evicted", "evidence"))
                                       .value_or("no evidence given")));
  } else if (event == event_kind("failure_detected")) {
    if (core::read_field<std::string>(record, event_field("failure_detected", "detected_by")) ==
        event_value("failure_detected", "detected_by", "watchdog"))
      launch.ended_by_watchdog = true;
    const auto ranks =
        core::read_field<std::vector<long>>(record, event_field("failure_detected", "failed_ranks"))
            .value_or(std::vector<long>{});
    for (const std::size_t node : core::read_field<std::vector<std::size_t>>(
                                      record, event_field("failure_detected", "failed_nodes"))
                                      .value_or(std::vector<std::size_t>{}))
      add_evidence(
          launch.failed_nodes, node,
          fmt::format(
              "job: ranks [{}] failed at step {} ({})", fmt::join(ranks, ", "),
              core::read_field<long>(record, event_field("failure_detected", "step")).value_or(0),
              core::read_field<std::string>(record, event_field("failure_detected", "detected_by"))
                  .value_or("in-job detection")));
  }
}

}  // namespace

LaunchEventReader::LaunchEventReader(std::filesystem::path run_dir, std::uintmax_t events_offset,
                                     double launch_started_unix, int ranks_per_node)
    : run_dir_(std::move(run_dir)),
      records_(run_dir_ / "events.jsonl", events_offset),
      launch_started_unix_(launch_started_unix),
      ranks_per_node_(ranks_per_node) {}

const LaunchEvents& LaunchEventReader::read() {
  bool replaced = false;
  const auto records = records_.read(&replaced);
  if (replaced) from_log_ = {};
  for (const auto& record : records) note_event(from_log_, record);
  launch_ = from_log_;
  if (const auto metrics = core::last_json_record(run_dir_ / "metrics.jsonl")) {
    launch_.last_committed_step = core::read_field<long>(*metrics, "step");
    launch_.last_committed_unix = core::read_field<double>(*metrics, "unix_time");
  }
  // Victims of injected failures note when they died (FailureInjector); their nodes are lost too.
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir_ / "checkpoints", error)) {
    const auto name = entry.path().filename().string();
    if (!name.starts_with("injected-kill-")) continue;
    double time = 0;
    if (!(std::ifstream(entry.path()) >> time) || time < launch_started_unix_) continue;
    const int rank = std::atoi(name.c_str() + std::strlen("injected-kill-"));
    add_evidence(launch_.killed_nodes, static_cast<std::size_t>(rank / ranks_per_node_),
                 fmt::format("job: rank {} was killed by --inject-failure", rank));
  }
  return launch_;
}

LaunchEvents read_launch_events(const std::filesystem::path& run_dir, std::uintmax_t events_offset,
                                double launch_started_unix, int ranks_per_node) {
  return LaunchEventReader(run_dir, events_offset, launch_started_unix, ranks_per_node).read();
}

std::string evicted_as_slow(const std::string& evidence) {
  return fmt::format("job: evicted as slow ({})", evidence);
}

void restrict_to_launch(LaunchEvents& events, std::size_t node_count) {
  for (auto* nodes : {&events.failed_nodes, &events.killed_nodes, &events.evicted_nodes})
    std::erase_if(*nodes, [&](const auto& entry) { return entry.first >= node_count; });
}

Verdict judge_launch(int exit_status, const LaunchEvents& events) {
  const bool finished_all = events.finished_status == "completed" && events.total_steps &&
                            events.finished_steps == events.total_steps;
  if (finished_all)
    return {LaunchVerdict::completed, fmt::format("completed at step {} (launcher exit status {})",
                                                  *events.total_steps, exit_status)};
  if (exit_status == 2 && !events.total_steps)
    return {LaunchVerdict::bad_input,
            "the job refused its options or a node's setup (exit status 2)"};
  if (exit_status == 3 && events.finished_status == "stopped")
    return {LaunchVerdict::stopped, "the job stopped at its limits (exit status 3)"};
  if (exit_status == 4 && events.finished_status == "preempted")
    return {LaunchVerdict::preempted, "the job was preempted (exit status 4)"};
  if (exit_status == 5 && events.finished_status == "evicting" && !events.evicted_nodes.empty())
    return {LaunchVerdict::planned,
            fmt::format("the job left out a slow node (exit status 5) at step {}",
                        events.finished_steps.value_or(0))};
  if (exit_status == 5 && events.finished_status == "regrowing")
    return {LaunchVerdict::planned,
            fmt::format("the job stopped at step {} to come back at its full world (exit status 5)",
                        events.finished_steps.value_or(0))};
  const std::string where = events.last_committed_step
                                ? fmt::format("last committed step {}", *events.last_committed_step)
                                : std::string("no step committed");
  const std::string of =
      events.total_steps ? fmt::format(" of {}", *events.total_steps) : std::string();
  const std::string said = events.finished_status
                               ? fmt::format("job_finished says '{}'", *events.finished_status)
                               : std::string("no job_finished event");
  return {LaunchVerdict::failed,
          fmt::format("launcher exit status {}, {}, {}{}", exit_status, said, where, of)};
}

std::vector<std::size_t> indices_of(const std::vector<std::string>& hosts,
                                    const std::string& host) {
  std::vector<std::size_t> found;
  for (std::size_t i = 0; i < hosts.size(); ++i)
    if (hosts[i] == host) found.push_back(i);
  return found;
}

WeighedEvidence weigh_evidence(const std::map<std::size_t, std::vector<std::string>>& conclusive,
                               const std::map<std::size_t, std::vector<std::string>>& job_reports) {
  WeighedEvidence weighed;
  for (const auto& [node, evidence] : conclusive)
    for (const auto& what : evidence) add_evidence(weighed.against, node, what);
  const bool any_conclusive = std::any_of(conclusive.begin(), conclusive.end(),
                                          [](const auto& entry) { return !entry.second.empty(); });
  for (const auto& [node, evidence] : job_reports) {
    const auto found = weighed.against.find(node);
    const bool named = found != weighed.against.end() && !found->second.empty();
    for (const auto& what : evidence)
      add_evidence(named || !any_conclusive ? weighed.against : weighed.doubted, node, what);
  }
  return weighed;
}

RelaunchPlan plan_relaunch(const NodeSet& current,
                           const std::map<std::size_t, std::vector<std::string>>& active_evidence,
                           const std::map<std::size_t, std::vector<std::string>>& spare_evidence) {
  RelaunchPlan plan;
  std::vector<std::string> healthy_spares;
  for (std::size_t i = 0; i < current.spares.size(); ++i) {
    if (const auto found = spare_evidence.find(i);
        found != spare_evidence.end() && !found->second.empty())
      plan.spares_lost.push_back({current.spares[i], found->second, std::nullopt});
    else
      healthy_spares.push_back(current.spares[i]);
  }
  std::size_t next_spare = 0;
  for (std::size_t i = 0; i < current.active.size(); ++i) {
    const auto found = active_evidence.find(i);
    if (found == active_evidence.end() || found->second.empty()) {
      plan.nodes.active.push_back(current.active[i]);
      continue;
    }
    ExcludedNode excluded{current.active[i], found->second, std::nullopt};
    if (next_spare < healthy_spares.size()) {
      // The spare takes the lost node's place in rank order, so ranks keep their shards.
      excluded.replaced_by = healthy_spares[next_spare++];
      plan.nodes.active.push_back(*excluded.replaced_by);
    }
    plan.excluded.push_back(std::move(excluded));
  }
  plan.nodes.spares.assign(healthy_spares.begin() + static_cast<std::ptrdiff_t>(next_spare),
                           healthy_spares.end());
  return plan;
}

}  // namespace hardy::resilience
