#pragma once
// The duties after every commit (the node-local snapshot, the heartbeat, the audit, the replica
// check, the metrics line, preemption, the checkpoint), each a class in a file of its own. A
// hook gets only the parts it uses, never the session; the session runs them in the order
// make_step_hooks gives, each inside a watchdog stretch of its own when `watched`.
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "domains/fault_domains.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/resilience/divergence_watch.hpp"
#include "hardy/resilience/failure_injection.hpp"
#include "hardy/resilience/training_config.hpp"
#include "session/hang_monitor.hpp"
#include "session/loop_state.hpp"
#include "session/membership.hpp"
#include "session/run_files.hpp"
#include "session/state_store.hpp"
#include "session/trainer.hpp"
#include "session/watchdog.hpp"

namespace hardy::resilience {

class StepHook {
 public:
  StepHook(const char* name, std::optional<Activity> watched) : name_(name), watched_(watched) {}
  virtual ~StepHook() = default;
  StepHook(const StepHook&) = delete;
  StepHook& operator=(const StepHook&) = delete;

  const char* name() const { return name_; }
  std::optional<Activity> watched() const { return watched_; }
  // Runs on every rank after `step` was committed (the trainer stands at it).
  virtual void after_commit(const CommittedStep& step) = 0;

 private:
  const char* name_;
  std::optional<Activity> watched_;
};

// What the hooks are made from; each takes the few it uses.
struct HookParts {
  const TrainingConfig& config;
  const Membership& membership;
  const Trainer& trainer;
  StateStore& store;
  RunFiles& files;
  FailureInjector& injector;
  Watchdog& watchdog;
  const FaultDomains& domains;
  LoopProgress& progress;
};

// The hooks the configuration asks for, in the order they run: the step's lines kept (before
// any copy of the step, which carries them), the synchronised copy, the node-local snapshot, the
// heartbeat, the replica check, the step's lines written (before a checkpoint, so that a
// committed step is logged even if rank 0 dies writing one), the divergence watch, preemption,
// the checkpoint.
std::vector<std::unique_ptr<StepHook>> make_step_hooks(const HookParts& parts);

std::unique_ptr<StepHook> synced_copy_hook(StateStore& store, const Trainer& trainer,
                                           const TrainingConfig& config);
std::unique_ptr<StepHook> node_snapshot_hook(StateStore& store, FailureInjector& injector,
                                             const Trainer& trainer, LoopProgress& progress);
std::unique_ptr<StepHook> heartbeat_hook(Watchdog& watchdog, const Membership& membership,
                                         const Trainer& trainer, const LoopProgress& progress);
std::unique_ptr<StepHook> step_lines_hook(const HookParts& parts);
std::unique_ptr<StepHook> replica_check_hook(const Trainer& trainer, const Membership& membership,
                                             core::EventLog& events, long every);
std::unique_ptr<StepHook> metrics_hook(const HookParts& parts);
std::unique_ptr<StepHook> divergence_hook(const Trainer& trainer, const Membership& membership,
                                          core::EventLog& events,
                                          const DivergenceThresholds& thresholds);
std::unique_ptr<StepHook> preemption_hook(StateStore& store, core::EventLog& events,
                                          const Trainer& trainer);
std::unique_ptr<StepHook> checkpoint_hook(StateStore& store);

// What the watchdog (and the hang monitor on its thread) knows of the session: the committed
// step, this rank, the members, and whether training has committed a step since its last start.
void publish_progress(Watchdog& watchdog, const Membership& membership, long step,
                      long steps_since_restart);

// The committed step's metrics line (the trainer stands at it), its time `step_s`.
nlohmann::json metrics_line(const CommittedStep& done, double step_s, const Trainer& trainer,
                            double snapshot_stall_s, double snapshot_write_cpu_s, int world_size);

}  // namespace hardy::resilience
