// The session's side of the slow-rank watch (session/slow_ranks.hpp) over an in-process world:
// every rank must take the same decision at the same step, even where what each rank reads from
// its own clock differs, or the ranks split the batch differently and a step covers some samples
// twice and others never.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "domains/fault_domains.hpp"
#include "hardy/resilience/events.hpp"
#include "hardy/resilience/training_config.hpp"
#include "in_process_world.hpp"
#include "session/membership.hpp"
#include "session/session_staging.hpp"
#include "session/slow_ranks.hpp"

using namespace hardy;
using namespace hardy::resilience;
using hardy::testing::InProcessWorld;

namespace {

// What one rank saw, step by step.
struct RankDecisions {
  std::vector<std::vector<double>> weights;  // the shares in force after each step
  std::optional<long> evicted_at;            // the step the watch named a rank for eviction
};

// One in-process rank's side of a session, as SlowRanks needs it: its membership, its event log
// (disabled, or written to `log`), no fault domains, the staging that holds the shares.
struct OneRank {
  explicit OneRank(std::unique_ptr<comm::Communicator> comm, const std::filesystem::path& log = {})
      : membership(std::move(comm), 1),
        events(log.empty() ? core::EventLog(event_kinds()) : core::EventLog(log, event_kinds())),
        domains(DomainOptions{}, membership.communicator_slot(), events),
        staging(config, membership, domains, events) {}
  Membership membership;
  core::EventLog events;
  FaultDomains domains;
  const TrainingConfig config;
  SessionStaging staging;
};

// Steps counted, not seconds: a window of 3 and a confirmation of 4 steps after 2 of warm-up.
StragglerThresholds in_steps(StragglerMode mode) {
  StragglerThresholds thresholds;
  thresholds.mode = mode;
  thresholds.warmup = 2;
  thresholds.window = 3;
  thresholds.window_s = 0;
  thresholds.confirm = 4;
  thresholds.confirm_s = 0;
  return thresholds;
}

}  // namespace

TEST_CASE(
    "slow ranks: the ranks decide alike when their own clocks disagree (the launch time that "
    "prices an eviction is the lead's)") {
  constexpr int kRanks = 3;
  constexpr std::size_t kBatch = 30;
  constexpr long kSteps = 400;
  StragglerThresholds thresholds = in_steps(StragglerMode::evict);

  std::vector<RankDecisions> seen(kRanks);
  InProcessWorld world(kRanks);
  const auto outcomes = world.run([&](std::unique_ptr<comm::Communicator> comm) {
    const int me = comm->rank();
    OneRank rank(std::move(comm));
    auto& [membership, events, domains, config, staging] = rank;
    SlowRanks slow(thresholds, membership, staging, events, /*host_timed=*/true,
                   /*kernel_threads=*/1, /*may_evict=*/true, /*in_domain=*/false);
    RankDecisions& mine = seen[static_cast<std::size_t>(me)];
    for (long step = 1; step <= kSteps && !mine.evicted_at; ++step) {
      // Rank 2 takes three times its peers' time a sample from step 30, on every share it is
      // given (only a rank that slowed down is evicted: before, it ran at its peers' pace).
      const auto share = static_cast<double>(kBatch) / kRanks;
      const double per_sample = me == 2 && step > 30 ? 3e-3 : 1e-3;
      slow.measured(per_sample * share, static_cast<std::size_t>(share));
      std::vector<double> sums{1.0};
      slow.append_slots(sums);
      membership.comm().allreduce_sum(sums);
      slow.decide(step, sums, 1, kBatch);
      REQUIRE(sums == std::vector<double>{kRanks});  // the loss slot is the caller's again
      // Each rank's own launch took very different times (rank 0 a fraction of a second, the
      // others minutes): priced by its own, one rank would evict while its peers carry on.
      if (step == 1) slow.first_step_committed(me == 0 ? 0.02 : 600.0);
      mine.weights.push_back(staging.share_weights());
      if (slow.eviction_due()) mine.evicted_at = step;
    }
  });
  for (const auto& outcome : outcomes) REQUIRE_FALSE(outcome);
  REQUIRE(seen[0].evicted_at);  // the lead's 0.02 s priced it: 0.04 s lost is soon reached
  for (int r = 1; r < kRanks; ++r) {
    CHECK(seen[static_cast<std::size_t>(r)].evicted_at == seen[0].evicted_at);
    CHECK(seen[static_cast<std::size_t>(r)].weights == seen[0].weights);
  }
  // Rebalanced before: rank 2's share was cut.
  REQUIRE_FALSE(seen[0].weights.back().empty());
  CHECK(seen[0].weights.back()[2] < seen[0].weights.back()[0]);
}

TEST_CASE("slow ranks: an eviction forgone for want of a spare is never due again") {
  constexpr int kRanks = 3;
  constexpr std::size_t kBatch = 30;
  StragglerThresholds thresholds = in_steps(StragglerMode::evict);
  thresholds.evict_cost_s = 0.01;
  std::vector<std::optional<long>> forgone_at(kRanks);
  std::vector<int> due_after(kRanks, 0), forgone_events(kRanks, 0);
  InProcessWorld world(kRanks);
  const auto outcomes = world.run([&](std::unique_ptr<comm::Communicator> comm) {
    const int me = comm->rank();
    const auto at = static_cast<std::size_t>(me);
    const auto log =
        std::filesystem::temp_directory_path() /
        ("hardy-test-forgone-" + std::to_string(::getpid()) + "-" + std::to_string(me) + ".jsonl");
    std::filesystem::remove(log);
    OneRank rank(std::move(comm), log);
    auto& [membership, events, domains, config, staging] = rank;
    SlowRanks slow(thresholds, membership, staging, events, /*host_timed=*/true,
                   /*kernel_threads=*/1, /*may_evict=*/true, /*in_domain=*/true);
    for (long step = 1; step <= 200; ++step) {
      const auto share = static_cast<double>(kBatch) / kRanks;
      slow.measured((me == 2 && step > 30 ? 3e-3 : 1e-3) * share, static_cast<std::size_t>(share));
      std::vector<double> sums{1.0};
      slow.append_slots(sums);
      membership.comm().allreduce_sum(sums);
      slow.decide(step, sums, 1, kBatch);
      if (step == 1) slow.first_step_committed(0.5);
      if (!slow.eviction_due()) continue;
      if (forgone_at[at]) {
        ++due_after[at];
        continue;
      }
      forgone_at[at] = step;
      slow.no_spare_left(step);  // hardy run's spare went to another domain's relaunch
      CHECK_FALSE(slow.eviction_due());
    }
    std::ifstream written(log);
    for (std::string line; std::getline(written, line);)
      forgone_events[at] += line.find("\"eviction_forgone\"") != std::string::npos;
    std::filesystem::remove(log);
    CHECK_FALSE(staging.share_weights().empty());  // still rebalanced around the slow rank
  });
  for (const auto& outcome : outcomes) REQUIRE_FALSE(outcome);
  REQUIRE(forgone_at[0]);
  for (int r = 0; r < kRanks; ++r) {
    const auto at = static_cast<std::size_t>(r);
    CHECK(forgone_at[at] == forgone_at[0]);
    CHECK(due_after[at] == 0);
    CHECK(forgone_events[at] == 1);
  }
}

namespace {

// A device's span of a step as the CUDA backend gives it, without a device: its seconds, and how
// often they were read (each read waits for the device there).
class ScriptedSpan final : public core::DeviceSpan {
 public:
  ScriptedSpan(double seconds, int& reads) : seconds_(seconds), reads_(reads) {}
  void end() override {}
  double seconds() override {
    ++reads_;
    return seconds_;
  }

 private:
  double seconds_;
  int& reads_;
};

}  // namespace

TEST_CASE("slow ranks: on a GPU a rank's own work is its data wait and its device time") {
  constexpr int kRanks = 3;
  constexpr std::size_t kBatch = 30;
  for (const StragglerMode mode : {StragglerMode::rebalance, StragglerMode::off}) {
    const StragglerThresholds thresholds = in_steps(mode);
    std::vector<std::vector<double>> final_weights(kRanks);
    std::vector<int> reads(kRanks, 0);
    InProcessWorld world(kRanks);
    const auto outcomes = world.run([&](std::unique_ptr<comm::Communicator> comm) {
      const int me = comm->rank();
      OneRank rank(std::move(comm));
      auto& [membership, events, domains, config, staging] = rank;
      // 64 kernel threads a rank, more than this machine's CPUs: a host-timed watch would be off
      // here; the device's time does not depend on the host's CPUs.
      SlowRanks slow(thresholds, membership, staging, events, /*host_timed=*/false,
                     /*kernel_threads=*/64, /*may_evict=*/false, /*in_domain=*/false);
      const auto at = static_cast<std::size_t>(me);
      for (long step = 1; step <= 60; ++step) {
        const auto share = static_cast<double>(kBatch) / kRanks;
        // The same data wait everywhere; rank 2's device takes three times as long from step 10.
        const double device_s = (me == 2 && step > 10 ? 3e-3 : 1e-3) * share;
        slow.measured_on_device(1e-4, std::make_shared<ScriptedSpan>(device_s, reads[at]),
                                static_cast<std::size_t>(share));
        std::vector<double> sums{1.0};
        slow.append_slots(sums);
        membership.comm().allreduce_sum(sums);
        slow.decide(step, sums, 1, kBatch);
      }
      final_weights[at] = staging.share_weights();
    });
    for (const auto& outcome : outcomes) REQUIRE_FALSE(outcome);
    if (mode == StragglerMode::off) {
      // Off: nothing measured, and the device never waited for.
      CHECK(reads == std::vector<int>(kRanks, 0));
      CHECK(final_weights[0].empty());
      continue;
    }
    CHECK(reads == std::vector<int>(kRanks, 60));  // once a step, when the figures are sent
    REQUIRE(final_weights[0].size() == kRanks);
    CHECK(final_weights[0][2] < final_weights[0][0] / 2);
    CHECK(final_weights[1] == final_weights[0]);
    CHECK(final_weights[2] == final_weights[0]);
  }
}
