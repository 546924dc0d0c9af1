#pragma once
// Which ranks are slow, and how the batch should be shared out around them: a pure decision over
// every rank's own work per sample, step by step, with no clock, no communicator and no files, so
// that it is unit-tested with scripted timings. The session feeds it the figures every rank
// shares at each step's loss reduction and acts on what it returns (docs/resilience.md, "Slow
// ranks").
//
// The rule, in two stages so that noise never acts:
//   own time   = the median of a rank's own work per sample (data wait, forward and backward over
//                its samples, not the waits inside collectives) over the last `window` steps, or
//                more where they take less than `window_s` seconds (at the job's pace: the
//                median step's duration);
//   score      = the median of the other ranks' own times over the rank's own: 1 is typical,
//                1/3 a rank at a third of its peers' speed (NVIDIA's resiliency extension's
//                score; it flags below 0.75);
//   flagged    = a step whose own time is at least (1 + slowdown) x the peers' median, and
//                whose own work a step exceeds theirs by at least slowdown / 4 of the job's
//                pace (a rank that costs the step a few percent at most is left alone);
//   slow       = flagged for `confirm` steps (or more, to last `confirm_s` seconds), counted as a
//                streak that a step not flagged
//                shortens by one rather than ends (a rank 20% slow under noise dips below the
//                line now and then); a single spike, a pause of a few steps or a drift of the
//                whole job never is (the peers drift with it);
//   recovered  = for `confirm` steps (the same streak), a slow rank back under (1 + slowdown / 2) x
//   its peers' time
//                per sample, or done with its (smaller) share of the batch in under half their
//                median own time: with few samples its time per sample carries more of each
//                step's fixed costs, and it would never look as fast as its peers by that
//                measure alone (and a balanced split may leave it a little ahead of them).
// With `rebalance`, while some rank is slow the shares are those that minimize the predicted step
// (the slowest rank's samples x its own time per sample, the healthy ranks at their median):
// whole samples, at least one each, every sample to the rank that would finish it soonest. They
// change when a rank turns slow (if they gain at least slowdown / 2) or recovers (back to even),
// or when the predicted step under the current shares is slowdown / 2 longer than under the new
// ones for `confirm` steps (each step's fixed costs, which a slow node pays slowly too, make the
// first shares too generous to it). After a change the window starts afresh: the times under the
// old shares say nothing of the new ones.
//
// With `evict`, also ski rental: once some rank is slow, every step adds to the time lost (the
// predicted step under the shares in force less the predicted step of a healthy job: every rank
// at the healthy ranks' median, even shares); when it reaches the cost of relaunching the job
// without the slowest rank's node (allow_eviction(): measured by the session), that rank is
// named for eviction, once. Until then, and where nothing can be evicted, it rebalances. Only a
// rank that *became* slow is evicted: when named, its own time per sample must be at least
// (1 + slowdown) x its own best before (a window at even shares while it was not slow). One slow
// since its first window is rebalanced around but kept: the watch cannot tell a slow node from a
// slow role (a domain's leader, a lead with writer threads), and where the role is the cause the
// spare would take it over and be named in turn (seen on the emulated cluster: two-rank domains
// evicted their second node, then the spare that replaced it, at scores of 0.73-0.86).
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace hardy::resilience {

enum class StragglerMode { off, detect, rebalance, evict };
StragglerMode parse_straggler_mode(const std::string& name);  // InvalidArgument naming the choices
std::string to_string(StragglerMode mode);

struct StragglerThresholds {
  StragglerMode mode = StragglerMode::evict;
  // How much slower than its peers' median a rank's own time must be to count, > 0 (0.15: 15%).
  // Greyhound acts on 10% on GPUs; on the 2-core machines the tests run on, healthy ranks ran
  // 9-11% apart for tens of steps (the lead's writer threads, who shares a core with mpirun),
  // and a rank 20% slow must still be found.
  double slowdown = 0.15;
  long window = 5;       // steps in a rank's own median, >= 1 ...
  double window_s = 1;   // ... and at least this many seconds of them (at most 256 steps), >= 0
  long confirm = 10;     // steps flagged before slow or recovered is believed, >= 1 ...
  double confirm_s = 3;  // ... and at least this many seconds of them (at most 4096 steps)
  // Steps after the start (or a shrink) that are not watched: the first steps create the
  // kernels, fill the caches and start the loaders at each rank's own pace (a healthy rank of
  // two ran at 0.6 of its peer's speed for ten steps from the start), >= 0.
  long warmup = 20;
  // evict: what a relaunch without a node costs, in seconds; 0: measured by the session.
  double evict_cost_s = 0;
};

struct RankSlowness {
  int rank = 0;
  double score = 1;       // the peers' median own time over this rank's
  double own_s = 0;       // this rank's own work per sample, median over the window
  double peers_s = 0;     // the other ranks' median of theirs
  long since_step = 0;    // the first step of the run of flagged steps
  double own_best_s = 0;  // its own best time per sample before (0: none measured)
};

struct StragglerVerdict {
  // Per rank, once the window is full (empty before): the current score.
  std::vector<double> scores;
  std::vector<RankSlowness> became_slow, recovered;
  // rebalance: the weights the next batches are to be shared out by (whole numbers that add up to
  // the batch: the shares themselves; an empty vector: evenly),
  // the reason ("straggler", "recovered" or "replanned") and the predicted step time under the
  // current shares over that under the new ones.
  std::optional<std::vector<double>> new_weights;
  std::string reason;
  double predicted_gain = 1;
  // evict: the rank whose node is to go (with the figures it was named slow with), the time lost
  // to slow ranks so far and the cost it was weighed against.
  std::optional<RankSlowness> evict;
  double lost_s = 0, evict_cost_s = 0;
};

class StragglerWatch {
 public:
  // Throws InvalidArgument for thresholds outside their documented ranges.
  explicit StragglerWatch(StragglerThresholds thresholds);

  // One step: every rank's own work in seconds and the samples it covered (index: rank), the
  // weights the batches are shared out by now (empty: evenly), how many samples these ranks
  // share, and how long the step took from the last one (0: not known; the pace of the slowest
  // rank's own work stands in for it). A different number of ranks than before (a shrink)
  // starts the watch afresh.
  // An own time that is NaN was not measured: the rank's own work shared its CPUs with its
  // checkpoint writer's thread (the lead's, every --checkpoint-every steps), so it says as much
  // about the writer as about the node. Such a step leaves that rank's window and streak as they
  // were: it is judged on its other steps, and until it has one in the window it stands at its
  // peers' median. Otherwise the lead, the one rank that writes, was named slow and its healthy
  // node evicted (seven times in one goodput bench run with a checkpoint every 2 steps).
  StragglerVerdict observe(long step, std::span<const double> own_s,
                           std::span<const double> own_samples,
                           std::span<const double> current_weights, std::size_t samples,
                           double step_s = 0);

  bool enabled() const { return thresholds_.mode != StragglerMode::off; }
  const StragglerThresholds& thresholds() const { return thresholds_; }
  // Whether `rank` is slow now (false when the watch has no such rank).
  bool is_slow(int rank) const;
  // Whether some rank is slow, or half way to being named so (LinkWatch leaves a slow exchange
  // alone while a rank's own work may explain it; single flagged steps of noise do not count).
  bool suspects() const;
  // evict: a relaunch without a node would cost `cost_s` seconds (> 0); 0: nothing can be
  // evicted (no spare node), so slow ranks are only rebalanced.
  void allow_eviction(double cost_s) { evict_cost_s_ = cost_s; }
  // The seconds lost to slow ranks since some rank was first slow (0 while none is).
  double lost_s() const { return lost_s_; }

 private:
  void restart_window();

  StragglerThresholds thresholds_;
  // Per rank, the last `window` own times per sample and own step times.
  std::vector<std::vector<double>> per_sample_, per_step_;
  std::vector<bool> slow_;
  std::vector<long> streak_, since_;
  std::vector<RankSlowness> named_as_;  // each slow rank's figures when it was named
  // Each rank's lowest own time per sample over a window at even shares while it was not slow:
  // what it did before, to tell a node that slowed down from one slow in its role.
  std::vector<double> own_best_;
  long observed_ = 0;               // steps since the start or a shrink
  std::size_t window_steps_ = 0;    // steps observed since the window last started
  long confirm_ = 1;                // the confirmation in steps at the current pace
  double pace_s_ = 0;               // seconds a step (0: not known yet)
  std::vector<double> step_times_;  // the last `window` steps' durations, where given
  long imbalance_streak_ = 0;
  double evict_cost_s_ = 0, lost_s_ = 0;
  bool evicted_ = false;  // named once
};

}  // namespace hardy::resilience
