#include "hardy/jobs/schedulers.hpp"

#include <fmt/format.h>

#include "hardy/core/support/error.hpp"
#include "hardy/lsf/lsf_scheduler.hpp"
#include "hardy/resilience/supervisor.hpp"
#include "hardy/resilience/training_session.hpp"
#include "hardy/slurm/slurm_scheduler.hpp"

namespace hardy::jobs {

// The batch scripts requeue a job when `hardy run` exits with the status of a preempted job.
static_assert(batch::kRequeueExitStatus == resilience::kPreempted);
static_assert(batch::kExcludeNodesFile == resilience::kExcludeNodesFile);

std::unique_ptr<batch::Scheduler> make_scheduler(std::string_view name) {
  if (name == "slurm") return std::make_unique<slurm::SlurmScheduler>();
  if (name == "lsf") return std::make_unique<lsf::LsfScheduler>();
  throw InvalidArgument(fmt::format("unknown scheduler '{}'; hardy knows slurm and lsf", name));
}

std::optional<batch::Allocation> detect_allocation(const batch::Environment& environment) {
  for (const auto* name : {"slurm", "lsf"}) {
    if (auto allocation = make_scheduler(name)->allocation(environment)) return allocation;
  }
  return std::nullopt;
}

}  // namespace hardy::jobs
