#pragma once
// The launchers `hardy run` knows, behind resilience's Launcher interface: mpirun (Open MPI),
// mpiexec (MPICH's hydra), srun (Slurm) and jsrun (LSF on Summit-like machines). They live here,
// above resilience/, because each knows its own runtime and the batch schedulers it meets; the
// supervisor sees the interface alone, so a new launcher is a class and a table entry in
// launchers.cpp.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hardy/resilience/launcher.hpp"

namespace hardy::jobs {

// What `hardy run` needs to know of a launcher before making one: which of its options apply,
// and their defaults.
struct LauncherTraits {
  // It starts MPI's own runtime on the nodes: it runs from the MPI hardy was built with unless
  // --launcher-path says otherwise, and --launch-agent starts the runtime's daemons.
  bool starts_mpi_runtime = false;
  // Its runtime has Open MPI's ULFM: `--ulfm` defaults to on when this build has ULFM.
  bool offers_ulfm = false;
};

// Throws InvalidArgument naming the launchers there are when `name` is none of them.
LauncherTraits launcher_traits(std::string_view name);

// The launcher called `name`, for a job inside the allocation of `scheduler` ("slurm", "lsf";
// empty outside a batch job): inside a Slurm allocation every launcher reaches single nodes with
// srun, and Open MPI's runtime starts its daemons with srun's --overlap. Throws InvalidArgument
// for an unknown name.
std::shared_ptr<const resilience::Launcher> make_launcher(std::string_view name,
                                                          resilience::LauncherSettings settings,
                                                          std::string_view scheduler);

// --launch-agent as Open MPI reads plm_ssh_agent: alternatives separated by ':' (the first whose
// program is found, as a path or on PATH; else the first), each a program and its arguments
// separated by blanks ("ssh -x" is ssh with -x). Empty for a blank agent.
std::vector<std::string> launch_agent_argv(const std::string& agent);

}  // namespace hardy::jobs
