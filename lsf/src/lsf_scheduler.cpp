#include "hardy/lsf/lsf_scheduler.hpp"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "hardy/batch/command.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/lsf/allocation.hpp"

namespace hardy::lsf {

namespace {

// jsrun (CSM, as on Summit) allocates whole nodes; jsrun itself places the ranks on them.
constexpr std::string_view kJsrunResources = R"sh(#!/bin/bash
# A hardy training job for LSF with jsrun (one rank per GPU), written by `hardy submit`.
#BSUB -J {{job_name}}
#BSUB -nnodes {{nodes}}
)sh";

// With mpirun, LSF allocates slots: ranks_per_node of them on each host.
constexpr std::string_view kMpirunResources = R"sh(#!/bin/bash
# A hardy training job for LSF with mpirun, written by `hardy submit`.
#BSUB -J {{job_name}}
#BSUB -n {{tasks}}
#BSUB -R span[ptile={{ranks_per_node}}]
#BSUB -gpu num={{gpus_per_node}}
#BSUB -R affinity[core({{cpus_per_task}})]
)sh";

// -o and -e append, so a rerun job keeps the output of its earlier runs. -r reruns the job when
// its host fails; -Q requeues it when `hardy run` exits asking for it; -wa/-wt send the
// warning signal before the run limit.
constexpr std::string_view kCommonDirectives = R"sh(#BSUB -W {{time_hhmm}}
#BSUB -P {{account}}
#BSUB -q {{queue}}
#BSUB -o {{output}}
#BSUB -e {{error}}
#BSUB -r
#BSUB -Q {{requeue_exit_status}}
#BSUB -wa USR1
#BSUB -wt {{signal_lead_minutes}}

# HARDY_LSF_LAUNCHER, when set, replaces {{launcher}} as the launcher `hardy run` starts the ranks
# with (mpirun, mpiexec, srun or jsrun): tests run this script without LSF that way.
launcher=${HARDY_LSF_LAUNCHER:-{{launcher}}}
)sh";

// A requeued job runs again on hosts that satisfy its select string: the lost ones are left out
// through it (bmod -R), as Slurm's ExcNodeList does.
constexpr std::string_view kRequeue =
    R"sh(  if [ -s {{exclude_nodes_file}} ]; then
    select=$(awk -v q="'" 'NF { printf "%shname!=%s%s%s", (n++ ? " && " : ""), q, $1, q }' {{exclude_nodes_file}})
    echo "hardy: excluding $(paste -sd, {{exclude_nodes_file}}) from job $LSB_JOBID" >&2
    bmod -R "select[$select]" "$LSB_JOBID" ||
      echo "hardy: bmod could not exclude them; LSF requeues the job anyway" >&2
  fi
  echo "hardy: LSF requeues the job (bsub -Q); it resumes from its newest committed step" >&2)sh";

}  // namespace

std::string LsfScheduler::builtin_template(const batch::JobRequest& request) const {
  const std::string_view resources =
      request.launcher == "mpirun" ? kMpirunResources : kJsrunResources;
  return std::string(resources) + std::string(kCommonDirectives) +
         batch::supervised_launch(R"sh(--launcher "$launcher" )sh", kRequeue);
}

batch::TemplateValues LsfScheduler::template_values(const batch::JobRequest& request) const {
  if (request.launcher != "jsrun" && request.launcher != "mpirun")
    throw InvalidArgument(
        fmt::format("--lsf-launcher must be jsrun or mpirun, not '{}'", request.launcher));
  auto values = batch::template_values(request);
  values["launcher"] = request.launcher;
  return values;
}

std::string LsfScheduler::submit(const std::filesystem::path& script) const {
  std::ifstream file(script);
  std::stringstream text;
  text << file.rdbuf();
  if (!file) throw IoError(fmt::format("cannot read {}", script.string()));
  // bsub reads the #BSUB directives only from a script on its standard input.
  const auto result = batch::run_command({"bsub"}, text.str());
  // "Job <1234> is submitted to queue <normal>."
  const auto open = result.out.find("Job <"), close = result.out.find('>', open);
  if (result.status != 0 || open == std::string::npos || close == std::string::npos)
    throw Error(fmt::format("bsub refused the job: {}", batch::first_line(result)));
  return result.out.substr(open + 5, close - open - 5);
}

batch::JobState LsfScheduler::query(const std::string& job_id) const {
  const auto result = batch::run_command({"bjobs", "-noheader", "-o", "stat exit_code", job_id});
  std::istringstream words(result.out);
  std::string state, exit_code;
  if (result.status != 0 || !(words >> state) || result.out.find("not found") != std::string::npos)
    return batch::JobState{
        .state = "UNKNOWN",
        .detail = fmt::format("LSF does not know job {} ({})", job_id, batch::first_line(result))};
  words >> exit_code;
  return batch::JobState{
      .state = state,
      .detail = exit_code.empty() || exit_code == "-" ? "" : "exit code " + exit_code};
}

void LsfScheduler::cancel(const std::string& job_id) const { batch::cancel_job("bkill", job_id); }

std::optional<batch::Allocation> LsfScheduler::allocation(
    const batch::Environment& environment) const {
  return read_allocation(environment);
}

}  // namespace hardy::lsf
