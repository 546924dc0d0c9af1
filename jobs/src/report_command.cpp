// `hardy report`: one picture of a run, drawn by tools/report.py (matplotlib), or the run as
// TensorBoard event files (tools/tensorboard_events.py, tensorboardX). The C++ side finds the
// helper and a Python that has what the asked-for output needs, and turns their absence into a
// clear error.
#include <fmt/format.h>

#include <vector>

#include "command_line.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/jobs/commands.hpp"
#include "python_tools.hpp"
#include "submission.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace hardy::jobs {

namespace {

constexpr const char* kReportUsage = R"(Usage: hardy report RUN_DIR [--out FILE] [--tensorboard DIR]

Draws one picture of a run (PNG, SVG or PDF by the extension of --out; HTML embeds an SVG): loss and
learning rate against step, world size against step, a vertical mark for every failure, shrink,
relaunch, preemption and checkpoint labelled from the event log, the recovery time of each
failure, and where the mean step goes (data wait, the copy of the batch into the backend, compute,
the wait for the gradient sums, the snapshot, the rest). Reads RUN_DIR/events.jsonl and
RUN_DIR/metrics.jsonl; needs Python 3 with matplotlib
($HARDY_PYTHON, else the first of the source tree's .venv/bin/python, python3 on PATH and
/usr/bin/python3 that imports matplotlib).

With --tensorboard DIR it writes TensorBoard event files instead (and the picture too only when
--out is given), into DIR/<name of RUN_DIR>: `tensorboard --logdir DIR` then shows the run next to
any other exported there. Scalars per committed step: loss, learning rate, samples/s, world size,
global batch, step time, data wait and the other step timings; each failure, shrink, relaunch,
preemption and checkpoint as text at its step. Needs Python 3 with tensorboardX (pip install
tensorboardX; scripts/test and scripts/demo put it into the checkout's .venv).
)";

}  // namespace

po::options_description report_options() {
  auto options = run_dir_options("hardy report options");
  options.add_options()("out,o", po::value<std::string>(),
                        "picture to write: .png, .svg, .pdf or .html (default RUN_DIR/report.png, "
                        "none with --tensorboard)")(
      "tensorboard", po::value<std::string>(),
      "write TensorBoard event files into DIR/<run name> (tensorboard --logdir DIR)");
  return options;
}

int report_command(const std::vector<std::string>& args) {
  po::variables_map vm;
  const auto run_dir =
      parse_existing_run_dir_command(args, report_options(), "hardy report", kReportUsage, vm);
  if (!run_dir) return 0;
  const bool tensorboard = vm.count("tensorboard") > 0;
  const bool picture = vm.count("out") > 0 || !tensorboard;
  std::vector<std::string> command;
  std::vector<std::string> modules, install;
  if (picture) {
    modules.emplace_back("matplotlib");
    install.emplace_back("matplotlib (apt install python3-matplotlib, or pip install matplotlib)");
    command = {"--out",
               vm.count("out") ? vm["out"].as<std::string>() : (*run_dir / "report.png").string()};
  }
  if (tensorboard) {
    modules.emplace_back("tensorboardX");
    install.emplace_back("tensorboardX (pip install tensorboardX)");
    command.insert(command.end(), {"--tensorboard", vm["tensorboard"].as<std::string>()});
  }
  const fs::path helper = find_helper("report.py");
  const fs::path python =
      find_python(helper, modules, fmt::format("{}", fmt::join(install, " and ")));
  command.insert(command.begin(), run_dir->string());
  run_helper(python, helper, command);
  return 0;
}

}  // namespace hardy::jobs
