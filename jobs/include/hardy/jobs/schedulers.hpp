#pragma once
// The batch schedulers hardy knows (Slurm, LSF), by name, and the allocation this process runs in.
#include <memory>
#include <optional>
#include <string_view>

#include "hardy/batch/allocation.hpp"
#include "hardy/batch/environment.hpp"
#include "hardy/batch/scheduler.hpp"

namespace hardy::jobs {

// "slurm" or "lsf"; throws InvalidArgument naming the scheduler otherwise.
std::unique_ptr<batch::Scheduler> make_scheduler(std::string_view name);

// The allocation of the batch job this process runs in: Slurm's when SLURM_JOB_ID is set, else
// LSF's when LSB_JOBID is set, else nullopt (not inside a batch job). `hardy run` takes its
// node list and restart count from here. Throws InvalidArgument naming the variable when the
// scheduler's variables are malformed.
std::optional<batch::Allocation> detect_allocation(
    const batch::Environment& environment = batch::Environment::current());

}  // namespace hardy::jobs
