#include "python_tools.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <iostream>

#include "hardy/batch/command.hpp"
#include "hardy/core/support/error.hpp"

namespace fs = std::filesystem;

namespace hardy::jobs {

namespace {

fs::path this_executable() {
  std::error_code error;
  const auto path = fs::read_symlink("/proc/self/exe", error);
  return error ? fs::path("hardy") : path;
}

// The last line a command wrote to stderr: Python's exception ("No module named 'matplotlib'").
std::string last_error_line(const batch::CommandResult& result) {
  std::string text = result.err.empty() ? result.out : result.err;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const auto newline = text.rfind('\n');
  return newline == std::string::npos ? text : text.substr(newline + 1);
}

}  // namespace

fs::path find_helper(const std::string& name) {
  const fs::path installed =
      this_executable().parent_path().parent_path() / "share/hardy/tools" / name;
  const fs::path source = fs::path(HARDY_SOURCE_DIR) / "tools" / name;
  if (fs::exists(installed)) return installed;
  if (fs::exists(source)) return source;
  throw InvalidArgument(fmt::format("the helper {} is missing: neither {} nor {} exists", name,
                                    installed.string(), source.string()));
}

fs::path find_python(const fs::path& helper, const std::vector<std::string>& modules,
                     const std::string& install) {
  std::vector<fs::path> candidates;
  if (const char* python = std::getenv("HARDY_PYTHON"); python != nullptr && *python != '\0') {
    candidates.push_back(python);
  } else {
    const fs::path venv = helper.parent_path().parent_path() / ".venv/bin/python";
    if (fs::exists(venv)) candidates.push_back(venv);
    candidates.push_back("python3");
    if (fs::exists("/usr/bin/python3")) candidates.push_back("/usr/bin/python3");
  }
  const std::string import = fmt::format("import {}", fmt::join(modules, ", "));
  std::vector<std::string> tried;
  for (const auto& python : candidates) {
    try {
      const auto check = batch::run_command({python.string(), "-c", import});
      if (check.status == 0) return python;
      tried.push_back(fmt::format("{}: {}", python.string(), last_error_line(check)));
    } catch (const Error&) {
      tried.push_back(fmt::format("{}: cannot be started", python.string()));
    }
  }
  throw InvalidArgument(fmt::format(
      "needs Python 3 with {}, and none was found ({}); install {} or set HARDY_PYTHON to a "
      "Python that has it",
      fmt::join(modules, " and "), fmt::join(tried, "; "), install));
}

void run_helper(const fs::path& python, const fs::path& helper,
                const std::vector<std::string>& args) {
  std::vector<std::string> command{python.string(), helper.string()};
  command.insert(command.end(), args.begin(), args.end());
  const auto result = batch::run_command(command);
  std::cout << result.out;
  std::cerr << result.err;
  if (result.status != 0)
    throw Error(fmt::format("{} failed (exit status {})", helper.string(), result.status));
}

}  // namespace hardy::jobs
