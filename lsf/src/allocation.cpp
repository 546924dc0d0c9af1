#include "hardy/lsf/allocation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "hardy/core/support/error.hpp"

namespace hardy::lsf {

namespace {

using HostSlots = std::vector<std::pair<std::string, int>>;

// The host file lists a host once per slot, in rank order: (host, slots) in first-seen order.
HostSlots read_host_file(const std::string& path) {
  std::ifstream file(path);
  if (!file)
    throw InvalidArgument(fmt::format("LSB_DJOB_HOSTFILE names {}, which cannot be read", path));
  HostSlots hosts;
  std::map<std::string, std::size_t> index;  // host -> its place in `hosts`
  std::string host;
  for (long lines = 1; file >> host; ++lines) {
    if (lines > batch::kMaxTasks)
      throw InvalidArgument(
          fmt::format("LSB_DJOB_HOSTFILE {} lists more than {} slots", path, batch::kMaxTasks));
    const auto [seen, added] = index.try_emplace(host, hosts.size());
    if (added)
      hosts.emplace_back(host, 1);
    else
      ++hosts[seen->second].second;
  }
  if (hosts.empty())
    throw InvalidArgument(fmt::format("LSB_DJOB_HOSTFILE {} lists no hosts", path));
  return hosts;
}

}  // namespace

bool first_host_is_launch_node(const std::vector<std::pair<std::string, int>>& hosts) {
  return hosts.size() > 1 && hosts.front().second == 1 &&
         std::all_of(hosts.begin() + 1, hosts.end(),
                     [](const auto& host) { return host.second > 1; });
}

std::vector<std::pair<std::string, int>> parse_mcpu_hosts(std::string_view text) {
  std::vector<std::pair<std::string, int>> hosts;
  std::istringstream words{std::string(text)};
  std::string host, slots;
  while (words >> host) {
    if (!(words >> slots))
      throw InvalidArgument(
          fmt::format("LSB_MCPU_HOSTS '{}' is not pairs of host and slot count", text));
    hosts.emplace_back(
        host, batch::parse_task_count(slots, fmt::format("LSB_MCPU_HOSTS: the slots of {}", host)));
  }
  if (hosts.empty()) throw InvalidArgument("LSB_MCPU_HOSTS lists no hosts");
  return hosts;
}

std::optional<batch::Allocation> read_allocation(const batch::Environment& environment) {
  const auto job_id = environment.get("LSB_JOBID");
  if (!job_id) return std::nullopt;
  batch::Allocation allocation{.scheduler = "lsf", .job_id = *job_id};
  HostSlots hosts;
  if (const auto host_file = environment.get("LSB_DJOB_HOSTFILE")) {
    hosts = read_host_file(*host_file);
  } else if (const auto mcpu_hosts = environment.get("LSB_MCPU_HOSTS")) {
    hosts = parse_mcpu_hosts(*mcpu_hosts);
  } else {
    throw InvalidArgument(fmt::format(
        "LSB_JOBID is {} but neither LSB_DJOB_HOSTFILE nor LSB_MCPU_HOSTS is set", *job_id));
  }
  // On CSM machines (Summit, Sierra) the batch script runs on a shared launch node that LSF
  // lists first, with one slot; no rank may land there.
  if (first_host_is_launch_node(hosts)) hosts.erase(hosts.begin());
  std::set<std::string> seen;
  long tasks = 0;
  for (const auto& [host, slots] : hosts) {
    if (seen.insert(host).second) allocation.nodes.push_back(host);
    tasks += slots;
  }
  if (tasks > batch::kMaxTasks)
    throw InvalidArgument(
        fmt::format("the LSF hosts give {} slots, more than {}", tasks, batch::kMaxTasks));
  allocation.tasks = static_cast<int>(tasks);
  allocation.restart_count = environment.get("LSB_RESTART") == "Y" ? 1 : 0;
  return allocation;
}

}  // namespace hardy::lsf
