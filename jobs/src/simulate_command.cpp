#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <iostream>

#include "command_line.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/jobs/commands.hpp"
#include "hardy/jobs/goodput_model.hpp"
#include "hardy/jobs/scale_model.hpp"
#include "hardy/resilience/training_config.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

po::options_description simulate_options() {
  const ScaleAssumptions a;
  po::options_description options("hardy simulate options");
  options.add_options()("help,h", "print this help")(
      "from-run", po::value<std::string>(),
      "run directory of a job that recovered from a failure (required)")(
      "relaunch-run", po::value<std::string>(),
      "run directory of a job that the supervisor relaunched (optional)")(
      "nodes", po::value<int>()->default_value(a.nodes), "nodes of the projected machine")(
      "ranks-per-node", po::value<int>()->default_value(a.ranks_per_node), "ranks (GPUs) per node")(
      "latency-us", po::value<double>()->default_value(a.network_latency_s * 1e6),
      "network latency per message")(
      "bandwidth-gbs", po::value<double>()->default_value(a.network_bandwidth_bytes_s / 1e9),
      "link bandwidth, GB/s")(
      "pfs-read-gbs", po::value<double>()->default_value(a.pfs_read_bandwidth_bytes_s / 1e9),
      "one reader's parallel-file-system bandwidth, GB/s")(
      "launch-s-per-1000-nodes", po::value<double>()->default_value(a.launch_s_per_1000_nodes),
      "job launch and MPI_Init time per 1000 nodes")(
      "node-local-read-gbs", po::value<double>()->default_value(a.node_local_read_bytes_s / 1e9),
      "reading a node-local snapshot from node memory, GB/s")(
      "detection-s", po::value<double>()->default_value(0), "failure detection time (0: measured)")(
      "step-s", po::value<double>()->default_value(0), "training step time at scale (0: measured)");
  const EttrAssumptions e;
  po::options_description ettr("effective training time (--ettr)");
  ettr.add_options()("ettr",
                     "project the effective training time ratio of one job and of fault domains "
                     "(needs --scale-from, not --from-run)")(
      "scale-from", po::value<std::string>(),
      "results of bench/cluster/scale_bench.py: start and recovery times fitted against the "
      "node count")("nodes-per-domain", po::value<int>()->default_value(e.nodes_per_domain),
                    "nodes per fault domain of the projected job")(
      "hours-between-interruptions",
      po::value<double>()->default_value(e.hours_between_interruptions_per_16k_gpus),
      "mean hours between interruptions per 16,384 GPUs (Llama 3's: 3)")(
      "job-hours", po::value<double>()->default_value(e.job_hours),
      "hours of one allocation (the job starts once in it)")(
      "domain-step-overhead", po::value<double>()->default_value(-1),
      "per-step price of domains, percent of a step (negative: --domain-price-from's, else the "
      "scale bench's step times)")(
      "domain-price-from", po::value<std::string>(),
      "results of bench/cluster/domain_bench.py: the per-step price of domains meeting every "
      "--domain-sync-every steps, measured against one job on the same nodes")(
      "domain-sync-every", po::value<int>()->default_value(e.domain_sync_every),
      "the domains meet every N-th step: a lost domain costs (N-1)/2 more steps on average (give "
      "the per-step price measured for that N with --domain-step-overhead)")(
      "domain-exchange", po::value<std::string>()->default_value("leader"),
      "how the projected domains sum a step (leader or sharded): which of --domain-price-from's "
      "measurements to read")(
      "protection-overhead", po::value<double>()->default_value(e.protection_overhead),
      "per-step price of the protections every design pays (agreement, snapshots, checkpoints), "
      "percent of a step")(
      "costs-from", po::value<std::string>(),
      "results of bench/cluster/goodput_bench.py: what each kind of failure cost one job and "
      "domains under a failure schedule, grown to the projected size (with --ettr), or the costs "
      "that predict --goodput's run")(
      "failure-mix", po::value<std::string>(),
      "the kinds' shares of the failures, e.g. node_crash=0.6,node_freeze=0.2,rank_kill=0.2 "
      "(default: every kind --costs-from measured alike)");
  po::options_description goodput("goodput measured against the model (--goodput)");
  goodput.add_options()(
      "goodput", po::value<std::string>(),
      "results of bench/cluster/goodput_bench.py: predict each design's goodput from "
      "--costs-from's per-kind costs (default: its own) and the failures the run saw, beside "
      "the measured one; with --scale-from, also what the projection gives at the bench's size");
  options.add(ettr).add(goodput);
  return options;
}

namespace {

// --failure-mix kind=share,...
std::map<std::string, double> parse_failure_mix(const std::string& text) {
  std::map<std::string, double> mix;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    const std::size_t equals = item.find('=');
    double share = -1;
    try {
      std::size_t used = 0;
      if (equals != std::string::npos) share = std::stod(item.substr(equals + 1), &used);
      if (used != item.size() - equals - 1) share = -1;
    } catch (const std::exception&) {
      share = -1;
    }
    if (equals == 0 || equals == std::string::npos || !(share >= 0) ||
        mix.contains(item.substr(0, equals)))
      throw InvalidArgument(fmt::format(
          "--failure-mix: '{}' is not KIND=SHARE with a share of at least 0, each kind once "
          "(e.g. node_crash=0.6,rank_kill=0.4)",
          item));
    mix[item.substr(0, equals)] = share;
    begin = end + 1;
  }
  return mix;
}

std::string describe_costs(const FailureCosts& costs) {
  std::string out;
  for (const auto& [kind, c] : costs)
    out += fmt::format("{}{} {:.2f} + {:.2f} s ({})", out.empty() ? "" : ", ", kind, c.stall_s,
                       c.after_s, c.count);
  return out;
}

int goodput_check(const po::variables_map& vm) {
  const auto run = read_goodput(vm["goodput"].as<std::string>());
  const auto costs =
      vm.count("costs-from") ? read_goodput(vm["costs-from"].as<std::string>()) : run;
  std::string kinds;
  for (const auto& kind : run.kinds) kinds += (kinds.empty() ? "" : ", ") + kind;
  std::cout << fmt::format(
      "measured: {} (seed {}, {} nodes, an interruption every {:.0f} s drawn evenly from {})\n"
      "costs per failure by kind, the longest time without a commit + the time lost after it "
      "(failures measured), from {} (seed {}):\n",
      run.source, run.seed, run.nodes, run.mtbf_s, kinds, costs.source, costs.seed);
  for (const auto& [design, r] : costs.runs)
    std::cout << fmt::format("  {:<8} {}\n", design, describe_costs(r.costs));
  for (const auto& design : run.without_healthy_step)
    std::cout << fmt::format(
        "  {}: too few healthy steps of its own to measure its goodput by; "
        "left out\n",
        design);
  const auto predictions = predict_goodput(costs, run);
  std::cout << fmt::format("\n  {:<8} {:>8} {:>12} {:>13} {:>11} {:>9} {:>10} {:>8} {:>17}\n",
                           "design", "failures", "start lost s", "per failure s", "background",
                           "measured", "predicted", "off by", "at the MTBF's rate");
  double worst = 0;
  for (const auto& p : predictions) {
    std::cout << fmt::format(
        "  {:<8} {:>8} {:>12.2f} {:>13.2f} {:>10.1f}% {:>8.1f}% {:>9.1f}% {:>+7.1f} {:>17}\n",
        p.design, p.failures, p.start_lost_s, p.lost_per_failure_s, 100 * p.background_share,
        100 * p.measured, 100 * p.predicted, 100 * (p.predicted - p.measured),
        p.predicted_at_rate < 0 ? "-" : fmt::format("{:.1f}%", 100 * p.predicted_at_rate));
    worst = std::max(worst, std::abs(p.predicted - p.measured));
  }
  std::cout << fmt::format(
      "\n  {} (points of goodput; 'background': the run's own time lost outside every failure's "
      "recovery, per second of work, a price on every step; 'at the MTBF's rate': as many "
      "failures as the nominal rate gives, the kinds alike)\n",
      worst <= 0.02 ? "every prediction within 2 points"
                    : fmt::format("a prediction misses by {:.1f} points", 100 * worst));
  if (vm.count("scale-from")) {
    // What the projection charged before per-kind costs (every failure a node crash's stall,
    // from the scale bench), fed the run's machine, start, step, failures and mix. With the
    // per-kind costs its arithmetic is the prediction above.
    const auto measured = read_scaling(vm["scale-from"].as<std::string>());
    std::cout << fmt::format(
        "\n  the projection (hardy simulate --ettr) at the bench's size without per-kind costs, "
        "scale bench {}:\n",
        measured.source);
    for (const auto& p : predictions) {
      if (p.design != "one_job" && p.design != "domains") continue;
      const auto a = bench_assumptions(run, run.runs.at(p.design), p.start_lost_s);
      const double without = project_ettr(measured, a)[p.design == "one_job" ? 0 : 1].ettr;
      std::cout << fmt::format("  {:<8} {:.1f}% ({:+.1f} points)\n", p.design, 100 * without,
                               100 * (without - p.measured));
    }
  }
  return 0;
}

int ettr_projection(const po::variables_map& vm) {
  if (!vm.count("scale-from"))
    throw InvalidArgument(
        "--ettr needs --scale-from RESULTS (bench/cluster/scale_bench.py's JSON, e.g. "
        "bench/results/cluster-scale-2026-11-25.json)");
  const auto measured = read_scaling(vm["scale-from"].as<std::string>());
  EttrAssumptions a;
  a.nodes = vm["nodes"].as<int>();
  a.gpus_per_node = vm["ranks-per-node"].as<int>();
  a.nodes_per_domain = vm["nodes-per-domain"].as<int>();
  a.hours_between_interruptions_per_16k_gpus = vm["hours-between-interruptions"].as<double>();
  a.job_hours = vm["job-hours"].as<double>();
  a.step_s = vm["step-s"].as<double>();
  const double domain_pct = vm["domain-step-overhead"].as<double>();
  a.domain_step_overhead = domain_pct < 0 ? -1 : domain_pct / 100;
  a.domain_sync_every = vm["domain-sync-every"].as<int>();
  if (a.domain_sync_every < 1) throw InvalidArgument("--domain-sync-every must be at least 1");
  // The scale bench's step times are a by-product of its start and recovery runs; the domain
  // bench compares the steps alone, alternating, on a quiet machine.
  std::string price_from = "the scale bench's step times at its smallest size";
  if (vm.count("domain-price-from")) {
    if (domain_pct >= 0)
      throw InvalidArgument("give --domain-step-overhead or --domain-price-from, not both");
    const std::string exchange = vm["domain-exchange"].as<std::string>();
    resilience::parse_domain_exchange(exchange);  // refuses a name that is none
    const auto price =
        read_domain_price(vm["domain-price-from"].as<std::string>(), a.domain_sync_every, exchange);
    // A price below zero (fewer meetings wait less than one job) counts as none: those steps
    // converge less, which is measured apart.
    a.domain_step_overhead = std::max(0.0, price.overhead);
    price_from = fmt::format("{:+.1f}% measured as {}", 100 * price.overhead, price.measured_as);
  } else if (domain_pct >= 0) {
    price_from = "--domain-step-overhead";
  }
  a.protection_overhead = vm["protection-overhead"].as<double>() / 100;
  if (a.protection_overhead < 0)
    throw InvalidArgument("--protection-overhead must not be negative");
  if (vm.count("failure-mix")) {
    if (!vm.count("costs-from"))
      throw InvalidArgument("--failure-mix weighs the kinds of --costs-from: give it too");
    a.failure_mix = parse_failure_mix(vm["failure-mix"].as<std::string>());
  }
  if (vm.count("costs-from"))
    a.failure_costs = failure_costs(read_goodput(vm["costs-from"].as<std::string>()));
  const auto projections = project_ettr(measured, a);
  std::cout << fmt::format(
      "measured ({}), 1 rank per emulated node, up to {} nodes (with the contention removed):\n"
      "  one job:  start {} s ({}), stall after a node's loss {} s ({})\n"
      "  domains of {}: start {} s ({}), stall {} s ({}) (N: the bench's nodes), back at full "
      "strength {:.2f} s ({:.2f})\n"
      "  step {:.3f} s; domains' per-step price {:+.1f}% by the scale bench's step times\n"
      "  per-step price used: {}\n\n",
      measured.source, measured.largest_nodes, measured.measured.one_job_start.formula(),
      measured.alone.one_job_start.formula(), measured.measured.one_job_stall.formula(),
      measured.alone.one_job_stall.formula(), measured.nodes_per_domain,
      measured.measured.domains_start.formula(), measured.alone.domains_start.formula(),
      measured.measured.domains_stall.formula(), measured.alone.domains_stall.formula(),
      measured.measured.domain_back_s, measured.alone.domain_back_s, measured.step_s,
      100 * measured.domain_step_overhead, price_from);
  if (a.failure_costs) {
    std::string mix;
    for (const auto& [kind, share] : a.failure_mix)
      mix += fmt::format("{}{}={}", mix.empty() ? "" : ",", kind, share);
    std::cout << fmt::format(
        "  per failure: each kind's cost as measured on {} nodes under a failure schedule ({}; "
        "{}), its stall grown as the scale bench's stall grows, a domain's time away scaled to "
        "its share\n    one job: {}\n    domains of {}: {}\n\n",
        a.failure_costs->nodes, a.failure_costs->source,
        mix.empty() ? "the kinds alike" : "--failure-mix " + mix,
        describe_costs(a.failure_costs->one_job), a.failure_costs->nodes_per_domain,
        describe_costs(a.failure_costs->domains));
  }
  std::cout << fmt::format(
      "projected to {} nodes x {} GPUs, an interruption every {:.2f} h ({} h per 16,384 GPUs), "
      "{} h allocations:\n",
      a.nodes, a.gpus_per_node,
      a.hours_between_interruptions_per_16k_gpus * 16384.0 / (a.nodes * a.gpus_per_node),
      a.hours_between_interruptions_per_16k_gpus, a.job_hours);
  std::cout << fmt::format("  {:<26} {:<18} {:>9} {:>9} {:>11} {:>11} {:>13} {:>9} {:>9} {:>7}\n",
                           "design", "bound", "start s", "stall s", "degraded s", "lost work s",
                           "per failure s", "failures", "per step", "ETTR");
  for (const auto& p : projections)
    std::cout << fmt::format(
        "  {:<26} {:<18} {:>9.1f} {:>9.2f} {:>11.3f} {:>11.3f} {:>13.2f} {:>9.1f} {:>8.1f}% "
        "{:>6.2f}%\n",
        p.design, p.bound, p.start_s, p.stall_s, p.degraded_s, p.lost_work_s, p.per_failure_s,
        p.failures, 100 * p.step_overhead, 100 * p.ettr);
  std::cout << fmt::format(
      "\n  degraded: the lost domain's time away times its share of the machine. The fits are "
      "extrapolated\n  past the largest job measured ({} nodes). Every emulated node shared the "
      "measuring machine's\n  cores, which slowed a launch of the same work {:.1f}x at {} nodes: "
      "'as measured' keeps that (an\n  upper bound), 'contention removed' divides every point by "
      "the contention at its size\n  before fitting (a lower bound); docs/scale-model.md.\n",
      measured.largest_nodes, measured.largest_contention, measured.largest_nodes);
  return 0;
}

}  // namespace

int simulate_command(const std::vector<std::string>& args) {
  const auto options = simulate_options();
  po::variables_map vm;
  if (!parse_command_line(
          args, options,
          {"hardy simulate",
           "Usage: hardy simulate --from-run RUN_DIR [--nodes 4560 --ranks-per-node 6 ...]\n"
           "       hardy simulate --ettr --scale-from RESULTS.json [--costs-from GOODPUT.json] "
           "[--nodes 4560 --nodes-per-domain 16 ...]\n"
           "       hardy simulate --goodput GOODPUT.json [--costs-from GOODPUT.json] "
           "[--scale-from RESULTS.json]\n\n"
           "Projects recovery time to a large machine from the costs measured in a run that "
           "survived a\n"
           "failure, or (--ettr) the effective training time ratio of one job and of fault "
           "domains from\n"
           "start and recovery times measured at several sizes, under the assumptions in\n"
           "docs/scale-model.md; or (--goodput) holds that model to the goodput measured under a "
           "failure\nschedule.\n"},
          vm))
    return 0;
  if (vm.count("goodput")) return goodput_check(vm);
  if (vm.count("ettr")) return ettr_projection(vm);
  if (!vm.count("from-run")) throw InvalidArgument("--from-run RUN_DIR is required");
  ScaleAssumptions a;
  a.nodes = vm["nodes"].as<int>();
  a.ranks_per_node = vm["ranks-per-node"].as<int>();
  a.launch_s_per_1000_nodes = vm["launch-s-per-1000-nodes"].as<double>();
  a.failure_detection_s = vm["detection-s"].as<double>();
  a.step_s = vm["step-s"].as<double>();
  if (a.nodes < 1 || a.ranks_per_node < 1)
    throw InvalidArgument("--nodes and --ranks-per-node must be positive");
  a.network_latency_s = vm["latency-us"].as<double>() * 1e-6;
  a.network_bandwidth_bytes_s = vm["bandwidth-gbs"].as<double>() * 1e9;
  a.pfs_read_bandwidth_bytes_s = vm["pfs-read-gbs"].as<double>() * 1e9;
  a.node_local_read_bytes_s = vm["node-local-read-gbs"].as<double>() * 1e9;
  auto measured = measure_recovery(vm["from-run"].as<std::string>());
  if (vm.count("relaunch-run")) {
    const auto relaunched = measure_recovery(vm["relaunch-run"].as<std::string>());
    measured.relaunch_s = relaunched.relaunch_s;
    measured.relaunch_detect_s = relaunched.relaunch_detect_s;
    measured.relaunch_decide_s = relaunched.relaunch_decide_s;
    measured.relaunch_launch_s = relaunched.relaunch_launch_s;
    measured.relaunch_restore_s = relaunched.relaunch_restore_s;
    measured.relaunch_nodes = relaunched.relaunch_nodes;
    measured.relaunch_steps_lost = relaunched.relaunch_steps_lost;
    measured.relaunch_restored_from = relaunched.relaunch_restored_from;
    if (measured.model_bytes == 0) measured.model_bytes = relaunched.model_bytes;
  }
  std::cout << fmt::format(
      "measured on {} ranks ({}):\n  detection {:.3f} s, shrink {:.4f} s, memory rollback {:.4f} "
      "s, slowest step "
      "{:.3f} s, state {:.1f} MiB\n",
      measured.world_size, measured.source, measured.detection_s, measured.shrink_s,
      measured.restore_memory_s, measured.first_step_s, measured.model_bytes / (1 << 20));
  if (measured.relaunch_s > 0)
    std::cout << fmt::format(
        "  supervisor relaunch on {} node(s): runtime detection {:.2f} s, decide {:.2f} s, launch "
        "{:.2f} s, "
        "restore from {} {:.3f} s, {} committed step(s) lost\n",
        measured.relaunch_nodes, measured.relaunch_detect_s, measured.relaunch_decide_s,
        measured.relaunch_launch_s, measured.relaunch_restored_from, measured.relaunch_restore_s,
        measured.relaunch_steps_lost);
  std::cout << "\n";
  std::cout << fmt::format("projected to {} nodes x {} ranks = {} ranks:\n", a.nodes,
                           a.ranks_per_node, static_cast<long>(a.nodes) * a.ranks_per_node);
  std::cout << fmt::format("  {:<30} {:>9} {:>18} {:>9} {:>10} {:>9}\n", "path", "detect s",
                           "shrink or launch s", "restore s", "1st step s", "total s");
  const auto projections = project(measured, a);
  for (const auto& p : projections)
    std::cout << fmt::format("  {:<30} {:>9.3f} {:>18.3f} {:>9.3f} {:>10.3f} {:>9.2f}\n", p.path,
                             p.detect_s, p.shrink_s, p.restore_s, p.first_step_s, p.total());
  if (projections.size() == 4)
    std::cout << fmt::format(
        "\n  relaunch from node-local snapshots / in-job memory rollback: {:.1f}x\n",
        projections[3].total() / projections[0].total());
  return 0;
}

}  // namespace hardy::jobs
