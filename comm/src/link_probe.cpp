#include "hardy/comm/link_probe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "hardy/core/support/error.hpp"

namespace hardy::comm {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// The ring's edges (edge i joins node i and node i + 1, the last one back to 0) by round: in each
// round no node is in two pairs. Even: the even edges, then the odd ones. Odd: the same up to the
// next-to-last edge, and the closing edge alone.
std::vector<std::vector<int>> rounds_of(int nodes) {
  std::vector<std::vector<int>> rounds(nodes % 2 == 0 ? 2 : 3);
  const int paired = nodes % 2 == 0 ? nodes : nodes - 1;
  for (int edge = 0; edge < paired; ++edge)
    rounds[static_cast<std::size_t>(edge % 2)].push_back(edge);
  if (nodes % 2 == 1) rounds[2].push_back(nodes - 1);
  return rounds;
}

}  // namespace

LinkProbe probe_links(Communicator& comm, std::span<const int> node_of_rank, std::size_t bytes,
                      int repetitions) {
  const auto started = Clock::now();
  if (node_of_rank.size() != static_cast<std::size_t>(comm.size()))
    throw InvalidArgument(
        fmt::format("probe_links: {} node indexes for {} ranks", node_of_rank.size(), comm.size()));
  if (repetitions < 1)
    throw InvalidArgument(fmt::format("probe_links: {} repetitions", repetitions));
  LinkProbe probe;
  const int nodes =
      node_of_rank.empty() ? 0 : *std::max_element(node_of_rank.begin(), node_of_rank.end()) + 1;
  probe.lead_rank_of_node.assign(static_cast<std::size_t>(nodes), -1);
  for (int r = 0; r < comm.size(); ++r) {
    const int node = node_of_rank[static_cast<std::size_t>(r)];
    if (node < 0) throw InvalidArgument(fmt::format("probe_links: rank {} on node {}", r, node));
    int& lead = probe.lead_rank_of_node[static_cast<std::size_t>(node)];
    if (lead < 0) lead = r;
  }
  for (int node = 0; node < nodes; ++node)
    if (probe.lead_rank_of_node[static_cast<std::size_t>(node)] < 0)
      throw InvalidArgument(fmt::format("probe_links: node {} has no rank", node));
  if (nodes < 3) return probe;

  const int me = comm.rank();
  const int my_node = node_of_rank[static_cast<std::size_t>(me)];
  const bool exchanges = probe.lead_rank_of_node[static_cast<std::size_t>(my_node)] == me;
  std::vector<float> buffer(std::max<std::size_t>(1, bytes / sizeof(float)), 0.0f);
  // Each edge's time, in its own slot: only the edge's first node writes it, so the sum below is
  // that node's figure, the same on every rank.
  std::vector<double> seconds(static_cast<std::size_t>(nodes), 0.0);
  for (const std::vector<int>& round : rounds_of(nodes)) {
    int color = -1, key = 0;
    if (exchanges)
      for (int edge : round)
        if (my_node == edge || my_node == (edge + 1) % nodes) {
          color = edge;
          key = my_node == edge ? 0 : 1;
        }
    const std::unique_ptr<Communicator> pair = comm.split(color, key);
    if (!pair) continue;
    pair->allreduce_sum(buffer);  // untimed: a transport may connect on first use
    std::vector<double> times;
    for (int k = 0; k < repetitions; ++k) {
      const auto t0 = Clock::now();
      pair->allreduce_sum(buffer);
      times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    if (key == 0) seconds[static_cast<std::size_t>(color)] = median(std::move(times));
  }
  comm.allreduce_sum(seconds);
  for (int edge = 0; edge < nodes; ++edge)
    probe.pairs.push_back({.node_a = edge,
                           .node_b = (edge + 1) % nodes,
                           .seconds = seconds[static_cast<std::size_t>(edge)]});
  probe.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return probe;
}

}  // namespace hardy::comm
