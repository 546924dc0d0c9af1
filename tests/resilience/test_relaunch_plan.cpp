// The supervisor's decisions (resilience/relaunch_plan.hpp): a launch is completed only when the
// run directory says so, lost nodes are named from the evidence gathered (the launchers' own
// reports: tests/jobs/test_launchers.cpp), and spares take the places of lost nodes.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "hardy/resilience/relaunch_plan.hpp"
#include "supervisor/launch_event_reader.hpp"

using namespace hardy::resilience;

namespace {

struct TemporaryRun {
  std::filesystem::path dir;
  TemporaryRun() {
    dir = std::filesystem::temp_directory_path() /
          ("hardy-relaunch-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(dir / "checkpoints");
  }
  ~TemporaryRun() { std::filesystem::remove_all(dir); }
  void append(const std::string& file, const std::string& lines) {
    std::ofstream(dir / file, std::ios::app) << lines;
  }
  std::uintmax_t size(const std::string& file) const {
    return std::filesystem::file_size(dir / file);
  }
  static inline int counter = 0;
};

LaunchEvents finished(const std::string& status, long steps, long total) {
  LaunchEvents events;
  events.total_steps = total;
  events.finished_status = status;
  events.finished_steps = steps;
  events.last_committed_step = steps;
  return events;
}

}  // namespace

TEST_CASE("a launch completed only when the job logged its last step", "[relaunch]") {
  CHECK(judge_launch(0, finished("completed", 600, 600)).kind == LaunchVerdict::completed);
  // The runtime lost a node's daemon, ended the job and exited 0: never a success.
  LaunchEvents died;
  died.total_steps = 600;
  died.last_committed_step = 10;
  const Verdict verdict = judge_launch(0, died);
  CHECK(verdict.kind == LaunchVerdict::failed);
  CHECK_THAT(verdict.reason, Catch::Contains("exit status 0") &&
                                 Catch::Contains("no job_finished") &&
                                 Catch::Contains("last committed step 10 of 600"));
  CHECK(judge_launch(0, finished("completed", 599, 600)).kind == LaunchVerdict::failed);
  CHECK(judge_launch(0, LaunchEvents{}).kind == LaunchVerdict::failed);
  // The job finished, then the supervisor ended a launcher that waited on a frozen node.
  CHECK(judge_launch(143, finished("completed", 600, 600)).kind == LaunchVerdict::completed);
  CHECK(judge_launch(3, finished("stopped", 40, 600)).kind == LaunchVerdict::stopped);
  CHECK(judge_launch(4, finished("preempted", 40, 600)).kind == LaunchVerdict::preempted);
  CHECK(judge_launch(3, LaunchEvents{}).kind == LaunchVerdict::failed);
  CHECK(judge_launch(2, LaunchEvents{}).kind == LaunchVerdict::bad_input);
  CHECK(judge_launch(75, died).kind == LaunchVerdict::failed);  // the watchdog
}

TEST_CASE("the launch's own events are read from where it started", "[relaunch]") {
  TemporaryRun run;
  run.append("events.jsonl",
             R"({"event":"job_started","steps":100}
{"event":"job_finished","status":"completed","steps":100}
)");
  const auto offset = run.size("events.jsonl");
  run.append("events.jsonl",
             R"({"event":"job_started","steps":300}
{"event":"failure_detected","failed_ranks":[4,5],"failed_nodes":[2],"step":17,"detected_by":"process failure error"}
{"event":"failure_detected","detected_by":"watchdog","step":30}
{"event":"job_fini)");
  run.append("metrics.jsonl", "{\"step\":28}\n{\"step\":29}\n{\"ste");
  const auto events = read_launch_events(run.dir, offset, 0.0, 2);
  CHECK(events.total_steps == 300);
  CHECK_FALSE(events.finished_status);  // the earlier launch's job_finished does not count
  CHECK(events.last_committed_step == 29);
  REQUIRE(events.failed_nodes.size() == 1);
  CHECK_THAT(events.failed_nodes.at(2).front(), Catch::Contains("ranks [4, 5] failed at step 17"));
  CHECK(judge_launch(0, events).kind == LaunchVerdict::failed);
  // The job's watchdog ended it: the supervisor stops waiting for the launcher after the grace.
  CHECK(events.ended_by_watchdog);
}

TEST_CASE("a running launch's events are taken in as they are appended, a line cut short waits",
          "[relaunch]") {
  TemporaryRun run;
  run.append("events.jsonl", R"({"event":"job_started","steps":100}
)");
  LaunchEventReader reader(run.dir, run.size("events.jsonl"), 0.0, 2);
  CHECK_FALSE(reader.read().total_steps);  // the earlier launch's
  run.append("events.jsonl",
             R"({"event":"job_started","steps":300}
{"event":"failure_detected","failed_ranks":[4],"failed_nodes":[2],"step":17,"detected_by":"process failure error"}
{"event":"job_fini)");
  CHECK(reader.read().total_steps == 300);
  CHECK_FALSE(reader.read().finished_status);  // still being written
  {  // Lines once read are never parsed again: blanked in place, the failure is still known.
    std::fstream file(run.dir / "events.jsonl", std::ios::in | std::ios::out | std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(file)), {});
    const auto at = text.find(R"({"event":"failure_detected")");
    const auto end = text.find('\n', at);
    file.seekp(static_cast<std::streamoff>(at));
    file << std::string(end - at, ' ');
  }
  run.append("events.jsonl", R"(shed","status":"completed","steps":300}
)");
  run.append("metrics.jsonl", "{\"step\":300}\n");
  const LaunchEvents& done = reader.read();
  CHECK(done.finished_status == "completed");
  CHECK(done.failed_nodes.count(2) == 1);  // taken in before it was blanked
  CHECK(done.last_committed_step == 300);
  CHECK(judge_launch(0, done).kind == LaunchVerdict::completed);
  // Another file took the name (shorter than what was read): read again from its start.
  std::filesystem::remove(run.dir / "events.jsonl");
  run.append("events.jsonl", R"({"event":"job_started","steps":7}
)");
  const LaunchEvents& again = reader.read();
  CHECK(again.total_steps == 7);
  CHECK_FALSE(again.finished_status);
  CHECK(again.failed_nodes.empty());
}

TEST_CASE("an in-job failure or a hang is not the watchdog ending the job", "[relaunch]") {
  TemporaryRun run;
  run.append("events.jsonl",
             R"({"event":"job_started","steps":300}
{"event":"hang_detected","rank":5,"host":"n2","pid":9,"step":8,"doing":"compute","seconds_without_progress":6,"timeout_s":5,"detected_by":"its own monitor","reason":"spin","detected_unix_time":1}
{"event":"failure_detected","failed_ranks":[5],"failed_nodes":[2],"step":8,"detected_by":"hang monitor"}
)");
  CHECK_FALSE(read_launch_events(run.dir, 0, 0.0, 2).ended_by_watchdog);
}

TEST_CASE("injected kills of this launch name their nodes", "[relaunch]") {
  TemporaryRun run;
  run.append("checkpoints/injected-kill-5.time", "200.5\n");
  run.append("checkpoints/injected-kill-1.time", "50.0\n");  // an earlier launch's
  const auto events = read_launch_events(run.dir, 0, 100.0, 2);
  CHECK(events.failed_nodes.empty());
  REQUIRE(events.killed_nodes.size() == 1);
  CHECK(events.killed_nodes.count(2) == 1);
}

TEST_CASE("a job that stopped to regrow is a planned relaunch that names no node", "[relaunch]") {
  TemporaryRun run;
  run.append("events.jsonl",
             R"({"event":"job_started","steps":300}
{"event":"regrow_planned","step":90,"world_size":3,"full_world_size":4,"shrunk_since_step":40,"lost_s":6.5,"cost_s":6.0,"basis":"measured","evidence":"3 of 4 ranks since step 40"}
{"event":"job_finished","status":"regrowing","steps":90}
)");
  const auto events = read_launch_events(run.dir, 0, 0.0, 2);
  CHECK(events.evicted_nodes.empty());
  const Verdict verdict = judge_launch(5, events);
  CHECK(verdict.kind == LaunchVerdict::planned);
  CHECK_THAT(verdict.reason, Catch::Contains("step 90") && Catch::Contains("full world"));
  // Another exit status with it is a failure.
  CHECK(judge_launch(1, events).kind == LaunchVerdict::failed);
  CHECK(judge_launch(0, events).kind == LaunchVerdict::failed);
}

TEST_CASE("a node the job evicted as slow is named, and the launch is an eviction, no failure",
          "[relaunch]") {
  TemporaryRun run;
  run.append("events.jsonl",
             R"({"event":"job_started","steps":300}
{"event":"node_evicted","step":120,"rank":3,"world_rank":3,"node":1,"host":"n1","score":0.33,"lost_s":41.5,"cost_s":40.0,"evidence":"slow since step 60"}
{"event":"job_finished","status":"evicting","steps":120}
)");
  const auto events = read_launch_events(run.dir, 0, 0.0, 2);
  REQUIRE(events.evicted_nodes.size() == 1);
  CHECK_THAT(events.evicted_nodes.at(1).front(),
             Catch::Contains("evicted as slow") && Catch::Contains("slow since step 60"));
  CHECK(events.failed_nodes.empty());
  const Verdict verdict = judge_launch(5, events);
  CHECK(verdict.kind == LaunchVerdict::planned);
  CHECK_THAT(verdict.reason, Catch::Contains("step 120"));
  // Status 5 without the event, or the event with another status, is a failure.
  CHECK(judge_launch(5, finished("evicting", 120, 300)).kind == LaunchVerdict::failed);
  CHECK(judge_launch(1, events).kind == LaunchVerdict::failed);
  // The evicted node's place goes to the first spare.
  const auto plan = plan_relaunch({{"n0", "n1", "n2"}, {"s0"}}, events.evicted_nodes, {});
  CHECK(plan.nodes.active == std::vector<std::string>{"n0", "s0", "n2"});
  REQUIRE(plan.excluded.size() == 1);
  CHECK(plan.excluded[0].host == "n1");
}

TEST_CASE("the job's own failure reports count only where nothing conclusive names a node",
          "[relaunch]") {
  // Seen on the emulated cluster: node 3 crashed, and before the runtime's teardown had killed
  // everything the survivors logged ranks of node 2 as failed too (the teardown's first kills).
  const std::map<std::size_t, std::vector<std::string>> job{{2, {"job: ranks [3, 4, 5] failed"}},
                                                            {3, {"job: ranks [3, 4, 5] failed"}}};
  SECTION("the launcher lost node 3: node 2 is kept, node 3 left out with both reports") {
    const auto weighed = weigh_evidence({{3, {"launcher: lost"}}}, job);
    CHECK(weighed.against.size() == 1);
    CHECK(weighed.against.at(3) ==
          std::vector<std::string>{"launcher: lost", "job: ranks [3, 4, 5] failed"});
    CHECK(weighed.doubted.size() == 1);
    CHECK(weighed.doubted.count(2) == 1);
  }
  SECTION("a node that fails its probe is conclusive too") {
    const auto weighed = weigh_evidence({{2, {"probe: no answer"}}}, job);
    CHECK(weighed.against.size() == 1);
    CHECK(weighed.against.count(2) == 1);
    CHECK(weighed.doubted.count(3) == 1);
  }
  SECTION("with nothing conclusive, the job's word is all there is") {
    const auto weighed = weigh_evidence({{1, {}}}, job);
    CHECK(weighed.against.size() == 2);
    CHECK(weighed.doubted.empty());
  }
}

TEST_CASE("spares take the places of lost nodes in rank order", "[relaunch]") {
  const NodeSet nodes{{"n0", "n1", "n2", "n3"}, {"s0", "s1"}};
  SECTION("one lost node, one spare in its place") {
    const auto plan = plan_relaunch(nodes, {{1, {"launcher: lost"}}}, {});
    CHECK(plan.nodes.active == std::vector<std::string>{"n0", "s0", "n2", "n3"});
    CHECK(plan.nodes.spares == std::vector<std::string>{"s1"});
    REQUIRE(plan.excluded.size() == 1);
    CHECK(plan.excluded[0].host == "n1");
    CHECK(plan.excluded[0].replaced_by == "s0");
  }
  SECTION("a spare that fails its probe is not used") {
    const auto plan =
        plan_relaunch(nodes, {{1, {"lost"}}, {3, {"lost"}}}, {{0, {"probe: no answer"}}});
    CHECK(plan.nodes.active == std::vector<std::string>{"n0", "s1", "n2"});
    CHECK(plan.nodes.spares.empty());
    REQUIRE(plan.spares_lost.size() == 1);
    CHECK(plan.spares_lost[0].host == "s0");
    CHECK(plan.excluded[1].host == "n3");
    CHECK_FALSE(plan.excluded[1].replaced_by);
  }
  SECTION("no evidence, same nodes") {
    const auto plan = plan_relaunch(nodes, {{2, {}}}, {});
    CHECK(plan.nodes.active == nodes.active);
    CHECK(plan.excluded.empty());
  }
}

TEST_CASE("a host name maps to its places in the node list", "[relaunch]") {
  CHECK(indices_of({"a", "b", "a"}, "a") == std::vector<std::size_t>{0, 2});
  CHECK(indices_of({"a", "b"}, "c").empty());
}
