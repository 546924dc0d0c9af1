#pragma once
// Slurm: #SBATCH scripts submitted with sbatch, watched with scontrol (and sacct where a
// slurmdbd keeps finished jobs), cancelled with scancel.
#include "hardy/batch/scheduler.hpp"

namespace hardy::slurm {

class SlurmScheduler final : public batch::Scheduler {
 public:
  std::string_view name() const override { return "slurm"; }
  std::string_view directive_prefix() const override { return "#SBATCH"; }
  std::string_view script_name() const override { return "job.sbatch"; }
  // One template: --requeue, --signal=B:USR1@lead, output appended in the run directory across
  // requeues, `hardy run` choosing its own launcher (mpirun --with-ft ulfm or srun).
  std::string builtin_template(const batch::JobRequest& request) const override;
  // Throws InvalidArgument for --lsf-launcher: Slurm has no choice of launcher here.
  batch::TemplateValues template_values(const batch::JobRequest& request) const override;
  std::string submit(const std::filesystem::path& script) const override;
  batch::JobState query(const std::string& job_id) const override;
  void cancel(const std::string& job_id) const override;
  std::optional<batch::Allocation> allocation(const batch::Environment& environment) const override;
};

}  // namespace hardy::slurm
