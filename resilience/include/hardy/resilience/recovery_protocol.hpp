#pragma once
// The two agreements that keep the survivors of a failure in step with one another, whatever
// each of them saw of it. A peer's death reaches ranks at different moments: one fails inside
// the gradient allreduce while another, whose part of it had already arrived, goes on to the
// step's agreement. Every rank must then take part in the same agreements in the same order,
// because an agreement matches whatever agreement the other ranks are in (an MPI's shrink runs
// one of its own inside): a rank that shrinks while another agrees mixes the two.
//
// So each step ends in exactly one agreement, agree_on_step(), which a rank whose step failed
// joins too (after revoking the communicator, so that nobody stays stuck in a collective), and
// recovery is a loop of attempts, each closed by one agreement on whether every survivor
// finished it. Inside an attempt there are collectives but no agreements.
#include <functional>
#include <memory>
#include <vector>

#include "hardy/comm/communicator.hpp"

namespace hardy::resilience {

struct StepOutcome {
  bool committed;  // every survivor finished the step: it counts, everywhere
  bool preempt;    // some survivor was asked to stop (SIGUSR1)
  // Every survivor wants a node-local snapshot of the step (--snapshot-every auto): hosts decide
  // from their own write costs, and write only when all of them want to, so that they keep the
  // same steps.
  bool snapshot_wanted = true;
};

// The step's agreement. `finished`: this rank's step completed; a rank whose step failed under
// it calls this with false after comm.revoke(). Returns the same outcome at every survivor.
StepOutcome agree_on_step(comm::Communicator& comm, bool finished, bool preempt_requested,
                          bool snapshot_wanted = true);

// What one recovery attempt starts from: the communicator was shrunk from `old_size` ranks to
// the survivors, old_ranks[new rank] being each survivor's rank before.
struct Shrink {
  std::vector<int> old_ranks;
  int old_size = 0;
  int attempt = 1;
  double seconds = 0;  // the revoke and the shrink
};

// Revokes and shrinks `comm` (replacing it with the survivors) and runs attempt() until one
// attempt has finished on every survivor. A ProcessFailure inside an attempt (another rank died)
// revokes the new communicator and starts over on what is left. attempt() may throw anything
// else to end the recovery, but only for a reason every survivor sees alike before its first
// collective (the new size, the failure count): the others would wait in the agreement.
// Returns the number of attempts.
int recover_until_agreed(std::unique_ptr<comm::Communicator>& comm,
                         const std::function<void(const Shrink&)>& attempt);

}  // namespace hardy::resilience
