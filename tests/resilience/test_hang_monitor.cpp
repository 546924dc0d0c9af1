// Hang detection (hang_monitor.hpp): the timeout, the bounds, who is stopped and who kills it,
// the progress board, and the monitor itself acting on real processes (forked children that
// spin or stop, as a hung rank would).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/core/support/process_info.hpp"
#include "hardy/resilience/failure_injection.hpp"
#include "scratch_directory.hpp"
#include "session/hang_monitor.hpp"

using namespace hardy::resilience;
using namespace std::chrono_literals;
using hardy::testing::ScratchDirectory;

namespace {

Heartbeat beat(int world_rank, const std::string& host, double at) {
  return {.world_rank = world_rank,
          .host = host,
          .pid = 1000 + world_rank,
          .process_start = "1",
          .step = 7,
          .doing = "gradient allreduce",
          .activity = Activity::communicating,
          .seconds_in_it = 0.5,
          .unix_time = at,
          .timeout_s = 5};
}

// The board of a test: node-local heartbeats and shared decisions in one scratch directory.
BoardPlaces places_in(const ScratchDirectory& scratch) {
  return {.node_root = scratch / "node", .beats = "run-key/.heartbeats", .shared = scratch / "run"};
}

// The monitor of world rank 0, alone on host "h" of launch "l", with a 0.5 s fixed timeout.
HangMonitor::Options lone_rank_options(const ScratchDirectory& scratch) {
  return {.board = places_in(scratch),
          .launch = "l",
          .world_rank = 0,
          .hosts = {"h"},
          .fixed_timeout_s = 0.5};
}

Watchdog::Progress progress(const char* doing, Activity activity, double seconds,
                            std::vector<int> members, bool training = true) {
  return {.committed = {.step = 9, .rank = 0, .members = std::move(members), .training = training},
          .doing = doing,
          .activity = activity,
          .seconds = seconds};
}

// Waits for a child for at most `limit`; returns its wait status, or -1 if it is still alive.
int wait_for(pid_t child, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(child, &status, WNOHANG) == child) return status;
    std::this_thread::sleep_for(10ms);
  }
  return -1;
}

// Forks a child that runs `body` and exits 0 (unless `body` ends it first, or its monitor kills
// it), and returns its wait status (-1: still running after 10 s). The monitor acts on a real
// process, as it would on a hung rank.
template <class Body>
int wait_status_of_child(Body&& body) {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    body();
    ::_exit(0);
  }
  return wait_for(child, 10s);
}

}  // namespace

TEST_CASE("hang timeout: 5 x the longest step, at least 5 s, at most half the collective timeout") {
  CHECK(hang_timeout(0, 0.1, 300) == 5.0);      // tiny steps: the floor
  CHECK(hang_timeout(0, 4.0, 300) == 20.0);     // 5 x the longest step
  CHECK(hang_timeout(0, 100.0, 300) == 150.0);  // never past half the watchdog's
  CHECK(hang_timeout(0, 0.1, 4) == 2.0);        // a short collective timeout wins over the floor
  CHECK(hang_timeout(12, 100.0, 300) == 12.0);  // --hang-timeout fixes it
}

TEST_CASE(
    "hang bounds: waiting on peers is never a rank's own hang; storage has a bound of its own") {
  CHECK_FALSE(overrun(Activity::communicating, "gradient allreduce", 1e6, 5, 60));
  CHECK_FALSE(overrun(Activity::recovering, "recovery", 1e6, 5, 60));
  CHECK_FALSE(overrun(Activity::computing, "compute", 4.9, 5, 60));
  const auto spinning = overrun(Activity::computing, "compute", 5.1, 5, 60);
  REQUIRE(spinning);
  CHECK(spinning->find("in compute for 5.1 s") != std::string::npos);
  // A checkpoint write or a data wait of a minute is slow storage, not a hang...
  CHECK_FALSE(overrun(Activity::writing_state, "checkpoint", 59, 5, 60));
  CHECK_FALSE(overrun(Activity::loading_data, "data wait", 59, 5, 60));
  // ...past its bound it is one.
  CHECK(overrun(Activity::writing_state, "node snapshot write", 61, 5, 60));
  CHECK(overrun(Activity::loading_data, "data wait", 61, 5, 60));
  // The I/O bound is never below the hang timeout.
  CHECK_FALSE(overrun(Activity::loading_data, "data wait", 90, 100, 60));
}

TEST_CASE(
    "a member whose heartbeat is older than the timeout is stopped; the lowest live rank on "
    "its host kills it") {
  const double now = 1000;
  const std::vector<Heartbeat> beats{beat(0, "a", now - 0.5), beat(1, "a", now - 0.2),
                                     beat(2, "b", now - 9),   beat(3, "b", now - 0.1),
                                     beat(4, "b", now - 0.3), beat(5, "c", now - 7)};
  const auto stopped = stopped_members(beats, now, 5);
  REQUIRE(stopped.size() == 2);
  CHECK(stopped[0].world_rank == 2);
  CHECK(stopped[1].world_rank == 5);
  // On host b, rank 3 is the lowest live rank (rank 2 is the stopped one itself).
  CHECK(killer_of(stopped[0], beats, now, 5) == 3);
  // Rank 5 is alone on host c: no rank in the job can signal it.
  CHECK_FALSE(killer_of(stopped[1], beats, now, 5));
  // Two stopped ranks on one host: neither kills the other.
  const std::vector<Heartbeat> frozen{beat(6, "d", now - 8), beat(7, "d", now - 8)};
  CHECK_FALSE(killer_of(frozen[0], frozen, now, 5));
  // Within the timeout nobody is stopped, however slow.
  CHECK(stopped_members(beats, now, 10).empty());
}

TEST_CASE("progress board: heartbeats and decisions round-trip, privately, per launch") {
  ScratchDirectory scratch("board");
  ProgressBoard board(places_in(scratch), "launch-a");
  Heartbeat mine = beat(3, "host-1", 1234.5);
  mine.doing = "node snapshot write";
  mine.activity = Activity::writing_state;
  board.publish(mine);
  mine.doing = "compute";  // rewritten in place, shorter: no tail of the longer record is left
  mine.activity = Activity::computing;
  mine.unix_time = 1240;
  board.publish(mine);
  const std::vector<int> ranks{3, 4};
  const auto read = board.read(ranks);
  REQUIRE(read.size() == 1);  // rank 4 has not beaten
  CHECK(read[0].world_rank == 3);
  CHECK(read[0].host == "host-1");
  CHECK(read[0].doing == "compute");
  CHECK(read[0].activity == Activity::computing);
  CHECK(read[0].unix_time == 1240);

  struct stat info {};
  // Heartbeats stay on the node, in the user's private tree.
  REQUIRE(::stat((scratch / "node/run-key/.heartbeats/launch-a").c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0700);
  REQUIRE(::stat((scratch / "node/run-key/.heartbeats/launch-a/rank-3").c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0600);
  CHECK_FALSE(std::filesystem::exists(scratch / "run/launch-a/rank-3"));

  // Another launch reads none of this one's beats.
  ProgressBoard other(places_in(scratch), "launch-b");
  CHECK(other.read(ranks).empty());

  CHECK_FALSE(board.decision_for(3));
  board.decide({.world_rank = 3,
                .host = "host-1",
                .pid = 77,
                .doing = "compute",
                .seconds_without_progress = 6.5,
                .timeout_s = 5,
                .detected_by = "its own monitor",
                .reason = "spinning",
                .unix_time = 1241});
  const auto decision = board.decision_for(3);
  REQUIRE(decision);
  CHECK(decision->pid == 77);
  CHECK(decision->detected_by == "its own monitor");

  CHECK(board.longest_step() == 0);
  board.keep_longest_step(0.75);
  CHECK(board.longest_step() == 0.75);
  CHECK(other.longest_step() == 0.75);  // the run's, for every launch

  // The decision is in the run directory, where the lead (on another host) reads it.
  CHECK(std::filesystem::exists(scratch / "run/launch-a/decision-3"));

  // The next launch removes the launches before it: on the node, and in the run directory.
  other.publish(beat(4, "host-1", 1300));
  other.remove_other_launches(/*node=*/true, /*shared=*/true);
  CHECK_FALSE(std::filesystem::exists(scratch / "node/run-key/.heartbeats/launch-a"));
  CHECK_FALSE(std::filesystem::exists(scratch / "run/launch-a"));
  CHECK(std::filesystem::exists(scratch / "run/longest-step.json"));
  // And its own at the end, leaving nothing of the run on the node.
  other.remove_launch(/*node=*/true, /*shared=*/true);
  CHECK_FALSE(std::filesystem::exists(scratch / "node/run-key"));
}

TEST_CASE("progress board: a launch directory that is a link is refused, not followed") {
  ScratchDirectory scratch("board-link");
  std::filesystem::create_directories(scratch / "elsewhere");
  std::filesystem::create_directories(scratch / "node/run-key/.heartbeats");
  std::filesystem::permissions(scratch / "node", std::filesystem::perms::owner_all);
  std::filesystem::create_directory_symlink(scratch / "elsewhere",
                                            scratch / "node/run-key/.heartbeats/launch");
  ProgressBoard board(places_in(scratch), "launch");
  CHECK_THROWS_AS(board.publish(beat(0, "h", 1)), hardy::Error);
  CHECK(std::filesystem::is_empty(scratch / "elsewhere"));
}

TEST_CASE("hang monitor: a rank that computes past the timeout names itself and is killed") {
  ScratchDirectory scratch("monitor-self");
  const HangMonitor::Options options{.board = places_in(scratch),
                                     .launch = "l",
                                     .world_rank = 1,
                                     .hosts = {"h", "h"},
                                     .fixed_timeout_s = 0.5};
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the hung rank: its monitor's tick sees 0.6 s of compute
    HangMonitor monitor(options);
    monitor.tick(progress("compute", Activity::computing, 0.6, {0, 1}));
    ::_exit(3);  // reached only if the monitor let it live
  }
  const int status = wait_for(child, 10s);
  REQUIRE(status != -1);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  const auto decision = ProgressBoard(places_in(scratch), "l").decision_for(1);
  REQUIRE(decision);
  CHECK(decision->pid == child);
  CHECK(decision->detected_by == "its own monitor");
  CHECK(decision->doing == "compute");
}

TEST_CASE("hang monitor: the I/O bound grows to 5 x the longest data wait or state write seen") {
  ScratchDirectory scratch("monitor-io");
  const int status = wait_status_of_child([&] {
    HangMonitor::Options options = lone_rank_options(scratch);
    options.io_timeout_s = 1;
    HangMonitor monitor(options);
    // A checkpoint that took 3 s (seen at its last tick), then compute again.
    monitor.tick(progress("checkpoint", Activity::writing_state, 3, {0}, /*training=*/false));
    monitor.tick(progress("compute", Activity::computing, 0.1, {0}));
    if (monitor.io_bound_s() != 15) ::_exit(4);
    // The next one may take as long again, and more, without being a hang...
    monitor.tick(progress("checkpoint", Activity::writing_state, 10, {0}));
    // ...but not past 5 x.
    monitor.tick(progress("checkpoint", Activity::writing_state, 16, {0}));
  });
  REQUIRE(status != -1);
  REQUIRE(WIFSIGNALED(status));  // exit 4: the bound did not grow; exit 0: never killed
  CHECK(WTERMSIG(status) == SIGKILL);
  const auto decision = ProgressBoard(places_in(scratch), "l").decision_for(0);
  REQUIRE(decision);
  CHECK(decision->seconds_without_progress == 16);
}

TEST_CASE("hang monitor: nothing is judged before training starts, and waiting is no hang") {
  ScratchDirectory scratch("monitor-quiet");
  const int status = wait_status_of_child([&] {
    HangMonitor monitor(lone_rank_options(scratch));
    monitor.tick(progress("compute", Activity::computing, 60, {0}, /*training=*/false));
    monitor.tick(progress("gradient allreduce", Activity::communicating, 60, {0}));
  });
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("hang monitor: a waiting rank kills a stopped peer on its host, and only a live one") {
  ScratchDirectory scratch("monitor-peer");
  const auto board_dir = places_in(scratch);
  const std::vector<std::string> hosts{"h", "h", "other"};
  // The peer (world rank 1) heartbeats once, then is stopped, as SIGSTOP would leave it.
  const pid_t peer = ::fork();
  REQUIRE(peer >= 0);
  if (peer == 0) {
    HangMonitor monitor({.board = board_dir, .launch = "l", .world_rank = 1, .hosts = hosts});
    monitor.tick(progress("compute", Activity::computing, 0.1, {0, 1, 2}));
    ::raise(SIGSTOP);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(peer, &status, WUNTRACED) == peer);
  REQUIRE(WIFSTOPPED(status));

  HangMonitor waiter(
      {.board = board_dir, .launch = "l", .world_rank = 0, .hosts = hosts, .fixed_timeout_s = 0.5});
  // Within the timeout the peer is left alone.
  waiter.tick(progress("gradient allreduce", Activity::communicating, 0.4, {0, 1, 2}));
  CHECK(wait_for(peer, 100ms) == -1);
  std::this_thread::sleep_for(1200ms);  // the peer's beat ages past the timeout
  waiter.tick(progress("gradient allreduce", Activity::communicating, 1.5, {0, 1, 2}));
  status = wait_for(peer, 5s);
  if (status == -1) ::kill(peer, SIGKILL), ::waitpid(peer, &status, 0);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  const auto decision = ProgressBoard(board_dir, "l").decision_for(1);
  REQUIRE(decision);
  CHECK(decision->detected_by == "rank 0 on its host");
  CHECK(decision->reason.find("stopped") != std::string::npos);
}

TEST_CASE(
    "hang monitor: a departed rank's stale beat, or a pid now another process's, is never "
    "killed") {
  ScratchDirectory scratch("monitor-stale");
  const auto board_dir = places_in(scratch);
  const std::vector<std::string> hosts{"h", "h", "h"};
  const pid_t bystander = ::fork();  // alive, but not the process that wrote the beat
  REQUIRE(bystander >= 0);
  if (bystander == 0) {
    ::pause();
    ::_exit(0);
  }
  ProgressBoard board(board_dir, "l");
  // World rank 1's beat is old and names the bystander's pid with another start time; world
  // rank 2's is old too but rank 2 is no longer a member.
  Heartbeat reused = beat(1, "h", hardy::core::unix_time() - 60);
  reused.pid = bystander;
  reused.process_start = "1";
  {
    ProgressBoard writer(board_dir, "l");
    writer.publish(reused);
  }
  {
    Heartbeat departed = beat(2, "h", hardy::core::unix_time() - 60);
    departed.pid = bystander;
    departed.process_start = hardy::core::process_start_ticks(bystander);
    ProgressBoard writer(board_dir, "l");
    writer.publish(departed);
  }
  HangMonitor waiter(
      {.board = board_dir, .launch = "l", .world_rank = 0, .hosts = hosts, .fixed_timeout_s = 0.5});
  waiter.tick(progress("step agreement", Activity::communicating, 5, {0, 1}));
  CHECK(wait_for(bystander, 300ms) == -1);  // still alive
  ::kill(bystander, SIGKILL);
  ::waitpid(bystander, nullptr, 0);
}

TEST_CASE("injected hangs: stop, spin, stall and sleep parse, with or without a phase") {
  const auto failures = parse_injected_failures(
      {"rank=3@step=40:stop", "rank=1@step=5:allreduce:spin", "node=1@step=9:stall",
       "rank=0@step=2:snapshot-write:sleep=2.5", "rank=2@step=4:recovery"},
      2);
  REQUIRE(failures.size() == 5);
  CHECK(failures[0].fault == Fault::stop);
  CHECK(failures[0].phase == Phase::forward);
  CHECK(failures[1].fault == Fault::spin);
  CHECK(failures[1].phase == Phase::allreduce);
  CHECK(failures[2].fault == Fault::stall);
  CHECK(failures[2].phase == Phase::snapshot_write);  // where a stall blocks by default
  CHECK(failures[2].world_ranks == std::vector<int>{2, 3});
  CHECK(failures[3].fault == Fault::sleep);
  CHECK(failures[3].sleep_s == 2.5);
  CHECK(failures[4].fault == Fault::kill);
  CHECK(failures[4].phase == Phase::recovery);
  CHECK_THROWS_AS(parse_injected_failures({"rank=1@step=5:spin:forward"}, 1),
                  hardy::InvalidArgument);
  CHECK_THROWS_AS(parse_injected_failures({"rank=1@step=5:sleep=0"}, 1), hardy::InvalidArgument);
  CHECK_THROWS_AS(parse_injected_failures({"rank=1@step=5:nap"}, 1), hardy::InvalidArgument);
}
