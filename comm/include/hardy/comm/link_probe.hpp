#pragma once
// A short timed exchange between neighbouring nodes, to find a node whose network link is slow.
// Every rank of a collective waits for its slowest link, so a slow exchange alone names nobody;
// pairs of nodes exchanging at once do: the nodes form a ring, each node's lowest rank exchanges
// with its two neighbours in turn, in rounds of disjoint pairs that run side by side (two rounds
// for an even number of nodes, three for an odd one), and a node whose link is slow is in two
// slow pairs while each of its neighbours is in one. This measures; what to make of the times
// is the caller's (resilience/'s link watch).
#include <cstddef>
#include <span>
#include <vector>

#include "hardy/comm/communicator.hpp"

namespace hardy::comm {

struct LinkPair {
  int node_a = 0, node_b = 0;  // node indexes, neighbours on the ring (b = a + 1, or 0)
  double seconds = 0;          // the median of the pair's timed exchanges
};

struct LinkProbe {
  std::vector<int> lead_rank_of_node;  // each node's lowest rank, the one that exchanged
  std::vector<LinkPair> pairs;         // one per ring edge (none with fewer than 3 nodes)
  double seconds = 0;                  // the probe's own time, here
};

// Collective over `comm`: `node_of_rank[r]` is rank r's node, 0 .. nodes-1, every node at least
// one rank. Each pair allreduces `bytes` (at least 4) once untimed (a transport may connect
// lazily), then `repetitions` times timed. Every rank gets every pair's time. With fewer than
// three nodes there are no pairs: the two ends of one link cannot be told apart.
LinkProbe probe_links(Communicator& comm, std::span<const int> node_of_rank, std::size_t bytes,
                      int repetitions);

}  // namespace hardy::comm
