// `hardy clean --node-local`: removes the node-local snapshot state that crashed runs left on this
// node (checkpoint/stale_snapshots.hpp), as the next job's snapshot writer does after a day, and
// the shared-memory files of killed MPI ranks (comm/mpi/segments.hpp), as every job's start does.
#include <fmt/format.h>

#include <cmath>
#include <iostream>

#include "command_line.hpp"
#include "hardy/checkpoint/stale_snapshots.hpp"
#include "hardy/comm/mpi/segments.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/jobs/commands.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

namespace {

constexpr const char* kCleanUsage =
    R"(Usage: hardy clean --node-local [--snapshot-dir DIR] [--older-than HOURS]

Removes the node-local snapshots that runs left on this node (a crash leaves them for a relaunch
on the same nodes): every run under --snapshot-dir that nothing has written for --older-than
hours. A running job writes its snapshots every few steps, so it is never idle that long; a job
also removes such state itself, a day after the last write, when it starts on the node. Run it on
each node, e.g. `srun --ntasks-per-node=1 hardy clean --node-local`.

It also removes the shared-memory files that killed MPI ranks left in /dev/shm (Open MPI's
sm_segment.* files of this user that no process maps any more), as every job does on its nodes
when it starts.
)";

}  // namespace

po::options_description clean_options() {
  po::options_description options("hardy clean options");
  options.add_options()("help,h", "print this help")(
      "node-local", po::bool_switch(), "remove stale node-local snapshots (the only kind so far)")(
      "snapshot-dir", po::value<std::string>()->default_value(train_default("snapshot-dir")),
      "the snapshot root that `hardy train --snapshot-dir` used")(
      "older-than", po::value<double>()->default_value(1.0),
      "hours since a run's last snapshot write");
  return options;
}

int clean_command(const std::vector<std::string>& args) {
  po::variables_map vm;
  if (!parse_command_line(args, clean_options(), {"hardy clean", kCleanUsage}, vm)) return 0;
  if (!vm["node-local"].as<bool>())
    throw InvalidArgument("say what to clean: --node-local (see hardy clean --help)");
  const double hours = vm["older-than"].as<double>();
  if (!std::isfinite(hours) || hours < 0)
    throw InvalidArgument(fmt::format("--older-than {}: expected hours, 0 or more", hours));
  const std::string root = vm["snapshot-dir"].as<std::string>();
  const auto grace = std::chrono::seconds(std::llround(hours * 3600));
  const auto removed = checkpoint::remove_stale_node_snapshots(root, "", grace);
  for (const auto& run : removed)
    std::cout << fmt::format("removed {} ({:.1f} MB, idle {:.1f} h)\n", run.directory.string(),
                             static_cast<double>(run.bytes) / 1e6, run.idle_s / 3600);
  std::cout << fmt::format("hardy clean: {} stale run(s) removed under {}\n", removed.size(), root);
  std::uintmax_t segment_bytes = 0;
  const auto segments = comm::remove_orphaned_mpi_segments();
  for (const auto& segment : segments) segment_bytes += segment.bytes;
  std::cout << fmt::format(
      "hardy clean: {} shared-memory file(s) of killed MPI ranks removed ({:.1f} MB)\n",
      segments.size(), static_cast<double>(segment_bytes) / 1e6);
  return 0;
}

}  // namespace hardy::jobs
