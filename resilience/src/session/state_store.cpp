#include "session/state_store.hpp"

#include <fmt/format.h>

#include <iostream>
#include <utility>

#include "hardy/comm/agreement.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/private_tree.hpp"
#include "hardy/resilience/run_lock.hpp"

namespace hardy::resilience {

StateStore::StateStore(const TrainingConfig& config, const Membership& membership,
                       core::EventLog& events, Trainer& trainer, StateTransport& transport,
                       FailureInjector& injector, const RunIdentity& identity,
                       const RunFiles& files)
    : config_(config),
      membership_(membership),
      events_(events),
      trainer_(trainer),
      transport_(transport),
      injector_(injector),
      identity_(identity),
      files_(files) {}

void StateStore::capture_into(checkpoint::TrainingState& state) const {
  trainer_.capture_into(state);
  capture_job_into(state);
}

checkpoint::StateSources StateStore::committed_sources(checkpoint::TrainingState& scalars) const {
  trainer_.capture_scalars_into(scalars);
  capture_job_into(scalars);
  return trainer_.committed_sources();
}

void StateStore::capture_job_into(checkpoint::TrainingState& state) const {
  // A snapshot reuses its strings' and host list's memory; only the step's lines (below, a few
  // hundred bytes, more with a large batch's audit) are a new string each step.
  state.config_ini = config_.config_ini;
  state.world_size = membership_.size();
  state.hosts.resize(static_cast<std::size_t>(membership_.size()));
  for (int r = 0; r < membership_.size(); ++r)
    state.hosts[static_cast<std::size_t>(r)] = membership_.host_of(r);
  state.run_id = identity_.run_id;
  state.config_hash = identity_.config_hash;
  state.precision = core::to_string(config_.precision);
  // The lines of the step being captured (kept before any copy of it is taken: step_hooks.cpp):
  // a job that restores it logs them where their writer died first.
  state.committed_lines = files_.committed_lines(/*synced=*/false);
}

void StateStore::restore(checkpoint::TrainingState& state, int root) {
  transport_.restore(membership_.comm(), trainer_, state, root);
}

std::optional<checkpoint::ValidCheckpoint> StateStore::newest_checkpoint() {
  std::vector<std::string> skipped;
  auto found = checkpoint::load_latest_valid(config_.run_dir / "checkpoints", &skipped);
  for (const auto& reason : skipped) {
    std::cerr << "hardy: skipping checkpoint: " << reason << "\n";
    events_.emit("checkpoint_rejected", {{"reason", reason}});
  }
  if (found) check_fits_configuration(*found);
  return found;
}

void StateStore::check_fits_configuration(const checkpoint::ValidCheckpoint& found) {
  // A checkpoint may come from another run (a fork), but never from another configuration.
  const auto mismatch = config_mismatch(found.state, identity_);
  if (!mismatch) return;
  const auto refusal = fmt::format(
      "cannot resume from {}: {}; start a new run directory, or resume with the configuration it "
      "was written for",
      found.path.string(), *mismatch);
  events_.emit("checkpoint_rejected", {{"path", found.path.string()}, {"reason", refusal}});
  throw InvalidArgument(refusal);
}

std::optional<StateStore::Restored> StateStore::restore_newest(const RestoreFrom& from) {
  comm::Communicator& comm = membership_.comm();
  // Memory is the fast path: every survivor's live state is the committed step's, since a
  // step's update runs only after its agreement, so forgetting the step that failed is the whole
  // rollback. The step's agreement gives every survivor the same answer, so they stand at the
  // same step; the check guards that, and --memory-snapshots false asks for a file instead.
  if (from.memory &&
      comm::allreduce(comm, config_.memory_snapshots ? 1 : 0, comm::ReduceOp::min) == 1 &&
      comm::all_equal(comm, trainer_.step())) {
    trainer_.drop_uncommitted();
    return Restored{.source = "memory"};
  }
  checkpoint::ValidCheckpoint read;
  // Only the lead reads; whatever stops it stops every rank, with the same message.
  comm::agree_on_outcome(comm, membership_.lead(), [&] {
    std::optional<checkpoint::ValidCheckpoint> found;
    if (from.named_checkpoint) {
      try {
        found = checkpoint::ValidCheckpoint{config_.resume,
                                            checkpoint::read_checkpoint(config_.resume)};
      } catch (const Error& e) {  // the file the user named is not a usable checkpoint
        throw InvalidArgument(fmt::format("--resume {}: {}", config_.resume, e.what()));
      }
      check_fits_configuration(*found);
    } else {
      found = newest_checkpoint();
    }
    if (found) read = std::move(*found);
  });
  // A relaunch after the job died as a whole: the nodes' copies may be newer than any checkpoint.
  if (from.node_snapshots)
    if (auto restored = restore_newer_node_snapshot(!read.path.empty() ? read.state.step : -1))
      return restored;
  // Rank 0 tells the others whether there is anything to restore.
  if (comm::allreduce(comm, membership_.lead() && !read.path.empty() ? 1 : 0,
                      comm::ReduceOp::max) == 0)
    return std::nullopt;
  restore(read.state, 0);
  return Restored{
      .source = "checkpoint", .path = std::move(read.path), .saved = std::move(read.state)};
}

std::optional<StateStore::Persisted> StateStore::newest_persisted() {
  std::optional<Persisted> newest;
  if (auto found = newest_checkpoint()) newest = Persisted{std::move(*found), "checkpoint"};
  if (config_.snapshot_every == 0 || config_.sync_every() > 1) return newest;
  if (auto mine = node_snapshot_to_offer({});
      mine && (!newest || mine->state.step > newest->found.state.step))
    newest = Persisted{std::move(*mine), "node-local"};
  return newest;
}

std::optional<checkpoint::ValidCheckpoint> StateStore::node_snapshot_to_offer(
    const std::function<void(const checkpoint::ValidCheckpoint&)>& check) {
  // Whatever goes wrong here only means that this host has nothing to offer: the callers' ranks
  // must not be left waiting in what follows.
  try {
    auto mine = load_node_snapshot();
    if (mine && check) check(*mine);
    return mine;
  } catch (const std::exception& e) {
    std::cerr << "hardy: skipping node-local snapshots of " << membership_.host() << ": "
              << e.what() << "\n";
    events_.emit("snapshot_rejected", {{"host", membership_.host()}, {"reason", e.what()}});
    return std::nullopt;
  }
}

std::optional<StateStore::Restored> StateStore::restore_newer_node_snapshot(long checkpoint_step) {
  comm::Communicator& comm = membership_.comm();
  // It must fit this job's model and optimizer (checked before anything is copied); the
  // restore below overwrites all of it, whichever source wins.
  std::optional<checkpoint::ValidCheckpoint> mine = node_snapshot_to_offer(
      [this](const checkpoint::ValidCheckpoint& found) { trainer_.apply(found.state); });
  // Every rank's snapshot step (-1: none) and rank 0's checkpoint step.
  const auto steps = comm.allgather(mine ? mine->state.step : -1);
  const long checkpoint_at =
      comm::allreduce(comm, membership_.lead() ? checkpoint_step : -1, comm::ReduceOp::max);
  int root = -1;
  long newest = -1;
  for (std::size_t r = 0; r < steps.size(); ++r)  // strictly newer: the lowest rank wins a tie
    if (steps[r] > newest) {
      newest = steps[r];
      root = static_cast<int>(r);
    }
  if (root < 0 || newest <= checkpoint_at) return std::nullopt;
  Restored restored{.source = "node-local", .host = membership_.host_of(root)};
  std::string path;
  if (comm.rank() == root) {
    restored.saved = std::move(mine->state);
    path = mine->path.string();
  }
  restore(restored.saved, root);
  restored.path = comm::broadcast_text(comm, path, root);
  return restored;
}

void StateStore::keep_in_memory() {
  // Reuses the previous copy's buffers: a copy of the weights and optimizer state each step.
  if (!memory_) memory_.emplace();
  capture_into(*memory_);
}

void StateStore::refresh_memory() {
  // The committed state at one step is one state: a restore to another (a heal, a rewind)
  // captures it afresh.
  if (!memory_ || memory_->step != committed_step()) keep_in_memory();
}

void StateStore::keep_synced() {
  refresh_memory();
  if (config_.sync_every() <= 1) return;
  if (!synced_) synced_.emplace();
  *synced_ = *memory_;  // reuses the previous copy's buffers
}

const checkpoint::TrainingState& StateStore::shared() {
  if (config_.sync_every() <= 1) {
    refresh_memory();
    return *memory_;
  }
  if (!synced_) keep_synced();
  return *synced_;
}

const checkpoint::TrainingState* StateStore::synced() const {
  if (config_.sync_every() <= 1) return memory_ ? &*memory_ : nullptr;
  return synced_ ? &*synced_ : nullptr;
}

bool StateStore::committed_step_synced() const {
  return config_.sync_every() <= 1 || (synced_ && synced_->step == committed_step());
}

bool StateStore::persisted_into(checkpoint::TrainingState& into) const {
  if (config_.sync_every() > 1 && !synced_) return false;
  committed_into(into);
  return true;
}

const checkpoint::TrainingState* StateStore::committed_copy() const {
  if (config_.sync_every() > 1 && synced_) return &*synced_;
  if (memory_ && memory_->step == committed_step()) return &*memory_;
  return nullptr;
}

void StateStore::committed_into(checkpoint::TrainingState& into) const {
  if (const checkpoint::TrainingState* copy = committed_copy())
    into = *copy;
  else
    capture_into(into);  // --memory-snapshots false
}

void StateStore::open_checkpoint_writer() {
  if (writer_) return;
  checkpoint::CheckpointWriter::Options options;
  options.asynchronous = config_.checkpoint_async;
  options.skip_when_busy = config_.checkpoint_skip_when_busy;
  options.retention = {config_.keep_last, config_.keep_every};
  writer_.emplace(
      config_.run_dir / "checkpoints", options, [this](const checkpoint::WriteReport& report) {
        if (report.error.empty())
          events_.emit("checkpoint_written", {{"step", report.step},
                                              {"path", report.path.string()},
                                              {"bytes", report.bytes},
                                              {"stall_s", report.stall_s},
                                              {"write_s", report.write_s}});
        else if (report.skipped)
          events_.emit("checkpoint_skipped", {{"step", report.step}, {"reason", report.error}});
        else
          events_.emit("checkpoint_failed", {{"step", report.step}, {"error", report.error}});
      });
}

void StateStore::checkpoint_if_due(bool force_sync) {
  if (!membership_.writes_run_files()) return;
  const long step = committed_step();
  const bool by_steps = config_.checkpoint_every > 0 && step % config_.checkpoint_every == 0;
  const bool by_time = config_.checkpoint_every_seconds > 0 &&
                       seconds_since(last_checkpoint_) >= config_.checkpoint_every_seconds;
  if (!(by_steps || by_time || force_sync)) return;
  // By time between meetings of the domains: at the next meeting.
  if (!committed_step_synced()) return;
  last_checkpoint_step_ = step;
  const auto stall_start = std::chrono::steady_clock::now();
  // The writer hands back the buffers of the state it wrote last, so this copy allocates nothing.
  checkpoint::TrainingState state = writer_->take_spare();
  committed_into(state);
  const double stall_s = seconds_since(stall_start);
  last_checkpoint_ = std::chrono::steady_clock::now();
  auto kill_mid_write = [this, step](double) { injector_.at(step, Phase::checkpoint_write); };
  if (force_sync)
    writer_->write_now(std::move(state), stall_s, kill_mid_write);
  else
    writer_->submit(std::move(state), stall_s, kill_mid_write);
}

void StateStore::write_final_checkpoint(const std::string& reason) {
  // Agreed, so that no host removes its node-local snapshots (the job's end does, after this)
  // while the lead's checkpoint is not on disk: every rank fails instead, keeping them for the
  // next `--resume latest`.
  comm::agree_on_outcome(membership_.comm(), membership_.writes_run_files(), [&] {
    // The committed state, not whatever a half-done step left in the model.
    checkpoint::TrainingState state;
    if (!persisted_into(state)) {
      keep_synced();
      persisted_into(state);
    }
    const long at_step = state.step;
    writer_->flush();
    writer_->write_now(std::move(state), 0.0, nullptr);
    events_.emit("final_checkpoint", {{"step", at_step}, {"reason", reason}});
  });
}

void StateStore::write_emergency_checkpoint() noexcept {
  if (!membership_.writes_run_files() || !writer_) return;
  try {
    // The training thread is parked in a collective or a write: the live state is the committed
    // one (an update runs only after its step's agreement, and calls nothing that can hang).
    checkpoint::TrainingState state;
    if (!persisted_into(state)) return;
    writer_->flush();
    writer_->write_now(std::move(state), 0.0, nullptr);
  } catch (const std::exception& e) {
    std::cerr << "hardy: final checkpoint failed: " << e.what() << "\n";
  }
}

void StateStore::flush() {
  if (writer_) writer_->flush();
}

bool StateStore::writing_in_background() const {
  return (writer_ && writer_->busy()) || (node_snapshots_ && node_snapshots_->busy());
}

void StateStore::report_snapshot_failure(long at_step, const std::string& error) {
  // Once per rank: a full /dev/shm fails every later write the same way. Only rank 0's events
  // reach the run's log (the others' go nowhere), so every rank also says it on stderr.
  if (snapshot_failure_reported_.exchange(true)) return;
  events_.emit("snapshot_failed",
               {{"step", at_step}, {"host", membership_.host()}, {"error", error}});
  std::cerr << fmt::format(
      "hardy: node-local snapshot of step {} on {} failed, training goes on without it: {}\n",
      at_step, membership_.host(), error);
}

void StateStore::refuse_node_tree(const std::string& reason) {
  if (std::exchange(node_tree_refused_, true)) return;
  const auto dir = checkpoint::node_snapshot_directory(config_.snapshot_dir, config_.run_dir,
                                                       membership_.host());
  events_.emit("snapshot_tier_refused",
               {{"host", membership_.host()}, {"directory", dir.string()}, {"reason", reason}});
  std::cerr << fmt::format(
      "hardy: refusing the node-local snapshot tree {} on {}, training goes on without it "
      "(nothing is written, read or removed there): {}\n",
      dir.string(), membership_.host(), reason);
}

bool StateStore::node_tree_usable(bool create) {
  if (node_tree_refused_) return false;
  try {
    return checkpoint::check_node_snapshot_tree(config_.snapshot_dir, config_.run_dir,
                                                membership_.host(), create);
  } catch (const core::UnsafeDirectory& e) {
    refuse_node_tree(e.what());
    return false;
  }
}

bool StateStore::node_snapshot_wanted() const {
  if (config_.snapshot_every != kSnapshotEveryAuto || !last_snapshot_started_) return true;
  if (!membership_.first_on_host() || node_snapshots_unavailable_ || node_tree_refused_)
    return true;
  const double cost = last_snapshot_stall_s_ + last_snapshot_cpu_s_.load();
  return seconds_since(*last_snapshot_started_) >= kSnapshotAutoCostFactor * cost;
}

double StateStore::write_node_snapshot(bool agreed_wanted) {
  const long step = committed_step();
  if (config_.snapshot_every == 0) return 0;
  if (config_.snapshot_every == kSnapshotEveryAuto ? !agreed_wanted
                                                   : step % config_.snapshot_every != 0)
    return 0;
  if (!committed_step_synced()) return 0;
  if (!membership_.first_on_host() || node_snapshots_unavailable_ || node_tree_refused_) return 0;
  const auto stall_start = std::chrono::steady_clock::now();
  if (!node_snapshots_) {
    // A rank becomes its host's writer at the start or when a lower rank on the host died.
    try {
      // The CPU backend's kernels take every core the rank has (split_host_threads): a writer
      // thread beside them would only compete, so the copy runs in the step, as part of the
      // stall. With the kernels on a GPU the host has cores to spare for it.
      const bool background = config_.backend != "cpu";
      snapshots_in_background_ = background;
      node_snapshots_.emplace(
          config_.snapshot_dir, config_.run_dir, membership_.host(),
          [this, background](const checkpoint::WriteReport& report) {
            if (background) {  // otherwise the write is inside the stall already
              last_snapshot_cpu_s_ = report.cpu_s;
              double pending = snapshot_cpu_unreported_s_.load();
              while (!snapshot_cpu_unreported_s_.compare_exchange_weak(pending,
                                                                       pending + report.cpu_s)) {
              }
            }
            if (!report.error.empty()) report_snapshot_failure(report.step, report.error);
          },
          background ? checkpoint::NodeLocalSnapshots::Writing::background
                     : checkpoint::NodeLocalSnapshots::Writing::in_step);
      node_snapshots_->discard_newer_than(step);
      // Crashed runs' state that no job came back for within a day, and what runs that are
      // over left on a node their supervisor could not reach (stale_snapshots.hpp).
      for (const auto& stale : checkpoint::remove_stale_node_snapshots(
               config_.snapshot_dir, checkpoint::run_key(config_.run_dir),
               checkpoint::kStaleSnapshotGrace, &run_is_over))
        events_.emit("stale_snapshots_removed", {{"host", membership_.host()},
                                                 {"directory", stale.directory.string()},
                                                 {"idle_s", stale.idle_s},
                                                 {"bytes", stale.bytes},
                                                 {"run_over", stale.run_over}});
    } catch (const core::UnsafeDirectory& e) {
      refuse_node_tree(e.what());
      return 0;
    } catch (const Error& e) {
      node_snapshots_unavailable_ = true;
      report_snapshot_failure(step, e.what());
      return 0;
    }
  }
  const auto copy_start = std::chrono::steady_clock::now();  // the writer's set-up is once only
  if (!snapshots_in_background_) {
    // Straight into the slot, from where the committed state is: one copy.
    if (const checkpoint::TrainingState* copy = committed_copy())
      node_snapshots_->write_now(*copy);
    else
      node_snapshots_->write_now(committed_sources(snapshot_scalars_), snapshot_scalars_);
  } else {
    // Into the buffers of the snapshot written last (no allocation); the writer's thread copies
    // them into the slot while training goes on.
    checkpoint::TrainingState state = node_snapshots_->take_spare();
    committed_into(state);
    node_snapshots_->submit(std::move(state), seconds_since(stall_start));
  }
  last_snapshot_started_ = copy_start;
  last_snapshot_stall_s_ = seconds_since(copy_start);
  return seconds_since(stall_start);
}

double StateStore::take_snapshot_write_cpu_s() { return snapshot_cpu_unreported_s_.exchange(0.0); }

std::optional<checkpoint::ValidCheckpoint> StateStore::load_node_snapshot() {
  if (!membership_.first_on_host() || !node_tree_usable(false)) return std::nullopt;
  const std::string& host = membership_.host();
  const auto dir = checkpoint::node_snapshot_directory(config_.snapshot_dir, config_.run_dir, host);
  std::vector<std::string> skipped;
  // Another run's snapshot (a run directory made again at the same path) or one of another
  // configuration is passed over like a damaged one: never restored.
  auto found = checkpoint::load_newest_snapshot(dir, &skipped,
                                                [this](const checkpoint::TrainingState& state) {
                                                  return snapshot_mismatch(state, identity_);
                                                });
  for (const auto& reason : skipped) {
    std::cerr << "hardy: skipping node-local snapshot: " << reason << "\n";
    events_.emit("snapshot_rejected", {{"host", host}, {"reason", reason}});
  }
  return found;
}

void StateStore::remove_node_snapshots() {
  if (config_.snapshot_every == 0 || !membership_.first_on_host() || !node_tree_usable(false))
    return;
  try {
    if (node_snapshots_)
      node_snapshots_->remove();
    else  // a writer that took over and never wrote may still find its predecessor's files
      checkpoint::remove_node_snapshots(config_.snapshot_dir, config_.run_dir, membership_.host());
  } catch (const std::exception& e) {
    // The job's work is done; stale copies cost node memory, not correctness.
    std::cerr << "hardy: " << e.what() << "\n";
  }
}

}  // namespace hardy::resilience
