#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <iterator>
#include <mutex>

#include "checkpoint_fixtures.hpp"
#include "hardy/checkpoint/checkpoint_directory.hpp"
#include "hardy/checkpoint/node_local_snapshots.hpp"
#include "hardy/checkpoint/snapshot_file.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/private_tree.hpp"

using namespace hardy;
using namespace hardy::checkpoint;
using namespace hardy::checkpoint::testing;

namespace {

namespace fs = std::filesystem;

long peak_resident_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

std::vector<long> steps_in(const fs::path& dir) {
  std::vector<long> steps;
  for (const SnapshotEntry& entry : list_snapshots(dir)) steps.push_back(entry.step.value_or(-1));
  return steps;
}

fs::path slot_of(const fs::path& dir, long step) {
  for (const SnapshotEntry& entry : list_snapshots(dir))
    if (entry.step == step) return entry.path;
  FAIL("no slot holds step " << step);
  return {};
}

// The completion mark is the header's last 8 bytes (snapshot_file.hpp).
constexpr std::uint64_t kCompletionMarkOffset = 56;
constexpr std::uint64_t kHeaderBytes = 64;

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
  const auto found = load_newest_snapshot(snapshots.directory());
  REQUIRE(found);
  CHECK(found->path.parent_path() == snapshots.directory());
  CHECK(found->path.extension() == ".snapshot");
  CHECK(found->state.step == 5);
  CHECK(found->state.model == synthetic_state(5).model);
  CHECK(found->state.optimizer == synthetic_state(5).optimizer);
  CHECK(found->state.config_ini == synthetic_state(5).config_ini);

  // A new job in the same run directory starts again at step 1: the old steps 4 and 5 must go.
  NodeLocalSnapshots again(root.path(), "runs/job", "node0");
  again.discard_newer_than(0);
  CHECK(steps_in(again.directory()).empty());
  write_steps(again, 1, 1);
  CHECK(steps_in(again.directory()) == std::vector<long>{1});
  CHECK(load_newest_snapshot(again.directory())->state.step == 1);

  // Resumed at step 4 of that run: 5 goes, 4 stays, and the next write does not overwrite 4.
  write_steps(again, 4, 5);
  NodeLocalSnapshots resumed(root.path(), "runs/job", "node0");
  resumed.discard_newer_than(4);
  CHECK(steps_in(resumed.directory()) == std::vector<long>{4});
  write_steps(resumed, 5, 5);
  CHECK(steps_in(resumed.directory()) == std::vector<long>{4, 5});
}

TEST_CASE(
    "node-local snapshots: a damaged or unfinished newest snapshot is passed over for the "
    "one before",
    "[checkpoint]") {
  ScratchDirectory root("node-local-damage");
  NodeLocalSnapshots snapshots(root.path(), "runs/job", "node0");
  write_steps(snapshots, 1, 3);
  snapshots.flush();
  const fs::path newest = slot_of(snapshots.directory(), 3);
  std::string why, tools_say;

  SECTION("a flipped byte in the tensors") {
    flip_byte(newest, fs::file_size(newest) / 2);
    why = "checksum of its contents does not match";
  }
  SECTION("a flipped byte in the header") {
    flip_byte(newest, 20);  // the step
    why = "header's checksum does not match";
  }
  SECTION("cut short: the writer died before the completion mark") {
    flip_byte(newest, kCompletionMarkOffset);
    why = "incomplete";
  }
  SECTION("truncated") {
    fs::resize_file(newest, fs::file_size(newest) / 2);
    why = "after its header, the header says";
  }
  SECTION("only a header's worth of bytes left") {
    fs::resize_file(newest, kHeaderBytes / 2);
    why = "not a hardy snapshot";
    tools_say = "not an HDF5 file";  // nothing left to tell it from any other file
  }

  std::vector<std::string> skipped;
  const auto found = load_newest_snapshot(snapshots.directory(), &skipped);
  REQUIRE(found);
  CHECK(found->state.step == 2);
  REQUIRE(skipped.size() == 1);
  CHECK_THAT(skipped[0], Catch::Contains(newest.filename().string()) && Catch::Contains(why));
  // The tools say the same (read_checkpoint_file recognises a slot file).
  CHECK_THROWS_WITH(read_checkpoint_file(newest),
                    Catch::Contains(tools_say.empty() ? why : tools_say));

  // A relaunch resumes from step 2 and drops what is newer; its writes go to the damaged slot,
  // never over the good one.
  NodeLocalSnapshots relaunched(root.path(), "runs/job", "node0");
  relaunched.discard_newer_than(found->state.step);
  write_steps(relaunched, 3, 3);
  CHECK(load_newest_snapshot(relaunched.directory())->state.step == 3);
  const auto left = list_snapshots(relaunched.directory());
  REQUIRE(left.size() == 2);
  CHECK(left.front().step == 2);
}

TEST_CASE("node-local snapshots: a slot file reads like a checkpoint file, with the same datasets",
          "[checkpoint]") {
  ScratchDirectory root("node-local-as-checkpoint");
  NodeLocalSnapshots snapshots(root.path(), "runs/job", "node0");
  write_steps(snapshots, 7, 7);
  const fs::path slot = slot_of(snapshots.directory(), 7);
  const fs::path h5 = root / "ckpt-7.h5";
  write_checkpoint_file(synthetic_state(7), h5);

  const CheckpointContents from_slot = read_checkpoint_file(slot);
  const CheckpointContents from_h5 = read_checkpoint_file(h5);
  CHECK(from_slot.state.model == from_h5.state.model);
  CHECK(from_slot.state.optimizer == from_h5.state.optimizer);
  CHECK(from_slot.state.step == 7);
  CHECK(from_slot.format_version == kSnapshotFormatVersion);
  CHECK(from_slot.file_bytes == fs::file_size(slot));
  REQUIRE(from_slot.datasets.size() == from_h5.datasets.size());
  for (std::size_t i = 0; i < from_slot.datasets.size(); ++i) {
    INFO(from_h5.datasets[i].path);
    CHECK(from_slot.datasets[i].path == from_h5.datasets[i].path);
    CHECK(from_slot.datasets[i].dtype == from_h5.datasets[i].dtype);
    CHECK(from_slot.datasets[i].shape == from_h5.datasets[i].shape);
    CHECK(from_slot.datasets[i].checksum == from_h5.datasets[i].checksum);
  }
  CHECK(is_snapshot_file(slot));
  CHECK_FALSE(is_snapshot_file(h5));
}

TEST_CASE("node-local snapshots: a state that changes size is written whole", "[checkpoint]") {
  ScratchDirectory root("node-local-resize");
  SnapshotSlots slots(root.path());
  TrainingState state = synthetic_state(1);
  slots.write(state);
  state = synthetic_state(2, 5000);  // more floats: both slots grow
  state.hosts = {"a-much-longer-host-name-than-before", "b", "c"};
  slots.write(state);
  state = synthetic_state(3, 10);  // fewer: the slot shrinks
  const auto saved = slots.write(state);
  CHECK(fs::file_size(saved.path) == saved.bytes);
  const auto newest = load_newest_snapshot(root.path());
  REQUIRE(newest);
  CHECK(newest->state.model == synthetic_state(3, 10).model);
  CHECK(read_checkpoint(slot_of(root.path(), 2)).hosts ==
        std::vector<std::string>{"a-much-longer-host-name-than-before", "b", "c"});
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

TEST_CASE(
    "node-local snapshots: the run's tree records its run directory, and the roots a run's "
    "trees may be under are one job's and each fault domain's",
    "[checkpoint]") {
  ScratchDirectory root("node-local-roots");
  NodeLocalSnapshots one_job(root.path(), "runs/a", "node0");
  NodeLocalSnapshots domain_1(domain_snapshot_root(root.path(), 1), "runs/a", "node0");
  NodeLocalSnapshots domain_12(domain_snapshot_root(root.path(), 12), "runs/a", "node0");
  CHECK(recorded_run_directory(root.path(), run_key("runs/a")) ==
        fs::absolute("runs/a").lexically_normal());
  CHECK_FALSE(recorded_run_directory(root.path(), run_key("runs/b")));
  fs::create_directories(root / "domain-x");                           // not a domain's
  fs::create_directory_symlink(root / "domain-1", root / "domain-7");  // a link: never followed
  CHECK(node_snapshot_roots(root.path()) ==
        std::vector<fs::path>{root.path(), root / "domain-1", root / "domain-12"});
  CHECK(node_snapshot_roots(root / "missing").empty());
  // The last host's removal takes the record and the run's directory with it.
  domain_1.remove();
  CHECK_FALSE(fs::exists(domain_snapshot_root(root.path(), 1) / run_key("runs/a")));
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
    CHECK(reports[0].cpu_s > 0);
    CHECK(reports[0].bytes == fs::file_size(reports[0].path));
    CHECK(reports[1].step == 2);
    CHECK_THAT(reports[1].error,
               Catch::Contains(".snapshot") && Catch::Contains("No space left on device"));
  }
  CHECK(load_newest_snapshot(snapshots.directory())->state.step == 1);

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
  const auto slots = list_snapshots(snapshots.directory());
  CHECK(slots.size() == 2);
  for (const SnapshotEntry& entry : slots) {
    INFO(entry.path);
    CHECK(mode(entry.path) == (fs::perms::owner_read | fs::perms::owner_write));
  }
}

TEST_CASE("node-local snapshots: a link planted at a slot's name is refused, never written through",
          "[checkpoint]") {
  ScratchDirectory scratch("node-local-planted-slot");
  const fs::path victim = scratch / "victim.txt";
  std::ofstream(victim) << "precious";
  const fs::path dir = scratch / "host";
  fs::create_directories(dir);
  fs::create_symlink(victim, snapshot_slot_path(dir, 0));
  SnapshotSlots slots(dir);
  CHECK_THROWS_AS(slots.write(synthetic_state(1)), IoError);
  std::string text;
  std::ifstream(victim) >> text;
  CHECK(text == "precious");
  // Nor is it read: the loader names the link and goes on.
  std::vector<std::string> skipped;
  CHECK_FALSE(load_newest_snapshot(dir, &skipped));
  REQUIRE(skipped.size() == 1);
  CHECK_THAT(skipped[0], Catch::Contains("symbolic link"));
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
  REQUIRE(list_checkpoints(victim).size() == 1);
  CHECK(list_checkpoints(victim).front().step == 3);
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

TEST_CASE("checkpoints: a large .tmp left by a crashed write is replaced, never read",
          "[checkpoint]") {
  // HDF5 loads a file that exists at the name it lays out into memory first: a leftover of a
  // large model's write would cost its size in memory and a full read on the next save. CTest
  // runs this case in a process of its own, whose peak memory is far below the leftover's size.
  ScratchDirectory scratch("leftover-tmp");
  const fs::path dir = scratch / "checkpoints";
  fs::create_directories(dir);
  const fs::path leftover = dir / "ckpt-6.h5.tmp";
  constexpr std::uintmax_t leftover_bytes = std::uintmax_t{512} << 20;
  std::ofstream(leftover) << "a crashed write";
  fs::resize_file(leftover, leftover_bytes);
  const long peak_before = peak_resident_kib();
  save_checkpoint(synthetic_state(6), dir);
  CHECK(peak_resident_kib() - peak_before < static_cast<long>(leftover_bytes / 2 / 1024));
  CHECK(read_checkpoint(dir / "ckpt-6.h5").step == 6);
  CHECK_FALSE(fs::exists(leftover));
}

TEST_CASE("node-local snapshots: a valid snapshot that is unfit is passed over, with the reason",
          "[checkpoint]") {
  ScratchDirectory root("node-local-unfit");
  NodeLocalSnapshots snapshots(root.path(), "runs/job", "node0");
  write_steps(snapshots, 1, 2);
  std::vector<std::string> skipped;
  const auto found =
      load_newest_snapshot(snapshots.directory(), &skipped,
                           [](const TrainingState& state) -> std::optional<std::string> {
                             if (state.step == 2) return "it belongs to another run";
                             return std::nullopt;
                           });
  REQUIRE(found);
  CHECK(found->state.step == 1);
  REQUIRE(skipped.size() == 1);
  CHECK_THAT(skipped.front(), Catch::Contains(slot_of(snapshots.directory(), 2).string()) &&
                                  Catch::Contains("it belongs to another run"));
}

TEST_CASE("node-local snapshots: each write moves its slot's modification time", "[checkpoint]") {
  // The stale-run cleanup goes by it: a live run's slots, rewritten in place through a mapping,
  // must never look idle.
  ScratchDirectory root("node-local-mtime");
  SnapshotSlots slots(root.path());
  const fs::path first = slots.write(synthetic_state(1)).path;
  slots.write(synthetic_state(2));
  const auto long_ago = fs::file_time_type::clock::now() - std::chrono::hours(48);
  fs::last_write_time(first, long_ago);
  CHECK(slots.write(synthetic_state(3)).path == first);  // the older slot again
  CHECK(fs::last_write_time(first) > long_ago + std::chrono::hours(47));
}

TEST_CASE("node-local snapshots: written straight from the model, the same bytes as from a copy",
          "[checkpoint]") {
  // Width 4: the whole stream in one hash piece; width 24: 1.7 MiB, pieces that cut tensors
  // and tensors that span pieces, copied by several threads.
  const int width = GENERATE(4, 24);
  TrainedModel trained(11, core::OptimizerKind::adam, 2, tiny_model_config(width));
  TrainingState scalars;
  set_scalars(scalars, 9);
  capture_scalars_into(*trained.optimizer, scalars);
  TrainingState copy = scalars;
  capture_into(trained.model, *trained.optimizer, copy);
  copy.unix_time = scalars.unix_time;

  ScratchDirectory root("node-local-from-model");
  SnapshotSlots from_model(root / "from-model"), from_copy(root / "from-copy");
  fs::create_directories(root / "from-model");
  fs::create_directories(root / "from-copy");
  const auto direct = from_model.write(state_sources(trained.model, *trained.optimizer), scalars);
  const auto copied = from_copy.write(copy);
  CHECK(direct.bytes == copied.bytes);
  if (width > 4) CHECK(direct.bytes > 4 * (std::size_t{256} << 10));
  const auto bytes_of = [](const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  CHECK(bytes_of(direct.path) == bytes_of(copied.path));
  const TrainingState read = read_checkpoint(direct.path);
  CHECK(read.model == copy.model);
  CHECK(read.optimizer == copy.optimizer);
  CHECK(read.step == 9);

  // The next snapshot reuses the tensors' layout: still the same bytes, in the other slot.
  scalars.step = copy.step = 10;
  scalars.hosts = copy.hosts = {"a-longer-host-name"};
  const auto again = from_model.write(state_sources(trained.model, *trained.optimizer), scalars);
  const auto again_copied = from_copy.write(copy);
  CHECK(again.path != direct.path);
  CHECK(bytes_of(again.path) == bytes_of(again_copied.path));
  CHECK(load_newest_snapshot(root / "from-model")->state.hosts == copy.hosts);
}
