#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <iostream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "domains/domain_store.hpp"
#include "domains/fault_domains.hpp"
#include "domains/fault_domains_internal.hpp"
#include "hardy/checkpoint/broadcast_state.hpp"
#include "hardy/comm/gloo/communicator.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::resilience {

using namespace fault_domains_internal;

void FaultDomains::connect(std::size_t generation, const std::vector<int>& members) {
  const auto me = std::find(members.begin(), members.end(), options_.index);
  if (me == members.end())
    throw DomainExcluded(fmt::format("domain {} is not among generation {}'s members ({})",
                                     options_.index, generation, format_members(members)));
  group_.reset();  // its sockets close first, so late peers of the old group fail at once
  generation_ = generation;
  members_ = members;
  wait_until_members_ready(generation, members);
  const comm::GlooGroupOptions group{.prefix = fmt::format("gen{}", generation),
                                     .rank = static_cast<int>(me - members.begin()),
                                     .size = static_cast<int>(members.size()),
                                     .address = options_.address,
                                     .timeout = to_ms(options_.timeout_s),
                                     // Every member was ready and connects at once; one that left
                                     // for a newer generation meanwhile must not hold the others
                                     // for the membership timeout.
                                     .connect_timeout = to_ms(options_.timeout_s)};
  // On a thread, so that the wait can be given up: a member that said it was ready and went
  // silent since (its node froze or was cut off: its address no longer answers) holds gloo's
  // full-mesh connect for the whole domain timeout, while the supervisor publishes a generation
  // without it as soon as its domain's launch ends. In a goodput bench run a domain cut off
  // 0.5 s after another froze still said it was ready for the generation without the frozen one,
  // and the generations that followed took 54 s to settle (2026-11-30).
  forget_ended_abandoned();
  auto connecting = std::async(std::launch::async, [store = store_.get(), group] {
    return comm::connect_gloo_group(*store, group);
  });
  auto looked = std::chrono::steady_clock::now();
  while (connecting.wait_for(std::chrono::milliseconds(2)) != std::future_status::ready) {
    if (std::chrono::steady_clock::now() - looked < std::chrono::milliseconds(20)) continue;
    looked = std::chrono::steady_clock::now();
    if (!member_lost_after(generation, members)) continue;
    abandoned_connects_.push_back(std::move(connecting));
    throw comm::GroupFailure(fmt::format(
        "generation {} was replaced by one without one of its members while it connected",
        generation));
  }
  group_ = connecting.get();
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
  split_by_ranks();  // the members changed: the split starts again from their sizes
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

}  // namespace hardy::resilience
