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
#include <thread>
#include <utility>

#include "domains/domain_store.hpp"
#include "hardy/checkpoint/broadcast_state.hpp"
#include "hardy/comm/gloo/communicator.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::resilience {

namespace {

using std::chrono::milliseconds;

milliseconds to_ms(double seconds) { return milliseconds(static_cast<long>(seconds * 1000.0)); }

enum Decision : int { kCommit = 0, kAbandon = 1, kHealed = 2, kRewind = 3 };

// The decision a leader broadcasts in its domain: verdict, loss, skipped, admit pending,
// generation, member count, members, ranks per member.
struct SharedDecision {
  int verdict = kCommit;
  double loss = 0, skipped = 0;
  bool admit_pending = false;
  std::size_t generation = 0;
  std::vector<int> members, ranks;

  std::vector<double> encode() const {
    std::vector<double> out{static_cast<double>(verdict),
                            loss,
                            skipped,
                            admit_pending ? 1.0 : 0.0,
                            static_cast<double>(generation),
                            static_cast<double>(members.size())};
    for (int m : members) out.push_back(m);
    for (int r : ranks) out.push_back(r);
    return out;
  }
  // The values a decision of a job of `domains` domains needs at most.
  static std::size_t room(std::size_t domains) { return 6 + 2 * domains; }
  static SharedDecision decode(const std::vector<double>& in) {
    SharedDecision d;
    d.verdict = static_cast<int>(in.at(0));
    d.loss = in.at(1);
    d.skipped = in.at(2);
    d.admit_pending = in.at(3) != 0;
    d.generation = static_cast<std::size_t>(in.at(4));
    const auto n = static_cast<std::size_t>(in.at(5));
    for (std::size_t i = 0; i < n; ++i) d.members.push_back(static_cast<int>(in.at(6 + i)));
    for (std::size_t i = 0; i < n; ++i) d.ranks.push_back(static_cast<int>(in.at(6 + n + i)));
    return d;
  }
};

std::size_t values_in(std::span<core::Tensor* const> tensors) {
  std::size_t total = 0;
  for (const core::Tensor* tensor : tensors) total += tensor->f32().size();
  return total;
}

// Every tensor in one buffer, so that all of them cross the network in one collective; tensor i
// multiplied by weights[i] when there are weights.
std::vector<float> pack(std::span<core::Tensor* const> tensors, std::span<const float> weights) {
  if (!weights.empty() && weights.size() != tensors.size())
    throw Error(
        fmt::format("FaultDomains: {} weights for {} tensors", weights.size(), tensors.size()));
  std::vector<float> flat;
  flat.reserve(values_in(tensors));
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto values = tensors[i]->f32();
    const float weight = weights.empty() ? 1.0f : weights[i];
    if (weight == 1.0f) {
      flat.insert(flat.end(), values.begin(), values.end());
      continue;
    }
    for (const float v : values) flat.push_back(v * weight);
  }
  return flat;
}

// The exception being handled, as the outcome of a collective that never started.
std::future<void> failure_in_future() {
  std::promise<void> failed;
  failed.set_exception(std::current_exception());
  return failed.get_future();
}

}  // namespace

FaultDomains::FaultDomains(DomainOptions options, const std::unique_ptr<comm::Communicator>& domain,
                           core::EventLog& events)
    : options_(std::move(options)), domain_(domain), events_(events) {
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
  return domain_share(global_batch, ranks_per_member_, member_index());
}

core::Shard FaultDomains::my_slice(std::size_t global_batch,
                                   std::span<const double> weights) const {
  if (!enabled()) return core::shard_of(global_batch, domain().rank(), domain().size(), weights);
  return rank_slice_in_domain(global_batch, ranks_per_member_, member_index(), domain().rank(),
                              domain().size(), weights);
}

std::uint64_t FaultDomains::split_digest() const {
  std::uint64_t digest = 1469598103934665603ull;  // FNV-1a over the members and their ranks
  const auto mix = [&](std::int64_t value) {
    digest = (digest ^ static_cast<std::uint64_t>(value)) * 1099511628211ull;
  };
  for (int member : members_) mix(member);
  mix(-1);
  for (int ranks : ranks_per_member_) mix(ranks);
  return digest;
}

core::Shard FaultDomains::my_domain_slice(std::size_t global_batch) const {
  if (!enabled()) return {0, global_batch};
  return domain_slice(global_batch, ranks_per_member_, member_index());
}

void FaultDomains::connect(std::size_t generation, const std::vector<int>& members) {
  const auto me = std::find(members.begin(), members.end(), options_.index);
  if (me == members.end())
    throw DomainExcluded(fmt::format("domain {} is not among generation {}'s members ({})",
                                     options_.index, generation, format_members(members)));
  group_.reset();  // its sockets close first, so late peers of the old group fail at once
  generation_ = generation;
  members_ = members;
  wait_until_members_ready(generation, members);
  group_ = comm::connect_gloo_group(*store_, {.prefix = fmt::format("gen{}", generation),
                                              .rank = static_cast<int>(me - members.begin()),
                                              .size = static_cast<int>(members.size()),
                                              .address = options_.address,
                                              .timeout = to_ms(options_.timeout_s),
                                              // Every member was ready and connects at once; one
                                              // that left for a newer generation meanwhile must not
                                              // hold the others for the membership timeout.
                                              .connect_timeout = to_ms(options_.timeout_s)});
}

void FaultDomains::wait_until_members_ready(std::size_t generation,
                                            const std::vector<int>& members) {
  // gloo's full-mesh connect waits for every member and cannot give up early: a member that died
  // after its generation was published would hold the others for gloo's own store timeout
  // (30 s; measured with two domains lost at once). So the members first say they are ready,
  // and a newer generation (the supervisor saw one of them go) ends the wait; otherwise it lasts
  // as long as the membership timeout (a joiner waits here for the members to reach a step
  // boundary). The connect after it is quick, and bounded by the domain timeout.
  try {
    store_->set(rendezvous_keys::ready(generation, options_.index), "ready");
  } catch (const IoError&) {
    // Said already (a generation connected twice is never published, but be lenient).
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(options_.membership_timeout_s);
  const auto newer = rendezvous_keys::members(generation + 1);
  for (int member : members) {
    const auto key = rendezvous_keys::ready(generation, member);
    while (!store_->try_get(key)) {
      if (store_->try_get(newer))
        throw comm::GroupFailure(fmt::format(
            "generation {} was replaced before domain {} was ready", generation, member));
      if (std::chrono::steady_clock::now() >= deadline)
        throw comm::GroupFailure(
            fmt::format("domain {} was not ready to connect generation {} within {:.0f} s", member,
                        generation, options_.membership_timeout_s));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  // A member that said ready may have left since for a newer generation (it saw that one before
  // this domain's mark): connecting this one would wait for it in vain.
  if (store_->try_get(newer))
    throw comm::GroupFailure(
        fmt::format("generation {} was replaced while its members got ready", generation));
}

void FaultDomains::regroup(const std::string& why) {
  for (;;) {
    try {
      store_->set(rendezvous_keys::failure(generation_, options_.index), why);
    } catch (const IoError&) {
      // Reported already in this generation.
    }
    const auto next = generation_ + 1;
    const auto listed =
        store_->wait_for(rendezvous_keys::members(next), to_ms(options_.membership_timeout_s));
    if (!listed)
      throw Error(fmt::format(
          "domain {}: generation {} failed ({}) and no next generation was published within "
          "{:.0f} s (is the supervisor alive?)",
          options_.index, generation_, why, options_.membership_timeout_s));
    try {
      connect(next, parse_members(*listed));
      return;
    } catch (const comm::GroupFailure& e) {
      std::cerr << fmt::format("hardy: domain {}: generation {} did not connect: {}\n",
                               options_.index, next, e.what());
    }
  }
}

ResyncPlan FaultDomains::resync(const MemberPosition& mine, const DomainStateAccess& state,
                                checkpoint::TrainingState& healed) {
  auto& group = *group_;
  const auto decided = group.allgather(mine.joining ? -1 : mine.decided);
  const auto joining = group.allgather(mine.joining ? 1 : 0);
  const auto ranks = group.allgather(domain().size());
  std::vector<MemberPosition> positions;
  for (std::size_t i = 0; i < decided.size(); ++i)
    positions.push_back({decided[i], joining[i] != 0});
  ResyncPlan plan = plan_resync(positions);
  ranks_per_member_.assign(ranks.begin(), ranks.end());
  const bool anyone_heals =
      std::count(plan.actions.begin(), plan.actions.end(), ResyncAction::heal) > 0;
  if (plan.from_persisted) {
    plan = resume_persisted(std::move(plan), state, healed);
  } else if (anyone_heals) {
    const auto started = std::chrono::steady_clock::now();
    const auto root = static_cast<int>(plan.heal_source);
    checkpoint::TrainingState sent;
    if (group.rank() == root) sent = state.committed();
    checkpoint::broadcast_state(group, sent, root);
    if (plan.actions[static_cast<std::size_t>(group.rank())] == ResyncAction::heal) {
      healed = std::move(sent);
      events_.emit(
          "domain_healed",
          {{"domain", options_.index},
           {"generation", generation_},
           {"from_domain", members_[plan.heal_source]},
           {"step", healed.step},
           {"bytes", checkpoint::serialize(healed).size()},
           {"seconds",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()}});
    }
  }
  // The loss of the agreed step, from a member that saw its vote complete. Every member that
  // resyncs runs the same collectives, whichever path brought it here: a joiner starting, a
  // member admitting it and a member regrouping after a failed step can meet in one generation
  // (a relaunched domain let in while a survivor still waited out a partitioned peer). gloo
  // aborted the process on the mismatch when only the last of them exchanged the loss.
  std::vector<double> losses(members_.size(), 0.0);
  losses[member_index()] = last_vote_loss_;
  group.allreduce_sum(losses);
  agreed_loss_ = losses[plan.heal_source];
  // So are the agreed step's log lines, from the member that holds that step: whoever writes the
  // run files after this logs them if the writer died before it did.
  const auto source = static_cast<int>(plan.heal_source);
  std::string lines;
  if (group.rank() == source)
    lines = plan.from_persisted     ? std::exchange(persisted_lines_, {})
            : state.committed_lines ? state.committed_lines()
                                    : std::string();
  const auto lengths = group.allgather(static_cast<std::int64_t>(lines.size()));
  lines.resize(static_cast<std::size_t>(lengths[plan.heal_source]));
  if (!lines.empty()) {
    group.broadcast(std::as_writable_bytes(std::span(lines.data(), lines.size())), source);
    if (state.adopt_lines) state.adopt_lines(lines);
  }
  return plan;
}

ResyncPlan FaultDomains::resume_persisted(ResyncPlan plan, const DomainStateAccess& state,
                                          checkpoint::TrainingState& healed) {
  // No live domain holds committed state: each member offers the newest it can read (the run
  // directory's newest checkpoint, which every one reads alike, or its leader node's own
  // snapshot, which may be newer: with the default snapshots the run directory may hold no
  // checkpoint at all), and every member takes the newest from the one that has it. With none
  // anywhere, all go on from the start, where each fresh model stands. Taking the run
  // directory's alone, a job on 4 domains whose members were all relaunched within a minute
  // went back from step 2,335 to the start (the goodput bench, 2026-11-30).
  std::optional<DomainStateAccess::Persisted> found;
  if (state.persisted) found = state.persisted();
  const auto steps = group_->allgather(found ? found->state.step : -1);
  std::size_t source = 0;  // the lowest member with the newest state
  for (std::size_t i = 1; i < steps.size(); ++i)
    if (steps[i] > steps[source]) source = i;
  const std::string from =
      comm::broadcast_text(*group_, found ? found->source : "", static_cast<int>(source));
  if (steps[source] < 0) {
    plan.agreed_step = 0;
    plan.actions.assign(plan.actions.size(), ResyncAction::keep);
  } else {
    plan.agreed_step = steps[source];
    plan.heal_source = source;
    checkpoint::TrainingState sent;
    if (member_index() == source) {
      events_.emit("state_restored", {{"source", found->source},
                                      {"step", found->state.step},
                                      {"seconds", found->seconds},
                                      {"path", found->path}});
      persisted_lines_ = std::move(found->state.committed_lines);
      sent = std::move(found->state);
    }
    checkpoint::broadcast_state(*group_, sent, static_cast<int>(source));
    healed = std::move(sent);
  }
  nlohmann::json resumed = {{"domain", options_.index},
                            {"generation", generation_},
                            {"step", plan.agreed_step},
                            {"source", steps[source] < 0 ? std::string("start") : from}};
  if (steps[source] >= 0) resumed["from_domain"] = members_[source];
  events_.emit("domains_resumed", std::move(resumed));
  return plan;
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
  start_step(step, tensors, loss, skipped, /*ok=*/true, weights, /*in_background=*/false);
  return settle_exchange(tensors, state);
}

void FaultDomains::start_exchange(long step, std::span<core::Tensor* const> tensors, double loss,
                                  double skipped, std::span<const float> weights) {
  start_step(step, tensors, loss, skipped, /*ok=*/true, weights, /*in_background=*/true);
}

DomainStep FaultDomains::settle_exchange(std::span<core::Tensor* const> tensors,
                                         const DomainStateAccess& state) {
  checkpoint::TrainingState healed;
  std::vector<double> decision;
  std::optional<std::string> shards_missing;
  if (sharded()) {
    const ShardsGathered gathered = gather_shards();
    if (gathered.vote) {
      in_flight_.reset();
      return commit_gathered(*gathered.vote, tensors);
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
    return apply_decision(decision.encode(), tensors, nullptr, state);
  }
  // The other domains wait in this step's exchange (or will): join it with nothing to add and a
  // vote against, so that every domain drops the step and redoes it over the new split.
  start_step(next, tensors, 0, 0, /*ok=*/false, {}, /*in_background=*/false);
  return settle_exchange(tensors, state);
}

namespace {

// The members of `from` that `in` lacks (both ascending).
std::vector<int> missing_from(const std::vector<int>& from, const std::vector<int>& in) {
  std::vector<int> missing;
  std::ranges::set_difference(from, in, std::back_inserter(missing));
  return missing;
}

}  // namespace

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

void FaultDomains::start_step(long step, std::span<core::Tensor* const> tensors, double loss,
                              double skipped, bool ok, std::span<const float> weights,
                              bool in_background) {
  if (in_flight_ && in_flight_->relayed && in_flight_->step == step && ok && weights.empty()) {
    finish_relay(loss, skipped);  // the pieces left already
    return;
  }
  if (in_flight_)
    throw Error(fmt::format("domain {}: step {}'s exchange started while step {}'s is in flight",
                            options_.index, step, in_flight_->step));
  forget_ended_abandoned();
  in_flight_ = std::make_unique<InFlight>();
  in_flight_->step = step;
  if (leader()) {
    in_flight_step_ = step;
    in_flight_ok_.reset();
  } else if (!sharded()) {
    return;  // the leader alone talks to the other domains
  }
  std::vector<float>& values = in_flight_->values;
  try {
    // A domain that votes against adds nothing (its tensors may be half-done).
    values = ok ? pack(tensors, weights) : std::vector<float>(values_in(tensors), 0.0f);
    in_flight_->total = values.size();
    in_flight_->segments = {{.begin = 0, .size = values.size()}};
    if (leader()) in_flight_->vote = my_vote(ok, loss, skipped);
    if (sharded()) {
      const core::Shard mine = core::shard_of(values.size(), domain().rank(), domain().size());
      values = std::vector<float>(values.begin() + static_cast<std::ptrdiff_t>(mine.begin),
                                  values.begin() + static_cast<std::ptrdiff_t>(mine.end));
    }
    // One collective for every tensor and the vote: between domains each costs a network
    // latency. Sharded, the vote rides with the leader's shard.
    if (leader()) append_vote(values, in_flight_->vote, member_index(), members_.size());
  } catch (const comm::GroupFailure&) {
    in_flight_->sent = failure_in_future();  // conclude() takes it as the collective's failure
    return;
  }
  comm::Communicator* group = nullptr;
  try {
    group = &exchange_group();
  } catch (const comm::GroupFailure&) {
    in_flight_->sent = failure_in_future();
    return;
  }
  // Nothing else touches the group until conclude(): the thread owns it meanwhile. Always on a
  // thread, even when the caller waits at once, so that the wait can stop for a newer generation
  // (wait_unless_superseded).
  in_flight_->sent =
      std::async(std::launch::async, [group, &values] { group->allreduce_sum(values); });
}

void FaultDomains::forget_ended_abandoned() {
  // Collectives a newer generation left behind, once they ended on their own.
  std::erase_if(abandoned_, [](const Abandoned& a) {
    return a.exchange->sent.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  });
}

Vote FaultDomains::my_vote(bool ok, double loss, double skipped) const {
  // A relaunched domain asks to join: every member learns it through the vote and admits it
  // after this step, so all switch generation at the same step.
  const bool pending = store_->try_get(rendezvous_keys::members(generation_ + 1)).has_value();
  Vote mine{.ok = ok,
            .generation_pending = pending,
            .loss = loss,
            .skipped = skipped,
            .ranks = std::vector<int>(members_.size(), 0)};
  mine.ranks[member_index()] = domain().size();
  return mine;
}

void FaultDomains::start_relay(long step, std::size_t total, float scale) {
  if (!sharded()) throw Error("FaultDomains: start_relay() without --domain-exchange sharded");
  if (in_flight_)
    throw Error(fmt::format("domain {}: step {}'s relay started while step {}'s is in flight",
                            options_.index, step, in_flight_->step));
  forget_ended_abandoned();
  in_flight_ = std::make_unique<InFlight>();
  InFlight& flight = *in_flight_;
  flight.step = step;
  flight.total = total;
  flight.scale = scale;
  flight.relayed = true;
  // Room for every piece (this rank's shards of the buckets take at most all the values) and
  // the leader's vote: the thread sums pieces in place while later ones are written after them.
  flight.values.resize(total + (leader() ? vote_values(members_.size()) : 0));
  if (leader()) {
    in_flight_step_ = step;
    in_flight_ok_.reset();
  }
  comm::Communicator* group = nullptr;
  try {
    group = &exchange_group();
  } catch (const comm::GroupFailure&) {
    flight.sent = failure_in_future();  // the pieces go nowhere; the gather finds the shard missing
    return;
  }
  flight.queue = std::make_unique<SumQueue>();
  flight.sent =
      std::async(std::launch::async, [queue = flight.queue.get(), group] { queue->run(*group); });
}

void FaultDomains::relay_bucket(std::span<const RelayedPart> parts) {
  if (!in_flight_ || !in_flight_->relayed)
    throw Error("FaultDomains: relay_bucket() without start_relay()");
  InFlight& flight = *in_flight_;
  std::size_t begin = std::numeric_limits<std::size_t>::max(), end = 0, size = 0;
  for (const RelayedPart& part : parts) {
    begin = std::min(begin, part.offset);
    end = std::max(end, part.offset + part.sums.size());
    size += part.sums.size();
  }
  if (parts.empty() || end - begin != size || end > flight.total)
    throw Error(fmt::format(
        "FaultDomains: a relayed bucket of {} values is not one range of the step's {} values",
        size, flight.total));
  flight.segments.push_back({.begin = begin, .size = size});
  // This rank's shard of the bucket: the same range at this rank index in every domain, so each
  // shard group sums the same pieces in the same order.
  const core::Shard mine = core::shard_of(size, domain().rank(), domain().size());
  if (mine.size() == 0) return;
  const std::span<float> piece = std::span(flight.values).subspan(flight.filled, mine.size());
  const std::size_t lo = begin + mine.begin, hi = begin + mine.end;
  for (const RelayedPart& part : parts) {
    const std::size_t from = std::max(lo, part.offset);
    const std::size_t to = std::min(hi, part.offset + part.sums.size());
    for (std::size_t at = from; at < to; ++at)
      piece[at - lo] = part.sums[at - part.offset] * flight.scale;  // as finish() scales them
  }
  const std::size_t start = flight.filled;
  flight.filled += mine.size();
  if (!flight.queue) return;
  if (!leader()) {
    flight.queue->queue(piece);
    return;
  }
  // The leader holds its newest piece back: the vote rides with the step's last one (one
  // collective less, each a network latency between domains). Pieces lie end to end.
  if (flight.held_back)
    flight.queue->queue(
        std::span(flight.values).subspan(*flight.held_back, start - *flight.held_back));
  flight.held_back = start;
}

void FaultDomains::finish_relay(double loss, double skipped) {
  InFlight& flight = *in_flight_;
  std::size_t relayed = 0;
  for (const Segment& segment : flight.segments) relayed += segment.size;
  if (relayed != flight.total)
    throw Error(fmt::format("domain {}: step {} relayed {} of its {} values", options_.index,
                            flight.step, relayed, flight.total));
  if (leader()) {
    try {
      flight.vote = my_vote(/*ok=*/true, loss, skipped);
    } catch (const comm::GroupFailure&) {
      if (flight.queue) flight.queue->stop();
      if (flight.sent.valid()) flight.sent.wait();
      flight.sent = failure_in_future();
      return;
    }
    // The vote rides with the last piece, in the leaders' group (shard 0's), right behind it.
    std::vector<float> vote;
    append_vote(vote, flight.vote, member_index(), members_.size());
    std::ranges::copy(vote, flight.values.begin() + static_cast<std::ptrdiff_t>(flight.filled));
    const std::size_t from = flight.held_back.value_or(flight.filled);
    flight.filled += vote.size();
    if (flight.queue)
      flight.queue->queue(std::span(flight.values).subspan(from, flight.filled - from));
  }
  if (flight.queue) flight.queue->close();
}

comm::Communicator& FaultDomains::exchange_group() {
  if (leader()) return *group_;
  // At a new generation's first step: every member's rank of this index connects in that step.
  if (shard_group_ == nullptr || shard_generation_ != generation_) {
    shard_group_.reset();  // its sockets close first, so late peers of the old group fail at once
    shard_group_ = comm::connect_gloo_group(
        *store_, {.prefix = fmt::format("gen{}-shard{}", generation_, domain().rank()),
                  .rank = static_cast<int>(member_index()),
                  .size = static_cast<int>(members_.size()),
                  .address = options_.address,
                  .timeout = to_ms(options_.timeout_s),
                  .connect_timeout = to_ms(options_.timeout_s)});
    shard_generation_ = generation_;
  }
  return *shard_group_;
}

FaultDomains::ShardsGathered FaultDomains::gather_shards() {
  // Each rank's block: its shard, padded to the largest with the vote's room (the leader's shard
  // carries the vote), then 1 when it arrived, 0 when not.
  const std::size_t total = in_flight_->total;
  const std::vector<Segment> segments = in_flight_->segments;
  const int ranks = domain().size();
  const std::size_t votes = vote_values(members_.size());
  // The pieces of rank r: its shard of each segment, in order.
  const auto pieces_of = [&](int r) {
    std::size_t size = 0;
    for (const Segment& segment : segments) size += core::shard_of(segment.size, r, ranks).size();
    return size;
  };
  const std::size_t block = pieces_of(0) + votes + 1;  // rank 0's shards are the largest
  std::vector<float> mine(block, 0.0f);
  try {
    wait_unless_superseded(leader() ? group_ : shard_group_);
    in_flight_->sent.get();
    const std::size_t sent = in_flight_->relayed ? in_flight_->filled : in_flight_->values.size();
    std::copy_n(in_flight_->values.begin(), sent, mine.begin());
    mine.back() = 1.0f;
  } catch (const comm::GroupFailure& e) {
    std::cerr << fmt::format("hardy: domain {} rank {}: step {}'s shard: {}\n", options_.index,
                             domain().rank(), in_flight_->step, e.what());
  }
  std::vector<float> all(block * static_cast<std::size_t>(ranks));
  // Waited for without spinning: a rank whose shard arrived early gives its core to the others'
  // exchanges (the nodes of a small cluster run several domains' ranks).
  const auto gathered = domain().iallgather_blocks(std::as_bytes(std::span(mine)),
                                                   std::as_writable_bytes(std::span(all)));
  comm::wait_yielding(*gathered);
  held_sums_.resize(total);
  std::vector<int> missing;
  for (int r = 0; r < ranks; ++r) {
    auto from = all.begin() + static_cast<std::ptrdiff_t>(block * static_cast<std::size_t>(r));
    if (*(from + static_cast<std::ptrdiff_t>(block - 1)) != 1.0f) missing.push_back(r);
    for (const Segment& segment : segments) {
      const core::Shard part = core::shard_of(segment.size, r, ranks);
      std::copy_n(from, part.size(),
                  held_sums_.begin() + static_cast<std::ptrdiff_t>(segment.begin + part.begin));
      from += static_cast<std::ptrdiff_t>(part.size());
    }
  }
  if (!missing.empty())
    return {.vote = std::nullopt,
            .missing = fmt::format("the shards of ranks {} of domain {} did not arrive",
                                   fmt::join(missing, ", "), options_.index)};
  const auto vote_at = all.begin() + static_cast<std::ptrdiff_t>(pieces_of(0));
  std::vector<float> vote(vote_at, vote_at + static_cast<std::ptrdiff_t>(votes));
  return {.vote = take_vote(vote, members_.size()), .missing = {}};
}

void FaultDomains::wait_unless_superseded(std::unique_ptr<comm::Communicator>& group) {
  // A frozen or cut-off peer in the group (its node stopped or unreachable, its sockets open)
  // holds the collective for the whole --domain-timeout, while the supervisor publishes a
  // generation without that peer's domain as soon as the domain ends (the runtime's keepalive,
  // about 4 s). So the wait also looks for such a generation, and leaves the collective to end on
  // its own: its thread keeps its buffer and group (abandoned_), and the step fails here as after
  // a lost peer (a shard not arrived; the leaders' exchange failed), so the leaders regroup. A
  // newer generation that only adds members (a relaunched domain waiting to be let in at a step
  // boundary) is no reason to stop. The leaders' exchange waited out the domain timeout (10 s)
  // for a silent leader's node before it watched too.
  const auto member_lost = [this] {
    for (std::size_t g = generation_ + 1;; ++g) {
      const auto listed = store_->try_get(rendezvous_keys::members(g));
      if (!listed) return false;
      if (!missing_from(members_, parse_members(*listed)).empty()) return true;
    }
  };
  auto looked = std::chrono::steady_clock::now();
  while (in_flight_->sent.wait_for(std::chrono::milliseconds(2)) != std::future_status::ready) {
    // A look at the store every 20 ms at most: a Redis store is a round trip away.
    if (std::chrono::steady_clock::now() - looked < std::chrono::milliseconds(20)) continue;
    looked = std::chrono::steady_clock::now();
    if (!member_lost()) continue;
    abandoned_.push_back({.group = std::move(group), .exchange = std::move(in_flight_)});
    in_flight_ = std::make_unique<InFlight>();
    in_flight_->step = abandoned_.back().exchange->step;
    in_flight_->total = abandoned_.back().exchange->total;
    in_flight_->segments = abandoned_.back().exchange->segments;
    throw comm::GroupFailure(fmt::format(
        "a generation after {} without one of its members was published while the step's "
        "exchange waited",
        generation_));
  }
}

DomainStep FaultDomains::commit_gathered(const Vote& vote, std::span<core::Tensor* const> tensors) {
  // Every rank of the domain gathered the same blocks: all decide alike, with no word from the
  // leader. A domain that votes against would have sent nothing (sharded, none does: a domain
  // that loses a rank ends), so the step is dropped everywhere.
  if (!vote.ok) return {.verdict = StepVerdict::abandon};
  require_equal_sizes(members_, vote.ranks);
  ranks_per_member_ = vote.ranks;
  if (leader()) {
    last_vote_loss_ = vote.loss;
    in_flight_ok_ = true;
  }
  put_held_sums(tensors);
  return {.verdict = StepVerdict::commit,
          .loss = vote.loss,
          .skipped = vote.skipped,
          .admit_pending = vote.generation_pending};
}

void FaultDomains::require_equal_sizes(const std::vector<int>& members,
                                       const std::vector<int>& ranks) const {
  if (std::ranges::any_of(ranks, [&](int r) { return r != domain().size(); }))
    throw Error(fmt::format(
        "--domain-exchange sharded needs domains of equal size; domains {} have {} ranks",
        format_members(members), fmt::join(ranks, ", ")));
}

void FaultDomains::put_held_sums(std::span<core::Tensor* const> tensors) const {
  std::size_t at = 0;
  for (core::Tensor* tensor : tensors) {
    const auto into = tensor->f32();
    std::copy_n(held_sums_.begin() + static_cast<std::ptrdiff_t>(at), into.size(), into.begin());
    at += into.size();
  }
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
    wait_unless_superseded(group_);
    in_flight_->sent.get();
    const Vote vote = take_vote(in_flight_->values, members_.size());
    held_sums_ = std::move(in_flight_->values);
    decision.verdict = vote.ok ? kCommit : kAbandon;
    decision.loss = vote.loss;
    decision.skipped = vote.skipped;
    decision.admit_pending = vote.generation_pending;
    ranks_per_member_ = vote.ranks;
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
