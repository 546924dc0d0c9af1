#pragma once
// The recovery protocol inside a job: revoke, shrink (which agrees on the survivors), learn who
// failed, roll back to the last committed step, re-split the batch, go on. A failure in the
// middle of any of this starts the protocol again on what is left. The decisions are
// recovery_protocol.hpp's; this class runs them over the session's parts.
#include <memory>
#include <string>

#include "hardy/core/support/event_log.hpp"
#include "hardy/resilience/failure_injection.hpp"
#include "hardy/resilience/recovery_protocol.hpp"
#include "hardy/resilience/training_config.hpp"
#include "session/hang_monitor.hpp"
#include "session/loop_state.hpp"
#include "session/membership.hpp"
#include "session/run_files.hpp"
#include "session/session_staging.hpp"
#include "session/state_store.hpp"
#include "session/trainer.hpp"
#include "session/watchdog.hpp"

namespace hardy::resilience {

class Recovery {
 public:
  // `hang_monitor` is the session's (null until it starts, or with --hang-timeout off).
  Recovery(const TrainingConfig& config, Membership& membership, Trainer& trainer,
           StateStore& store, RunFiles& files, SessionStaging& staging, FailureInjector& injector,
           LoopProgress& progress, const std::unique_ptr<HangMonitor>& hang_monitor);

  // How a failure was first seen: when, and how long after the failure itself.
  struct FailureClock {
    double detected_at;  // unix time
    double latency_s;
    bool injected;  // the victim of an injected failure wrote down when it died
  };
  // Read before the recovery's own time starts: it looks for an injected victim's record.
  FailureClock failure_clock() const;
  // After a ProcessFailure, or a step that some survivor did not finish (`what` says which),
  // first seen at `clock`: shrinks to the survivors (failure_detected, communicator_shrunk),
  // stops past the limits (SessionStop), restores the committed step (state_restored) and
  // re-splits the batch (shards_rebalanced, training_resumed). Returns the attempts it took.
  int recover(const std::string& what, const FailureClock& clock);
  // The watchdog's action: log, write what is committed, end the process for a relaunch.
  [[noreturn]] void end_stuck_job(const Watchdog::Stuck& stuck);

 private:
  // One attempt's shrink: who left (failure_detected, communicator_shrunk).
  void report_departure(const Shrink& shrink, const std::string& what, const FailureClock& clock);
  // --min-world-size and --max-failures: a final checkpoint and SessionStop when crossed.
  void stop_if_past_limits();
  void restore_after_failure(double detected_at);
  // The lead: hang_detected for a departed rank whose killer left a decision. Returns whether
  // one did.
  bool report_hang(int world_rank);
  core::EventLog& events() { return files_.events(); }

  const TrainingConfig& config_;
  Membership& membership_;
  Trainer& trainer_;
  StateStore& store_;
  RunFiles& files_;
  SessionStaging& staging_;
  FailureInjector& injector_;
  LoopProgress& progress_;
  const std::unique_ptr<HangMonitor>& hang_monitor_;
};

}  // namespace hardy::resilience
