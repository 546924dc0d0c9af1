// The recovery protocol without MPI: ranks are threads of an in-process world that kills a rank at
// a chosen call and fails the test when two ranks meet in different operations.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "hardy/comm/errors.hpp"
#include "hardy/resilience/recovery_protocol.hpp"
#include "hardy/resilience/training_session.hpp"
#include "in_process_world.hpp"
#include "training_fixtures.hpp"

using namespace hardy;
using namespace hardy::resilience;
using hardy::testing::InProcessWorld;
using hardy::testing::PlannedDeath;
using hardy::testing::read_jsonl;

namespace {

// What each rank saw, written down in its thread and checked afterwards (Catch2's assertions are
// not thread-safe).
class Stories {
 public:
  void add(int rank, std::string line) {
    std::lock_guard lock(mutex_);
    lines_[rank].push_back(std::move(line));
  }
  std::vector<std::string> of(int rank) const {
    std::lock_guard lock(mutex_);
    auto it = lines_.find(rank);
    return it == lines_.end() ? std::vector<std::string>{} : it->second;
  }

 private:
  mutable std::mutex mutex_;
  std::map<int, std::vector<std::string>> lines_;
};

std::string outcomes_text(const std::vector<std::exception_ptr>& outcomes) {
  std::string text;
  for (std::size_t r = 0; r < outcomes.size(); ++r)
    text += fmt::format("rank {}: {}\n", r,
                        outcomes[r] ? hardy::testing::describe(outcomes[r]) : "finished");
  return text;
}

// One step as the training session takes it: a gradient allreduce, then the step's agreement,
// which a rank whose allreduce failed joins after revoking.
StepOutcome one_step(comm::Communicator& comm, bool preempt = false) {
  std::vector<float> gradient(4, 1.0f);
  try {
    comm.allreduce_sum(gradient);
  } catch (const comm::ProcessFailure&) {
    comm.revoke();
    agree_on_step(comm, false, preempt);
    return {false, false};
  }
  return agree_on_step(comm, true, preempt);
}

}  // namespace

TEST_CASE("in-process world: ranks that meet in different operations fail loudly", "[recovery]") {
  // What the step protocol once did: a rank whose allreduce failed went on to shrink while a
  // rank whose allreduce had completed agreed on the step; the MPI matched the shrink's own
  // agreement with the step's and the step's answer came out wrong.
  InProcessWorld world(2);
  world.deadlock_timeout = std::chrono::seconds(5);
  const auto outcomes = world.run([](std::unique_ptr<comm::Communicator> comm) {
    if (comm->rank() == 0)
      comm->agree(3);
    else
      comm->shrink();
  });
  for (const auto& outcome : outcomes)
    CHECK_THAT(hardy::testing::describe(outcome), Catch::Contains("mismatched agreement"));
}

TEST_CASE("in-process world: collectives, a death, revoke, agree and shrink", "[recovery]") {
  InProcessWorld world(4, 2);
  world.plan({.victim = 2, .at_call = 2, .kind = {}, .after_contributing = false, .unaware = {}});
  Stories stories;
  const auto outcomes = world.run([&](std::unique_ptr<comm::Communicator> comm) {
    const int me = comm->rank();
    stories.add(me, fmt::format("{}", comm->hostnames()));
    std::vector<std::int64_t> values{me, me};
    try {
      comm->allreduce(values, comm::ReduceOp::max);
      stories.add(me, "allreduce went through");
    } catch (const comm::ProcessFailure&) {  // rank 2's death, or a revoke by a peer who saw it
      stories.add(me, "allreduce failed");
    }
    stories.add(me, fmt::format("known failed {}", comm->failed_ranks()));
    comm->revoke();
    try {
      comm->barrier();
    } catch (const comm::ProcessFailure&) {
      stories.add(me, "revoked");
    }
    stories.add(me, fmt::format("agreed {}", comm->agree(me == 0 ? 1 : 3)));
    auto survivors = comm->shrink();
    stories.add(me, fmt::format("survivors {} of old ranks {}", survivors.comm->size(),
                                survivors.old_ranks));
    stories.add(me, fmt::format("sum {} same {} {}",
                                comm::allreduce(*survivors.comm, 1, comm::ReduceOp::sum),
                                comm::all_equal(*survivors.comm, 42),
                                comm::all_equal(*survivors.comm, survivors.comm->rank())));
  });
  INFO(outcomes_text(outcomes));
  CHECK(hardy::testing::died(outcomes[2]));
  const std::vector<std::string> expected{R"(["node0", "node0", "node1", "node1"])",
                                          "allreduce failed",
                                          "known failed [2]",
                                          "revoked",
                                          "agreed 1",
                                          "survivors 3 of old ranks [0, 1, 3]",
                                          "sum 3 same true false"};
  for (int rank : {0, 1, 3}) {
    CHECK_FALSE(outcomes[static_cast<std::size_t>(rank)]);
    CHECK(stories.of(rank) == expected);
  }
}

TEST_CASE("a step that failed on one survivor is committed by none, and all recover alike",
          "[recovery]") {
  // Rank 3 dies having sent its gradients: ranks 0 and 1 finish the allreduce, rank 2 does not.
  InProcessWorld world(4);
  world.deadlock_timeout = std::chrono::seconds(10);
  world.plan({.victim = 3,
              .at_call = 2,
              .kind = "allreduce f32",
              .after_contributing = true,
              .unaware = {0, 1}});
  Stories stories;
  const auto outcomes = world.run([&](std::unique_ptr<comm::Communicator> comm) {
    const int me = comm->rank();
    for (int step = 1; step <= 3; ++step) {
      const StepOutcome outcome = one_step(*comm);
      // Nobody asked to stop: a mixed-up agreement would say so.
      stories.add(me, fmt::format("step {} {}{}", step, outcome.committed ? "committed" : "failed",
                                  outcome.preempt ? " preempted" : ""));
      if (!outcome.committed) {
        recover_until_agreed(comm, [&](const Shrink& shrink) {
          stories.add(me, fmt::format("attempt {}: {} of {} left, sum {}", shrink.attempt,
                                      shrink.old_ranks.size(), shrink.old_size,
                                      comm::allreduce(*comm, 1, comm::ReduceOp::sum)));
        });
        --step;  // the failed step again
      }
    }
  });
  INFO(outcomes_text(outcomes));
  REQUIRE(hardy::testing::died(outcomes[3]));
  const std::vector<std::string> expected{"step 1 committed", "step 2 failed",
                                          "attempt 1: 3 of 4 left, sum 3", "step 2 committed",
                                          "step 3 committed"};
  for (int rank : {0, 1, 2}) {
    CHECK_FALSE(outcomes[static_cast<std::size_t>(rank)]);
    CHECK(stories.of(rank) == expected);
  }
}

TEST_CASE("a second death during recovery starts it over on what is left", "[recovery]") {
  InProcessWorld world(5);
  world.deadlock_timeout = std::chrono::seconds(10);
  world.plan({.victim = 4,
              .at_call = 1,
              .kind = "allreduce f32",
              .after_contributing = false,
              .unaware = {}});
  // Rank 1 dies in the first attempt's collective, after only rank 0 saw its contribution.
  world.plan({.victim = 1,
              .at_call = 1,
              .kind = "allreduce i64",
              .after_contributing = true,
              .unaware = {0}});
  Stories stories;
  const auto outcomes = world.run([&](std::unique_ptr<comm::Communicator> comm) {
    const int me = comm->rank();
    if (one_step(*comm).committed) return;
    recover_until_agreed(comm, [&](const Shrink& shrink) {
      stories.add(me, fmt::format("attempt {} with {}", shrink.attempt, comm->size()));
      stories.add(me, fmt::format("sum {}", comm::allreduce(*comm, 1, comm::ReduceOp::sum)));
    });
    stories.add(me, fmt::format("recovered with {}", comm->size()));
  });
  INFO(outcomes_text(outcomes));
  CHECK(hardy::testing::died(outcomes[4]));
  CHECK(hardy::testing::died(outcomes[1]));
  CHECK(stories.of(0) == std::vector<std::string>{"attempt 1 with 4", "sum 4", "attempt 2 with 3",
                                                  "sum 3", "recovered with 3"});
  for (int rank : {2, 3}) {  // their first attempt's sum failed
    CHECK_FALSE(outcomes[static_cast<std::size_t>(rank)]);
    CHECK(stories.of(rank) == std::vector<std::string>{"attempt 1 with 4", "attempt 2 with 3",
                                                       "sum 3", "recovered with 3"});
  }
}

TEST_CASE("a preemption asked of one rank stops every rank at the same step", "[recovery]") {
  InProcessWorld world(3);
  Stories stories;
  world.run([&](std::unique_ptr<comm::Communicator> comm) {
    for (int step = 1; step <= 5; ++step) {
      if (one_step(*comm, comm->rank() == 2 && step == 3).preempt) {
        stories.add(comm->rank(), fmt::format("stopped at {}", step));
        return;
      }
    }
  });
  for (int rank : {0, 1, 2}) CHECK(stories.of(rank) == std::vector<std::string>{"stopped at 3"});
}

TEST_CASE("a node-local snapshot is taken only where every rank wants one", "[recovery]") {
  // --snapshot-every auto: each host's writer wants a snapshot once its own interval has passed;
  // the hosts must keep the same steps, so the step's agreement carries the AND of their wishes.
  InProcessWorld world(3);
  Stories stories;
  world.run([&](std::unique_ptr<comm::Communicator> comm) {
    for (int step = 1; step <= 4; ++step) {
      // Rank 1 wants one every step, rank 2 at steps 2 and 4, rank 0 at step 4 only.
      const bool wanted = comm->rank() == 1 || (comm->rank() == 2 && step % 2 == 0) ||
                          (comm->rank() == 0 && step == 4);
      const StepOutcome outcome = agree_on_step(*comm, true, false, wanted);
      REQUIRE(outcome.committed);
      REQUIRE_FALSE(outcome.preempt);
      if (outcome.snapshot_wanted) stories.add(comm->rank(), fmt::format("snapshot {}", step));
    }
  });
  for (int rank : {0, 1, 2}) CHECK(stories.of(rank) == std::vector<std::string>{"snapshot 4"});
}

namespace {

resilience::TrainingConfig small_job(const std::filesystem::path& run_dir, long steps) {
  resilience::TrainingConfig config = hardy::testing::small_training_job(run_dir, steps);
  config.audit_samples = true;
  return config;
}

}  // namespace

TEST_CASE(
    "training session: a rank that dies inside a step's collective, seen by only some "
    "survivors, costs no step and no sample",
    "[recovery]") {
  const auto run_dir =
      std::filesystem::temp_directory_path() / fmt::format("hardy-in-process-{}", ::getpid());
  std::filesystem::remove_all(run_dir);
  const long steps = 12;
  InProcessWorld world(4, 2);
  world.deadlock_timeout = std::chrono::seconds(60);
  // Rank 3's share of step 5's collective reaches ranks 0 and 1, and then it dies; rank 2 is left
  // waiting on it and fails. In the gradient allreduce (one bucket per step for this model), the
  // loss sum follows and fails everywhere; in the loss sum (the one double-precision sum of a
  // step with group norm) ranks 0 and 1 go on to the step's agreement while rank 2 recovers.
  const std::string collective = GENERATE(as<std::string>{}, "allreduce f32", "allreduce f64");
  CAPTURE(collective);
  world.plan({.victim = 3,
              .at_call = 5,
              .kind = collective,
              .after_contributing = true,
              .unaware = {0, 1}});
  std::vector<int> statuses(4, -1);
  const auto outcomes = world.run([&](std::unique_ptr<comm::Communicator> comm) {
    const int me = comm->rank();
    resilience::TrainingSession session(small_job(run_dir, steps), std::move(comm));
    statuses[static_cast<std::size_t>(me)] = session.run();
  });
  INFO(outcomes_text(outcomes));
  REQUIRE(hardy::testing::died(outcomes[3]));
  for (int rank : {0, 1, 2}) {
    CHECK_FALSE(outcomes[static_cast<std::size_t>(rank)]);
    CHECK(statuses[static_cast<std::size_t>(rank)] == resilience::kCompleted);
  }
  const auto events = read_jsonl(run_dir / "events.jsonl");
  std::vector<std::string> story;
  for (const auto& e : events) {
    const std::string name = e["event"];
    if (name == "failure_detected") {
      CHECK(e["failed_ranks"] == std::vector<int>{3});
      CHECK(e["failed_hosts"] == std::vector<std::string>{"node1"});
      CHECK(e["step"] == 5);
    }
    if (name == "state_restored") CHECK(e["source"] == "memory");
    if (name == "job_finished") {
      CHECK(e["status"] == "completed");
      CHECK(e["steps"] == steps);
      CHECK(e["world_size"] == 3);
    }
    if (name != "rank_started" && name != "checkpoint_written") story.push_back(name);
  }
  CHECK(story == std::vector<std::string>{"job_started", "failure_detected", "communicator_shrunk",
                                          "state_restored", "shards_rebalanced", "training_resumed",
                                          "recovery_finished", "job_finished"});
  // Every step committed once, and the audit saw each sample once per epoch.
  const auto audit = read_jsonl(run_dir / "samples.jsonl");
  REQUIRE(audit.size() == static_cast<std::size_t>(steps));
  std::map<long, std::multiset<long>> seen;  // epoch -> samples
  for (std::size_t i = 0; i < audit.size(); ++i) {
    CHECK(audit[i]["step"] == static_cast<long>(i + 1));
    const std::vector<long> samples = audit[i]["samples"];
    const long epoch = audit[i]["epoch"];
    const std::size_t split = audit[i].value("next_epoch_from", samples.size());
    for (std::size_t k = 0; k < samples.size(); ++k)
      seen[k < split ? epoch : epoch + 1].insert(samples[k]);
  }
  for (const auto& [epoch, samples] : seen) {
    if (samples.size() < 24) continue;  // the last epoch is cut off by the step count
    CHECK(samples.size() == 24);
    CHECK(std::set<long>(samples.begin(), samples.end()).size() == 24);
  }
  std::filesystem::remove_all(run_dir);
}
