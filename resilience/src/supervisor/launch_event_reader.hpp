#pragma once
// read_launch_events (relaunch_plan.hpp) for a launch that is still running: the supervisor asks
// every quarter second, and each read() parses only the events appended since the last one
// (appended_records.hpp); the last committed step and the injected kills are looked up afresh.
#include <cstdint>
#include <filesystem>

#include "hardy/resilience/relaunch_plan.hpp"
#include "supervisor/appended_records.hpp"

namespace hardy::resilience {

class LaunchEventReader {
 public:
  LaunchEventReader(std::filesystem::path run_dir, std::uintmax_t events_offset,
                    double launch_started_unix, int ranks_per_node);
  // What the launch logged so far; valid until the next call.
  const LaunchEvents& read();

 private:
  std::filesystem::path run_dir_;
  AppendedRecords records_;
  double launch_started_unix_;
  int ranks_per_node_;
  LaunchEvents from_log_;  // what events.jsonl said so far
  LaunchEvents launch_;
};

}  // namespace hardy::resilience
