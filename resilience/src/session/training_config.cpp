#include "hardy/resilience/training_config.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "domains/domain_plan.hpp"
#include "hardy/comm/rendezvous/network_interface.hpp"
#include "hardy/core/data/sample_source.hpp"
#include "hardy/core/support/enum_names.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::resilience {

RebalancePolicy parse_rebalance_policy(const std::string& name) {
  if (name == "constant-global-batch") return RebalancePolicy::constant_global_batch;
  if (name == "constant-local-batch") return RebalancePolicy::constant_local_batch;
  throw InvalidArgument(fmt::format(
      "unknown rebalance policy '{}' (choose constant-global-batch or constant-local-batch)",
      name));
}

std::string to_string(RebalancePolicy policy) {
  return policy == RebalancePolicy::constant_global_batch ? "constant-global-batch"
                                                          : "constant-local-batch";
}

DomainExchange parse_domain_exchange(const std::string& name) {
  static_assert(std::size(kDomainExchangeNames) == 1 + static_cast<int>(DomainExchange::sharded));
  if (const auto exchange = core::value_named<DomainExchange>(kDomainExchangeNames, name))
    return *exchange;
  throw InvalidArgument(fmt::format("unknown domain exchange '{}' (choose {})", name,
                                    core::choice_list(kDomainExchangeNames)));
}

bool TrainingConfig::domains_meet_at(long at_step) const {
  return domain < 0 || synchronizes(at_step, sync_every(), steps);
}

std::size_t TrainingConfig::global_batch_with(int live, int original) const {
  if (rebalance == RebalancePolicy::constant_global_batch)
    return static_cast<std::size_t>(global_batch);
  // Each surviving rank keeps the share it had in the original world.
  const auto per_rank = static_cast<std::size_t>(global_batch / original);
  return std::max<std::size_t>(1, per_rank) * static_cast<std::size_t>(live);
}

float TrainingConfig::lr_with(long at_step, int live, int original) const {
  const float lr = schedule.at(at_step);
  if (rebalance == RebalancePolicy::constant_global_batch) return lr;
  return lr * static_cast<float>(global_batch_with(live, original)) /
         static_cast<float>(global_batch);  // linear scaling
}

int rank_cores(int online, int allowed, int sharing, int ranks_on_host) {
  if (allowed < online) return std::max(1, allowed / std::max(1, sharing));
  return std::max(1, online / std::max(1, ranks_on_host));
}

ThreadSplit split_host_threads(const TrainingConfig& config, int cores) {
  cores = std::max(1, cores);
  ThreadSplit split;
  if (config.backend == "cpu") {
    split.kernel_threads = config.threads > 0 ? config.threads : cores;
    split.loader_threads = config.loader_threads > 0 ? config.loader_threads : 1;
    return split;
  }
  split.loader_threads =
      config.loader_threads > 0 ? config.loader_threads : std::clamp(cores / 2, 1, 8);
  split.kernel_threads =
      config.threads > 0 ? config.threads : std::clamp(cores - split.loader_threads - 1, 1, 4);
  return split;
}

// The options' checks (InvalidArgument) and the values they imply (steps from epochs, the
// schedule's length).
void check_and_complete(TrainingConfig& config, int world_size, const core::SampleSource& train) {
  if (config.global_batch < world_size)
    throw InvalidArgument(
        fmt::format("--global-batch {} is smaller than the {} ranks of the job; every rank needs "
                    "at least one sample per step",
                    config.global_batch, world_size));
  if (config.prefetch_batches < 0)
    throw InvalidArgument(
        fmt::format("--prefetch-batches {} is negative", config.prefetch_batches));
  if (const auto shape = train.shape(); shape.height % config.model.input_multiple() != 0 ||
                                        shape.width % config.model.input_multiple() != 0)
    throw InvalidArgument(
        fmt::format("{} has samples of {}x{}; the {} model needs multiples of {} (choose --crop or "
                    "--downsample to get them)",
                    train.describe(), shape.height, shape.width,
                    core::to_string(config.model.architecture), config.model.input_multiple()));
  if (config.ranks_per_node > 1 && world_size % config.ranks_per_node != 0)
    throw InvalidArgument(fmt::format("{} ranks do not make whole nodes of --ranks-per-node {}",
                                      world_size, config.ranks_per_node));
  if (config.steps == 0) {
    const long per_epoch =
        static_cast<long>((train.size() + config.global_batch - 1) / config.global_batch);
    config.steps = per_epoch * config.epochs;
  }
  config.schedule.total_steps = config.steps;
  config.schedule.validate();
  // A warm-up given as a fraction of the run (a training recipe's) in steps, for the record.
  config.schedule.warmup_steps = config.schedule.warmup();
  if (config.domain >= 0) {
    // Each rank resolves its own node's address (only the leader's is used): a node without
    // that network is a misconfiguration to report before anything starts.
    if (config.domain_address.empty() && !config.domain_interface.empty()) {
      try {
        config.domain_address = comm::interface_address(config.domain_interface);
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(fmt::format("--domain-interface {}", e.what()));
      }
    }
    if (!config.memory_snapshots || config.rebalance != RebalancePolicy::constant_global_batch)
      throw InvalidArgument(
          "fault domains need --memory-snapshots and --rebalance constant-global-batch: a step "
          "abandoned across domains rolls back from memory");
  }
}

}  // namespace hardy::resilience
