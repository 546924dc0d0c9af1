#include <catch2/catch.hpp>

#include "checkpoint_fixtures.hpp"
#include "hardy/checkpoint/checkpoint_directory.hpp"

using namespace hardy;
using namespace hardy::checkpoint;
using namespace hardy::checkpoint::testing;

namespace {

std::vector<long> steps_in(const std::filesystem::path& dir) {
  std::vector<long> steps;
  for (const CheckpointEntry& entry : list_checkpoints(dir)) steps.push_back(entry.step);
  return steps;
}

}  // namespace

TEST_CASE("checkpoint directory: save writes ckpt-<step>.h5 and points latest at it",
          "[checkpoint]") {
  ScratchDirectory dir("save");
  const auto checkpoints = dir / "run/checkpoints";  // created on demand
  const SavedCheckpoint saved = save_checkpoint(synthetic_state(5), checkpoints);
  CHECK(saved.path == checkpoints / "ckpt-5.h5");
  CHECK(saved.bytes == std::filesystem::file_size(saved.path));
  CHECK(std::filesystem::is_symlink(checkpoints / "latest"));
  CHECK(std::filesystem::read_symlink(checkpoints / "latest") ==
        "ckpt-5.h5");  // relative: the run can move
  CHECK(read_checkpoint(checkpoints / "latest").step == 5);
  save_checkpoint(synthetic_state(12), checkpoints);
  CHECK(read_latest(checkpoints) == checkpoints / "ckpt-12.h5");
  CHECK(steps_in(checkpoints) == std::vector<long>{5, 12});
  CHECK_FALSE(std::filesystem::exists(checkpoints / "latest.tmp"));
}

TEST_CASE("checkpoint directory: retention keeps the last K plus every M-th", "[checkpoint]") {
  ScratchDirectory dir("retention");
  std::vector<std::filesystem::path> removed;
  for (long step = 1; step <= 10; ++step) {
    const auto saved =
        save_checkpoint(synthetic_state(step, 10), dir.path(), {.keep_last = 3, .keep_every = 4});
    removed.insert(removed.end(), saved.removed.begin(), saved.removed.end());
  }
  CHECK(steps_in(dir.path()) == std::vector<long>{4, 8, 9, 10});
  CHECK(removed.size() == 6);
  const auto only_last =
      save_checkpoint(synthetic_state(11, 10), dir.path(), {.keep_last = 1, .keep_every = 0});
  CHECK(steps_in(dir.path()) == std::vector<long>{11});
  CHECK(only_last.removed.size() == 4);
}

TEST_CASE(
    "checkpoint directory: retention never deletes what latest names, and removes stale .tmp files",
    "[checkpoint]") {
  ScratchDirectory dir("retention-latest");
  for (long step : {1, 2, 3})
    save_checkpoint(synthetic_state(step, 10), dir.path(), {.keep_last = 5});
  set_latest(dir.path(), dir / "ckpt-1.h5");
  std::ofstream(dir / "ckpt-4.h5.tmp") << "a writer was killed here";
  apply_retention(dir.path(), {.keep_last = 1});
  CHECK(steps_in(dir.path()) == std::vector<long>{1, 3});
  CHECK_FALSE(std::filesystem::exists(dir / "ckpt-4.h5.tmp"));
  CHECK(read_latest(dir.path()) == dir / "ckpt-1.h5");
}

TEST_CASE("checkpoint directory: find_latest_valid falls back past a damaged latest and says why",
          "[checkpoint]") {
  ScratchDirectory dir("fallback");
  for (long step : {1, 2, 3}) save_checkpoint(synthetic_state(step), dir.path());
  flip_byte(dir / "ckpt-3.h5", data_offset(dir / "ckpt-3.h5", "/model/layer.weight") + 100);
  std::vector<std::string> skipped;
  const auto found = load_latest_valid(dir.path(), &skipped);
  REQUIRE(found);
  CHECK(found->path == dir / "ckpt-2.h5");
  CHECK(found->state.step == 2);
  REQUIRE(skipped.size() == 1);
  CHECK_THAT(skipped[0], Catch::Contains("ckpt-3.h5") &&
                             Catch::Contains("checksum mismatch in /model/layer.weight"));

  // latest names a file that is gone: said, and the newest valid one is found.
  std::filesystem::remove(dir / "ckpt-3.h5");
  skipped.clear();
  CHECK(find_latest_valid(dir.path(), &skipped) == dir / "ckpt-2.h5");
  REQUIRE(skipped.size() == 1);
  CHECK_THAT(skipped[0], Catch::Contains("latest names") && Catch::Contains("does not exist"));

  // Truncated newer files are passed over as well; nothing valid at all gives nullopt.
  std::filesystem::resize_file(dir / "ckpt-2.h5", 600);
  std::filesystem::resize_file(dir / "ckpt-1.h5", 0);
  skipped.clear();
  CHECK_FALSE(find_latest_valid(dir.path(), &skipped));
  CHECK(skipped.size() == 3);
}

TEST_CASE("checkpoint directory: no directory or no checkpoints means nothing to resume from",
          "[checkpoint]") {
  ScratchDirectory dir("none");
  CHECK_FALSE(find_latest_valid(dir / "missing"));
  CHECK_FALSE(find_latest_valid(dir.path()));
  CHECK(list_checkpoints(dir / "missing").empty());
  CHECK_FALSE(read_latest(dir.path()));
  std::ofstream(dir / "ckpt-x.h5") << "";  // not a checkpoint name
  std::ofstream(dir / "notes.txt") << "";
  CHECK(list_checkpoints(dir.path()).empty());
}

TEST_CASE("checkpoint directory: a resume from an older step keeps the new timeline's checkpoints",
          "[checkpoint]") {
  ScratchDirectory dir("timeline");
  const Retention keep_two{.keep_last = 2};
  for (long step : {4, 8, 12})
    save_checkpoint(synthetic_state(step, 10), dir.path(), {.keep_last = 3});
  // A job resumes from step 4 and goes on: its checkpoints of steps 6 and 7 are the ones to keep.
  const auto discarded = discard_checkpoints_newer_than(dir.path(), 4);
  CHECK(discarded == std::vector<std::filesystem::path>{dir / "ckpt-8.h5", dir / "ckpt-12.h5"});
  CHECK_FALSE(read_latest(dir.path()));  // it named ckpt-12.h5, of the timeline left behind
  save_checkpoint(synthetic_state(6, 10), dir.path(), keep_two);
  save_checkpoint(synthetic_state(7, 10), dir.path(), keep_two);
  CHECK(steps_in(dir.path()) == std::vector<long>{6, 7});
  CHECK(read_latest(dir.path()) == dir / "ckpt-7.h5");
  CHECK(discard_checkpoints_newer_than(dir.path(), 7).empty());
}
