#pragma once
// --resume: where a launch goes on from. `latest` takes the newest valid state of the run (its
// newest checkpoint, or a node-local snapshot that is newer), or starts at step 0 when there is
// none; a named checkpoint is what the user asked for, and must be usable.
#include <optional>
#include <string>

#include "hardy/core/support/event_log.hpp"
#include "hardy/resilience/run_identity.hpp"
#include "hardy/resilience/training_config.hpp"
#include "session/membership.hpp"
#include "session/state_store.hpp"
#include "session/trainer.hpp"

namespace hardy::resilience {

// What a launch resumed from: "node-local" or "checkpoint", and the restored step's lines of
// the run's logs that came with the state (TrainingState::committed_lines; empty in older ones).
struct Resumed {
  std::string source;
  std::string committed_lines;
};

// Collective. Logs state_restored (or resume_skipped), and on the lead removes the run
// directory's checkpoints newer than the step resumed from (checkpoints_discarded). Nothing
// when nothing was restored.
std::optional<Resumed> resume_if_asked(const TrainingConfig& config, const Membership& membership,
                                       const Trainer& trainer, StateStore& store,
                                       core::EventLog& events, const RunIdentity& identity);

}  // namespace hardy::resilience
