#pragma once
// The collectives a data-parallel trainer needs, and the fault-tolerance mechanisms (revoke,
// agree, shrink) that let the survivors of a process failure continue. What to do after a
// failure is decided in resilience/, not here.
//
// Every collective must be called by every rank of the communicator in the same order. Any of
// them may throw ProcessFailure when a peer has died or the communicator has been revoked;
// other failures are hardy::Error.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace hardy::comm {

// A non-blocking operation in flight. Its buffers must stay alive and untouched until it has
// completed (wait() returned or test() returned true).
class Request {
 public:
  virtual ~Request() = default;
  // Blocks until the operation completes. Throws ProcessFailure if a peer failed; the request
  // is complete afterwards either way.
  virtual void wait() = 0;
  // Drives progress and returns whether the operation has completed; throws like wait().
  virtual bool test() = 0;
  virtual bool done() const = 0;
};

enum class ReduceOp { sum, min, max };

class Communicator;

// What shrink() returns: the survivors' communicator and, for each of its ranks, that rank in
// the communicator it was shrunk from. Every survivor gets the same list without communicating.
struct Survivors {
  std::unique_ptr<Communicator> comm;
  std::vector<int> old_ranks;  // old_ranks[new rank] = old rank, ascending
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // ---- collectives ----
  // In-place element-wise sum over all ranks.
  virtual void allreduce_sum(std::span<float> data) = 0;
  virtual void allreduce_sum(std::span<double> data) = 0;
  // In-place element-wise reduction of 64-bit integers (counts, steps, flags, digests).
  virtual void allreduce(std::span<std::int64_t> data, ReduceOp op) = 0;
  // Every rank's value, indexed by rank.
  virtual std::vector<std::int64_t> allgather(std::int64_t value) = 0;
  // Non-blocking in-place sum; data must stay valid until the request completes.
  virtual std::unique_ptr<Request> iallreduce_sum(std::span<float> data) = 0;
  // The same sum at root only; the others' data is left as it was. By default an allreduce,
  // which serves any caller of a reduce.
  virtual std::unique_ptr<Request> ireduce_sum(std::span<float> data, int root);
  // Copies root's bytes into every other rank's buffer of the same size.
  virtual void broadcast(std::span<std::byte> data, int root) = 0;
  // The same without blocking; data must stay valid until the request completes. Every rank must
  // call this one (MPI never matches a blocking collective with a non-blocking one). A
  // communicator whose collectives block broadcasts at once and returns a completed request.
  virtual std::unique_ptr<Request> ibroadcast(std::span<std::byte> data, int root);
  // Every rank's block (`mine`, the same size at every rank) into `all`, in rank order (size()
  // blocks), without blocking; both must stay valid until the request completes. By default one
  // broadcast per rank, completed on return.
  virtual std::unique_ptr<Request> iallgather_blocks(std::span<const std::byte> mine,
                                                     std::span<std::byte> all);
  virtual void barrier() = 0;
  // A new communicator of the ranks that pass the same `color` (>= 0), ranked by `key`, then by
  // their rank here; nullptr where `color` is negative (this rank joins none). Collective: every
  // rank calls it, and a failure shows as in any collective. For short-lived groups of a few
  // ranks (comm/link_probe.hpp's pairs of nodes).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Every rank's host name, indexed by rank (for failure reports and node-aware placement).
  virtual std::vector<std::string> hostnames() = 0;

  // ---- fault tolerance ----
  // True when failures are survivable at run time: built with ULFM and launched with it
  // enabled (Open MPI: `mpirun --with-ft ulfm`). When false, a dead peer usually kills the job.
  virtual bool fault_tolerant() const = 0;
  // Interrupts every pending and future operation on this communicator, at every rank (they
  // raise ProcessFailure), except agree() and shrink(). Throws hardy::Error unless
  // fault_tolerant().
  virtual void revoke() = 0;
  // Bitwise AND of flag over the ranks that are alive, the same result at each of them; works
  // on a revoked communicator and does not throw for the failures it agrees about. Without
  // fault tolerance it is a plain allreduce (every rank must be alive).
  virtual int agree(int flag) = 0;
  // Ranks that this process knows to have failed, ascending (empty without fault tolerance).
  virtual std::vector<int> failed_ranks() = 0;
  // A new communicator of the survivors, ranks renumbered in their old order. Collective over
  // the survivors; works on a revoked communicator. Throws hardy::Error unless fault_tolerant().
  // An MPI may run agreements of its own inside: never let one rank shrink while another agrees.
  virtual Survivors shrink() = 0;
};

// A request that is complete from the start: what a communicator whose collectives block returns
// from its non-blocking calls.
std::unique_ptr<Request> completed_request();

// Waits for a request without keeping a core busy: tests it, sleeping `pause` between tests.
// For ranks that wait while another process works, on a node with fewer cores than processes:
// MPI's own wait spins, and takes from that process the core it needs (a fault domain's members
// spinning while their leader's exchange with the other domains waited on the gloo threads made
// that exchange take twice as long on 4 emulated 2-rank domains on 2 cores). On a node where
// every rank has its cores, the price is at most one pause after completion.
void wait_yielding(Request& request,
                   std::chrono::microseconds pause = std::chrono::microseconds(100));

// One value reduced over every rank.
std::int64_t allreduce(Communicator& comm, std::int64_t value, ReduceOp op);
// Whether value is the same at every rank (one reduction of its minimum and maximum).
bool all_equal(Communicator& comm, std::int64_t value);
// Root's `text` at every rank (the others' `text` is ignored): its length, then its bytes.
std::string broadcast_text(Communicator& comm, const std::string& text, int root);
// The ranks of a communicator of old_size that are not among a shrink's survivors (old_ranks).
std::vector<int> ranks_lost(const std::vector<int>& old_ranks, int old_size);

}  // namespace hardy::comm
