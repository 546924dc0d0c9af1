#pragma once
// A run directory holds everything one job produces: config.ini (the effective configuration),
// events.jsonl, metrics.jsonl, checkpoints/ and the final model. A job started again with the
// same run directory appends to its logs.
#include <filesystem>
#include <string>

namespace hardy::jobs {

class RunDirectory {
 public:
  // Creates the directory (and checkpoints/) if needed; throws IoError when it cannot.
  explicit RunDirectory(std::filesystem::path path);
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path events() const { return path_ / "events.jsonl"; }
  std::filesystem::path metrics() const { return path_ / "metrics.jsonl"; }
  std::filesystem::path config() const { return path_ / "config.ini"; }
  std::filesystem::path checkpoints() const { return path_ / "checkpoints"; }
  std::filesystem::path final_model() const { return path_ / "model.h5"; }
  // Writes a text file atomically (temporary file, fsync, rename).
  void write_file(const std::filesystem::path& name, const std::string& text) const;

 private:
  std::filesystem::path path_;
};

}  // namespace hardy::jobs
