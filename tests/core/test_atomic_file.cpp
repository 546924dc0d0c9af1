// core::write_atomically, the one implementation that datasets, checkpoints, models, config.ini
// and the supervisor's files share.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "hardy/core/support/atomic_file.hpp"
#include "hardy/core/support/error.hpp"
#include "scratch_directory.hpp"

using namespace hardy;

namespace {

std::string read_all(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  core::write_atomically(
      path, [&](const std::filesystem::path& temporary) { std::ofstream(temporary) << text; });
}

}  // namespace

TEST_CASE("write_atomically: the new content replaces the old, or the old stays", "[core]") {
  hardy::testing::ScratchDirectory dir("atomic-file");
  const auto path = dir / "config.ini";
  write_text(path, "first\n");
  CHECK(read_all(path) == "first\n");
  write_text(path, "second\n");
  CHECK(read_all(path) == "second\n");

  CHECK_THROWS_AS(core::write_atomically(path,
                                         [](const std::filesystem::path& temporary) {
                                           std::ofstream(temporary) << "half";
                                           throw IoError("disk full");
                                         }),
                  IoError);
  CHECK(read_all(path) == "second\n");
  CHECK_FALSE(std::filesystem::exists(dir / "config.ini.tmp"));

  // Nothing written at all (the writer made no file): the fsync of the file says so.
  CHECK_THROWS_AS(core::write_atomically(path, [](const std::filesystem::path&) {}), IoError);
  CHECK(read_all(path) == "second\n");
  CHECK_THROWS_AS(write_text(dir / "no-such-directory" / "file", "x"), IoError);
}
