#include "hardy/slurm/allocation.hpp"

#include <fmt/format.h>

#include "hardy/core/support/error.hpp"
#include "hardy/slurm/hostlist.hpp"

namespace hardy::slurm {

namespace {

int count_variable(const batch::Environment& environment, const std::string& name, int otherwise) {
  const auto value = environment.get(name);
  return value ? static_cast<int>(batch::parse_count(*value, name)) : otherwise;
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
  const int nodes = static_cast<int>(allocation.nodes.size());
  allocation.tasks = count_variable(
      environment, "SLURM_NTASKS", nodes * count_variable(environment, "SLURM_NTASKS_PER_NODE", 1));
  allocation.restart_count = count_variable(environment, "SLURM_RESTART_COUNT", 0);
  return allocation;
}

}  // namespace hardy::slurm
