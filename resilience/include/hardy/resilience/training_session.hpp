#pragma once
// A data-parallel training job that survives the loss of ranks. Each step is committed only when
// every rank agrees it completed (a fault-tolerant agreement), and the committed state is kept in
// memory. When a peer dies, the survivors revoke the communicator, agree on who failed, shrink
// it, roll back to the last committed step (from memory, or from the newest valid checkpoint read
// by the new rank 0 and broadcast), re-split the global batch over themselves, and go on. Every
// one of these moves is an event in the run directory's events.jsonl.
#include <memory>

#include "hardy/comm/communicator.hpp"
#include "hardy/core/data/data_sources.hpp"
#include "hardy/resilience/training_config.hpp"

namespace hardy::resilience {

// Process exit statuses of `hardy train`, also read by the supervisor.
enum ExitStatus : int {
  kCompleted = 0,
  kFailed = 1,
  kBadInput = 2,
  kStopped = 3,    // too few ranks left or too many failures; a final checkpoint was written
  kPreempted = 4,  // SIGUSR1 (a scheduler's time-limit warning): checkpoint written, resume later
  // A planned relaunch, checkpoint written: a slow node is to be left out (--straggler evict,
  // node_evicted; `hardy run` relaunches on a spare in its place), or a job that shrank inside
  // is to be relaunched at its full world (--regrow, regrow_planned).
  kPlannedRelaunch = 5,
  kWatchdog = 75,  // a collective hung past --collective-timeout
};

class TrainingSession {
 public:
  // Opens the samples that config.data describes.
  TrainingSession(TrainingConfig config, std::unique_ptr<comm::Communicator> world);
  // Trains on samples the caller opened (tests, readers that DataSpec does not know).
  TrainingSession(TrainingConfig config, std::unique_ptr<comm::Communicator> world,
                  core::DataSources data);
  ~TrainingSession();
  TrainingSession(const TrainingSession&) = delete;
  TrainingSession& operator=(const TrainingSession&) = delete;

  // Trains to config.steps and returns an ExitStatus. Throws for errors that are not failures of
  // peers (bad input, I/O, a non-finite loss).
  int run();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Installs the SIGUSR1 handler that asks a running session to checkpoint and stop at the next
// step boundary (Slurm's `--signal=B:USR1@lead` and LSF's warning actions send it).
void install_preemption_handler();

}  // namespace hardy::resilience
