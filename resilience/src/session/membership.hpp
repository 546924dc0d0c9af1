#pragma once
// Who is in the job: the communicator of the current survivors, and for each of them the rank it
// had in the job's original world, its host and its process id. A shrink renumbers the ranks;
// the original world ranks (and nodes, ranks_per_node of them each) are what events and the
// supervisor speak of, because they do not change.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hardy/comm/communicator.hpp"
#include "hardy/core/support/event_log.hpp"

namespace hardy::resilience {

// The ranks a shrink left out, in the original world's terms.
struct Departure {
  std::vector<int> world_ranks;
  std::vector<std::string> hosts;  // of each departed rank, in the same order
  std::vector<int> nodes;          // sorted, each once
};

// After a shrink from `members.size()` ranks: `members[old rank]` is each rank's original world
// rank, `survivors[new rank]` each survivor's old rank (comm::Survivors::old_ranks). Returns who
// left, and replaces `members` with the survivors' original world ranks in their new order.
Departure apply_shrink(std::vector<int>& members, std::span<const int> survivors,
                       std::span<const std::string> hosts_by_world_rank, int ranks_per_node);

class Membership {
 public:
  // Collective over `world` (learns every rank's host).
  Membership(std::unique_ptr<comm::Communicator> world, int ranks_per_node);

  comm::Communicator& comm() const { return *comm_; }
  // For recover_until_agreed(), which replaces the communicator with the survivors'.
  std::unique_ptr<comm::Communicator>& communicator_slot() { return comm_; }
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  bool lead() const { return comm_->rank() == 0; }
  // The rank that writes the run directory's shared files (metrics, checkpoints, model): rank 0,
  // and in a job of several fault domains only the lowest live domain's.
  bool writes_run_files() const { return lead() && owns_run_files_; }
  void set_owns_run_files(bool owns) { owns_run_files_ = owns; }
  int world_rank() const { return world_rank_; }
  // The original world rank of the rank that is `rank` now.
  int world_rank_of(int rank) const { return world_rank_of_.at(static_cast<std::size_t>(rank)); }
  int original_size() const { return static_cast<int>(hosts_.size()); }
  const std::string& host() const { return hosts_[static_cast<std::size_t>(world_rank_)]; }
  // The host of the rank that is `rank` now.
  const std::string& host_of(int rank) const;
  // The node (in --ranks-per-node terms) of the rank that is `rank` now, named by its host and,
  // where one host runs several such nodes (an emulated cluster), its place among them:
  // "host/0" on an ordinary cluster, stable across relaunches.
  std::string node_name_of(int rank) const;
  const std::vector<std::string>& original_hosts() const { return hosts_; }
  // Whether this rank is the lowest current rank on its host: the one that keeps the host's
  // node-local snapshots. Changes when a lower rank on the host dies.
  bool first_on_host() const;

  // This rank's cores (training_config.hpp's rank_cores): the CPUs it may run on, or its share
  // of its host's. Collective (every rank says which set it was allowed).
  int cores_of_rank() const;
  // The CPUs this rank has to itself, as a fraction where more ranks than CPUs share its set (4
  // ranks on 2 CPUs: 0.5); known once cores_of_rank() has run.
  double cpu_share() const { return cpu_share_; }
  // Collective: learns every rank's pid and logs rank_started for each.
  void announce(core::EventLog& events);
  // The communicator was shrunk to the survivors (communicator_slot() holds them already).
  Departure survivors_are(std::span<const int> old_ranks);

 private:
  std::unique_ptr<comm::Communicator> comm_;
  int ranks_per_node_;
  int world_rank_;
  std::vector<int> world_rank_of_;  // current rank -> original world rank
  std::vector<std::string> hosts_;  // by original world rank
  bool owns_run_files_ = true;
  mutable double cpu_share_ = 1;  // set by cores_of_rank()
};

}  // namespace hardy::resilience
