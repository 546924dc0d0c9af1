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
#include "domains/fault_domains.hpp"
#include "domains/fault_domains_internal.hpp"
#include "hardy/checkpoint/broadcast_state.hpp"
#include "hardy/comm/gloo/communicator.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::resilience {

using namespace fault_domains_internal;

void FaultDomains::start_step(long step, std::span<core::Tensor* const> tensors, double loss,
                              double skipped, bool ok, std::span<const float> weights) {
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
  // Nothing else touches the group until conclude(): the thread owns it meanwhile. Every rank
  // that sends does so on a thread, so that it can stop waiting for a peer gone silent once the
  // supervisor publishes a generation without it (wait_unless_superseded): the leader in
  // conclude(), the others (sharded) in gather_shards.
  in_flight_->sent =
      std::async(std::launch::async, [group, &values] { group->allreduce_sum(values); });
}

void FaultDomains::forget_ended_abandoned() {
  // Collectives and connects a newer generation left behind, once they ended on their own.
  std::erase_if(abandoned_, [](const Abandoned& a) {
    return a.exchange->sent.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  });
  std::erase_if(abandoned_connects_, [](const std::future<std::unique_ptr<comm::Communicator>>& c) {
    return c.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  });
}

bool FaultDomains::member_lost_after(std::size_t generation,
                                     const std::vector<int>& members) const {
  for (std::size_t g = generation + 1;; ++g) {
    const auto listed = store_->try_get(rendezvous_keys::members(g));
    if (!listed) return false;
    if (!missing_from(members, parse_members(*listed)).empty()) return true;
  }
}

Vote FaultDomains::my_vote(bool ok, double loss, double skipped) const {
  // A relaunched domain asks to join: every member learns it through the vote and admits it
  // after this step, so all switch generation at the same step.
  const bool pending = store_->try_get(rendezvous_keys::members(generation_ + 1)).has_value();
  Vote mine{.ok = ok,
            .generation_pending = pending,
            .loss = loss,
            .skipped = skipped,
            .ranks = std::vector<int>(members_.size(), 0),
            .own_s = std::vector<double>(members_.size(), 0.0),
            .own_samples = std::vector<double>(members_.size(), 0.0),
            .shares = {}};
  mine.ranks[member_index()] = domain().size();
  mine.own_s[member_index()] = own_s_;
  mine.own_samples[member_index()] = own_samples_;
  if (owns_run_files()) mine.shares = published_shares_;
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
  // A frozen peer in this shard's group (its node stopped, its sockets open) holds the
  // collective for the whole --domain-timeout, while the supervisor publishes a generation
  // without that peer's domain as soon as the domain ends. So the wait also looks for such a
  // generation, and leaves the collective to end on its own: its thread keeps its buffer and
  // group (abandoned_), and the shard counts as not arrived, so the leader regroups. A newer
  // generation that only adds members (a relaunched domain waiting to be let in at a step
  // boundary) is no reason to stop.
  // The leaders watch too (their exchange runs on a thread): a leader whose node froze holds the
  // leaders' group as a frozen shard peer holds its own. They did not until the connect could be
  // given up as well (connect()): watching, they regrouped 4.3 s after a leader's node froze
  // instead of 10 s, but in a goodput bench run a second domain, cut off 0.5 s after the first
  // froze, still reached the file store and said it was ready for the first generation without
  // the frozen one; the survivors, there early, waited out gloo's connect to it, and the
  // generations that followed took 54 s to settle (2026-11-30).
  auto looked = std::chrono::steady_clock::now();
  while (in_flight_->sent.wait_for(std::chrono::milliseconds(2)) != std::future_status::ready) {
    // A look at the store every 20 ms at most: a Redis store is a round trip away.
    if (std::chrono::steady_clock::now() - looked < std::chrono::milliseconds(20)) continue;
    looked = std::chrono::steady_clock::now();
    if (!member_lost_after(generation_, members_)) continue;
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

DomainStep FaultDomains::commit_gathered(const Vote& vote, std::span<core::Tensor* const> tensors,
                                         long step) {
  // Every rank of the domain gathered the same blocks: all decide alike, with no word from the
  // leader. A domain that votes against would have sent nothing (sharded, none does: a domain
  // that loses a rank ends), so the step is dropped everywhere.
  if (!vote.ok) return {.verdict = StepVerdict::abandon};
  require_equal_sizes(members_, vote.ranks);
  adopt_vote(vote, step);
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

}  // namespace hardy::resilience
