// The divergence watch's rule (hardy/resilience/divergence_watch.hpp) on scripted losses: the
// early level, the window of steps above it, non-finite losses, steps trained again after a
// recovery, and that a learning run's curve never trips it.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "hardy/core/support/error.hpp"
#include "hardy/resilience/divergence_watch.hpp"

using hardy::resilience::DivergenceReport;
using hardy::resilience::DivergenceThresholds;
using hardy::resilience::DivergenceWatch;

namespace {

// Feeds losses for steps first, first + 1, ...; returns every report (at most one is expected).
std::vector<DivergenceReport> feed(DivergenceWatch& watch, const std::vector<double>& losses,
                                   long first = 1) {
  std::vector<DivergenceReport> reports;
  for (std::size_t i = 0; i < losses.size(); ++i)
    if (auto report = watch.observe(first + static_cast<long>(i), losses[i]))
      reports.push_back(*report);
  return reports;
}

std::vector<double> repeated(double loss, int count) { return std::vector<double>(count, loss); }

}  // namespace

TEST_CASE(
    "divergence: a loss that stays above twice its early level for the window is reported once",
    "[resilience]") {
  // CosmoFlow with the compact network's defaults (issue 70): 0.47 at first, 1.6-1.8 after.
  DivergenceWatch watch({.factor = 2.0, .window = 20, .early_steps = 10});
  auto losses = repeated(0.5, 10);                     // steps 1-10: early level 0.5
  for (int i = 0; i < 5; ++i) losses.push_back(0.9);   // 11-15: below 1.0
  for (int i = 0; i < 30; ++i) losses.push_back(1.7);  // 16-45: above
  const auto reports = feed(watch, losses);
  REQUIRE(reports.size() == 1);
  CHECK(reports[0].step == 35);  // the 20th step above: 16 + 19
  CHECK(reports[0].since_step == 16);
  CHECK(reports[0].early_loss == Approx(0.5));
  CHECK(reports[0].window_mean == Approx(1.7));
  CHECK(reports[0].loss == Approx(1.7));
  CHECK(reports[0].non_finite == 0);
}

TEST_CASE(
    "divergence: the default thresholds catch issue 70's CosmoFlow, which doubled its loss "
    "by the second step",
    "[resilience]") {
  // tests/jobs/divergence.py's job (Adam at 0.002, the compact network's old defaults), its
  // first 25 losses as logged on 2026-11-29.
  const std::vector<double> losses{0.544, 1.237, 1.618, 1.684, 1.762, 1.725, 1.697, 1.682, 1.447,
                                   1.82,  1.633, 1.584, 2.068, 1.478, 2.086, 1.559, 1.621, 1.772,
                                   1.984, 1.894, 1.424, 2.19,  1.91,  2.008, 1.999};
  DivergenceWatch watch(DivergenceThresholds{});
  const auto reports = feed(watch, losses);
  REQUIRE(reports.size() == 1);
  CHECK(reports[0].since_step == 2);
  CHECK(reports[0].step == 21);
  CHECK(reports[0].early_loss == Approx(0.544));
  // The same job with CosmoFlow's recipe (SGD): no report.
  DivergenceWatch recipe(DivergenceThresholds{});
  CHECK(feed(recipe, {0.544, 0.398, 0.531, 0.633, 0.578, 0.423, 0.544, 0.278, 0.522, 0.724,
                      0.33,  0.287, 0.33,  0.515, 0.4,   0.343, 0.364, 0.37,  0.513, 0.322,
                      0.389, 0.382, 0.435, 0.453, 0.454, 0.311, 0.353, 0.453, 0.326, 0.372})
            .empty());
}

TEST_CASE("divergence: a step back under the threshold starts the window again", "[resilience]") {
  DivergenceWatch watch({.factor = 2.0, .window = 5, .early_steps = 2});
  // Early level 1.0; four above, one at 1.9 (under 2.0), four above: never five in a row.
  const auto reports =
      feed(watch, {1.0, 1.0, 2.5, 2.5, 2.5, 2.5, 1.9, 2.5, 2.5, 2.5, 2.5, 1.0, 3.0});
  CHECK(reports.empty());
  // One more above makes five in a row (steps 13-17).
  const auto later = feed(watch, {3.0, 3.0, 3.0, 3.0}, 14);
  REQUIRE(later.size() == 1);
  CHECK(later[0].since_step == 13);
  CHECK(later[0].step == 17);
}

TEST_CASE("divergence: NaN and infinite losses count as above and are left out of the means",
          "[resilience]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  DivergenceWatch watch({.factor = 2.0, .window = 3, .early_steps = 2});
  // A NaN among the first steps does not spoil the early level (1.0 from steps 1 and 3).
  const auto reports = feed(watch, {1.0, nan, 1.0, nan, 5.0, inf});
  REQUIRE(reports.size() == 1);
  CHECK(reports[0].early_loss == Approx(1.0));
  CHECK(reports[0].since_step == 4);
  CHECK(reports[0].non_finite == 2);
  CHECK(reports[0].window_mean == Approx(5.0));
  CHECK(std::isinf(reports[0].loss));

  DivergenceWatch all_nan({.factor = 2.0, .window = 2, .early_steps = 1});
  const auto nan_reports = feed(all_nan, {1.0, nan, nan});
  REQUIRE(nan_reports.size() == 1);
  CHECK(std::isnan(nan_reports[0].window_mean));
}

TEST_CASE("divergence: steps trained again after a recovery replace the ones seen",
          "[resilience]") {
  DivergenceWatch watch({.factor = 2.0, .window = 4, .early_steps = 2});
  // Early level 1.0; steps 3-5 above, then a rollback to step 4: the window holds 3 and the
  // new 4, 5, 6 (four in a row at step 6), not 3, 4, 5, 4, which would count a step twice.
  CHECK(feed(watch, {1.0, 1.0, 3.0, 3.0, 3.0}).empty());
  CHECK(!watch.observe(4, 3.0));
  CHECK(!watch.observe(5, 3.0));
  const auto report = watch.observe(6, 3.0);
  REQUIRE(report);
  CHECK(report->since_step == 3);
  CHECK(report->step == 6);

  // A rollback inside the early steps: step 2's loss replaced, the level from steps 1 and 2.
  DivergenceWatch early({.factor = 2.0, .window = 1, .early_steps = 2});
  CHECK(!early.observe(1, 1.0));
  CHECK(!early.observe(1, 3.0));  // step 1 again: 3.0 replaces 1.0
  CHECK(!early.observe(2, 1.0));  // level (3 + 1) / 2 = 2
  CHECK(!early.observe(3, 3.9));
  CHECK(early.observe(4, 4.1));
}

TEST_CASE("divergence: learning curves and noisy plateaus are never reported", "[resilience]") {
  DivergenceWatch watch({.factor = 2.0, .window = 20, .early_steps = 10});
  std::vector<double> losses;
  // A loss that rises for a while during warm-up (up to 1.6x), then falls with noise.
  for (int step = 1; step <= 1000; ++step) {
    const double trend = step < 60 ? 1.0 + 0.6 * step / 60.0 : 1.6 * std::exp(-(step - 60) / 300.0);
    losses.push_back(trend * (1.0 + 0.2 * std::sin(step * 1.7)));
  }
  CHECK(feed(watch, losses).empty());

  DivergenceWatch off({.factor = 0.0, .window = 1, .early_steps = 1});
  CHECK(!off.enabled());
  CHECK(feed(off, {1.0, 100.0, 1000.0}).empty());
}

TEST_CASE("divergence: thresholds outside their ranges are refused", "[resilience]") {
  CHECK_THROWS_AS(DivergenceWatch({.factor = 1.0, .window = 20, .early_steps = 10}),
                  hardy::InvalidArgument);
  CHECK_THROWS_AS(DivergenceWatch({.factor = -2.0, .window = 20, .early_steps = 10}),
                  hardy::InvalidArgument);
  CHECK_THROWS_AS(DivergenceWatch({.factor = 2.0, .window = 0, .early_steps = 10}),
                  hardy::InvalidArgument);
  CHECK_THROWS_AS(DivergenceWatch({.factor = 2.0, .window = 20, .early_steps = 0}),
                  hardy::InvalidArgument);
}
