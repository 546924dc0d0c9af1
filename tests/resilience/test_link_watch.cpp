// The link watch's rule (hardy/resilience/link_watch.hpp) on scripted figures: a step whose
// exchange grows by more than the slowdown's share of the step asks for a probe once the rise has
// lasted; noise, single spikes and a rise while a rank's own work is suspect never do; the probe's
// pairs name the one node in two slow pairs, and nobody when the whole network slowed; ski rental
// evicts a named link once the time lost reaches a relaunch's cost; a link back at speed
// recovers. And the probe itself over an in-process world: every ring pair, the same everywhere.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "hardy/comm/link_probe.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/resilience/link_watch.hpp"
#include "in_process_world.hpp"

using hardy::comm::LinkPair;
using hardy::resilience::LinkVerdict;
using hardy::resilience::LinkWatch;
using hardy::resilience::StragglerMode;
using hardy::resilience::StragglerThresholds;

namespace {

// Steps of a second (the thresholds' least seconds take no more steps than their least steps).
constexpr double kStepS = 1.0;

StragglerThresholds thresholds(StragglerMode mode = StragglerMode::evict) {
  StragglerThresholds t;
  t.mode = mode;
  return t;  // slowdown 0.15, window 5, confirm 10, warm-up 20
}

// Runs steps first..last with the exchange `exchange(step)` (seconds); returns the first step that
// asked for a probe (0: none).
template <class Exchange>
long run_until_probe(LinkWatch& watch, long first, long last, Exchange&& exchange,
                     bool suspect = false) {
  for (long step = first; step <= last; ++step)
    if (watch.observe(step, exchange(step), suspect, kStepS).probe) return step;
  return 0;
}

// A ring of `nodes` pairs, every pair `fast` seconds but those touching `slow_node` (-1: none).
std::vector<LinkPair> ring(int nodes, int slow_node, double fast, double slow) {
  std::vector<LinkPair> pairs;
  for (int a = 0; a < nodes; ++a) {
    const int b = (a + 1) % nodes;
    pairs.push_back({a, b, a == slow_node || b == slow_node ? slow : fast});
  }
  return pairs;
}

}  // namespace

TEST_CASE("link watch: a lasting rise of the exchange asks for a probe; noise and spikes never") {
  SECTION("a rise of 0.3 of a step, from step 100, probes after the confirmation") {
    LinkWatch watch(thresholds());
    const long probed =
        run_until_probe(watch, 1, 400, [](long step) { return step < 100 ? 0.05 : 0.35; });
    // The window's median follows after 3 steps, then 10 steps of confirmation.
    CHECK(probed >= 100 + 10);
    CHECK(probed <= 100 + 3 + 10);
  }
  SECTION("noise of +-0.05 of a step and a 2x spike every 7 steps never probe") {
    LinkWatch watch(thresholds());
    const long probed = run_until_probe(watch, 1, 5000, [](long step) {
      const double noise = 0.05 * std::sin(static_cast<double>(step) * 1.7);
      return (step % 7 == 0 ? 0.4 : 0.1) + noise;
    });
    CHECK(probed == 0);
  }
  SECTION("a rise of a tenth of a step (below the 0.15 slowdown) never probes") {
    LinkWatch watch(thresholds());
    CHECK(run_until_probe(watch, 1, 1000, [](long step) { return step < 100 ? 0.05 : 0.15; }) == 0);
  }
  SECTION("a rise while a rank's own work is suspect is the rank's, not a link's") {
    LinkWatch watch(thresholds());
    CHECK(run_until_probe(
              watch, 1, 1000, [](long step) { return step < 100 ? 0.05 : 0.35; }, true) == 0);
  }
  SECTION("detect and rebalance probe as well; off never") {
    LinkWatch detect(thresholds(StragglerMode::detect)), off(thresholds(StragglerMode::off));
    CHECK(run_until_probe(detect, 1, 400, [](long step) { return step < 100 ? 0.05 : 0.35; }) > 0);
    CHECK(run_until_probe(off, 1, 400, [](long step) { return step < 100 ? 0.05 : 0.35; }) == 0);
  }
}

TEST_CASE("link watch: the probe names the one node in two slow pairs, and nobody otherwise") {
  const auto probed_watch = [] {
    auto watch = std::make_unique<LinkWatch>(thresholds());
    REQUIRE(run_until_probe(*watch, 1, 400, [](long step) { return step < 100 ? 0.05 : 0.35; }) >
            0);
    return watch;
  };
  SECTION("8 nodes, node 5 at a tenth of its bandwidth") {
    auto watch = probed_watch();
    const auto named = watch->probed(ring(8, 5, 0.005, 0.05));
    REQUIRE(named);
    CHECK(named->node == 5);
    CHECK(named->pair_s == Approx(0.05));
    CHECK(named->peers_pair_s == Approx(0.005));
    CHECK(named->exchange_s == Approx(0.35));
    CHECK(named->baseline_s == Approx(0.05));
    CHECK(named->since_step >= 100);
    REQUIRE(watch->slow());
  }
  SECTION("4 nodes (half the pairs slow: the median of all pairs would hide it) and 3 nodes") {
    for (int nodes : {3, 4}) {
      auto watch = probed_watch();
      const auto named = watch->probed(ring(nodes, 1, 0.005, 0.05));
      REQUIRE(named);
      CHECK(named->node == 1);
    }
  }
  SECTION("pairs 1.5x slower are no slow link; the exchange's level becomes the baseline") {
    auto watch = probed_watch();
    CHECK_FALSE(watch->probed(ring(8, 5, 0.01, 0.015)));
    CHECK(watch->baseline_s() == Approx(0.35));
    // The same level does not probe again; only a further rise would.
    CHECK(run_until_probe(*watch, 401, 800, [](long) { return 0.35; }) == 0);
  }
  SECTION("every pair slow (the whole network), or two nodes' pairs: nobody to leave out") {
    auto watch = probed_watch();
    CHECK_FALSE(watch->probed(ring(8, -1, 0.05, 0.05)));
    auto two = probed_watch();
    auto pairs = ring(8, 2, 0.005, 0.05);
    pairs[5].seconds = pairs[6].seconds = 0.05;  // node 6 too
    CHECK_FALSE(two->probed(pairs));
  }
  SECTION("two nodes: no pairs, nobody named") {
    auto watch = probed_watch();
    CHECK_FALSE(watch->probed({}));
  }
}

TEST_CASE("link watch: a named link is evicted once the time lost reaches the cost, and recovers") {
  SECTION("evict: 0.3 s lost a step against a 6 s relaunch") {
    LinkWatch watch(thresholds());
    watch.allow_eviction(6.0);
    const auto exchange = [](long step) { return step < 100 ? 0.05 : 0.35; };
    const long probed = run_until_probe(watch, 1, 400, exchange);
    REQUIRE(watch.probed(ring(8, 5, 0.005, 0.05)));
    long evicted_at = 0;
    LinkVerdict at;
    for (long step = probed + 1; step <= probed + 100 && !evicted_at; ++step) {
      at = watch.observe(step, exchange(step), false, kStepS);
      if (at.evict) evicted_at = step;
    }
    REQUIRE(evicted_at > 0);
    CHECK(evicted_at - probed >= 20);  // 6 s / 0.3 s (21: 20 x 0.3 falls short in floating point)
    CHECK(evicted_at - probed <= 21);
    CHECK(at.evict->node == 5);
    CHECK(at.lost_s >= 6.0);
    CHECK(at.evict_cost_s == 6.0);
    // Once only.
    bool again = false;
    for (long step = evicted_at + 1; step < evicted_at + 100; ++step)
      again = again || watch.observe(step, 0.35, false, kStepS).evict.has_value();
    CHECK_FALSE(again);
  }
  SECTION("rebalance, or no cost known: named, never evicted; back at speed it recovers") {
    for (auto [mode, cost] :
         {std::pair{StragglerMode::rebalance, 6.0}, std::pair{StragglerMode::evict, 0.0}}) {
      LinkWatch watch(thresholds(mode));
      watch.allow_eviction(cost);
      const long probed =
          run_until_probe(watch, 1, 400, [](long step) { return step < 100 ? 0.05 : 0.35; });
      REQUIRE(watch.probed(ring(8, 5, 0.005, 0.05)));
      bool evicted = false;
      long recovered_at = 0;
      for (long step = probed + 1; step <= probed + 400 && !recovered_at; ++step) {
        const LinkVerdict verdict =
            watch.observe(step, step < probed + 200 ? 0.35 : 0.06, false, kStepS);
        evicted = evicted || verdict.evict.has_value();
        if (verdict.recovered) recovered_at = step;
      }
      CHECK_FALSE(evicted);
      CHECK(recovered_at >= probed + 200 + 10);
      CHECK(recovered_at <= probed + 200 + 3 + 10);
      CHECK_FALSE(watch.slow());
    }
  }
}

TEST_CASE("link probe: every ring pair of nodes timed, the same figures on every rank") {
  // 5 nodes of 2 ranks and one node of 1 (11 ranks; an odd number of nodes: three rounds).
  const std::vector<int> node_of_rank{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5};
  hardy::testing::InProcessWorld world(static_cast<int>(node_of_rank.size()));
  std::vector<hardy::comm::LinkProbe> seen(node_of_rank.size());
  const auto outcomes = world.run([&](std::unique_ptr<hardy::comm::Communicator> comm) {
    seen[static_cast<std::size_t>(comm->rank())] =
        hardy::comm::probe_links(*comm, node_of_rank, 4096, 3);
  });
  for (const auto& outcome : outcomes) REQUIRE_FALSE(outcome);
  const auto& probe = seen[0];
  CHECK(probe.lead_rank_of_node == std::vector<int>{0, 2, 4, 6, 8, 10});
  REQUIRE(probe.pairs.size() == 6);
  for (int edge = 0; edge < 6; ++edge) {
    CHECK(probe.pairs[static_cast<std::size_t>(edge)].node_a == edge);
    CHECK(probe.pairs[static_cast<std::size_t>(edge)].node_b == (edge + 1) % 6);
    CHECK(probe.pairs[static_cast<std::size_t>(edge)].seconds > 0);
  }
  for (const auto& other : seen)
    for (std::size_t i = 0; i < probe.pairs.size(); ++i)
      CHECK(other.pairs[i].seconds == probe.pairs[i].seconds);
  // Bad input is named.
  hardy::testing::InProcessWorld two(2);
  const auto refused = two.run([&](std::unique_ptr<hardy::comm::Communicator> comm) {
    const std::vector<int> missing_node{0, 2};
    hardy::comm::probe_links(*comm, missing_node, 4096, 3);
  });
  CHECK_THAT(hardy::testing::describe(refused[0]), Catch::Contains("node 1 has no rank"));
}
