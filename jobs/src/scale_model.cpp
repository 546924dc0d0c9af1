#include "hardy/jobs/scale_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/resilience/events.hpp"

namespace hardy::jobs {

// Event kinds and fields by name, checked against hardy/resilience/events.hpp at compile time.
using resilience::event_field;
using resilience::event_kind;

namespace {

std::vector<nlohmann::json> read_events(const std::filesystem::path& run_dir) {
  std::ifstream file(run_dir / "events.jsonl");
  if (!file) throw InvalidArgument(fmt::format("{} has no events.jsonl", run_dir.string()));
  std::vector<nlohmann::json> events;
  std::string line;
  while (std::getline(file, line))
    if (auto record = nlohmann::json::parse(line, nullptr, false); !record.is_discarded())
      events.push_back(record);
  return events;
}

double rounds(double ranks) { return std::max(1.0, std::ceil(std::log2(std::max(2.0, ranks)))); }

}  // namespace

MeasuredRecovery measure_recovery(const std::filesystem::path& run_dir) {
  const auto events = read_events(run_dir);
  MeasuredRecovery m;
  m.source = (run_dir / "events.jsonl").string();
  double relaunch_end = -1, last_commit = 0, relaunched_at = -1, restarted_at = -1;
  std::ifstream metrics(run_dir / "metrics.jsonl");
  std::vector<std::pair<double, double>> commits;  // (unix_time, step_s)
  for (std::string line; std::getline(metrics, line);)
    if (auto record = nlohmann::json::parse(line, nullptr, false); !record.is_discarded())
      commits.emplace_back(record.value("unix_time", 0.0), record.value("step_s", 0.0));
  for (const auto& e : events) {
    // A field of the wrong type, or of another hardy version's event, counts as missing.
    const auto field = [&e]<class T>(std::string_view key, T otherwise) {
      return core::read_field<T>(e, key).value_or(otherwise);
    };
    const std::string name = field("event", std::string());
    const double t = field("unix_time", 0.0);
    if (name == event_kind("job_started") && m.world_size == 0)
      m.world_size = field(event_field("job_started", "world_size"), 0);
    if (name == event_kind("failure_detected"))
      m.detection_s = field(event_field("failure_detected", "detection_latency_s"), m.detection_s);
    if (name == event_kind("communicator_shrunk")) {
      m.shrink_s = field(event_field("communicator_shrunk", "seconds"), 0.0);
      m.world_size = field(event_field("communicator_shrunk", "old_size"), m.world_size);
    }
    const std::string restored_from = field(event_field("state_restored", "source"), std::string());
    const bool restored_by_relaunch = e.contains(event_field("state_restored", "path"));
    if (name == event_kind("state_restored") && restored_from == "memory")
      m.restore_memory_s = field(event_field("state_restored", "seconds"), 0.0);
    if (name == event_kind("state_restored") && restored_from == "checkpoint" &&
        !restored_by_relaunch)
      m.restore_checkpoint_s = field(event_field("state_restored", "seconds"), 0.0);
    if (name == event_kind("checkpoint_written"))
      m.model_bytes = field(event_field("checkpoint_written", "bytes"), 0.0);
    if (name == event_kind("launch_ended") && m.relaunch_nodes == 0) {
      // The runtime's detection, bounded from below by the last step committed before it.
      for (const auto& [at, step_s] : commits)
        if (at > 0 && at <= t) last_commit = at;
      if (last_commit > 0) m.relaunch_detect_s = t - last_commit;
      if (const auto step =
              core::read_field<long>(e, event_field("launch_ended", "last_committed_step")))
        m.relaunch_steps_lost = *step;
    }
    if (name == event_kind("job_relaunched") && relaunch_end < 0 && m.relaunch_nodes == 0) {
      relaunch_end = t - field(event_field("job_relaunched", "seconds_since_end"), 0.0) -
                     field(event_field("job_relaunched", "backoff_s"), 0.0);
      relaunched_at = t;
      m.relaunch_decide_s = field(event_field("job_relaunched", "decide_s"), 0.0);
      m.relaunch_nodes = static_cast<int>(
          field(event_field("job_relaunched", "nodes"), std::vector<std::string>{}).size());
    }
    if (name == event_kind("job_started") && relaunched_at > 0 && restarted_at < 0) {
      restarted_at = t;
      m.relaunch_launch_s = t - relaunched_at;
    }
    if (name == event_kind("state_restored") && restored_by_relaunch && relaunch_end > 0 &&
        m.relaunch_s == 0) {
      m.relaunch_s = t - relaunch_end;
      if (restarted_at > 0) m.relaunch_restore_s = t - restarted_at;
      m.relaunch_restored_from = restored_from;
      m.relaunch_steps_lost -= field(event_field("state_restored", "step"), 0L);
    }
  }
  if (m.relaunch_s == 0) m.relaunch_steps_lost = 0;
  if (m.shrink_s == 0 && m.relaunch_s == 0)
    throw InvalidArgument(fmt::format(
        "{} records no recovery (no communicator_shrunk or job_relaunched event)", m.source));
  // The first step after a recovery pays for rebuilt buffers and cold caches: take the slowest.
  for (const auto& commit : commits) m.first_step_s = std::max(m.first_step_s, commit.second);
  return m;
}

std::vector<RecoveryProjection> project(const MeasuredRecovery& measured,
                                        const ScaleAssumptions& a) {
  const double ranks = static_cast<double>(a.nodes) * a.ranks_per_node;
  const double measured_rounds = rounds(std::max(2, measured.world_size));
  const double detect = a.failure_detection_s > 0 ? a.failure_detection_s : measured.detection_s;
  const double step = a.step_s > 0 ? a.step_s : measured.first_step_s;
  // Shrink and agreement run a constant number of tree-shaped rounds: the measured time per
  // round, times the rounds at scale, plus the network latency of each round.
  const double shrink =
      measured.shrink_s / measured_rounds * rounds(ranks) + rounds(ranks) * 4 * a.network_latency_s;
  // A pipelined tree broadcast of the state: one pass over the bytes plus log(P) latencies.
  const double broadcast =
      measured.model_bytes / a.network_bandwidth_bytes_s + rounds(ranks) * a.network_latency_s;
  const double read = measured.model_bytes / a.pfs_read_bandwidth_bytes_s;
  // A launch costs at least what it cost here, and grows with the nodes it starts.
  const double launch =
      std::max(measured.relaunch_launch_s, a.launch_s_per_1000_nodes * a.nodes / 1000.0);
  // The runtime notices a lost daemon through its own connection (a reset, or the keepalive): a
  // per-node event, like ULFM's detection; deciding probes every node at once.
  const double relaunch_detect =
      a.failure_detection_s > 0
          ? a.failure_detection_s
          : (measured.relaunch_detect_s > 0 ? measured.relaunch_detect_s : detect);
  const double decide = measured.relaunch_decide_s;
  const double node_local_read = measured.model_bytes / a.node_local_read_bytes_s;

  std::vector<RecoveryProjection> projections;
  if (measured.shrink_s > 0) {
    projections.push_back(
        {"in-job, memory rollback", detect, shrink, measured.restore_memory_s, step});
    projections.push_back({"in-job, checkpoint restore", detect, shrink, read + broadcast, step});
  }
  projections.push_back(
      {"relaunch, checkpoint", relaunch_detect + decide, launch, read + broadcast, step});
  projections.push_back({"relaunch, node-local snapshot", relaunch_detect + decide, launch,
                         node_local_read + broadcast, step});
  return projections;
}

double GrowthFit::at(double nodes) const {
  const double fitted = model == "linear" ? a + b * nodes : c * std::pow(nodes, p);
  return std::max({fitted, floor, 0.0});
}

std::string GrowthFit::formula() const {
  const std::string fitted = model == "linear" ? fmt::format("{:.3f} + {:.4f} N", a, b)
                                               : fmt::format("{:.4f} N^{:.2f}", c, p);
  const bool falls = model == "linear" ? b < 0 : p < 0;
  return falls ? fmt::format("{}, at least {:.3f}", fitted, floor) : fitted;
}

namespace {

GrowthFit read_fit(const nlohmann::json& fits, const std::string& design, const std::string& phase,
                   const std::string& source) {
  const auto* found = fits.contains(design) && fits[design].contains(phase) &&
                              fits[design][phase].is_object() &&
                              fits[design][phase].contains("best")
                          ? &fits[design][phase]["best"]
                          : nullptr;
  if (found == nullptr)
    throw InvalidArgument(
        fmt::format("{} has no fit of {} for {} (written by bench/cluster/scale_bench.py?)", source,
                    phase, design));
  GrowthFit fit;
  fit.model = found->value("model", std::string());
  if (fit.model != "linear" && fit.model != "power")
    throw InvalidArgument(fmt::format("{}: the fit of {} for {} is of unknown model '{}'", source,
                                      phase, design, fit.model));
  fit.a = found->value("a", 0.0);
  fit.b = found->value("b", 0.0);
  fit.c = found->value("c", 0.0);
  fit.p = found->value("p", 0.0);
  // Results written before the floor was recorded: the smallest value of the measured points is
  // not there, so only zero holds the fit (bench/cluster/scale_bench.py --refit adds it).
  fit.floor = found->value("floor", 0.0);
  return fit;
}

}  // namespace

MeasuredScaling read_scaling(const std::filesystem::path& results) {
  std::ifstream file(results);
  if (!file) throw InvalidArgument(fmt::format("cannot read {}", results.string()));
  const auto json = nlohmann::json::parse(file, nullptr, false);
  const std::string source = results.string();
  if (json.is_discarded() || !json.contains("fits") || !json.contains("medians") ||
      !json.contains("per_domain"))
    throw InvalidArgument(
        fmt::format("{} is not a result of bench/cluster/scale_bench.py", source));
  MeasuredScaling m;
  m.source = source;
  m.nodes_per_domain = json["per_domain"].get<int>();
  const std::string domains = fmt::format("domains_of_{}", m.nodes_per_domain);
  if (!json.contains("fits_alone"))
    throw InvalidArgument(
        fmt::format("{} has no fits with the contention removed (fits_alone): refit it with "
                    "bench/cluster/scale_bench.py --refit",
                    source));
  const auto read_fits = [&](const nlohmann::json& fits) {
    return ScalingFits{.one_job_start = read_fit(fits, "one_job", "start_s", source),
                       .one_job_stall = read_fit(fits, "one_job", "stall_s", source),
                       .domains_start = read_fit(fits, domains, "start_s", source),
                       .domains_stall = read_fit(fits, domains, "stall_s", source)};
  };
  m.measured = read_fits(json["fits"]);
  m.alone = read_fits(json["fits_alone"]);
  // The medians by node count (JSON keys are strings).
  std::map<int, nlohmann::json> one_job, split;
  for (const auto& [nodes, phases] : json["medians"]["one_job"].items())
    one_job[std::stoi(nodes)] = phases;
  for (const auto& [nodes, phases] : json["medians"][domains].items())
    split[std::stoi(nodes)] = phases;
  if (one_job.empty() || split.empty())
    throw InvalidArgument(fmt::format("{} has no medians for one_job and {}", source, domains));
  m.largest_nodes = one_job.rbegin()->first;
  m.step_s = one_job.begin()->second.value("step_s", 0.0);
  const double split_step = split.begin()->second.value("step_s", 0.0);
  if (m.step_s > 0 && split_step > 0) m.domain_step_overhead = split_step / m.step_s - 1;
  std::vector<double> back, back_alone;
  for (const auto& [nodes, phases] : split) {
    const double contention = phases.value("contention", 1.0);
    if (phases.contains("back_s")) {
      back.push_back(phases["back_s"].get<double>());
      back_alone.push_back(back.back() / std::max(1.0, contention));
    }
  }
  if (back.empty())
    throw InvalidArgument(fmt::format("{}: no domain came back in any run (back_s)", source));
  const auto median = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  };
  m.measured.domain_back_s = median(back);
  m.alone.domain_back_s = median(back_alone);
  m.largest_contention = split.rbegin()->second.value("contention", 1.0);
  return m;
}

MeasuredDomainPrice read_domain_price(const std::filesystem::path& results, int sync_every,
                                      std::string_view exchange) {
  const std::string source = results.string();
  nlohmann::json json;
  try {
    std::ifstream in(results);
    if (!in) throw InvalidArgument(fmt::format("cannot read {}", source));
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(fmt::format("{} is not JSON: {}", source, e.what()));
  }
  // A member of an object, or null: the results may lack any part (a bench run with
  // --skip-overhead writes "overhead": null).
  const auto member = [](const nlohmann::json& object, const char* key) {
    return object.is_object() && object.contains(key) ? object[key] : nlohmann::json();
  };
  const nlohmann::json run = member(json, "overhead");
  if (!run.contains("nodes") || !run.contains("nodes_per_domain"))
    throw InvalidArgument(fmt::format(
        "{} has no per-step comparison (bench/cluster/domain_bench.py without --skip-overhead)",
        source));
  const int nodes = run["nodes"].get<int>();
  const int per_domain = run["nodes_per_domain"].get<int>();
  std::string name = fmt::format("domains_{}x{}", nodes / per_domain, per_domain);
  if (sync_every > 1) name += fmt::format("_sync_every_{}", sync_every);
  if (exchange != "leader") name += fmt::format("_{}", exchange);
  for (const char* rounds : {"pooled", "overhead"}) {
    const nlohmann::json price = member(member(member(json, rounds), "overhead_pct"), name.c_str());
    if (price.is_number())
      return {.overhead = price.get<double>() / 100,
              .measured_as =
                  fmt::format("{} against one job on {} nodes ({} rounds) in {}", name, nodes,
                              rounds == std::string("pooled") ? "pooled" : "its", source)};
  }
  throw InvalidArgument(
      fmt::format("{} has no per-step price of {} (run bench/cluster/domain_bench.py with "
                  "--sync-every {})",
                  source, name, sync_every));
}

double mixed_failure_cost(const FailureCosts& costs, const std::map<std::string, double>& mix,
                          double stall_growth, double after_scale, bool growth_skips_in_job) {
  if (costs.empty()) throw InvalidArgument("no failure's cost was measured");
  double weight = 0, cost = 0;
  const auto add = [&](const std::string& kind, double share) {
    const auto found = costs.find(kind);
    if (found == costs.end()) {
      std::string measured;
      for (const auto& [name, _] : costs) measured += (measured.empty() ? "" : ", ") + name;
      throw InvalidArgument(fmt::format(
          "no cost was measured for failures of kind '{}' (measured: {})", kind, measured));
    }
    if (share < 0)
      throw InvalidArgument(fmt::format("the failure mix gives {} a negative share", kind));
    const FailureKindCost& c = found->second;
    const double growth = stall_growth * (growth_skips_in_job ? 1 - c.in_job_share : 1);
    weight += share;
    cost += share * (std::max(0.0, c.stall_s + growth) + c.after_s * after_scale);
  };
  if (mix.empty())
    for (const auto& [kind, _] : costs) add(kind, 1);
  else
    for (const auto& [kind, share] : mix) add(kind, share);
  if (weight <= 0) throw InvalidArgument("the failure mix gives no kind a share");
  return cost / weight;
}

std::vector<EttrProjection> project_ettr(const MeasuredScaling& m, const EttrAssumptions& a) {
  if (a.nodes < 1 || a.gpus_per_node < 1 || a.nodes_per_domain < 1 ||
      a.nodes % a.nodes_per_domain != 0)
    throw InvalidArgument(fmt::format(
        "the machine must have a positive number of nodes that domains of {} nodes divide ({})",
        a.nodes_per_domain, a.nodes));
  if (a.hours_between_interruptions_per_16k_gpus <= 0 || a.job_hours <= 0)
    throw InvalidArgument("the interruption interval and the job's hours must be positive");
  const double job_s = a.job_hours * 3600;
  const double gpus = static_cast<double>(a.nodes) * a.gpus_per_node;
  const double failures = a.job_hours * gpus / 16384.0 / a.hours_between_interruptions_per_16k_gpus;
  const double step = a.step_s > 0 ? a.step_s : m.step_s;
  const double domain_overhead =
      a.domain_step_overhead >= 0 ? a.domain_step_overhead : m.domain_step_overhead;
  const auto ettr = [&](EttrProjection p) {
    p.failures = failures;
    p.per_failure_s = p.stall_s + p.degraded_s + p.lost_work_s;
    const double productive = job_s - p.start_s - failures * p.per_failure_s;
    p.ettr = std::max(0.0, productive / job_s / (1 + p.step_overhead));
    return p;
  };
  std::vector<EttrProjection> out;
  const int domains = a.nodes / a.nodes_per_domain;
  // The domains' stall grows with the number of domains that regroup: evaluated where the bench
  // had as many domains (its nodes over its domain size).
  const double as_measured = static_cast<double>(domains) * m.nodes_per_domain;
  for (const bool remove_contention : {false, true}) {
    const ScalingFits& f = remove_contention ? m.alone : m.measured;
    const std::string bound = remove_contention ? "contention removed" : "as measured";
    // One job: every failure relaunches it on every node; the measured stall (the node's loss to
    // the next step, restored from node-local snapshots) at this size, and the step it was on.
    EttrProjection one{.design = "one job",
                       .bound = bound,
                       .start_s = a.start_s >= 0 ? a.start_s : f.one_job_start.at(a.nodes),
                       .stall_s = f.one_job_stall.at(a.nodes),
                       .lost_work_s = step,
                       .step_overhead = a.protection_overhead + a.background_share};
    // Domains: the others regroup and drop the step in flight (meeting every N-th step, they
    // redo (N-1)/2 steps on average besides); the lost domain's share of the machine is missing
    // until it is back: the measured return plus what launching K nodes costs beyond launching
    // the bench's domain.
    const double launch_growth =
        f.one_job_start.at(a.nodes_per_domain) - f.one_job_start.at(m.nodes_per_domain);
    const double share = static_cast<double>(a.nodes_per_domain) / a.nodes;
    EttrProjection split{
        .design = fmt::format("{} domains of {} nodes", domains, a.nodes_per_domain),
        .bound = bound,
        .start_s = a.start_s >= 0 ? a.start_s : f.domains_start.at(as_measured),
        .stall_s = f.domains_stall.at(as_measured),
        .degraded_s = (f.domain_back_s + launch_growth) * share,
        .lost_work_s = step * (1 + (a.domain_sync_every - 1) / 2.0),
        .step_overhead = a.protection_overhead + a.background_share + domain_overhead};
    if (a.failure_costs) {
      // Each kind as measured under the failure schedule, its stall grown as the scale bench's
      // stall grows from the measured size; the steps in flight and redone are in it.
      const MeasuredFailureCosts& c = *a.failure_costs;
      const auto stall_and_after = [&](const FailureCosts& costs, double growth, bool one_job) {
        const double stall = mixed_failure_cost(costs, a.failure_mix, growth, 0, one_job);
        return std::pair{stall,
                         mixed_failure_cost(costs, a.failure_mix, growth, 1, one_job) - stall};
      };
      // One job's stall grows as a whole-job relaunch does, except where the job shrank in-job:
      // a shrink takes a number of rounds that grows with log P, not a launch of every node.
      const auto [one_stall, one_after] = stall_and_after(
          c.one_job, f.one_job_stall.at(a.nodes) - f.one_job_stall.at(c.nodes), true);
      one.stall_s = one_stall;
      one.degraded_s = one_after;
      one.lost_work_s = 0;
      // The time after the stall is the lost domain's absence times its share of the measured
      // machine: its absence grows with its launch, its share is the projected domain's.
      const auto [split_stall, split_after] = stall_and_after(
          c.domains, f.domains_stall.at(as_measured) - f.domains_stall.at(c.nodes), false);
      const double measured_share = static_cast<double>(c.nodes_per_domain) / c.nodes;
      split.stall_s = split_stall;
      split.degraded_s = (split_after / measured_share + launch_growth) * share;
      split.lost_work_s = step * (a.domain_sync_every - 1) / 2.0;
    }
    out.push_back(ettr(one));
    out.push_back(ettr(split));
  }
  return out;
}

}  // namespace hardy::jobs
