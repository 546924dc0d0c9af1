#pragma once
// Projects recovery time to machines far larger than the one a measurement ran on, from
// per-operation costs measured in a real run and stated assumptions about how each operation
// scales (docs/scale-model.md explains each one).
#include <filesystem>
#include <string>
#include <vector>

namespace hardy::resilience {

// Costs measured on a small run (from its events.jsonl and checkpoints).
struct MeasuredRecovery {
  int world_size = 0;           // ranks before the failure
  double detection_s = 0;       // failure to detection
  double shrink_s = 0;          // revoke + shrink (+ the agreement inside it)
  double restore_memory_s = 0;  // rollback from the in-memory copy
  double restore_checkpoint_s =
      0;                    // read + broadcast, when a run used the checkpoint path (0 if none)
  double first_step_s = 0;  // the first step after recovery
  double model_bytes = 0;   // state broadcast on a checkpoint restore
  double relaunch_s = 0;    // a supervisor relaunch: end of the job to its first step (0 if none)
  // The phases of the first supervisor relaunch (all 0 if none): the last committed step to the
  // launcher's end (the runtime noticed the lost node), reading the evidence and probing the
  // nodes, job_relaunched to job_started (launch and MPI start-up), job_started to
  // state_restored, and the committed steps it lost.
  double relaunch_detect_s = 0, relaunch_decide_s = 0, relaunch_launch_s = 0,
         relaunch_restore_s = 0;
  int relaunch_nodes = 0;
  long relaunch_steps_lost = 0;
  std::string relaunch_restored_from;  // "node-local" or "checkpoint"
  std::string source;                  // where the numbers came from
};

// The machine projected to, and how its operations scale.
struct ScaleAssumptions {
  int nodes = 4560;
  int ranks_per_node = 6;
  double network_latency_s = 2e-6;            // per message, per hop
  double network_bandwidth_bytes_s = 12.5e9;  // per link (100 Gb/s)
  double pfs_read_bandwidth_bytes_s = 2.5e9;  // one reader of a parallel file system
  double launch_s_per_1000_nodes = 10.0;      // job launch (allocation already held) and MPI_Init
  double node_local_read_bytes_s = 5e9;       // reading a snapshot from node memory (/dev/shm)
  double failure_detection_s = 0;             // 0: the measured detection time
  double step_s = 0;                          // 0: the measured first step
};

struct RecoveryProjection {
  std::string path;  // "in-job, memory", "in-job, checkpoint", "supervisor relaunch"
  double detect_s = 0, shrink_s = 0, restore_s = 0, first_step_s = 0;
  double total() const { return detect_s + shrink_s + restore_s + first_step_s; }
};

// Reads the costs of the last recovery (and the first relaunch, if any) in a run directory.
MeasuredRecovery measure_recovery(const std::filesystem::path& run_dir);
// One projection per path the measurement supports: in-job (when a shrink was measured) and
// supervisor relaunch, from a checkpoint and from node-local snapshots.
std::vector<RecoveryProjection> project(const MeasuredRecovery& measured,
                                        const ScaleAssumptions& assumptions);

}  // namespace hardy::resilience
