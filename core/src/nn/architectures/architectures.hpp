#pragma once
// The network descriptions, one file each: a function that records its network with a builder.
#include "hardy/core/nn/model.hpp"

namespace hardy::core::architectures {

Network describe_compact(Backend& backend, const ModelConfig& config);
Network describe_deepcam(Backend& backend, const ModelConfig& config);
Network describe_tiramisu(Backend& backend, const ModelConfig& config);
Network describe_cosmoflow(Backend& backend, const ModelConfig& config);

}  // namespace hardy::core::architectures
