#pragma once
// Goodput under a failure schedule, measured and predicted: reads what
// bench/cluster/goodput_bench.py measured and predicts a run's goodput from per-kind failure costs
// measured in another (or the same) run, with the arithmetic the projection to a large machine
// uses (scale_model.hpp; docs/scale-model.md, "Goodput").
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "hardy/jobs/scale_model.hpp"

namespace hardy::jobs {

// One design's run in the bench's results.
struct GoodputRun {
  std::string design;  // one_job, domains, restart
  long steps = 0;
  double wall_s = 0;
  double healthy_step_s = 0;  // its own, measured in the run
  double goodput = 0;         // steps x healthy step / wall
  double start_lost_s = -1;   // lost to the launch (negative: not recorded)
  // Lost outside every failure's recovery and the launch's warm-up: the machine's own spread
  // (0 in results written before the bench split it off, 2026-11-30, where the faults carry it).
  double background_lost_s = 0;
  double work_s() const { return static_cast<double>(steps) * healthy_step_s; }
  // The background per second of work: what the machine loses to itself while nothing fails.
  double background_share() const { return background_lost_s / work_s(); }
  std::vector<std::string> fault_kinds;  // the failures it saw, in order
  FailureCosts costs;                    // by kind: the means of its failures'
};

struct GoodputResults {
  std::string source;
  long seed = 0;
  double mtbf_s = 0;
  int nodes = 0;
  int nodes_per_domain = 0;
  std::vector<std::string> kinds;  // the kinds the schedule drew from, evenly
  std::map<std::string, GoodputRun> runs;
  // Runs left out: too few healthy steps of their own to measure a goodput by.
  std::vector<std::string> without_healthy_step;
};
GoodputResults read_goodput(const std::filesystem::path& results);

// The per-kind costs of one job and of domains in the results, for the projection.
MeasuredFailureCosts failure_costs(const GoodputResults& results);

// The failures a run saw, counted by kind: a mix for mixed_failure_cost and the projection.
std::map<std::string, double> failures_by_kind(const GoodputRun& run);

// The projection's assumptions for the bench's own machine and run: its nodes of one rank, its
// domains, the run's wall as the allocation, as many failures as it saw in their mix, its start
// and healthy step, no per-step price. With the per-kind costs of the same run, --ettr's
// arithmetic gives predict_goodput's prediction (the unit tests hold them equal); without, what
// the projection charged before.
EttrAssumptions bench_assumptions(const GoodputResults& results, const GoodputRun& run,
                                  double start_lost_s);

struct GoodputPrediction {
  std::string design;
  double measured = 0;
  double predicted = 0;  // for the failures the run saw, each at its kind's cost
  // For failures at the nominal rate, the kinds drawn evenly (negative: some kind drawn has no
  // cost measured).
  double predicted_at_rate = 0;
  int failures = 0;
  double lost_per_failure_s = 0;  // the mean predicted cost of the run's failures
  double start_lost_s = 0;
  double background_share = 0;  // the run's own (GoodputRun::background_share)
};
// Each design of `run` that `costs` measured too: its goodput from `costs`' per-kind costs, the
// failures `run` saw and `run`'s own start, healthy step and background (the machine's, not a
// failure's: the goodput is (1 - (start + failures x cost) / wall) / (1 + background share)).
// `costs` may be `run` itself: then the prediction at the failures seen equals the measurement but
// for rounding, and only the prediction at the nominal rate says something.
std::vector<GoodputPrediction> predict_goodput(const GoodputResults& costs,
                                               const GoodputResults& run);

}  // namespace hardy::jobs
