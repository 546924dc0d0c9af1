#pragma once
// The inside of a TrainingSession, shared by the training loop (training_session.cpp) and the
// recovery protocol (recovery.cpp). Its parts each have one job: Membership (who is in the job),
// StateStore (the committed state in memory, node-local and in checkpoints), Watchdog (ending a
// job stuck in communication); the rest is the trainer: model, data, optimizer, gradient
// reduction and the step loop.
#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "fault_domains.hpp"
#include "hang_monitor.hpp"
#include "hardy/checkpoint/checkpoint.hpp"
#include "hardy/comm/communicator.hpp"
#include "hardy/comm/cross_rank_sum.hpp"
#include "hardy/comm/gradient_reducer.hpp"
#include "hardy/core/data/batch_assembler.hpp"
#include "hardy/core/data/prefetcher.hpp"
#include "hardy/core/data/sampler.hpp"
#include "hardy/core/nn/loss_scaler.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/resilience/failure_injection.hpp"
#include "hardy/resilience/run_identity.hpp"
#include "hardy/resilience/training_session.hpp"
#include "membership.hpp"
#include "node_staging.hpp"
#include "state_store.hpp"
#include "watchdog.hpp"

namespace hardy::resilience {

using Clock = std::chrono::steady_clock;

// Raised inside the session when it must stop before its last step (limits reached, preempted).
struct SessionStop {
  int status;
  std::string reason;
};

struct TrainingSession::State final : StateSource {
  State(TrainingConfig config, std::unique_ptr<comm::Communicator> world, core::DataSources data);
  ~State();

  int run();
  // The options' checks (InvalidArgument) and the values they imply (steps from epochs, the
  // schedule's length).
  void check_and_complete_config();

  // ---- the training loop (training_session.cpp) ----
  void resume_if_asked();
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
  // This rank's samples of a global batch, in the order it loads them. The one place that maps
  // samples to ranks: the step and the prefetcher's look-ahead both ask it. Its contiguous slice
  // (core::shard_of), or with --stage-to its node's staged samples first (session_staging.cpp).
  std::vector<std::size_t> local_samples(const core::GlobalBatch& batch) const;
  // Tells the prefetcher this step's samples and those of the next prefetch_batches steps, read
  // from a copy of the sampler (the real one moves only when a step draws its batch).
  void announce_ahead(const std::vector<std::size_t>& mine, std::size_t global_batch);
  // Every rank's bad samples of this step (collective; every rank gets all of them, as JSON
  // records: sample, file, reason, rank, step).
  std::vector<nlohmann::json> gather_bad_samples(const std::vector<core::SkippedSample>& mine,
                                                 long this_step);
  void commit_step(const std::function<void()>& log_step);
  void check_same_plan(const core::GlobalBatch& batch);
  void verify_replicas(long step);
  void write_metrics(double compute_s, double allreduce_s, double data_wait_s, double step_s,
                     float lr, long skipped);
  // The committed step's lines, kept by every rank (log_committed_step_if_missing writes them).
  void keep_metrics_line(double compute_s, double allreduce_s, double data_wait_s, double step_s,
                         float lr, long skipped);
  void keep_audit_line();
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
  // What the domains sum when they meet: the gradients, and with --domain-sync-every above 1
  // the parameters, batch statistics and optimizer state (weighted by the caller).
  std::vector<core::Tensor*> domain_tensors();
  // After a lost domain: back to the last state every domain committed (domain_rewound).
  void rewind_to_synced(long at_step);
  // A new rank 0 after a recovery: writes the last committed step's metrics and audit lines when
  // its predecessor died between the step's agreement and logging it (recovery.cpp).
  void log_committed_step_if_missing();
  bool lead() const { return membership.lead(); }
  comm::Communicator& comm() const { return membership.comm(); }
  std::size_t current_global_batch() const;
  float current_lr(long step) const;
  // StateSource: the model, optimizer and the loop's scalars.
  void capture_into(checkpoint::TrainingState& state) const override;
  long committed_step() const override { return step; }
  void apply_state(const checkpoint::TrainingState& state);
  void store_loop_scalars(checkpoint::TrainingState& state) const;  // step, sampler, loss, ...
  void restore_loop_scalars(const checkpoint::TrainingState& state);
  // Root's `state` (read from a checkpoint or a node-local snapshot) to every rank, applied
  // everywhere; when the gradient reducer moves device tensors (NCCL) they go GPU to GPU and
  // `state` keeps only the loop's scalars afterwards.
  void broadcast_restored(checkpoint::TrainingState& state, int root = 0);
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

  // ---- recovery (recovery.cpp) ----
  // After a ProcessFailure, or a step that some survivor did not finish: shrink to the
  // survivors, roll back to the last committed step, re-split the batch (recovery_protocol.hpp).
  void recover(const std::string& what);
  void restore_after_failure(double detected_at);
  // With fault domains, after an in-domain recovery: the step that was in flight across domains
  // is rolled forward (the others committed it) or dropped with them.
  void settle_step_across_domains(const std::string& what);
  // The watchdog's action: log, write what is committed, end the process for a relaunch.
  [[noreturn]] void end_stuck_job(const Watchdog::Stuck& stuck);

  TrainingConfig config;
  Membership membership;
  comm::CommunicatorSum cross_rank;

  std::unique_ptr<core::Backend> backend;
  core::DataSources data;
  core::DeepLabV3Plus model;
  std::unique_ptr<core::Optimizer> optimizer;
  core::EpochSampler sampler;
  core::BatchAssembler assembler;
  // With --stage-to. Shared with the dataset's file locator, through which the prefetcher's
  // workers read until they are joined: it outlives them whatever order the members go in.
  std::shared_ptr<NodeStaging> staging;
  std::unique_ptr<FaultDomains> domains;  // always present; enabled() with --domain
  // Reads data.train only (never state that recovery changes), so recovery leaves it alone: the
  // next step's announcement follows the restored sampler and the new world size.
  core::SamplePrefetcher prefetcher;
  // fp16: dynamic loss scaling; bf16 and f32: a static scale of 1 (still skips non-finite steps).
  core::LossScaler scaler;
  // The gradient allreduce: MPI buckets for host gradients, NCCL for device ones.
  std::unique_ptr<comm::GradientReducer> reducer;
  std::vector<float> class_weights;
  FailureInjector injector;

  core::EventLog events;
  core::JsonLines metrics, audit;
  bool lead_logs_open = false;  // this rank writes the run directory's files
  RunIdentity identity;         // filled by establish_run_identity(), before anything is saved
  StateStore store;
  // Null with --hang-timeout off. Before the watchdog, whose thread calls it, so it outlives it.
  std::unique_ptr<HangMonitor> hang_monitor;
  Watchdog watchdog;
  // Steps committed since this launch's loop began or the last recovery: the hang monitor acts
  // from the first on (the slowest, with oneDNN's primitives made again: what it learns first).
  long steps_since_restart = 0;

  long step = 0;  // steps committed
  // The log lines of the last committed step, kept by every rank for log_committed_step_if_missing.
  nlohmann::json committed_metrics_line, committed_audit_line;
  double last_loss = 0;
  double last_snapshot_s = 0;  // the training thread's stall for this step's node-local copy
  core::GlobalBatch current_batch;
  core::Tensor fields, labels, dlogits;
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
