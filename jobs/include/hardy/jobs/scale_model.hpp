#pragma once
// Projects recovery time to machines far larger than the one a measurement ran on, from
// per-operation costs measured in a real run and stated assumptions about how each operation
// scales (docs/scale-model.md explains each one).
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hardy::jobs {

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

// ---- effective training time ratio (docs/scale-model.md, "ETTR") ----

// A phase's seconds against the node count, fitted by bench/cluster/scale_bench.py:
// a + b*N ("linear") or c*N^p ("power"), never below `floor` (the smallest value measured: a
// larger job does at least a smaller one's work, so a fit that falls with N, noise about a flat
// cost, is not extrapolated below it) nor below zero.
struct GrowthFit {
  std::string model;
  double a = 0, b = 0, c = 0, p = 0;
  double floor = 0;
  double at(double nodes) const;
  std::string formula() const;
};

// The start and recovery phases of both designs, fitted against the node count.
struct ScalingFits {
  GrowthFit one_job_start;   // launch to the first committed step
  GrowthFit one_job_stall;   // a node's loss to the next step: a whole-job relaunch
  GrowthFit domains_start;   // the same for the job as domains
  GrowthFit domains_stall;   // a node's loss to the other domains' next step
  double domain_back_s = 0;  // a node's loss to its domain admitted again (median over N)
};

// What bench/cluster/scale_bench.py measured on the emulated cluster (1 rank per node), one job
// against domains of `nodes_per_domain` nodes.
struct MeasuredScaling {
  std::string source;
  int nodes_per_domain = 0;
  int largest_nodes = 0;  // the largest job measured
  // As measured: every emulated node shared the measuring machine's cores (an upper bound).
  ScalingFits measured;
  // Every point divided by the contention at its own node count (how much slower one domain's
  // launch and MPI_Init, the same work at every N, ran there): as if each node had kept its
  // cores (a lower bound).
  ScalingFits alone;
  double largest_contention = 1;    // the contention at the largest job measured
  double step_s = 0;                // one job's step at the smallest N
  double domain_step_overhead = 0;  // domains' step over one job's, less 1, at the smallest N
};
MeasuredScaling read_scaling(const std::filesystem::path& results);

// What bench/cluster/domain_bench.py measured of the domains' per-step price against one job on
// the same nodes, for domains meeting every `sync_every`-th step that exchange as `exchange`
// says (--domain-exchange: "leader" or "sharded"): the pooled rounds where the results hold
// them, else the run's own.
struct MeasuredDomainPrice {
  double overhead = 0;      // the ratio of the median steps, less 1
  std::string measured_as;  // which configuration of the bench, and from which rounds
};
MeasuredDomainPrice read_domain_price(const std::filesystem::path& results, int sync_every,
                                      std::string_view exchange = "leader");

// What one failure of one kind cost a design on a small cluster, measured by
// bench/cluster/goodput_bench.py under a failure schedule (docs/scale-model.md, "Goodput"): the
// longest time the job went without a commit (detection, recovery, the steps redone), and the
// rest of the time it lost (steps slower than healthy while shrunk or while a domain was away,
// the first steps' warm-up after a relaunch, a regrow's planned relaunch). Means over the
// failures of that kind measured.
struct FailureKindCost {
  int count = 0;
  double stall_s = 0;
  double after_s = 0;
  // The share of them that the job survived in-job (it ran on fewer ranks for a while, and was
  // not relaunched for the failure itself): a one-job stall that does not grow with the job.
  double in_job_share = 0;
  double lost_s() const { return stall_s + after_s; }
};
using FailureCosts = std::map<std::string, FailureKindCost, std::less<>>;  // by kind

// Per-kind costs of both designs, as measured at `nodes` (domains of `nodes_per_domain`).
struct MeasuredFailureCosts {
  std::string source;
  int nodes = 0;
  int nodes_per_domain = 0;
  FailureCosts one_job, domains;
};

// Seconds one failure costs the whole machine, over a mix of kinds (weights by kind, summing to
// anything: they are normalized; a kind not measured is refused). Each kind's stall grows by
// `stall_growth` (the fitted stall at the projected size less at the measured one; with
// `growth_skips_in_job`, only for the share of its failures that were not survived in-job) and
// its time lost after the stall is multiplied by `after_scale`; `stall_growth` 0 and
// `after_scale` 1 give the mix of the costs as measured.
double mixed_failure_cost(const FailureCosts& costs, const std::map<std::string, double>& mix,
                          double stall_growth = 0, double after_scale = 1,
                          bool growth_skips_in_job = false);

struct EttrAssumptions {
  int nodes = 4560;
  int gpus_per_node = 6;
  int nodes_per_domain = 16;
  // Llama 3's: an interruption every 3 h on 16,384 GPUs, scaled by the GPUs of the machine.
  double hours_between_interruptions_per_16k_gpus = 3.0;
  double job_hours = 24;  // one allocation: the job starts once in it
  double step_s = 0;      // 0: the measured step
  // Per-step price, as a fraction of an unprotected step: the domains' cross-domain exchange
  // (negative: the measured one) and the protections every design pays (agreement, snapshots,
  // checkpoints).
  double domain_step_overhead = -1;
  double protection_overhead = 0;
  // Time the machine loses outside every failure's recovery, per second of work: the goodput
  // bench's background (its emulated nodes' own spread, GoodputRun::background_share), which a
  // prediction of a bench run counts as a per-step price; 0 for a projection.
  double background_share = 0;
  // The domains meet every N-th step (--domain-sync-every): a lost domain costs the survivors
  // (N-1)/2 more steps on average. Its per-step price is domain_step_overhead's to give.
  int domain_sync_every = 1;
  // Per-kind costs measured under a failure schedule (--costs-from): with them, a failure costs
  // its kind's measured stall, grown with the node count as the scale bench's stall grows, and
  // its time lost after it, for domains scaled to a domain's share of the machine; weighted by
  // `failure_mix` (empty: every kind measured alike). Without them, every failure costs the
  // scale bench's stall (a node crash) and the step in flight.
  std::optional<MeasuredFailureCosts> failure_costs{};
  std::map<std::string, double> failure_mix{};
  // The time lost to the start, seconds (negative: the scale bench's start fitted at this size).
  double start_s = -1;
};

struct EttrProjection {
  std::string design;
  // "as measured" (MeasuredScaling::measured, an upper bound) or "contention removed" (::alone,
  // a lower bound).
  std::string bound;
  double start_s = 0;        // once per allocation
  double stall_s = 0;        // per failure, the whole machine waits
  double degraded_s = 0;     // per failure, one domain away (its share of the machine idle)
  double lost_work_s = 0;    // per failure, committed or in-flight work redone
  double per_failure_s = 0;  // machine-seconds lost per failure: stall + degraded share + lost work
  double failures = 0;       // in one allocation
  double step_overhead = 0;
  double ettr = 0;  // productive time over wall time
};
// Kokolis et al. (2024): productive time over wall time, for one job on every node and for
// domains of nodes_per_domain nodes, each as measured and with the contention removed.
std::vector<EttrProjection> project_ettr(const MeasuredScaling& measured,
                                         const EttrAssumptions& assumptions);

// Reads the costs of the last recovery (and the first relaunch, if any) in a run directory.
MeasuredRecovery measure_recovery(const std::filesystem::path& run_dir);
// One projection per path the measurement supports: in-job (when a shrink was measured) and
// supervisor relaunch, from a checkpoint and from node-local snapshots.
std::vector<RecoveryProjection> project(const MeasuredRecovery& measured,
                                        const ScaleAssumptions& assumptions);

}  // namespace hardy::jobs
