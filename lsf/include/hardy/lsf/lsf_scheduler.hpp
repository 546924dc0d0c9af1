#pragma once
// IBM Spectrum LSF: #BSUB scripts submitted with `bsub < script`, watched with bjobs, cancelled
// with bkill. In a rendered script the environment variable HARDY_LSF_LAUNCHER, when set,
// replaces the launcher (`hardy run --launcher`: mpirun, mpiexec, srun or jsrun), so that a test
// can run the script without LSF and jsrun.
#include "hardy/batch/scheduler.hpp"

namespace hardy::lsf {

class LsfScheduler final : public batch::Scheduler {
 public:
  std::string_view name() const override { return "lsf"; }
  std::string_view directive_prefix() const override { return "#BSUB"; }
  std::string_view script_name() const override { return "job.bsub"; }
  // Two templates, chosen by JobRequest::launcher: jsrun (Summit-like: whole nodes with -nnodes,
  // jsrun places one rank per GPU) or mpirun (-n slots spread ranks_per_node per host). Both are
  // rerunnable (-r), requeued on kRequeueExitStatus (-Q) and warned with SIGUSR1 (-wa, -wt).
  std::string builtin_template(const batch::JobRequest& request) const override;
  // Throws InvalidArgument when the launcher is neither jsrun nor mpirun.
  batch::TemplateValues template_values(const batch::JobRequest& request) const override;
  std::string submit(const std::filesystem::path& script) const override;
  batch::JobState query(const std::string& job_id) const override;
  void cancel(const std::string& job_id) const override;
  std::optional<batch::Allocation> allocation(const batch::Environment& environment) const override;
};

}  // namespace hardy::lsf
