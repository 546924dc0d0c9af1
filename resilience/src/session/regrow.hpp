#pragma once
// The session's side of the regrow policy (regrow_watch.hpp). Every rank times its own commits
// and keeps its own watch, so that whichever rank leads after a shrink knows the job's healthy
// step; the lead's decision alone counts. While the job is shrunk it rides along with the step's
// loss sum (one slot, the lead's 1 or 0, zero on every other rank: no collective of its own, and
// nothing added while the job is whole), so that every rank stops after the same step.
#include <filesystem>
#include <optional>
#include <vector>

#include "hardy/resilience/regrow_watch.hpp"
#include "session/membership.hpp"

namespace hardy::resilience {

class Regrow {
 public:
  // `cost_s` from --regrow: negative for off, 0 for auto (twice this launch's time from its
  // start to its first committed step: it starts again, and reads the state back), else the
  // seconds a relaunch costs. `relaunched`: a supervisor (hardy run) relaunches the job after a
  // planned stop, with a spare for a node the failure may have taken; else nothing is ever due.
  // `last_step`: the job's last step, against which a measured loss is projected (0: unknown).
  // `earlier_steps`: the run's metrics.jsonl, whose last steps logged at `logged_world` ranks
  // (the launch's full world; a fault domain's times the domains: its lines are the whole
  // job's) give the watch the healthy step of the launch before (read by the lead, shared with
  // every rank: a collective); empty for none.
  Regrow(double cost_s, const Membership& membership, bool relaunched, long last_step,
         const std::filesystem::path& earlier_steps = {}, int logged_world = 0);

  // This launch took `launch_s` from its start to its first committed step (called once).
  void first_step_committed(double launch_s);
  // A step committed `step_s` seconds after the one before (or after the recovery before it).
  void step_committed(long step, double step_s);
  // Appends this rank's slot to `sums` (a vector about to be summed over the communicator)
  // while the job is shrunk; nothing otherwise (the same on every rank: the world's size is).
  void append_slot(std::vector<double>& sums) const;
  // After the sum: takes the slot back off `sums` (leaving `kept` values).
  void decide(std::vector<double>& sums, std::size_t kept);
  // Once the lead's watch found a relaunch paid for: its figures (on the lead; the other ranks
  // hold their own, which nothing logs).
  const std::optional<RegrowVerdict>& due() const { return due_; }

 private:
  bool active() const;

  const Membership& membership_;
  double cost_s_;
  bool relaunched_;
  RegrowWatch watch_;
  std::optional<RegrowVerdict> pending_;  // this rank's own verdict, sent with the next sums
  std::optional<RegrowVerdict> due_;
};

}  // namespace hardy::resilience
