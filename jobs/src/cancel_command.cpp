#include <fmt/format.h>

#include <iostream>

#include "command_line.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/jobs/commands.hpp"
#include "hardy/jobs/schedulers.hpp"
#include "submission.hpp"

namespace hardy::jobs {

boost::program_options::options_description cancel_options() {
  return run_dir_options("hardy cancel options");
}

int cancel_command(const std::vector<std::string>& args) {
  boost::program_options::variables_map vm;
  const auto run_dir = parse_existing_run_dir_command(
      args, cancel_options(), "hardy cancel",
      "Usage: hardy cancel RUN_DIR\n\nCancels the scheduler job `hardy "
      "submit` recorded in RUN_DIR/scheduler.json "
      "(scancel or bkill).\n",
      vm);
  if (!run_dir) return 0;
  const auto submission = read_submission(*run_dir);
  if (!submission)
    throw InvalidArgument(fmt::format("{} has no {}: it was not submitted with hardy submit",
                                      run_dir->string(), kSubmissionFile));
  make_scheduler(submission->scheduler)->cancel(submission->job_id);
  std::cout << fmt::format("cancelled {} job {}\n", submission->scheduler, submission->job_id);
  return 0;
}

}  // namespace hardy::jobs
