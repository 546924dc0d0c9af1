#include "hardy/slurm/slurm_scheduler.hpp"

#include <fmt/format.h>

#include <map>
#include <sstream>

#include "hardy/batch/command.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/slurm/allocation.hpp"

namespace hardy::slurm {

namespace {

// --open-mode=append keeps the output of every run of a requeued job (Slurm truncates by default).
// --no-kill: without it Slurm ends the whole allocation when one of its nodes fails (and requeues
// it, to wait in the queue for a whole set of healthy nodes); with it the allocation stays, so
// `hardy run` relaunches the job on the nodes that remain, within seconds. The comment lines
// between the directives are fine: sbatch reads #SBATCH lines up to the first command.
constexpr std::string_view kDirectives = R"sh(#!/bin/bash
# A hardy training job for Slurm, written by `hardy submit`.
#SBATCH --job-name={{job_name}}
#SBATCH --nodes={{nodes}}
#SBATCH --ntasks-per-node={{ranks_per_node}}
#SBATCH --gpus-per-node={{gpus_per_node}}
#SBATCH --cpus-per-task={{cpus_per_task}}
#SBATCH --time={{time}}
#SBATCH --account={{account}}
#SBATCH --partition={{queue}}
#SBATCH --output={{output}}
#SBATCH --error={{error}}
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --no-kill
#SBATCH --signal=B:USR1@{{signal_lead_seconds}}
)sh";

// Slurm keeps a requeued job off nodes that are still DOWN, but not off one that comes back
// half-repaired: the job's own exclusion list does that. Slurm takes a new ExcNodeList only from a
// pending job, so the script requeues first, ignoring the SIGTERM the requeue sends it, and
// excludes the lost nodes while the job waits for its begin time.
constexpr std::string_view kRequeue =
    R"sh(  trap '' TERM
  echo "hardy: requeueing job $SLURM_JOB_ID; it resumes from its newest committed step" >&2
  scontrol requeue "$SLURM_JOB_ID"
  if [ -s {{exclude_nodes_file}} ]; then
    exclude=$(paste -sd, {{exclude_nodes_file}})
    if scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="$exclude"; then
      echo "hardy: job $SLURM_JOB_ID will not run on $exclude again" >&2
    else
      echo "hardy: scontrol could not exclude $exclude from job $SLURM_JOB_ID" >&2
    fi
  fi)sh";

// `scontrol show job -o` prints one line of Key=Value words. The job's name comes first and may
// hold spaces (and anything else), so fields are read from UserId= on.
std::map<std::string, std::string> scontrol_fields(const std::string& line) {
  std::map<std::string, std::string> fields;
  std::istringstream words(line.substr(std::min(line.find(" UserId="), line.size())));
  std::string word;
  while (words >> word) {
    const auto equals = word.find('=');
    if (equals != std::string::npos)
      fields.emplace(word.substr(0, equals), word.substr(equals + 1));
  }
  return fields;
}

std::string trimmed(const std::string& text) {
  const auto start = text.find_first_not_of(" \t\n");
  if (start == std::string::npos) return "";
  return text.substr(start, text.find_last_not_of(" \t\n") - start + 1);
}

// sacct remembers finished jobs, but only where a slurmdbd keeps accounting.
std::optional<batch::JobState> query_accounting(const std::string& job_id) {
  try {
    const auto result = batch::run_command({"sacct", "--noheader", "--allocations", "--parsable2",
                                            "--jobs", job_id, "--format=State,ExitCode"});
    const std::string line = trimmed(result.out.substr(0, result.out.find('\n')));
    if (result.status != 0 || line.empty()) return std::nullopt;
    const auto bar = line.find('|');
    return batch::JobState{
        .state = line.substr(0, bar),
        .detail = bar == std::string::npos ? "" : "exit code " + line.substr(bar + 1)};
  } catch (const Error&) {
    return std::nullopt;  // no sacct: the caller reports the state as unknown
  }
}

}  // namespace

std::string SlurmScheduler::builtin_template(const batch::JobRequest&) const {
  return std::string(kDirectives) + batch::supervised_launch("", kRequeue);
}

batch::TemplateValues SlurmScheduler::template_values(const batch::JobRequest& request) const {
  if (!request.launcher.empty())
    throw InvalidArgument(
        fmt::format("--lsf-launcher {} is for LSF only; under Slurm `hardy run` uses its default "
                    "launcher (the MPI hardy was built with)",
                    request.launcher));
  return batch::template_values(request);
}

std::string SlurmScheduler::submit(const std::filesystem::path& script) const {
  const auto result = batch::run_command({"sbatch", "--parsable", script.string()});
  if (result.status != 0)
    throw Error(fmt::format("sbatch refused the job: {}", batch::first_line(result)));
  // --parsable prints "id" or "id;cluster".
  const std::string id = trimmed(result.out.substr(0, result.out.find(';')));
  if (id.empty())
    throw Error(fmt::format("sbatch printed no job id (output: '{}')", trimmed(result.out)));
  return id;
}

batch::JobState SlurmScheduler::query(const std::string& job_id) const {
  const auto result = batch::run_command({"scontrol", "show", "job", "--oneliner", job_id});
  if (result.status == 0) {
    auto fields = scontrol_fields(result.out);
    batch::JobState state{.state = fields["JobState"]};
    if (fields["Reason"] != "None" && !fields["Reason"].empty())
      state.detail = "reason " + fields["Reason"];
    if (fields["ExitCode"] != "0:0" && !fields["ExitCode"].empty())
      state.detail = "exit code " + fields["ExitCode"];
    if (!fields["Restarts"].empty())
      state.restart_count = static_cast<int>(batch::parse_count(fields["Restarts"], "Restarts"));
    if (!state.state.empty()) return state;
  }
  if (auto accounted = query_accounting(job_id)) return *accounted;
  return batch::JobState{
      .state = "UNKNOWN",
      .detail = fmt::format("Slurm no longer knows job {} ({}; finished jobs are forgotten "
                            "after MinJobAge, and sacct needs a slurmdbd)",
                            job_id, batch::first_line(result))};
}

void SlurmScheduler::cancel(const std::string& job_id) const {
  batch::cancel_job("scancel", job_id);
}

std::optional<batch::Allocation> SlurmScheduler::allocation(
    const batch::Environment& environment) const {
  return read_allocation(environment);
}

}  // namespace hardy::slurm
