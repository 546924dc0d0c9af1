#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "hardy/core/support/private_tree.hpp"
#include "scratch_directory.hpp"

using namespace hardy;
using namespace hardy::core;
using hardy::testing::ScratchDirectory;
namespace fs = std::filesystem;

namespace {

mode_t mode_of(const fs::path& path) {
  struct stat info {};
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The message of the UnsafeDirectory that checking root/below throws.
std::string refusal(const fs::path& root, const fs::path& below, bool create = true) {
  try {
    check_private_tree(root, below, create);
  } catch (const UnsafeDirectory& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("private tree: missing directories are created 0700, a missing tree is reported") {
  ScratchDirectory scratch("private-create");
  const fs::path root = scratch / "hardy-root";
  CHECK_FALSE(check_private_tree(root, "run/host", /*create=*/false));
  CHECK_FALSE(fs::exists(root));
  CHECK(check_private_tree(root, "run/host", /*create=*/true));
  for (const fs::path& dir : {root, root / "run", root / "run/host"}) {
    INFO(dir);
    CHECK(fs::is_directory(dir));
    CHECK(mode_of(dir) == 0700);
  }
  CHECK(check_private_tree(root, "run/host", /*create=*/false));  // and it passes once made
  CHECK_THROWS_AS(check_private_tree(root, "../elsewhere", true), InvalidArgument);
}

TEST_CASE("private tree: a symbolic link anywhere in the tree is refused and never followed") {
  ScratchDirectory scratch("private-link");
  const fs::path root = scratch / "hardy-root";
  const fs::path elsewhere = scratch / "elsewhere";
  fs::create_directories(elsewhere);
  fs::create_directories(root);
  fs::permissions(root, fs::perms::owner_all);
  fs::create_directory_symlink(elsewhere, root / "run");
  const std::string message = refusal(root, "run/host");
  CHECK_THAT(message, Catch::Contains((root / "run").string()) && Catch::Contains("symbolic link"));
  CHECK(fs::is_empty(elsewhere));  // nothing was created through the link

  // The root itself as a link.
  const fs::path linked_root = scratch / "linked-root";
  fs::create_directory_symlink(elsewhere, linked_root);
  CHECK_THAT(refusal(linked_root, "run"), Catch::Contains("symbolic link"));
  CHECK(fs::is_empty(elsewhere));
}

TEST_CASE("private tree: a directory others may write into is refused, with its mode") {
  ScratchDirectory scratch("private-writable");
  const fs::path root = scratch / "hardy-root";
  REQUIRE(check_private_tree(root, "run", true));
  ::chmod((root / "run").c_str(), 0777);
  CHECK_THAT(refusal(root, "run"), Catch::Contains((root / "run").string()) &&
                                       Catch::Contains("writable by other users") &&
                                       Catch::Contains("0777"));
  ::chmod((root / "run").c_str(), 0770);
  CHECK_THAT(refusal(root, "run"), Catch::Contains("0770"));
  ::chmod((root / "run").c_str(), 0755);  // readable is the user's choice, writable is not
  CHECK(check_private_tree(root, "run", false));

  // Above the tree: world-writable is fine with the sticky bit (/tmp, /dev/shm), not without.
  const fs::path shared = scratch / "shared";
  fs::create_directories(shared);
  ::chmod(shared.c_str(), 01777);
  CHECK(check_private_tree(shared / "hardy-root", "run", true));
  ::chmod(shared.c_str(), 0777);
  CHECK_THAT(refusal(shared / "hardy-root", "run"),
             Catch::Contains(shared.string()) && Catch::Contains("not sticky"));
}

TEST_CASE("private tree: a directory of another user is refused") {
  if (::geteuid() != 0) {
    WARN("skipped: changing a directory's owner needs root");
    return;
  }
  ScratchDirectory scratch("private-owner");
  const fs::path root = scratch / "hardy-root";
  REQUIRE(check_private_tree(root, "run", true));
  REQUIRE(::chown((root / "run").c_str(), 4242, 4242) == 0);
  CHECK_THAT(refusal(root, "run"),
             Catch::Contains((root / "run").string()) && Catch::Contains("owned by uid 4242"));
  // Another user's directory above the tree, even one that is not writable by others.
  REQUIRE(::chown((root / "run").c_str(), 0, 0) == 0);
  REQUIRE(::chown(root.c_str(), 4242, 4242) == 0);
  CHECK_THAT(refusal(root, "run"), Catch::Contains("owned by uid 4242"));
}

TEST_CASE("private tree: files are created anew, 0600, never through a planted link") {
  ScratchDirectory scratch("private-file");
  const fs::path victim = scratch / "victim.txt";
  std::ofstream(victim) << "precious";
  const fs::path planted = scratch / "ckpt-5.h5.tmp";
  fs::create_symlink(victim, planted);
  const int fd = create_exclusive_file(planted, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "new", 3) == 3);
  ::close(fd);
  CHECK(read_text(victim) == "precious");  // the link was replaced, not followed
  CHECK_FALSE(fs::is_symlink(planted));
  CHECK(read_text(planted) == "new");
  CHECK(mode_of(planted) == 0600);
  // A stale file of a killed writer is replaced as well.
  const int again = create_exclusive_file(planted, 0600);
  ::close(again);
  CHECK(fs::file_size(planted) == 0);
}

TEST_CASE("private tree: the default root is per user, in node memory") {
  CHECK(default_node_local_root() ==
        fs::path("/dev/shm") / ("hardy-" + std::to_string(::geteuid())));
}
