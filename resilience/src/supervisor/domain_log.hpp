#pragma once
// What the fault domains log to events.jsonl that their supervisor acts on (a launch started,
// finished the job, joined again), read as the file grows: each query parses only the lines
// appended since the last one. At the seed run's scale (285 domains of 96 ranks: about 27,000
// rank_started lines while the job starts) reading the whole file again for every domain at
// every poll, as the supervisor did, would parse millions of lines a second.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace hardy::resilience {

class DomainLog {
 public:
  DomainLog(std::filesystem::path file, int domains);

  // When domain `index` last logged, at or after `since` (its launch's start): that it started
  // (job_started or domain_started), that it finished the job (job_finished or domain_finished,
  // status completed), that it was let back in (domain_joined).
  std::optional<double> started(int index, double since);
  bool finished(int index, double since);
  bool joined(int index, double since);

 private:
  // Reads the complete lines appended since the last call; a line still being written waits
  // for the next call, a damaged one is skipped.
  void poll();

  struct Latest {
    double started = -1, finished = -1, joined = -1;
  };
  std::filesystem::path file_;
  std::uintmax_t offset_ = 0;
  std::string partial_;
  std::vector<Latest> latest_;
};

}  // namespace hardy::resilience
