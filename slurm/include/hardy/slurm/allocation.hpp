#pragma once
// The allocation of a Slurm job, from the variables Slurm sets in its environment.
#include <optional>

#include "hardy/batch/allocation.hpp"
#include "hardy/batch/environment.hpp"

namespace hardy::slurm {

// nullopt outside a Slurm job (no SLURM_JOB_ID). Nodes from SLURM_JOB_NODELIST (a hostlist
// expression); tasks from SLURM_NTASKS, else nodes x SLURM_NTASKS_PER_NODE, else one per node;
// the restart count from SLURM_RESTART_COUNT (unset before the first requeue, so 0). Throws
// InvalidArgument naming the variable when one is malformed or the node list is missing.
std::optional<batch::Allocation> read_allocation(const batch::Environment& environment);

}  // namespace hardy::slurm
