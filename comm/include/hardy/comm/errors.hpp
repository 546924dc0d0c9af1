#pragma once
// comm's one exception of its own. Everything else comm throws is a hardy::Error (an MPI error
// that is not a process failure, a fault-tolerance call where none is available) or a
// hardy::InvalidArgument (a bad argument).
#include <string>
#include <vector>

#include "hardy/core/support/error.hpp"

namespace hardy::comm {

// A peer process died, or another survivor revoked the communicator because one did. The
// communicator is unusable for collectives until the survivors agree and shrink it; this is the
// one type that recovery code catches.
class ProcessFailure : public hardy::Error {
 public:
  // failed_ranks: ranks (in the communicator the operation ran on) known to have failed when
  // the error was raised; empty when unknown, e.g. for a revoke seen before the failure itself.
  explicit ProcessFailure(const std::string& what, std::vector<int> failed_ranks = {})
      : hardy::Error(what), failed_ranks_(std::move(failed_ranks)) {}
  const std::vector<int>& failed_ranks() const noexcept { return failed_ranks_; }

 private:
  std::vector<int> failed_ranks_;
};

}  // namespace hardy::comm
