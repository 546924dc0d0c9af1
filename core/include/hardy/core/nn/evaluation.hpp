#pragma once
#include <cstddef>
#include <functional>
#include <vector>

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

// A regression model's errors over held-out samples (CosmoFlow: MLPerf HPC's metric is the mean
// absolute error over every target of every sample).
struct RegressionErrors {
  std::vector<double> absolute_sums;  // per target
  std::vector<double> squared_sums;   // per target
  std::vector<std::size_t> counts;    // per target: the samples scored (NaN targets left out)

  std::vector<double> mean_absolute_errors() const;  // per target
  double mean_absolute_error() const;                // over every scored target
  double mean_squared_error() const;
};

// Runs a regression model in inference mode over every sample of `source`.
RegressionErrors evaluate_regression(Model& model, const SampleSource& source,
                                     std::size_t batch_size, const EvaluatedBatch& each_batch = {});

}  // namespace hardy::core
