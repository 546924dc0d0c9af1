#pragma once
// When a job that shrank inside (a rank died and the survivors went on) should stop and be
// relaunched at its full strength: a pure decision over the job's step times, with no clock, no
// communicator and no files, so that it is unit-tested with scripted timings. The session feeds it
// each committed step's duration and world size and acts on what it returns (docs/resilience.md,
// "A shrunk job regrows").
//
// Why: at a constant global batch a job that lost one rank of eight runs each step about 1/7
// slower until something relaunches it, and under `hardy run` nothing does until it fails whole
// (--max-failures), while the lost rank's node (a process died, not the node) or a spare sits
// idle. The rule is ski rental, as --straggler evict's:
//   healthy step = the median of the last kWindow steps' durations at the launch's full world,
//                  past its first kWarmup (a launch's first steps read cold files and caches:
//                  on the emulated cluster its first 30 ran 10% slower, enough to hide most of
//                  a shrink to 7 of 8 ranks; on an eighth of a CPU per node its first ~50 ran at
//                  100-110 ms against 90-95 after, and a fault domain shrunk at its 58th step
//                  took them for healthy and never regrew, 2026-11-30), at least kMinHealthy of
//                  them;
//   lost         = from the first step after the shrink, the sum over the steps of (step - healthy
//                  step): what running shrunk has cost, measured. Where the job shrank before it
//                  had a healthy step (a failure in its first steps), the healthy step of its
//                  earlier launch at the same full world stands in (healthy_before(): measured
//                  the same way, on other nodes perhaps; a rank killed 2 s after a relaunch on
//                  the goodput bench ran shrunk 32 s on the estimate below, 2026-11-30), and
//                  without one each step counts step x (1 - world / full world) instead: its
//                  loss if the step's time were all work shared out among the ranks
//                  (estimated; the event says which);
//   due          = lost >= the measured cost of a relaunch (allow()), once;
//   or sooner    = where the job's last step is known and the loss was measured: after
//                  kMinShrunk steps shrunk, each of them kMinLossShare of the healthy step slower
//                  or more on average, and that loss over the steps left at least twice the
//                  relaunch's cost. Ski rental waits until the loss has paid for the relaunch
//                  because it does not know how long the job would stay shrunk; a job knows its
//                  steps left, and a rank lost early in a long run would otherwise pay about twice
//                  a relaunch (on the goodput bench's 8 nodes a rank kill cost 8.3-14.4 s: 22-32 s
//                  shrunk at 0.17x slower, then the relaunch, 2026-11-30). Twice, because a later
//                  failure may relaunch the job anyway before the steps left are run.
//                  A large loss is plain sooner: after kMinShrunkClear steps whose median loss
//                  is kClearLossShare of the healthy step or more, the same projection decides
//                  (the median passes over the shrink's own slow first steps). On the goodput
//                  bench a job at 7 of 8 ranks lost 21-30% a step and a fault domain at 1 of its
//                  2 ranks 30% (2026-12-01): waiting 30 steps to see it cost 0.7-1.1 s a shrink.
// A job whose shrunk steps are no slower (its step is mostly its collectives' fixed costs) never
// gets there: the sum of its noise stays near zero, and its mean stays under kMinLossShare.
#include <cstddef>
#include <deque>
#include <optional>

namespace hardy::resilience {

struct RegrowVerdict {
  long step = 0;               // the step at which it became due
  long shrunk_since_step = 0;  // the first step committed shrunk
  int world_size = 0, full_world_size = 0;
  double lost_s = 0, cost_s = 0;
  std::optional<double> healthy_step_s;  // none: lost estimated from the world sizes
  bool healthy_from_before = false;      // healthy_step_s is the earlier launch's
  // When the steps left made it due: what they would lose shrunk, at the loss per step measured
  // (0: the time lost reached the cost).
  double projected_s = 0;
  long steps_left = 0;
};

class RegrowWatch {
 public:
  static constexpr std::size_t kWindow = 50, kMinHealthy = 10, kWarmup = 50, kMinShrunk = 30,
                               kMinShrunkClear = 8;
  static constexpr double kMinLossShare = 0.05, kClearLossShare = 0.2;

  // `last_step`: the job's last step (0: unknown, the loss must pay for the relaunch first).
  explicit RegrowWatch(int full_world_size, long last_step = 0);

  // A relaunch would bring the job back to its full world at about `cost_s` seconds of training
  // (0: it cannot, nothing is ever due).
  void allow(double cost_s) { cost_s_ = cost_s; }
  // The job's healthy step in its earlier launch at this full world, for a shrink that comes
  // before this launch has measured its own.
  void healthy_before(double step_s) { healthy_before_s_ = step_s; }
  // A step committed at `world_size` ranks, `step_s` seconds after the one before (0: unknown).
  // Returns the verdict the first time the time lost reaches the cost.
  std::optional<RegrowVerdict> observe(long step, int world_size, double step_s);

  double lost_s() const { return lost_s_; }
  bool shrunk() const { return shrunk_since_ > 0; }

 private:
  int full_world_;
  long last_step_;
  double cost_s_ = 0;
  long shrunk_steps_ = 0;        // steps of known length committed shrunk
  std::deque<double> healthy_;   // the latest step times at the full world
  std::size_t whole_steps_ = 0;  // steps seen at the full world, warm-up included
  long shrunk_since_ = 0;        // 0: not shrunk
  std::optional<double> healthy_step_s_;
  std::optional<double> healthy_before_s_;
  bool healthy_from_before_ = false;
  double lost_s_ = 0;
  std::deque<double> shrunk_losses_;  // each measured shrunk step's loss, the first kMinShrunk
  bool decided_ = false;
};

}  // namespace hardy::resilience
