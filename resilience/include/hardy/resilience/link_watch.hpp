#pragma once
// Which node's network link is slow: a pure decision over the step's exchange time and a probe's
// pair times, with no clock, no communicator and no files, unit-tested with scripted figures
// (as StragglerWatch, whose thresholds it shares; docs/resilience.md, "Slow links").
//
// A link that slows (a NIC falling back to a lower rate, a flapping cable, a congested port) does
// not show in any rank's own work: every rank waits for it inside the exchange, so the step's
// exchange grows while the own work does not. The rule, in three stages:
//   excess     = the median of the exchange's wait over the window (as StragglerWatch's: steps
//                and seconds) less its own best such median since the start (its baseline);
//   flagged    = a step whose excess is at least `slowdown` x the step's duration (a change that
//                costs the job that much, whatever the exchange's own size) while no rank's own
//                work is flagged (a rank slow to compute makes every other wait in the exchange);
//   probe      = flagged for the confirmation (a streak that an unflagged step shortens by one):
//                the caller times pairs of neighbouring nodes (comm::probe_links) and hands the
//                pairs to probed(), which names the one node whose two pairs both took at least
//                kSlowPair x the median of the pairs it is not in. No such node, or more than one
//                (the whole network slowed, or a switch): nothing is named, and the exchange's
//                current median becomes its baseline, so that only a further rise probes again.
// A named link is recovered after the same streak of steps back within slowdown / 2 x the step
// of the baseline. With `evict`, ski rental as StragglerWatch's: every step adds its excess to
// the time lost; when that reaches a relaunch's cost (allow_eviction()), the node is named for
// eviction, once: rebalancing cannot help a link.
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "hardy/comm/link_probe.hpp"
#include "hardy/resilience/straggler_watch.hpp"

namespace hardy::resilience {

struct LinkSlowness {
  int node = 0;             // index into the probe's nodes
  double pair_s = 0;        // the slower of its two pairs' times
  double peers_pair_s = 0;  // the median of the pairs it is not in
  double exchange_s = 0;    // the exchange's median wait when it was probed
  double baseline_s = 0;    // its best median before
  long since_step = 0;      // the first step of the streak that probed
};

struct LinkVerdict {
  bool probe = false;                     // time the links now (every rank: the same step)
  std::optional<LinkSlowness> recovered;  // the named link is back at its baseline
  std::optional<LinkSlowness> evict;      // evict: the node to leave out
  double lost_s = 0, evict_cost_s = 0;    // with evict: the time lost against the cost
};

class LinkWatch {
 public:
  // A pair is slow at this many times the pairs beside it: links that fail slow fall by a factor
  // (Gbit/s to Mbit/s), and on the shared 2-core test machines healthy pairs varied by less.
  static constexpr double kSlowPair = 2.0;

  // Throws InvalidArgument for thresholds outside their ranges (StragglerWatch's rules).
  explicit LinkWatch(StragglerThresholds thresholds);

  bool enabled() const { return thresholds_.mode != StragglerMode::off; }
  // One step: the exchange's wait (from the end of the backward to the step's sums), whether
  // any rank's own work is flagged or slow now (StragglerWatch::suspects()), and the step's
  // duration (0: not known; the exchange's own median stands in for the pace).
  LinkVerdict observe(long step, double exchange_s, bool compute_suspect, double step_s);
  // After a probe that observe() asked for: the node whose link is slow, if the pairs name one.
  std::optional<LinkSlowness> probed(std::span<const comm::LinkPair> pairs);
  // evict: a relaunch without a node would cost `cost_s` seconds (> 0; 0: nothing to evict).
  void allow_eviction(double cost_s) { evict_cost_s_ = cost_s; }
  // The node whose link is slow now, if any.
  const std::optional<LinkSlowness>& slow() const { return slow_; }
  // The exchange's median wait over the window now, and its best such median (0: none yet).
  double current_exchange_s() const { return median_s_; }
  double baseline_s() const { return baseline_s_; }

 private:
  StragglerThresholds thresholds_;
  std::vector<double> exchange_times_, step_times_;
  long observed_ = 0;
  double baseline_s_ = 0;  // 0: no full window yet
  double median_s_ = 0;    // the exchange's current median
  long streak_ = 0, since_ = 0;
  bool probing_ = false;  // observe() asked for a probe; probed() not called yet
  std::optional<LinkSlowness> slow_;
  double evict_cost_s_ = 0, lost_s_ = 0;
  bool evicted_ = false;
};

}  // namespace hardy::resilience
