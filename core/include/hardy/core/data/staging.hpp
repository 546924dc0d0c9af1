#pragma once
// Node-local staging of sample files (--stage-to): the input of a step comes from fast local
// storage (NVMe, /tmp, /dev/shm) instead of the shared file system that thousands of nodes read
// at once, without giving up the global, exactly-once sampling order.
//
// Every file has a home node, chosen by rendezvous hashing over the live nodes; each node copies
// the files homed on it. Within every global batch (drawn by the EpochSampler as before, so the
// epochs, the audit and the resume equivalences do not change) the samples are handed to ranks
// of their home node as far as the node's share of the batch allows; the rest are read from the
// shared file system. When a node is lost, only its files get new homes, so each survivor
// fetches only what it newly owns; a relaunch on other nodes keeps what the survivors hold.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hardy::core {

// The name a node goes by for staging: its host and its place among the nodes on that host
// ("host/0" on an ordinary cluster; an emulated cluster runs several nodes on one host). The job
// and `hardy data stage --hosts` both name nodes so, and so agree on every file's home.
std::string staging_node_name(std::string_view host, int place = 0);

// A node's key for home_node(): a hash of its staging_node_name().
std::uint64_t node_key(std::string_view node_name);

// Where a host's copies of a dataset go inside a staging directory:
// STAGE_DIR/<host>/<dataset name>-<hash of its canonical path>. The host keeps nodes apart when
// STAGE_DIR is (by mistake, or in a test) shared; the hash keeps two datasets of one name apart;
// and a later job (or `hardy data stage` in a job's prologue) finds the same copies again.
std::filesystem::path staging_directory(const std::filesystem::path& stage_dir,
                                        const std::filesystem::path& dataset_root,
                                        std::string_view host);

// The index into `nodes` (opaque keys, e.g. node_key of host names) of the home of `file` (a name
// that every rank spells the same way, e.g. the file's name in its split directory): the node of
// the highest hash of (node, file). Removing a node moves only the files homed on it. Throws
// InvalidArgument for an empty node list.
std::size_t home_node(std::string_view file, std::span<const std::uint64_t> nodes);

// Which ranks take which samples of a global batch. home_of_sample[i] is the node (an index)
// where sample i of the batch is staged, or -1 when it is staged nowhere; node_of_rank[r] the
// node of rank r. Rank r takes exactly shard_of(batch, r, world, weights).size() samples, as
// without staging (so the batch stays split the same way; no weights: the even split); first the
// samples homed on its node, in batch order and over the node's ranks in rank order, then what no
// home could take, in batch order over the ranks with room left. Returns, per rank, positions into
// the batch, ascending. A pure function of its arguments: every rank computes the same placement.
std::vector<std::vector<std::size_t>> place_batch(std::span<const int> home_of_sample,
                                                  std::span<const int> node_of_rank,
                                                  std::span<const double> weights = {});

// A copy looks current when it has the source's size and modification time (the copy is given
// the source's time when it is made): the check rsync makes by default, one stat() each. Anyone
// can forge both (touch -d), so stage_files() also compares the contents before it counts such a
// copy as staged.
bool is_current_copy(const std::filesystem::path& source, const std::filesystem::path& copy);

struct StageCopy {
  std::filesystem::path source, destination;
};

struct StageProgress {
  std::size_t files_done = 0, files_total = 0;
  std::uint64_t bytes_copied = 0;
  double seconds = 0;
};

struct StageReport {
  std::size_t copied = 0;   // files copied now
  std::size_t current = 0;  // files already staged and unchanged
  std::uint64_t bytes_copied = 0;
  double seconds = 0;
  double bytes_per_second() const { return seconds > 0 ? bytes_copied / seconds : 0; }
};

// Copies every source whose destination is not current, on `threads` threads (the copies of a
// node run in parallel; a parallel file system serves several streams better than one). Every
// destination lies below `root`, a node-local tree of this user's: the directories from `root`
// down are checked and created as core/support/private_tree.hpp says before anything is
// copied, and a tree that fails throws UnsafeDirectory (nothing is written). Each copy is
// written as DESTINATION.part (created anew, O_EXCL|O_NOFOLLOW, mode 0600), given the source's
// modification time and renamed, so an interrupted copy is never taken for a staged file, and
// readers on other ranks see either no file or a complete one. One copier at a time writes into
// a directory (an advisory lock, `.staging.lock`, that the kernel drops when its holder dies);
// the one that holds it removes the .part files a killed copier left there. A destination that
// looks current (is_current_copy) counts only when its bytes equal the source's; otherwise it is
// copied again. `staged` (optional) is called with the index of each copy made or verified,
// from the copying threads. progress (optional) is called from one thread at a time, about once
// a second and at the end. Throws IoError naming the file for a read or write failure
// (the .part file is removed).
StageReport stage_files(const std::filesystem::path& root, std::span<const StageCopy> copies,
                        int threads, const std::function<void(const StageProgress&)>& progress = {},
                        const std::function<void(std::size_t)>& staged = {});

}  // namespace hardy::core
