#include "session/regrow.hpp"

#include <algorithm>
#include <vector>

#include "hardy/core/support/event_log.hpp"

namespace hardy::resilience {

namespace {

// The median duration of the last RegrowWatch::kWindow steps that `metrics` (a run's
// metrics.jsonl) logged at `full_world` ranks, from its last 256 KiB; nullopt for fewer than
// RegrowWatch::kMinHealthy.
std::optional<double> healthy_step_logged(const std::filesystem::path& metrics, int full_world) {
  std::vector<double> steps;
  for (const auto& record : core::last_json_records(metrics, 4 * RegrowWatch::kWindow, 1 << 18))
    if (core::read_field<long>(record, "world_size") == full_world)
      if (const auto step_s = core::read_field<double>(record, "step_s"); step_s && *step_s > 0)
        steps.push_back(*step_s);
  if (steps.size() > RegrowWatch::kWindow)
    steps.erase(steps.begin(), steps.end() - static_cast<std::ptrdiff_t>(RegrowWatch::kWindow));
  if (steps.size() < RegrowWatch::kMinHealthy) return std::nullopt;
  const auto middle = steps.begin() + static_cast<std::ptrdiff_t>(steps.size() / 2);
  std::nth_element(steps.begin(), middle, steps.end());
  return *middle;
}

}  // namespace

Regrow::Regrow(double cost_s, const Membership& membership, bool relaunched, long last_step,
               const std::filesystem::path& earlier_steps, int logged_world)
    : membership_(membership),
      cost_s_(cost_s),
      relaunched_(relaunched),
      watch_(membership.original_size(), last_step) {
  if (!relaunched_ || cost_s_ < 0 || earlier_steps.empty()) return;
  std::vector<double> healthy{0.0};
  if (membership.lead())
    healthy[0] = healthy_step_logged(earlier_steps, logged_world).value_or(0.0);
  membership.comm().allreduce_sum(healthy);  // the lead's, on every rank
  if (healthy[0] > 0) watch_.healthy_before(healthy[0]);
}

bool Regrow::active() const {
  return relaunched_ && cost_s_ >= 0 && membership_.size() < membership_.original_size();
}

void Regrow::first_step_committed(double launch_s) {
  if (cost_s_ < 0 || !relaunched_) return;
  watch_.allow(cost_s_ > 0 ? cost_s_ : 2 * launch_s);
}

void Regrow::step_committed(long step, double step_s) {
  if (auto verdict = watch_.observe(step, membership_.size(), step_s))
    pending_ = std::move(verdict);
}

void Regrow::append_slot(std::vector<double>& sums) const {
  if (!active()) return;
  sums.push_back(membership_.lead() && pending_ ? 1.0 : 0.0);
}

void Regrow::decide(std::vector<double>& sums, std::size_t kept) {
  if (!active() || sums.size() <= kept) return;
  const bool lead_says_so = sums[kept] > 0;
  sums.resize(kept);
  if (!lead_says_so || due_) return;
  // The other ranks' own watches may not have got there yet: they stop on the lead's word.
  RegrowVerdict unlogged;
  unlogged.world_size = membership_.size();
  unlogged.full_world_size = membership_.original_size();
  due_ = pending_.value_or(unlogged);
}

}  // namespace hardy::resilience
