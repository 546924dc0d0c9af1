#include "hardy/lsf/allocation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "hardy/core/error.hpp"

namespace hardy::lsf {

namespace {

// The host file lists a host once per slot, in rank order; nodes are its distinct names.
void add_slots(batch::Allocation& allocation, const std::string& host, int slots) {
  if (std::find(allocation.nodes.begin(), allocation.nodes.end(), host) == allocation.nodes.end())
    allocation.nodes.push_back(host);
  allocation.tasks += slots;
}

void read_host_file(batch::Allocation& allocation, const std::string& path) {
  std::ifstream file(path);
  if (!file)
    throw InvalidArgument(fmt::format("LSB_DJOB_HOSTFILE names {}, which cannot be read", path));
  std::string host;
  while (file >> host) add_slots(allocation, host, 1);
  if (allocation.tasks == 0)
    throw InvalidArgument(fmt::format("LSB_DJOB_HOSTFILE {} lists no hosts", path));
}

}  // namespace

std::vector<std::pair<std::string, int>> parse_mcpu_hosts(std::string_view text) {
  std::vector<std::pair<std::string, int>> hosts;
  std::istringstream words{std::string(text)};
  std::string host, slots;
  while (words >> host) {
    if (!(words >> slots))
      throw InvalidArgument(
          fmt::format("LSB_MCPU_HOSTS '{}' is not pairs of host and slot count", text));
    const long count =
        batch::parse_count(slots, fmt::format("LSB_MCPU_HOSTS: the slots of {}", host));
    if (count == 0)
      throw InvalidArgument(fmt::format("LSB_MCPU_HOSTS '{}' gives {} no slots", text, host));
    hosts.emplace_back(host, static_cast<int>(count));
  }
  if (hosts.empty()) throw InvalidArgument("LSB_MCPU_HOSTS lists no hosts");
  return hosts;
}

std::optional<batch::Allocation> read_allocation(const batch::Environment& environment) {
  const auto job_id = environment.get("LSB_JOBID");
  if (!job_id) return std::nullopt;
  batch::Allocation allocation{.scheduler = "lsf", .job_id = *job_id};
  if (const auto host_file = environment.get("LSB_DJOB_HOSTFILE")) {
    read_host_file(allocation, *host_file);
  } else if (const auto mcpu_hosts = environment.get("LSB_MCPU_HOSTS")) {
    for (const auto& [host, slots] : parse_mcpu_hosts(*mcpu_hosts))
      add_slots(allocation, host, slots);
  } else {
    throw InvalidArgument(fmt::format(
        "LSB_JOBID is {} but neither LSB_DJOB_HOSTFILE nor LSB_MCPU_HOSTS is set", *job_id));
  }
  allocation.restart_count = environment.get("LSB_RESTART") == "Y" ? 1 : 0;
  return allocation;
}

}  // namespace hardy::lsf
