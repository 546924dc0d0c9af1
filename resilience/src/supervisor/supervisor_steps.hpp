#pragma once
// What both supervisors (supervisor.cpp, domain_supervisor.cpp) do the same way once a launch has
// ended and it is not over: find out which nodes are gone, and log what a relaunch leaves out.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "hardy/resilience/relaunch_plan.hpp"
#include "hardy/resilience/run_lock.hpp"
#include "hardy/resilience/supervisor.hpp"

namespace hardy::resilience {

// Evidence against nodes, in words, by index into a NodeSet's active nodes and its spares.
struct NodeEvidence {
  std::map<std::size_t, std::vector<std::string>> active;
  std::map<std::size_t, std::vector<std::string>> spares;
  // Active nodes kept all the same: their runtime daemon failed to start, for the first time in
  // this run, and nothing else speaks against them (they answer their probe).
  std::map<std::size_t, std::string> forgiven;
  // The spares asked so far, the first ones in order: a spare past them is neither known good
  // nor known lost (ask_spares_for asks more when the relaunch needs them).
  std::size_t spares_asked = 0;
};

// `known` (what the caller already holds against the active nodes), then the launcher's word in
// `launcher_output`, then a probe of every active node and of the first spares through the launch
// path: one spare for each active node already named, and one more (asking every spare, 14 on the
// goodput bench, took the decision 0.5-0.66 s there; at 4,560 nodes it would be hundreds of ssh
// connections for each failure). When `active_probed` is given (the stall watch's probe of every
// active node, a moment ago: those that did not answer), the active nodes are not asked again,
// only the spares. A node whose daemon failed to start is left out only the second time
// (`start_failures`: the hosts that had one already in this run, updated here) or when its probe
// fails too.
NodeEvidence gather_node_evidence(
    const SupervisorConfig& config, const NodeSet& nodes, const std::string& launcher_output,
    std::set<std::string>& start_failures,
    std::map<std::size_t, std::vector<std::string>> known = {},
    const std::map<std::size_t, std::vector<std::string>>* active_probed = nullptr);

// How many nodes `evidence` names (an entry may be empty).
inline std::size_t named_nodes(const std::map<std::size_t, std::vector<std::string>>& evidence) {
  return static_cast<std::size_t>(std::count_if(
      evidence.begin(), evidence.end(), [](const auto& entry) { return !entry.second.empty(); }));
}

// Asks further spares, in order, until `replacements` of those asked answered or none is left:
// plan_relaunch then takes its replacements from spares known to be healthy.
void ask_spares_for(const SupervisorConfig& config, const NodeSet& nodes, NodeEvidence& evidence,
                    std::size_t replacements);

// The `excluded` field of the supervisors' events: each node with its evidence and its spare.
nlohmann::json excluded_json(const std::vector<ExcludedNode>& nodes);

// The nodes (by index) that did not answer the probe made when the job stopped committing steps
// (StallWatch, hardy/resilience/stall_watch.hpp), each with the evidence in words.
using SilentNodes = std::map<std::size_t, std::vector<std::string>>;
// Probes `nodes` through the launch path after `quiet_s` seconds without a commit (the last
// committed step `last_step`): those that do not answer within the time the others' answers
// took, and at least 0.5 s after the last of them.
SilentNodes probe_silent_nodes(const SupervisorConfig& config,
                               const std::vector<std::string>& nodes, double quiet_s,
                               long last_step);
// Whether a stall's probe ends the launch: some nodes did not answer while others did (a probe
// no node answered says more about this host, or the probe, than about the nodes).
inline bool silence_ends_launch(const SilentNodes& silent, std::size_t nodes) {
  return !silent.empty() && silent.size() < nodes;
}
// How long a launcher ended for silent nodes has after SIGTERM: its runtime's teardown waits for
// the silent nodes' daemons, which never answer.
inline constexpr std::chrono::milliseconds kStalledTeardown{500};
// launch_stalled's `silent`: each node with its evidence.
nlohmann::json silent_json(const SilentNodes& silent, const std::vector<std::string>& nodes);
// The silent nodes' names, in order.
std::vector<std::string> silent_hosts(const SilentNodes& silent,
                                      const std::vector<std::string>& nodes);
// How a launch the supervisor ended for silent `hosts` ended (launch_ended, domain_lost), after
// the launcher's own account of it.
std::string stalled_how(double quiet_s, const std::vector<std::string>& hosts,
                        const std::string& launcher_how);

// Creates the run directory and takes its lock for this `hardy run` (InvalidArgument naming the
// holder when another run has it); returns `config` with the lock's token for the launches.
SupervisorConfig lock_run_directory(const SupervisorConfig& config,
                                    std::unique_ptr<RunDirectoryLock>& lock);

inline constexpr double kStartTimeoutFloorS = 60.0;
inline constexpr double kStartTimeoutStartMultiple = 10.0;
inline constexpr double kStartTimeoutUnlearnedS = 600.0;

// How long a launch may take to start, from its launcher's start to the job's job_started (a
// domain's domain_started), before the supervisor ends it and counts it failed. Nothing else
// notices a start that hangs (a runtime daemon that never spawns its ranks, an MPI_Init that
// never returns): the ranks' watchdogs run only once they train. `fixed_s` when positive (--start-
// timeout); else learned from the starts seen in the run directory, this `hardy run`'s and earlier
// ones' (launch_started events): 10 x the longest, at least 60 s, and 600 s before any was seen.
class StartTimeout {
 public:
  // How a launch the supervisor ended for not starting ended (launch_ended, domain_lost), after
  // the launcher's own account of it.
  static std::string ended_how(double timeout_s, const std::string& launcher_how);
  StartTimeout(double fixed_s, const std::filesystem::path& events_file);
  double seconds() const;
  void seen(double start_s) { longest_ = std::max(longest_, start_s); }

 private:
  double fixed_s_ = 0;
  double longest_ = -1;  // none seen
};

}  // namespace hardy::resilience
