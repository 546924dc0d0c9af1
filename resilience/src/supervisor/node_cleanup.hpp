#pragma once
// Nothing of a run stays in the memory of the nodes it used. Its ranks remove their own
// node-local snapshots when the job finishes, but not those of a node whose ranks all died
// inside the job, nor of a node a relaunch left out, nor any when the run ends by failing, being
// stopped or asking for a requeue: /dev/shm is node memory that every user of the node shares,
// and the next job the scheduler puts there would find it full. So once a run is over, however it
// ended, the supervisor has every node of the run (spares included) run `hardy clean --node-local
// --run-dir` through the launch path; a node that cannot be reached is named in the event, and a
// later job of the same user there removes what it left (checkpoint/stale_snapshots.hpp).
//
// When the run did not complete, the node-local snapshots may hold committed steps newer than its
// newest checkpoint: before they go, one node at a time (the run's nodes in order) keeps its
// newest snapshot as a checkpoint (`--keep-newest`) until a checkpoint of the run's last
// committed step exists (at most 8 nodes), so a requeue or a later `hardy run --resume latest`
// loses nothing. A node where keeping failed (a full disk) keeps its snapshots instead: they may
// be the only copy of the newest state.
#include "hardy/core/support/event_log.hpp"
#include "hardy/resilience/supervisor.hpp"

namespace hardy::resilience {

// Runs the cleanup of `config`'s nodes under its snapshot_dir and logs it (node_state_removed);
// nothing when the ranks keep no snapshots. `completed`: the run finished its last step (its
// final checkpoint, if any, holds the newest state). `left_out`: nodes the run left out as lost;
// their probe waits only as long as the others' answers (a frozen node never answers, and the
// run's end would wait out --probe-timeout for it). Never throws.
void remove_node_state(const SupervisorConfig& config, bool completed, core::EventLog& events,
                       const std::vector<std::string>& left_out = {});

}  // namespace hardy::resilience
