// The effective training time projection (hardy simulate --ettr) from a scale benchmark's results.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../support/scratch_directory.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/jobs/scale_model.hpp"

using namespace hardy;
using namespace hardy::jobs;

namespace {

nlohmann::json linear(double a, double b) {
  return {{"best", {{"model", "linear"}, {"a", a}, {"b", b}, {"relative_rms", 0.01}}}};
}

// What bench/cluster/scale_bench.py writes, with round numbers: one job starts in 1 + 0.01 N s
// and stalls 2 + 0.02 N s after a node's loss; domains of 2 stall 0.3 + 0.001 N s. With the
// contention removed (each point divided by the contention at its size, then fitted) one job
// starts in 1 s and stalls in 2 s at any size, domains stall 0.3 s.
nlohmann::json scale_results() {
  nlohmann::json fits = {
      {"one_job", {{"start_s", linear(1, 0.01)}, {"stall_s", linear(2, 0.02)}}},
      {"domains_of_2", {{"start_s", linear(1.5, 0.01)}, {"stall_s", linear(0.3, 0.001)}}}};
  nlohmann::json alone = {
      {"one_job", {{"start_s", linear(1, 0)}, {"stall_s", linear(2, 0)}}},
      {"domains_of_2", {{"start_s", linear(1.5, 0)}, {"stall_s", linear(0.3, 0)}}}};
  nlohmann::json medians = {{"one_job", {{"4", {{"step_s", 0.1}}}, {"32", {{"step_s", 0.4}}}}},
                            {"domains_of_2",
                             {{"4", {{"step_s", 0.105}, {"back_s", 2.0}, {"contention", 1.0}}},
                              {"32", {{"step_s", 0.5}, {"back_s", 4.0}, {"contention", 4.0}}}}}};
  return {{"per_domain", 2}, {"fits", fits}, {"fits_alone", alone}, {"medians", medians}};
}

}  // namespace

TEST_CASE("ETTR: the measured fits, the failure rate and the per-step prices give the ratio") {
  testing::ScratchDirectory dir("ettr");
  std::ofstream(dir / "scale.json") << scale_results().dump();
  const auto measured = read_scaling(dir / "scale.json");
  CHECK(measured.nodes_per_domain == 2);
  CHECK(measured.largest_nodes == 32);
  CHECK(measured.step_s == Approx(0.1));                  // the smallest job's
  CHECK(measured.domain_step_overhead == Approx(0.05));   // 0.105 / 0.1 - 1
  CHECK(measured.measured.domain_back_s == Approx(3.0));  // the median of 2 and 4
  CHECK(measured.alone.domain_back_s == Approx(1.5));     // of 2 / 1 and 4 / 4
  CHECK(measured.largest_contention == Approx(4.0));

  // 1,024 nodes x 16 GPUs = 16,384 GPUs, an interruption every 2 h: 12 in a 24 h allocation.
  EttrAssumptions a{.nodes = 1024,
                    .gpus_per_node = 16,
                    .nodes_per_domain = 16,
                    .hours_between_interruptions_per_16k_gpus = 2,
                    .job_hours = 24,
                    .step_s = 1.0,
                    .domain_step_overhead = -1,
                    .protection_overhead = 0.01};
  const auto projections = project_ettr(measured, a);
  REQUIRE(projections.size() == 4);
  const auto& one = projections[0];
  const auto& domains = projections[1];
  CHECK(one.bound == "as measured");
  const double job_s = 24 * 3600;
  CHECK(one.failures == Approx(12));
  CHECK(one.start_s == Approx(1 + 0.01 * 1024));
  CHECK(one.stall_s == Approx(2 + 0.02 * 1024));
  CHECK(one.per_failure_s == Approx(one.stall_s + 1.0));  // the step in flight redone
  CHECK(one.ettr == Approx((job_s - one.start_s - 12 * one.per_failure_s) / job_s / 1.01));

  // 64 domains: the stall as measured for 64 domains of the bench's 2 nodes, the lost domain
  // away for the measured return plus what 16 nodes cost to start beyond 2, for 16/1024 of it.
  CHECK(domains.design == "64 domains of 16 nodes");
  CHECK(domains.stall_s == Approx(0.3 + 0.001 * 128));
  const double away = 3.0 + (1 + 0.01 * 16) - (1 + 0.01 * 2);
  CHECK(domains.degraded_s == Approx(away * 16 / 1024));
  CHECK(domains.step_overhead == Approx(0.01 + 0.05));
  CHECK(domains.ettr ==
        Approx((job_s - domains.start_s - 12 * domains.per_failure_s) / job_s / 1.06));
  CHECK(domains.per_failure_s < one.per_failure_s);

  // With the contention removed: the fits of the points divided by it at their own sizes.
  const auto& one_alone = projections[2];
  const auto& domains_alone = projections[3];
  CHECK(one_alone.bound == "contention removed");
  CHECK(one_alone.start_s == Approx(1.0));
  CHECK(one_alone.stall_s == Approx(2.0));
  CHECK(domains_alone.stall_s == Approx(0.3));
  CHECK(domains_alone.degraded_s == Approx(1.5 * 16 / 1024));  // 1 s to start at any size
  CHECK(one_alone.ettr > one.ettr);

  // The per-step price given instead of measured.
  a.domain_step_overhead = 0.002;
  CHECK(project_ettr(measured, a)[1].step_overhead == Approx(0.012));
  // Domains that meet every 5th step redo 2 more steps on average after a loss.
  a.domain_sync_every = 5;
  CHECK(project_ettr(measured, a)[1].lost_work_s == Approx(3.0));
  CHECK(project_ettr(measured, a)[0].lost_work_s == Approx(1.0));
}

TEST_CASE("ETTR: a fit that falls with the node count is held at the smallest value measured") {
  testing::ScratchDirectory dir("ettr-floor");
  // With the contention removed, the domains' stall measured 0.23, 0.19 and 0.14 s at 8 to 32
  // nodes fits 0.229 - 0.0029 N: at the 570 nodes where 285 domains are evaluated that would be
  // a negative stall, and an ETTR above 100%.
  auto results = scale_results();
  results["fits_alone"]["domains_of_2"]["stall_s"]["best"] = {
      {"model", "linear"}, {"a", 0.229}, {"b", -0.0029}, {"floor", 0.136}, {"relative_rms", 0.02}};
  // Written before the floor was recorded: held at zero at least.
  results["fits_alone"]["one_job"]["stall_s"]["best"] = {
      {"model", "linear"}, {"a", 1.0}, {"b", -0.01}, {"relative_rms", 0.02}};
  std::ofstream(dir / "scale.json") << results.dump();
  const auto measured = read_scaling(dir / "scale.json");
  CHECK(measured.alone.domains_stall.at(8) == Approx(0.229 - 0.0029 * 8));
  CHECK(measured.alone.domains_stall.at(570) == Approx(0.136));
  CHECK(measured.alone.one_job_stall.at(4560) == 0.0);
  CHECK_THAT(measured.alone.domains_stall.formula(), Catch::Contains("at least 0.136"));

  const auto projections =
      project_ettr(measured, {.nodes = 4560, .gpus_per_node = 6, .nodes_per_domain = 16});
  for (const auto& p : projections) {
    INFO(p.design << ", " << p.bound);
    CHECK(p.stall_s >= 0);
    CHECK(p.ettr <= 1.0);
  }
  CHECK(projections[3].stall_s == Approx(0.136));
}

TEST_CASE("ETTR: refuses results it cannot use and machines domains do not divide") {
  testing::ScratchDirectory dir("ettr-bad");
  auto results = scale_results();
  results["fits"]["one_job"].erase("stall_s");
  std::ofstream(dir / "no-stall.json") << results.dump();
  CHECK_THROWS_AS(read_scaling(dir / "no-stall.json"), InvalidArgument);
  results = scale_results();
  results.erase("fits_alone");  // written before the contention was measured
  std::ofstream(dir / "no-alone.json") << results.dump();
  CHECK_THROWS_AS(read_scaling(dir / "no-alone.json"), InvalidArgument);
  std::ofstream(dir / "other.json") << R"({"steps": 3})";
  CHECK_THROWS_AS(read_scaling(dir / "other.json"), InvalidArgument);
  CHECK_THROWS_AS(read_scaling(dir / "missing.json"), InvalidArgument);

  std::ofstream(dir / "scale.json") << scale_results().dump();
  const auto measured = read_scaling(dir / "scale.json");
  CHECK_THROWS_AS(project_ettr(measured, {.nodes = 100, .nodes_per_domain = 16}), InvalidArgument);
  CHECK_THROWS_AS(
      project_ettr(measured, {.nodes = 64, .hours_between_interruptions_per_16k_gpus = 0}),
      InvalidArgument);
}

TEST_CASE("ETTR: the domains' per-step price comes from the domain bench, pooled rounds first") {
  testing::ScratchDirectory dir("ettr-price");
  nlohmann::json bench = {{"overhead",
                           {{"nodes", 8},
                            {"nodes_per_domain", 2},
                            {"overhead_pct",
                             {{"domains_4x2", 4.0},
                              {"domains_4x2_sync_every_4", -1.0},
                              {"domains_4x2_sharded", 6.0}}}}}};
  std::ofstream(dir / "run.json") << bench.dump();
  CHECK(read_domain_price(dir / "run.json", 1).overhead == Approx(0.04));
  CHECK(read_domain_price(dir / "run.json", 4).overhead == Approx(-0.01));
  CHECK(read_domain_price(dir / "run.json", 4).measured_as.find("domains_4x2_sync_every_4") !=
        std::string::npos);
  // Each exchange its own price (--domain-exchange); one the bench did not run is refused.
  CHECK(read_domain_price(dir / "run.json", 1, "sharded").overhead == Approx(0.06));
  CHECK_THROWS_AS(read_domain_price(dir / "run.json", 4, "sharded"), InvalidArgument);
  // Rounds pooled over several runs win over the last run's own.
  bench["pooled"] = {{"overhead_pct", {{"domains_4x2", 2.7}}}};
  std::ofstream(dir / "pooled.json") << bench.dump();
  CHECK(read_domain_price(dir / "pooled.json", 1).overhead == Approx(0.027));
  CHECK(read_domain_price(dir / "pooled.json", 4).overhead == Approx(-0.01));
  // A meeting interval the bench did not measure, a bench run without the comparison, no file.
  CHECK_THROWS_AS(read_domain_price(dir / "run.json", 2), InvalidArgument);
  std::ofstream(dir / "recovery-only.json") << R"({"overhead": null, "recovery": {}})";
  CHECK_THROWS_AS(read_domain_price(dir / "recovery-only.json", 1), InvalidArgument);
  CHECK_THROWS_AS(read_domain_price(dir / "missing.json", 1), InvalidArgument);
}

TEST_CASE("ETTR: per-kind failure costs measured on a small cluster, grown to the machine") {
  testing::ScratchDirectory dir("ettr-costs");
  std::ofstream(dir / "scale.json") << scale_results().dump();
  const auto measured = read_scaling(dir / "scale.json");
  // Measured on 8 nodes (domains of 2): one job stalls 4 s after a node crash and loses 2 s
  // after it; it survives a rank kill in-job (1 s stalled, 3 s after). Domains: 0.5 s and 1 s
  // stalled, 2 s lost after each (a domain away, a quarter of the machine).
  MeasuredFailureCosts costs{
      .source = "goodput.json",
      .nodes = 8,
      .nodes_per_domain = 2,
      .one_job = {{"node_crash", {.count = 1, .stall_s = 4, .after_s = 2}},
                  {"rank_kill", {.count = 1, .stall_s = 1, .after_s = 3, .in_job_share = 1}}},
      .domains = {{"node_crash", {.count = 1, .stall_s = 0.5, .after_s = 2, .in_job_share = 1}},
                  {"rank_kill", {.count = 1, .stall_s = 1, .after_s = 2, .in_job_share = 1}}}};
  EttrAssumptions a{.nodes = 1024, .gpus_per_node = 16, .nodes_per_domain = 16, .step_s = 1.0};
  const auto without = project_ettr(measured, a);
  a.failure_costs = costs;
  auto with = project_ettr(measured, a);
  // One job: a crash's stall grows as the scale bench's stall grows from 8 nodes to 1,024; the
  // rank kill's, survived in-job, does not. The steps redone are in the measured costs.
  const double growth = (2 + 0.02 * 1024) - (2 + 0.02 * 8);
  CHECK(with[0].stall_s == Approx((4 + growth + 1) / 2));
  CHECK(with[0].degraded_s == Approx((2 + 3) / 2.0));
  CHECK(with[0].lost_work_s == 0);
  CHECK(with[0].start_s == Approx(without[0].start_s));
  CHECK(with[0].per_failure_s == Approx(with[0].stall_s + with[0].degraded_s));
  // Domains: the survivors' stall grows as the scale bench's (64 domains against the measured
  // 4); the lost domain was away 2 / (2/8) = 8 s, plus what 16 nodes take to start beyond 2,
  // for 16/1024 of the machine.
  const double regroup_growth = (0.3 + 0.001 * 128) - (0.3 + 0.001 * 8);
  CHECK(with[1].stall_s == Approx((0.5 + 1) / 2 + regroup_growth));
  CHECK(with[1].degraded_s == Approx((8 + (1 + 0.01 * 16) - (1 + 0.01 * 2)) * 16 / 1024));
  // The mix weighs the kinds; the start may be given.
  a.failure_mix = {{"node_crash", 1}};
  a.start_s = 0;
  with = project_ettr(measured, a);
  CHECK(with[0].stall_s == Approx(4 + growth));
  CHECK(with[0].start_s == 0);
  a.failure_mix = {{"hang", 1}};
  CHECK_THROWS_AS(project_ettr(measured, a), InvalidArgument);
}
