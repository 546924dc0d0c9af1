// One run at a time in a run directory (core/support/run_lock.hpp).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <optional>

#include "hardy/core/support/error.hpp"
#include "hardy/resilience/run_lock.hpp"
#include "scratch_directory.hpp"

using hardy::InvalidArgument;
using hardy::IoError;
using hardy::resilience::run_lock_file;
using hardy::resilience::RunDirectoryLock;

TEST_CASE("run lock: a second run of the directory is refused, naming the first") {
  hardy::testing::ScratchDirectory run("run-lock");
  std::optional<RunDirectoryLock> first;
  first.emplace(run.path(), "hardy run");
  CHECK_FALSE(first->caveat());
  struct stat info {};
  REQUIRE(::stat(run_lock_file(run.path()).c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0600);

  try {
    RunDirectoryLock second(run.path(), "hardy train");
    FAIL("a second lock of the same directory was granted");
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("is in use: hardy run (pid " + std::to_string(::getpid())));
    CHECK_THAT(message, Catch::Contains("--run-dir"));
  }
  // The refused one did not overwrite what the holder wrote: its launches still match.
  CHECK(RunDirectoryLock::holds(run.path(), first->token()));

  const std::string old_token = first->token();
  first.reset();  // the holder ended: the next run takes it, with a token of its own
  RunDirectoryLock next(run.path(), "hardy train");
  CHECK(RunDirectoryLock::holds(run.path(), next.token()));
  CHECK_FALSE(RunDirectoryLock::holds(run.path(), old_token));
  CHECK_FALSE(RunDirectoryLock::holds(run.path(), ""));
}

TEST_CASE("run lock: a holder that dies without cleaning up leaves no lock behind") {
  hardy::testing::ScratchDirectory run("run-lock-killed");
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    RunDirectoryLock lock(run.path(), "hardy run");
    (void)!::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  char byte = 0;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  CHECK_THROWS_AS(RunDirectoryLock(run.path(), "hardy train"), InvalidArgument);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CHECK_NOTHROW(RunDirectoryLock(run.path(), "hardy train"));
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_CASE("run lock: a lock file that is a symbolic link is not followed") {
  hardy::testing::ScratchDirectory run("run-lock-link");
  const auto elsewhere = run / "elsewhere";
  std::ofstream(elsewhere) << "keep\n";
  std::filesystem::create_symlink(elsewhere, run_lock_file(run.path()));
  CHECK_THROWS_AS(RunDirectoryLock(run.path(), "hardy run"), IoError);
  std::ifstream file(elsewhere);
  std::string text;
  std::getline(file, text);
  CHECK(text == "keep");
}
