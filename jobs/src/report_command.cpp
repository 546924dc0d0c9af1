// `hardy report`: one picture of a run, drawn by tools/report.py (matplotlib). The C++ side finds
// the helper and a Python that has matplotlib, and turns their absence into a clear error.
#include <fmt/format.h>

#include <cstdlib>
#include <iostream>
#include <vector>

#include "command_line.hpp"
#include "hardy/batch/command.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/jobs/commands.hpp"
#include "submission.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace hardy::jobs {

namespace {

constexpr const char* kReportUsage = R"(Usage: hardy report RUN_DIR [--out FILE]

Draws one picture of a run (PNG, SVG or PDF by the extension of --out; HTML embeds an SVG): loss and
learning rate against step, world size against step, a vertical mark for every failure, shrink,
relaunch, preemption and checkpoint labelled from the event log, and the recovery time of each
failure. Reads RUN_DIR/events.jsonl and RUN_DIR/metrics.jsonl; needs Python 3 with matplotlib
($HARDY_PYTHON, else the first of the source tree's .venv/bin/python, python3 on PATH and
/usr/bin/python3 that imports matplotlib).
)";

fs::path this_executable() {
  std::error_code error;
  const auto path = fs::read_symlink("/proc/self/exe", error);
  return error ? fs::path("hardy") : path;
}

// The helper next to an installed hardy (PREFIX/bin/hardy, PREFIX/share/hardy/tools/report.py),
// else in the source tree this hardy was built from.
fs::path find_helper() {
  const fs::path installed =
      this_executable().parent_path().parent_path() / "share/hardy/tools/report.py";
  const fs::path source = fs::path(HARDY_SOURCE_DIR) / "tools/report.py";
  if (fs::exists(installed)) return installed;
  if (fs::exists(source)) return source;
  throw InvalidArgument(fmt::format("the report helper is missing: neither {} nor {} exists",
                                    installed.string(), source.string()));
}

// The last line a command wrote to stderr: Python's exception ("No module named 'matplotlib'").
std::string last_error_line(const batch::CommandResult& result) {
  std::string text = result.err.empty() ? result.out : result.err;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const auto newline = text.rfind('\n');
  return newline == std::string::npos ? text : text.substr(newline + 1);
}

// The first Python that imports matplotlib: $HARDY_PYTHON alone when set, else the checkout's
// .venv (for a hardy run from its build tree), python3 on PATH, and the system's /usr/bin/python3
// (a PATH python3 of pyenv or conda often lacks matplotlib where the system's has it).
fs::path find_python(const fs::path& helper) {
  std::vector<fs::path> candidates;
  if (const char* python = std::getenv("HARDY_PYTHON"); python != nullptr && *python != '\0') {
    candidates.push_back(python);
  } else {
    const fs::path venv = helper.parent_path().parent_path() / ".venv/bin/python";
    if (fs::exists(venv)) candidates.push_back(venv);
    candidates.push_back("python3");
    if (fs::exists("/usr/bin/python3")) candidates.push_back("/usr/bin/python3");
  }
  std::vector<std::string> tried;
  for (const auto& python : candidates) {
    try {
      const auto check = batch::run_command({python.string(), "-c", "import matplotlib"});
      if (check.status == 0) return python;
      tried.push_back(fmt::format("{}: {}", python.string(), last_error_line(check)));
    } catch (const Error&) {
      tried.push_back(fmt::format("{}: cannot be started", python.string()));
    }
  }
  throw InvalidArgument(fmt::format(
      "hardy report needs Python 3 with matplotlib, and none was found ({}); install it (apt "
      "install python3-matplotlib, or pip install matplotlib) or set HARDY_PYTHON to a Python "
      "that has it",
      fmt::join(tried, "; ")));
}

}  // namespace

po::options_description report_options() {
  auto options = run_dir_options("hardy report options");
  options.add_options()("out,o", po::value<std::string>(),
                        "picture to write: .png, .svg, .pdf or .html (default RUN_DIR/report.png)");
  return options;
}

int report_command(const std::vector<std::string>& args) {
  po::variables_map vm;
  const auto run_dir =
      parse_existing_run_dir_command(args, report_options(), "hardy report", kReportUsage, vm);
  if (!run_dir) return 0;
  const fs::path out =
      vm.count("out") ? fs::path(vm["out"].as<std::string>()) : *run_dir / "report.png";
  const fs::path helper = find_helper();
  const fs::path python = find_python(helper);
  const auto result = batch::run_command(
      {python.string(), helper.string(), run_dir->string(), "--out", out.string()});
  std::cout << result.out;
  std::cerr << result.err;
  if (result.status != 0)
    throw Error(fmt::format("{} failed (exit status {})", helper.string(), result.status));
  return 0;
}

}  // namespace hardy::jobs
