#include "hardy/resilience/stall_watch.hpp"

#include <algorithm>
#include <vector>

namespace hardy::resilience {

StallWatch::StallWatch(double min_quiet_s) : min_quiet_s_(min_quiet_s) {}

void StallWatch::saw(long step, double committed_unix) {
  if (last_step_ && step == *last_step_ && committed_unix == last_commit_unix_) return;
  if (last_step_ && step > *last_step_ && committed_unix > last_commit_unix_) {
    intervals_.push_back((committed_unix - last_commit_unix_) /
                         static_cast<double>(step - *last_step_));
    if (intervals_.size() > kIntervals) intervals_.pop_front();
  } else if (last_step_) {
    intervals_.clear();  // restored to an earlier step: its timings start again
  }
  last_step_ = step;
  last_commit_unix_ = committed_unix;
  probed_unix_ = 0;
  wait_multiple_ = 1;
}

std::optional<double> StallWatch::threshold_s() const {
  if (min_quiet_s_ <= 0 || intervals_.size() < kMinIntervals) return std::nullopt;
  std::vector<double> sorted(intervals_.begin(), intervals_.end());
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
  return std::max(min_quiet_s_, kQuietSteps * sorted[sorted.size() / 2]);
}

bool StallWatch::due(double now) const {
  const auto threshold = threshold_s();
  if (!threshold) return false;
  const double since = std::max(last_commit_unix_, probed_unix_);
  return now - since >= std::min(kMaxWaitS, *threshold * wait_multiple_);
}

double StallWatch::quiet_s(double now) const { return last_step_ ? now - last_commit_unix_ : 0; }

void StallWatch::all_answered(double now) {
  probed_unix_ = now;
  wait_multiple_ *= 2;
}

}  // namespace hardy::resilience
