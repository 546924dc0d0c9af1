// The fault-domain protocol's decisions (resilience/src/domains/domain_plan.hpp), without any
// domain.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>

#include "domains/domain_plan.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy;
using namespace hardy::resilience;

TEST_CASE("members lists are ascending whole numbers, nothing else") {
  CHECK(parse_members("0,2,3") == std::vector<int>{0, 2, 3});
  CHECK(parse_members("5") == std::vector<int>{5});
  CHECK(format_members({0, 2, 3}) == "0,2,3");
  for (const char* bad : {"", "1,,2", "2,1", "1,1", "a", "-1", "1 ,2", "1,2,"})
    CHECK_THROWS_AS(parse_members(bad), InvalidArgument);
}

TEST_CASE("the global batch splits over domains as over their ranks, every sample once") {
  // With every domain at the size it reported, each rank gets exactly its slice of the flat
  // job-wide split: domains change nothing about which rank sees which sample.
  const std::vector<int> ranks{2, 3, 1, 2};
  const int total = std::accumulate(ranks.begin(), ranks.end(), 0);
  for (std::size_t batch : {8u, 16u, 13u, 100u}) {
    int flat = 0;
    for (std::size_t d = 0; d < ranks.size(); ++d)
      for (int r = 0; r < ranks[d]; ++r, ++flat) {
        const auto mine = rank_slice_in_domain(batch, ranks, d, r, ranks[d]);
        const auto expected = core::shard_of(batch, flat, total);
        CHECK(mine.begin == expected.begin);
        CHECK(mine.end == expected.end);
      }
  }
  // A domain that lost a rank since it reported covers its whole slice with the rest, and the
  // other domains' slices do not move.
  const std::size_t batch = 16;
  const auto slice = domain_slice(batch, ranks, 1);
  std::vector<int> seen(batch, 0);
  for (int r = 0; r < 2; ++r) {
    const auto part = rank_slice_in_domain(batch, ranks, 1, r, 2);
    for (auto i = part.begin; i < part.end; ++i) ++seen[i];
  }
  for (auto i = slice.begin; i < slice.end; ++i) CHECK(seen[i] == 1);
  CHECK(domain_slice(batch, ranks, 2).begin == slice.end);
  CHECK_THROWS_AS(domain_slice(batch, {2, 0, 1}, 1), InvalidArgument);
}

TEST_CASE("a vote sums to: ok only if every member was, pending if any saw a generation") {
  const std::vector<float> gradients{0.25f, -1.0f};
  std::vector<float> summed;
  const auto add = [&](const Vote& vote, std::size_t index) {
    std::vector<float> mine = gradients;
    append_vote(mine, vote, index, 3);
    if (summed.empty()) summed.assign(mine.size(), 0.0f);
    REQUIRE(mine.size() == summed.size());
    for (std::size_t i = 0; i < summed.size(); ++i) summed[i] += mine[i];
  };
  add({.ok = true, .generation_pending = false, .loss = 1.5, .skipped = 0, .ranks = {2, 0, 0}}, 0);
  add({.ok = false, .generation_pending = true, .loss = 2.0, .skipped = 1, .ranks = {0, 4, 0}}, 1);
  add({.ok = true, .generation_pending = false, .loss = 0.5, .skipped = 2, .ranks = {0, 0, 1}}, 2);
  auto too_short = summed;
  const Vote vote = take_vote(summed, 3);
  CHECK(summed == std::vector<float>{0.75f, -3.0f});  // the gradients' sums, the vote cut off
  CHECK_FALSE(vote.ok);
  CHECK(vote.generation_pending);
  CHECK(vote.loss == 4.0);
  CHECK(vote.skipped == 3.0);
  CHECK(vote.ranks == std::vector<int>{2, 4, 1});
  too_short.resize(5);
  CHECK_THROWS_AS(take_vote(too_short, 3), Error);
}

TEST_CASE("the domains' shares replace the split by ranks, every sample still once") {
  // Four domains of two ranks, domain 1 at a third of the others' speed: the lowest member's
  // policy asks for 11, 4, 11, 10 of 36 samples.
  const std::vector<int> ranks{2, 2, 2, 2};
  const std::vector<double> shares{11, 4, 11, 10};
  const std::size_t batch = 36;
  std::vector<int> seen(batch, 0);
  std::size_t next = 0;
  for (std::size_t d = 0; d < ranks.size(); ++d) {
    const auto slice = domain_slice(batch, ranks, d, shares);
    CHECK(slice.begin == next);
    CHECK(slice.size() == static_cast<std::size_t>(shares[d]));
    next = slice.end;
    CHECK(domain_share(batch, ranks, d, shares) == Approx(shares[d] / 36.0));
    for (int r = 0; r < ranks[d]; ++r) {
      const auto part = rank_slice_in_domain(batch, ranks, d, r, ranks[d], {}, shares);
      CHECK(part.begin >= slice.begin);
      CHECK(part.end <= slice.end);
      for (auto i = part.begin; i < part.end; ++i) ++seen[i];
    }
  }
  CHECK(next == batch);
  CHECK(std::ranges::all_of(seen, [](int n) { return n == 1; }));
  // Shares are weights: another batch is shared out in proportion, whole samples, once each.
  std::size_t covered = 0;
  for (std::size_t d = 0; d < ranks.size(); ++d)
    covered += domain_slice(72, ranks, d, shares).size();
  CHECK(covered == 72);
  CHECK(domain_slice(72, ranks, 1, shares).size() == 8);
  CHECK_THROWS_AS(domain_slice(batch, ranks, 0, std::vector<double>{1, 2}), InvalidArgument);
}

TEST_CASE("a vote carries each domain's own work, and the lowest member's shares") {
  const std::vector<float> gradients{1.0f};
  std::vector<float> summed;
  const auto add = [&](const Vote& vote, std::size_t index) {
    std::vector<float> mine = gradients;
    append_vote(mine, vote, index, 3);
    REQUIRE(mine.size() == 1 + vote_values(3));
    if (summed.empty()) summed.assign(mine.size(), 0.0f);
    for (std::size_t i = 0; i < summed.size(); ++i) summed[i] += mine[i];
  };
  // Each leader fills its own slots; the lowest member alone the shares.
  add({.ranks = {2, 0, 0}, .own_s = {0.25, 0, 0}, .own_samples = {12, 0, 0}, .shares = {14, 8, 14}},
      0);
  add({.ranks = {0, 2, 0}, .own_s = {0, 0.75, 0}, .own_samples = {0, 12, 0}}, 1);
  add({.ranks = {0, 0, 2}, .own_s = {0, 0, 0.5}, .own_samples = {0, 0, 12}}, 2);
  const Vote vote = take_vote(summed, 3);
  CHECK(summed == std::vector<float>{3.0f});
  CHECK(vote.ranks == std::vector<int>{2, 2, 2});
  CHECK(vote.own_s == std::vector<double>{0.25, 0.75, 0.5});
  CHECK(vote.own_samples == std::vector<double>{12, 12, 12});
  CHECK(vote.shares == std::vector<double>{14, 8, 14});
  // No shares voted, or one member without one: the split is by ranks.
  summed.clear();
  add({.ranks = {1, 0, 0}}, 0);
  add({.ranks = {0, 1, 0}}, 1);
  add({.ranks = {0, 0, 1}}, 2);
  CHECK(take_vote(summed, 3).shares.empty());
  std::vector<float> one_short;
  append_vote(one_short, {.ranks = {1, 0}, .shares = {3, 0}}, 0, 2);
  CHECK(take_vote(one_short, 2).shares.empty());
  std::vector<float> wrong_count;
  CHECK_THROWS_AS(append_vote(wrong_count, {.ranks = {1, 0}, .shares = {3}}, 0, 2), Error);
}

TEST_CASE("a vote carries the loss to about a double's precision, beyond a float's") {
  const double loss = 12345.678901234;  // a float keeps about 7 digits
  std::vector<float> buffer;
  append_vote(buffer, {.loss = loss, .ranks = {1}}, 0, 1);
  const Vote vote = take_vote(buffer, 1);
  CHECK(std::abs(vote.loss - loss) < 1e-6);
  CHECK(std::abs(static_cast<double>(static_cast<float>(loss)) - loss) > 1e-4);
  CHECK(buffer.empty());
}

TEST_CASE("resync: a step one survivor saw committed is committed by all") {
  // Member 1's vote on step 41 completed before member 3 died; members 0 and 2 saw their
  // collective fail: they take member 1's state, nobody goes back.
  const auto plan = plan_resync({{.decided = 40}, {.decided = 41}, {.decided = 40}});
  CHECK(plan.agreed_step == 41);
  CHECK(plan.actions ==
        std::vector<ResyncAction>{ResyncAction::heal, ResyncAction::keep, ResyncAction::heal});
  CHECK(plan.heal_source == 1);
}

TEST_CASE("resync: a step no survivor saw committed is abandoned by all") {
  const auto plan = plan_resync({{.decided = 40}, {.decided = 40}});
  CHECK(plan.agreed_step == 40);
  CHECK(plan.actions == std::vector<ResyncAction>{ResyncAction::keep, ResyncAction::keep});
}

TEST_CASE("resync: a joiner, and a member too far behind, heal from the lowest member ahead") {
  const auto plan = plan_resync({{.decided = 12},
                                 {.decided = 30},
                                 {.decided = 30},
                                 {.decided = -1, .joining = true},
                                 {.decided = 29}});
  CHECK(plan.agreed_step == 30);
  CHECK(plan.heal_source == 1);
  CHECK(plan.actions == std::vector<ResyncAction>{ResyncAction::heal, ResyncAction::keep,
                                                  ResyncAction::keep, ResyncAction::heal,
                                                  ResyncAction::heal});
  CHECK_THROWS_AS(plan_resync({}), InvalidArgument);
}

TEST_CASE("resync: joiners alone (every holder of state lost) go on from what persists") {
  const auto plan =
      plan_resync({{.decided = -1, .joining = true}, {.decided = -1, .joining = true}});
  CHECK(plan.from_persisted);
  CHECK(plan.agreed_step == -1);
  CHECK(plan.actions == std::vector<ResyncAction>{ResyncAction::heal, ResyncAction::heal});
  CHECK_FALSE(plan_resync({{.decided = 0}, {.decided = -1, .joining = true}}).from_persisted);
}

TEST_CASE("domains that train alone meet every N-th step and at the last one") {
  for (long step = 1; step <= 10; ++step) CHECK(synchronizes(step, 1, 10));
  std::vector<long> meetings;
  for (long step = 1; step <= 10; ++step)
    if (synchronizes(step, 4, 10)) meetings.push_back(step);
  CHECK(meetings == std::vector<long>{4, 8, 10});
  CHECK_THROWS_AS(synchronizes(3, 0, 10), InvalidArgument);
}

TEST_CASE("a domain's share of the batch is its samples over the batch's, and they add up to 1") {
  CHECK(domain_share(12, {2, 1, 1}, 0) == Approx(0.5));
  CHECK(domain_share(12, {2, 1, 1}, 1) == Approx(0.25));
  // 10 samples over 3 domains of one rank: 4, 3 and 3.
  double total = 0;
  for (std::size_t d = 0; d < 3; ++d) total += domain_share(10, {1, 1, 1}, d);
  CHECK(total == Approx(1.0));
  CHECK(domain_share(10, {1, 1, 1}, 0) == Approx(0.4));
  CHECK_THROWS_AS(domain_share(0, {1, 1}, 0), InvalidArgument);
}
