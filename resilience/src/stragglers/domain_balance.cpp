#include "hardy/resilience/domain_balance.hpp"

#include <algorithm>
#include <numeric>

namespace hardy::resilience {

namespace {

StragglerThresholds rebalancing_at_most(StragglerThresholds thresholds) {
  if (thresholds.mode == StragglerMode::evict) thresholds.mode = StragglerMode::rebalance;
  return thresholds;
}

}  // namespace

DomainBalance::DomainBalance(const StragglerThresholds& thresholds)
    : watch_(rebalancing_at_most(thresholds)) {}

void DomainBalance::reset() {
  watch_ = StragglerWatch(watch_.thresholds());
  last_ranks_.clear();
}

DomainBalanceVerdict DomainBalance::observe(long step, std::span<const int> ranks,
                                            std::span<const double> own_s,
                                            std::span<const double> own_samples,
                                            std::span<const double> shares_in_force,
                                            double step_s) {
  DomainBalanceVerdict verdict;
  if (!enabled() || ranks.size() < 2) return verdict;
  if (!std::ranges::equal(ranks, last_ranks_)) {
    reset();
    last_ranks_.assign(ranks.begin(), ranks.end());
  }
  if (std::ranges::any_of(ranks, [&](int r) { return r != ranks.front(); })) {
    if (!shares_in_force.empty()) {
      verdict.new_shares = std::vector<double>{};
      verdict.reason = "unequal domains";
    }
    return verdict;
  }
  const auto measured = [](double v) { return v > 0; };
  if (own_s.size() != ranks.size() || own_samples.size() != ranks.size() ||
      !std::ranges::all_of(own_s, measured) || !std::ranges::all_of(own_samples, measured))
    return verdict;
  const double samples = std::accumulate(own_samples.begin(), own_samples.end(), 0.0);
  const StragglerVerdict seen = watch_.observe(step, own_s, own_samples, shares_in_force,
                                               static_cast<std::size_t>(samples + 0.5), step_s);
  verdict.scores = seen.scores;
  verdict.became_slow = seen.became_slow;
  verdict.recovered = seen.recovered;
  verdict.new_shares = seen.new_weights;
  verdict.reason = seen.reason;
  verdict.predicted_gain = seen.predicted_gain;
  return verdict;
}

}  // namespace hardy::resilience
