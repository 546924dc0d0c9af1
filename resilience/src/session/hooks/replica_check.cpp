// --verify-replicas-every: every rank's parameters hash alike, or the job ends (replicas_verified).
#include <fmt/format.h>

#include <algorithm>

#include "hardy/comm/agreement.hpp"
#include "hardy/core/support/digest.hpp"
#include "session/hooks/step_hook.hpp"

namespace hardy::resilience {

namespace {

class ReplicaCheck final : public StepHook {
 public:
  ReplicaCheck(const Trainer& trainer, const Membership& membership, core::EventLog& events,
               long every)
      : StepHook("replica verification", Activity::communicating),
        trainer_(trainer),
        membership_(membership),
        events_(events),
        every_(every) {}

  void after_commit(const CommittedStep&) override {
    const long at_step = trainer_.step();
    if (at_step % every_ != 0) return;
    const std::uint64_t digest =
        core::parameter_digest(trainer_.backend(), trainer_.model().parameters());
    const auto all = membership_.comm().allgather(static_cast<std::int64_t>(digest));
    const auto differ = std::count_if(all.begin(), all.end(), [&](std::int64_t d) {
      return static_cast<std::uint64_t>(d) != static_cast<std::uint64_t>(all.front());
    });
    if (differ != 0)
      throw comm::Agreed<Error>(fmt::format(
          "step {}: {} rank(s) hold parameters that differ from rank 0's", at_step, differ));
    events_.emit("replicas_verified",
                 {{"step", at_step}, {"digest", fmt::format("{:016x}", digest)}});
  }

 private:
  const Trainer& trainer_;
  const Membership& membership_;
  core::EventLog& events_;
  long every_;
};

}  // namespace

std::unique_ptr<StepHook> replica_check_hook(const Trainer& trainer, const Membership& membership,
                                             core::EventLog& events, long every) {
  return std::make_unique<ReplicaCheck>(trainer, membership, events, every);
}

}  // namespace hardy::resilience
