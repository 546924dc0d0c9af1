// The domains' split of the batch around a slow domain (hardy/resilience/domain_balance.hpp) on
// scripted votes: a domain at a third of the others' speed is named and its share cut, and given
// back when it recovers; noise and spikes never act; domains of unequal sizes are judged by their
// ranks' speed, and back by ranks when their sizes change; a domain not measured leaves the step
// out; the policy never evicts.
#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <utility>
#include <vector>

#include "hardy/core/data/sampler.hpp"
#include "hardy/core/support/random.hpp"
#include "hardy/resilience/domain_balance.hpp"

using hardy::resilience::DomainBalance;
using hardy::resilience::DomainBalanceVerdict;
using hardy::resilience::StragglerMode;
using hardy::resilience::StragglerThresholds;

namespace {

// About a second a step: the window's and the confirmation's least seconds take no more steps
// than their least steps.
constexpr double kPerSample = 0.1, kFixed = 0.2;

// Domains of `ranks` ranks each sharing `batch` samples. A domain's own work is its slowest
// rank's: a fixed cost plus kPerSample per sample over its ranks, times its slowness. The
// published shares come into force at the next vote, as in FaultDomains.
struct ScriptedDomains {
  ScriptedDomains(std::vector<int> sizes, std::size_t samples, StragglerThresholds thresholds = {})
      : ranks(std::move(sizes)), batch(samples), balance(thresholds) {}
  std::vector<int> ranks;
  std::size_t batch;
  DomainBalance balance;
  std::vector<double> in_force, published;  // empty: by ranks
  std::vector<DomainBalanceVerdict> verdicts;
  std::vector<double> step_s;

  template <class Slowness>
  void run(long first, long last, Slowness&& slowness) {
    for (long step = first; step <= last; ++step) {
      in_force = published;
      const std::size_t n = ranks.size();
      const auto shares =
          in_force.empty()
              ? hardy::core::weighted_shares(batch, std::vector<double>(ranks.begin(), ranks.end()))
              : hardy::core::weighted_shares(batch, in_force);
      std::vector<double> own(n), samples(n);
      for (std::size_t d = 0; d < n; ++d) {
        samples[d] = static_cast<double>(shares[d]);
        own[d] = slowness(step, d) * (kFixed + samples[d] * kPerSample / ranks[d]);
      }
      step_s.push_back(*std::ranges::max_element(own));
      DomainBalanceVerdict verdict = balance.observe(step, ranks, own, samples, in_force);
      if (verdict.new_shares) published = *verdict.new_shares;
      verdicts.push_back(std::move(verdict));
    }
  }
  long first_step_with(bool (*what)(const DomainBalanceVerdict&), long first) const {
    for (std::size_t i = 0; i < verdicts.size(); ++i)
      if (what(verdicts[i])) return first + static_cast<long>(i);
    return -1;
  }
};

bool names_slow(const DomainBalanceVerdict& v) { return !v.became_slow.empty(); }
bool names_recovered(const DomainBalanceVerdict& v) { return !v.recovered.empty(); }
bool acts(const DomainBalanceVerdict& v) {
  return v.new_shares.has_value() || !v.became_slow.empty();
}

}  // namespace

TEST_CASE("domain balance: a domain at a third of the others' speed gets a third of a share") {
  ScriptedDomains job({2, 2, 2, 2}, 64);
  const auto slow_from = [](long from, long until) {
    return [=](long step, std::size_t d) {
      return d == 2 && step >= from && step < until ? 3.0 : 1.0;
    };
  };
  job.run(1, 200, slow_from(60, 1000));
  const long named = job.first_step_with(names_slow, 1);
  REQUIRE(named > 60);
  CHECK(named <= 60 + 15);  // the confirmation's 10 steps, and the window's turn
  const auto& slow = job.verdicts[static_cast<std::size_t>(named - 1)].became_slow.front();
  CHECK(slow.rank == 2);  // the member's index
  CHECK(slow.score == Approx(1.0 / 3).margin(0.05));
  REQUIRE(job.published.size() == 4);
  CHECK(std::accumulate(job.published.begin(), job.published.end(), 0.0) == 64);
  CHECK(job.published[2] < job.published[0] / 2);
  // The step after: within a few percent of what the measured speeds allow (the healthy step
  // is 0.2 + 1.6 = 1.8 s; three domains and a third of one carry the batch).
  const double healthy = job.step_s[10], slowed = job.step_s[static_cast<std::size_t>(named - 5)];
  const double after = job.step_s.back();
  CHECK(slowed == Approx(3 * healthy).epsilon(0.01));
  CHECK(after < 1.35 * healthy);
  // It recovers: named back and the split goes back to ranks.
  job.run(201, 400, [](long step, std::size_t d) { return d == 2 && step < 260 ? 3.0 : 1.0; });
  const long back = job.first_step_with(names_recovered, 1);
  CHECK(back > 260);
  CHECK(job.published.empty());
  CHECK(job.step_s.back() == Approx(healthy));
}

TEST_CASE("domain balance: noise of 10% and single spikes of 2x never act") {
  hardy::core::SplitMix64 noise(7);
  ScriptedDomains job({1, 1, 1, 1, 1, 1}, 48);
  job.run(1, 2000, [&](long step, std::size_t d) {
    const double spike = (step % 97 == 0 && d == static_cast<std::size_t>(step % 6)) ? 2.0 : 1.0;
    return spike * noise.uniform(0.95, 1.05);
  });
  CHECK(job.first_step_with(acts, 1) == -1);
}

TEST_CASE("domain balance: domains of unequal sizes are judged by their ranks' speed") {
  // Domain 1 has one rank where the others have two: it covers half their samples at their pace,
  // and is not slow for it.
  ScriptedDomains job({2, 1, 2}, 36);
  job.run(1, 300, [](long, std::size_t) { return 1.0; });
  CHECK(job.first_step_with(acts, 1) == -1);
  const double healthy = job.step_s.back();
  // Domain 0 at a third of its speed is named, alone, and its slice cut below half of its ranks'.
  job.run(301, 600, [](long, std::size_t d) { return d == 0 ? 3.0 : 1.0; });
  const long named = job.first_step_with(names_slow, 1);
  REQUIRE(named > 300);
  const auto& slow = job.verdicts[static_cast<std::size_t>(named - 1)].became_slow;
  REQUIRE(slow.size() == 1);
  CHECK(slow.front().rank == 0);
  CHECK(slow.front().score == Approx(1.0 / 3).margin(0.05));
  REQUIRE(job.published.size() == 3);
  CHECK(std::accumulate(job.published.begin(), job.published.end(), 0.0) == 36);
  CHECK(job.published[0] < 36.0 * 2 / 5 / 2);
  CHECK(job.published[1] < job.published[2]);  // one rank against two, both at full speed
  const double slowed = job.step_s[static_cast<std::size_t>(named - 5)];
  CHECK(slowed == Approx(3 * healthy).epsilon(0.05));
  CHECK(job.step_s.back() < 1.6 * healthy);  // 3 2/3 ranks' worth of speed carry 5 ranks' batch
  // Domain 2 shrinks to one rank: the shares planned for two would be too much for it. Back to
  // ranks, and the watch starts afresh (it names domain 0 again once measured).
  job.ranks = {2, 1, 1};
  job.run(601, 601, [](long, std::size_t d) { return d == 0 ? 3.0 : 1.0; });
  REQUIRE(job.verdicts.back().new_shares.has_value());
  CHECK(job.verdicts.back().new_shares->empty());
  CHECK(job.verdicts.back().reason == "ranks changed");
  job.run(602, 900, [](long, std::size_t d) { return d == 0 ? 3.0 : 1.0; });
  CHECK(std::count_if(job.verdicts.begin() + 601, job.verdicts.end(), names_slow) == 1);
  REQUIRE(job.published.size() == 3);
  CHECK(job.published[0] < job.published[1]);
}

TEST_CASE("domain balance: a domain not measured leaves the step out; off acts never") {
  DomainBalance balance({});
  const std::vector<int> ranks{1, 1};
  for (long step = 1; step <= 200; ++step) {
    const auto verdict =
        balance.observe(step, ranks, std::vector<double>{0.3, 0}, std::vector<double>{4, 4}, {});
    CHECK_FALSE(acts(verdict));
    CHECK(verdict.scores.empty());
  }
  ScriptedDomains off({1, 1, 1}, 30, {.mode = StragglerMode::off});
  off.run(1, 200, [](long, std::size_t d) { return d == 1 ? 3.0 : 1.0; });
  CHECK(off.first_step_with(acts, 1) == -1);
  // detect names the domain and leaves the split alone.
  ScriptedDomains detect({1, 1, 1}, 30, {.mode = StragglerMode::detect});
  detect.run(1, 200, [](long, std::size_t d) { return d == 1 ? 3.0 : 1.0; });
  CHECK(detect.first_step_with(names_slow, 1) > 0);
  CHECK(detect.published.empty());
}
