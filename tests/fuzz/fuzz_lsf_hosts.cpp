// LSF's host lists as a job's environment gives them: LSB_MCPU_HOSTS ("hostA 4 hostB 4"), or the
// file LSB_DJOB_HOSTFILE names (one line per slot), with LSB_RESTART. `hardy run` reads them on
// the batch node: a malformed value must give a clear error, never a crash.
#include <cstdint>

#include "fuzz_support.hpp"
#include "hardy/lsf/allocation.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hardy;
  fuzz::FuzzInput input(data, size);
  const bool use_host_file = input.byte() & 1;
  const std::string restart = input.text(8);
  const std::string text = input.rest();

  std::vector<std::pair<std::string, int>> hosts;
  if (fuzz::accepts([&] { hosts = lsf::parse_mcpu_hosts(text); })) {
    for (const auto& [host, slots] : hosts)
      if (host.empty() || slots < 1)
        fuzz::broken_promise("an accepted host without a name or slots");
    lsf::first_host_is_launch_node(hosts);
  }
  const auto host_file = fuzz::scratch_directory() / "djob_hostfile";
  if (use_host_file) fuzz::write_file(host_file, text);
  fuzz::accepts([&] {
    const auto allocation =
        use_host_file
            ? lsf::read_allocation(batch::Environment({{"LSB_JOBID", "7"},
                                                       {"LSB_DJOB_HOSTFILE", host_file.string()},
                                                       {"LSB_RESTART", restart}}))
            : lsf::read_allocation(batch::Environment(
                  {{"LSB_JOBID", "7"}, {"LSB_MCPU_HOSTS", text}, {"LSB_RESTART", restart}}));
    if (!allocation) fuzz::broken_promise("no allocation inside an LSF job");
    if (allocation->nodes.empty() || allocation->tasks < 1)
      fuzz::broken_promise("an accepted allocation without nodes or tasks");
  });
  return 0;
}
