#include "hardy/resilience/divergence_watch.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "hardy/core/support/error.hpp"

namespace hardy::resilience {

DivergenceWatch::DivergenceWatch(DivergenceThresholds thresholds) : thresholds_(thresholds) {
  if (!(thresholds_.factor == 0 || thresholds_.factor > 1) || std::isinf(thresholds_.factor))
    throw InvalidArgument(
        fmt::format("--divergence-factor must be 0 (off) or a finite number above 1, got {}",
                    thresholds_.factor));
  if (thresholds_.window < 1)
    throw InvalidArgument(
        fmt::format("--divergence-window must be at least 1 step, got {}", thresholds_.window));
  if (thresholds_.early_steps < 1)
    throw InvalidArgument(fmt::format(
        "the divergence watch's early steps must be at least 1, got {}", thresholds_.early_steps));
}

std::optional<DivergenceReport> DivergenceWatch::observe(long step, double loss) {
  if (!enabled() || reported_) return std::nullopt;
  // A step trained again after a recovery replaces what was seen from it on.
  while (!above_.empty() && above_.back().first >= step) above_.pop_back();
  if (!early_level_) {
    while (!early_.empty() && early_.back().first >= step) early_.pop_back();
    if (std::isfinite(loss)) early_.emplace_back(step, loss);
    if (static_cast<long>(early_.size()) < thresholds_.early_steps) return std::nullopt;
    double sum = 0;
    for (const auto& [s, l] : early_) sum += l;
    early_level_ = sum / static_cast<double>(early_.size());
    return std::nullopt;
  }
  const bool above = !std::isfinite(loss) || loss > thresholds_.factor * *early_level_;
  if (!above) {
    above_.clear();
    return std::nullopt;
  }
  above_.emplace_back(step, loss);
  if (static_cast<long>(above_.size()) < thresholds_.window) return std::nullopt;
  DivergenceReport report{.step = step,
                          .since_step = above_.front().first,
                          .early_loss = *early_level_,
                          .window_mean = std::numeric_limits<double>::quiet_NaN(),
                          .loss = loss,
                          .non_finite = 0};
  double sum = 0;
  long finite = 0;
  for (const auto& [s, l] : above_) {
    if (std::isfinite(l)) {
      sum += l;
      ++finite;
    } else {
      ++report.non_finite;
    }
  }
  if (finite > 0) report.window_mean = sum / static_cast<double>(finite);
  reported_ = true;
  return report;
}

}  // namespace hardy::resilience
