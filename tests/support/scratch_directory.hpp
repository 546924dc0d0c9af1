#pragma once
// A directory under the system's temporary directory, removed with everything in it: the one
// every test that writes files uses.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>

namespace hardy::testing {

class ScratchDirectory {
 public:
  explicit ScratchDirectory(const std::string& label = "scratch") {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("hardy-test-" + label + "-" + std::to_string(::getpid()) + "-" +
             std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace hardy::testing
