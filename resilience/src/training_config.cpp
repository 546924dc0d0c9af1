#include "hardy/resilience/training_config.hpp"

#include <fmt/format.h>

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

}  // namespace hardy::resilience
