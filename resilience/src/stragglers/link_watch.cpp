#include "hardy/resilience/link_watch.hpp"

#include <algorithm>

#include "stragglers/window.hpp"

namespace hardy::resilience {

namespace {

using stragglers::kMaxWindow;
using stragglers::median;

void keep_last(std::vector<double>& values, double value, std::size_t most) {
  values.push_back(value);
  if (values.size() > most) values.erase(values.begin());
}

}  // namespace

LinkWatch::LinkWatch(StragglerThresholds thresholds) : thresholds_(thresholds) {
  [[maybe_unused]] const StragglerWatch same_ranges(thresholds_);  // its checks, its messages
}

LinkVerdict LinkWatch::observe(long step, double exchange_s, bool compute_suspect, double step_s) {
  LinkVerdict verdict;
  if (!enabled() || ++observed_ <= thresholds_.warmup) return verdict;
  if (step_s > 0) keep_last(step_times_, step_s, static_cast<std::size_t>(thresholds_.window));
  // The pace as StragglerWatch's: the median step, or where steps are not timed the exchange's
  // own median (the rise is then measured against the exchange itself).
  const double pace = std::max(step_times_.empty() ? median_s_ : median(step_times_), 1e-6);
  const auto [window, confirm] = stragglers::step_counts(thresholds_, pace);
  keep_last(exchange_times_, exchange_s, static_cast<std::size_t>(kMaxWindow));
  if (exchange_times_.size() < window) return verdict;
  median_s_ = median(std::vector<double>(
      exchange_times_.end() - static_cast<std::ptrdiff_t>(window), exchange_times_.end()));
  if (probing_) return verdict;  // the probe's answer first
  if (baseline_s_ <= 0 || (!slow_ && median_s_ < baseline_s_)) baseline_s_ = median_s_;
  const double excess = median_s_ - baseline_s_;

  if (slow_) {
    lost_s_ += std::max(0.0, excess);
    const bool back = excess < thresholds_.slowdown / 2 * pace;
    streak_ = back ? streak_ + 1 : std::max(0L, streak_ - 1);
    if (back && streak_ >= confirm) {
      verdict.recovered = slow_;
      slow_.reset();
      streak_ = 0;
      lost_s_ = 0;
      return verdict;
    }
    if (thresholds_.mode == StragglerMode::evict && evict_cost_s_ > 0 && !evicted_ &&
        lost_s_ >= evict_cost_s_) {
      verdict.evict = slow_;
      verdict.lost_s = lost_s_;
      verdict.evict_cost_s = evict_cost_s_;
      evicted_ = true;
    }
    return verdict;
  }
  if (compute_suspect) {  // every rank waits for a slow one inside the exchange: not a link
    streak_ = 0;
    return verdict;
  }
  const bool flagged = excess >= thresholds_.slowdown * pace;
  if (flagged) {
    if (streak_++ == 0) since_ = step;
  } else {
    streak_ = std::max(0L, streak_ - 1);
  }
  if (flagged && streak_ >= confirm) {
    verdict.probe = true;
    probing_ = true;
    streak_ = 0;
  }
  return verdict;
}

std::optional<LinkSlowness> LinkWatch::probed(std::span<const comm::LinkPair> pairs) {
  probing_ = false;
  std::vector<LinkSlowness> named;
  const auto nodes = static_cast<int>(pairs.size());  // one ring edge per node
  for (int node = 0; node < nodes && nodes >= 3; ++node) {
    std::vector<double> own, others;
    for (const comm::LinkPair& pair : pairs)
      (pair.node_a == node || pair.node_b == node ? own : others).push_back(pair.seconds);
    if (own.size() != 2 || others.empty()) continue;
    const double typical = median(others);
    if (std::min(own[0], own[1]) > 0 && std::min(own[0], own[1]) >= kSlowPair * typical)
      named.push_back({.node = node,
                       .pair_s = std::max(own[0], own[1]),
                       .peers_pair_s = typical,
                       .exchange_s = median_s_,
                       .baseline_s = baseline_s_,
                       .since_step = since_});
  }
  if (named.size() != 1) {
    // Nobody, or several (the whole network, a switch): no one node to leave out. The exchange
    // is what it is now; only a further rise probes again.
    baseline_s_ = median_s_;
    return std::nullopt;
  }
  slow_ = named.front();
  lost_s_ = 0;
  streak_ = 0;
  return slow_;
}

}  // namespace hardy::resilience
