#pragma once
// A Communicator over gloo's TCP transport, for processes that are not one MPI job: the leaders
// of hardy's fault domains, each the lowest rank of its own MPI job. A domain that dies takes its
// leader with it; the others' collectives then fail (at once when the peer's connection closes,
// after the group's timeout when it stops answering) instead of waiting for ever, and the group
// is dropped: gloo cannot shrink a context, so the survivors connect a new one (a new prefix in
// the store, chosen by the caller).
//
// Failures: every collective throws GroupFailure when a peer is gone or did not answer within
// the timeout. That is deliberately not a ProcessFailure: the MPI recovery inside a domain must
// never take a lost domain for one of its own ranks. The group is unusable afterwards.
// revoke(), agree() and shrink() are not available (fault_tolerant() is false).
#include <chrono>
#include <memory>
#include <string>

#include "hardy/comm/communicator.hpp"
#include "hardy/comm/rendezvous/store.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::comm {

class GroupFailure : public hardy::Error {
 public:
  using hardy::Error::Error;
};

struct GlooGroupOptions {
  std::string prefix;  // the group's name in the store; unique per connection attempt
  int rank = 0;
  int size = 1;
  // The address (or host name) this process listens on; peers connect to it. Empty: the host
  // name, as the resolver gives it.
  std::string address;
  // For every collective.
  std::chrono::milliseconds timeout{10'000};
  // For connecting: the members of a new group arrive as they finish what they were doing (a
  // relaunched domain's start-up, a checkpoint), which may take longer than a collective should.
  std::chrono::milliseconds connect_timeout{60'000};
};

// Collective over the `size` processes that name the same prefix: each publishes its address in
// the store and connects to every other. Throws GroupFailure when a peer does not show up within
// the timeout, hardy::InvalidArgument for a rank outside [0, size).
std::unique_ptr<Communicator> connect_gloo_group(RendezvousStore& store,
                                                 const GlooGroupOptions& options);

}  // namespace hardy::comm
