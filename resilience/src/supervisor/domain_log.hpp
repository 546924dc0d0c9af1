#pragma once
// What the fault domains log to events.jsonl that their supervisor acts on (a launch started,
// finished the job, joined again, evicted a slow node, stopped to regrow), read as the file grows
// (appended_records.hpp): each query parses only the lines appended since the last one.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/appended_records.hpp"

namespace hardy::resilience {

class DomainLog {
 public:
  DomainLog(std::filesystem::path file, int domains);

  // When domain `index` last logged, at or after `since` (its launch's start): that it started
  // (job_started or domain_started), that it finished the job (job_finished or domain_finished,
  // status completed), that it was let back in (domain_joined).
  std::optional<double> started(int index, double since);
  bool finished(int index, double since);
  // That its job logged its end without finishing (job_finished failed, regrowing or evicting):
  // the launch is ending, before its launcher has exited.
  bool ending(int index, double since);
  bool joined(int index, double since);
  // The nodes (indices into the launch's hosts) that domain `index` evicted as slow at or after
  // `since` (node_evicted), each with its evidence as the supervisors weigh it.
  std::map<std::size_t, std::vector<std::string>> evicted(int index, double since);
  // Whether domain `index`, having shrunk inside, stopped at or after `since` to come back at its
  // full strength (regrow_planned).
  bool regrowing(int index, double since);

 private:
  // Takes in the records appended since the last call.
  void poll();

  struct Eviction {
    double time;
    std::size_t node;
    std::string evidence;
  };
  struct Latest {
    double started = -1, finished = -1, ending = -1, joined = -1, regrowing = -1;
    std::vector<Eviction> evictions;
  };
  AppendedRecords records_;
  std::vector<Latest> latest_;
};

}  // namespace hardy::resilience
