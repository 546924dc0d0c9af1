#include "session/slow_ranks.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "hardy/comm/communicator.hpp"
#include "hardy/comm/link_probe.hpp"
#include "hardy/core/data/sampler.hpp"

namespace hardy::resilience {

SlowRanks::SlowRanks(const StragglerThresholds& thresholds, const Membership& membership,
                     SessionStaging& staging, core::EventLog& events, bool host_timed,
                     int kernel_threads, bool may_evict, bool in_domain)
    : watch_(thresholds),
      link_(thresholds),
      in_domain_(in_domain),
      membership_(membership),
      staging_(staging),
      events_(events),
      may_evict_(may_evict && thresholds.mode == StragglerMode::evict) {
  node_count_ = count_nodes();
  // A domain of one rank has no peer to compare, but its own work still weighs in the domains'
  // split of the batch (domain_balance.hpp), and the same rules say whether it means anything.
  if (!watch_.enabled() || (membership_.comm().size() < 2 && !in_domain_)) return;
  // A GPU's own work is timed on the device (measured_on_device): the host's share of CPUs
  // does not set it.
  if (!host_timed) return;
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

bool SlowRanks::links_active() const {
  // A probe tells the two ends of a link apart only with a third node to pair each with.
  return active() && link_.enabled() && node_count_ >= 3;
}

std::vector<int> SlowRanks::node_of_rank(std::vector<std::string>& hosts) const {
  std::unordered_map<std::string, int> index;
  std::vector<int> nodes;
  for (int r = 0; r < membership_.comm().size(); ++r) {
    const std::string& host = membership_.host_of(r);
    const auto [at, added] = index.emplace(host, static_cast<int>(hosts.size()));
    if (added) hosts.push_back(host);
    nodes.push_back(at->second);
  }
  return nodes;
}

std::size_t SlowRanks::count_nodes() const {
  std::vector<std::string> hosts;
  node_of_rank(hosts);
  return hosts.size();
}

void SlowRanks::measured(double own_s, std::size_t samples, bool beside_writer) {
  own_s_ = own_s;
  own_samples_ = static_cast<double>(samples);
  beside_writer_ = beside_writer;
}

void SlowRanks::measured_on_device(double host_s, std::shared_ptr<core::DeviceSpan> span,
                                   std::size_t samples) {
  own_s_ = host_s;
  own_samples_ = static_cast<double>(samples);
  beside_writer_ = false;  // the device's time is most of it, and no writer shares the device
  device_span_ = std::move(span);
}

void SlowRanks::append_slots(std::vector<double>& sums) {
  if (device_span_) {
    // The step's gradients are summed by now, so its backward is done on the device.
    if (watch_.enabled()) own_s_ += device_span_->seconds();
    device_span_.reset();
  }
  if (!active()) return;
  const std::size_t first = sums.size(),
                    world = static_cast<std::size_t>(membership_.comm().size()),
                    rank = static_cast<std::size_t>(membership_.comm().rank());
  sums.resize(first + 2 * world + kLeadSlots, 0.0);
  sums[first + rank] = beside_writer_ ? -own_s_ : own_s_;
  sums[first + world + rank] = own_samples_;
  if (membership_.lead()) {
    // The clocks the decision reads are the lead's alone: each rank's own would differ by a
    // little, and a threshold crossed on one rank and not on another splits the job's plans.
    sums[first + 2 * world] = last_step_s_;
    sums[first + 2 * world + 1] = launch_s_;
    sums[first + 2 * world + 2] = exchange_s_;
  }
}

void SlowRanks::decide(long step, std::vector<double>& sums, std::size_t kept,
                       std::size_t samples) {
  domain_own_s_ = domain_samples_ = 0;
  if (watch_.enabled() && !unwatched_ && membership_.comm().size() == 1) {
    domain_own_s_ = own_s_;
    domain_samples_ = own_samples_;
  }
  if (!active() || sums.size() <= kept) return;
  // Each slot had one non-zero addend: the sums are exact, the same on every rank.
  const auto world = static_cast<std::ptrdiff_t>(membership_.comm().size());
  const auto first = sums.begin() + static_cast<std::ptrdiff_t>(kept);
  std::vector<double> own(first, first + world), watched(own.size());
  const std::vector<double> own_samples(first + world, first + 2 * world);
  // Negative: measured beside the rank's checkpoint writer, which the watch does not judge
  // (NaN). The time was spent all the same: the domain finishes its slice when its slowest rank
  // does.
  for (std::size_t r = 0; r < own.size(); ++r) {
    watched[r] = own[r] < 0 ? std::numeric_limits<double>::quiet_NaN() : own[r];
    own[r] = std::abs(own[r]);
  }
  domain_own_s_ = *std::ranges::max_element(own);
  domain_samples_ = std::accumulate(own_samples.begin(), own_samples.end(), 0.0);
  const double lead_step_s = first[2 * world], lead_launch_s = first[2 * world + 1],
               lead_exchange_s = first[2 * world + 2];
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
    link_.allow_eviction(evict_cost_s_);
  }
  const StragglerVerdict verdict =
      watch_.observe(step, watched, own_samples, staging_.share_weights(), samples, lead_step_s);
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
  if (verdict.evict) {
    eviction_ = verdict;
    eviction_cause_ = "compute";
  }
  if (links_active()) watch_links(step, lead_exchange_s, lead_step_s);
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

void SlowRanks::watch_links(long step, double exchange_s, double step_s) {
  const LinkVerdict verdict = link_.observe(step, exchange_s, watch_.suspects(), step_s);
  probe_due_ = verdict.probe;
  if (!verdict.recovered && !verdict.evict) return;
  std::vector<std::string> hosts;
  const std::vector<int> nodes = node_of_rank(hosts);
  const auto lowest_rank = [&](int node) {
    return static_cast<int>(std::find(nodes.begin(), nodes.end(), node) - nodes.begin());
  };
  if (verdict.recovered) {
    const LinkSlowness& link = *verdict.recovered;
    events_.emit("link_recovered", {{"step", step},
                                    {"rank", lowest_rank(link.node)},
                                    {"host", hosts[static_cast<std::size_t>(link.node)]},
                                    {"since_step", link.since_step}});
    if (membership_.lead())
      std::cout << fmt::format("hardy: the link of {} is back to its speed\n",
                               hosts[static_cast<std::size_t>(link.node)]);
  }
  if (verdict.evict && !eviction_) {
    const LinkSlowness& link = *verdict.evict;
    StragglerVerdict evict;
    evict.evict = RankSlowness{.rank = lowest_rank(link.node),
                               .score = link.peers_pair_s / link.pair_s,
                               .own_s = link.pair_s,
                               .peers_s = link.peers_pair_s,
                               .since_step = link.since_step};
    evict.lost_s = verdict.lost_s;
    evict.evict_cost_s = verdict.evict_cost_s;
    eviction_ = std::move(evict);
    eviction_cause_ = "link";
  }
}

void SlowRanks::probe_links(long step, std::size_t bytes) {
  probe_due_ = false;
  std::vector<std::string> hosts;
  const std::vector<int> nodes = node_of_rank(hosts);
  const comm::LinkProbe probe =
      comm::probe_links(membership_.comm(), nodes, bytes, kProbeRepetitions);
  const double exchange_s = link_.current_exchange_s(), baseline_s = link_.baseline_s();
  const std::optional<LinkSlowness> named = link_.probed(probe.pairs);
  nlohmann::json pairs = nlohmann::json::array();
  for (const comm::LinkPair& pair : probe.pairs)
    pairs.push_back({hosts[static_cast<std::size_t>(pair.node_a)],
                     hosts[static_cast<std::size_t>(pair.node_b)], pair.seconds});
  nlohmann::json fields = {
      {"step", step},   {"seconds", probe.seconds}, {"bytes", bytes},
      {"pairs", pairs}, {"exchange_s", exchange_s}, {"baseline_s", baseline_s}};
  if (named) fields["named_host"] = hosts[static_cast<std::size_t>(named->node)];
  events_.emit("link_probe", std::move(fields));
  const bool lead = membership_.lead();
  if (!named) {
    if (lead)
      std::cout << fmt::format(
          "hardy: the exchange took {:.1f} ms against its best {:.1f} ms; a probe of {} pairs of "
          "nodes found no one slow link ({:.2f} s)\n",
          exchange_s * 1e3, baseline_s * 1e3, probe.pairs.size(), probe.seconds);
    return;
  }
  const std::string& host = hosts[static_cast<std::size_t>(named->node)];
  events_.emit("link_slow",
               {{"step", step},
                {"rank", probe.lead_rank_of_node[static_cast<std::size_t>(named->node)]},
                {"host", host},
                {"pair_s", named->pair_s},
                {"peers_pair_s", named->peers_pair_s},
                {"exchange_s", named->exchange_s},
                {"baseline_s", named->baseline_s},
                {"since_step", named->since_step}});
  if (lead)
    std::cout << fmt::format(
        "hardy: the link of {} is slow since step {}: its pairs took {:.1f} ms against {:.1f} ms "
        "for the others' ({} bytes), the exchange {:.1f} ms against its best {:.1f} ms\n",
        host, named->since_step, named->pair_s * 1e3, named->peers_pair_s * 1e3, bytes,
        named->exchange_s * 1e3, named->baseline_s * 1e3);
}

void SlowRanks::no_spare_left(long step) {
  if (!eviction_ || !eviction_->evict) return;
  const RankSlowness& slow = *eviction_->evict;
  events_.emit("eviction_forgone", {{"step", step},
                                    {"rank", slow.rank},
                                    {"host", membership_.host_of(slow.rank)},
                                    {"cause", eviction_cause_},
                                    {"lost_s", eviction_->lost_s},
                                    {"cost_s", eviction_->evict_cost_s},
                                    {"reason", "hardy run has no spare node left"}});
  if (membership_.lead())
    std::cout << fmt::format(
        "hardy: not evicting {} (slow {}): hardy run has no spare node left; the batch stays "
        "shared out around it\n",
        membership_.host_of(slow.rank), eviction_cause_ == "link" ? "link" : "compute");
  eviction_.reset();
  eviction_cause_.clear();
  may_evict_ = false;
  evict_cost_s_ = 0;
  watch_.allow_eviction(0);
  link_.allow_eviction(0);
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
  link_ = LinkWatch(watch_.thresholds());
  link_.allow_eviction(evict_cost_s_);
  probe_due_ = false;
  node_count_ = count_nodes();
}

}  // namespace hardy::resilience
