#include "hardy/slurm/allocation.hpp"

#include <fmt/format.h>

#include "hardy/core/support/error.hpp"
#include "hardy/slurm/hostlist.hpp"

namespace hardy::slurm {

namespace {

std::optional<int> task_count(const batch::Environment& environment, const std::string& name) {
  const auto value = environment.get(name);
  return value ? std::optional(batch::parse_task_count(*value, name)) : std::nullopt;
}

}  // namespace

std::optional<batch::Allocation> read_allocation(const batch::Environment& environment) {
  const auto job_id = environment.get("SLURM_JOB_ID");
  if (!job_id) return std::nullopt;
  const auto nodelist = environment.get("SLURM_JOB_NODELIST");
  if (!nodelist)
    throw InvalidArgument(
        fmt::format("SLURM_JOB_ID is {} but SLURM_JOB_NODELIST is not set", *job_id));
  batch::Allocation allocation{.scheduler = "slurm", .job_id = *job_id};
  try {
    allocation.nodes = expand_hostlist(*nodelist);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("SLURM_JOB_NODELIST: {}", e.what()));
  }
  if (const auto tasks = task_count(environment, "SLURM_NTASKS")) {
    allocation.tasks = *tasks;
  } else {
    const long per_node = task_count(environment, "SLURM_NTASKS_PER_NODE").value_or(1);
    const long total = static_cast<long>(allocation.nodes.size()) * per_node;
    if (total > batch::kMaxTasks)
      throw InvalidArgument(
          fmt::format("SLURM_NTASKS_PER_NODE {} on {} nodes makes more than {} tasks", per_node,
                      allocation.nodes.size(), batch::kMaxTasks));
    allocation.tasks = static_cast<int>(total);
  }
  if (const auto restarts = environment.get("SLURM_RESTART_COUNT")) {
    const long count = batch::parse_count(*restarts, "SLURM_RESTART_COUNT");
    if (count > batch::kMaxTasks)
      throw InvalidArgument(fmt::format("SLURM_RESTART_COUNT '{}' is out of range", *restarts));
    allocation.restart_count = static_cast<int>(count);
  }
  return allocation;
}

}  // namespace hardy::slurm
