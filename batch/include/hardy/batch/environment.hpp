#pragma once
// Environment variables as a value: the process's own (Environment::current()) or a fixed set, so
// that reading a scheduler's variables is tested without a scheduler.
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace hardy::batch {

class Environment {
 public:
  // A snapshot of this process's environment.
  static Environment current();
  // A fixed set, e.g. Environment({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", "n[1-2]"}}).
  explicit Environment(std::initializer_list<std::pair<const std::string, std::string>> variables);

  // The value, or nullopt when the variable is unset or empty (schedulers leave some variables
  // empty instead of unsetting them, and an empty value never means anything here).
  std::optional<std::string> get(const std::string& name) const;

 private:
  explicit Environment(std::map<std::string, std::string> variables);
  std::map<std::string, std::string> variables_;
};

// More task slots than any machine has: a scheduler's count above it is a malformed value, and
// a bound on what hardy allocates and launches for one.
inline constexpr long kMaxTasks = 1L << 24;

// A non-negative decimal integer; throws InvalidArgument naming `what` and the text otherwise.
long parse_count(std::string_view text, std::string_view what);
// The same, from 1 to kMaxTasks: a count of tasks, slots or nodes.
int parse_task_count(std::string_view text, std::string_view what);

}  // namespace hardy::batch
