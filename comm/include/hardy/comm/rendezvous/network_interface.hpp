#pragma once
// Which network the fault domains' leaders (and their rendezvous store) use. On a cluster the
// host name usually resolves to the management Ethernet, not the high-speed network: a peer
// system's heal took 948 s over Ethernet where the InfiniBand address took 20 s. The user names
// the network as NCCL_SOCKET_IFNAME does (`--domain-interface hsn0`), or by a subnet of it.
#include <string>

namespace hardy::comm {

// This host's IPv4 address on `spec`: an interface's name ("hsn0", "ib0", "lo"), or a subnet in
// CIDR form ("10.100.0.0/16", "198.18.3.0/24"), which names the interface holding an address in
// it (the way to name one network on nodes whose interfaces are named differently). Throws
// InvalidArgument naming the spec and this host's interfaces when none matches, or when the spec
// is neither a name nor a valid CIDR subnet.
std::string interface_address(const std::string& spec);

}  // namespace hardy::comm
