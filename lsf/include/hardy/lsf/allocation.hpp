#pragma once
// The allocation of an LSF job, from the variables LSF sets in its environment.
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hardy/batch/allocation.hpp"
#include "hardy/batch/environment.hpp"

namespace hardy::lsf {

// nullopt outside an LSF job (no LSB_JOBID). Hosts from the file LSB_DJOB_HOSTFILE names (one
// line per slot), else from LSB_MCPU_HOSTS ("hostA 4 hostB 4"); tasks are the slots. LSF does not
// count reruns: restart_count is 1 when LSB_RESTART=Y (the job ran before), else 0. Throws
// InvalidArgument naming the variable when one is malformed, the host file cannot be read, or
// neither host variable is set. A launch node (see first_host_is_launch_node) is left out.
std::optional<batch::Allocation> read_allocation(const batch::Environment& environment);

// True when the first of several hosts has one slot and every other host more than one: the
// shared launch ("batch") node of CSM machines such as Summit, where the job script runs and
// jsrun starts ranks on the compute nodes that follow ("batch3 1 a01n01 42 a01n02 42").
bool first_host_is_launch_node(const std::vector<std::pair<std::string, int>>& hosts);

// "hostA 4 hostB 4" as (host, slots) pairs; throws InvalidArgument naming the text.
std::vector<std::pair<std::string, int>> parse_mcpu_hosts(std::string_view text);

}  // namespace hardy::lsf
