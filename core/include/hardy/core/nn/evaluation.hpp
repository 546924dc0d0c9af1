#pragma once
#include <cstddef>

#include "hardy/core/data/sample_source.hpp"
#include "hardy/core/nn/model.hpp"
#include "hardy/core/nn/segmentation_metrics.hpp"

namespace hardy::core {

// Runs the model in inference mode over every sample of `source` and counts predicted against
// true labels.
ConfusionMatrix evaluate(Model& model, const SampleSource& source, std::size_t batch_size);

}  // namespace hardy::core
