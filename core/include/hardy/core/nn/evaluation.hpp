#pragma once
#include <cstddef>
#include <functional>

#include "hardy/core/data/sample_source.hpp"
#include "hardy/core/nn/model.hpp"
#include "hardy/core/nn/segmentation_metrics.hpp"

namespace hardy::core {

// Runs the model in inference mode over every sample of `source` and counts predicted against
// true labels.
// `each_batch(first, fields, logits)`, when given, sees every batch's input and logits (the
// samples first .. first + N - 1 of `source`), e.g. to save them.
using EvaluatedBatch =
    std::function<void(std::size_t first, const Tensor& fields, const Tensor& logits)>;
ConfusionMatrix evaluate(Model& model, const SampleSource& source, std::size_t batch_size,
                         const EvaluatedBatch& each_batch = {});

}  // namespace hardy::core
