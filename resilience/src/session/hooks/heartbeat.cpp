// The committed step to the watchdog, whose thread (and the hang monitor on it) judges progress.
#include "session/hooks/step_hook.hpp"

namespace hardy::resilience {

void publish_progress(Watchdog& watchdog, const Membership& membership, long step,
                      long steps_since_restart) {
  std::vector<int> members;
  for (int r = 0; r < membership.size(); ++r) members.push_back(membership.world_rank_of(r));
  watchdog.publish({.step = step,
                    .rank = membership.rank(),
                    .members = std::move(members),
                    .training = steps_since_restart > 0});
}

namespace {

class ProgressHeartbeat final : public StepHook {
 public:
  ProgressHeartbeat(Watchdog& watchdog, const Membership& membership, const Trainer& trainer,
                    const LoopProgress& progress)
      : StepHook("progress heartbeat", std::nullopt),
        watchdog_(watchdog),
        membership_(membership),
        trainer_(trainer),
        progress_(progress) {}

  void after_commit(const CommittedStep&) override {
    publish_progress(watchdog_, membership_, trainer_.step(), progress_.steps_since_restart);
  }

 private:
  Watchdog& watchdog_;
  const Membership& membership_;
  const Trainer& trainer_;
  const LoopProgress& progress_;
};

}  // namespace

std::unique_ptr<StepHook> heartbeat_hook(Watchdog& watchdog, const Membership& membership,
                                         const Trainer& trainer, const LoopProgress& progress) {
  return std::make_unique<ProgressHeartbeat>(watchdog, membership, trainer, progress);
}

}  // namespace hardy::resilience
