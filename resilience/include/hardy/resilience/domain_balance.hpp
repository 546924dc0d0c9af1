#pragma once
// Slow fault domains: the slow-rank policy (straggler_watch.hpp) one level up, over the domains
// of a job instead of the ranks of one. A pure decision over what the domains' votes carry, with
// no clock, no communicator and no files, unit-tested with scripted votes.
//
// Why: inside a domain the watch shares the domain's slice out around a slow rank, or evicts its
// node to a spare. A domain still finishes its slice later than the others then (a node at a
// third of its speed leaves a domain of two at two thirds of its pace; a domain of one node has no
// peer to hand work to), and every domain waits for it at each meeting. So the domains' split of
// the global batch follows their measured speed as well.
//
// What a domain is measured by: its own work for the step, the seconds of its slowest rank's
// (data wait, forward, backward; not the waits in collectives) over the samples it covered, which
// each leader puts in its vote. Every leader gets the same sums; the lowest member alone decides,
// and what it decides travels in the next vote, so that every domain applies one split from the
// same batch on whatever each leader's history. Its rule is the watch's, each domain a rank: a
// sustained slowdown named after `confirm` steps, whole-sample shares minimizing the predicted
// step, back to the split by ranks on recovery. Never eviction: a domain's own watch evicts its
// slow node, and a domain lost whole is the supervisor's to relaunch.
//
// Domains of any sizes: the watch sees each domain as its live ranks, each with the domain's
// seconds over its share of the domain's samples (a rank's time per sample), so that a domain that
// shrank inside is not slow for covering fewer samples, and the shares it plans per rank add up to
// each domain's slice (where the sizes are equal, each domain is one, its shares whole samples
// per domain: the same measure up to a constant). When a domain's ranks change, the split goes back
// to ranks and the watch starts afresh, as after a new generation.
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hardy/resilience/straggler_watch.hpp"

namespace hardy::resilience {

struct DomainBalanceVerdict {
  // Per member (index into the generation's members), once the window is full: the score.
  std::vector<double> scores;
  std::vector<RankSlowness> became_slow, recovered;  // `rank`: the member's index
  // The split to publish from now on: whole-sample shares per member, or empty (by ranks).
  std::optional<std::vector<double>> new_shares;
  std::string reason;  // "straggler", "recovered", "replanned" or "ranks changed"
  double predicted_gain = 1;
};

class DomainBalance {
 public:
  // `thresholds` as the ranks' watch takes them (--straggler and its options); evict acts as
  // rebalance here. Throws InvalidArgument as StragglerWatch does.
  explicit DomainBalance(const StragglerThresholds& thresholds);

  bool enabled() const { return watch_.enabled(); }
  // One completed vote at `step`: per member its live ranks, its own work in seconds (0: not
  // measured) and its samples, the shares in force (empty: by ranks), and the time since the
  // last vote here, waits included (0: not known). A member not measured leaves the step out;
  // ranks changed since the last vote start the watch afresh, back by ranks. The
  // deciding leader's own clock serves: nobody else decides.
  DomainBalanceVerdict observe(long step, std::span<const int> ranks, std::span<const double> own_s,
                               std::span<const double> own_samples,
                               std::span<const double> shares_in_force, double step_s = 0);
  // The members changed (a new generation): the watch starts afresh.
  void reset();

 private:
  StragglerWatch watch_;
  std::vector<int> last_ranks_;
};

}  // namespace hardy::resilience
