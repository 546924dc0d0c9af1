// `hardy report`: one picture of a run, drawn by tools/report.py (matplotlib). The C++ side finds
// the helper and a Python that has matplotlib, and turns their absence into a clear error.
#include <fmt/format.h>

#include <cstdlib>
#include <iostream>

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
($HARDY_PYTHON, else the source tree's .venv/bin/python, else python3 on PATH).
)";

fs::path this_executable() {
  std::error_code error;
  const auto path = fs::read_symlink("/proc/self/exe", error);
  return error ? fs::path("hardy") : path;
}

struct Helper {
  fs::path script;
  fs::path python;
};

// The helper next to an installed hardy (PREFIX/bin/hardy, PREFIX/share/hardy/tools/report.py),
// else in the source tree this hardy was built from; Python likewise.
Helper find_helper() {
  const fs::path prefix = this_executable().parent_path().parent_path();
  const fs::path installed = prefix / "share/hardy/tools/report.py";
  const fs::path source = fs::path(HARDY_SOURCE_DIR);
  Helper helper;
  if (fs::exists(installed))
    helper.script = installed;
  else if (fs::exists(source / "tools/report.py"))
    helper.script = source / "tools/report.py";
  else
    throw InvalidArgument(fmt::format("the report helper is missing: neither {} nor {} exists",
                                      installed.string(), (source / "tools/report.py").string()));
  if (const char* python = std::getenv("HARDY_PYTHON"); python != nullptr && *python != '\0')
    helper.python = python;
  else if (helper.script.parent_path() == source / "tools" &&
           fs::exists(source / ".venv/bin/python"))
    helper.python = source / ".venv/bin/python";
  else
    helper.python = "python3";
  return helper;
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
  const auto helper = find_helper();
  batch::CommandResult check;
  try {
    check = batch::run_command({helper.python.string(), "-c", "import matplotlib"});
  } catch (const Error&) {
    throw InvalidArgument(fmt::format(
        "hardy report needs Python 3 with matplotlib, and {} cannot be started (set HARDY_PYTHON "
        "to a Python that has matplotlib)",
        helper.python.string()));
  }
  if (check.status != 0)
    throw InvalidArgument(fmt::format(
        "hardy report needs matplotlib, which {} cannot import ({}); install it (apt install "
        "python3-matplotlib, or pip install matplotlib) or set HARDY_PYTHON",
        helper.python.string(), batch::first_line(check)));
  const auto result = batch::run_command(
      {helper.python.string(), helper.script.string(), run_dir->string(), "--out", out.string()});
  std::cout << result.out;
  std::cerr << result.err;
  if (result.status != 0)
    throw Error(fmt::format("{} failed (exit status {})", helper.script.string(), result.status));
  return 0;
}

}  // namespace hardy::jobs
