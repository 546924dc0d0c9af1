#include <catch2/catch.hpp>
#include <fstream>
#include <mutex>

#include "checkpoint_fixtures.hpp"
#include "hardy/checkpoint/checkpoint_directory.hpp"
#include "hardy/checkpoint/node_local_snapshots.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/private_tree.hpp"

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

TEST_CASE("node-local snapshots: the tree is private, directories 0700 and files 0600",
          "[checkpoint]") {
  ScratchDirectory root("node-local-private");
  NodeLocalSnapshots snapshots(root / "hardy-user", "runs/job", "node0");
  write_steps(snapshots, 1, 2);
  const auto mode = [](const fs::path& path) { return fs::symlink_status(path).permissions(); };
  CHECK(mode(root / "hardy-user") == fs::perms::owner_all);
  CHECK(mode(snapshots.directory().parent_path()) == fs::perms::owner_all);
  CHECK(mode(snapshots.directory()) == fs::perms::owner_all);
  for (const CheckpointEntry& entry : list_checkpoints(snapshots.directory())) {
    INFO(entry.path);
    CHECK(mode(entry.path) == (fs::perms::owner_read | fs::perms::owner_write));
  }
}

TEST_CASE("node-local snapshots: a tree others could change is refused and left alone",
          "[checkpoint]") {
  ScratchDirectory scratch("node-local-refused");
  const fs::path root = scratch / "hardy-user";
  const fs::path victim = scratch / "real-checkpoints";
  fs::create_directories(victim);
  const TrainingState precious = synthetic_state(3);
  save_checkpoint(precious, victim);
  // Planted: the run's directory world-writable, this host's directory a link to the victim.
  const fs::path host_dir = node_snapshot_directory(root, "runs/job", "node0");
  fs::create_directories(host_dir.parent_path());
  fs::permissions(host_dir.parent_path(), fs::perms::all);
  fs::create_directory_symlink(victim, host_dir);

  CHECK_THROWS_AS(NodeLocalSnapshots(root, "runs/job", "node0"), core::UnsafeDirectory);
  CHECK_THROWS_WITH(remove_node_snapshots(root, "runs/job", "node0"),
                    Catch::Contains(host_dir.parent_path().string()) &&
                        Catch::Contains("writable by other users"));
  // With the run's directory made private again, the link itself is what is refused.
  fs::permissions(host_dir.parent_path(), fs::perms::owner_all);
  CHECK_THROWS_WITH(remove_node_snapshots(root, "runs/job", "node0"),
                    Catch::Contains("symbolic link"));
  CHECK(steps_in(victim) == std::vector<long>{3});
  CHECK(read_checkpoint(victim / "ckpt-3.h5").model == precious.model);
}

TEST_CASE("checkpoints: a planted .tmp link is replaced, never written through", "[checkpoint]") {
  ScratchDirectory scratch("planted-tmp");
  const fs::path victim = scratch / "victim.txt";
  std::ofstream(victim) << "precious";
  const fs::path dir = scratch / "checkpoints";
  fs::create_directories(dir);
  fs::create_symlink(victim, dir / "ckpt-4.h5.tmp");
  save_checkpoint(synthetic_state(4), dir);
  std::ifstream in(victim);
  std::string text;
  in >> text;
  CHECK(text == "precious");
  CHECK(read_checkpoint(dir / "ckpt-4.h5").step == 4);
}

TEST_CASE("node-local snapshots: a valid snapshot that is unfit is passed over, with the reason",
          "[checkpoint]") {
  ScratchDirectory root("node-local-unfit");
  NodeLocalSnapshots snapshots(root.path(), "runs/job", "node0");
  write_steps(snapshots, 1, 2);
  std::vector<std::string> skipped;
  const auto found =
      load_latest_valid(snapshots.directory(), &skipped,
                        [](const TrainingState& state) -> std::optional<std::string> {
                          if (state.step == 2) return "it belongs to another run";
                          return std::nullopt;
                        });
  REQUIRE(found);
  CHECK(found->state.step == 1);
  REQUIRE(skipped.size() == 1);
  CHECK_THAT(skipped.front(),
             Catch::Contains("ckpt-2.h5") && Catch::Contains("it belongs to another run"));
}
