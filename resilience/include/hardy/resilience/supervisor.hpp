#pragma once
// When in-job recovery is impossible (an MPI without ULFM, a lost launcher, more failures than a
// job allows, a hang), the supervisor relaunches the job from its latest checkpoint on the nodes
// that are still healthy, with a restart limit and exponential back-off. It writes
// `supervisor_started`, `job_relaunched` and `supervisor_finished` events into the run directory.
#include <filesystem>
#include <string>
#include <vector>

namespace hardy::resilience {

enum class Launcher { mpirun, mpiexec, srun, jsrun };
Launcher parse_launcher(const std::string& name);
std::string to_string(Launcher launcher);

struct SupervisorConfig {
  int ranks_per_node = 1;
  // One entry per node; names matter only to launchers that place ranks by host (a local run
  // uses "localhost" for every node).
  std::vector<std::string> nodes;
  Launcher launcher = Launcher::mpirun;
  std::filesystem::path launcher_path;        // the mpirun/mpiexec/srun/jsrun executable
  bool ulfm = false;                          // Open MPI's `--with-ft ulfm`
  std::vector<std::string> launcher_args;     // extra flags, before the program
  std::filesystem::path hardy;                // the hardy executable the ranks run
  std::vector<std::string> train_args;        // `hardy train` options
  std::filesystem::path run_dir;
  int max_restarts = 3;
  double backoff_s = 2.0;                     // doubled after each relaunch, at most 60 s
  int min_world_size = 1;
  // The batch job this runs in, if any, for the events.
  std::string scheduler, scheduler_job_id;
  int scheduler_restart_count = 0;
};

// The command line of one launch of `world` ranks on `nodes`.
std::vector<std::string> launch_command(const SupervisorConfig& config, const std::vector<std::string>& nodes,
                                        bool resume);

// Runs the job until it completes, is preempted or stopped, or has failed more than max_restarts
// times; returns the exit status to report (the job's own when it ended by itself).
int supervise(const SupervisorConfig& config);

}  // namespace hardy::resilience
