// SIGUSR1 seen by any rank (the step's agreement says so): a final checkpoint, then stop.
#include "hardy/resilience/training_session.hpp"
#include "session/hooks/step_hook.hpp"

namespace hardy::resilience {

namespace {

class Preemption final : public StepHook {
 public:
  Preemption(StateStore& store, core::EventLog& events, const Trainer& trainer)
      : StepHook("preemption", std::nullopt), store_(store), events_(events), trainer_(trainer) {}

  void after_commit(const CommittedStep& done) override {
    if (!done.outcome.preempt) return;
    events_.emit("preemption_requested", {{"step", trainer_.step()}});
    store_.write_final_checkpoint("preempted by SIGUSR1 (scheduler time limit)");
    throw SessionStop{kPreempted, "preempted: checkpoint written; resume with --resume latest"};
  }

 private:
  StateStore& store_;
  core::EventLog& events_;
  const Trainer& trainer_;
};

}  // namespace

std::unique_ptr<StepHook> preemption_hook(StateStore& store, core::EventLog& events,
                                          const Trainer& trainer) {
  return std::make_unique<Preemption>(store, events, trainer);
}

}  // namespace hardy::resilience
