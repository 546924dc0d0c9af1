#include "hardy/resilience/recovery_protocol.hpp"

#include <chrono>

#include "hardy/comm/errors.hpp"

namespace hardy::resilience {

namespace {

// Bits of the step's agreement, a bitwise AND over the survivors: set means "all of us".
constexpr int kFinished = 1;
constexpr int kNotPreempted = 2;
constexpr int kSnapshotWanted = 4;

}  // namespace

StepOutcome agree_on_step(comm::Communicator& comm, bool finished, bool preempt_requested,
                          bool snapshot_wanted) {
  const int flag = comm.agree((finished ? kFinished : 0) | (preempt_requested ? 0 : kNotPreempted) |
                              (snapshot_wanted ? kSnapshotWanted : 0));
  return {.committed = (flag & kFinished) != 0,
          .preempt = (flag & kNotPreempted) == 0,
          .snapshot_wanted = (flag & kSnapshotWanted) != 0};
}

int recover_until_agreed(std::unique_ptr<comm::Communicator>& comm,
                         const std::function<void(const Shrink&)>& attempt) {
  for (int number = 1;; ++number) {
    const auto started = std::chrono::steady_clock::now();
    comm->revoke();  // anyone still inside a collective on it leaves with a ProcessFailure
    const int old_size = comm->size();
    comm::Survivors survivors = comm->shrink();
    comm = std::move(survivors.comm);
    const std::chrono::duration<double> shrink_time = std::chrono::steady_clock::now() - started;
    bool finished = true;
    try {
      attempt(Shrink{std::move(survivors.old_ranks), old_size, number, shrink_time.count()});
    } catch (const comm::ProcessFailure&) {
      // Peers still inside one of the attempt's collectives may wait on this rank, not on the
      // dead one: the revoke lets them out, and the agreement below tells everyone.
      comm->revoke();
      finished = false;
    }
    if (comm->agree(finished ? 1 : 0) == 1) return number;
  }
}

}  // namespace hardy::resilience
