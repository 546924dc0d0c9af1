#pragma once
// Failures that every rank learns of together. A step that only some ranks run (the lead's
// start-up I/O, reading a checkpoint the user named, the final checkpoint) can fail on those
// ranks alone while the others go on into the next collective and wait there until wall time.
// agree_on_outcome() follows such a step with a reduction, so that every rank throws the same
// error. Its type says so (AgreedFailure): the CLI lets such an error end each process normally,
// since no peer is left waiting, while any other fatal error ends the whole job at once
// (abort_job in mpi/communicator.hpp).
#include <functional>

#include "hardy/comm/communicator.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::comm {

// Carried by every exception that all ranks of the communicator throw alike (test with
// dynamic_cast: it is a mix-in, not a base of the hierarchy in error.hpp).
class AgreedFailure {
 public:
  virtual ~AgreedFailure() = default;
};

// E (InvalidArgument, Error, ...) that every rank throws.
template <class E>
class Agreed final : public E, public AgreedFailure {
 public:
  using E::E;
};

// Runs `step` where `runs_here` is true, then agrees on its outcome (collective): when it threw
// on some rank, every rank throws the message of the lowest such rank, as
// Agreed<InvalidArgument> when that was bad input (exit status 2 everywhere) and as
// Agreed<Error> for anything else (std::bad_alloc and std::filesystem::filesystem_error
// included). Exceptions that are not std::exception pass through unagreed.
void agree_on_outcome(Communicator& comm, bool runs_here, const std::function<void()>& step);

}  // namespace hardy::comm
