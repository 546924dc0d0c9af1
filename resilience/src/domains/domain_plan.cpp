#include "domains/domain_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "hardy/core/support/error.hpp"

namespace hardy::resilience {

std::vector<int> parse_members(const std::string& text) {
  std::vector<int> members;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    int value = -1;
    const char* first = text.data() + start;
    const char* last = text.data() + comma;
    const auto [end, error] = std::from_chars(first, last, value);
    if (error != std::errc() || end != last || value < 0 ||
        (!members.empty() && value <= members.back()))
      throw InvalidArgument(fmt::format(
          "'{}' is not a list of domains (ascending whole numbers separated by commas)", text));
    members.push_back(value);
    start = comma + 1;
  }
  return members;
}

std::string format_members(const std::vector<int>& members) {
  return fmt::format("{}", fmt::join(members, ","));
}

core::Shard domain_slice(std::size_t global_batch, const std::vector<int>& ranks_per_domain,
                         std::size_t domain, std::span<const double> domain_shares) {
  if (!domain_shares.empty()) {
    if (domain_shares.size() != ranks_per_domain.size())
      throw InvalidArgument(fmt::format("{} domain shares given for {} domains",
                                        domain_shares.size(), ranks_per_domain.size()));
    return core::shard_of(global_batch, static_cast<int>(domain),
                          static_cast<int>(ranks_per_domain.size()), domain_shares);
  }
  int total = 0, offset = 0;
  for (std::size_t i = 0; i < ranks_per_domain.size(); ++i) {
    if (i < domain) offset += ranks_per_domain[i];
    total += ranks_per_domain[i];
  }
  const int count = ranks_per_domain.at(domain);
  if (count <= 0 || total <= 0)
    throw InvalidArgument(
        fmt::format("domain {} has no ranks to take a share of the batch", domain));
  return {core::shard_of(global_batch, offset, total).begin,
          core::shard_of(global_batch, offset + count - 1, total).end};
}

core::Shard rank_slice_in_domain(std::size_t global_batch, const std::vector<int>& ranks_per_domain,
                                 std::size_t domain, int rank, int live_ranks,
                                 std::span<const double> weights,
                                 std::span<const double> domain_shares) {
  const core::Shard slice = domain_slice(global_batch, ranks_per_domain, domain, domain_shares);
  const core::Shard inner = core::shard_of(slice.size(), rank, live_ranks, weights);
  return {slice.begin + inner.begin, slice.begin + inner.end};
}

bool synchronizes(long step, int sync_every, long last_step) {
  if (sync_every < 1) throw InvalidArgument("domains must meet at least every step");
  return step % sync_every == 0 || step == last_step;
}

double domain_share(std::size_t global_batch, const std::vector<int>& ranks_per_domain,
                    std::size_t domain, std::span<const double> domain_shares) {
  if (global_batch == 0) throw InvalidArgument("an empty global batch has no shares");
  return static_cast<double>(
             domain_slice(global_batch, ranks_per_domain, domain, domain_shares).size()) /
         static_cast<double>(global_batch);
}

namespace {
// not ok, pending, loss (a float and its remainder), skipped; then per member its live ranks,
// its own work (seconds), its samples and the share the lowest member asks for.
constexpr std::size_t kVoteHeader = 5;
constexpr std::size_t kPerMember = 4;
}  // namespace

std::size_t vote_values(std::size_t members) { return kVoteHeader + kPerMember * members; }

void append_vote(std::vector<float>& buffer, const Vote& mine, std::size_t my_index,
                 std::size_t members) {
  const std::size_t at = buffer.size();
  buffer.resize(at + vote_values(members), 0.0f);
  const auto loss_high = static_cast<float>(mine.loss);
  buffer[at] = mine.ok ? 0.0f : 1.0f;
  buffer[at + 1] = mine.generation_pending ? 1.0f : 0.0f;
  buffer[at + 2] = loss_high;
  buffer[at + 3] = static_cast<float>(mine.loss - static_cast<double>(loss_high));
  buffer[at + 4] = static_cast<float>(mine.skipped);
  // Each slot has one non-zero addend at most: the sums are exact, alike on every member.
  float* slots = buffer.data() + at + kVoteHeader;
  const auto own_slot = [&](const auto& values, std::size_t row) {
    if (!values.empty()) slots[row * members + my_index] = static_cast<float>(values.at(my_index));
  };
  own_slot(mine.ranks, 0);
  own_slot(mine.own_s, 1);
  own_slot(mine.own_samples, 2);
  if (!mine.shares.empty()) {
    if (mine.shares.size() != members)
      throw Error(fmt::format("{} shares voted for {} members", mine.shares.size(), members));
    for (std::size_t i = 0; i < members; ++i)
      slots[3 * members + i] = static_cast<float>(mine.shares[i]);
  }
}

Vote take_vote(std::vector<float>& buffer, std::size_t members) {
  if (buffer.size() < vote_values(members))
    throw Error(fmt::format("a buffer of {} values cannot hold a vote of {} members", buffer.size(),
                            members));
  const std::size_t at = buffer.size() - vote_values(members);
  Vote vote;
  vote.ok = buffer[at] == 0.0f;
  vote.generation_pending = buffer[at + 1] > 0.0f;
  vote.loss = static_cast<double>(buffer[at + 2]) + static_cast<double>(buffer[at + 3]);
  vote.skipped = buffer[at + 4];
  const float* slots = buffer.data() + at + kVoteHeader;
  bool shared_out = false;
  for (std::size_t i = 0; i < members; ++i) {
    vote.ranks.push_back(static_cast<int>(slots[i]));
    vote.own_s.push_back(slots[members + i]);
    vote.own_samples.push_back(slots[2 * members + i]);
    shared_out = shared_out || slots[3 * members + i] > 0.0f;
  }
  // Shares count only where every member has one: a split must give each a slice.
  if (shared_out)
    for (std::size_t i = 0; i < members; ++i) vote.shares.push_back(slots[3 * members + i]);
  if (std::ranges::any_of(vote.shares, [](double s) { return !(s > 0); })) vote.shares.clear();
  buffer.resize(at);
  return vote;
}

ResyncPlan plan_resync(const std::vector<MemberPosition>& positions) {
  if (positions.empty()) throw InvalidArgument("a resync needs at least one member");
  ResyncPlan plan;
  plan.agreed_step = -1;
  for (const auto& p : positions)
    if (!p.joining) plan.agreed_step = std::max(plan.agreed_step, p.decided);
  if (plan.agreed_step < 0) {
    plan.from_persisted = true;
    plan.actions.assign(positions.size(), ResyncAction::heal);
    return plan;
  }
  for (std::size_t i = 0; i < positions.size(); ++i)
    if (!positions[i].joining && positions[i].decided == plan.agreed_step) {
      plan.heal_source = i;
      break;
    }
  for (const auto& p : positions)
    plan.actions.push_back(!p.joining && p.decided == plan.agreed_step ? ResyncAction::keep
                                                                       : ResyncAction::heal);
  return plan;
}

}  // namespace hardy::resilience
