// The committed step's lines (metrics.jsonl, and samples.jsonl with --audit-samples), kept by
// every rank before anything copies the step: the synchronised copy, the node-local snapshot and
// a checkpoint each carry them (TrainingState::committed_lines), so that whoever restores the step
// logs it where its writer died before writing it. The metrics line kept here is provisional (the
// step's time so far, before its snapshot); the log hook (metrics_log.cpp) writes the final one.
#include <algorithm>

#include "session/hooks/step_hook.hpp"

namespace hardy::resilience {

namespace {

class StepLines final : public StepHook {
 public:
  explicit StepLines(const HookParts& parts)
      : StepHook("step lines", std::nullopt),
        config_(parts.config),
        trainer_(parts.trainer),
        files_(parts.files),
        domains_(parts.domains) {}

  void after_commit(const CommittedStep& done) override {
    if (config_.audit_samples) files_.keep_audit_line(trainer_.step(), trainer_.batch());
    files_.keep_metrics_line(metrics_line(done, std::max(1e-6, seconds_since(done.started)),
                                          trainer_, 0, 0, domains_.job_world_size()));
  }

 private:
  const TrainingConfig& config_;
  const Trainer& trainer_;
  RunFiles& files_;
  const FaultDomains& domains_;
};

}  // namespace

std::unique_ptr<StepHook> step_lines_hook(const HookParts& parts) {
  return std::make_unique<StepLines>(parts);
}

}  // namespace hardy::resilience
