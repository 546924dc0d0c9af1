#pragma once
// When in-job recovery is impossible (an MPI without ULFM, a runtime that aborts the job when it
// loses a node's daemon, more failures than a job allows, a hang), the supervisor relaunches the
// job from its newest committed state on the nodes that are still healthy, taking spares in place
// of lost nodes, with a restart limit and exponential back-off. It never takes a launcher's exit
// status for success: a launch completed only when the job logged that it finished its last step
// (relaunch_plan.hpp). It writes `supervisor_started`, `launch_ended`, `job_relaunched` and
// `supervisor_finished` events into the run directory.
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hardy/resilience/launcher.hpp"

namespace hardy::resilience {

struct SupervisorConfig {
  int ranks_per_node = 1;
  // One entry per node the ranks run on, in rank order; names matter only to launchers that place
  // ranks by host (a run on this host alone uses "localhost" for every node).
  std::vector<std::string> nodes;
  // Idle nodes that take the place of lost ones, so that a relaunch keeps the world size.
  std::vector<std::string> spare_nodes;
  // Starts the ranks, and knows its runtime's messages (launcher.hpp); required.
  std::shared_ptr<const Launcher> launcher;
  std::filesystem::path hardy;          // the hardy executable the ranks run
  std::vector<std::string> train_args;  // `hardy train` options
  std::filesystem::path run_dir;
  // Where the ranks keep their node-local snapshots (`hardy train --snapshot-dir`, as the job
  // reads it); empty when they keep none. Once the run is over every node's are removed.
  std::filesystem::path snapshot_dir;
  int max_restarts = 3;
  double backoff_s = 1.0;  // doubled after each relaunch, at most 60 s
  int min_world_size = 1;
  // Once the job has logged job_finished, how long the launcher may go on waiting (for ranks the
  // job excluded, a frozen node's) before the supervisor ends it.
  double finish_grace_s = 10.0;
  // Before a relaunch every node is asked to run `true` through the launch path; a node that
  // does not answer within this many seconds is left out.
  double probe_timeout_s = 5.0;
  // A launch that commits no step for this long (at least ten of its steps) has its nodes
  // probed; when some answer and some do not, it is ended and relaunched without the silent
  // ones, before the runtime's keepalive would end it (hardy/resilience/stall_watch.hpp). 0: off.
  double stall_probe_after_s = 1.0;
  // A launch whose job has not started (job_started) this many seconds after the launcher did is
  // ended and counts as failed; 0: learned from the run's earlier starts (supervisor_steps.hpp).
  double start_timeout_s = 0;
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
  // Where the domains' leaders meet (domain_store.hpp): "file", gloo's FileStore in the run
  // directory, or "redis", a redis-server this process starts, with a password, listening on
  // every address; the leaders reach it at rendezvous_host (empty: this host's name).
  std::string rendezvous = "file";
  std::string rendezvous_host;
  // The network the domains' leaders exchange over (`hardy train --domain-interface`: an
  // interface's name or a subnet); a redis store is reached at this host's address on it unless
  // rendezvous_host names one. Empty: host names.
  std::string domain_interface;
  std::string scheduler, scheduler_job_id;
  int scheduler_restart_count = 0;
  int max_requeues = 10;
  // Set by the supervisor once it holds the run directory's lock (hardy/resilience/run_lock.hpp):
  // its launches run under it (`hardy train --run-lock-token`).
  std::string run_lock_token;
};

// RUN_DIR/exclude-nodes: the hosts this job lost, one per line, accumulated over its requeues;
// the batch scripts pass them to the scheduler (its list of nodes to avoid) before requeueing.
inline constexpr std::string_view kExcludeNodesFile = "exclude-nodes";
std::filesystem::path exclude_nodes_file(const std::filesystem::path& run_dir);

// The command line of one launch on `nodes`: `hardy train` with the job's options, through the
// config's launcher. A relaunch drops --inject-failure; with `newest_state` it resumes with
// `--resume latest`, in place of any --resume the user gave (that state is older than what the run
// has written since). With `spares_left` spare nodes it tells the job so (--spare-nodes-left),
// for --straggler evict.
std::vector<std::string> launch_command(const SupervisorConfig& config,
                                        const std::vector<std::string>& nodes, bool relaunch,
                                        bool newest_state, std::size_t spares_left = 0);

// Runs the job until it completes, is preempted or stopped, or has failed more than max_restarts
// times; returns the exit status to report (kCompleted only when the job finished its last step).
// It holds the run directory's lock throughout: a second run of the directory is refused
// (InvalidArgument, naming the first).
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
