// The node-local tier of the committed state (docs/resilience.md): each host's lowest rank keeps
// a checkpoint-format copy of the last committed step in node memory, and a relaunch of a job
// that died as a whole resumes from the newest such copy when it is newer than the newest
// checkpoint.
#include <fmt/format.h>

#include <iostream>

#include "hardy/core/support/error.hpp"
#include "session_state.hpp"

namespace hardy::resilience {

bool TrainingSession::State::writes_node_snapshots() const {
  const std::string& mine = hosts[static_cast<std::size_t>(world_rank)];
  for (int r = 0; r < comm->rank(); ++r)
    if (hosts[static_cast<std::size_t>(world_rank_of[static_cast<std::size_t>(r)])] == mine)
      return false;
  return true;
}

void TrainingSession::State::report_snapshot_failure(long at_step, const std::string& error) {
  // Once per rank: a full /dev/shm fails every later write the same way. Only rank 0's events
  // reach the run's log (the others' go nowhere), so every rank also says it on stderr.
  if (snapshot_failure_reported.exchange(true)) return;
  const std::string& host = hosts[static_cast<std::size_t>(world_rank)];
  events.emit("snapshot_failed", {{"step", at_step}, {"host", host}, {"error", error}});
  std::cerr << fmt::format(
      "hardy: node-local snapshot of step {} on {} failed, training goes on without it: {}\n",
      at_step, host, error);
}

void TrainingSession::State::write_node_snapshot() {
  last_snapshot_s = 0;
  if (config.snapshot_every <= 0 || step % config.snapshot_every != 0) return;
  if (!writes_node_snapshots() || node_snapshots_unavailable) return;
  const auto stall_start = Clock::now();
  if (!node_snapshots) {
    // A rank becomes its host's writer at the start or when a lower rank on the host died.
    try {
      node_snapshots.emplace(config.snapshot_dir, config.run_dir,
                             hosts[static_cast<std::size_t>(world_rank)],
                             [this](const checkpoint::WriteReport& report) {
                               if (!report.error.empty())
                                 report_snapshot_failure(report.step, report.error);
                             });
      node_snapshots->discard_newer_than(step);
    } catch (const Error& e) {
      node_snapshots_unavailable = true;
      report_snapshot_failure(step, e.what());
      return;
    }
  }
  // Into the buffers of the snapshot written last: a copy from memory, no allocation.
  checkpoint::TrainingState state = node_snapshots->take_spare();
  if (snapshot && snapshot->step == step)
    state = *snapshot;
  else
    state = capture_state();  // --memory-snapshots false
  const double copy_s = seconds_since(stall_start);
  node_snapshots->submit(std::move(state), copy_s);  // waits while the previous one is written
  last_snapshot_s = seconds_since(stall_start);
}

bool TrainingSession::State::resume_from_node_snapshot(long checkpoint_step,
                                                       Clock::time_point started) {
  std::optional<checkpoint::ValidCheckpoint> mine;
  if (writes_node_snapshots()) {
    const std::string& host = hosts[static_cast<std::size_t>(world_rank)];
    const auto dir = checkpoint::node_snapshot_directory(config.snapshot_dir, config.run_dir, host);
    // Whatever goes wrong here must not leave the other ranks waiting below: it only means that
    // this host has nothing to offer.
    try {
      std::vector<std::string> skipped;
      mine = checkpoint::load_latest_valid(dir, &skipped);
      for (const auto& reason : skipped) {
        std::cerr << "hardy: skipping node-local snapshot: " << reason << "\n";
        events.emit("snapshot_rejected", {{"host", host}, {"reason", reason}});
      }
      // It must fit this job's model and optimizer (checked before anything is copied); the
      // restore below overwrites all of it, whichever source wins.
      if (mine) checkpoint::apply(mine->state, model, *optimizer);
    } catch (const std::exception& e) {
      std::cerr << "hardy: skipping node-local snapshots in " << dir.string() << ": " << e.what()
                << "\n";
      events.emit("snapshot_rejected", {{"host", host}, {"reason", e.what()}});
      mine.reset();
    }
  }
  // Every rank's snapshot step (-1: none) and rank 0's checkpoint step.
  const auto steps = comm->allgather(mine ? mine->state.step : -1);
  const long checkpoint_at =
      comm::allreduce(*comm, lead() ? checkpoint_step : -1, comm::ReduceOp::max);
  int root = -1;
  long newest = -1;
  for (std::size_t r = 0; r < steps.size(); ++r)  // strictly newer: the lowest rank wins a tie
    if (steps[r] > newest) {
      newest = steps[r];
      root = static_cast<int>(r);
    }
  // At equal steps the checkpoint wins: it is on shared storage and was validated by rank 0.
  if (root < 0 || newest <= checkpoint_at) return false;

  checkpoint::TrainingState state;
  if (comm->rank() == root) state = std::move(mine->state);
  broadcast_restored(state, root);
  const std::string& host =
      hosts[static_cast<std::size_t>(world_rank_of[static_cast<std::size_t>(root)])];
  const auto path = checkpoint::checkpoint_path(
      checkpoint::node_snapshot_directory(config.snapshot_dir, config.run_dir, host), newest);
  report_resumed("node-local", path, host, state.world_size, started);
  return true;
}

void TrainingSession::State::remove_node_snapshots() {
  if (config.snapshot_every <= 0 || !writes_node_snapshots()) return;
  try {
    if (node_snapshots)
      node_snapshots->remove();
    else  // a writer that took over and never wrote may still find its predecessor's files
      checkpoint::remove_node_snapshots(config.snapshot_dir, config.run_dir,
                                        hosts[static_cast<std::size_t>(world_rank)]);
  } catch (const std::exception& e) {
    // The job's work is done; stale copies cost node memory, not correctness.
    std::cerr << "hardy: " << e.what() << "\n";
  }
}

}  // namespace hardy::resilience
