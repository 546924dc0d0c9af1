#pragma once
// When in-job recovery is impossible (an MPI without ULFM, a runtime that aborts the job when it
// loses a node's daemon, more failures than a job allows, a hang), the supervisor relaunches the
// job from its newest committed state on the nodes that are still healthy, taking spares in place
// of lost nodes, with a restart limit and exponential back-off. It never takes a launcher's exit
// status for success: a launch completed only when the job logged that it finished its last step
// (relaunch_plan.hpp). It writes `supervisor_started`, `launch_ended`, `job_relaunched` and
// `supervisor_finished` events into the run directory.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace hardy::resilience {

enum class Launcher { mpirun, mpiexec, srun, jsrun };
Launcher parse_launcher(const std::string& name);
std::string to_string(Launcher launcher);

// Open MPI's failure detection. A process that dies is reported by its node's daemon at once,
// and ULFM shrinks the job around it. A node that is cut off or frozen is noticed only by the
// runtime's out-of-band keepalive, which ends the whole job (then the supervisor relaunches):
// short keepalives, on by default, make that seconds instead of about 8 minutes.
// Open MPI's MPI-level heartbeat detector would let ULFM shrink around a frozen node inside the
// job, but in Open MPI 5.0.x it declares ranks that are still inside MPI_Init dead on a multi-node
// launch (and then crashes there, or hangs in MPI_Finalize), so it is off unless asked for
// (docs/resilience.md has the measurements).
struct DetectionConfig {
  double heartbeat_timeout_s = 0;  // 0: Open MPI's heartbeat detector off
  double heartbeat_period_s = 0.25;
  int keepalive_time_s = 1;  // 0: the runtime's defaults (300 s + 9 x 20 s)
  int keepalive_interval_s = 1;
  int keepalive_probes = 3;
};

struct SupervisorConfig {
  int ranks_per_node = 1;
  // One entry per node the ranks run on, in rank order; names matter only to launchers that place
  // ranks by host (a run on this host alone uses "localhost" for every node).
  std::vector<std::string> nodes;
  // Idle nodes that take the place of lost ones, so that a relaunch keeps the world size.
  std::vector<std::string> spare_nodes;
  Launcher launcher = Launcher::mpirun;
  std::filesystem::path launcher_path;  // the mpirun/mpiexec/srun/jsrun executable
  bool ulfm = false;                    // Open MPI's `--with-ft ulfm`
  // Starts the launcher's daemon on another node instead of ssh (Open MPI: plm_ssh_agent,
  // MPICH: -launcher-exec); called as `AGENT [options] HOST COMMAND...`. Empty: ssh.
  std::string launch_agent;
  DetectionConfig detection;
  std::vector<std::string> launcher_args;  // extra flags, before the program
  std::filesystem::path hardy;             // the hardy executable the ranks run
  std::vector<std::string> train_args;     // `hardy train` options
  std::filesystem::path run_dir;
  int max_restarts = 3;
  double backoff_s = 1.0;  // doubled after each relaunch, at most 60 s
  int min_world_size = 1;
  // Once the job has logged job_finished, how long the launcher may go on waiting (for ranks the
  // job excluded, a frozen node's) before the supervisor ends it.
  double finish_grace_s = 10.0;
  // Before a relaunch every node is asked to run `true` through the launch path; a node that
  // does not answer within this many seconds is left out.
  double probe_timeout_s = 5.0;
  // The batch job this runs in, if any. Inside one, a job left with fewer than min_world_size
  // healthy ranks asks its batch script for a requeue (exit status kPreempted) instead of
  // stopping: the dead nodes are written to exclude_nodes_file() for the script to exclude, and
  // the job resumes from its newest state wherever the scheduler puts it. A preempted job
  // (SIGUSR1 before the time limit) asks the same way. After max_requeues requests that made no
  // progress (requeue_requested events at the same last committed step) it stops instead, so a
  // job that cannot get going does not cycle through the queue for ever; requeues that move the
  // job forward (a time limit at a time) do not count.
  // Fault domains: groups of this many nodes, each its own MPI job, so that losing a node stops
  // only its group while the others train on (docs/resilience.md). 0: one domain of every node.
  int nodes_per_domain = 0;
  double domain_timeout_s =
      10;  // the cross-domain collectives' timeout (`hardy train --domain-timeout`)
  std::string scheduler, scheduler_job_id;
  int scheduler_restart_count = 0;
  int max_requeues = 10;
};

// RUN_DIR/exclude-nodes: the hosts this job lost, one per line, accumulated over its requeues;
// the batch scripts pass them to the scheduler (Slurm's ExcNodeList) before requeueing.
inline constexpr std::string_view kExcludeNodesFile = "exclude-nodes";
std::filesystem::path exclude_nodes_file(const std::filesystem::path& run_dir);

// The command line of one launch on `nodes`. A relaunch drops --inject-failure; with
// `newest_state` it resumes with `--resume latest`, in place of any --resume the user gave (that
// state is older than what the run has written since).
std::vector<std::string> launch_command(const SupervisorConfig& config,
                                        const std::vector<std::string>& nodes, bool relaunch,
                                        bool newest_state);
// --launch-agent as Open MPI reads plm_ssh_agent: alternatives separated by ':' (the first whose
// program is found, as a path or on PATH; else the first), each a program and its arguments
// separated by blanks ("ssh -x" is ssh with -x). Empty for a blank agent.
std::vector<std::string> launch_agent_argv(const std::string& agent);
// The command that asks one node ({host}) whether it is alive through the launch path, or empty
// when the nodes are this host.
std::vector<std::string> probe_command(const SupervisorConfig& config,
                                       const std::vector<std::string>& nodes);

// Runs the job until it completes, is preempted or stopped, or has failed more than max_restarts
// times; returns the exit status to report (kCompleted only when the job finished its last step).
int supervise(const SupervisorConfig& config);

// supervise() for a job of several fault domains (nodes_per_domain dividing the nodes into two or
// more): one launcher per domain; a domain that ends before the job is lost alone, the others are
// told the new members (a generation in the rendezvous store under RUN_DIR/rendezvous/), and the
// lost domain is relaunched (a spare in place of a lost node) to join the running job and heal
// from a live domain. Throws hardy::InvalidArgument for a domain size that does not divide the
// nodes, before anything is launched.
int supervise_domains(const SupervisorConfig& config);

// The `--inject-failure` options of one domain: `node=N@...` and `rank=R@...` count nodes and
// ranks job-wide; a domain keeps those that fall in it, renumbered within it.
std::vector<std::string> domain_train_args(const std::vector<std::string>& train_args, int domain,
                                           int nodes_per_domain, int ranks_per_node);

}  // namespace hardy::resilience
