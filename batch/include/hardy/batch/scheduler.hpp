#pragma once
// The one interface every batch scheduler hardy knows implements (slurm::SlurmScheduler,
// lsf::LsfScheduler): render a job's script, submit it, ask for its state, cancel it, and read the
// allocation a job runs in from its environment.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "hardy/batch/allocation.hpp"
#include "hardy/batch/environment.hpp"
#include "hardy/batch/job_request.hpp"

namespace hardy::batch {

struct JobState {
  std::string state;     // the scheduler's own word (PENDING, RUNNING, COMPLETED; PEND, RUN, DONE)
                         // or UNKNOWN when it no longer knows the job
  std::string detail{};  // its reason or exit code, or why the state is unknown; may be empty
  std::optional<int> restart_count{};  // when the scheduler reports one
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;

  virtual std::string_view name() const = 0;              // "slurm", "lsf"
  virtual std::string_view directive_prefix() const = 0;  // "#SBATCH", "#BSUB"
  virtual std::string_view script_name() const = 0;  // the script's file name in the run directory

  // The built-in template for this request (LSF has one per launcher), and the values of its
  // placeholders. Both throw InvalidArgument for a request this scheduler cannot run.
  virtual std::string builtin_template(const JobRequest& request) const = 0;
  virtual TemplateValues template_values(const JobRequest& request) const = 0;

  // Submits a rendered script and returns the job id; throws Error with the scheduler's message
  // when it refuses the job, or when its commands are not installed.
  virtual std::string submit(const std::filesystem::path& script) const = 0;
  // The job's state; a job the scheduler has forgotten is UNKNOWN, not an error.
  virtual JobState query(const std::string& job_id) const = 0;
  // Throws Error with the scheduler's message when it cannot cancel the job.
  virtual void cancel(const std::string& job_id) const = 0;

  // The allocation this process runs in when `environment` is this scheduler's job environment,
  // nullopt otherwise; throws InvalidArgument naming the variable when one is malformed.
  virtual std::optional<Allocation> allocation(const Environment& environment) const = 0;
};

// Throws InvalidArgument unless `job_id` is a job id as hardy submits them (a positive decimal
// number). Run before any command takes one: `bkill 0` kills every job of the user, and a job id
// read back from a run directory's scheduler.json may be anything.
void check_job_id(std::string_view job_id);

// Cancels a job with the scheduler's `command` (scancel, bkill) run as `command JOB_ID`, after
// check_job_id; throws Error with the command's message when it fails.
void cancel_job(const std::string& command, const std::string& job_id);

// The body every built-in template shares: start `hardy run` for the job (with
// `extra_run_options`, placeholders allowed, before its other options; `hardy train` gets
// --config and --resume latest, which starts at step 0 when there is no checkpoint yet) in the
// background, forward SIGUSR1 to it, wait for it, and run `on_requeue_status` (shell lines) when it
// exits with kRequeueExitStatus. This is the one place that writes the `hardy run` command line.
std::string supervised_launch(std::string_view extra_run_options,
                              std::string_view on_requeue_status);

}  // namespace hardy::batch
