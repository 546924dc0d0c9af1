#include "hardy/jobs/goodput_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hardy/core/support/error.hpp"

namespace hardy::jobs {

namespace {

// The bench's domains before it recorded their size (bench/cluster/goodput_bench.py PER_DOMAIN).
constexpr int kBenchNodesPerDomain = 2;

GoodputRun read_run(const std::string& design, const nlohmann::json& run, int nodes,
                    const std::string& source) {
  GoodputRun r;
  r.design = design;
  try {
    r.steps = run.at("steps").get<long>();
    r.wall_s = run.at("wall_s").get<double>();
    r.healthy_step_s = run.at("healthy_step_s").get<double>();
    r.goodput = run.at("goodput").get<double>();
    if (run.contains("start_lost_s") && run["start_lost_s"].is_number())
      r.start_lost_s = run["start_lost_s"].get<double>();
    if (run.contains("background_lost_s") && run["background_lost_s"].is_number())
      r.background_lost_s = run["background_lost_s"].get<double>();
    struct Fault {
      double stall, lost;
      bool in_job;
    };
    std::map<std::string, std::vector<Fault>> by_kind;
    for (const auto& fault : run.at("faults")) {
      const auto kind = fault.at("kind").get<std::string>();
      const double lost = fault.at("lost_s").get<double>();
      // A window without a commit (the next fault came first) went wholly without one.
      const auto& gap = fault.value("longest_gap_s", nlohmann::json());
      // Survived in-job: some step after it ran on fewer ranks than the job has (for domains,
      // every loss: the others train on while the lost domain is away).
      const auto& fewest = fault.value("fewest_ranks", nlohmann::json());
      by_kind[kind].push_back({.stall = gap.is_number() ? gap.get<double>() : lost,
                               .lost = lost,
                               .in_job = fewest.is_number() && fewest.get<int>() < nodes});
      r.fault_kinds.push_back(kind);
    }
    for (const auto& [kind, faults] : by_kind) {
      FailureKindCost cost{.count = static_cast<int>(faults.size())};
      for (const Fault& fault : faults) {
        cost.stall_s += fault.stall / faults.size();
        cost.after_s += (fault.lost - fault.stall) / faults.size();
        cost.in_job_share += fault.in_job ? 1.0 / faults.size() : 0;
      }
      r.costs[kind] = cost;
    }
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(
        fmt::format("{}: the run of {} is not as bench/cluster/goodput_bench.py "
                    "writes it: {}",
                    source, design, e.what()));
  }
  if (r.wall_s <= 0 || r.healthy_step_s <= 0 || r.steps <= 0)
    throw InvalidArgument(
        fmt::format("{}: the run of {} has no positive wall time, healthy step and step count",
                    source, design));
  return r;
}

}  // namespace

GoodputResults read_goodput(const std::filesystem::path& path) {
  const std::string source = path.string();
  std::ifstream in(path);
  if (!in) throw InvalidArgument(fmt::format("cannot read {}", source));
  const auto json = nlohmann::json::parse(in, nullptr, false);
  if (json.is_discarded() || !json.is_object() || !json.contains("runs") ||
      !json.contains("schedule") || !json.contains("mtbf_s"))
    throw InvalidArgument(
        fmt::format("{} is not a result of bench/cluster/goodput_bench.py", source));
  GoodputResults results;
  results.source = source;
  results.seed = json.value("seed", 0L);
  results.mtbf_s = json["mtbf_s"].get<double>();
  results.nodes = json.value("nodes", 0);
  results.nodes_per_domain = json.value("nodes_per_domain", kBenchNodesPerDomain);
  if (json.contains("kinds")) {
    results.kinds = json["kinds"].get<std::vector<std::string>>();
  } else {
    // Written before the bench recorded the kinds it drew from: those its schedule drew.
    for (const auto& fault : json["schedule"]) {
      const auto kind = fault.value("kind", std::string());
      if (std::find(results.kinds.begin(), results.kinds.end(), kind) == results.kinds.end())
        results.kinds.push_back(kind);
    }
  }
  for (const auto& [design, run] : json["runs"].items()) {
    // A run with too few healthy steps of its own has no goodput of its own to predict.
    if (run.is_object() && run.contains("goodput") && run["goodput"].is_null()) {
      results.without_healthy_step.push_back(design);
      continue;
    }
    results.runs[design] = read_run(design, run, results.nodes, source);
  }
  if (results.runs.empty() || results.nodes < 1 || results.mtbf_s <= 0)
    throw InvalidArgument(fmt::format("{} has no runs, nodes or failure interval", source));
  return results;
}

MeasuredFailureCosts failure_costs(const GoodputResults& results) {
  const auto costs = [&](const char* design) {
    const auto found = results.runs.find(design);
    if (found == results.runs.end() || found->second.costs.empty())
      throw InvalidArgument(
          fmt::format("{} has no failure measured in a run of {}", results.source, design));
    return found->second.costs;
  };
  return {.source = results.source,
          .nodes = results.nodes,
          .nodes_per_domain = results.nodes_per_domain,
          .one_job = costs("one_job"),
          .domains = costs("domains")};
}

std::map<std::string, double> failures_by_kind(const GoodputRun& run) {
  std::map<std::string, double> seen;
  for (const auto& kind : run.fault_kinds) seen[kind] += 1;
  return seen;
}

EttrAssumptions bench_assumptions(const GoodputResults& results, const GoodputRun& run,
                                  double start_lost_s) {
  EttrAssumptions a;
  a.nodes = results.nodes;
  a.gpus_per_node = 1;
  a.nodes_per_domain = results.nodes_per_domain;
  a.job_hours = run.wall_s / 3600;
  a.step_s = run.healthy_step_s;
  a.domain_step_overhead = 0;
  a.failure_mix = failures_by_kind(run);
  a.start_s = start_lost_s;
  a.background_share = run.background_share();
  const auto failures = static_cast<double>(run.fault_kinds.size());
  // As many failures in the allocation as the run saw (none: an interval far beyond it).
  a.hours_between_interruptions_per_16k_gpus =
      failures > 0 ? a.job_hours * results.nodes / 16384.0 / failures : 1e9;
  return a;
}

std::vector<GoodputPrediction> predict_goodput(const GoodputResults& costs,
                                               const GoodputResults& run) {
  std::vector<GoodputPrediction> out;
  for (const auto& [design, measured] : run.runs) {
    const auto calibration = costs.runs.find(design);
    if (calibration == costs.runs.end()) continue;
    const FailureCosts& cost = calibration->second.costs;
    GoodputPrediction p{.design = design,
                        .measured = measured.goodput,
                        .failures = static_cast<int>(measured.fault_kinds.size()),
                        .background_share = measured.background_share()};
    p.lost_per_failure_s =
        p.failures > 0 ? mixed_failure_cost(cost, failures_by_kind(measured)) : 0;
    // Not recorded (results written before the bench did): what the faults' windows leave of
    // the time lost, which is what the bench measures it as.
    double faults_lost = 0;
    for (const auto& [kind, c] : measured.costs) faults_lost += c.count * c.lost_s();
    const double work = measured.work_s();
    p.start_lost_s = measured.start_lost_s >= 0
                         ? measured.start_lost_s
                         : measured.wall_s - work - faults_lost - measured.background_lost_s;
    // The background is a price on every second of work, as a per-step overhead is: with the
    // run's own costs, (wall - start - faults) / (1 + background / work) is the work.
    p.predicted = (1 - (p.start_lost_s + p.failures * p.lost_per_failure_s) / measured.wall_s) /
                  (1 + p.background_share);
    // At the nominal rate the failures come while the job runs: wall = start + work x (1 +
    // background share) + wall' x cost / MTBF, with wall' the time after the start.
    std::map<std::string, double> even;
    for (const auto& kind : run.kinds)
      if (cost.contains(kind)) even[kind] = 1;
    const double mean_cost = even.empty() ? 0 : mixed_failure_cost(cost, even);
    const double busy = work * (1 + p.background_share);
    p.predicted_at_rate = even.size() < run.kinds.size() ? -1
                          : mean_cost < run.mtbf_s
                              ? work / (p.start_lost_s + busy / (1 - mean_cost / run.mtbf_s))
                              : 0;
    out.push_back(p);
  }
  if (out.empty())
    throw InvalidArgument(
        fmt::format("{} and {} have no design in common", costs.source, run.source));
  return out;
}

}  // namespace hardy::jobs
