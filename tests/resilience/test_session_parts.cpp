// The parts of a training session that need no communicator to test: who left after a shrink,
// in the original world's terms, and the watchdog's view and timing.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "hardy/resilience/training_config.hpp"
#include "session/membership.hpp"
#include "session/watchdog.hpp"

using namespace hardy::resilience;
using namespace std::chrono_literals;

TEST_CASE("a shrink names the departed ranks, hosts and nodes in the original world's terms") {
  const std::vector<std::string> hosts{"n0", "n0", "n1", "n1", "n2", "n2"};
  std::vector<int> members{0, 1, 2, 3, 4, 5};  // two ranks per node

  // Node 1 dies: the survivors were old ranks 0, 1, 4 and 5.
  const std::vector<int> first{0, 1, 4, 5};
  Departure departed = apply_shrink(members, first, hosts, 2);
  CHECK(departed.world_ranks == std::vector<int>{2, 3});
  CHECK(departed.hosts == std::vector<std::string>{"n1", "n1"});
  CHECK(departed.nodes == std::vector<int>{1});
  CHECK(members == std::vector<int>{0, 1, 4, 5});

  // Then the rank that is now rank 1 (world rank 1) dies: ranks are renumbered, names are not.
  const std::vector<int> second{0, 2, 3};
  departed = apply_shrink(members, second, hosts, 2);
  CHECK(departed.world_ranks == std::vector<int>{1});
  CHECK(departed.hosts == std::vector<std::string>{"n0"});
  CHECK(departed.nodes == std::vector<int>{0});
  CHECK(members == std::vector<int>{0, 4, 5});

  // Nobody left (a shrink after a failure that was healed by a previous one).
  const std::vector<int> all{0, 1, 2};
  departed = apply_shrink(members, all, hosts, 2);
  CHECK(departed.world_ranks.empty());
  CHECK(departed.nodes.empty());
  CHECK(members == std::vector<int>{0, 4, 5});
}

TEST_CASE("the watchdog acts on a stretch of communication longer than the timeout, once") {
  std::atomic<int> calls{0};
  Watchdog::Stuck seen{};
  Watchdog watchdog([](const Watchdog::Committed& c) { return c.rank == 0 ? 0.3 : 0.6; },
                    [&](const Watchdog::Stuck& stuck) {
                      seen = stuck;
                      ++calls;
                      std::this_thread::sleep_for(300ms);  // the session would end the process
                    });
  watchdog.publish({.step = 41, .rank = 0, .members = {}, .training = false});
  watchdog.start();
  // Short stretches, each well under the timeout, never add up to a hang.
  for (int i = 0; i < 20; ++i) {
    Watchdog::Scope scope(watchdog, "step agreement");
    std::this_thread::sleep_for(20ms);
  }
  CHECK(calls == 0);

  watchdog.publish({.step = 42, .rank = 0, .members = {}, .training = false});
  std::chrono::steady_clock::time_point left;
  const auto entered = std::chrono::steady_clock::now();
  {
    Watchdog::Scope scope(watchdog, "gradient allreduce");
    while (calls == 0 && std::chrono::steady_clock::now() - entered < 5s)
      std::this_thread::sleep_for(10ms);
  }  // parked here until on_stuck returned
  left = std::chrono::steady_clock::now();
  REQUIRE(calls == 1);
  CHECK(seen.committed.step == 42);
  CHECK(std::string(seen.in) == "gradient allreduce");
  CHECK(seen.seconds >= 0.3);
  CHECK(left - entered >= 550ms);  // the timeout, then the whole of on_stuck
  {
    Watchdog::Scope scope(watchdog, "step agreement");
    std::this_thread::sleep_for(500ms);
  }
  watchdog.stop();
  CHECK(calls == 1);
}

TEST_CASE("the watchdog gives ranks other than the lead their own timeout") {
  std::atomic<int> calls{0};
  Watchdog watchdog([](const Watchdog::Committed& c) { return c.rank == 0 ? 0.2 : 1.0; },
                    [&](const Watchdog::Stuck&) { ++calls; });
  watchdog.publish({.step = 3, .rank = 2, .members = {}, .training = false});
  watchdog.start();
  {
    Watchdog::Scope scope(watchdog, "sample plan check");
    std::this_thread::sleep_for(500ms);
  }
  CHECK(calls == 0);  // 0.5 s is past the lead's timeout, not rank 2's
  watchdog.stop();
}

TEST_CASE("a rank's cores go to the kernels on the CPU and to the loaders beside a GPU") {
  using hardy::resilience::split_host_threads;
  hardy::resilience::TrainingConfig config;  // --threads 0, --loader-threads auto
  const auto cpu = split_host_threads(config, 16);
  CHECK(cpu.kernel_threads == 16);
  CHECK(cpu.loader_threads == 1);

  config.backend = "cuda";
  const auto gpu = split_host_threads(config, 16);  // an H100 node's rank: the measured split
  CHECK(gpu.loader_threads == 8);
  CHECK(gpu.kernel_threads == 4);
  const auto crowded = split_host_threads(config, 2);  // 8 ranks on a 16-core node
  CHECK(crowded.loader_threads == 1);
  CHECK(crowded.kernel_threads == 1);
  CHECK(split_host_threads(config, 64).loader_threads == 8);

  // What the user sets stands.
  config.threads = 6;
  config.loader_threads = 3;
  const auto set = split_host_threads(config, 16);
  CHECK(set.kernel_threads == 6);
  CHECK(set.loader_threads == 3);
}

TEST_CASE(
    "a rank's cores are the CPUs a scheduler allowed it, shared with the ranks allowed the same") {
  using hardy::resilience::rank_cores;
  // No restriction: the host's cores over its ranks.
  CHECK(rank_cores(128, 128, 4, 4) == 32);
  CHECK(rank_cores(2, 2, 1, 1) == 2);
  CHECK(rank_cores(2, 2, 4, 4) == 1);  // oversubscribed: still one
  // Slurm's --cpus-per-task 8 under task/cgroup on a 128-core node, each task its own set.
  CHECK(rank_cores(128, 8, 1, 4) == 8);
  // One cpuset of 8 CPUs for the job's 4 ranks on the node (no per-task binding).
  CHECK(rank_cores(128, 8, 4, 4) == 2);
  // Bound to one core each (mpirun's default for two ranks).
  CHECK(rank_cores(64, 1, 1, 2) == 1);
}
