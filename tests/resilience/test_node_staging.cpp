#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "hardy/core/data/sample_files.hpp"
#include "hardy/core/data/sampler.hpp"
#include "hardy/core/support/error.hpp"
#include "scratch_directory.hpp"
#include "session/node_staging.hpp"

namespace fs = std::filesystem;
using hardy::resilience::NodeStaging;

using hardy::testing::ScratchDirectory;
namespace {

// A dataset of `count` one-sample files below root/train (a symlink to root/real-train, as
// published data sets often have).
std::vector<fs::path> make_files(const fs::path& root, int count) {
  fs::create_directories(root / "real-train");
  fs::create_directory_symlink(root / "real-train", root / "train");
  std::vector<fs::path> files;
  for (int i = 0; i < count; ++i) {
    files.push_back(root / "train" /
                    fmt::format("data-2016-01-{:02}-{:02}-1.h5", i / 8 + 1, i % 8));
    std::ofstream(files.back()) << std::string(100 + i, 'x');
  }
  return files;
}

// Staged copies below `dir` (not the launches' lists of verified copies).
std::size_t files_below(const fs::path& dir) {
  std::size_t count = 0;
  if (!fs::exists(dir)) return 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    // Not the staging's own files (.verified-* marks, the copiers' .staging.lock): samples only.
    count += entry.is_regular_file() && !entry.path().filename().string().starts_with(".");
  return count;
}

std::string read_text(const fs::path& path) {
  std::ifstream file(path);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// Sample files that keep the locator they are given (the DeepCAM and ClimateNet readers call it
// from their loader threads).
struct LocatedFiles : hardy::core::SampleFiles {
  explicit LocatedFiles(std::vector<fs::path> files) : list(std::move(files)) {}
  const std::vector<fs::path>& files() const override { return list; }
  void set_file_locator(FileLocator given) override { locator = std::move(given); }
  std::vector<fs::path> list;
  FileLocator locator;
};

}  // namespace

TEST_CASE("node staging: each node copies its share; a lost node's share moves, nothing else",
          "[resilience]") {
  ScratchDirectory scratch("node-staging");
  const auto files = make_files(scratch.path() / "data", 64);
  const std::vector<std::string> hosts{"n0", "n0", "n1", "n1", "n2", "n2"};
  // One NodeStaging per rank, each with its own staging directory (node-local storage).
  std::vector<std::unique_ptr<NodeStaging>> ranks;
  std::size_t homed = 0;
  for (int r = 0; r < 6; ++r) {
    ranks.push_back(std::make_unique<NodeStaging>(scratch.path() / "local", scratch.path() / "data",
                                                  files, hosts[static_cast<std::size_t>(r)],
                                                  "0123456789abcdef", 2));
    const auto plan = ranks.back()->plan(hosts, r, /*copier=*/r % 2 == 0, /*wait=*/true);
    CHECK(plan.moved == files.size());
    if (r % 2 == 0) homed += plan.homed_here;
  }
  CHECK(homed == files.size());
  std::size_t staged = 0;
  for (const char* host : {"n0", "n1", "n2"})
    staged += files_below(scratch.path() / "local" / host);
  CHECK(staged == files.size());
  // The copies keep the split's directory (not the symlink's target) and are found.
  const auto& directory = ranks[0]->directory();
  CHECK(directory.parent_path() == scratch.path() / "local" / "n0");
  std::size_t local_reads = 0;
  for (const auto& file : files) {
    const auto located = ranks[0]->locate(file);
    if (located != file) {
      ++local_reads;
      CHECK(located.parent_path().filename() == "train");
      CHECK(located.string().find("local/n0") != std::string::npos);
    }
  }
  CHECK(local_reads == files_below(scratch.path() / "local" / "n0"));

  // Every rank places each batch the same way: every sample once, each rank its share.
  hardy::core::EpochSampler sampler(files.size(), 7);
  for (int step = 0; step < 20; ++step) {
    const auto batch = sampler.next(12);
    std::multiset<std::size_t> seen;
    for (int r = 0; r < 6; ++r) {
      const auto mine = ranks[static_cast<std::size_t>(r)]->local_positions(batch.samples, r);
      CHECK(mine.size() == hardy::core::shard_of(12, r, 6).size());
      CHECK(mine == ranks[0]->local_positions(batch.samples, r));  // the same plan everywhere
      seen.insert(mine.begin(), mine.end());
    }
    for (std::size_t i = 0; i < 12; ++i) CHECK(seen.count(i) == 1);
  }

  // n2 is lost: its files move to n0 and n1, which copy only those.
  const std::vector<std::string> survivors{"n0", "n0", "n1", "n1"};
  const std::size_t before_n0 = files_below(scratch.path() / "local" / "n0");
  const std::size_t before_n1 = files_below(scratch.path() / "local" / "n1");
  const std::size_t lost = files_below(scratch.path() / "local" / "n2");
  std::size_t moved = 0;
  for (int r = 0; r < 4; ++r) {
    const auto plan =
        ranks[static_cast<std::size_t>(r)]->plan(survivors, r, r % 2 == 0, /*wait=*/false);
    moved = plan.moved;
  }
  for (auto& rank : ranks) rank.reset();  // waits for the background copies
  CHECK(moved == lost);
  CHECK(files_below(scratch.path() / "local" / "n0") +
            files_below(scratch.path() / "local" / "n1") ==
        before_n0 + before_n1 + lost);
}

TEST_CASE("node staging: the job and `hardy data stage --hosts` agree on every file's home",
          "[resilience]") {
  ScratchDirectory scratch("node-staging");
  const auto files = make_files(scratch.path() / "data", 40);
  const std::vector<std::string> hosts{"alpha", "beta"};
  // The job names its nodes staging_node_name(host); so does the command for its --hosts.
  const std::vector<std::string> nodes{hardy::core::staging_node_name("alpha"),
                                       hardy::core::staging_node_name("beta")};
  const std::vector<std::uint64_t> keys{hardy::core::node_key(nodes[0]),
                                        hardy::core::node_key(nodes[1])};
  for (int r = 0; r < 2; ++r) {
    NodeStaging staging(scratch.path() / "local", scratch.path() / "data", files,
                        hosts[static_cast<std::size_t>(r)], "0123456789abcdef", 1);
    staging.plan(nodes, r, /*copier=*/true, /*wait=*/true);
  }
  for (const auto& file : files) {
    const auto relative = fs::path("train") / file.filename();
    const auto home = hosts[hardy::core::home_node(relative.string(), keys)];
    CHECK(fs::exists(
        hardy::core::staging_directory(scratch.path() / "local", scratch.path() / "data", home) /
        relative));
  }
}

TEST_CASE("node staging: a copy counts only once this launch's copier made or verified it",
          "[resilience]") {
  ScratchDirectory scratch("node-staging");
  const auto files = make_files(scratch.path() / "data", 8);
  const std::vector<std::string> one_node{"n0", "n0"};
  const auto local = scratch.path() / "local";
  {
    // An earlier launch stages everything (one node: every file is homed here).
    NodeStaging earlier(local, scratch.path() / "data", files, "n0", "1111111111111111", 1);
    earlier.plan(one_node, 0, /*copier=*/true, /*wait=*/true);
    for (const auto& file : files) CHECK(earlier.locate(file) != file);
  }
  // A copy tampered with while the earlier job was gone: other bytes, the same size and time.
  NodeStaging probe(local, scratch.path() / "data", files, "n0", "2222222222222222", 1);
  const auto forged = probe.directory() / "train" / files[3].filename();
  const auto time = fs::last_write_time(forged);
  std::ofstream(forged) << std::string(fs::file_size(files[3]), 'F');
  fs::last_write_time(forged, time);
  // The next launch's ranks read nothing from the node before its copier has checked it: the
  // copies are there, size and time match, but this launch never verified them.
  NodeStaging reader(local, scratch.path() / "data", files, "n0", "2222222222222222", 1);
  for (const auto& file : files) CHECK(reader.locate(file) == file);
  // Its copier checks every copy byte for byte (copying the forged one again) and lists them;
  // the other rank on the node then reads them, the forged file with the source's bytes.
  NodeStaging copier(local, scratch.path() / "data", files, "n0", "2222222222222222", 1);
  copier.plan(one_node, 0, /*copier=*/true, /*wait=*/true);
  CHECK(copier.last_report().copied == 1);
  for (const auto& file : files) CHECK(reader.locate(file) != file);
  CHECK(read_text(reader.locate(files[3])) == read_text(files[3]));
  // A rank of yet another launch does not trust this launch's list, and the earlier list is gone.
  NodeStaging stranger(local, scratch.path() / "data", files, "n0", "3333333333333333", 1);
  CHECK(stranger.locate(files[0]) == files[0]);
  for (const auto& entry : fs::directory_iterator(copier.directory()))
    CHECK_FALSE(entry.path().filename().string().starts_with(".verified-1111111111111111"));
  CHECK_THROWS_AS(NodeStaging(local, scratch.path() / "data", files, "n0", "../x", 1),
                  hardy::InvalidArgument);
}

TEST_CASE("node staging: a dataset reads through the staging for as long as the dataset lives",
          "[resilience]") {
  ScratchDirectory scratch("node-staging");
  const auto files = make_files(scratch.path() / "data", 4);
  auto staging = std::make_shared<NodeStaging>(scratch.path() / "local", scratch.path() / "data",
                                               files, "n0", "4444444444444444", 1);
  staging->plan({"n0"}, 0, /*copier=*/true, /*wait=*/true);
  auto dataset = std::make_unique<LocatedFiles>(files);
  hardy::resilience::read_through(*dataset, staging);
  const std::weak_ptr<NodeStaging> watch = staging;
  // The session lets its staging go while the prefetcher's loader threads may still read through
  // the dataset (a use-after-free at exit when the session's members went in the other order).
  staging.reset();
  REQUIRE_FALSE(watch.expired());
  for (const auto& file : files) {
    const auto copy = dataset->locator(file);
    CHECK(copy != file);
    CHECK(read_text(copy) == read_text(file));
  }
  dataset.reset();
  CHECK(watch.expired());
}
