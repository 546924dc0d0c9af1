#include "session/recovery.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>

#include "hardy/comm/agreement.hpp"
#include "hardy/comm/errors.hpp"
#include "hardy/comm/mpi/communicator.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_schema.hpp"
#include "hardy/core/support/process_info.hpp"
#include "hardy/resilience/events.hpp"
#include "hardy/resilience/recovery_protocol.hpp"
#include "hardy/resilience/training_session.hpp"

namespace hardy::resilience {

Recovery::Recovery(const TrainingConfig& config, Membership& membership, Trainer& trainer,
                   StateStore& store, RunFiles& files, SessionStaging& staging,
                   FailureInjector& injector, LoopProgress& progress,
                   const std::unique_ptr<HangMonitor>& hang_monitor)
    : config_(config),
      membership_(membership),
      trainer_(trainer),
      store_(store),
      files_(files),
      staging_(staging),
      injector_(injector),
      progress_(progress),
      hang_monitor_(hang_monitor) {}

int Recovery::recover(const std::string& what, const FailureClock& clock) {
  const bool was_writer = files_.shared_open();
  // A failure during any of this starts the attempt again on what is left.
  const int attempts =
      recover_until_agreed(membership_.communicator_slot(), [&](const Shrink& shrink) {
        if (shrink.attempt > 1 && membership_.lead())
          std::cerr << "hardy: another failure during recovery; restarting recovery\n";
        report_departure(shrink, what, clock);
        stop_if_past_limits();
        const comm::TransportRebuild rebuilt = trainer_.rebind(
            membership_.comm(), comm::ranks_lost(shrink.old_ranks, shrink.old_size));
        if (!rebuilt.path.empty())
          events().emit("device_communicator_rebuilt", {{"path", rebuilt.path},
                                                        {"seconds", rebuilt.seconds},
                                                        {"size", membership_.comm().size()}});
        // A death here, between the shrink and the restore, makes the survivors start over.
        injector_.at(trainer_.step() + 1, Phase::recovery);
        restore_after_failure(clock.detected_at);
      });
  if (membership_.lead() && !was_writer) files_.log_committed_step_if_missing(trainer_.step());
  return attempts;
}

Recovery::FailureClock Recovery::failure_clock() const {
  const double detected_at = core::unix_time();
  // The victim of an injected failure wrote down when it died; otherwise (a real failure, an
  // external kill -9) the last commit bounds the moment from below.
  const auto kill_time = injector_.last_kill_time();
  const bool injected = kill_time && *kill_time >= progress_.last_commit_unix - 1.0;
  return {.detected_at = detected_at,
          .latency_s = detected_at - (injected ? *kill_time : progress_.last_commit_unix),
          .injected = injected};
}

void Recovery::report_departure(const Shrink& shrink, const std::string& what,
                                const FailureClock& clock) {
  const Departure departed = membership_.survivors_are(shrink.old_ranks);
  ++progress_.failures;
  // The new rank 0 takes over the run directory's logs.
  if (files_.open_if_lead()) store_.open_checkpoint_writer();
  bool hung = false;
  if (membership_.lead())
    for (int world_rank : departed.world_ranks) hung = report_hang(world_rank) || hung;
  events().emit("failure_detected",
                {{"failed_ranks", departed.world_ranks},
                 {"failed_hosts", departed.hosts},
                 {"failed_nodes", departed.nodes},
                 {"detected_by",
                  hung ? event_value("failure_detected", "detected_by", "hang monitor")
                       : event_value("failure_detected", "detected_by", "process failure error")},
                 {"error", what},
                 {"step", trainer_.step() + 1},
                 {"detection_latency_s", clock.latency_s},
                 {"latency_from", clock.injected ? "injected kill time" : "last committed step"},
                 {"attempt", shrink.attempt}});
  events().emit("communicator_shrunk", {{"old_size", shrink.old_size},
                                        {"new_size", membership_.comm().size()},
                                        {"seconds", shrink.seconds}});
  if (membership_.lead())
    std::cerr << fmt::format("hardy: rank(s) {} failed at step {}; continuing with {} ranks\n",
                             fmt::join(departed.world_ranks, ","), trainer_.step() + 1,
                             membership_.comm().size());
}

void Recovery::stop_if_past_limits() {
  // Every survivor sees the same size and count, before any collective of this attempt.
  if (membership_.comm().size() < config_.min_world_size) {
    store_.write_final_checkpoint("too few ranks");
    throw SessionStop{
        kStopped,
        fmt::format("{} ranks left, fewer than --min-world-size {}; final checkpoint written",
                    membership_.comm().size(), config_.min_world_size)};
  }
  if (progress_.failures > config_.max_failures) {
    store_.write_final_checkpoint("too many failures");
    throw SessionStop{kStopped,
                      fmt::format("{} failures, more than --max-failures {}; final checkpoint "
                                  "written",
                                  progress_.failures, config_.max_failures)};
  }
}

void Recovery::restore_after_failure(double detected_at) {
  const auto started = Clock::now();
  // The same read as a resume's (state_store.hpp), memory first: every survivor's live state is
  // the committed step's unless --memory-snapshots false; else the lead validates and loads the
  // newest checkpoint once, and whatever stops it stops every survivor with its message.
  const auto restored = store_.restore_newest({.memory = true});
  if (!restored)
    throw comm::Agreed<Error>(
        "cannot recover: no rank holds the last committed step and there is no valid checkpoint");
  events().emit("state_restored", {{"source", restored->source},
                                   {"step", trainer_.step()},
                                   {"seconds", seconds_since(started)}});

  // The sampler is back at the restored step's cursor; re-splitting the next global batches over
  // the survivors keeps every sample of the epoch seen exactly once.
  const std::size_t global_batch =
      config_.global_batch_with(membership_.size(), membership_.original_size());
  std::vector<std::size_t> shares;
  for (int r = 0; r < membership_.comm().size(); ++r)
    shares.push_back(core::shard_of(global_batch, r, membership_.comm().size()).size());
  events().emit("shards_rebalanced", {{"policy", to_string(config_.rebalance)},
                                      {"world_size", membership_.comm().size()},
                                      {"global_batch", global_batch},
                                      {"per_rank_batch", shares},
                                      {"lr_scale", static_cast<double>(global_batch) /
                                                       static_cast<double>(config_.global_batch)}});
  staging_.restage(/*wait=*/false, "membership changed");
  events().emit("training_resumed", {{"step", trainer_.step()},
                                     {"seconds_since_detection", core::unix_time() - detected_at}});
}

bool Recovery::report_hang(int world_rank) {
  if (!hang_monitor_) return false;
  const auto decision = hang_monitor_->decision_for(world_rank);
  if (!decision) return false;
  events().emit("hang_detected", {{"rank", decision->world_rank},
                                  {"host", decision->host},
                                  {"pid", decision->pid},
                                  {"step", trainer_.step() + 1},
                                  {"doing", decision->doing},
                                  {"seconds_without_progress", decision->seconds_without_progress},
                                  {"timeout_s", decision->timeout_s},
                                  {"detected_by", decision->detected_by},
                                  {"reason", decision->reason},
                                  {"detected_unix_time", decision->unix_time}});
  if (membership_.lead())
    std::cerr << fmt::format("hardy: rank {} on {} hung ({}); {} ended it\n", world_rank,
                             decision->host, decision->reason, decision->detected_by);
  return true;
}

void Recovery::end_stuck_job(const Watchdog::Stuck& stuck) {
  // A peer that hangs is not dead, so the MPI reports nothing. Treat it as a failure of the job:
  // keep the committed state and let the supervisor relaunch on the healthy nodes.
  events().emit("failure_detected",
                {{"detected_by", event_value("failure_detected", "detected_by", "watchdog")},
                 {"stuck_in", stuck.in},
                 {"stuck_s", stuck.seconds},
                 {"step", stuck.committed.step + 1},
                 {"rank", stuck.committed.rank}});
  std::cerr << fmt::format(
      "hardy: rank {} stuck in {} for {:.0f} s; ending the job for a relaunch\n",
      membership_.world_rank(), stuck.in, stuck.seconds);
  store_.write_emergency_checkpoint();
  // Every process of the job ends, the stuck one too: under ULFM one rank's exit is a failure
  // that the others try to recover from, and their recovery waits on the hung rank for ever
  // (seen on 4 emulated nodes: the launcher never returned). Called from the watchdog's thread:
  // the training thread is parked in the collective that hung and makes no MPI call meanwhile.
  comm::abort_job(kWatchdog);
}

}  // namespace hardy::resilience
