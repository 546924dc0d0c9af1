// What crashed runs leave in the node-local tier goes once idle for the grace period, and nothing
// else under the root is touched.
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "checkpoint_fixtures.hpp"
#include "hardy/checkpoint/node_local_snapshots.hpp"
#include "hardy/checkpoint/stale_snapshots.hpp"

using namespace hardy::checkpoint;
using namespace hardy::checkpoint::testing;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// A run's host directory with one snapshot file, everything in it last written `age` ago.
fs::path make_run(const fs::path& root, const std::string& key, std::chrono::hours age) {
  const fs::path host = root / key / "node0";
  fs::create_directories(host);
  std::ofstream(host / "ckpt-3.h5") << std::string(1000, 'x');
  const auto then = fs::file_time_type::clock::now() - age;
  for (const fs::path& path : {host / "ckpt-3.h5", host, root / key})
    fs::last_write_time(path, then);
  return root / key;
}

}  // namespace

TEST_CASE("stale node-local snapshots: idle runs go, active, kept and foreign entries stay",
          "[checkpoint]") {
  ScratchDirectory dir("stale-snapshots");
  const fs::path root = dir / "shm";
  const fs::path crashed = make_run(root, "00000000000000aa", 48h);
  const fs::path active = make_run(root, "00000000000000bb", 0h);
  const fs::path mine = make_run(root, run_key(dir / "run"), 48h);  // this job's own run
  const fs::path foreign = make_run(root, "not-a-run-key", 48h);    // someone else's directory
  std::ofstream(root / "00000000000000cc") << "a file, not a run";

  const auto removed = remove_stale_node_snapshots(root, run_key(dir / "run"), kStaleSnapshotGrace);
  REQUIRE(removed.size() == 1);
  CHECK(removed[0].directory == crashed);
  CHECK(removed[0].bytes == 1000);
  CHECK(removed[0].idle_s > 47 * 3600.0);
  CHECK_FALSE(fs::exists(crashed));
  for (const fs::path& kept : {active, mine, foreign, root / "00000000000000cc"})
    CHECK(fs::exists(kept));

  // A file written lately keeps its run, however old the rest is.
  const fs::path touched = make_run(root, "00000000000000dd", 48h);
  std::ofstream(touched / "node0" / "ckpt-4.h5") << "new";
  CHECK(remove_stale_node_snapshots(root, run_key(dir / "run"), kStaleSnapshotGrace).empty());
  CHECK(remove_stale_node_snapshots(dir / "no-such-root", "", 0s).empty());
}

TEST_CASE("stale node-local snapshots: a run that is over goes at once, a live one stays",
          "[checkpoint]") {
  ScratchDirectory dir("over-snapshots");
  const fs::path root = dir / "shm";
  // Two runs whose trees were written a moment ago, each with the record of its run directory
  // (as NodeLocalSnapshots writes it), and one tree without a record.
  const auto run_tree = [&](const std::string& name) {
    const fs::path run_dir = dir / name;
    NodeLocalSnapshots writer(root, run_dir, "node0");
    return std::pair{run_dir, root / run_key(run_dir)};
  };
  const auto [over_dir, over_tree] = run_tree("over");
  const auto [live_dir, live_tree] = run_tree("live");
  const fs::path unrecorded = make_run(root, "00000000000000ee", 0h);
  REQUIRE(recorded_run_directory(root, run_key(over_dir)) == fs::absolute(over_dir));

  std::vector<fs::path> asked;
  const auto removed =
      remove_stale_node_snapshots(root, "", kStaleSnapshotGrace,
                                  // An init-capture: Clang before 16 cannot capture a structured
                                  // binding by name.
                                  [&, over = fs::absolute(over_dir)](const fs::path& run_dir) {
                                    asked.push_back(run_dir);
                                    return run_dir == over;
                                  });
  REQUIRE(removed.size() == 1);
  CHECK(removed[0].directory == over_tree);
  CHECK(removed[0].run_over);
  CHECK_FALSE(fs::exists(over_tree));
  CHECK(fs::exists(live_tree));
  CHECK(fs::exists(unrecorded));  // no record: only its age can tell
  CHECK(asked.size() == 2);
  // Without the question, age alone decides, as before.
  CHECK(remove_stale_node_snapshots(root, "", kStaleSnapshotGrace).empty());
}
