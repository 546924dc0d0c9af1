#include "session/membership.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <thread>

#include "hardy/comm/mpi/communicator.hpp"
#include "hardy/core/data/staging.hpp"
#include "hardy/core/support/process_info.hpp"
#include "hardy/resilience/training_config.hpp"

namespace hardy::resilience {

Departure apply_shrink(std::vector<int>& members, std::span<const int> survivors,
                       std::span<const std::string> hosts_by_world_rank, int ranks_per_node) {
  std::vector<bool> stayed(members.size(), false);
  std::vector<int> next;
  next.reserve(survivors.size());
  for (int old_rank : survivors) {
    stayed[static_cast<std::size_t>(old_rank)] = true;
    next.push_back(members[static_cast<std::size_t>(old_rank)]);
  }
  Departure departure;
  std::set<int> nodes;
  for (std::size_t old_rank = 0; old_rank < members.size(); ++old_rank) {
    if (stayed[old_rank]) continue;
    const int world_rank = members[old_rank];
    departure.world_ranks.push_back(world_rank);
    departure.hosts.push_back(hosts_by_world_rank[static_cast<std::size_t>(world_rank)]);
    nodes.insert(world_rank / std::max(1, ranks_per_node));
  }
  departure.nodes.assign(nodes.begin(), nodes.end());
  members = std::move(next);
  return departure;
}

Membership::Membership(std::unique_ptr<comm::Communicator> world, int ranks_per_node)
    : comm_(std::move(world)),
      ranks_per_node_(ranks_per_node),
      world_rank_(comm_->rank()),
      hosts_(comm_->hostnames()) {
  world_rank_of_.resize(hosts_.size());
  for (std::size_t r = 0; r < world_rank_of_.size(); ++r) world_rank_of_[r] = static_cast<int>(r);
}

std::string Membership::node_name_of(int rank) const {
  const int world_rank = world_rank_of_[static_cast<std::size_t>(rank)];
  const auto& host = hosts_[static_cast<std::size_t>(world_rank)];
  const int node = world_rank / ranks_per_node_;
  // Count the distinct nodes of the original world on this host before this one.
  int place = 0, previous = -1;
  for (int r = 0; r < node * ranks_per_node_; ++r)
    if (hosts_[static_cast<std::size_t>(r)] == host && r / ranks_per_node_ != previous) {
      previous = r / ranks_per_node_;
      ++place;
    }
  return core::staging_node_name(host, place);
}

const std::string& Membership::host_of(int rank) const {
  return hosts_[static_cast<std::size_t>(world_rank_of_[static_cast<std::size_t>(rank)])];
}

bool Membership::first_on_host() const {
  for (int r = 0; r < rank(); ++r)
    if (host_of(r) == host()) return false;
  return true;
}

void Membership::announce(core::EventLog& events) {
  const auto pids = comm_->allgather(::getpid());
  // In microseconds: the gather carries integers.
  const auto started = comm::startup_times();
  const auto process_started_us =
      comm_->allgather(static_cast<std::int64_t>(started.process_started * 1e6));
  const auto mpi_ready_us = comm_->allgather(static_cast<std::int64_t>(started.mpi_ready * 1e6));
  for (int r = 0; r < size(); ++r) {
    const auto at = static_cast<std::size_t>(r);
    nlohmann::json fields = {{"rank", r}, {"pid", pids[at]}, {"host", host_of(r)}};
    if (process_started_us[at] > 0)
      fields["process_started_unix_time"] = static_cast<double>(process_started_us[at]) / 1e6;
    if (mpi_ready_us[at] > 0)
      fields["mpi_ready_unix_time"] = static_cast<double>(mpi_ready_us[at]) / 1e6;
    events.emit("rank_started", std::move(fields));
  }
}

Departure Membership::survivors_are(std::span<const int> old_ranks) {
  return apply_shrink(world_rank_of_, old_ranks, hosts_, ranks_per_node_);
}

int Membership::cores_of_rank() const {
  const core::AllowedCpus allowed = core::allowed_cpus();
  const auto fingerprints = comm().allgather(static_cast<std::int64_t>(allowed.fingerprint));
  const auto me = static_cast<std::size_t>(world_rank_);
  int on_host = 0, sharing = 0;
  for (std::size_t r = 0; r < hosts_.size(); ++r) {
    if (hosts_[r] != hosts_[me]) continue;
    ++on_host;
    if (fingerprints[r] == fingerprints[me]) ++sharing;
  }
  const int online = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_share_ = allowed.count < online ? static_cast<double>(allowed.count) / std::max(1, sharing)
                                      : static_cast<double>(online) / std::max(1, on_host);
  return rank_cores(online, allowed.count, sharing, on_host);
}

}  // namespace hardy::resilience
