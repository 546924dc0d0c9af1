#pragma once
// The session's side of the straggler policy (stragglers/, straggler_watch.hpp): each rank's own
// work per sample rides along with the step's loss sum (no collective of its own), every rank
// feeds the same figures to the same watch, so every rank takes the same decision at the same
// step without a word more; this reports it (rank_slow, rank_recovered, shards_rebalanced with
// reason "straggler") and hands the new shares to SessionStaging, which applies them from the
// next batch drawn. The same for links (link_watch.hpp): the lead's exchange wait rides along
// too, and when the watch asks, every rank takes part in a probe of pairs of nodes
// (comm::probe_links) at the same step (link_probe, link_slow, link_recovered).
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/resilience/link_watch.hpp"
#include "hardy/resilience/straggler_watch.hpp"
#include "session/membership.hpp"
#include "session/session_staging.hpp"

namespace hardy::resilience {

class SlowRanks {
 public:
  // Collective: where the step's own work is `host_timed` (the CPU backend), the watch stays off
  // where some rank of the communicator has less than a CPU to each of its `kernel_threads`
  // (more ranks than CPUs on a host, as in tests that run a whole job on one small machine):
  // there every rank's timing is the scheduler's turn-taking, not its node's speed, and the
  // policy would chase it. Says so once, from the lead. A GPU's own work is its data wait and
  // its device time (measured_on_device), whatever the host's CPUs.
  // Links are watched too, over the communicator's nodes: with fault domains (`in_domain`, this
  // communicator one domain of several) inside each domain of 3 nodes or more, whose exchange
  // is an MPI allreduce like one job's; the exchange between domains crosses gloo groups that
  // the probe does not reach.
  SlowRanks(const StragglerThresholds& thresholds, const Membership& membership,
            SessionStaging& staging, core::EventLog& events, bool host_timed, int kernel_threads,
            bool may_evict, bool in_domain);

  // This rank's own work for its latest computed step: seconds over its samples, and whether
  // this rank's checkpoint writer ran beside it (`beside_writer`: the watch does not hold that
  // step against the rank, straggler_watch.hpp says why).
  void measured(double own_s, std::size_t samples, bool beside_writer = false);
  // The same on a GPU: `host_s` (the data wait) plus the device's time over `span`, which is
  // read (waited for) only when the figures are sent, after the step's sums.
  void measured_on_device(double host_s, std::shared_ptr<core::DeviceSpan> span,
                          std::size_t samples);
  // This rank's wait for the step's summed gradients (from the end of its backward).
  void measured_exchange(double exchange_s) { exchange_s_ = exchange_s; }
  // Appends two slots per rank to `sums` (a vector about to be summed over the communicator),
  // this rank's own time and samples in its own, zero in the others', and the lead's clocks
  // (its last step's duration, its launch's time to the first commit, its exchange's wait);
  // nothing when disabled.
  // A step measured beside the writer travels as its own time negated (a slot has one non-zero
  // addend, so the sign survives the sum).
  void append_slots(std::vector<double>& sums);
  // After the sum: takes the slots back off `sums` (leaving `kept` values) and decides at
  // `step`, the ranks sharing `samples` samples per batch.
  void decide(long step, std::vector<double>& sums, std::size_t kept, std::size_t samples);
  // After decide(): the link watch asks every rank to probe the links now.
  bool probe_due() const { return probe_due_; }
  // Collective: times pairs of neighbouring nodes exchanging `bytes` (the gradients' size) and
  // reports what the pairs say (link_probe, and link_slow when they name a node).
  void probe_links(long step, std::size_t bytes);
  // A shrink renumbered the ranks: even shares, and the watch starts afresh.
  void reset();
  // This launch took `launch_s` from its start to its first committed step: a relaunch without a
  // slow node would cost about twice that (it starts again, and reads the state back), and with
  // --straggler evict and a spare left the watch may name one for eviction once the lead's
  // figure has reached every rank (the next step's sums).
  void first_step_committed(double launch_s);
  // The node to leave out, once the watch named its rank (--straggler evict), and why: "compute"
  // (its own work, rank_slow) or "link" (link_slow: `evict` is then the node's lowest rank,
  // its score the other pairs' time over its pairs', own_s and peers_s those pair times).
  const std::optional<StragglerVerdict>& eviction_due() const { return eviction_; }
  // The eviction due cannot be carried out: hardy run has no spare left (with fault domains,
  // another domain's relaunch took it since this one started). The slow rank stays rebalanced
  // around, nothing is evicted from now on, and the log says so (eviction_forgone).
  void no_spare_left(long step);
  const std::string& eviction_cause() const { return eviction_cause_; }

  // Every rank's latest score (empty until the watch has a full window).
  const std::vector<double>& scores() const { return scores_; }
  // After decide(): the communicator's own work for the step, its slowest rank's seconds, and
  // the samples its ranks covered; 0 where not measured (the watch off, CPUs shared, a GPU's
  // step). With fault domains each leader votes them (domain_balance.hpp).
  double domain_own_s() const { return domain_own_s_; }
  double domain_samples() const { return domain_samples_; }

 private:
  bool active() const;

  bool links_active() const;
  void watch_links(long step, double exchange_s, double step_s);
  // The nodes by host, in the order of their lowest rank, and each rank's node.
  std::vector<int> node_of_rank(std::vector<std::string>& hosts) const;
  std::size_t count_nodes() const;

  // The lead's step duration, launch time and exchange wait.
  static constexpr std::size_t kLeadSlots = 3;
  // Timed exchanges per pair in a probe (their median counts).
  static constexpr int kProbeRepetitions = 5;

  StragglerWatch watch_;
  LinkWatch link_;
  bool in_domain_;
  bool probe_due_ = false;
  std::size_t node_count_ = 0;  // hosts in the communicator
  // Some rank of the communicator has less than a CPU per thread, or the host's time is not the
  // step's: nothing is measured, sent or decided.
  bool unwatched_ = false;
  const Membership& membership_;
  SessionStaging& staging_;
  core::EventLog& events_;
  double own_s_ = 0, own_samples_ = 0, exchange_s_ = 0;
  bool beside_writer_ = false;  // own_s_ was measured beside this rank's checkpoint writer
  std::shared_ptr<core::DeviceSpan> device_span_;  // on a GPU, until append_slots() reads it
  double domain_own_s_ = 0, domain_samples_ = 0;
  std::optional<std::chrono::steady_clock::time_point> last_decided_;
  double last_step_s_ = 0;  // this rank's time between its last two decisions
  double launch_s_ = 0;     // this launch's start to its first commit, here (0: not yet)
  bool may_evict_;          // --straggler evict and a spare left (to the job or its domain)
  bool cost_known_ = false;
  double evict_cost_s_ = 0;  // 0 until known: nothing is evicted
  std::optional<StragglerVerdict> eviction_;
  std::string eviction_cause_;
  std::vector<double> scores_;
};

}  // namespace hardy::resilience
