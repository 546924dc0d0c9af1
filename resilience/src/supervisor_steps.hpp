#pragma once
// What both supervisors (supervisor.cpp, domain_supervisor.cpp) do the same way once a launch has
// ended and it is not over: find out which nodes are gone, and log what a relaunch leaves out.
#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "hardy/resilience/relaunch_plan.hpp"
#include "hardy/resilience/supervisor.hpp"

namespace hardy::resilience {

// Evidence against nodes, in words, by index into a NodeSet's active nodes and its spares.
struct NodeEvidence {
  std::map<std::size_t, std::vector<std::string>> active;
  std::map<std::size_t, std::vector<std::string>> spares;
  // Active nodes kept all the same: their runtime daemon failed to start, for the first time in
  // this run, and nothing else speaks against them (they answer their probe).
  std::map<std::size_t, std::string> forgiven;
};

// `known` (what the caller already holds against the active nodes), then the launcher's word in
// `launcher_output`, then a probe of every node, spares included, through the launch path. A
// node whose daemon failed to start is left out only the second time (`start_failures`: the
// hosts that had one already in this run, updated here) or when its probe fails too.
NodeEvidence gather_node_evidence(const SupervisorConfig& config, const NodeSet& nodes,
                                  const std::string& launcher_output,
                                  std::set<std::string>& start_failures,
                                  std::map<std::size_t, std::vector<std::string>> known = {});

// The `excluded` field of the supervisors' events: each node with its evidence and its spare.
nlohmann::json excluded_json(const std::vector<ExcludedNode>& nodes);

}  // namespace hardy::resilience
