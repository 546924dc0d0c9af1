// The regrow rule (hardy/resilience/regrow_watch.hpp) on scripted step times: a job that shrank
// is due for a relaunch once the time its slower steps lost reaches the relaunch's cost, and not
// a step before; its healthy step is the median at full strength before the shrink (a spike
// does not move it, nor do a launch's first, slower steps); a shrunk job whose steps are no slower
// never is; one that shrank before it had a healthy step estimates its loss from the world sizes;
// nothing is due without a cost, and a verdict comes once.
#include <catch2/catch.hpp>
#include <optional>

#include "hardy/resilience/regrow_watch.hpp"

using hardy::resilience::RegrowVerdict;
using hardy::resilience::RegrowWatch;

namespace {

// Feeds `steps` steps of `step_s` at `world` ranks from step `first`; returns the first verdict
// and the step it came at.
std::optional<RegrowVerdict> run(RegrowWatch& watch, long first, long steps, int world,
                                 double step_s) {
  for (long step = first; step < first + steps; ++step)
    if (auto verdict = watch.observe(step, world, step_s)) return verdict;
  return std::nullopt;
}

// A watch of a job of `last_step` steps that ran 130 steps of 62.5 ms at 8 ranks, its relaunch
// costing 6.25 s.
RegrowWatch after_healthy_steps(long last_step) {
  RegrowWatch watch(8, last_step);
  watch.allow(6.25);
  CHECK_FALSE(run(watch, 1, 130, 8, 0.0625));
  return watch;
}

}  // namespace

TEST_CASE("a shrunk job is due for a relaunch when its lost time reaches the relaunch's cost") {
  RegrowWatch watch(8);
  watch.allow(6.25);
  // A launch's first steps are slower (cold caches): the healthy step leaves them out.
  CHECK_FALSE(run(watch, 1, RegrowWatch::kWarmup, 8, 0.125));
  CHECK_FALSE(run(watch, 21, 80, 8, 0.0625));
  CHECK_FALSE(watch.observe(101, 8, 0.400));  // a spike at full strength: the median ignores it
  // 7 of 8 ranks: each step 31.25 ms longer (binary fractions: the sums are exact), so 6.25 s
  // are lost after 200 steps.
  const auto verdict = run(watch, 102, 1000, 7, 0.09375);
  REQUIRE(verdict);
  CHECK(verdict->step == 102 + 199);
  CHECK(verdict->shrunk_since_step == 102);
  CHECK(verdict->world_size == 7);
  CHECK(verdict->full_world_size == 8);
  REQUIRE(verdict->healthy_step_s);
  CHECK(*verdict->healthy_step_s == 0.0625);
  CHECK(verdict->lost_s == 6.25);
  CHECK(verdict->cost_s == 6.25);
  CHECK_FALSE(run(watch, 302, 1000, 7, 0.09375));  // once
}

TEST_CASE("a shrunk job whose steps are no slower is never due") {
  RegrowWatch watch(8);
  watch.allow(2.0);
  CHECK_FALSE(run(watch, 1, 60, 8, 0.050));
  // Noise of +-5 ms around the same step: the lost time stays near zero.
  for (long step = 61; step < 20061; ++step)
    CHECK_FALSE(watch.observe(step, 7, step % 2 ? 0.055 : 0.045));
  CHECK(watch.lost_s() == Approx(0.0).margin(1e-6));
}

TEST_CASE("a job that shrank before its first healthy steps estimates its loss from the sizes") {
  RegrowWatch watch(8);
  watch.allow(3.0);
  CHECK_FALSE(run(watch, 1, 25, 8, 0.1));  // past the warm-up, fewer than kMinHealthy
  // At 4 of 8 each step of 0.125 s counts half of it: 3 s after 48 steps.
  const auto verdict = run(watch, 26, 100, 4, 0.125);
  REQUIRE(verdict);
  CHECK(verdict->step == 26 + 47);
  CHECK_FALSE(verdict->healthy_step_s);
  CHECK(verdict->lost_s == 3.0);
}

TEST_CASE(
    "a job that shrank before its first healthy steps weighs them against the launch before's") {
  // The goodput bench (2026-11-30): a rank killed 6 steps after a relaunch ran shrunk 32 s on
  // the estimate; the launch before had logged its healthy step.
  RegrowWatch watch(8, /*last_step=*/100000);
  watch.allow(3.0);
  watch.healthy_before(0.0625);
  CHECK_FALSE(run(watch, 1, 6, 8, 0.1));  // the launch's first steps, slow: no healthy step
  const auto verdict = run(watch, 7, 1000, 7, 0.09375);
  REQUIRE(verdict);
  REQUIRE(verdict->healthy_step_s);
  CHECK(*verdict->healthy_step_s == 0.0625);
  CHECK(verdict->healthy_from_before);
  // Measured against it, so projected over the steps left: 50% slower, due after
  // kMinShrunkClear steps.
  CHECK(verdict->step == 7 + static_cast<long>(RegrowWatch::kMinShrunkClear) - 1);
  CHECK(verdict->projected_s > 0);

  // A launch with healthy steps of its own goes by those.
  RegrowWatch own = after_healthy_steps(100000);
  own.healthy_before(0.5);
  const auto measured = run(own, 131, 1000, 7, 0.09375);
  REQUIRE(measured);
  CHECK(*measured->healthy_step_s == 0.0625);
  CHECK_FALSE(measured->healthy_from_before);
}

TEST_CASE("a launch's slow first steps are not taken for healthy ones") {
  // The goodput bench's fault domain of 2 (2026-11-30): its first 58 steps at 106 ms, a rank
  // killed, then the whole job at 95 ms, slower than healthy (steps past the warm-up ran at 87)
  // but faster than those first steps: with them as the healthy step nothing was ever lost.
  RegrowWatch watch(2);
  watch.allow(3.0);
  CHECK_FALSE(run(watch, 1, 58, 2, 0.106));
  // Too few steps past the warm-up: half the domain lost, half of each step counts.
  const auto verdict = run(watch, 59, 1000, 1, 0.095);
  REQUIRE(verdict);
  CHECK_FALSE(verdict->healthy_step_s);
  CHECK(verdict->step < 59 + 70);
}

TEST_CASE("nothing is due without a relaunch's cost, and steps of unknown length count nothing") {
  RegrowWatch watch(4);
  CHECK_FALSE(run(watch, 1, 50, 4, 0.1));
  CHECK_FALSE(run(watch, 51, 5000, 3, 0.5));  // 2 s a step lost, no cost allowed
  CHECK(watch.lost_s() > 100);
  RegrowWatch unknown(4);
  unknown.allow(1.0);
  CHECK_FALSE(run(unknown, 1, 50, 4, 0.1));
  CHECK_FALSE(run(unknown, 51, 1000, 3, 0.0));
  CHECK(unknown.lost_s() == 0.0);
  // The cost, once known, is weighed against what was lost already.
  watch.allow(10.0);
  CHECK(watch.observe(5051, 3, 0.5));
}

TEST_CASE(
    "a shrunk job with many steps left is due once its measured loss, over them, is twice "
    "the cost") {
  RegrowWatch watch = after_healthy_steps(100000);
  // 12.5% slower (7.8125 ms on 62.5). After kMinShrunk steps (0.234 s lost, far from the cost),
  // the steps left would lose about 780 s: due at once.
  const auto verdict = run(watch, 131, 1000, 7, 0.0703125);
  REQUIRE(verdict);
  CHECK(verdict->step == 131 + static_cast<long>(RegrowWatch::kMinShrunk) - 1);
  CHECK(verdict->lost_s == Approx(0.234375));
  CHECK(verdict->steps_left == 100000 - verdict->step);
  CHECK(verdict->projected_s == Approx(0.0078125 * static_cast<double>(verdict->steps_left)));
  CHECK(verdict->cost_s == 6.25);
}

TEST_CASE("a large loss a step is plain after a few steps, one slow step is not") {
  SECTION("7 of 8 ranks, 50% slower a step: due after kMinShrunkClear steps") {
    // Fails with kMinShrunk alone: due 22 steps later.
    RegrowWatch watch = after_healthy_steps(100000);
    const auto verdict = run(watch, 131, 1000, 7, 0.09375);
    REQUIRE(verdict);
    CHECK(verdict->step == 131 + static_cast<long>(RegrowWatch::kMinShrunkClear) - 1);
    CHECK(verdict->projected_s == Approx(0.03125 * static_cast<double>(verdict->steps_left)));
  }
  SECTION("the shrink's own slow steps, then steps 12.5% slower: the median waits for kMinShrunk") {
    // Three recovery steps of a second each would make the mean 0.35 s a step after eight.
    RegrowWatch watch = after_healthy_steps(100000);
    CHECK_FALSE(run(watch, 131, 3, 7, 1.0));
    const auto verdict = run(watch, 134, 1000, 7, 0.0703125);
    REQUIRE(verdict);
    CHECK(verdict->step == 131 + static_cast<long>(RegrowWatch::kMinShrunk) - 1);
  }
}

TEST_CASE("near its end, or slower by noise only, a shrunk job waits for the loss to pay") {
  SECTION("the steps left would lose less than twice the cost: ski rental as before") {
    // 300 steps left at the shrink: 9.4 s projected, under 2 x 6.25. Due when the loss reaches
    // the cost, after 200 steps.
    RegrowWatch watch = after_healthy_steps(430);
    const auto verdict = run(watch, 131, 1000, 7, 0.09375);
    REQUIRE(verdict);
    CHECK(verdict->step == 131 + 199);
    CHECK(verdict->projected_s == 0);
  }
  SECTION("a loss per step under kMinLossShare of the healthy step: never projected") {
    // 4% slower (binary fractions: 2.5 ms on 62.5), a million steps left: 2,500 s if it were
    // believed. Ski rental still pays out, after 2,500 steps.
    RegrowWatch watch = after_healthy_steps(1000000);
    CHECK_FALSE(run(watch, 131, 2000, 7, 0.065));
    const auto verdict = run(watch, 2131, 1000, 7, 0.065);
    REQUIRE(verdict);
    CHECK(verdict->projected_s == 0);
  }
  SECTION("noise around the healthy step") {
    RegrowWatch watch(8, /*last_step=*/10000000);
    watch.allow(2.0);
    CHECK_FALSE(run(watch, 1, 130, 8, 0.050));
    for (long step = 131; step < 20131; ++step)
      CHECK_FALSE(watch.observe(step, 7, step % 2 ? 0.055 : 0.045));
  }
  SECTION("an estimated loss is not projected") {
    RegrowWatch watch(8, /*last_step=*/100000);
    watch.allow(3.0);
    CHECK_FALSE(run(watch, 1, 25, 8, 0.1));
    const auto verdict = run(watch, 26, 100, 4, 0.125);
    REQUIRE(verdict);
    CHECK(verdict->step == 26 + 47);
    CHECK(verdict->projected_s == 0);
  }
}
