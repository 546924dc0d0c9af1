#pragma once
// The allocation a batch job runs in, as its scheduler describes it in the job's environment.
// `hardy run` (the supervisor) takes its node list from here; see
// hardy/jobs/schedulers.hpp for detect_allocation(), which knows every scheduler.
#include <string>
#include <vector>

namespace hardy::batch {

struct Allocation {
  std::string scheduler;             // "slurm" or "lsf"
  std::string job_id;                // the scheduler's id; the same across requeues
  std::vector<std::string> nodes{};  // distinct host names, in the scheduler's order
  int tasks = 0;                     // task slots granted over all nodes
  // How many times the scheduler requeued or reran this job before this run. Slurm counts
  // (SLURM_RESTART_COUNT); LSF only says whether the job ran before (LSB_RESTART=Y), so 0 or 1.
  int restart_count = 0;
};

}  // namespace hardy::batch
