// The recovery protocol: revoke, shrink (which agrees on the survivors), learn who failed, roll
// back to the last committed step, re-split the batch, go on. A failure in the middle of any of
// this starts the protocol again on what is left.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>

#include "hardy/comm/agreement.hpp"
#include "hardy/comm/errors.hpp"
#include "hardy/comm/mpi_communicator.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_schema.hpp"
#include "hardy/resilience/recovery_protocol.hpp"
#include "session/session_state.hpp"

namespace hardy::resilience {

void TrainingSession::State::recover(const std::string& what) {
  comm::note_peer_failure();  // mpi_check did already; an NCCL failure reaches here too
  steps_since_restart = 0;    // the hang monitor waits for the first step after it
  publish_to_watchdog();
  Watchdog::Scope scope(watchdog, "recovery", Activity::recovering);
  const FailureClock clock = failure_clock();
  const auto started = Clock::now();
  const bool was_lead = lead_logs_open;
  // A failure during any of this starts the attempt again on what is left.
  const int attempts =
      recover_until_agreed(membership.communicator_slot(), [&](const Shrink& shrink) {
        if (shrink.attempt > 1 && lead())
          std::cerr << "hardy: another failure during recovery; restarting recovery\n";
        report_departure(shrink, what, clock);
        stop_if_past_limits();
        const comm::TransportRebuild rebuilt =
            trainer.rebind(comm(), comm::ranks_lost(shrink.old_ranks, shrink.old_size));
        if (!rebuilt.path.empty())
          events.emit(
              "device_communicator_rebuilt",
              {{"path", rebuilt.path}, {"seconds", rebuilt.seconds}, {"size", comm().size()}});
        // A death here, between the shrink and the restore, makes the survivors start over.
        injector.at(step() + 1, Phase::recovery);
        restore_after_failure(clock.detected_at);
      });
  if (lead() && !was_lead) log_committed_step_if_missing();
  if (domains->enabled()) settle_step_across_domains(what);
  step_clock = Clock::now();
  publish_to_watchdog();
  events.emit("recovery_finished",
              {{"step", step()}, {"seconds", seconds_since(started)}, {"attempts", attempts}});
}

FailureClock TrainingSession::State::failure_clock() const {
  const double detected_at = core::unix_time();
  // The victim of an injected failure wrote down when it died; otherwise (a real failure, an
  // external kill -9) the last commit bounds the moment from below.
  const auto kill_time = injector.last_kill_time();
  const bool injected = kill_time && *kill_time >= last_commit_unix - 1.0;
  return {.detected_at = detected_at,
          .latency_s = detected_at - (injected ? *kill_time : last_commit_unix),
          .injected = injected};
}

void TrainingSession::State::report_departure(const Shrink& shrink, const std::string& what,
                                              const FailureClock& clock) {
  const Departure departed = membership.survivors_are(shrink.old_ranks);
  ++failures;
  if (lead()) open_lead_logs();  // the new rank 0 takes over the run directory's logs
  bool hung = false;
  if (lead())
    for (int world_rank : departed.world_ranks) hung = report_hang(world_rank) || hung;
  events.emit(
      "failure_detected",
      {{"failed_ranks", departed.world_ranks},
       {"failed_hosts", departed.hosts},
       {"failed_nodes", departed.nodes},
       {"detected_by",
        hung ? core::event_value("failure_detected", "detected_by", "hang monitor")
             : core::event_value("failure_detected", "detected_by", "process failure error")},
       {"error", what},
       {"step", step() + 1},
       {"detection_latency_s", clock.latency_s},
       {"latency_from", clock.injected ? "injected kill time" : "last committed step"},
       {"attempt", shrink.attempt}});
  events.emit(
      "communicator_shrunk",
      {{"old_size", shrink.old_size}, {"new_size", comm().size()}, {"seconds", shrink.seconds}});
  if (lead())
    std::cerr << fmt::format("hardy: rank(s) {} failed at step {}; continuing with {} ranks\n",
                             fmt::join(departed.world_ranks, ","), step() + 1, comm().size());
}

void TrainingSession::State::stop_if_past_limits() {
  // Every survivor sees the same size and count, before any collective of this attempt.
  if (comm().size() < config.min_world_size) {
    store.write_final_checkpoint("too few ranks");
    throw SessionStop{
        kStopped,
        fmt::format("{} ranks left, fewer than --min-world-size {}; final checkpoint written",
                    comm().size(), config.min_world_size)};
  }
  if (failures > config.max_failures) {
    store.write_final_checkpoint("too many failures");
    throw SessionStop{kStopped,
                      fmt::format("{} failures, more than --max-failures {}; final checkpoint "
                                  "written",
                                  failures, config.max_failures)};
  }
}

void TrainingSession::State::settle_step_across_domains(const std::string& what) {
  // The leader alone talks to the other domains; a domain that lost it cannot rejoin them and
  // ends (every survivor sees the same membership, so all of them stop here together).
  if (membership.world_rank_of(0) != 0)
    throw comm::Agreed<Error>(fmt::format(
        "domain {} lost its leader ({}); the domain ends and is relaunched", config.domain, what));
  const auto started = Clock::now();
  const DomainStep across = domains->after_local_recovery(
      step() + 1, domains_meet_at(step() + 1), trainer.exchanged_tensors(config.sync_every() > 1),
      domain_state_access());
  if (across.verdict == StepVerdict::rewind) rewind_to_synced(step() + 1);
  follow_domain_ownership();
  if (across.verdict != StepVerdict::commit) return;
  trainer.take_exchanged();
  // The other domains committed the step in flight: apply the same sums (the gradients, and the
  // averaged state when the domains train alone between meetings) and commit it here too.
  const auto shape = data.train->shape();
  const std::size_t global_batch = current_global_batch();
  // The loss is a mean over the global batch's pixels (segmentation) or targets (regression).
  const float grad_scale = 1.0f / static_cast<float>(global_batch * shape.label_elements());
  trainer.draw_batch(global_batch);
  CommittedStep done{
      .started = started, .lr = current_lr(step()), .skipped_samples = std::lround(across.skipped)};
  done.update = [this, lr = done.lr, loss = across.loss * grad_scale] {
    trainer.apply_update(lr);
    trainer.set_last_loss(loss);
  };
  events.emit("step_rolled_forward", {{"step", step() + 1}, {"reason", what}});
  commit_step(std::move(done));
}

void TrainingSession::State::restore_after_failure(double detected_at) {
  const auto started = Clock::now();
  // Memory is the fast path: every survivor's live state is the committed step's, since a
  // step's update runs only after its agreement, so forgetting the step that failed is the whole
  // rollback. The agreement gives every survivor the same answer, so they stand at the same step;
  // the check guards that, and --memory-snapshots false asks for the checkpoint instead.
  const bool everyone_has_it =
      comm::allreduce(comm(), config.memory_snapshots ? 1 : 0, comm::ReduceOp::min) == 1 &&
      comm::all_equal(comm(), step());
  std::string source;
  if (everyone_has_it) {
    trainer.drop_uncommitted();
    source = "memory";
  } else {
    checkpoint::TrainingState state;
    std::filesystem::path path;
    // The same read as a resume's: the lead validates and loads the newest checkpoint once, and
    // whatever stops it (an I/O error) stops every survivor with its message, none left waiting.
    comm::agree_on_outcome(comm(), lead(), [&] {
      if (auto found = newest_valid_checkpoint()) {
        path = std::move(found->path);
        state = std::move(found->state);
      }
    });
    if (comm::allreduce(comm(), lead() && !path.empty() ? 1 : 0, comm::ReduceOp::max) == 0)
      throw comm::Agreed<Error>(
          "cannot recover: no rank holds the last committed step and there is no valid checkpoint");
    restore_from(state);
    source = "checkpoint";
  }
  events.emit("state_restored",
              {{"source", source}, {"step", step()}, {"seconds", seconds_since(started)}});

  // The sampler is back at the restored step's cursor; re-splitting the next global batches over
  // the survivors keeps every sample of the epoch seen exactly once.
  const std::size_t global_batch = current_global_batch();
  std::vector<std::size_t> shares;
  for (int r = 0; r < comm().size(); ++r)
    shares.push_back(core::shard_of(global_batch, r, comm().size()).size());
  events.emit("shards_rebalanced", {{"policy", to_string(config.rebalance)},
                                    {"world_size", comm().size()},
                                    {"global_batch", global_batch},
                                    {"per_rank_batch", shares},
                                    {"lr_scale", static_cast<double>(global_batch) /
                                                     static_cast<double>(config.global_batch)}});
  restage(/*wait=*/false, "membership changed");
  events.emit("training_resumed",
              {{"step", step()}, {"seconds_since_detection", core::unix_time() - detected_at}});
}

void TrainingSession::State::log_committed_step_if_missing() {
  // Rank 0 logs a step after the step's agreement (and its in-memory and node-local copies).
  // Dying in between, it leaves a step that every survivor committed, and restored from memory,
  // but that neither metrics.jsonl nor the audit shows. Its successor holds the same lines.
  const auto missing = [&](const nlohmann::json& line, const core::JsonLines& log) {
    return log.enabled() && line.is_object() && line.value("step", -1L) == step() &&
           core::read_field<long>(core::last_json_record(log.path()).value_or(nullptr), "step")
                   .value_or(-1) < step();
  };
  if (missing(committed_audit_line, audit)) audit.write(committed_audit_line);
  if (missing(committed_metrics_line, metrics)) metrics.write(committed_metrics_line);
}

bool TrainingSession::State::report_hang(int world_rank) {
  if (!hang_monitor) return false;
  const auto decision = hang_monitor->decision_for(world_rank);
  if (!decision) return false;
  events.emit("hang_detected", {{"rank", decision->world_rank},
                                {"host", decision->host},
                                {"pid", decision->pid},
                                {"step", step() + 1},
                                {"doing", decision->doing},
                                {"seconds_without_progress", decision->seconds_without_progress},
                                {"timeout_s", decision->timeout_s},
                                {"detected_by", decision->detected_by},
                                {"reason", decision->reason},
                                {"detected_unix_time", decision->unix_time}});
  if (lead())
    std::cerr << fmt::format("hardy: rank {} on {} hung ({}); {} ended it\n", world_rank,
                             decision->host, decision->reason, decision->detected_by);
  return true;
}

void TrainingSession::State::end_stuck_job(const Watchdog::Stuck& stuck) {
  // A peer that hangs is not dead, so the MPI reports nothing. Treat it as a failure of the job:
  // keep the committed state and let the supervisor relaunch on the healthy nodes.
  events.emit("failure_detected",
              {{"detected_by", core::event_value("failure_detected", "detected_by", "watchdog")},
               {"stuck_in", stuck.in},
               {"stuck_s", stuck.seconds},
               {"step", stuck.committed.step + 1},
               {"rank", stuck.committed.rank}});
  std::cerr << fmt::format(
      "hardy: rank {} stuck in {} for {:.0f} s; ending the job for a relaunch\n",
      membership.world_rank(), stuck.in, stuck.seconds);
  store.write_emergency_checkpoint();
  // Every process of the job ends, the stuck one too: under ULFM one rank's exit is a failure
  // that the others try to recover from, and their recovery waits on the hung rank for ever
  // (seen on 4 emulated nodes: the launcher never returned). Called from the watchdog's thread:
  // the training thread is parked in the collective that hung and makes no MPI call meanwhile.
  comm::abort_job(kWatchdog);
}

}  // namespace hardy::resilience
