#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "command_line.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/jobs/commands.hpp"
#include "hardy/jobs/launchers.hpp"
#include "hardy/jobs/schedulers.hpp"
#include "hardy/jobs/train_spec.hpp"
#include "hardy/resilience/supervisor.hpp"
#include "hardy/slurm/hostlist.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

namespace {

std::filesystem::path this_executable() {
  std::error_code error;
  auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::filesystem::path("hardy") : path;
}

// One host per line as Open MPI and MPICH host files have them: the first word counts
// ("node1 slots=4" is node1), `#` starts a comment.
std::vector<std::string> read_hostfile(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw InvalidArgument(fmt::format("--hostfile {}: cannot read it", path));
  std::vector<std::string> hosts;
  std::string line;
  while (std::getline(file, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string host;
    if (words >> host) hosts.push_back(host.substr(0, host.find(':')));
  }
  if (hosts.empty()) throw InvalidArgument(fmt::format("--hostfile {} names no host", path));
  return hosts;
}

void require_distinct(const std::vector<std::string>& hosts, const char* option) {
  std::set<std::string> seen;
  for (const auto& host : hosts)
    if (!seen.insert(host).second)
      throw InvalidArgument(
          fmt::format("{} names {} twice; give each node once and set "
                      "--ranks-per-node for several ranks on a node",
                      option, host));
}

}  // namespace

po::options_description run_options() {
  const resilience::SupervisorConfig defaults;
  const resilience::DetectionConfig detection;

  po::options_description placement("Where the ranks run");
  placement.add_options()("help,h", "print this help")("run-dir", po::value<std::string>(),
                                                       "the job's run directory (required)")(
      "nodes", po::value<int>(),
      "nodes the ranks run on (default: every host given or allocated, less the spares; 1 on "
      "this host alone)")("ranks-per-node", po::value<int>()->default_value(1),
                          "MPI ranks per node (one per GPU or CPU socket)")(
      "hosts", po::value<std::string>(),
      "the nodes, outside a Slurm or LSF allocation: h1,h2 or a hostlist such as node[01-08]")(
      "hostfile", po::value<std::string>(), "the nodes, one per line (`node1 slots=4` is node1)")(
      "spare-nodes", po::value<int>()->default_value(0),
      "keep the last K hosts idle; a relaunch puts them in place of lost nodes")(
      "nodes-per-domain", po::value<int>()->default_value(0),
      "split the nodes into fault domains of K nodes, each its own MPI job: losing a node stops "
      "only its domain while the others train on (0: one domain)")(
      "domain-timeout", po::value<double>()->default_value(10.0),
      "seconds a collective between domains may take before the silent domain counts as lost")(
      "rendezvous", po::value<std::string>()->default_value(defaults.rendezvous),
      "where the domains' leaders meet: file (a directory of the run directory) or redis (a "
      "redis-server started here with a password; for run directories on NFS, Lustre or GPFS, "
      "docs/resilience.md)")(
      "rendezvous-host", po::value<std::string>()->default_value(""),
      "with --rendezvous redis: the name or address the nodes reach this host at (default: its "
      "address on --domain-interface, else its host name)")(
      "domain-interface", po::value<std::string>()->default_value(""),
      "the network the fault domains' leaders (and a redis rendezvous) use: an interface's name "
      "(hsn0, ib0) or a subnet of it (10.100.0.0/16); default: where the host name resolves, "
      "often the management Ethernet")(
      "launcher", po::value<std::string>()->default_value(HARDY_DEFAULT_LAUNCHER),
      "mpirun (Open MPI), mpiexec (MPICH), srun or jsrun")(
      "launcher-path", po::value<std::string>(),
      "the launcher executable (default: the MPI hardy was built with)")(
      "cpus-per-rank", po::value<int>()->default_value(0),
      "CPU cores for each rank, for jsrun's and srun's per-rank resource sets (0: the launcher's "
      "default; jsrun's is one core)")(
      "gpus-per-rank", po::value<int>()->default_value(0),
      "GPUs for each rank, likewise (0: the launcher's default; jsrun's is none)")(
      "launch-agent", po::value<std::string>()->default_value(""),
      "command that starts a daemon on another node instead of ssh, called as `AGENT HOST "
      "COMMAND...` (mpirun, mpiexec)")("ulfm", po::value<bool>(),
                                       "launch with Open MPI's --with-ft ulfm (default: when this "
                                       "build has ULFM)");
  po::options_description recovery("Failure detection and relaunch");
  recovery.add_options()("heartbeat-timeout",
                         po::value<double>()->default_value(detection.heartbeat_timeout_s),
                         "seconds without a heartbeat before Open MPI's detector declares a rank "
                         "dead and the job shrinks around it (ULFM; 0: off, the default: Open MPI "
                         "5.0's detector misfires while a multi-node job starts)")(
      "heartbeat-period", po::value<double>()->default_value(detection.heartbeat_period_s),
      "seconds between heartbeats")(
      "keepalive", po::value<int>()->default_value(detection.keepalive_time_s),
      "seconds of silence before the runtime probes a daemon's connection (then every second, 3 "
      "times) and ends the job when its node is gone, for a relaunch (Open MPI; 0: its default "
      "of 8 minutes)")("max-restarts", po::value<int>()->default_value(defaults.max_restarts),
                       "relaunches after the job died, before giving up")(
      "backoff", po::value<double>()->default_value(defaults.backoff_s),
      "seconds before the first relaunch, doubled each time the job dies again without "
      "committing a new step (at most 60), and back to this after one that did; none after one "
      "that did and lost nodes the relaunch leaves out")(
      "min-world-size", po::value<int>()->default_value(defaults.min_world_size),
      "do not relaunch on fewer ranks than this; inside a Slurm or LSF job, ask the scheduler to "
      "requeue the job without the lost nodes instead (exit status 4)")(
      "max-requeues", po::value<int>()->default_value(defaults.max_requeues),
      "inside a batch job: requeues to ask for without the job committing a new step in "
      "between, before stopping instead")(
      "probe-timeout", po::value<double>()->default_value(defaults.probe_timeout_s),
      "before a relaunch, leave out nodes that do not run `true` through the launch path within "
      "this many seconds")("finish-grace",
                           po::value<double>()->default_value(defaults.finish_grace_s),
                           "seconds the launcher may wait after the job logged job_finished "
                           "(for ranks it left behind) before it is ended")(
      "stall-probe-after", po::value<double>()->default_value(defaults.stall_probe_after_s),
      "when the job commits no step for this many seconds (and at least five of its steps), "
      "probe its nodes; if some do not answer while others do, end the launch and relaunch "
      "without them (with fault domains: the domains they are in), before the runtime's "
      "keepalive would (a frozen or cut-off node); 0: off")(
      "start-timeout", po::value<double>()->default_value(defaults.start_timeout_s),
      "end a launch whose job has not started (logged job_started) this many seconds after it "
      "was launched, and relaunch (a runtime daemon or MPI_Init that hangs); 0: 10 x the longest "
      "start the run has seen, at least 60 s, and 600 s before any");
  po::options_description options("hardy run options");
  options.add(placement).add(recovery);
  return options;
}

int run_command(const std::vector<std::string>& args) {
  // Everything after `--` belongs to `hardy train`.
  const auto separator = std::find(args.begin(), args.end(), "--");
  const std::vector<std::string> own(args.begin(), separator);
  const std::vector<std::string> train_args(separator == args.end() ? separator : separator + 1,
                                            args.end());
  const auto options = run_options();
  po::variables_map vm;
  if (!parse_command_line(
          own, options,
          {"hardy run",
           "Usage: hardy run [--nodes N] --ranks-per-node R --run-dir DIR [--hosts LIST] -- "
           "<hardy train options>\n\n"
           "Launches the training job over MPI and watches it. Failures inside the job are "
           "survived by the\njob itself (with ULFM); when the job dies as a whole, it is "
           "relaunched from its newest committed\nstate on the nodes that did not fail. A launch "
           "counts as completed only when the job logged that\nit finished its last step. Inside a "
           "Slurm or LSF job the nodes are the allocation's.\n"},
          vm))
    return 0;
  if (!vm.count("run-dir")) throw InvalidArgument("--run-dir is required");
  if (std::find(train_args.begin(), train_args.end(), "--run-dir") != train_args.end())
    throw InvalidArgument("give --run-dir to hardy run, not after --");
  // Options the job would refuse end here, before anything is launched (as `hardy submit` checks
  // them before the job queues): every rank, and every domain, would refuse them alike.
  auto checked = train_args;
  checked.insert(checked.end(), {"--run-dir", vm["run-dir"].as<std::string>()});
  const auto spec = parse_train_spec(checked);
  if (!spec) return 0;  // `-- --help` printed the training options
  if (vm.count("hosts") && vm.count("hostfile"))
    throw InvalidArgument("give --hosts or --hostfile, not both");
  resilience::SupervisorConfig config;
  config.ranks_per_node = vm["ranks-per-node"].as<int>();
  const int spares = vm["spare-nodes"].as<int>();
  if (config.ranks_per_node < 1) throw InvalidArgument("--ranks-per-node must be positive");
  if (spares < 0) throw InvalidArgument("--spare-nodes must not be negative");

  // The hosts: given explicitly, else the allocation's, else this host alone.
  std::vector<std::string> hosts;
  std::string source;
  const auto allocation = detect_allocation();
  if (vm.count("hosts")) {
    hosts = slurm::expand_hostlist(vm["hosts"].as<std::string>());
    source = "--hosts";
  } else if (vm.count("hostfile")) {
    hosts = read_hostfile(vm["hostfile"].as<std::string>());
    source = "--hostfile";
  } else if (allocation) {
    hosts = allocation->nodes;
    source = fmt::format("the {} allocation {}", allocation->scheduler, allocation->job_id);
  }
  if (!hosts.empty()) {
    require_distinct(hosts, source.c_str());
    const int available = static_cast<int>(hosts.size());
    const int nodes = vm.count("nodes") ? vm["nodes"].as<int>() : available - spares;
    if (nodes < 1)
      throw InvalidArgument(
          fmt::format("{} has {} host(s): none left for the job after "
                      "--spare-nodes {}",
                      source, available, spares));
    if (nodes + spares > available)
      throw InvalidArgument(
          fmt::format("--nodes {} and --spare-nodes {} need {} hosts but {} has {}", nodes, spares,
                      nodes + spares, source, available));
    config.nodes.assign(hosts.begin(), hosts.begin() + nodes);
    config.spare_nodes.assign(hosts.begin() + nodes, hosts.begin() + nodes + spares);
  } else {
    // This host alone plays every node (and every spare).
    const int nodes = vm.count("nodes") ? vm["nodes"].as<int>() : 1;
    if (nodes < 1) throw InvalidArgument("--nodes must be positive");
    config.nodes.assign(static_cast<std::size_t>(nodes), "localhost");
    config.spare_nodes.assign(static_cast<std::size_t>(spares), "localhost");
  }
  if (allocation) {
    config.scheduler = allocation->scheduler;
    config.scheduler_job_id = allocation->job_id;
    config.scheduler_restart_count = allocation->restart_count;
  }
  const auto launcher_name = vm["launcher"].as<std::string>();
  const LauncherTraits traits = launcher_traits(launcher_name);
  resilience::LauncherSettings launcher_settings;
  launcher_settings.executable = vm.count("launcher-path")   ? vm["launcher-path"].as<std::string>()
                                 : traits.starts_mpi_runtime ? std::string(HARDY_MPIEXEC)
                                                             : launcher_name;
  launcher_settings.launch_agent = vm["launch-agent"].as<std::string>();
  if (!launcher_settings.launch_agent.empty() && !traits.starts_mpi_runtime)
    throw InvalidArgument(
        fmt::format("--launch-agent works with mpirun and mpiexec, not {}", launcher_name));
  launcher_settings.cpus_per_rank = vm["cpus-per-rank"].as<int>();
  launcher_settings.gpus_per_rank = vm["gpus-per-rank"].as<int>();
  if (launcher_settings.cpus_per_rank < 0 || launcher_settings.gpus_per_rank < 0)
    throw InvalidArgument("--cpus-per-rank and --gpus-per-rank must not be negative");
  launcher_settings.ulfm =
      vm.count("ulfm") ? vm["ulfm"].as<bool>() : HARDY_BUILT_WITH_ULFM && traits.offers_ulfm;
  auto& detection = launcher_settings.detection;
  detection.heartbeat_timeout_s = vm["heartbeat-timeout"].as<double>();
  detection.heartbeat_period_s = vm["heartbeat-period"].as<double>();
  detection.keepalive_time_s = vm["keepalive"].as<int>();
  if (detection.heartbeat_timeout_s < 0 || detection.keepalive_time_s < 0)
    throw InvalidArgument("--heartbeat-timeout and --keepalive must not be negative");
  if (detection.heartbeat_timeout_s > 0 &&
      !(detection.heartbeat_period_s > 0 &&
        detection.heartbeat_period_s < detection.heartbeat_timeout_s))
    throw InvalidArgument(fmt::format(
        "--heartbeat-period {} must be positive and shorter than --heartbeat-timeout {}",
        detection.heartbeat_period_s, detection.heartbeat_timeout_s));
  if (traits.keeps_session_dirs) launcher_settings.runtime_dir = private_runtime_dir();
  config.launcher = make_launcher(launcher_name, std::move(launcher_settings), config.scheduler);
  config.hardy = this_executable();
  config.train_args = train_args;
  // Where the ranks keep node-local snapshots, for the cleanup of the nodes when the run ends.
  if (spec->snapshot_every != 0) config.snapshot_dir = spec->snapshot_dir;
  config.run_dir = vm["run-dir"].as<std::string>();
  config.max_restarts = vm["max-restarts"].as<int>();
  config.backoff_s = vm["backoff"].as<double>();
  config.min_world_size = vm["min-world-size"].as<int>();
  config.max_requeues = vm["max-requeues"].as<int>();
  config.probe_timeout_s = vm["probe-timeout"].as<double>();
  config.finish_grace_s = vm["finish-grace"].as<double>();
  config.start_timeout_s = vm["start-timeout"].as<double>();
  config.stall_probe_after_s = vm["stall-probe-after"].as<double>();
  if (config.max_restarts < 0 || config.max_requeues < 0 || config.backoff_s < 0 ||
      config.probe_timeout_s <= 0 || config.finish_grace_s < 0 || config.start_timeout_s < 0 ||
      config.stall_probe_after_s < 0)
    throw InvalidArgument(
        "--max-restarts, --max-requeues, --backoff, --finish-grace, --start-timeout and "
        "--stall-probe-after must not be negative, --probe-timeout must be positive");
  config.nodes_per_domain = vm["nodes-per-domain"].as<int>();
  config.domain_timeout_s = vm["domain-timeout"].as<double>();
  if (config.nodes_per_domain < 0) throw InvalidArgument("--nodes-per-domain must not be negative");
  if (config.domain_timeout_s <= 0) throw InvalidArgument("--domain-timeout must be positive");
  config.rendezvous = vm["rendezvous"].as<std::string>();
  config.rendezvous_host = vm["rendezvous-host"].as<std::string>();
  config.domain_interface = vm["domain-interface"].as<std::string>();
  if (!config.domain_interface.empty() && config.nodes_per_domain == 0)
    throw InvalidArgument(
        "--domain-interface is the network fault domains exchange over: it needs "
        "--nodes-per-domain");
  if (config.rendezvous != "file" && config.rendezvous != "redis")
    throw InvalidArgument(fmt::format("--rendezvous {}: choose file or redis", config.rendezvous));
  if (config.rendezvous != "file" && config.nodes_per_domain == 0)
    throw InvalidArgument(
        "--rendezvous redis is where fault domains meet: it needs --nodes-per-domain");
  if (config.nodes_per_domain > 0) return resilience::supervise_domains(config);
  return resilience::supervise(config);
}

}  // namespace hardy::jobs
