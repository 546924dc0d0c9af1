#include "hardy/resilience/failure_injection.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>
#include <string_view>
#include <thread>

#include "hardy/core/support/enum_names.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/core/support/random.hpp"

namespace hardy::resilience {

namespace {
constexpr std::string_view kPhaseNames[] = {"forward",        "allreduce", "checkpoint-write",
                                            "snapshot-write", "log-write", "recovery"};
static_assert(std::size(kPhaseNames) == static_cast<std::size_t>(Phase::recovery) + 1);
// sleep=S, slow=F and noise=A carry their numbers, so they are parsed apart (fault_named).
constexpr std::string_view kFaultNames[] = {"kill",  "stop", "spin", "stall",
                                            "sleep", "slow", "noise"};
static_assert(std::size(kFaultNames) == static_cast<std::size_t>(Fault::noise) + 1);

std::optional<Fault> fault_named(const std::string& name) {
  if (name.starts_with("sleep=")) return Fault::sleep;
  if (name.starts_with("slow=")) return Fault::slow;
  if (name.starts_with("noise=")) return Fault::noise;
  if (name == "sleep" || name == "slow" || name == "noise") return std::nullopt;
  return core::value_named<Fault>(kFaultNames, name);
}

// The number after "name=" in `part`, or nullopt when it is not all a number.
std::optional<double> number_after(const std::string& part, std::string_view name) {
  const std::string text = part.substr(name.size() + 1);
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size()) return std::nullopt;
  return value;
}
}  // namespace

Phase parse_phase(const std::string& name) {
  if (auto phase = core::value_named<Phase>(kPhaseNames, name)) return *phase;
  throw InvalidArgument(fmt::format(
      "unknown failure phase '{}' (choose {}; or a fault: kill, stop, spin, stall, sleep=S)", name,
      core::choice_list(kPhaseNames)));
}

std::string to_string(Fault fault) { return std::string(core::name_of(kFaultNames, fault)); }

std::string to_string(Phase phase) { return std::string(core::name_of(kPhaseNames, phase)); }

std::vector<InjectedFailure> parse_injected_failures(const std::vector<std::string>& specs,
                                                     int ranks_per_node) {
  static const std::regex pattern(
      R"(^(rank|node)=(\d+)@step=(\d+)(?::([a-z-]+(?:=[0-9.]+)?))?(?::([a-z-]+(?:=[0-9.]+)?))?$)");
  std::vector<InjectedFailure> failures;
  for (const auto& option : specs) {
    std::stringstream stream(option);
    std::string spec;
    while (std::getline(stream, spec, ',')) {
      std::smatch match;
      if (!std::regex_match(spec, match, pattern))
        throw InvalidArgument(
            fmt::format("--inject-failure '{}' is not rank=R@step=S[:phase][:fault] or "
                        "node=N@step=S[:phase][:fault]",
                        spec));
      InjectedFailure failure;
      failure.spec = spec;
      const int target = std::stoi(match[2]);
      failure.step = std::stol(match[3]);
      if (failure.step < 1)
        throw InvalidArgument(fmt::format("--inject-failure '{}': steps count from 1", spec));
      // A phase, a fault, or both in that order; a stall happens where state is written.
      std::vector<std::string> parts;
      for (int i : {4, 5})
        if (match[i].matched) parts.push_back(match[i]);
      if (!parts.empty()) {
        if (auto fault = fault_named(parts.back())) {
          failure.fault = *fault;
          if (failure.fault == Fault::sleep) {
            failure.sleep_s = number_after(parts.back(), "sleep").value_or(0);
            if (!(failure.sleep_s > 0))
              throw InvalidArgument(fmt::format(
                  "--inject-failure '{}': sleep=S takes a positive number of seconds", spec));
          }
          if (failure.fault == Fault::noise) {
            failure.noise = number_after(parts.back(), "noise").value_or(-1);
            if (!(failure.noise >= 0) || !std::isfinite(failure.noise))
              throw InvalidArgument(fmt::format(
                  "--inject-failure '{}': noise=A takes an amplitude of at least 0 (0.2: each "
                  "step's own work up to 20% longer, at random)",
                  spec));
          }
          if (failure.fault == Fault::slow) {
            failure.slow_factor = number_after(parts.back(), "slow").value_or(0);
            if (!(failure.slow_factor >= 1) || !std::isfinite(failure.slow_factor))
              throw InvalidArgument(fmt::format(
                  "--inject-failure '{}': slow=F takes a factor of at least 1 (3: three times "
                  "as long; 1: back to full speed)",
                  spec));
          }
          parts.pop_back();
          if (failure.fault == Fault::stall) failure.phase = Phase::snapshot_write;
        }
      }
      if (parts.size() > 1)
        throw InvalidArgument(fmt::format(
            "--inject-failure '{}': give a phase, then a fault (kill, stop, spin, stall)", spec));
      if (parts.size() == 1) failure.phase = parse_phase(parts.front());
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
    // slowdown() applies these, step after step.
    if (failure.fault == Fault::slow || failure.fault == Fault::noise) continue;
    if (!record_dir_.empty() && failure.fault != Fault::sleep) {  // a delay is no failure
      std::ofstream(record_dir_ / fmt::format("injected-kill-{}.time", world_rank_))
          << fmt::format("{:.6f}\n", core::unix_time());
    }
    switch (failure.fault) {
      case Fault::kill:
        ::kill(::getpid(), SIGKILL);
        break;
      case Fault::stop:
        ::kill(::getpid(), SIGSTOP);
        break;
      case Fault::spin:
        // A kernel that never returns: busy forever, in compute.
        for (volatile unsigned long spins = 0;;) spins = spins + 1;
      case Fault::stall:
        // A write to a file system that stopped answering: blocked forever, using no CPU.
        for (;;) ::pause();
      case Fault::sleep:
        std::this_thread::sleep_for(std::chrono::duration<double>(failure.sleep_s));
        break;
      case Fault::slow:
      case Fault::noise:
        break;
    }
  }
}

double FailureInjector::slowdown(long step) const {
  double factor = 1, noise = 0;
  long latest_slow = 0, latest_noise = 0;
  for (const auto& failure : failures_) {
    if (failure.step > step || std::find(failure.world_ranks.begin(), failure.world_ranks.end(),
                                         world_rank_) == failure.world_ranks.end())
      continue;
    if (failure.fault == Fault::slow && failure.step >= latest_slow) {
      factor = failure.slow_factor;
      latest_slow = failure.step;
    } else if (failure.fault == Fault::noise && failure.step >= latest_noise) {
      noise = failure.noise;
      latest_noise = failure.step;
    }
  }
  if (noise > 0) {  // the same draw for a rank and step on every run
    core::SplitMix64 draw(core::mix_seed(0x6e015e, static_cast<std::uint64_t>(world_rank_),
                                         static_cast<std::uint64_t>(step)));
    factor *= 1 + noise * static_cast<double>(draw.next() >> 11) * 0x1.0p-53;
  }
  return factor;
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
