#include "session/regrow.hpp"

namespace hardy::resilience {

Regrow::Regrow(double cost_s, const Membership& membership, bool relaunched, long last_step)
    : membership_(membership),
      cost_s_(cost_s),
      relaunched_(relaunched),
      watch_(membership.original_size(), last_step) {}

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
