#pragma once
// Open MPI's shared-memory transport (btl/sm) backs each rank's segment with a file,
// /dev/shm/sm_segment.<host>.<uid>.<job id>.<local rank> (16 MiB, mode 0600), that only
// MPI_Finalize removes. A rank that is killed (a failure, an injected fault, the teardown of a job
// the runtime gave up on) leaves its file in node memory for good, and a week-long job that
// recovers from dozens of failures leaves dozens per node, on nodes other users share. The first
// rank on each host removes its user's orphans when a job starts (and `hardy clean --node-local`
// does, by hand): files that no process maps any more.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <vector>

namespace hardy::comm {

// Orphans are at least this old: a segment is mapped the moment its rank creates it, so a younger
// unmapped one may belong to a job starting on this node at this instant.
inline constexpr std::chrono::seconds kOrphanedSegmentMinAge{5};

struct RemovedSegment {
  std::filesystem::path path;
  std::uintmax_t bytes = 0;  // node memory it held (its allocated blocks)
};

// Removes from `directory` this user's segment files (by name and by owner; regular files only,
// never through a symbolic link) that were last modified at least `min_age` ago and that no
// process maps (/proc/PID/maps of every process this user can read: only this user's and root's
// processes can open a 0600 file of this user). Best effort: what cannot be read or removed stays.
std::vector<RemovedSegment> remove_orphaned_mpi_segments(
    const std::filesystem::path& directory = "/dev/shm",
    std::chrono::seconds min_age = kOrphanedSegmentMinAge);

}  // namespace hardy::comm
