#include <catch2/catch.hpp>
#include <fstream>
#include <mutex>

#include "checkpoint_fixtures.hpp"
#include "hardy/checkpoint/checkpoint_directory.hpp"
#include "hardy/checkpoint/node_local_snapshots.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy;
using namespace hardy::checkpoint;
using namespace hardy::checkpoint::testing;

namespace {

namespace fs = std::filesystem;

std::vector<long> steps_in(const fs::path& dir) {
  std::vector<long> steps;
  for (const CheckpointEntry& entry : list_checkpoints(dir)) steps.push_back(entry.step);
  return steps;
}

// Writes snapshots of steps first..last through a host's writer, as the training loop does.
void write_steps(NodeLocalSnapshots& snapshots, long first, long last) {
  for (long step = first; step <= last; ++step) {
    TrainingState state = snapshots.take_spare();
    state = synthetic_state(step);
    snapshots.submit(std::move(state), 0.0);
  }
  snapshots.flush();
}

}  // namespace

TEST_CASE("node-local snapshots: the run key is the hash of the absolute, normal run directory",
          "[checkpoint]") {
  const fs::path cwd = fs::current_path();
  const std::string key = run_key("runs/a");
  CHECK(key.size() == 16);
  CHECK(key.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(run_key("./runs/a/") == key);
  CHECK(run_key("runs/b/../a") == key);
  CHECK(run_key(cwd / "runs/a") == key);
  CHECK(run_key("runs/b") != key);
  CHECK(run_key("/") == run_key("/"));

  CHECK(node_snapshot_directory("/dev/shm/hardy", "runs/a", "node7") ==
        fs::path("/dev/shm/hardy") / key / "node7");
  // A host name never leads out of the run's directory.
  for (const std::string host : {"", ".", "..", "a/../../b"}) {
    const fs::path dir = node_snapshot_directory("/r", "runs/a", host);
    CHECK(dir.parent_path() == fs::path("/r") / key);
    CHECK(dir.lexically_normal() == dir);
  }
}

TEST_CASE("node-local snapshots: the writer keeps the last two, the newest is found",
          "[checkpoint]") {
  ScratchDirectory root("node-local-write");
  NodeLocalSnapshots snapshots(root.path(), "runs/job", "node0");
  CHECK(snapshots.directory() == node_snapshot_directory(root.path(), "runs/job", "node0"));
  CHECK(fs::is_directory(snapshots.directory()));
  write_steps(snapshots, 1, 5);
  CHECK(steps_in(snapshots.directory()) == std::vector<long>{4, 5});
  const auto found = load_latest_valid(snapshots.directory());
  REQUIRE(found);
  CHECK(found->path == snapshots.directory() / "ckpt-5.h5");
  CHECK(found->state.step == 5);
  CHECK(found->state.model == synthetic_state(5).model);

  // A new job in the same run directory starts again at step 1: the old steps 4 and 5 must go.
  NodeLocalSnapshots again(root.path(), "runs/job", "node0");
  again.discard_newer_than(0);
  write_steps(again, 1, 1);
  CHECK(steps_in(again.directory()) == std::vector<long>{1});
  CHECK(load_latest_valid(again.directory())->state.step == 1);
}

TEST_CASE("node-local snapshots: a damaged newest snapshot is passed over for the one before",
          "[checkpoint]") {
  ScratchDirectory root("node-local-damage");
  NodeLocalSnapshots snapshots(root.path(), "runs/job", "node0");
  write_steps(snapshots, 1, 3);
  const fs::path newest = snapshots.directory() / "ckpt-3.h5";

  SECTION("a flipped byte") {
    flip_byte(newest, data_offset(newest, "/optimizer/momentum/layer.weight") + 8);
  }
  SECTION("truncated") { fs::resize_file(newest, fs::file_size(newest) / 2); }

  std::vector<std::string> skipped;
  const auto found = load_latest_valid(snapshots.directory(), &skipped);
  REQUIRE(found);
  CHECK(found->state.step == 2);
  REQUIRE(skipped.size() == 1);
  CHECK_THAT(skipped[0], Catch::Contains("ckpt-3.h5"));
}

TEST_CASE("node-local snapshots: cleanup removes exactly the job's directories", "[checkpoint]") {
  ScratchDirectory root("node-local-cleanup");
  NodeLocalSnapshots ours_here(root.path(), "runs/ours", "node0");
  NodeLocalSnapshots ours_there(root.path(), "runs/ours", "node1");
  NodeLocalSnapshots theirs(root.path(), "runs/theirs", "node0");
  write_steps(ours_here, 1, 2);
  write_steps(ours_there, 1, 2);
  write_steps(theirs, 1, 2);
  const fs::path ours = root / run_key("runs/ours");

  ours_here.remove();
  CHECK_FALSE(fs::exists(ours_here.directory()));
  CHECK(steps_in(ours_there.directory()) == std::vector<long>{1, 2});  // another host's: kept
  CHECK(fs::is_directory(ours));

  remove_node_snapshots(root.path(), "runs/ours", "node1");
  CHECK_FALSE(fs::exists(ours));                                   // empty now, so it goes too
  CHECK(steps_in(theirs.directory()) == std::vector<long>{1, 2});  // another job's: untouched
  CHECK(fs::is_directory(root.path()));

  // Nothing left to remove is not an error.
  CHECK_NOTHROW(remove_node_snapshots(root.path(), "runs/ours", "node1"));
}

TEST_CASE("node-local snapshots: failures are reported, not thrown", "[checkpoint]") {
  ScratchDirectory root("node-local-failure");
  std::mutex mutex;
  std::vector<WriteReport> reports;
  NodeLocalSnapshots snapshots(root.path(), "runs/job", "node0", [&](const WriteReport& report) {
    std::lock_guard lock(mutex);
    reports.push_back(report);
  });
  write_steps(snapshots, 1, 1);
  inject_write_failure_after(100);  // as if /dev/shm filled up
  CHECK_NOTHROW(write_steps(snapshots, 2, 2));
  inject_write_failure_after(std::nullopt);
  {
    std::lock_guard lock(mutex);
    REQUIRE(reports.size() == 2);
    CHECK(reports[0].error.empty());
    CHECK(reports[1].step == 2);
    CHECK_THAT(reports[1].error, Catch::Contains("ckpt-2.h5"));
  }
  CHECK(load_latest_valid(snapshots.directory())->state.step == 1);

  // A directory that cannot be created: the constructor says so.
  std::ofstream(root / "a-file") << "not a directory";
  CHECK_THROWS_AS(NodeLocalSnapshots(root / "a-file", "runs/job", "node0"), IoError);
}
