#pragma once
// What the training loop hands its parts (the step hooks, recovery, the fault domains' side):
// the step it committed, the loop's running figures, and how a part stops the job early.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/resilience/recovery_protocol.hpp"

namespace hardy::resilience {

using Clock = std::chrono::steady_clock;

// Thrown by a part of the session when the job must stop before its last step (limits reached,
// preempted); the loop writes job_finished and returns `status`.
struct SessionStop {
  int status;
  std::string reason;
  std::string finished_status = {};  // job_finished's status, where the exit status's is not it
};

// What a committed step leaves for the duties after it.
struct CommittedStep {
  StepOutcome outcome{};
  Clock::time_point started;  // the step's time runs until its metrics line is written
  // compute_s runs from the draw of the batch to the end of backward: data_wait_s and
  // input_copy_s are parts of it. input_device_s: the device's time for the batch's copy when it
  // was staged during the previous step (beside that step's kernels, not part of compute_s).
  double compute_s = 0, allreduce_s = 0, data_wait_s = 0, input_copy_s = 0, input_device_s = 0;
  // The device's time over the step's forward, loss and backward, read when the metrics line is
  // written (by then the step's sums have waited for its backward): null on the CPU.
  std::shared_ptr<core::DeviceSpan> compute_span = {};
  bool input_staged = false;
  float lr = 0;
  long skipped_samples = 0;
  // The slow-rank watch's scores (straggler_watch.hpp: the peers' median time per sample over
  // each rank's own; empty until it has a window): the lowest goes into every metrics line, all
  // of them every --straggler-window steps (`all_scores`).
  std::vector<double> rank_scores = {};
  bool all_scores = false;
  // The optimizer update, run once every survivor agreed on the step: until then the live state
  // is the last committed one, so a step that does not commit needs nothing rolled back.
  std::function<void()> update = {};
};

// The loop's running figures, kept by the loop and read by the duties after a commit.
struct LoopProgress {
  // Steps committed since this launch's loop began or the last recovery: the hang monitor acts
  // from the first on (the slowest, with oneDNN's primitives made again: what it learns first).
  long steps_since_restart = 0;
  Clock::time_point job_start = Clock::now();
  // When the step in training began to count: the last commit, or the end of the last (re)start,
  // so that a step's time never includes a recovery.
  Clock::time_point step_clock = Clock::now();
  // This launch's time from its process's start to its first committed step (once known): what a
  // relaunch costs, about twice over (the straggler eviction's and the regrow's price).
  std::optional<double> launch_s;
  double samples_seen = 0;
  double last_commit_unix = 0;
  int failures = 0;
  // The training thread's stall for the last committed step's node-local copy.
  double last_snapshot_s = 0;
  // The input pipeline over the job's committed steps (this rank's waits).
  double data_wait_total_s = 0, step_total_s = 0;
};

}  // namespace hardy::resilience
