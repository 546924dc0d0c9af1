#include "supervisor/domain_log.hpp"

#include <algorithm>

#include "hardy/core/support/event_schema.hpp"
#include "hardy/core/support/json_fields.hpp"
#include "hardy/resilience/events.hpp"
#include "hardy/resilience/relaunch_plan.hpp"

namespace hardy::resilience {

DomainLog::DomainLog(std::filesystem::path file, int domains)
    : records_(std::move(file)), latest_(static_cast<std::size_t>(domains)) {}

void DomainLog::poll() {
  bool replaced = false;
  const auto records = records_.read(&replaced);
  if (replaced) latest_.assign(latest_.size(), Latest{});
  for (const auto& record : records) {
    const auto domain = core::read_field<long>(record, "domain");
    const auto event = core::read_field<std::string>(record, "event");
    if (!domain || !event || *domain < 0 || *domain >= static_cast<long>(latest_.size())) continue;
    const double time = core::read_field<double>(record, "unix_time").value_or(0);
    Latest& latest = latest_[static_cast<std::size_t>(*domain)];
    if (*event == event_kind("job_started") || *event == event_kind("domain_started"))
      latest.started = std::max(latest.started, time);
    else if (*event == event_kind("job_finished") || *event == event_kind("domain_finished")) {
      const auto status = core::read_field<std::string>(record, "status").value_or("");
      if (status == "completed")
        latest.finished = std::max(latest.finished, time);
      else if (status == "failed" || status == "regrowing" || status == "evicting")
        latest.ending = std::max(latest.ending, time);
    } else if (*event == event_kind("domain_joined"))
      latest.joined = std::max(latest.joined, time);
    else if (*event == event_kind("regrow_planned"))
      latest.regrowing = std::max(latest.regrowing, time);
    else if (*event == event_kind("node_evicted"))
      if (const auto node =
              core::read_field<std::size_t>(record, event_field("node_evicted", "node")))
        latest.evictions.push_back(
            {time, *node,
             core::read_field<std::string>(record, event_field("node_evicted", "evidence"))
                 .value_or("no evidence given")});
  }
}

std::optional<double> DomainLog::started(int index, double since) {
  poll();
  const double at = latest_.at(static_cast<std::size_t>(index)).started;
  return at >= since ? std::optional<double>(at) : std::nullopt;
}

bool DomainLog::finished(int index, double since) {
  poll();
  return latest_.at(static_cast<std::size_t>(index)).finished >= since;
}

bool DomainLog::ending(int index, double since) {
  poll();
  return latest_.at(static_cast<std::size_t>(index)).ending >= since;
}

bool DomainLog::joined(int index, double since) {
  poll();
  return latest_.at(static_cast<std::size_t>(index)).joined >= since;
}

bool DomainLog::regrowing(int index, double since) {
  poll();
  return latest_.at(static_cast<std::size_t>(index)).regrowing >= since;
}

std::map<std::size_t, std::vector<std::string>> DomainLog::evicted(int index, double since) {
  poll();
  std::map<std::size_t, std::vector<std::string>> nodes;
  for (const auto& eviction : latest_.at(static_cast<std::size_t>(index)).evictions)
    if (eviction.time >= since) nodes[eviction.node].push_back(evicted_as_slow(eviction.evidence));
  return nodes;
}

}  // namespace hardy::resilience
