// Killed MPI ranks' shared-memory files are removed; live ones, young ones, other users' and
// anything that only looks like one are not (comm/mpi/segments.hpp).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "hardy/comm/mpi/segments.hpp"
#include "scratch_directory.hpp"

using hardy::comm::remove_orphaned_mpi_segments;

namespace {

std::filesystem::path write_segment(const std::filesystem::path& path, bool old) {
  {
    std::ofstream file(path);
    file << std::string(8192, 'x');
  }
  if (old) {
    const timespec an_hour_ago[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
    ::utimensat(AT_FDCWD, path.c_str(), an_hour_ago, AT_SYMLINK_NOFOLLOW);
  }
  return path;
}

}  // namespace

TEST_CASE("mpi segments: only this user's unmapped, settled segment files are removed") {
  hardy::testing::ScratchDirectory shm("mpi-segments");
  const std::string uid = std::to_string(::geteuid());
  const auto orphan = write_segment(shm / ("sm_segment.node7." + uid + ".1a2b0001.3"), true);
  const auto live = write_segment(shm / ("sm_segment.node7." + uid + ".1a2c0001.0"), true);
  const auto young = write_segment(shm / ("sm_segment.node7." + uid + ".1a2d0001.0"), false);
  const auto other_user = write_segment(
      shm / ("sm_segment.node7." + std::to_string(::geteuid() + 1) + ".1a2e0001.0"), true);
  const auto unrelated = write_segment(shm / "sm_segment.notes", true);
  const auto target = write_segment(shm / "target", true);
  const auto link = shm / ("sm_segment.node7." + uid + ".1a2f0001.0");
  std::filesystem::create_symlink(target, link);

  // A rank of a job still running maps its segment.
  const int fd = ::open(live.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  void* mapping = ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  REQUIRE(mapping != MAP_FAILED);

  const auto removed = remove_orphaned_mpi_segments(shm.path());
  REQUIRE(removed.size() == 1);
  CHECK(removed[0].path.filename() == orphan.filename());
  CHECK(removed[0].bytes >= 8192);
  CHECK_FALSE(std::filesystem::exists(orphan));
  for (const auto& kept : {live, young, other_user, unrelated, target})
    CHECK(std::filesystem::exists(kept));
  CHECK(std::filesystem::is_symlink(link));

  // Once its rank is gone the live one is an orphan too.
  ::munmap(mapping, 8192);
  ::close(fd);
  const auto after = remove_orphaned_mpi_segments(shm.path());
  REQUIRE(after.size() == 1);
  CHECK(after[0].path.filename() == live.filename());
}
