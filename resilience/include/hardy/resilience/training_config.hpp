#pragma once
// Everything a training job needs to know. jobs/ fills it from the command line and an INI file
// (where every option is declared once, with its default and help); the effective values are
// written to the run directory as config.ini.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/data/batch_assembler.hpp"
#include "hardy/core/data/data_sources.hpp"
#include "hardy/core/nn/lr_schedule.hpp"
#include "hardy/core/nn/model.hpp"
#include "hardy/core/nn/optimizer.hpp"
#include "hardy/core/support/private_tree.hpp"
#include "hardy/resilience/divergence_watch.hpp"
#include "hardy/resilience/straggler_watch.hpp"

namespace hardy::resilience {

// After a failure, how the global batch is spread over fewer ranks.
enum class RebalancePolicy {
  constant_global_batch,  // re-split the same global batch: results as if nothing happened
  constant_local_batch,   // keep each rank's batch, shrink the global batch, scale lr linearly
};
RebalancePolicy parse_rebalance_policy(const std::string& name);
std::string to_string(RebalancePolicy policy);

// How fault domains sum a step across domains (docs/resilience.md, "Fault domains").
enum class DomainExchange {
  // Each domain's leader sends the whole sum to the other leaders, then broadcasts in its domain.
  leader,
  // Rank i of every domain sums the i-th shard with rank i of the others (a gloo group per
  // shard), the domain gathers the shards, and the leaders vote: every rank carries 1/R of the
  // bytes. Domains must be of equal size, and a domain that loses a rank ends (relaunched).
  sharded,
};
inline constexpr std::string_view kDomainExchangeNames[] = {"leader", "sharded"};
DomainExchange parse_domain_exchange(const std::string& name);

// --snapshot-every auto: a node-local snapshot whenever the time since the last one is at least
// kSnapshotAutoCostFactor times what the last one cost (the training thread's stall plus the
// background write): at most 1% of the time goes to snapshots, and a relaunch loses at most that
// interval (every step when steps are long against a write, every few when they are short).
inline constexpr long kSnapshotEveryAuto = -1;
inline constexpr double kSnapshotAutoCostFactor = 100;

struct TrainingConfig {
  std::filesystem::path run_dir;
  // The token of the `hardy run` whose lock of run_dir this launch runs under (empty: the lead
  // rank takes the lock itself; hardy/resilience/run_lock.hpp).
  std::string run_lock_token;
  long steps = 0;  // the job's total, 0 = derive from epochs
  long epochs = 1;
  long global_batch = 8;
  std::uint64_t seed = 1;
  std::string backend = "cpu";
  // f32, or mixed precision with bf16 (CPU and GPU) or fp16 (GPU) activations; jobs/ resolves
  // `--precision auto` (core::default_precision).
  core::Precision precision = core::Precision::f32;
  int threads = 0;  // kernel (OpenMP) threads per rank, 0 = auto (split_host_threads)
  long log_every = 10;

  // Data parallelism.
  double bucket_mib = 25;
  // Lagged gradient updates (docs/resilience.md): 1 = a step's gradients are reduced while the
  // next step's forward and backward run, and applied after them (one step stale); 0 = off.
  int gradient_lag = 0;
  bool audit_samples = false;
  long verify_replicas_every = 0;

  // Data.
  core::DataSpec data;
  std::optional<std::vector<float>> class_weights;  // nullopt = from class frequencies
  // ... each class's frequency to this power (core::resolve_class_weights).
  double class_weight_power = -0.5;
  // Node-local staging (core/data/staging.hpp): empty = read the dataset where it is.
  std::filesystem::path stage_to;
  int stage_threads = 4;
  // The input pipeline: each step announces this rank's samples of the next prefetch_batches
  // steps to loader_threads background threads (0 steps: every sample loads in the step).
  long prefetch_batches = 2;
  int loader_threads = 0;  // 0 = auto (split_host_threads)
  // Whether the next step's batch is taken from the loaders and copied into a second pair of
  // input tensors while the step computes (core::BatchAssembler::stage). nullopt = auto: with a
  // backend on a device, whose copies run beside its kernels; not on the CPU backend, whose
  // kernels take every core the loaders leave.
  std::optional<bool> overlap_input;
  core::BadSamplePolicy bad_samples = core::BadSamplePolicy::fail;

  core::ModelConfig model;
  core::OptimizerConfig optimizer;
  core::LrSchedule schedule;

  // Checkpoints.
  long checkpoint_every = 0;            // steps, 0 = never
  double checkpoint_every_seconds = 0;  // 0 = never
  int keep_last = 3;                    // retention: the last K ...
  int keep_every = 0;                   // ... plus every M-th (0: none)
  bool checkpoint_async = true;
  bool checkpoint_skip_when_busy = false;  // false: wait for the previous write
  std::string resume;                      // "", "latest" or a checkpoint path
  // The node-local tier (docs/resilience.md): every N committed steps each node's lowest rank
  // writes the committed state under snapshot_dir (a private tree of this user's), and
  // `--resume latest` prefers it when newer.
  long snapshot_every = kSnapshotEveryAuto;  // N steps, 0 = off
  std::filesystem::path snapshot_dir = core::default_node_local_root();

  // Resilience.
  int ranks_per_node = 1;
  int min_world_size = 1;
  int max_failures = 3;
  RebalancePolicy rebalance = RebalancePolicy::constant_global_batch;
  bool memory_snapshots = true;  // roll back in memory (the live state) when the survivors agree
  double collective_timeout_s = 300;
  // Hang detection inside the job (hang_monitor.hpp): 0 learns the timeout from the step time,
  // a positive value fixes it, a negative one turns detection off (the watchdog alone is left).
  double hang_timeout_s = 0;
  double hang_io_timeout_s = 60;  // a data wait or a state write longer than this is a hang
  std::vector<std::string> inject_failures;
  // The divergence watch (divergence_watch.hpp): reports a loss that stays above its early
  // level, does nothing else; factor 0 turns it off.
  DivergenceThresholds divergence;
  // Slow ranks (straggler_watch.hpp): detected from every rank's own work per sample, and with
  // `rebalance` given fewer samples while they are slow.
  StragglerThresholds stragglers;
  // Spare nodes `hardy run` has left to relaunch on (it passes --spare-nodes-left): with
  // --straggler evict, a slow node is left out only when one is there to take its place.
  int spare_nodes_left = 0;
  // A job that shrank inside is relaunched at its full world once the time it lost running
  // shrunk reaches a relaunch's cost (regrow_watch.hpp; --regrow): negative for off, 0 for auto
  // (twice the launch's time to its first commit), else that cost in seconds. Only under hardy
  // run (a run lock token), which relaunches it, with a spare left (spare_nodes_left).
  double regrow_cost_s = 0;

  // Fault domains (set by `hardy run --nodes-per-domain`; docs/resilience.md): this process's
  // domain among domain_count separate MPI jobs whose leaders meet in the store at domain_store.
  int domain = -1;  // -1: the job is one MPI job
  int domain_count = 1;
  std::string domain_store;                  // a directory, or redis://HOST:PORT (domain_store.hpp)
  std::filesystem::path domain_store_token;  // a redis:// store's password file
  std::string domain_address;                // where this domain's leader listens for the others
  // The network to listen on when no address is given: an interface's name or a subnet
  // (comm/rendezvous/network_interface.hpp).
  std::string domain_interface;
  double domain_timeout_s = 10;  // a cross-domain collective that takes longer fails
  std::string domain_join;       // a relaunched domain's token: join the running job, heal
  // The domains meet every N-th step and train alone in between (domain_plan.hpp); 1: every step,
  // as one job would. Ignored without domains.
  int domain_sync_every = 1;
  DomainExchange domain_exchange = DomainExchange::leader;
  // How often the domains meet: every step in a job of one domain.
  int sync_every() const { return domain >= 0 ? domain_sync_every : 1; }
  // Whether the domains meet at `at_step` (--domain-sync-every; always without domains).
  bool domains_meet_at(long at_step) const;
  // The global batch with `live` of the `original` ranks left, under the rebalance policy: the
  // same, or each survivor's original share.
  std::size_t global_batch_with(int live, int original) const;
  // The learning rate at `at_step` then: the schedule's, scaled linearly with the global batch.
  float lr_with(long at_step, int live, int original) const;

  std::string config_ini;  // the effective configuration, as written to config.ini
};

// The options' checks (InvalidArgument) against the world and the samples, and the values they
// imply (steps from epochs, the schedule's length).
void check_and_complete(TrainingConfig& config, int world_size, const core::SampleSource& train);

// The cores a rank may use. When a scheduler or launcher restricted the CPUs it may run on
// (`allowed` < `online`: a Slurm cpuset, a binding), those, shared with the ranks of its host
// that were allowed the same set (`sharing`, itself included); otherwise the host's `online`
// cores shared among its `ranks_on_host` ranks. At least 1.
int rank_cores(int online, int allowed, int sharing, int ranks_on_host);

// A rank's threads: the kernels' (OpenMP) and the loaders' that fill the next batches.
struct ThreadSplit {
  int kernel_threads = 1;
  int loader_threads = 1;
};

// Splits `cores` (the rank's share of its host's cores) where --threads or --loader-threads is 0
// (auto). On the CPU backend the kernels take every core, and one loader fills batches beside
// them. With the kernels on a GPU the cores are the loaders': half of them, at most 8, and at
// most 4 kernel threads of what is left (copies and layout changes only), one core kept for the
// training thread. On an H100 with 16 cores, 8 loaders and 4 kernel threads took a step of the
// 128x128 configuration from 42 to 11 ms (bench/results/gpu-h100-2026-11-26-loaders.json).
ThreadSplit split_host_threads(const TrainingConfig& config, int cores);

}  // namespace hardy::resilience
