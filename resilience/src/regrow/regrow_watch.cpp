#include "hardy/resilience/regrow_watch.hpp"

#include <algorithm>
#include <vector>

namespace hardy::resilience {

namespace {

double median(const std::deque<double>& values) {
  std::vector<double> sorted(values.begin(), values.end());
  const auto middle = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
  std::nth_element(sorted.begin(), middle, sorted.end());
  return *middle;
}

}  // namespace

RegrowWatch::RegrowWatch(int full_world_size, long last_step)
    : full_world_(full_world_size), last_step_(last_step) {}

std::optional<RegrowVerdict> RegrowWatch::observe(long step, int world_size, double step_s) {
  if (world_size >= full_world_) {
    // At full strength (again, after a relaunch the watch is made anew): a healthy step.
    if (step_s > 0 && ++whole_steps_ > kWarmup) {
      healthy_.push_back(step_s);
      if (healthy_.size() > kWindow) healthy_.pop_front();
    }
    return std::nullopt;
  }
  if (shrunk_since_ == 0) {
    shrunk_since_ = step;
    // Frozen at the shrink: the steps after it say nothing of a healthy one.
    if (healthy_.size() >= kMinHealthy) {
      healthy_step_s_ = median(healthy_);
    } else if (healthy_before_s_) {
      healthy_step_s_ = healthy_before_s_;
      healthy_from_before_ = true;
    }
  }
  if (step_s <= 0 || decided_) return std::nullopt;
  lost_s_ += healthy_step_s_ ? step_s - *healthy_step_s_
                             : step_s * (1.0 - static_cast<double>(world_size) / full_world_);
  ++shrunk_steps_;
  if (healthy_step_s_ && shrunk_losses_.size() < kMinShrunk)
    shrunk_losses_.push_back(step_s - *healthy_step_s_);
  if (cost_s_ <= 0) return std::nullopt;
  RegrowVerdict verdict{.step = step,
                        .shrunk_since_step = shrunk_since_,
                        .world_size = world_size,
                        .full_world_size = full_world_,
                        .lost_s = lost_s_,
                        .cost_s = cost_s_,
                        .healthy_step_s = healthy_step_s_,
                        .healthy_from_before = healthy_from_before_};
  if (lost_s_ < cost_s_) {
    // Measured only: an estimate from the world sizes says nothing of what the steps left lose.
    const long left = last_step_ - step;
    if (!healthy_step_s_ || left <= 0) return std::nullopt;
    const bool plain = shrunk_losses_.size() >= kMinShrunkClear &&
                       median(shrunk_losses_) >= kClearLossShare * *healthy_step_s_;
    if (shrunk_steps_ < static_cast<long>(kMinShrunk) && !plain) return std::nullopt;
    const double per_step = lost_s_ / static_cast<double>(shrunk_steps_);
    const double projected = per_step * static_cast<double>(left);
    if (per_step < kMinLossShare * *healthy_step_s_ || projected < 2 * cost_s_) return std::nullopt;
    verdict.projected_s = projected;
    verdict.steps_left = left;
  }
  decided_ = true;
  return verdict;
}

}  // namespace hardy::resilience
