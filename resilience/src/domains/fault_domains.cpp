#include "domains/fault_domains.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>
#include <utility>

#include "domains/domain_store.hpp"
#include "domains/fault_domains_internal.hpp"
#include "hardy/checkpoint/broadcast_state.hpp"
#include "hardy/comm/gloo/communicator.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::resilience {

using namespace fault_domains_internal;

FaultDomains::FaultDomains(DomainOptions options, const std::unique_ptr<comm::Communicator>& domain,
                           core::EventLog& events)
    : options_(std::move(options)), domain_(domain), events_(events), balance_(options_.balance) {
  if (!enabled()) return;
  if (options_.count < 1 || options_.index >= options_.count)
    throw InvalidArgument(
        fmt::format("domain {} of {}: no such domain", options_.index, options_.count));
  if (leader() || sharded()) store_ = open_domain_store(options_.store, options_.store_token);
}

FaultDomains::~FaultDomains() = default;

int FaultDomains::job_world_size() const {
  if (!enabled()) return domain().size();
  int total = 0;
  for (int ranks : ranks_per_member_) total += ranks;
  return total;
}

double FaultDomains::share(std::size_t global_batch) const {
  if (!enabled()) return 1.0;
  return domain_share(global_batch, ranks_per_member_, member_index(), shares_per_member_);
}

core::Shard FaultDomains::my_slice(std::size_t global_batch,
                                   std::span<const double> weights) const {
  if (!enabled()) return core::shard_of(global_batch, domain().rank(), domain().size(), weights);
  return rank_slice_in_domain(global_batch, ranks_per_member_, member_index(), domain().rank(),
                              domain().size(), weights, shares_per_member_);
}

std::uint64_t FaultDomains::split_digest() const {
  std::uint64_t digest = 1469598103934665603ull;  // FNV-1a over the members, ranks and shares
  const auto mix = [&](std::int64_t value) {
    digest = (digest ^ static_cast<std::uint64_t>(value)) * 1099511628211ull;
  };
  for (int member : members_) mix(member);
  mix(-1);
  for (int ranks : ranks_per_member_) mix(ranks);
  mix(-1);
  for (double share : shares_per_member_) mix(std::llround(share * 1024));
  return digest;
}

bool FaultDomains::spare_left() {
  if (!enabled()) return true;
  int left = 1;
  if (leader()) {
    if (store_->try_get(rendezvous_keys::spares_gone())) left = 0;
  }
  // The others bring 1: the minimum is the leader's answer, on every rank.
  return comm::allreduce(domain(), left, comm::ReduceOp::min) > 0;
}

core::Shard FaultDomains::my_domain_slice(std::size_t global_batch) const {
  if (!enabled()) return {0, global_batch};
  return domain_slice(global_batch, ranks_per_member_, member_index(), shares_per_member_);
}

void FaultDomains::start(const DomainStateAccess& state) {
  if (!enabled()) return;
  SharedDecision decision;
  checkpoint::TrainingState healed;
  if (leader()) {
    const auto started = std::chrono::steady_clock::now();
    const bool joining = !options_.join_token.empty();
    std::size_t generation = 0;
    if (joining) {
      store_->set(rendezvous_keys::join(options_.index, options_.join_token),
                  std::to_string(::getpid()));
      const auto admitted =
          store_->wait_for(rendezvous_keys::admit(options_.index, options_.join_token),
                           to_ms(options_.membership_timeout_s));
      if (!admitted)
        throw Error(fmt::format("domain {} was not let back into the job within {:.0f} s",
                                options_.index, options_.membership_timeout_s));
      generation = std::stoul(*admitted);
    }
    const auto listed = store_->wait_for(rendezvous_keys::members(generation),
                                         to_ms(options_.membership_timeout_s));
    if (!listed)
      throw Error(
          fmt::format("no members published for generation {} in {}", generation, options_.store));
    ResyncPlan plan;
    for (bool connected = false; !connected;) {
      try {
        if (group_ == nullptr || generation_ != generation)
          connect(generation, parse_members(*listed));
        plan = resync({.decided = state.committed_step(), .joining = joining}, state, healed);
        connected = true;
      } catch (const comm::GroupFailure& e) {
        regroup(e.what());
        generation = generation_;
      }
    }
    const auto me = static_cast<std::size_t>(
        std::find(members_.begin(), members_.end(), options_.index) - members_.begin());
    decision.verdict = plan.actions[me] == ResyncAction::heal ? kHealed : kCommit;
    decision.generation = generation_;
    decision.members = members_;
    decision.ranks = ranks_per_member_;
    decision.shares = shares_per_member_;
    events_.emit(
        joining ? "domain_joined" : "domains_connected",
        {{"domain", options_.index},
         {"generation", generation_},
         {"members", members_},
         {"ranks_per_domain", ranks_per_member_},
         {"step", plan.agreed_step},
         {"seconds",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()}});
  }
  apply_decision(decision.encode(), {}, &healed, state);
}

DomainStep FaultDomains::exchange(long step, std::span<core::Tensor* const> tensors, double loss,
                                  double skipped, const DomainStateAccess& state,
                                  std::span<const float> weights) {
  start_step(step, tensors, loss, skipped, /*ok=*/true, weights);
  return settle_exchange(tensors, state);
}

void FaultDomains::start_exchange(long step, std::span<core::Tensor* const> tensors, double loss,
                                  double skipped, std::span<const float> weights) {
  start_step(step, tensors, loss, skipped, /*ok=*/true, weights);
}

DomainStep FaultDomains::settle_exchange(std::span<core::Tensor* const> tensors,
                                         const DomainStateAccess& state) {
  checkpoint::TrainingState healed;
  std::vector<double> decision;
  std::optional<std::string> shards_missing;
  if (sharded()) {
    const ShardsGathered gathered = gather_shards();
    if (gathered.vote) {
      const long step = in_flight_->step;
      in_flight_.reset();
      return commit_gathered(*gathered.vote, tensors, step);
    }
    shards_missing = gathered.missing;
  }
  if (leader()) decision = conclude(state, healed, shards_missing);
  in_flight_.reset();
  return apply_decision(std::move(decision), tensors, &healed, state);
}

DomainStep FaultDomains::after_local_recovery(long next_step, bool synchronized,
                                              std::span<core::Tensor* const> tensors,
                                              const DomainStateAccess& state) {
  // Domains that train alone between meetings have nothing in flight with the others then: the
  // domain redoes the step over its survivors, and tells the others its size at the next meeting.
  if (!synchronized) {
    if (in_flight_ && leader()) in_flight_->sent.wait();  // never at such a step; no dangling send
    in_flight_.reset();
    return {.verdict = StepVerdict::abandon};
  }
  const long next = next_step;
  // The step's exchange may still be in flight (started before the next step computed, which is
  // where the rank died): it ends as it would have, and the domain follows its outcome below.
  if (in_flight_ && in_flight_->step == next) return settle_exchange(tensors, state);
  in_flight_.reset();
  if (leader() && in_flight_step_ == next && in_flight_ok_) {
    // The step's vote completed before the rank died: the other domains committed it (or will)
    // and this one rolls forward with the sums its leader still holds, or the vote said no and
    // everyone dropped it already.
    SharedDecision decision;
    decision.verdict = *in_flight_ok_ ? kCommit : kAbandon;
    decision.loss = last_vote_loss_;
    decision.generation = generation_;
    decision.members = members_;
    // The others split the next batch by the sizes they know; this domain covers its slice with
    // the ranks it has left, and reports the new size in the next vote.
    decision.ranks = ranks_per_member_;
    decision.shares = shares_per_member_;
    return apply_decision(decision.encode(), tensors, nullptr, state);
  }
  // The other domains wait in this step's exchange (or will): join it with nothing to add and a
  // vote against, so that every domain drops the step and redoes it over the new split.
  start_step(next, tensors, 0, 0, /*ok=*/false, {});
  return settle_exchange(tensors, state);
}

void FaultDomains::adopt_vote(const Vote& vote, long step) {
  ranks_per_member_ = vote.ranks;
  shares_per_member_ = vote.shares;
  // The lowest member's leader decides for all (its decision travels in its next votes), so
  // that one split holds everywhere whatever each leader has seen since it joined.
  // A step some domain voted against measured nothing whole.
  if (!vote.ok || !leader() || !owns_run_files() || !balance_.enabled()) return;
  const auto now = std::chrono::steady_clock::now();
  const double step_s =
      last_balanced_ ? std::chrono::duration<double>(now - *last_balanced_).count() : 0.0;
  last_balanced_ = now;
  const DomainBalanceVerdict verdict =
      balance_.observe(step, vote.ranks, vote.own_s, vote.own_samples, shares_per_member_, step_s);
  for (const RankSlowness& slow : verdict.became_slow) {
    const int domain = members_.at(static_cast<std::size_t>(slow.rank));
    events_.emit("domain_slow", {{"step", step},
                                 {"slow_domain", domain},
                                 {"score", slow.score},
                                 {"own_s_per_sample", slow.own_s},
                                 {"peers_s_per_sample", slow.peers_s},
                                 {"since_step", slow.since_step}});
    std::cout << fmt::format(
        "hardy: fault domain {} is slow since step {}: {:.2f} of the other domains' speed ({:.2f} "
        "ms against {:.2f} ms a sample per rank, its slowest rank's own work)\n",
        domain, slow.since_step, slow.score, slow.own_s * 1e3, slow.peers_s * 1e3);
  }
  for (const RankSlowness& back : verdict.recovered) {
    const int domain = members_.at(static_cast<std::size_t>(back.rank));
    events_.emit("domain_recovered", {{"step", step},
                                      {"slow_domain", domain},
                                      {"score", back.score},
                                      {"since_step", back.since_step}});
    std::cout << fmt::format("hardy: fault domain {} is back to the others' speed ({:.2f})\n",
                             domain, back.score);
  }
  if (!verdict.new_shares) return;
  published_shares_ = *verdict.new_shares;
  std::vector<std::size_t> per_domain;
  const std::size_t batch = static_cast<std::size_t>(
      std::llround(std::accumulate(vote.own_samples.begin(), vote.own_samples.end(), 0.0)));
  for (std::size_t i = 0; i < members_.size(); ++i)
    per_domain.push_back(domain_slice(batch, ranks_per_member_, i, published_shares_).size());
  events_.emit("domains_rebalanced", {{"step", step},
                                      {"reason", verdict.reason},
                                      {"members", members_},
                                      {"global_batch", batch},
                                      {"per_domain_batch", per_domain},
                                      {"predicted_gain", verdict.predicted_gain},
                                      {"scores", verdict.scores}});
  std::cout << fmt::format(
      "hardy: the batch is shared out anew over the fault domains ({}) at step {}, from the batch "
      "drawn after the next vote: {} samples per domain, the step predicted {:.2f}x faster\n",
      verdict.reason, step, fmt::join(per_domain, ","), verdict.predicted_gain);
}

void FaultDomains::split_by_ranks() {
  shares_per_member_.clear();
  published_shares_.clear();
  balance_.reset();
  last_balanced_.reset();  // a regroup's time is no step's
}

void FaultDomains::log_quorum_change(const QuorumChange& change) {
  events_.emit("domain_quorum_changed", {{"domain", options_.index},
                                         {"error", change.why},
                                         {"step", change.step},
                                         {"old_generation", change.old_generation},
                                         {"generation", generation_},
                                         {"lost_domains", change.lost},
                                         {"members", members_},
                                         {"ranks_per_domain", ranks_per_member_},
                                         {"agreed_step", change.agreed_step},
                                         {"action", change.action},
                                         {"seconds", change.seconds}});
}

std::size_t FaultDomains::member_index() const {
  return static_cast<std::size_t>(std::find(members_.begin(), members_.end(), options_.index) -
                                  members_.begin());
}
std::vector<double> FaultDomains::conclude(const DomainStateAccess& state,
                                           checkpoint::TrainingState& healed,
                                           const std::optional<std::string>& shards_missing) {
  SharedDecision decision;
  const long step = in_flight_->step;
  try {
    // Sharded, conclude() is only reached when a shard did not arrive here: the step fails as a
    // lost peer would make it fail, and the leaders regroup (a new generation, new shard groups).
    // A domain where every shard arrived committed the step, and the resync heals this one.
    if (shards_missing) {
      group_.reset();  // peers still in the leaders' shard fail at once
      throw comm::GroupFailure(*shards_missing);
    }
    wait_unless_superseded(group_);  // a leader gone silent: the supervisor says so
    in_flight_->sent.get();
    const Vote vote = take_vote(in_flight_->values, members_.size());
    held_sums_ = std::move(in_flight_->values);
    decision.verdict = vote.ok ? kCommit : kAbandon;
    decision.loss = vote.loss;
    decision.skipped = vote.skipped;
    decision.admit_pending = vote.generation_pending;
    adopt_vote(vote, step);
    last_vote_loss_ = vote.loss;
  } catch (const comm::GroupFailure& e) {
    const auto detected = core::unix_time();
    const auto old_members = members_;
    const auto old_generation = generation_;
    ResyncPlan plan;
    for (bool settled = false; !settled;) {
      try {
        if (group_ == nullptr || generation_ == old_generation) regroup(e.what());
        plan = resync({.decided = state.committed_step()}, state, healed);
        decision.loss = agreed_loss_;
        settled = true;
      } catch (const comm::GroupFailure& again) {
        regroup(again.what());
      }
    }
    const ResyncAction action = plan.actions[member_index()];
    decision.verdict = action == ResyncAction::heal ? kHealed : kRewind;
    log_quorum_change(
        {.why = e.what(),
         .step = step,
         .old_generation = old_generation,
         .lost = missing_from(old_members, members_),
         .agreed_step = plan.agreed_step,
         .action = action == ResyncAction::heal ? "heal" : "rewind to the agreed step",
         .seconds = core::unix_time() - detected});
  }
  decision.generation = generation_;
  decision.members = members_;
  decision.ranks = ranks_per_member_;
  decision.shares = shares_per_member_;
  in_flight_ok_ = decision.verdict == kCommit;
  return decision.encode();
}

DomainStep FaultDomains::apply_decision(std::vector<double> encoded,
                                        std::span<core::Tensor* const> tensors,
                                        checkpoint::TrainingState* healed,
                                        const DomainStateAccess& state) {
  // One broadcast in the domain carries the decision and the sums. The decision's room is fixed
  // (as if every domain of the job were a member), so every rank knows the size.
  const std::size_t room = SharedDecision::room(static_cast<std::size_t>(options_.count));
  const std::size_t values = values_in(tensors);
  std::vector<double> header(room, 0.0);
  if (leader()) {
    if (encoded.size() > room)
      throw Error(fmt::format("a decision of {} values has room for {}", encoded.size(), room));
    std::copy(encoded.begin(), encoded.end(), header.begin());
    if (static_cast<int>(encoded.front()) == kCommit && values > 0 && held_sums_.size() != values)
      throw Error(fmt::format("domain {}: the sums held ({} values) do not fit the step's {}",
                              options_.index, held_sums_.size(), values));
  }
  // The members wait here while the leader exchanges with the other domains: without spinning,
  // so that the cores they share with it (and with the other domains' leaders, on a small
  // cluster) carry that exchange instead. Only the decision travels so: one small message,
  // which the next test finds complete. The sums follow in a plain broadcast that nobody waits
  // long in, since the leader is already there (a large non-blocking broadcast moves in pieces,
  // each waiting for a test of the members': 3 ms per step on 4 emulated domains of 2).
  const auto delivered = domain().ibroadcast(std::as_writable_bytes(std::span(header)), 0);
  comm::wait_yielding(*delivered);
  const SharedDecision decision = SharedDecision::decode(header);
  if (sharded()) require_equal_sizes(decision.members, decision.ranks);
  generation_ = decision.generation;
  members_ = decision.members;
  ranks_per_member_ = decision.ranks;
  shares_per_member_ = decision.shares;
  if (decision.verdict == kCommit && values > 0) {
    if (!leader()) held_sums_.resize(values);  // reused step after step
    domain().broadcast(std::as_writable_bytes(std::span(held_sums_)), 0);
    put_held_sums(tensors);
  }
  if (decision.verdict == kHealed) {
    checkpoint::TrainingState none;
    state.restore_in_domain(healed != nullptr ? *healed : none);
  }
  return {.verdict = decision.verdict == kCommit   ? StepVerdict::commit
                     : decision.verdict == kHealed ? StepVerdict::healed
                     : decision.verdict == kRewind ? StepVerdict::rewind
                                                   : StepVerdict::abandon,
          .loss = decision.loss,
          .skipped = decision.skipped,
          .admit_pending = decision.admit_pending};
}

void FaultDomains::admit_if_pending(const DomainStateAccess& state) {
  SharedDecision decision;
  checkpoint::TrainingState unused;
  if (leader()) {
    const auto started = std::chrono::steady_clock::now();
    const auto old_members = members_;
    const auto old_generation = generation_;
    const auto listed =
        store_->wait_for(rendezvous_keys::members(generation_ + 1), to_ms(options_.timeout_s));
    try {
      if (!listed) throw comm::GroupFailure("the next generation's members were not published");
      connect(generation_ + 1, parse_members(*listed));
      resync({.decided = state.committed_step()}, state, unused);
    } catch (const comm::GroupFailure& e) {
      // The joiner (or another member) did not make it: settle on whatever comes next.
      for (bool settled = false; !settled;) {
        try {
          regroup(e.what());
          resync({.decided = state.committed_step()}, state, unused);
          settled = true;
        } catch (const comm::GroupFailure&) {
        }
      }
    }
    decision.generation = generation_;
    decision.members = members_;
    decision.ranks = ranks_per_member_;
    decision.shares = shares_per_member_;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    // The supervisor can publish a generation without a domain whose job ended while that
    // domain's leader still voted: every member committed the step, and the members leave it
    // behind here, at a step boundary, instead of in a failed collective. The quorum changed
    // all the same, and the log says so as it does after a failure.
    if (const auto lost = missing_from(old_members, members_); !lost.empty())
      log_quorum_change({.why = fmt::format("generation {} was published without domain {}",
                                            generation_, fmt::join(lost, ", ")),
                         .step = state.committed_step(),
                         .old_generation = old_generation,
                         .lost = lost,
                         .agreed_step = state.committed_step(),
                         .action = "none: every domain had committed the step",
                         .seconds = seconds});
    if (owns_run_files() && !missing_from(members_, old_members).empty())
      events_.emit("domain_admitted", {{"generation", generation_},
                                       {"members", members_},
                                       {"ranks_per_domain", ranks_per_member_},
                                       {"step", state.committed_step()},
                                       {"seconds", seconds}});
  }
  apply_decision(decision.encode(), {}, nullptr, state);
}

}  // namespace hardy::resilience
