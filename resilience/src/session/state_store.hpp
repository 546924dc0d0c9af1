#pragma once
// Where a session keeps its committed state, in three tiers (docs/resilience.md): a copy in
// memory on every rank (what a shrink restores from), a node-local copy on each host's first rank
// (what a relaunch of a job that died as a whole resumes from, when newer than a checkpoint) and
// the checkpoints rank 0 writes into the run directory. The store decides when and into which
// buffers the trainer's committed state is captured, and it alone reads it back: one path finds
// the newest valid state for a resume and for a recovery alike (restore_newest).
#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "hardy/checkpoint/checkpoint.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/core/support/process_info.hpp"
#include "hardy/resilience/failure_injection.hpp"
#include "hardy/resilience/run_identity.hpp"
#include "hardy/resilience/training_config.hpp"
#include "session/membership.hpp"
#include "session/run_files.hpp"
#include "session/state_transport.hpp"
#include "session/trainer.hpp"

namespace hardy::resilience {

using core::seconds_since;

class StateStore {
 public:
  // `identity` is the run's (filled in before the first snapshot is written or read). The
  // trainer's committed state is what the store keeps; `transport` carries a state read on one
  // rank to every rank. Every state it saves carries the committed step's lines of the run's
  // logs as `files` keeps them (TrainingState::committed_lines).
  StateStore(const TrainingConfig& config, const Membership& membership, core::EventLog& events,
             Trainer& trainer, StateTransport& transport, FailureInjector& injector,
             const RunIdentity& identity, const RunFiles& files);

  // ---- reading back: a resume, a recovery (collective) ----
  // Where to look, newest first wins: the copy in memory (when every rank holds the same
  // committed step), each host's newest node-local snapshot, and the checkpoint the lead reads
  // (the one --resume names with `named_checkpoint`, else the run directory's newest valid one).
  // A checkpoint wins a tie with a snapshot: it is on shared storage and was validated.
  struct RestoreFrom {
    bool memory = false;
    bool node_snapshots = false;
    bool named_checkpoint = false;
  };
  struct Restored {
    std::string source = {};          // "memory", "node-local" or "checkpoint"
    std::filesystem::path path = {};  // the file read, whatever its name says (none from memory)
    std::string host = {};            // the node-local snapshot's host
    checkpoint::TrainingState saved = {};  // who saved it (step, world size, run id): the scalars
  };
  // The newest state found, applied on every rank; nothing when there is none. Whatever stops
  // the lead's read (a damaged file the user named, a checkpoint of another configuration: both
  // InvalidArgument) stops every rank with its message.
  std::optional<Restored> restore_newest(const RestoreFrom& from);
  // The lead: the run directory's newest checkpoint that validates (the rejected ones logged),
  // if any. One of another configuration is refused (checkpoint_rejected, InvalidArgument).
  std::optional<checkpoint::ValidCheckpoint> newest_checkpoint();
  // The lead of a relaunched fault domain, when no live domain holds the committed state: the
  // newer of the run directory's newest checkpoint and this host's newest node-local snapshot of
  // this run (with snapshots on, and domains meeting every step: between meetings a domain's
  // snapshot holds steps no other domain agreed to), a checkpoint winning a tie. `source`:
  // "checkpoint" or "node-local".
  struct Persisted {
    checkpoint::ValidCheckpoint found;
    std::string source;
  };
  std::optional<Persisted> newest_persisted();
  // Root's `state` to every rank, applied everywhere; `state` may keep only the loop's scalars
  // afterwards (collective).
  void restore(checkpoint::TrainingState& state, int root);

  // ---- in memory, every rank ----
  // Captures the committed step now. Nothing needs a copy every step: the live state changes
  // only when a committed step's update is applied, so a step that fails is rolled back by
  // forgetting it (Trainer::drop_uncommitted). A copy is taken where something must be handed
  // on: to a joining domain, a checkpoint, a node-local snapshot.
  void keep_in_memory();
  // The state the fault domains share: the committed step (captured when the copy in memory is
  // older), or with --domain-sync-every the one of the domains' last meeting.
  const checkpoint::TrainingState& shared();

  // ---- fault domains that meet every N-th step (--domain-sync-every, domain_plan.hpp) ----
  // At a step where the domains met (or healed): keeps the committed step as the last state that
  // every domain shares. The survivors of a lost domain rewind to it, a joiner heals from it, and
  // while the domains train alone in between it is the only state that node-local snapshots and
  // checkpoints hold: nothing persists that one domain did alone. With N = 1 this is the
  // in-memory copy itself, and keep_synced() only makes sure there is one.
  void keep_synced();
  const checkpoint::TrainingState* synced() const;

  // ---- checkpoints, rank 0 ----
  // Starts the writer; when this rank becomes rank 0.
  void open_checkpoint_writer();
  // Every --checkpoint-every steps or seconds, or now with force_sync (written before it
  // returns).
  void checkpoint_if_due(bool force_sync);
  long last_checkpoint_step() const { return last_checkpoint_step_; }
  // The committed state written now by rank 0, e.g. before the job stops. Collective: when the
  // write fails every rank throws comm::Agreed<Error>.
  void write_final_checkpoint(const std::string& reason);
  // The watchdog's last act: the last committed step, best effort. Must run while the training
  // thread is parked (Watchdog's guarantee).
  void write_emergency_checkpoint() noexcept;
  void flush();
  // Whether this rank's checkpoint or node-local snapshot is being written on a thread beside
  // training right now (its CPU comes out of the training's, where the cores are all in use).
  bool writing_in_background() const;

  // ---- node-local, each host's first rank ----
  // The tier lives in a private tree (core/support/private_tree.hpp): one that fails its checks
  // is refused (snapshot_tier_refused, once) and neither written nor read nor cleaned.
  // With --snapshot-every auto, whether this rank wants the step about to commit snapshotted:
  // the host's writer when kSnapshotAutoCostFactor times the last snapshot's cost has gone by
  // since it started; every other rank always (the step's agreement takes the AND).
  bool node_snapshot_wanted() const;
  // Every --snapshot-every committed steps, or under auto when the step's agreement said every
  // rank wanted one (`agreed_wanted`); returns the training thread's stall. Never throws for a
  // write that fails (snapshot_failed).
  double write_node_snapshot(bool agreed_wanted);
  // The CPU time the background writer spent on snapshots that finished since the last call:
  // with the stall, what snapshots took from training (on a node whose cores all train, all of
  // it shows in the step time).
  double take_snapshot_write_cpu_s();
  // At the end of a job that completed, stopped or was preempted.
  void remove_node_snapshots();

 private:
  // The trainer's committed state into `state`, reusing its buffers, with who ran it (the
  // configuration, world, hosts and run identity).
  void capture_into(checkpoint::TrainingState& state) const;
  // The same without copying the tensors: where they live, and everything else into `scalars`.
  checkpoint::StateSources committed_sources(checkpoint::TrainingState& scalars) const;
  void capture_job_into(checkpoint::TrainingState& state) const;
  long committed_step() const { return trainer_.step(); }
  // This host's newest valid snapshot of this run and configuration (snapshot_rejected says
  // why any other was passed over); nothing when there is none or this rank does not keep the
  // host's snapshots.
  std::optional<checkpoint::ValidCheckpoint> load_node_snapshot();
  // The same after `check` (which may throw), a failure of either reported (snapshot_rejected)
  // as nothing to offer.
  std::optional<checkpoint::ValidCheckpoint> node_snapshot_to_offer(
      const std::function<void(const checkpoint::ValidCheckpoint&)>& check);
  // With node-local snapshots: every rank's newest that is newer than the lead's checkpoint at
  // `checkpoint_step` (-1: none), restored everywhere (collective).
  std::optional<Restored> restore_newer_node_snapshot(long checkpoint_step);
  // A checkpoint of another configuration is refused (checkpoint_rejected, InvalidArgument).
  void check_fits_configuration(const checkpoint::ValidCheckpoint& found);
  // The committed state, from memory when that copy is current, else captured into `into`; the
  // synchronised state when the domains train alone between meetings.
  void committed_into(checkpoint::TrainingState& into) const;
  // The copy committed_into would copy from (the synchronised state, or the copy in memory when
  // it is current); nullptr when the committed state is only in the model.
  const checkpoint::TrainingState* committed_copy() const;
  // Whether the committed step is one every domain shares (always without --domain-sync-every).
  bool committed_step_synced() const;
  // Captures the committed step unless the copy in memory holds it already.
  void refresh_memory();
  // What a final or emergency checkpoint holds: the committed state, or the synchronised one;
  // false when there is none yet (domains that have not met).
  bool persisted_into(checkpoint::TrainingState& into) const;
  void report_snapshot_failure(long at_step, const std::string& error);
  // Checks this host's snapshot tree (creating it when `create`); false when it does not exist.
  // A tree that fails the checks turns the tier off and is reported (snapshot_tier_refused).
  bool node_tree_usable(bool create);
  void refuse_node_tree(const std::string& reason);

  const TrainingConfig& config_;
  const Membership& membership_;
  core::EventLog& events_;
  Trainer& trainer_;
  StateTransport& transport_;
  FailureInjector& injector_;
  const RunIdentity& identity_;
  const RunFiles& files_;

  std::optional<checkpoint::TrainingState> memory_;
  std::optional<checkpoint::TrainingState> synced_;  // only with --domain-sync-every above 1
  std::optional<checkpoint::CheckpointWriter> writer_;
  long last_checkpoint_step_ = -1;
  std::chrono::steady_clock::time_point last_checkpoint_ = std::chrono::steady_clock::now();
  std::optional<checkpoint::NodeLocalSnapshots> node_snapshots_;
  bool snapshots_in_background_ = false;
  checkpoint::TrainingState snapshot_scalars_;  // reused: written in the step, from the model
  bool node_snapshots_unavailable_ = false;     // the directory could not be created: tier off
  bool node_tree_refused_ = false;              // the tree failed its checks: never touched again
  std::atomic<bool> snapshot_failure_reported_{false};  // the writer's thread reports too
  // What the last snapshot cost, for --snapshot-every auto: when it started, the training
  // thread's stall, and the background write's CPU time (reported from the writer's thread).
  std::optional<std::chrono::steady_clock::time_point> last_snapshot_started_;
  double last_snapshot_stall_s_ = 0;
  std::atomic<double> last_snapshot_cpu_s_{0};
  std::atomic<double> snapshot_cpu_unreported_s_{0};  // take_snapshot_write_cpu_s()
};

}  // namespace hardy::resilience
