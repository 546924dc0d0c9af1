#pragma once
// events.jsonl read as it grows: each read() parses only the lines appended since the last one.
// The supervisors poll a launch's events every quarter second for as long as it runs; at the
// seed run's scale a launch logs about 27,000 rank_started lines while it starts, and reading the
// whole file again at every poll would parse millions of lines a second.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hardy::resilience {

class AppendedRecords {
 public:
  // Reads from byte `offset` on (the file's size when a launch started: its own lines only).
  explicit AppendedRecords(std::filesystem::path file, std::uintmax_t offset = 0);

  // The JSON objects of the complete lines appended since the last call, in order. A line still
  // being written waits for the next call; a damaged one is skipped; a missing file has none.
  // When the file shrank (another file took its name) reading starts again from byte 0 and
  // `replaced` is set, so that the caller forgets what it gathered.
  std::vector<nlohmann::json> read(bool* replaced = nullptr);

 private:
  std::filesystem::path file_;
  std::uintmax_t offset_;
  std::string partial_;
};

}  // namespace hardy::resilience
