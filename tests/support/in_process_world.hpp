#pragma once
// An in-process MPI world for unit tests: every rank is a thread, every communicator a shared
// object, and ranks die on demand at a chosen call, as gloo's tests do. It follows ULFM's rules
// (a failure or a revoke interrupts collectives; agree() and shrink() go on among the living)
// and, unlike a real MPI, it checks the protocol: two ranks that meet in the same collective or
// agreement slot with different operations (an allreduce against a broadcast, one rank's
// agreement against another's shrink) fail the test with both names, instead of hanging or
// silently mixing values. A wait that outlasts `deadlock_timeout` fails the test the same way.
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hardy/comm/communicator.hpp"

namespace hardy::testing {

// Thrown in the thread of a rank that dies: its body ends there, as the process would.
struct RankDied {
  int world_rank;
};

// A death planned in advance: `victim` (a world rank) dies at its `at_call`-th call (1-based,
// counting every collective, agreement and shrink it enters on any communicator, or only those
// whose description starts with `kind`: "allreduce f32" for float sums such as gradient
// buckets, "allreduce i64", "allgather", "broadcast", "barrier", "agree", "shrink"). With
// `after_contributing` its data reaches that operation first, as a process that dies just after
// sending; the ranks listed in `unaware` then finish that operation normally while the others
// see the failure, as happens in a real MPI when only some peers had to wait for the victim.
struct PlannedDeath {
  int victim = 0;
  long at_call = 1;
  std::string kind;
  bool after_contributing = false;
  std::vector<int> unaware;
};

class InProcessWorld {
 public:
  explicit InProcessWorld(int size, int ranks_per_node = 1, bool fault_tolerant = true);
  ~InProcessWorld();
  InProcessWorld(const InProcessWorld&) = delete;
  InProcessWorld& operator=(const InProcessWorld&) = delete;

  int size() const;
  void plan(PlannedDeath death);
  // After each broadcast, on every rank but the root: lets a test damage what a rank received.
  void on_broadcast_received(std::function<void(int world_rank, std::span<std::byte>)> hook);
  // Calls made so far by a rank (to plan a death at a later one).
  long calls(int world_rank) const;

  // Runs body(the world communicator of one rank) on one thread per rank. Returns what each rank
  // ended with: nullptr, a RankDied, or the exception that escaped its body. A rank whose body
  // ends counts as gone for the ranks still waiting on it, as an exited process would.
  std::vector<std::exception_ptr> run(
      const std::function<void(std::unique_ptr<comm::Communicator>)>& body);

  std::chrono::milliseconds deadlock_timeout{std::chrono::seconds(30)};

  struct Shared;

 private:
  std::shared_ptr<Shared> shared_;
};

// Whether a rank's outcome from run() is a planned death.
bool died(const std::exception_ptr& outcome);
// The message of a rank's exception (empty for nullptr, "died" for a death).
std::string describe(const std::exception_ptr& outcome);

}  // namespace hardy::testing
