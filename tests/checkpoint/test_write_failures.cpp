#include <fmt/format.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

#include "checkpoint_fixtures.hpp"
#include "hardy/checkpoint/checkpoint_directory.hpp"
#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/checkpoint/model_file.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy;
using namespace hardy::checkpoint;
using namespace hardy::checkpoint::testing;

namespace {

// Switches the injected failure off again however the test ends.
struct InjectedFailure {
  explicit InjectedFailure(std::uint64_t bytes) { inject_write_failure_after(bytes); }
  ~InjectedFailure() { inject_write_failure_after(std::nullopt); }
};

std::vector<std::string> names_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The failed save must leave exactly the previous checkpoint and `latest` naming it.
void check_previous_intact(const std::filesystem::path& dir, long previous_step) {
  CHECK(names_in(dir) ==
        std::vector<std::string>{"ckpt-" + std::to_string(previous_step) + ".h5", "latest"});
  REQUIRE(read_latest(dir));
  CHECK(read_latest(dir)->filename() == "ckpt-" + std::to_string(previous_step) + ".h5");
  CHECK(read_checkpoint(*read_latest(dir)).step == previous_step);
}

// A tmpfs of `size` mounted on a scratch directory for the test's duration, where the machine
// lets the test mount one (root, no seccomp filter in the way).
class SmallTmpfs {
 public:
  SmallTmpfs(const std::filesystem::path& where, const std::string& size) : where_(where) {
    mounted_ = ::mount("tmpfs", where.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
    if (!mounted_) why_not_ = std::strerror(errno);
  }
  ~SmallTmpfs() {
    if (mounted_) ::umount(where_.c_str());
  }
  bool mounted() const { return mounted_; }
  const std::string& why_not() const { return why_not_; }
  std::uint64_t free_bytes() const {
    struct statvfs info {};
    ::statvfs(where_.c_str(), &info);
    return static_cast<std::uint64_t>(info.f_bavail) * info.f_frsize;
  }

 private:
  std::filesystem::path where_;
  bool mounted_ = false;
  std::string why_not_;
};

}  // namespace

TEST_CASE(
    "write failures: an injected ENOSPC fails the checkpoint and leaves the previous one and "
    "latest",
    "[checkpoint]") {
  ScratchDirectory dir("enospc");
  save_checkpoint(synthetic_state(1), dir.path());
  // A disk that fills up after 0, 1 KiB, 2 KiB, ... bytes of the new file, until the file fits:
  // failures in HDF5's metadata and in each tensor, every one clean.
  std::set<std::string> failed_in;
  for (std::uint64_t budget = 0;; budget = budget == 0 ? 1024 : 2 * budget) {
    InjectedFailure full_disk(budget);
    try {
      save_checkpoint(synthetic_state(2, 100'000), dir.path());
      break;
    } catch (const IoError& e) {
      const std::string message = e.what();
      CHECK_THAT(message, Catch::Contains("ckpt-2.h5 was not written") &&
                              Catch::Contains("No space left on device") &&
                              Catch::Contains("(injected by HARDY_CHECKPOINT_FAIL_AFTER_BYTES)"));
      const auto what = message.find("writing "), into = message.find(" into ");
      REQUIRE(what != std::string::npos);
      failed_in.insert(message.substr(what + 8, into - what - 8));
      check_previous_intact(dir.path(), 1);
    }
  }
  CHECK(failed_in == std::set<std::string>{"the HDF5 metadata", "/model/layer.weight",
                                           "/optimizer/momentum/layer.weight"});
  CHECK(read_latest(dir.path())->filename() == "ckpt-2.h5");  // the budget that fits writes it
}

TEST_CASE("write failures: HARDY_CHECKPOINT_FAIL_AFTER_BYTES injects the same failure",
          "[checkpoint]") {
  ScratchDirectory dir("enospc-env");
  save_checkpoint(synthetic_state(1), dir.path());
  ::setenv("HARDY_CHECKPOINT_FAIL_AFTER_BYTES", "100", 1);
  CHECK_THROWS_WITH(save_checkpoint(synthetic_state(2), dir.path()),
                    Catch::Contains("No space left on device"));
  ::setenv("HARDY_CHECKPOINT_FAIL_AFTER_BYTES", "lots", 1);
  CHECK_THROWS_AS(save_checkpoint(synthetic_state(2), dir.path()), InvalidArgument);
  ::unsetenv("HARDY_CHECKPOINT_FAIL_AFTER_BYTES");
  check_previous_intact(dir.path(), 1);
}

TEST_CASE("write failures: a real full tmpfs fails the checkpoint cleanly and frees its space",
          "[checkpoint]") {
  ScratchDirectory dir("tmpfs");
  SmallTmpfs tmpfs(dir.path(), "512k");
  if (!tmpfs.mounted()) {
    WARN("cannot mount a tmpfs here (" << tmpfs.why_not()
                                       << "); the injected-ENOSPC tests cover this path");
    return;
  }
  save_checkpoint(synthetic_state(1, 1000), dir.path());
  const std::uint64_t free_before = tmpfs.free_bytes();
  // The data does not fit (2 x 400 KB of floats).
  CHECK_THROWS_WITH(
      save_checkpoint(synthetic_state(2, 100'000), dir.path()),
      Catch::Contains("ckpt-2.h5 was not written") && Catch::Contains("No space left on device"));
  check_previous_intact(dir.path(), 1);
  CHECK(tmpfs.free_bytes() == free_before);  // nothing of the failed file still holds space
  // Even the metadata does not fit: HDF5 itself reports the full disk.
  const TrainingState many = [] {
    TrainingState state = synthetic_state(3, 10);
    for (int i = 0; i < 4000; ++i) state.model.push_back({fmt::format("t{}", i), {1}, {1.0f}});
    return state;
  }();
  // A model file goes the same way.
  TrainedModel trained(1, core::OptimizerKind::adam, 0, tiny_model_config(64));  // 4 MB of weights
  CHECK_THROWS_WITH(save_model(trained.model, dir / "model.h5"),
                    Catch::Contains("No space left on device"));
  CHECK_THROWS_AS(save_checkpoint(many, dir.path()), IoError);
  CHECK_THROWS_WITH(
      save_checkpoint(many, dir.path()),
      Catch::Contains("ckpt-3.h5 was not written") && Catch::Contains("No space left"));
  check_previous_intact(dir.path(), 1);
  CHECK(tmpfs.free_bytes() == free_before);
}
