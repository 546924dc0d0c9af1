// The node-local copy of the committed step (--snapshot-every): the host's first rank writes it.
#include "session/hooks/step_hook.hpp"

namespace hardy::resilience {

namespace {

class NodeSnapshot final : public StepHook {
 public:
  NodeSnapshot(StateStore& store, FailureInjector& injector, const Trainer& trainer,
               LoopProgress& progress)
      : StepHook("node snapshot write", Activity::writing_state),
        store_(store),
        injector_(injector),
        trainer_(trainer),
        progress_(progress) {}

  void after_commit(const CommittedStep& done) override {
    injector_.at(trainer_.step(), Phase::snapshot_write);
    progress_.last_snapshot_s = store_.write_node_snapshot(done.outcome.snapshot_wanted);
  }

 private:
  StateStore& store_;
  FailureInjector& injector_;
  const Trainer& trainer_;
  LoopProgress& progress_;
};

}  // namespace

std::unique_ptr<StepHook> node_snapshot_hook(StateStore& store, FailureInjector& injector,
                                             const Trainer& trainer, LoopProgress& progress) {
  return std::make_unique<NodeSnapshot>(store, injector, trainer, progress);
}

}  // namespace hardy::resilience
