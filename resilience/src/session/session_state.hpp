#pragma once
// The inside of a TrainingSession: the loop and its order. Its parts each have one job, and none
// of them can reach the session: Trainer (the model and the step's mechanics), Membership (who
// is in the job), RunFiles (the run directory's logs), StateStore (the committed state in
// memory, node-local and in checkpoints, and reading it back), DomainCoordinator (the other
// fault domains), SessionStaging (node-local copies of the data), Recovery (shrink, restore,
// rebalance), Watchdog and HangMonitor (a job stuck in communication, a hung rank), and the step
// hooks (the duties after every commit, hooks/).
#include <memory>
#include <string>
#include <vector>

#include "hardy/resilience/failure_injection.hpp"
#include "hardy/resilience/run_identity.hpp"
#include "hardy/resilience/training_session.hpp"
#include "session/bad_samples.hpp"
#include "session/domain_coordinator.hpp"
#include "session/hang_monitor.hpp"
#include "session/hooks/step_hook.hpp"
#include "session/loop_state.hpp"
#include "session/membership.hpp"
#include "session/recovery.hpp"
#include "session/regrow.hpp"
#include "session/run_files.hpp"
#include "session/session_staging.hpp"
#include "session/slow_ranks.hpp"
#include "session/state_store.hpp"
#include "session/state_transport.hpp"
#include "session/trainer.hpp"
#include "session/watchdog.hpp"

namespace hardy::resilience {

struct TrainingSession::State final {
  State(TrainingConfig config, std::unique_ptr<comm::Communicator> world, core::DataSources data);
  ~State();

  // announce_start, prepare_to_train, train_to_last_step, then finish or stop_early.
  int run();
  void announce_start();  // job_started (domain_started), and the console's first line
  // Resume (--resume), the domains' first meeting, the hang monitor, the watchdog.
  void prepare_to_train();
  void train_to_last_step();  // steps, and recoveries in between
  // The final checkpoint, the node-local copies removed, the model saved and evaluated,
  // job_finished. Returns kCompleted.
  int finish();
  // A SessionStop (limits, preemption): job_finished, and every rank waits for the lead's final
  // checkpoint before it exits. Returns the stop's status.
  int stop_early(const SessionStop& stop);

  // One iteration: the oldest computed step reduced, exchanged across domains and committed,
  // and (with --gradient-lag 1) the next one computed meanwhile.
  void train_step();
  // The oldest computed step's gradient allreduce in the domain, then its loss, skipped and
  // computed samples summed over the domain's ranks (collective; the bad samples logged or the
  // job ended, as --bad-samples says).
  std::vector<double> reduce_in_domain(long this_step);
  // Draws, loads and computes `computed_step`, its gradients' allreduce started during backward.
  void compute_step(long computed_step, CommittedStep& done);
  // The step's agreement; then the step hooks, or a recovery when a peer's step failed.
  void commit_step(CommittedStep done);
  // After a ProcessFailure, or a step that some survivor did not finish: Recovery, then the
  // step that was in flight across domains settled (recovery_finished).
  void recover(const std::string& what);
  // The slow-rank watch named a rank for eviction: a final checkpoint, node_evicted, and a stop
  // with kPlannedRelaunch, so that `hardy run` relaunches on a spare (SessionStop).
  [[noreturn]] void evict_slow_node(const StragglerVerdict& verdict);
  // The job shrank inside and the time lost to it reached a relaunch's cost (regrow.hpp): a
  // final checkpoint, regrow_planned, and a stop with kPlannedRelaunch, so that `hardy run`
  // relaunches it at its full world.
  [[noreturn]] void regrow(const RegrowVerdict& verdict);
  void publish_to_watchdog() {
    publish_progress(watchdog, membership, step(), progress.steps_since_restart);
  }
  bool lead() const { return membership.lead(); }
  comm::Communicator& comm() const { return membership.comm(); }
  long step() const { return trainer.step(); }
  std::size_t current_global_batch() const {
    return config.global_batch_with(membership.size(), membership.original_size());
  }
  core::EventLog& events() { return files.events(); }

  const Clock::time_point launched = Clock::now();  // this launch's start, for its costs
  TrainingConfig config;
  Membership membership;
  core::DataSources data;
  Trainer trainer;
  std::unique_ptr<StateTransport> transport;
  FailureInjector injector;
  RunFiles files;
  RunIdentity identity;  // filled by the constructor, before anything is saved or read
  StateStore store;
  DomainCoordinator domains;
  SessionStaging staging;
  LoopProgress progress;
  // Null with --hang-timeout off. Before the watchdog, whose thread calls it, so it outlives it.
  std::unique_ptr<HangMonitor> hang_monitor;
  Watchdog watchdog;
  Recovery recovery;
  std::vector<std::unique_ptr<StepHook>> step_hooks;
  BadSamples bad_samples;
  SlowRanks slow_ranks;  // each rank's own work shared with the loss; slow ranks' shares
  Regrow regrowth;       // a shrunk job's time lost, against a relaunch at its full world
};

}  // namespace hardy::resilience
