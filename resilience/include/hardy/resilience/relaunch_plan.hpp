#pragma once
// The supervisor's decisions, as functions of what it observed, so that they are tested without
// launching anything: did a launch really complete, which nodes did it lose and on what evidence,
// and where does the next launch run.
//
// The run directory is the truth about a launch, not the launcher's exit status: Open MPI's
// runtime ends the whole job with status 0 when it loses a node's daemon, so a launch counts as
// completed only when the job itself logged that it finished its last step.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hardy::resilience {

// What one launch appended to the run directory's events.jsonl (the lines after `offset`, the
// file's size when the launch started), and the last step it committed (metrics.jsonl).
struct LaunchEvents {
  std::optional<long> total_steps;             // job_started "steps": the job's last step
  std::optional<double> started_unix;          // job_started "unix_time"
  std::optional<std::string> finished_status;  // job_finished "status"
  std::optional<long> finished_steps;          // job_finished "steps"
  std::optional<long> last_committed_step;     // the last line of metrics.jsonl
  std::optional<double> last_committed_unix;   // and its unix_time
  // A checkpoint_written or final_checkpoint event: the run directory holds the run's own state.
  bool checkpoint_written = false;
  // The watchdog found the job stuck and ended it (failure_detected by the watchdog): like
  // job_finished, the launcher has nothing left to wait for but ranks that may never return.
  bool ended_by_watchdog = false;
  // Nodes (by index in the launch's node list) that the job itself saw fail, each with the
  // evidence in words: in-job failure_detected events. Circumstantial: see weigh_evidence().
  std::map<std::size_t, std::vector<std::string>> failed_nodes;
  // Nodes whose ranks --inject-failure killed in this launch: the test's own word.
  std::map<std::size_t, std::vector<std::string>> killed_nodes;
  // Nodes the job left out as slow (node_evicted, --straggler evict): its own measured word.
  std::map<std::size_t, std::vector<std::string>> evicted_nodes;
};

// Reads them; missing files and lines cut short by a crash give empty fields, not errors.
LaunchEvents read_launch_events(const std::filesystem::path& run_dir, std::uintmax_t events_offset,
                                double launch_started_unix, int ranks_per_node);

// Drops what the events say about nodes at or past `node_count` (the launch's node list): a
// damaged or stale log may name nodes this launch never had.
void restrict_to_launch(LaunchEvents& events, std::size_t node_count);

// The evidence against a node that its job (or its fault domain) evicted as slow (node_evicted
// with `evidence`): conclusive, as a failed probe is.
std::string evicted_as_slow(const std::string& evidence);
// planned: the job stopped to be relaunched at once, no failure and no backoff (exit status 5):
// to leave out a slow node (job_finished "evicting" with a node_evicted event), a spare in its
// place; or, having shrunk inside, to come back at its full world (job_finished "regrowing",
// regrow_planned).
enum class LaunchVerdict { completed, bad_input, stopped, preempted, planned, failed };
struct Verdict {
  LaunchVerdict kind = LaunchVerdict::failed;
  std::string reason;  // for events and the console
};
// Completed only when job_finished says so at the job's last step, whatever the exit status;
// stopped and preempted only when the exit status and job_finished agree; bad input is exit
// status 2 (the job refused its options before it started); anything else failed.
Verdict judge_launch(int exit_status, const LaunchEvents& events);

// The nodes of a job: those its ranks run on, in rank order, and idle spares.
struct NodeSet {
  std::vector<std::string> active;
  std::vector<std::string> spares;
};
struct ExcludedNode {
  std::string host;
  std::vector<std::string> evidence;
  std::optional<std::string> replaced_by;  // the spare that took its place
};
struct RelaunchPlan {
  NodeSet nodes;                          // where the next launch runs
  std::vector<ExcludedNode> excluded;     // active nodes left out, in their old order
  std::vector<ExcludedNode> spares_lost;  // spares that failed their probe
};
// Which reports against active nodes the relaunch acts on. `conclusive`: the launcher lost the
// node, the node failed its probe, or fault injection killed it. `job_reports`: the job's own
// failure_detected events, which are circumstantial once there is conclusive evidence against
// some node: a runtime that ends the job after losing one node kills the ranks of healthy nodes
// as well, and survivors still recovering log those deaths as failures too. So a node named
// only by the job is left out only when nothing conclusive names any node (a rank that died on
// a node that still answers); otherwise it is kept, and its reports go to `doubted`.
struct WeighedEvidence {
  std::map<std::size_t, std::vector<std::string>> against;  // these nodes are left out
  std::map<std::size_t, std::vector<std::string>> doubted;  // these are kept all the same
};
WeighedEvidence weigh_evidence(const std::map<std::size_t, std::vector<std::string>>& conclusive,
                               const std::map<std::size_t, std::vector<std::string>>& job_reports);

// Active nodes with evidence against them are left out; each is replaced, in order, by the
// first healthy spare, so the world size and every rank's batch stay as they were while spares
// last. Evidence is by index into current.active and current.spares.
RelaunchPlan plan_relaunch(const NodeSet& current,
                           const std::map<std::size_t, std::vector<std::string>>& active_evidence,
                           const std::map<std::size_t, std::vector<std::string>>& spare_evidence);

// Indices of `hosts` named `host` (a host may stand more than once only in single-host runs).
std::vector<std::size_t> indices_of(const std::vector<std::string>& hosts, const std::string& host);

}  // namespace hardy::resilience
