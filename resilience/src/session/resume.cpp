#include "session/resume.hpp"

#include <fmt/format.h>

#include <iostream>

#include "hardy/checkpoint/checkpoint.hpp"
#include "hardy/comm/agreement.hpp"
#include "hardy/core/support/error.hpp"
#include "session/loop_state.hpp"

namespace hardy::resilience {

namespace {

// The state_restored event (`host` only for a node-local snapshot; `foreign` and the saved run id
// when the state is another run's) and, on the lead, the console line.
void report_resumed(const StateStore::Restored& restored, long step, const Membership& membership,
                    core::EventLog& events, const RunIdentity& identity, core::Precision precision,
                    Clock::time_point started) {
  const int saved_world_size = restored.saved.world_size;
  const bool foreign = is_foreign(restored.saved, identity);
  nlohmann::json fields = {{"source", restored.source},
                           {"path", restored.path.string()},
                           {"step", step},
                           {"saved_world_size", saved_world_size},
                           {"world_size", membership.size()},
                           {"foreign", foreign},
                           {"seconds", seconds_since(started)}};
  if (!restored.host.empty()) fields["host"] = restored.host;
  // Another run's state (a fork) or one written before run ids: say whose it was.
  if (foreign) fields["saved_run_id"] = restored.saved.run_id;
  // A state saved in another precision restores as it is (its tensors are f32 master copies);
  // from here on the activations are this job's precision.
  const std::string_view now = core::to_string(precision);
  const std::string& saved_precision = restored.saved.precision;
  const bool precision_changed = !saved_precision.empty() && saved_precision != now;
  fields["precision"] = now;
  if (!saved_precision.empty()) fields["saved_precision"] = saved_precision;
  events.emit("state_restored", fields);
  if (membership.lead())
    std::cout << fmt::format(
                     "hardy: resumed from {} at step {} (saved by {} ranks, now {}){}\n",
                     restored.host.empty() ? restored.path.string()
                                           : fmt::format("the node-local snapshot {} of {}",
                                                         restored.path.string(), restored.host),
                     step, saved_world_size, membership.size(),
                     foreign ? fmt::format("; it is another run's ({})",
                                           restored.saved.run_id.empty() ? "no run id"
                                                                         : restored.saved.run_id)
                             : "")
              << (precision_changed
                      ? fmt::format("hardy: the state was saved in {}; training goes on in {}\n",
                                    saved_precision, now)
                      : "");
}

}  // namespace

std::optional<Resumed> resume_if_asked(const TrainingConfig& config, const Membership& membership,
                                       const Trainer& trainer, StateStore& store,
                                       core::EventLog& events, const RunIdentity& identity) {
  if (config.resume.empty()) return std::nullopt;
  const auto started = Clock::now();
  const bool latest = config.resume == "latest";
  // A relaunch after the job died as a whole: the nodes' copies may be newer than any
  // checkpoint. Only with `latest`: a checkpoint the user names is what they asked for.
  const auto restored = store.restore_newest(
      {.node_snapshots = latest && config.snapshot_every != 0, .named_checkpoint = !latest});
  if (!restored) {
    if (!latest)  // every rank learned there was nothing from the same reduction
      throw comm::Agreed<InvalidArgument>(fmt::format("cannot resume from {}", config.resume));
    events.emit("resume_skipped",
                {{"reason", "no valid checkpoint in the run directory; starting at step 0"}});
    return std::nullopt;
  }
  report_resumed(*restored, trainer.step(), membership, events, identity, config.precision,
                 started);
  Resumed resumed{.source = restored->source, .committed_lines = restored->saved.committed_lines};
  if (restored->source != "checkpoint" || !membership.lead()) return resumed;
  // Training goes on from this step: later checkpoints in the run directory are another timeline,
  // which retention would otherwise keep in place of this one's.
  if (const auto discarded = checkpoint::discard_checkpoints_newer_than(
          config.run_dir / "checkpoints", trainer.step());
      !discarded.empty()) {
    std::vector<std::string> names;
    for (const auto& path : discarded) names.push_back(path.filename().string());
    events.emit("checkpoints_discarded", {{"newer_than_step", trainer.step()}, {"files", names}});
  }
  return resumed;
}

}  // namespace hardy::resilience
