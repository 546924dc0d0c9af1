// With --domain-sync-every above 1: at a step where the domains met, the state they share.
#include "session/hooks/step_hook.hpp"

namespace hardy::resilience {

namespace {

class SyncedCopy final : public StepHook {
 public:
  SyncedCopy(StateStore& store, const Trainer& trainer, const TrainingConfig& config)
      : StepHook("synchronised copy", std::nullopt),
        store_(store),
        trainer_(trainer),
        config_(config) {}

  void after_commit(const CommittedStep&) override {
    if (config_.domains_meet_at(trainer_.step())) store_.keep_synced();
  }

 private:
  StateStore& store_;
  const Trainer& trainer_;
  const TrainingConfig& config_;
};

}  // namespace

std::unique_ptr<StepHook> synced_copy_hook(StateStore& store, const Trainer& trainer,
                                           const TrainingConfig& config) {
  return std::make_unique<SyncedCopy>(store, trainer, config);
}

}  // namespace hardy::resilience
