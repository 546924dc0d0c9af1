#pragma once
// The launchers `hardy run` knows, behind resilience's Launcher interface: mpirun (Open MPI),
// mpiexec (MPICH's hydra), srun (Slurm) and jsrun (LSF on Summit-like machines). They live here,
// above resilience/, because each knows its own runtime and the batch schedulers it meets; the
// supervisor sees the interface alone, so a new launcher is a class and a table entry in
// launchers.cpp.
#include <filesystem>
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
  // Its runtime keeps per-launch files named after pids (Open MPI's session directories, by
  // default in /tmp): `hardy run` gives it a directory of the user's own
  // (LauncherSettings::runtime_dir, private_runtime_dir() below).
  bool keeps_session_dirs = false;
};

// Where `hardy run` has the runtime of a launcher that keeps_session_dirs put them:
// $TMPDIR (else /tmp)/hardy-openmpi-<uid>, created or checked as private to this user (0700,
// owned, no link: core/support/private_tree.hpp); empty when the user chose a place already
// (PRTE_MCA_prte_tmpdir_base in the environment). A leftover of a killed launch of another user,
// named after a pid a later launcher gets, stopped that launch before any rank started ("The
// PMIx server's listener thread failed to start").
std::filesystem::path private_runtime_dir();

// What every rank checks on its own node before MPI starts: the other nodes' daemons are only
// handed the path private_runtime_dir() checked on the launching host, and Open MPI uses a
// directory it finds there whoever owns it. When this process's PMIx server keeps its session
// directory (PMIX_SERVER_TMPDIR) in hardy's runtime directory, that directory and the session
// directory must pass core::check_private_tree; throws core::UnsafeDirectory naming the node and
// what is wrong. Does nothing outside Open MPI or where the user chose the place.
void check_node_runtime_dir();

// Removes, from the runtime directory `dir`, the session directories (NAME.PID) of this user
// whose process is gone: what launches killed with SIGKILL left there, which would stop a later
// launcher given the same pid. Never follows a link, never touches another user's entry, never
// throws; returns the names removed.
std::vector<std::string> remove_dead_session_dirs(const std::filesystem::path& dir);

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
