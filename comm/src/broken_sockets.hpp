#pragma once
// Transports that talk to peers over sockets (MPI's TCP transport, gloo) write to a peer that
// may have died since: the kernel answers such a write with SIGPIPE, whose default action ends
// the writer without a word, so one lost rank took a second, healthy one with it. Ignored, the
// write fails with EPIPE and the transport reports the peer as failed.

namespace hardy::comm {

// Ignores SIGPIPE for the whole process, once; `transport` names who asks, for the error when
// the disposition cannot be changed.
void survive_broken_sockets(const char* transport);

}  // namespace hardy::comm
