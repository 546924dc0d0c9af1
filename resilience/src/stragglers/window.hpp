#pragma once
// What the slow-rank and the slow-link watches share: medians, and their window and confirmation
// in steps at the job's pace (at least the steps given, and at least the seconds given, capped).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "hardy/resilience/straggler_watch.hpp"

namespace hardy::resilience::stragglers {

inline constexpr long kMaxWindow = 256, kMaxConfirm = 4096;

inline double median(std::vector<double> values) {
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  if (values.size() % 2 == 1) return *middle;
  return (*middle + *std::max_element(values.begin(), middle)) / 2;
}

struct StepCounts {
  std::size_t window;
  long confirm;
};

// The thresholds' window and confirmation in steps, at `pace_s` seconds a step.
inline StepCounts step_counts(const StragglerThresholds& thresholds, double pace_s) {
  const double pace = std::max(pace_s, 1e-6);
  const auto steps_for = [pace](double seconds, long at_least, long at_most) {
    return std::clamp(static_cast<long>(std::ceil(seconds / pace)), at_least, at_most);
  };
  return {static_cast<std::size_t>(steps_for(thresholds.window_s, thresholds.window,
                                             std::max(thresholds.window, kMaxWindow))),
          steps_for(thresholds.confirm_s, thresholds.confirm,
                    std::max(thresholds.confirm, kMaxConfirm))};
}

}  // namespace hardy::resilience::stragglers
