// The goodput model (hardy simulate --goodput, and --ettr --costs-from): per-kind failure costs
// read from bench/cluster/goodput_bench.py's results, a run's goodput predicted from them, and
// the projection to a large machine that uses the same costs.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../support/scratch_directory.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/jobs/goodput_model.hpp"

using namespace hardy;
using namespace hardy::jobs;

namespace {

nlohmann::json fault(const char* kind, double lost, double gap, int fewest_ranks) {
  return {{"kind", kind},
          {"lost_s", lost},
          {"longest_gap_s", gap},
          {"fewest_ranks", fewest_ranks},
          {"window_s", lost + 10}};
}

// Round numbers: one job loses 8 s to a node crash (4 s without a commit, then a relaunch's
// warm-up), 2 s to a rank kill it survives in-job on 7 of 8 ranks (0.5 s stalled), and 9 s and
// 7 s to two freezes (the second window without a commit: the next fault came first). Domains
// lose 3 s to a crash, survived by the other domains. 1,000 steps of 0.1 s, 4 s lost at the
// start: 130 s in all for one job.
nlohmann::json goodput_results() {
  nlohmann::json one_job = {{"steps", 1000},
                            {"wall_s", 130.0},
                            {"healthy_step_s", 0.1},
                            {"goodput", 100 / 130.0},
                            {"start_lost_s", 4.0},
                            {"faults",
                             {fault("node_crash", 8, 4, 8),
                              fault("rank_kill", 2, 0.5, 7),
                              fault("node_freeze", 9, 6, 8),
                              {{"kind", "node_freeze"},
                               {"lost_s", 7.0},
                               {"longest_gap_s", nullptr},
                               {"fewest_ranks", nullptr}}}}};
  nlohmann::json domains = {{"steps", 1000},
                            {"wall_s", 120.0},
                            {"healthy_step_s", 0.1},
                            {"goodput", 100.0 / 120},
                            {"faults", {fault("node_crash", 3, 0.5, 6)}}};
  return {{"seed", 7},
          {"mtbf_s", 50.0},
          {"nodes", 8},
          {"schedule", {{{"kind", "node_crash"}}, {{"kind", "rank_kill"}}}},
          {"runs", {{"one_job", one_job}, {"domains", domains}}}};
}

// The run to predict: one job saw two crashes and a rank kill in 300 s, and lost 5 s at its
// start (100 s of work, the same as goodput_results()).
nlohmann::json run_to_predict() {
  auto other = goodput_results();
  other["runs"]["one_job"]["wall_s"] = 300.0;
  other["runs"]["one_job"]["start_lost_s"] = 5.0;
  other["runs"]["one_job"]["goodput"] = 0.9;
  other["runs"]["one_job"]["faults"] = {fault("node_crash", 1, 1, 8), fault("node_crash", 1, 1, 8),
                                        fault("rank_kill", 1, 1, 7)};
  other["runs"].erase("domains");
  return other;
}

}  // namespace

TEST_CASE("Goodput model: per-kind costs from the bench's faults") {
  testing::ScratchDirectory dir("goodput-read");
  std::ofstream(dir / "goodput.json") << goodput_results().dump();
  const auto results = read_goodput(dir / "goodput.json");
  CHECK(results.seed == 7);
  CHECK(results.nodes == 8);
  CHECK(results.nodes_per_domain == 2);  // the bench's, before it recorded it
  // Before the bench recorded the kinds it drew from: those of its schedule.
  CHECK(results.kinds == std::vector<std::string>{"node_crash", "rank_kill"});
  const auto& one = results.runs.at("one_job");
  CHECK(one.fault_kinds.size() == 4);
  CHECK(one.costs.at("node_crash").stall_s == Approx(4));
  CHECK(one.costs.at("node_crash").after_s == Approx(4));
  CHECK(one.costs.at("node_crash").in_job_share == Approx(0));
  CHECK(one.costs.at("rank_kill").in_job_share == Approx(1));  // ran on 7 of 8 ranks
  // A window without a commit counts wholly as its stall; the kind's figures are means.
  CHECK(one.costs.at("node_freeze").count == 2);
  CHECK(one.costs.at("node_freeze").stall_s == Approx((6 + 7) / 2.0));
  CHECK(one.costs.at("node_freeze").lost_s() == Approx(8));
  CHECK(results.runs.at("domains").start_lost_s < 0);  // not recorded

  // A run without a healthy step of its own (too few steps at full strength) is left out.
  auto without = goodput_results();
  without["runs"]["domains"]["goodput"] = nullptr;
  without["runs"]["domains"]["healthy_step_s"] = nullptr;
  std::ofstream(dir / "without.json") << without.dump();
  const auto partial = read_goodput(dir / "without.json");
  CHECK(partial.runs.size() == 1);
  CHECK(partial.without_healthy_step == std::vector<std::string>{"domains"});

  const auto costs = failure_costs(results);
  CHECK(costs.nodes == 8);
  CHECK(costs.one_job.size() == 3);
  CHECK(costs.domains.at("node_crash").lost_s() == Approx(3));
}

TEST_CASE("Goodput model: a run's goodput predicted from another's per-kind costs") {
  testing::ScratchDirectory dir("goodput-predict");
  std::ofstream(dir / "costs.json") << goodput_results().dump();
  std::ofstream(dir / "run.json") << run_to_predict().dump();
  const auto predictions =
      predict_goodput(read_goodput(dir / "costs.json"), read_goodput(dir / "run.json"));
  REQUIRE(predictions.size() == 1);
  const auto& p = predictions[0];
  CHECK(p.design == "one_job");
  CHECK(p.failures == 3);
  CHECK(p.lost_per_failure_s == Approx((8 + 8 + 2) / 3.0));  // the costs', not the run's own
  CHECK(p.start_lost_s == Approx(5));
  CHECK(p.predicted == Approx(1 - (5 + 18) / 300.0));
  CHECK(p.measured == Approx(0.9));
  // At the nominal rate (one failure every 50 s, crashes and rank kills alike, 5 s each on
  // average): wall = 5 + 100 / (1 - 5 / 50).
  CHECK(p.predicted_at_rate == Approx(100 / (5 + 100 / 0.9)));

  // Its own costs reproduce a run: the start not recorded is what the faults leave of the time
  // lost, so the prediction at the failures seen is the measurement.
  const auto self = read_goodput(dir / "costs.json");
  const auto own = predict_goodput(self, self);
  REQUIRE(own.size() == 2);
  for (const auto& q : own) CHECK(q.predicted == Approx(q.measured));
  CHECK(own[0].design == "domains");
  CHECK(own[0].start_lost_s == Approx(120 - 100 - 3));
  CHECK(own[0].predicted_at_rate < 0);  // no rank kill measured for domains: not predicted
}

TEST_CASE("Goodput model: the machine's own background is the run's, a price on every step") {
  testing::ScratchDirectory dir("goodput-background");
  // The costs' run lost 5 s outside its failures' recoveries besides: 135 s in all.
  auto calibration = goodput_results();
  calibration["runs"]["one_job"]["wall_s"] = 135.0;
  calibration["runs"]["one_job"]["goodput"] = 100 / 135.0;
  calibration["runs"]["one_job"]["background_lost_s"] = 5.0;
  std::ofstream(dir / "costs.json") << calibration.dump();
  const auto costs = read_goodput(dir / "costs.json");
  CHECK(costs.runs.at("one_job").background_share() == Approx(0.05));
  CHECK(costs.runs.at("domains").background_share() == 0);  // written before the split
  // Its own costs and background reproduce it.
  for (const auto& q : predict_goodput(costs, costs)) CHECK(q.predicted == Approx(q.measured));

  // A run on a noisier machine (10 s of 100 s of work lost to it) is predicted with its own
  // background and the other's failure costs: (1 - (5 + 18) / 300) / 1.1.
  auto other = run_to_predict();
  other["runs"]["one_job"]["background_lost_s"] = 10.0;
  std::ofstream(dir / "run.json") << other.dump();
  const auto predictions = predict_goodput(costs, read_goodput(dir / "run.json"));
  REQUIRE(predictions.size() == 1);
  CHECK(predictions[0].background_share == Approx(0.1));
  CHECK(predictions[0].predicted == Approx((1 - (5 + 18) / 300.0) / 1.1));
  // At the nominal rate: wall = 5 + 100 x 1.1 / (1 - 5 / 50).
  CHECK(predictions[0].predicted_at_rate == Approx(100 / (5 + 110 / 0.9)));
}

TEST_CASE("Goodput model: refuses what it cannot predict from") {
  testing::ScratchDirectory dir("goodput-bad");
  auto results = goodput_results();
  std::ofstream(dir / "costs.json") << results.dump();
  // A kind the costs never measured.
  results["runs"]["one_job"]["faults"].push_back(fault("partition", 9, 9, 8));
  std::ofstream(dir / "partition.json") << results.dump();
  CHECK_THROWS_AS(
      predict_goodput(read_goodput(dir / "costs.json"), read_goodput(dir / "partition.json")),
      InvalidArgument);
  results = goodput_results();
  results["runs"]["one_job"].erase("healthy_step_s");
  std::ofstream(dir / "no-step.json") << results.dump();
  CHECK_THROWS_AS(read_goodput(dir / "no-step.json"), InvalidArgument);
  std::ofstream(dir / "other.json") << R"({"fits": {}})";
  CHECK_THROWS_AS(read_goodput(dir / "other.json"), InvalidArgument);
  CHECK_THROWS_AS(read_goodput(dir / "missing.json"), InvalidArgument);
  // No run of domains: no costs to project them with.
  results = goodput_results();
  results["runs"].erase("domains");
  std::ofstream(dir / "one-job-only.json") << results.dump();
  CHECK_THROWS_AS(failure_costs(read_goodput(dir / "one-job-only.json")), InvalidArgument);
}

TEST_CASE("Goodput model: the mix of kinds weighs their costs, and only relaunches grow") {
  const FailureCosts costs = {
      {"node_crash", {.count = 2, .stall_s = 4, .after_s = 2, .in_job_share = 0}},
      {"rank_kill", {.count = 2, .stall_s = 1, .after_s = 3, .in_job_share = 1}}};
  CHECK(mixed_failure_cost(costs, {}) == Approx((6 + 4) / 2.0));  // the kinds alike
  CHECK(mixed_failure_cost(costs, {{"node_crash", 3}, {"rank_kill", 1}}) ==
        Approx((3 * 6 + 4) / 4.0));
  // Grown by 100 s of stall, after-time halved; in-job failures skip the growth on request.
  CHECK(mixed_failure_cost(costs, {}, 100, 0.5) == Approx((104 + 1 + 101 + 1.5) / 2));
  CHECK(mixed_failure_cost(costs, {}, 100, 0.5, true) == Approx((104 + 1 + 1 + 1.5) / 2));
  CHECK_THROWS_AS(mixed_failure_cost(costs, {{"hang", 1}}), InvalidArgument);
  CHECK_THROWS_AS(mixed_failure_cost(costs, {{"node_crash", -1}}), InvalidArgument);
  CHECK_THROWS_AS(mixed_failure_cost(costs, {{"node_crash", 0}}), InvalidArgument);
  CHECK_THROWS_AS(mixed_failure_cost({}, {}), InvalidArgument);
}

TEST_CASE("Goodput model: --ettr's arithmetic at the bench's size is the prediction") {
  testing::ScratchDirectory dir("goodput-ettr");
  // Both designs measured every kind (the projection weighs both by one mix).
  auto measured = goodput_results();
  for (const char* kind : {"rank_kill", "node_freeze"})
    measured["runs"]["domains"]["faults"].push_back(fault(kind, 2, 0.4, 6));
  // A background of its own for each (the machine's spread): a per-step price in both.
  measured["runs"]["one_job"]["background_lost_s"] = 3.0;
  measured["runs"]["domains"]["background_lost_s"] = 1.5;
  std::ofstream(dir / "goodput.json") << measured.dump();
  // A scale bench's results, in round numbers: one job starts in 1 s and stalls 2 s at any size,
  // domains of 2 start in 1.5 s and stall 0.3 s.
  const auto flat = [](double a) {
    return nlohmann::json{{"best", {{"model", "linear"}, {"a", a}, {"b", 0.0}}}};
  };
  const nlohmann::json fits = {{"one_job", {{"start_s", flat(1)}, {"stall_s", flat(2)}}},
                               {"domains_of_2", {{"start_s", flat(1.5)}, {"stall_s", flat(0.3)}}}};
  const nlohmann::json scale = {
      {"per_domain", 2},
      {"fits", fits},
      {"fits_alone", fits},
      {"medians",
       {{"one_job", {{"8", {{"step_s", 0.1}}}}},
        {"domains_of_2", {{"8", {{"step_s", 0.1}, {"back_s", 2.0}, {"contention", 1.0}}}}}}}};
  std::ofstream(dir / "scale.json") << scale.dump();
  const auto results = read_goodput(dir / "goodput.json");
  const auto scaling = read_scaling(dir / "scale.json");
  const auto predictions = predict_goodput(results, results);
  for (const auto& p : predictions) {
    const int row = p.design == "one_job" ? 0 : 1;
    auto a = bench_assumptions(results, results.runs.at(p.design), p.start_lost_s);
    CHECK(project_ettr(scaling, a)[row].failures == Approx(p.failures));
    a.failure_costs = failure_costs(results);
    CHECK(project_ettr(scaling, a)[row].ettr == Approx(p.predicted));
  }
  CHECK(failures_by_kind(results.runs.at("one_job")) ==
        std::map<std::string, double>{{"node_crash", 1}, {"node_freeze", 2}, {"rank_kill", 1}});
}
