#pragma once
// The inside of a TrainingSession, shared by the training loop (training_session.cpp), recovery
// (recovery.cpp) and node-local staging (session_staging.cpp). Its parts each have one job:
// Trainer (the model and the step's mechanics), StateTransport (how a restored state reaches
// every rank), Membership (who is in the job), StateStore (the committed state in memory,
// node-local and in checkpoints), Watchdog (ending a job stuck in communication), FaultDomains
// (the other domains). The session orders them: a step, its agreement, the duties after a commit
// (its step hooks), and on a failure the recovery.
#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "domains/fault_domains.hpp"
#include "hardy/checkpoint/checkpoint.hpp"
#include "hardy/comm/agreement.hpp"
#include "hardy/comm/communicator.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/core/support/run_lock.hpp"
#include "hardy/resilience/failure_injection.hpp"
#include "hardy/resilience/recovery_protocol.hpp"
#include "hardy/resilience/run_identity.hpp"
#include "hardy/resilience/training_session.hpp"
#include "session/hang_monitor.hpp"
#include "session/membership.hpp"
#include "session/node_staging.hpp"
#include "session/state_store.hpp"
#include "session/state_transport.hpp"
#include "session/trainer.hpp"
#include "session/watchdog.hpp"

namespace hardy::resilience {

using Clock = std::chrono::steady_clock;

// Raised inside the session when it must stop before its last step (limits reached, preempted).
struct SessionStop {
  int status;
  std::string reason;
};

// What a committed step leaves for the duties after it.
struct CommittedStep {
  StepOutcome outcome{};
  Clock::time_point started;  // the step's time runs until its metrics line is written
  // compute_s runs from the draw of the batch to the end of backward: data_wait_s and
  // input_copy_s are parts of it. input_device_s: the device's time for the batch's copy when it
  // was staged during the previous step (beside that step's kernels, not part of compute_s).
  double compute_s = 0, allreduce_s = 0, data_wait_s = 0, input_copy_s = 0, input_device_s = 0;
  bool input_staged = false;
  float lr = 0;
  long skipped_samples = 0;
  // The optimizer update, run once every survivor agreed on the step: until then the live state
  // is the last committed one, so a step that does not commit needs nothing rolled back.
  std::function<void()> update = {};
};

// A duty after every commit (the node-local snapshot, the heartbeat, the audit, the replica
// check, the metrics line, preemption, the checkpoint). The session runs them
// in the order they were added, each inside a watchdog stretch of its own when `watched`.
struct StepHook {
  const char* name;
  std::optional<Activity> watched;
  std::function<void(const CommittedStep&)> run;
};

// How a failure was first seen: when, and how long after the failure itself.
struct FailureClock {
  double detected_at;  // unix time
  double latency_s;
  bool injected;  // the victim of an injected failure wrote down when it died
};

struct TrainingSession::State final : StateSource {
  State(TrainingConfig config, std::unique_ptr<comm::Communicator> world, core::DataSources data);
  ~State();

  // announce_start, prepare_to_train, train_to_last_step, then finish or stop_early.
  int run();
  void announce_start();  // job_started (domain_started), and the console's first line
  // Resume (--resume), the first copy in memory, the domains' first meeting, the watchdog.
  void prepare_to_train();
  void train_to_last_step();  // steps, and recoveries in between
  // The final checkpoint, the node-local copies removed, the model saved and evaluated,
  // job_finished. Returns kCompleted.
  int finish();
  // A SessionStop (limits, preemption): job_finished, and every rank waits for the lead's final
  // checkpoint before it exits. Returns the stop's status.
  int stop_early(const SessionStop& stop);

  // ---- the training loop (training_session.cpp) ----
  void resume_if_asked();
  // The run directory's newest checkpoint that validates (the rejected ones logged), if any.
  std::optional<checkpoint::ValidCheckpoint> newest_valid_checkpoint();
  // `--resume latest`: restores every rank from the newest node-local snapshot of any host when
  // it is newer than rank 0's checkpoint at `checkpoint_step` (-1: none). False when none is.
  bool resume_from_node_snapshot(long checkpoint_step, Clock::time_point started);
  // After a resume: the state_restored event (`host` only for a node-local snapshot; `foreign`
  // and the saved run id when `restored` is another run's) and, on the lead, the console line.
  void report_resumed(const std::string& source, const std::filesystem::path& path,
                      const std::string& host, const checkpoint::TrainingState& restored,
                      Clock::time_point started);
  // Rank 0 gives the run directory its run id (run_identity.hpp) and tells every rank the id
  // and the configuration hash; every rank throws when rank 0 could not.
  void establish_run_identity();
  void train_step();
  // The oldest computed step's gradient allreduce in the domain, then its loss, skipped and
  // computed samples summed over the domain's ranks (collective; the bad samples logged or the
  // job ended, as --bad-samples says).
  std::vector<double> reduce_in_domain(long this_step);
  // Draws, loads and computes `computed_step` (this iteration's commit, or the one after it with
  // --gradient-lag 1), its gradients' allreduce started during backward.
  void compute_step(long computed_step, CommittedStep& done);
  // With fault domains, after the step's gradients are summed in the domain: where the domains
  // meet, the exchange of those sums with the other domains and the vote, left in flight
  // (`in_background`, while the next step computes) or done at once; elsewhere the sums become
  // the domain's mean. `loss` is reduce_in_domain()'s.
  void start_domain_exchange(long this_step, std::size_t global_batch, std::vector<double>& loss,
                             bool in_background);
  // Its outcome: false when the step is not to be committed here (abandoned, rewound, or taken
  // from a peer whole); on commit the sums are in the gradients and `loss` holds the job's.
  bool settle_domain_exchange(long this_step, std::vector<double>& loss, const CommittedStep& done,
                              bool& admit_after_commit);
  // This rank's samples of a global batch, in the order it loads them. The one place that maps
  // samples to ranks: the step and the prefetcher's look-ahead both ask it. Its contiguous slice
  // (core::shard_of), or with --stage-to its node's staged samples first (session_staging.cpp).
  std::vector<std::size_t> local_samples(const core::GlobalBatch& batch) const;
  // Every rank's bad samples of this step (collective; every rank gets all of them, as JSON
  // records: sample, file, reason, rank, step).
  std::vector<nlohmann::json> gather_bad_samples(const std::vector<core::SkippedSample>& mine,
                                                 long this_step);
  // The step's agreement; then the step hooks, or a recovery when a peer's step failed.
  void commit_step(CommittedStep done);
  std::vector<StepHook> make_step_hooks();
  void check_same_plan(std::uint64_t digest, long at_step);
  // That the ranks' counts of a step's samples cover their share of its global batch exactly
  // (comm::Agreed<Error> otherwise).
  void check_samples_covered(long computed, long skipped, long at_step);
  void verify_replicas(long step);
  // The step's metrics line, `step_s` from its start to now (its timings, lr and skipped
  // samples from `done`).
  void write_metrics(const CommittedStep& done, double step_s);
  // The committed step's lines, kept by every rank (log_committed_step_if_missing writes them).
  void keep_metrics_line(const CommittedStep& done, double step_s);
  void keep_audit_line(const core::GlobalBatch& batch);
  // When this rank becomes rank 0 (the events), and the writer of the run directory's files
  // (metrics, audit, checkpoints): again whenever that may have changed.
  void open_lead_logs();
  bool writes_run_files() const { return membership.writes_run_files(); }
  // ---- fault domains (fault_domains.hpp) ----
  DomainStateAccess domain_state_access();
  // After the domains' membership changed: who writes the run directory's files now.
  void follow_domain_ownership();
  // Whether the domains meet at a step (--domain-sync-every; always without domains).
  bool domains_meet_at(long at_step) const;
  // After a lost domain: back to the last state every domain committed (domain_rewound).
  void rewind_to_synced(long at_step);
  // A new rank 0 after a recovery: writes the last committed step's metrics and audit lines when
  // its predecessor died between the step's agreement and logging it (recovery.cpp).
  void log_committed_step_if_missing();
  bool lead() const { return membership.lead(); }
  comm::Communicator& comm() const { return membership.comm(); }
  long step() const { return trainer.step(); }
  std::size_t current_global_batch() const;
  float current_lr(long step) const;
  // StateSource: the trainer's state and who ran it (world, hosts, run id).
  void capture_into(checkpoint::TrainingState& state) const override;
  checkpoint::StateSources committed_sources(checkpoint::TrainingState& scalars) const override;
  // Who ran it: the configuration, world, hosts and run identity into `state`.
  void capture_job_into(checkpoint::TrainingState& state) const;
  long committed_step() const override { return trainer.step(); }
  // Root's `state` (read from a checkpoint or a node-local snapshot) to every rank, applied
  // everywhere; `state` may keep only the loop's scalars afterwards.
  void restore_from(checkpoint::TrainingState& state, int root = 0) {
    transport->restore(comm(), trainer, state, root);
  }
  // What the watchdog (and the hang monitor on its thread) knows of the session.
  void publish_to_watchdog();
  // The hang monitor's board: one per launch of each domain (hang_monitor.hpp).
  void start_hang_monitor();
  // The lead, after a recovery: hang_detected for a departed rank whose killer left a decision.
  // Returns whether one did.
  bool report_hang(int world_rank);

  // ---- node-local staging (session_staging.cpp) ----
  // --stage-to: each node copies its share before training (collective).
  void start_staging();
  // The hosts changed: recompute the homes; `wait` copies now and reports every node's figures
  // (collective), otherwise each node fetches what moved to it in the background.
  void restage(bool wait, const std::string& reason);

  // ---- recovery (recovery.cpp), in the order it runs ----
  // After a ProcessFailure, or a step that some survivor did not finish: shrink to the
  // survivors, roll back to the last committed step, re-split the batch (recovery_protocol.hpp).
  void recover(const std::string& what);
  FailureClock failure_clock() const;
  // One attempt's shrink: who left (failure_detected, communicator_shrunk).
  void report_departure(const Shrink& shrink, const std::string& what, const FailureClock& clock);
  // --min-world-size and --max-failures: a final checkpoint and SessionStop when crossed.
  void stop_if_past_limits();
  void restore_after_failure(double detected_at);
  // With fault domains, after an in-domain recovery: the step that was in flight across domains
  // is rolled forward (the others committed it) or dropped with them.
  void settle_step_across_domains(const std::string& what);
  // The watchdog's action: log, write what is committed, end the process for a relaunch.
  [[noreturn]] void end_stuck_job(const Watchdog::Stuck& stuck);

  TrainingConfig config;
  Membership membership;
  core::DataSources data;
  // With --stage-to. Shared with the dataset's file locator, through which the prefetcher's
  // workers read until they are joined: it outlives them whatever order the members go in.
  std::shared_ptr<NodeStaging> staging;
  Trainer trainer;
  std::unique_ptr<StateTransport> transport;
  std::unique_ptr<FaultDomains> domains;  // always present; enabled() with --domain
  FailureInjector injector;

  // The lead's lock of the run directory, when no `hardy run` holds it for this launch.
  std::unique_ptr<core::RunDirectoryLock> run_lock;
  core::EventLog events;
  core::JsonLines metrics, audit;
  bool lead_logs_open = false;  // this rank writes the run directory's files
  RunIdentity identity;         // filled by establish_run_identity(), before anything is saved
  StateStore store;
  // Null with --hang-timeout off. Before the watchdog, whose thread calls it, so it outlives it.
  std::unique_ptr<HangMonitor> hang_monitor;
  Watchdog watchdog;
  std::vector<StepHook> step_hooks;
  // Steps committed since this launch's loop began or the last recovery: the hang monitor acts
  // from the first on (the slowest, with oneDNN's primitives made again: what it learns first).
  long steps_since_restart = 0;
  // FaultDomains::split_digest() when the newest computed step loaded its samples: with
  // --gradient-lag 1 a step still in flight after a change of the split is computed again.
  std::uint64_t split_of_newest_computed = 0;
  // Between start_domain_exchange and settle_domain_exchange: the tensors exchanged (host
  // copies on a GPU), the step's batch (for a heal's audit line), and the outcome of an exchange
  // done at once.
  std::span<core::Tensor* const> exchanging;
  std::optional<core::GlobalBatch> batch_in_exchange;
  std::optional<DomainStep> exchanged_now;

  // The log lines of the last committed step, kept by every rank for log_committed_step_if_missing.
  nlohmann::json committed_metrics_line, committed_audit_line;
  // The same lines of the last step the domains met at (--domain-sync-every above 1): a rewind
  // goes back to that step, whose lines a new owner of the run files writes if they are missing.
  nlohmann::json synced_metrics_line, synced_audit_line;
  double last_snapshot_s = 0;  // the training thread's stall for this step's node-local copy
  Clock::time_point job_start = Clock::now();
  // When the step in training began to count: the last commit, or the end of the last (re)start,
  // so that a step's time never includes a recovery.
  Clock::time_point step_clock = Clock::now();
  double samples_seen = 0;
  double last_commit_unix = 0;
  int failures = 0;
  // The input pipeline over the job's committed steps (this rank's waits).
  double data_wait_total_s = 0, step_total_s = 0;
  std::set<std::size_t> skipped_samples;  // every rank holds the same set
};

}  // namespace hardy::resilience
