#include <iostream>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "hardy/core/error.hpp"
#include "hardy/jobs/commands.hpp"
#include "hardy/jobs/schedulers.hpp"
#include "hardy/resilience/supervisor.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

namespace {

std::filesystem::path this_executable() {
  std::error_code error;
  auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::filesystem::path("hardy") : path;
}

}  // namespace

int run_command(const std::vector<std::string>& args) {
  // Everything after `--` belongs to `hardy train`.
  const auto separator = std::find(args.begin(), args.end(), "--");
  const std::vector<std::string> own(args.begin(), separator);
  const std::vector<std::string> train_args(separator == args.end() ? separator : separator + 1, args.end());

  po::options_description options("hardy run options");
  options.add_options()("help,h", "print this help")(
      "nodes", po::value<int>(), "nodes of the job (default: the allocation's, or 1 outside a scheduler)")(
      "ranks-per-node", po::value<int>()->default_value(1), "MPI ranks per node (one per GPU or CPU socket)")(
      "run-dir", po::value<std::string>(), "the job's run directory (required)")(
      "launcher", po::value<std::string>()->default_value(HARDY_DEFAULT_LAUNCHER),
      "mpirun (Open MPI), mpiexec (MPICH), srun or jsrun")(
      "launcher-path", po::value<std::string>(), "the launcher executable (default: the MPI hardy was built with)")(
      "ulfm", po::value<bool>(), "launch with Open MPI's --with-ft ulfm (default: when this build has ULFM)")(
      "max-restarts", po::value<int>()->default_value(3), "relaunches after the job died, before giving up")(
      "backoff", po::value<double>()->default_value(2.0), "seconds before the first relaunch, doubled each time")(
      "min-world-size", po::value<int>()->default_value(1), "do not relaunch on fewer ranks than this");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(own).options(options).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InvalidArgument(fmt::format("{} (see hardy run --help)", e.what()));
  }
  if (vm.count("help")) {
    std::cout << "Usage: hardy run --nodes N --ranks-per-node R --run-dir DIR -- <hardy train options>\n\n"
                 "Launches the training job over MPI and watches it. Failures inside the job are survived by the\n"
                 "job itself (with ULFM); when the job dies as a whole, it is relaunched from its latest\n"
                 "checkpoint on the nodes that did not fail.\n\n"
              << options << "\n";
    return 0;
  }
  if (!vm.count("run-dir")) throw InvalidArgument("--run-dir is required");
  if (std::find(train_args.begin(), train_args.end(), "--run-dir") != train_args.end())
    throw InvalidArgument("give --run-dir to hardy run, not after --");
  resilience::SupervisorConfig config;
  config.ranks_per_node = vm["ranks-per-node"].as<int>();
  // Inside a Slurm or LSF job the nodes are the allocation's; outside, every node is this host.
  const auto allocation = detect_allocation();
  const int available = allocation ? static_cast<int>(allocation->nodes.size()) : 0;
  const int nodes = vm.count("nodes") ? vm["nodes"].as<int>() : std::max(available, 1);
  if (nodes < 1 || config.ranks_per_node < 1) throw InvalidArgument("--nodes and --ranks-per-node must be positive");
  if (allocation && nodes > available)
    throw InvalidArgument(fmt::format("--nodes {} but the {} allocation {} has {} node(s)", nodes, allocation->scheduler,
                                      allocation->job_id, available));
  if (allocation) {
    config.nodes.assign(allocation->nodes.begin(), allocation->nodes.begin() + nodes);
    config.scheduler = allocation->scheduler;
    config.scheduler_job_id = allocation->job_id;
    config.scheduler_restart_count = allocation->restart_count;
  } else {
    config.nodes.assign(static_cast<std::size_t>(nodes), "localhost");
  }
  config.launcher = resilience::parse_launcher(vm["launcher"].as<std::string>());
  config.launcher_path = vm.count("launcher-path") ? vm["launcher-path"].as<std::string>()
                         : config.launcher == resilience::Launcher::mpirun || config.launcher == resilience::Launcher::mpiexec
                             ? std::string(HARDY_MPIEXEC)
                             : resilience::to_string(config.launcher);
  config.ulfm = vm.count("ulfm") ? vm["ulfm"].as<bool>() : HARDY_BUILT_WITH_ULFM && config.launcher == resilience::Launcher::mpirun;
  config.hardy = this_executable();
  config.train_args = train_args;
  config.run_dir = vm["run-dir"].as<std::string>();
  config.max_restarts = vm["max-restarts"].as<int>();
  config.backoff_s = vm["backoff"].as<double>();
  config.min_world_size = vm["min-world-size"].as<int>();
  if (config.max_restarts < 0 || config.backoff_s < 0) throw InvalidArgument("--max-restarts and --backoff must not be negative");
  return resilience::supervise(config);
}

}  // namespace hardy::jobs
