#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "hardy/core/data/sampler.hpp"
#include "hardy/core/data/staging.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/private_tree.hpp"
#include "scratch_directory.hpp"

namespace fs = std::filesystem;
using namespace hardy::core;
using namespace hardy::testing;

namespace {

std::vector<std::string> file_names(int count) {
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i)
    names.push_back(fmt::format("data-2016-01-{:02}-{:02}-1.h5", i / 8 + 1, i % 8));
  return names;
}

std::map<std::string, std::uint64_t> homes(const std::vector<std::string>& files,
                                           const std::vector<std::uint64_t>& nodes) {
  std::map<std::string, std::uint64_t> result;
  for (const auto& f : files) result[f] = nodes[home_node(f, nodes)];
  return result;
}

void write_file(const fs::path& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST_CASE("staging: homes spread evenly and move only with their node", "[core]") {
  const auto files = file_names(4000);
  const std::vector<std::uint64_t> four{11, 22, 33, 44};
  const auto before = homes(files, four);
  std::map<std::uint64_t, int> load;
  for (const auto& [file, node] : before) ++load[node];
  for (const auto& [node, count] : load) {
    CHECK(count > 850);  // 1000 expected; the binomial spread is about 27
    CHECK(count < 1150);
  }
  SECTION("losing a node moves only its files") {
    const auto after = homes(files, {11, 22, 44});
    for (const auto& file : files)
      if (before.at(file) != 33) CHECK(after.at(file) == before.at(file));
  }
  SECTION("a spare joining takes files only for itself") {
    const auto after = homes(files, {11, 22, 33, 44, 55});
    int moved = 0;
    for (const auto& file : files)
      if (after.at(file) != before.at(file)) {
        CHECK(after.at(file) == 55);
        ++moved;
      }
    CHECK(moved > 650);  // a fifth of 4000 expected
    CHECK(moved < 950);
  }
  SECTION("the order of the node list does not matter") {
    CHECK(homes(files, {44, 33, 22, 11}) == before);
  }
  CHECK_THROWS_AS(home_node("x", {}), hardy::InvalidArgument);
}

TEST_CASE("staging: a placement keeps every rank's share and every sample once", "[core]") {
  std::mt19937 random(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int nodes = 1 + static_cast<int>(random() % 5);
    const int world = nodes + static_cast<int>(random() % 7);
    std::vector<int> node_of_rank(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) node_of_rank[static_cast<std::size_t>(r)] = r % nodes;
    const std::size_t batch = static_cast<std::size_t>(world) + random() % 40;
    std::vector<int> home(batch);
    for (auto& h : home) h = static_cast<int>(random() % (nodes + 1)) - 1;  // -1: staged nowhere
    const auto placed = place_batch(home, node_of_rank);
    REQUIRE(placed.size() == static_cast<std::size_t>(world));
    std::multiset<std::size_t> seen;
    std::map<int, std::size_t> room, homed_away;
    for (int r = 0; r < world; ++r) {
      const auto& mine = placed[static_cast<std::size_t>(r)];
      CHECK(mine.size() == shard_of(batch, r, world).size());
      CHECK(std::is_sorted(mine.begin(), mine.end()));
      seen.insert(mine.begin(), mine.end());
      room[node_of_rank[static_cast<std::size_t>(r)]] += mine.size();
      for (std::size_t i : mine)
        if (home[i] >= 0 && home[i] != node_of_rank[static_cast<std::size_t>(r)])
          ++homed_away[home[i]];
    }
    for (std::size_t i = 0; i < batch; ++i) CHECK(seen.count(i) == 1);
    // A sample is read away from its home only when the home node's share was full of its own.
    for (const auto& [node, away] : homed_away) {
      std::size_t at_home = 0;
      for (int r = 0; r < world; ++r)
        if (node_of_rank[static_cast<std::size_t>(r)] == node)
          for (std::size_t i : placed[static_cast<std::size_t>(r)]) at_home += home[i] == node;
      CHECK(at_home == room[node]);
    }
  }
}

TEST_CASE("staging: with nothing staged the placement is the contiguous split", "[core]") {
  const std::vector<int> home(23, -1), node_of_rank{0, 0, 1, 1, 2};
  const auto placed = place_batch(home, node_of_rank);
  for (int r = 0; r < 5; ++r) {
    const auto shard = shard_of(23, r, 5);
    std::vector<std::size_t> expected;
    for (std::size_t i = shard.begin; i < shard.end; ++i) expected.push_back(i);
    CHECK(placed[static_cast<std::size_t>(r)] == expected);
  }
}

TEST_CASE("staging: files are copied once, recopied when changed, never left half-written",
          "[core]") {
  ScratchDirectory scratch("staging");
  const fs::path shared = scratch.path() / "shared", local = scratch.path() / "local";
  fs::create_directories(shared);
  std::vector<StageCopy> copies;
  for (int i = 0; i < 9; ++i) {
    const auto name = fmt::format("data-{}.h5", i);
    write_file(shared / name,
               std::string(static_cast<std::size_t>(1000 + i * 777), static_cast<char>('a' + i)));
    copies.push_back({shared / name, local / "train" / name});
  }
  std::vector<hardy::core::StageProgress> reports;
  const auto first = stage_files(local, copies, 3, [&](const auto& p) { reports.push_back(p); });
  CHECK(first.copied == 9);
  CHECK(first.current == 0);
  REQUIRE(!reports.empty());
  CHECK(reports.back().files_done == 9);
  CHECK(reports.back().bytes_copied == first.bytes_copied);
  for (const auto& copy : copies) {
    CHECK(read_file(copy.destination) == read_file(copy.source));
    CHECK(hardy::core::is_current_copy(copy.source, copy.destination));
  }
  CHECK(stage_files(local, copies, 2).copied == 0);

  // Changed content of the same size: the modification time tells.
  write_file(copies[4].source, std::string(1000 + 4 * 777, 'Z'));
  fs::last_write_time(copies[4].source,
                      fs::last_write_time(copies[4].source) + std::chrono::seconds(5));
  CHECK_FALSE(hardy::core::is_current_copy(copies[4].source, copies[4].destination));
  const auto again = stage_files(local, copies, 2);
  CHECK(again.copied == 1);
  CHECK(again.current == 8);
  CHECK(read_file(copies[4].destination) == read_file(copies[4].source));

  // A missing source fails the staging by name and leaves no .part behind.
  fs::remove(copies[7].destination);
  fs::remove(copies[7].source);
  CHECK_THROWS_WITH(stage_files(local, copies, 2), Catch::Contains("data-7.h5"));
  for (const auto& entry : fs::recursive_directory_iterator(local))
    CHECK(entry.path().extension() != ".part");
}

TEST_CASE("staging: a copy whose size and time are forged is copied again, into a private tree",
          "[core]") {
  ScratchDirectory scratch("staging-forged");
  const fs::path shared = scratch.path() / "shared", local = scratch.path() / "local";
  fs::create_directories(shared);
  write_file(shared / "data-0.h5", std::string(5000, 'a'));
  const std::vector<StageCopy> copies{{shared / "data-0.h5", local / "train" / "data-0.h5"}};
  REQUIRE(stage_files(local, copies, 1).copied == 1);
  CHECK((fs::status(local / "train").permissions() & fs::perms::all) == fs::perms::owner_all);
  CHECK((fs::status(copies[0].destination).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write));
  // Other bytes, the same size and modification time (touch -d): looks current, is not.
  const auto modified = fs::last_write_time(copies[0].destination);
  write_file(copies[0].destination, std::string(5000, 'X'));
  fs::last_write_time(copies[0].destination, modified);
  REQUIRE(hardy::core::is_current_copy(copies[0].source, copies[0].destination));
  std::vector<std::size_t> staged;
  CHECK(stage_files(local, copies, 1, {}, [&](std::size_t i) { staged.push_back(i); }).copied == 1);
  CHECK(read_file(copies[0].destination) == std::string(5000, 'a'));
  CHECK(staged == std::vector<std::size_t>{0});
  // A planted .part link is replaced, not written through.
  write_file(scratch.path() / "victim", "precious");
  fs::remove(copies[0].destination);
  fs::create_symlink(scratch.path() / "victim", local / "train" / "data-0.h5.part");
  CHECK(stage_files(local, copies, 1).copied == 1);
  CHECK(read_file(scratch.path() / "victim") == "precious");

  // A tree others may write into is refused before anything is copied.
  fs::permissions(local / "train", fs::perms::all);
  fs::remove(copies[0].destination);
  CHECK_THROWS_AS(stage_files(local, copies, 1), hardy::core::UnsafeDirectory);
  CHECK_FALSE(fs::exists(copies[0].destination));
}

TEST_CASE("staging: what a killed copier half-wrote goes, a live copier's does not", "[core]") {
  ScratchDirectory scratch("staging");
  const fs::path shared = scratch.path() / "shared", local = scratch.path() / "local";
  fs::create_directories(shared);
  write_file(shared / "data-0.h5", std::string(5000, 'a'));
  const std::vector<StageCopy> copies{{shared / "data-0.h5", local / "train" / "data-0.h5"}};
  stage_files(local, copies, 1);
  // Left by a copier killed mid-copy: a file whose home is another node now, so no later copy
  // here would replace it.
  const fs::path orphan = local / "train" / "data-9.h5.part";
  write_file(orphan, "half");

  // While another copier holds the directory, its .part files are its own: staging waits.
  const int held = ::open((local / "train" / ".staging.lock").c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(held >= 0);
  REQUIRE(::flock(held, LOCK_EX) == 0);
  auto staging = std::async(std::launch::async, [&] { return stage_files(local, copies, 1); });
  CHECK(staging.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout);
  CHECK(fs::exists(orphan));
  ::close(held);  // as the kernel does for a copier that dies
  CHECK(staging.get().current == 1);
  CHECK_FALSE(fs::exists(orphan));
  CHECK(fs::is_regular_file(local / "train" / "data-0.h5"));
}
