// Every --checkpoint-every steps or seconds, rank 0's checkpoint (state_store.hpp).
#include "session/hooks/step_hook.hpp"

namespace hardy::resilience {

namespace {

class Checkpoint final : public StepHook {
 public:
  explicit Checkpoint(StateStore& store)
      : StepHook("checkpoint", Activity::writing_state), store_(store) {}

  void after_commit(const CommittedStep&) override { store_.checkpoint_if_due(false); }

 private:
  StateStore& store_;
};

}  // namespace

std::unique_ptr<StepHook> checkpoint_hook(StateStore& store) {
  return std::make_unique<Checkpoint>(store);
}

}  // namespace hardy::resilience
