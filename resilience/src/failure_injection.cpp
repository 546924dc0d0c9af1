#include "hardy/resilience/failure_injection.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"

namespace hardy::resilience {

Phase parse_phase(const std::string& name) {
  if (name == "forward") return Phase::forward;
  if (name == "allreduce") return Phase::allreduce;
  if (name == "checkpoint-write") return Phase::checkpoint_write;
  if (name == "recovery") return Phase::recovery;
  throw InvalidArgument(fmt::format(
      "unknown failure phase '{}' (choose forward, allreduce, checkpoint-write or recovery)",
      name));
}

std::string to_string(Phase phase) {
  switch (phase) {
    case Phase::forward:
      return "forward";
    case Phase::allreduce:
      return "allreduce";
    case Phase::checkpoint_write:
      return "checkpoint-write";
    case Phase::recovery:
      return "recovery";
  }
  return "?";
}

std::vector<InjectedFailure> parse_injected_failures(const std::vector<std::string>& specs,
                                                     int ranks_per_node) {
  static const std::regex pattern(R"(^(rank|node)=(\d+)@step=(\d+)(?::([a-z-]+))?$)");
  std::vector<InjectedFailure> failures;
  for (const auto& option : specs) {
    std::stringstream stream(option);
    std::string spec;
    while (std::getline(stream, spec, ',')) {
      std::smatch match;
      if (!std::regex_match(spec, match, pattern))
        throw InvalidArgument(fmt::format(
            "--inject-failure '{}' is not rank=R@step=S[:phase] or node=N@step=S[:phase]", spec));
      InjectedFailure failure;
      failure.spec = spec;
      const int target = std::stoi(match[2]);
      failure.step = std::stol(match[3]);
      if (failure.step < 1)
        throw InvalidArgument(fmt::format("--inject-failure '{}': steps count from 1", spec));
      if (match[4].matched) failure.phase = parse_phase(match[4]);
      if (match[1] == "rank") {
        failure.world_ranks = {target};
      } else {
        for (int r = 0; r < ranks_per_node; ++r)
          failure.world_ranks.push_back(target * ranks_per_node + r);
      }
      failures.push_back(std::move(failure));
    }
  }
  return failures;
}

FailureInjector::FailureInjector(std::vector<InjectedFailure> failures, int world_rank,
                                 std::filesystem::path record_dir)
    : failures_(std::move(failures)), world_rank_(world_rank), record_dir_(std::move(record_dir)) {}

void FailureInjector::at(long step, Phase phase) const {
  for (const auto& failure : failures_) {
    if (failure.step != step || failure.phase != phase) continue;
    if (std::find(failure.world_ranks.begin(), failure.world_ranks.end(), world_rank_) ==
        failure.world_ranks.end())
      continue;
    if (!record_dir_.empty()) {
      std::ofstream(record_dir_ / fmt::format("injected-kill-{}.time", world_rank_))
          << fmt::format("{:.6f}\n", core::unix_time());
    }
    ::kill(::getpid(), SIGKILL);
  }
}

std::optional<double> FailureInjector::last_kill_time() const {
  if (record_dir_.empty() || !std::filesystem::is_directory(record_dir_)) return std::nullopt;
  std::optional<double> latest;
  for (const auto& entry : std::filesystem::directory_iterator(record_dir_)) {
    if (!entry.path().filename().string().starts_with("injected-kill-")) continue;
    double time = 0;
    if (std::ifstream(entry.path()) >> time) latest = std::max(latest.value_or(0.0), time);
  }
  return latest;
}

}  // namespace hardy::resilience
