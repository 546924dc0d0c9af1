#include "hardy/batch/environment.hpp"

#include <fmt/format.h>

#include <charconv>
#include <utility>

#include "hardy/core/support/error.hpp"

extern char** environ;

namespace hardy::batch {

Environment Environment::current() {
  std::map<std::string, std::string> variables;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const auto equals = text.find('=');
    if (equals != std::string_view::npos)
      variables.emplace(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
  }
  return Environment(std::move(variables));
}

Environment::Environment(std::initializer_list<std::pair<const std::string, std::string>> variables)
    : variables_(variables) {}

Environment::Environment(std::map<std::string, std::string> variables)
    : variables_(std::move(variables)) {}

std::optional<std::string> Environment::get(const std::string& name) const {
  const auto found = variables_.find(name);
  if (found == variables_.end() || found->second.empty()) return std::nullopt;
  return found->second;
}

long parse_count(std::string_view text, std::string_view what) {
  long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < 0)
    throw InvalidArgument(fmt::format("{} must be a non-negative integer, not '{}'", what, text));
  return value;
}

int parse_task_count(std::string_view text, std::string_view what) {
  const long value = parse_count(text, what);
  if (value < 1 || value > kMaxTasks)
    throw InvalidArgument(
        fmt::format("{} must be between 1 and {}, not '{}'", what, kMaxTasks, text));
  return static_cast<int>(value);
}

}  // namespace hardy::batch
