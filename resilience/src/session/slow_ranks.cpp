#include "session/slow_ranks.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "hardy/comm/communicator.hpp"
#include "hardy/core/data/sampler.hpp"

namespace hardy::resilience {

SlowRanks::SlowRanks(const StragglerThresholds& thresholds, const Membership& membership,
                     SessionStaging& staging, core::EventLog& events, bool host_timed,
                     int kernel_threads, bool may_evict)
    : watch_(thresholds),
      membership_(membership),
      staging_(staging),
      events_(events),
      may_evict_(may_evict && thresholds.mode == StragglerMode::evict) {
  if (!watch_.enabled() || membership_.comm().size() < 2) return;
  if (!host_timed) {
    // A GPU step's own work is its device time (the compute span), which this does not read
    // yet: the host only queues the kernels, and its time says nothing of the device's speed.
    unwatched_ = true;
    if (membership_.lead())
      std::cout << fmt::format(
          "hardy: slow ranks are not watched on the GPU backend yet (--straggler {}): the host "
          "times only the kernels' queueing\n",
          to_string(thresholds.mode));
    return;
  }
  const bool shared_here = membership_.cpu_share() < std::max(1, kernel_threads);
  unwatched_ = comm::allreduce(membership_.comm(), shared_here ? 1 : 0, comm::ReduceOp::max) != 0;
  if (unwatched_ && membership_.lead())
    std::cout << fmt::format(
        "hardy: slow ranks are not watched in this job (--straggler {}): its ranks share CPUs "
        "({:.2g} CPU(s) for {} thread(s) here), so their timings measure the scheduler\n",
        to_string(thresholds.mode), membership_.cpu_share(), kernel_threads);
}

bool SlowRanks::active() const {
  return watch_.enabled() && !unwatched_ && membership_.comm().size() > 1;
}

void SlowRanks::measured(double own_s, std::size_t samples) {
  own_s_ = own_s;
  own_samples_ = static_cast<double>(samples);
}

void SlowRanks::append_slots(std::vector<double>& sums) const {
  if (!active()) return;
  const std::size_t first = sums.size(),
                    world = static_cast<std::size_t>(membership_.comm().size()),
                    rank = static_cast<std::size_t>(membership_.comm().rank());
  sums.resize(first + 2 * world + kLeadSlots, 0.0);
  sums[first + rank] = own_s_;
  sums[first + world + rank] = own_samples_;
  if (membership_.lead()) {
    // The clocks the decision reads are the lead's alone: each rank's own would differ by a
    // little, and a threshold crossed on one rank and not on another splits the job's plans.
    sums[first + 2 * world] = last_step_s_;
    sums[first + 2 * world + 1] = launch_s_;
  }
}

void SlowRanks::decide(long step, std::vector<double>& sums, std::size_t kept,
                       std::size_t samples) {
  if (!active() || sums.size() <= kept) return;
  // Each slot had one non-zero addend: the sums are exact, the same on every rank.
  const auto world = static_cast<std::ptrdiff_t>(membership_.comm().size());
  const auto first = sums.begin() + static_cast<std::ptrdiff_t>(kept);
  const std::vector<double> own(first, first + world),
      own_samples(first + world, first + 2 * world);
  const double lead_step_s = first[2 * world], lead_launch_s = first[2 * world + 1];
  sums.resize(kept);
  // The time since the last decision here: a step's duration, waits included (the first:
  // unknown). It travels with the next step's sums; this step's decision reads the lead's last.
  const auto now = std::chrono::steady_clock::now();
  last_step_s_ = last_decided_ ? std::chrono::duration<double>(now - *last_decided_).count() : 0.0;
  last_decided_ = now;
  if (may_evict_ && !cost_known_ && lead_launch_s > 0) {
    cost_known_ = true;
    const double given = watch_.thresholds().evict_cost_s;
    evict_cost_s_ = given > 0 ? given : 2 * lead_launch_s;
    watch_.allow_eviction(evict_cost_s_);
  }
  const StragglerVerdict verdict =
      watch_.observe(step, own, own_samples, staging_.share_weights(), samples, lead_step_s);
  if (!verdict.scores.empty()) scores_ = verdict.scores;
  const bool lead = membership_.lead();
  for (const RankSlowness& slow : verdict.became_slow) {
    events_.emit("rank_slow", {{"step", step},
                               {"rank", slow.rank},
                               {"host", membership_.host_of(slow.rank)},
                               {"score", slow.score},
                               {"own_s_per_sample", slow.own_s},
                               {"peers_s_per_sample", slow.peers_s},
                               {"since_step", slow.since_step}});
    if (lead)
      std::cout << fmt::format(
          "hardy: rank {} on {} is slow since step {}: {:.2f} of its peers' speed ({:.1f} ms "
          "against {:.1f} ms a sample)\n",
          slow.rank, membership_.host_of(slow.rank), slow.since_step, slow.score, slow.own_s * 1e3,
          slow.peers_s * 1e3);
  }
  for (const RankSlowness& back : verdict.recovered) {
    events_.emit("rank_recovered", {{"step", step},
                                    {"rank", back.rank},
                                    {"host", membership_.host_of(back.rank)},
                                    {"score", back.score},
                                    {"since_step", back.since_step}});
    if (lead)
      std::cout << fmt::format("hardy: rank {} on {} is back to its peers' speed ({:.2f})\n",
                               back.rank, membership_.host_of(back.rank), back.score);
  }
  if (verdict.evict) eviction_ = verdict;
  if (!verdict.new_weights) return;
  staging_.set_share_weights(*verdict.new_weights);
  std::vector<std::size_t> shares;
  for (int r = 0; r < world; ++r)
    shares.push_back(
        core::shard_of(samples, r, static_cast<int>(world), staging_.share_weights()).size());
  events_.emit("shards_rebalanced", {{"policy", "straggler"},
                                     {"reason", verdict.reason},
                                     {"step", step},
                                     {"world_size", world},
                                     {"global_batch", samples},
                                     {"per_rank_batch", shares},
                                     {"lr_scale", 1.0},
                                     {"predicted_gain", verdict.predicted_gain},
                                     {"scores", verdict.scores}});
  if (lead)
    std::cout << fmt::format(
        "hardy: the batch is shared out anew ({}) at step {}, from the next batch drawn: {} "
        "samples per rank, the step predicted {:.2f}x faster\n",
        verdict.reason, step, fmt::join(shares, ","), verdict.predicted_gain);
}

void SlowRanks::first_step_committed(double launch_s) {
  if (launch_s_ <= 0) launch_s_ = launch_s;  // the lead's goes to every rank with the next sums
}

void SlowRanks::reset() {
  staging_.set_share_weights({});
  last_decided_.reset();  // the recovery's time is no step's
  last_step_s_ = 0;
  scores_.clear();
  watch_ = StragglerWatch(watch_.thresholds());
  watch_.allow_eviction(evict_cost_s_);
}

}  // namespace hardy::resilience
