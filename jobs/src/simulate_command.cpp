#include <iostream>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "hardy/core/error.hpp"
#include "hardy/jobs/commands.hpp"
#include "hardy/resilience/scale_model.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

int simulate_command(const std::vector<std::string>& args) {
  resilience::ScaleAssumptions a;
  po::options_description options("hardy simulate options");
  options.add_options()("help,h", "print this help")(
      "from-run", po::value<std::string>(), "run directory of a job that recovered from a failure (required)")(
      "relaunch-run", po::value<std::string>(), "run directory of a job that the supervisor relaunched (optional)")(
      "nodes", po::value<int>(&a.nodes)->default_value(a.nodes), "nodes of the projected machine")(
      "ranks-per-node", po::value<int>(&a.ranks_per_node)->default_value(a.ranks_per_node), "ranks (GPUs) per node")(
      "latency-us", po::value<double>()->default_value(a.network_latency_s * 1e6), "network latency per message")(
      "bandwidth-gbs", po::value<double>()->default_value(a.network_bandwidth_bytes_s / 1e9), "link bandwidth, GB/s")(
      "pfs-read-gbs", po::value<double>()->default_value(a.pfs_read_bandwidth_bytes_s / 1e9),
      "one reader's parallel-file-system bandwidth, GB/s")(
      "launch-s-per-1000-nodes", po::value<double>(&a.launch_s_per_1000_nodes)->default_value(a.launch_s_per_1000_nodes),
      "job launch and MPI_Init time per 1000 nodes")(
      "detection-s", po::value<double>(&a.failure_detection_s)->default_value(0), "failure detection time (0: measured)")(
      "step-s", po::value<double>(&a.step_s)->default_value(0), "training step time at scale (0: measured)");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(options).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InvalidArgument(fmt::format("{} (see hardy simulate --help)", e.what()));
  }
  if (vm.count("help")) {
    std::cout << "Usage: hardy simulate --from-run RUN_DIR [--nodes 4560 --ranks-per-node 6 ...]\n\n"
                 "Projects recovery time to a large machine from the costs measured in a run that survived a\n"
                 "failure, under the assumptions in docs/scale-model.md.\n\n"
              << options << "\n";
    return 0;
  }
  if (!vm.count("from-run")) throw InvalidArgument("--from-run RUN_DIR is required");
  if (a.nodes < 1 || a.ranks_per_node < 1) throw InvalidArgument("--nodes and --ranks-per-node must be positive");
  a.network_latency_s = vm["latency-us"].as<double>() * 1e-6;
  a.network_bandwidth_bytes_s = vm["bandwidth-gbs"].as<double>() * 1e9;
  a.pfs_read_bandwidth_bytes_s = vm["pfs-read-gbs"].as<double>() * 1e9;
  auto measured = resilience::measure_recovery(vm["from-run"].as<std::string>());
  if (vm.count("relaunch-run")) measured.relaunch_s = resilience::measure_recovery(vm["relaunch-run"].as<std::string>()).relaunch_s;
  std::cout << fmt::format(
      "measured on {} ranks ({}):\n  detection {:.3f} s, shrink {:.4f} s, memory rollback {:.4f} s, slowest step "
      "{:.3f} s, state {:.1f} MiB{}\n\n",
      measured.world_size, measured.source, measured.detection_s, measured.shrink_s, measured.restore_memory_s,
      measured.first_step_s, measured.model_bytes / (1 << 20),
      measured.relaunch_s > 0 ? fmt::format(", supervisor relaunch {:.2f} s", measured.relaunch_s) : "");
  std::cout << fmt::format("projected to {} nodes x {} ranks = {} ranks:\n", a.nodes, a.ranks_per_node,
                           static_cast<long>(a.nodes) * a.ranks_per_node);
  std::cout << fmt::format("  {:<28} {:>9} {:>18} {:>9} {:>10} {:>9}\n", "path", "detect s", "shrink or launch s", "restore s",
                           "1st step s", "total s");
  const auto projections = resilience::project(measured, a);
  for (const auto& p : projections)
    std::cout << fmt::format("  {:<28} {:>9.3f} {:>18.3f} {:>9.3f} {:>10.3f} {:>9.2f}\n", p.path, p.detect_s, p.shrink_s,
                             p.restore_s, p.first_step_s, p.total());
  std::cout << fmt::format("\n  supervisor relaunch / in-job memory rollback: {:.1f}x\n",
                           projections[2].total() / projections[0].total());
  return 0;
}

}  // namespace hardy::jobs
