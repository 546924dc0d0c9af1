#include "hardy/resilience/straggler_watch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <queue>
#include <utility>

#include "hardy/core/data/sampler.hpp"
#include "hardy/core/support/enum_names.hpp"
#include "hardy/core/support/error.hpp"
#include "stragglers/window.hpp"

namespace hardy::resilience {

namespace {

constexpr std::string_view kModeNames[] = {"off", "detect", "rebalance", "evict"};
static_assert(std::size(kModeNames) == static_cast<std::size_t>(StragglerMode::evict) + 1);

using stragglers::median;

// The median of every value but one, for each one in turn, from one sort: O(n log n) for all of
// them where taking each median apart would be O(n^2) (4,560 ranks: 20 million steps a step).
class PeersMedian {
 public:
  explicit PeersMedian(const std::vector<double>& values) : sorted_(values.size()) {
    std::vector<std::size_t> order(values.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return values[a] < values[b]; });
    position_.resize(values.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      sorted_[i] = values[order[i]];
      position_[order[i]] = i;
    }
  }
  // The median of all values but values[r] (at least two values).
  double operator()(std::size_t r) const {
    const std::size_t others = sorted_.size() - 1;
    // The k-th smallest of the others: the k-th of all, or the next one where r came before it.
    const auto kth = [&](std::size_t k) { return sorted_[position_[r] <= k ? k + 1 : k]; };
    if (others % 2 == 1) return kth(others / 2);
    return (kth(others / 2 - 1) + kth(others / 2)) / 2;
  }

 private:
  std::vector<double> sorted_;
  std::vector<std::size_t> position_;  // of each value in sorted_
};

// The step time a split predicts: its slowest rank's samples x that rank's time per sample.
double predicted_step(std::span<const std::size_t> shares, std::span<const double> own) {
  double slowest = 0;
  for (std::size_t r = 0; r < shares.size(); ++r)
    slowest = std::max(slowest, static_cast<double>(shares[r]) * own[r]);
  return slowest;
}

// One sample each, then each next one to the rank whose time (samples x its time per sample)
// would grow least; ties to the lower rank. Returned as weights.
std::vector<double> balanced_shares(std::size_t samples, const std::vector<double>& per_sample) {
  using Entry = std::pair<double, std::size_t>;  // (time with one sample more, rank)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> next;
  std::vector<double> shares(per_sample.size(), 1.0);
  for (std::size_t r = 0; r < per_sample.size(); ++r) next.push({2 * per_sample[r], r});
  for (std::size_t given = per_sample.size(); given < samples; ++given) {
    const auto [time, r] = next.top();
    next.pop();
    shares[r] += 1;
    next.push({(shares[r] + 1) * per_sample[r], r});
  }
  return shares;
}

std::vector<std::size_t> shares_by(std::size_t samples, std::span<const double> weights,
                                   std::size_t world) {
  if (!weights.empty()) return core::weighted_shares(samples, weights);
  const std::vector<double> even(world, 1.0);
  return core::weighted_shares(samples, even);
}

}  // namespace

StragglerMode parse_straggler_mode(const std::string& name) {
  if (auto mode = core::value_named<StragglerMode>(kModeNames, name)) return *mode;
  throw InvalidArgument(
      fmt::format("--straggler '{}' is not one of {}", name, core::choice_list(kModeNames)));
}

std::string to_string(StragglerMode mode) { return std::string(core::name_of(kModeNames, mode)); }

StragglerWatch::StragglerWatch(StragglerThresholds thresholds) : thresholds_(thresholds) {
  if (!(thresholds_.slowdown > 0) || !std::isfinite(thresholds_.slowdown))
    throw InvalidArgument(
        fmt::format("--straggler-slowdown must be a positive fraction (0.1: 10% slower), not {}",
                    thresholds_.slowdown));
  if (thresholds_.window < 1)
    throw InvalidArgument(
        fmt::format("--straggler-window must be at least 1 step, not {}", thresholds_.window));
  if (!(thresholds_.window_s >= 0) || !(thresholds_.confirm_s >= 0) ||
      !std::isfinite(thresholds_.window_s) || !std::isfinite(thresholds_.confirm_s))
    throw InvalidArgument(fmt::format(
        "--straggler-window-s and --straggler-confirm-s must not be negative, not {} and {}",
        thresholds_.window_s, thresholds_.confirm_s));
  if (thresholds_.warmup < 0)
    throw InvalidArgument(
        fmt::format("--straggler-warmup must not be negative, not {}", thresholds_.warmup));
  if (!(thresholds_.evict_cost_s >= 0) || !std::isfinite(thresholds_.evict_cost_s))
    throw InvalidArgument(fmt::format("--straggler-evict-cost must be a positive number, not {}",
                                      thresholds_.evict_cost_s));
  if (thresholds_.confirm < 1)
    throw InvalidArgument(
        fmt::format("--straggler-confirm must be at least 1 step, not {}", thresholds_.confirm));
}

bool StragglerWatch::suspects() const {
  for (std::size_t r = 0; r < slow_.size(); ++r)
    if (slow_[r] || 2 * streak_[r] >= confirm_) return true;
  return false;
}

bool StragglerWatch::is_slow(int rank) const {
  return rank >= 0 && static_cast<std::size_t>(rank) < slow_.size() &&
         slow_[static_cast<std::size_t>(rank)];
}

void StragglerWatch::restart_window() {
  for (auto& times : per_sample_) times.clear();
  for (auto& times : per_step_) times.clear();
  window_steps_ = 0;
  imbalance_streak_ = 0;
}

StragglerVerdict StragglerWatch::observe(long step, std::span<const double> own_s,
                                         std::span<const double> own_samples,
                                         std::span<const double> current_weights,
                                         std::size_t samples, double step_s) {
  StragglerVerdict verdict;
  const std::size_t world = own_s.size();
  if (own_samples.size() != world)
    throw InvalidArgument(
        fmt::format("{} own times but {} sample counts", world, own_samples.size()));
  if (!enabled() || world < 2) return verdict;  // one rank has no peers to be slower than
  if (per_sample_.size() != world) {
    per_sample_.assign(world, {});
    per_step_.assign(world, {});
    window_steps_ = 0;
    slow_.assign(world, false);
    streak_.assign(world, 0);
    since_.assign(world, 0);
    named_as_.assign(world, {});
    own_best_.assign(world, 0);
    imbalance_streak_ = 0;
    lost_s_ = 0;
    observed_ = 0;
    pace_s_ = 0;
    step_times_.clear();
  }
  if (++observed_ <= thresholds_.warmup) return verdict;
  // Ranks whose own work was not measured this step (NaN: the header says why) leave their
  // windows and their streaks as they were.
  std::vector<bool> measured(world);
  double slowest_measured = 0;
  for (std::size_t r = 0; r < world; ++r) {
    measured[r] = !std::isnan(own_s[r]);
    if (measured[r]) slowest_measured = std::max(slowest_measured, own_s[r]);
  }
  if (std::find(measured.begin(), measured.end(), true) == measured.end()) return verdict;
  // The window and the confirmation in steps: at least the steps given, and at least the
  // seconds given, at the job's pace: the median of the last steps' durations where the caller
  // gives them, else the slowest rank's median own work a step (which each step waits for; this
  // step's alone until there is a window). At a few milliseconds a step a scheduler's time slice
  // alone doubles some steps, so neither the pace nor the counts may follow single steps.
  if (step_s > 0) {
    step_times_.push_back(step_s);
    if (step_times_.size() > static_cast<std::size_t>(thresholds_.window))
      step_times_.erase(step_times_.begin());
    pace_s_ = median(step_times_);
  } else if (pace_s_ <= 0) {
    pace_s_ = slowest_measured;
  }
  const auto [window, confirm] = stragglers::step_counts(thresholds_, pace_s_);
  confirm_ = confirm;
  const auto keep = [](std::vector<double>& times, double value) {
    times.push_back(value);
    if (times.size() > static_cast<std::size_t>(stragglers::kMaxWindow)) times.erase(times.begin());
  };
  for (std::size_t r = 0; r < world; ++r) {
    if (!measured[r]) continue;
    keep(per_sample_[r], own_s[r] / std::max(1.0, own_samples[r]));
    keep(per_step_[r], own_s[r]);
  }
  if (++window_steps_ < window) return verdict;
  // An init-capture: Clang before 16 cannot capture a structured binding by name.
  const auto recent = [steps = window](const std::vector<double>& times) {
    return median(std::vector<double>(
        times.end() - static_cast<std::ptrdiff_t>(std::min(steps, times.size())), times.end()));
  };

  std::vector<double> own(world), own_step(world), measured_own;
  for (std::size_t r = 0; r < world; ++r) {
    if (per_sample_[r].empty()) continue;
    own[r] = recent(per_sample_[r]);
    own_step[r] = recent(per_step_[r]);
    measured_own.push_back(own[r]);
  }
  // A rank not measured once in this window stands at its peers' median: neither slow nor fast.
  const double typical_own = median(measured_own);
  for (std::size_t r = 0; r < world; ++r)
    if (per_sample_[r].empty()) {
      own[r] = typical_own;
      own_step[r] = typical_own * std::max(1.0, own_samples[r]);
    }
  if (step_s <= 0) pace_s_ = *std::max_element(own_step.begin(), own_step.end());
  const double flag_at = 1 + thresholds_.slowdown, clear_below = 1 + thresholds_.slowdown / 2;
  // A rank slower than its peers matters only as far as it lengthens the step: one whose own
  // work exceeds theirs by less than a quarter of the slowdown's share of the job's pace (3.75%
  // of a step at the default 15%) is not flagged, however slow per sample. Where a step's own
  // work is a millisecond or two and the step itself much longer (a domain waiting for a slower
  // domain), fixed costs (a domain leader's duties among them) made ranks 1.5-1.7 times their peers
  // per sample, named and rebalanced for nothing (the soak's staged domains, 2026-11-29).
  const double material_s = thresholds_.slowdown / 4 * pace_s_;
  verdict.scores.resize(world);
  bool slow_set_changed = false;
  for (std::size_t r = 0; r < world; ++r)
    if (current_weights.empty() && !slow_[r] && !per_sample_[r].empty() && own[r] > 0 &&
        (own_best_[r] <= 0 || own[r] < own_best_[r]))
      own_best_[r] = own[r];
  const PeersMedian peers_of_own(own), peers_of_step(own_step);
  for (std::size_t r = 0; r < world; ++r) {
    const double peers_s = peers_of_own(r);
    const double slowdown = peers_s > 0 ? own[r] / peers_s : 1.0;
    verdict.scores[r] = own[r] > 0 ? peers_s / own[r] : 1.0;
    if (!measured[r]) continue;
    // A streak counts from its first step (flagged steps of a healthy rank, steps back at speed
    // of a slow one); a step against it shortens it by one. True once it is long enough.
    const auto streak_holds = [&](bool counts) {
      if (counts) {
        if (streak_[r]++ == 0) since_[r] = step;
      } else {
        streak_[r] = std::max(0L, streak_[r] - 1);
      }
      // Only a step that counts completes one: the confirmation's length follows the pace, and
      // a streak left from slower steps must not name a rank on a step that does not count.
      return counts && streak_[r] >= confirm_;
    };
    const bool turns =
        slow_[r]
            ? streak_holds(slowdown < clear_below || 2 * own_step[r] < peers_of_step(r))
            : streak_holds(slowdown >= flag_at && own_step[r] * (1 - 1 / slowdown) >= material_s);
    if (!turns) continue;
    streak_[r] = 0;
    slow_[r] = !slow_[r];
    slow_set_changed = true;
    const RankSlowness figures{.rank = static_cast<int>(r),
                               .score = verdict.scores[r],
                               .own_s = own[r],
                               .peers_s = peers_s,
                               .since_step = since_[r],
                               .own_best_s = own_best_[r]};
    if (slow_[r]) {
      named_as_[r] = figures;
      verdict.became_slow.push_back(figures);
    } else {
      verdict.recovered.push_back(figures);
    }
  }
  if (thresholds_.mode == StragglerMode::detect) return verdict;

  // The shares that would balance the step, while some rank is slow: whole samples, one each
  // first, then each next sample to the rank that would finish it soonest (which minimizes the
  // slowest rank's time), slow ranks at their own time per sample and the others at their
  // median, so that noise among healthy ranks never splits them. Given as whole-number weights
  // (weighted_shares returns them as they are). None slow: evenly.
  std::vector<double> healthy;
  for (std::size_t r = 0; r < world; ++r)
    if (!slow_[r]) healthy.push_back(own[r]);
  const double typical = healthy.empty() ? median(own) : median(healthy);
  std::vector<double> cost(world);  // the time per sample each split is predicted with
  for (std::size_t r = 0; r < world; ++r) cost[r] = slow_[r] ? own[r] : typical;
  std::vector<double> target;
  if (healthy.size() < world && samples >= world) target = balanced_shares(samples, cost);
  // The common case, a healthy job sharing evenly, decides nothing more.
  if (target.empty() && current_weights.empty()) {
    lost_s_ = 0;
    imbalance_streak_ = 0;
    return verdict;
  }
  const auto current = shares_by(samples, current_weights, world);
  const auto proposed = shares_by(samples, target, world);
  // Ski rental: the time slow ranks cost so far, against what evicting one would cost.
  if (healthy.size() < world) {
    const std::vector<double> all_healthy(world, typical);
    lost_s_ += std::max(0.0, predicted_step(current, cost) -
                                 predicted_step(shares_by(samples, {}, world), all_healthy));
  } else {
    lost_s_ = 0;
  }
  if (thresholds_.mode == StragglerMode::evict && evict_cost_s_ > 0 && !evicted_ &&
      healthy.size() < world && lost_s_ >= evict_cost_s_) {
    // Among the ranks that slowed down (named at (1 + slowdown) x their own best before), the
    // slowest; the others are kept (the header says why).
    std::size_t slowest = world;
    for (std::size_t r = 0; r < world; ++r) {
      const RankSlowness& named = named_as_[r];
      const bool slowed_down =
          named.own_best_s > 0 && named.own_s >= (1 + thresholds_.slowdown) * named.own_best_s;
      if (slow_[r] && slowed_down &&
          (slowest == world || verdict.scores[r] < verdict.scores[slowest]))
        slowest = r;
    }
    // The figures it was named slow with: its share cut since, its time per sample now carries
    // more of each step's fixed costs.
    if (slowest < world) {
      verdict.evict = named_as_[slowest];
      verdict.lost_s = lost_s_;
      verdict.evict_cost_s = evict_cost_s_;
      evicted_ = true;
    }
  }
  if (proposed == current) {
    imbalance_streak_ = 0;
    return verdict;
  }
  const double gain = predicted_step(current, cost) / predicted_step(proposed, cost);
  // A rank turned slow or recovered: act as soon as the new shares pay (a recovered rank goes
  // back to its even share whatever it gains). Otherwise re-plan only after a lasting
  // imbalance under the shares in force.
  bool act = false;
  if (slow_set_changed) {
    act = target.empty() || gain >= 1 + thresholds_.slowdown / 2;
    verdict.reason = target.empty() ? "recovered" : "straggler";
  } else {
    imbalance_streak_ = gain >= 1 + thresholds_.slowdown / 2 ? imbalance_streak_ + 1 : 0;
    act = imbalance_streak_ >= confirm_;
    verdict.reason = "replanned";
  }
  if (act) {
    verdict.new_weights = std::move(target);
    verdict.predicted_gain = gain;
    restart_window();
  } else {
    verdict.reason.clear();
  }
  return verdict;
}

}  // namespace hardy::resilience
