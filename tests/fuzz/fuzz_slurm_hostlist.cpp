// Slurm's node list and task counts as a job's environment gives them (SLURM_JOB_NODELIST,
// SLURM_NTASKS, SLURM_NTASKS_PER_NODE, SLURM_RESTART_COUNT): `hardy run` reads them on the batch
// node before anything else, so a malformed value must give a clear error, never a crash or a
// list too large to hold.
#include <cstdint>

#include "fuzz_support.hpp"
#include "hardy/slurm/allocation.hpp"
#include "hardy/slurm/hostlist.hpp"

namespace {
constexpr std::size_t kMaxHosts = 1'000'000;  // expand_hostlist's documented limit
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hardy;
  fuzz::FuzzInput input(data, size);
  const std::string ntasks = input.text(24);
  const std::string per_node = input.text(24);
  const std::string restarts = input.text(24);
  const std::string nodelist = input.rest();

  std::vector<std::string> hosts;
  if (fuzz::accepts([&] { hosts = slurm::expand_hostlist(nodelist); })) {
    if (hosts.size() > kMaxHosts) fuzz::broken_promise("more hosts than the documented limit");
    for (const auto& host : hosts)
      if (host.empty()) fuzz::broken_promise("an empty host name in an accepted node list");
  }
  fuzz::accepts([&] {
    const auto allocation =
        slurm::read_allocation(batch::Environment({{"SLURM_JOB_ID", "1"},
                                                   {"SLURM_JOB_NODELIST", nodelist},
                                                   {"SLURM_NTASKS", ntasks},
                                                   {"SLURM_NTASKS_PER_NODE", per_node},
                                                   {"SLURM_RESTART_COUNT", restarts}}));
    if (!allocation) fuzz::broken_promise("no allocation inside a Slurm job");
    if (allocation->nodes.empty()) fuzz::broken_promise("an accepted allocation without nodes");
    if (allocation->tasks < 1) fuzz::broken_promise("an accepted allocation without tasks");
  });
  return 0;
}
