#include "hardy/resilience/training_config.hpp"

#include <fmt/format.h>

#include <algorithm>

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

}  // namespace hardy::resilience
