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
    const bool resized = !last_ranks_.empty();
    reset();
    last_ranks_.assign(ranks.begin(), ranks.end());
    // A domain shrank inside (or came back whole): shares planned for the old sizes would hand a
    // smaller domain a larger one's slice. Back to ranks; the watch measures afresh.
    if (resized && !shares_in_force.empty()) {
      verdict.new_shares = std::vector<double>{};
      verdict.reason = "ranks changed";
      return verdict;
    }
  }
  const auto measured = [](double v) { return v > 0; };
  if (own_s.size() != ranks.size() || own_samples.size() != ranks.size() ||
      !std::ranges::all_of(own_s, measured) || !std::ranges::all_of(own_samples, measured) ||
      !std::ranges::all_of(ranks, [](int r) { return r > 0; }))
    return verdict;
  // Where the domains' sizes differ, the watch sees each domain as its live ranks, each with the
  // domain's seconds over its share of the domain's samples: a rank's time per sample, which
  // domains of any size share as a measure (a domain of one rank among domains of two is not slow
  // for covering half their samples), and shares planned per rank that add up to each domain's
  // slice. Where they are equal each domain is one member, its shares whole samples per domain.
  const bool equal = std::ranges::all_of(ranks, [&](int r) { return r == ranks.front(); });
  std::vector<double> rank_s, rank_samples, rank_shares;
  std::vector<std::size_t> member_of;
  for (std::size_t d = 0; d < ranks.size(); ++d) {
    const int members = equal ? 1 : ranks[d];
    for (int r = 0; r < members; ++r) {
      rank_s.push_back(own_s[d]);
      rank_samples.push_back(own_samples[d] / members);
      if (!shares_in_force.empty()) rank_shares.push_back(shares_in_force[d] / members);
      member_of.push_back(d);
    }
  }
  const double samples = std::accumulate(own_samples.begin(), own_samples.end(), 0.0);
  const StragglerVerdict seen = watch_.observe(step, rank_s, rank_samples, rank_shares,
                                               static_cast<std::size_t>(samples + 0.5), step_s);
  // Back to domains: a domain's ranks are measured alike, so its first one speaks for it.
  const auto per_member = [&](const std::vector<RankSlowness>& ranks_named) {
    std::vector<RankSlowness> members;
    for (RankSlowness named : ranks_named) {
      named.rank = static_cast<int>(member_of.at(static_cast<std::size_t>(named.rank)));
      if (equal) {  // seconds a sample per rank, whatever the sizes
        named.own_s *= ranks.front();
        named.peers_s *= ranks.front();
        named.own_best_s *= ranks.front();
      }
      if (std::ranges::none_of(members, [&](const auto& m) { return m.rank == named.rank; }))
        members.push_back(named);
    }
    return members;
  };
  if (!seen.scores.empty()) {
    verdict.scores.assign(ranks.size(), 1.0);
    for (std::size_t v = seen.scores.size(); v-- > 0;)
      verdict.scores[member_of[v]] = seen.scores[v];
  }
  verdict.became_slow = per_member(seen.became_slow);
  verdict.recovered = per_member(seen.recovered);
  if (seen.new_weights) {
    verdict.new_shares = std::vector<double>{};
    if (!seen.new_weights->empty()) {
      verdict.new_shares->assign(ranks.size(), 0.0);
      for (std::size_t v = 0; v < member_of.size(); ++v)
        (*verdict.new_shares)[member_of[v]] += (*seen.new_weights)[v];
    }
  }
  verdict.reason = seen.reason;
  verdict.predicted_gain = seen.predicted_gain;
  return verdict;
}

}  // namespace hardy::resilience
