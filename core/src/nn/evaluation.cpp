#include "hardy/core/nn/evaluation.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "hardy/core/data/batch_assembler.hpp"

namespace hardy::core {

namespace {

// Runs the model in inference mode over the source in order, batch_size samples at a time, and
// hands each batch's truth (labels or targets) and output to `score`.
void for_each_batch(Model& model, const SampleSource& source, std::size_t batch_size,
                    const EvaluatedBatch& each_batch,
                    const std::function<void(const Tensor& truth, const Tensor& output)>& score) {
  BatchAssembler assembler(model.backend(), source.shape());
  Tensor fields, truth;
  std::vector<std::size_t> indices;
  for (std::size_t first = 0; first < source.size(); first += batch_size) {
    indices.resize(std::min(batch_size, source.size() - first));
    std::iota(indices.begin(), indices.end(), first);
    assembler.load(source, indices, fields, truth);
    const Tensor& output = model.forward(fields, /*training=*/false);
    if (each_batch) each_batch(first, fields, output);
    score(truth, output);
  }
}

}  // namespace

ConfusionMatrix evaluate(Model& model, const SampleSource& source, std::size_t batch_size,
                         const EvaluatedBatch& each_batch) {
  Backend& backend = model.backend();
  ConfusionMatrix confusion(model.config().num_classes);
  Tensor predicted;
  const auto score = [&](const Tensor& labels, const Tensor& logits) {
    Tensor host_predicted = Tensor::host(labels.dims(), DType::i32, labels.layout());
    Tensor host_labels = Tensor::host(labels.dims(), DType::i32, labels.layout());
    ensure_tensor(backend, predicted, labels.dims(), DType::i32);
    backend.argmax_channels(logits, predicted);
    backend.copy(predicted, host_predicted);
    backend.copy(labels, host_labels);
    const auto n = static_cast<std::size_t>(labels.numel());
    confusion.add({host_labels.data<std::int32_t>(), n}, {host_predicted.data<std::int32_t>(), n});
  };
  for_each_batch(model, source, batch_size, each_batch, score);
  return confusion;
}

std::vector<double> RegressionErrors::mean_absolute_errors() const {
  std::vector<double> errors(absolute_sums.size());
  for (std::size_t t = 0; t < errors.size(); ++t)
    errors[t] = counts[t] > 0 ? absolute_sums[t] / static_cast<double>(counts[t]) : 0.0;
  return errors;
}

double RegressionErrors::mean_absolute_error() const {
  const double n = static_cast<double>(std::accumulate(counts.begin(), counts.end(), 0ULL));
  return n > 0 ? std::accumulate(absolute_sums.begin(), absolute_sums.end(), 0.0) / n : 0.0;
}

double RegressionErrors::mean_squared_error() const {
  const double n = static_cast<double>(std::accumulate(counts.begin(), counts.end(), 0ULL));
  return n > 0 ? std::accumulate(squared_sums.begin(), squared_sums.end(), 0.0) / n : 0.0;
}

RegressionErrors evaluate_regression(Model& model, const SampleSource& source,
                                     std::size_t batch_size, const EvaluatedBatch& each_batch) {
  Backend& backend = model.backend();
  const auto targets = static_cast<std::size_t>(source.shape().targets);
  RegressionErrors errors{std::vector<double>(targets), std::vector<double>(targets),
                          std::vector<std::size_t>(targets)};
  const auto score = [&](const Tensor& truth, const Tensor& prediction) {
    Tensor host_prediction = Tensor::host(prediction.dims(), DType::f32, Layout::flat);
    Tensor host_truth = Tensor::host(truth.dims(), DType::f32, Layout::flat);
    backend.copy(prediction, host_prediction);
    backend.copy(truth, host_truth);
    const auto p = host_prediction.f32();
    const auto y = host_truth.f32();
    for (std::size_t i = 0; i < y.size(); ++i) {
      if (std::isnan(y[i])) continue;
      const double error = static_cast<double>(p[i]) - y[i];
      errors.absolute_sums[i % targets] += std::abs(error);
      errors.squared_sums[i % targets] += error * error;
      ++errors.counts[i % targets];
    }
  };
  for_each_batch(model, source, batch_size, each_batch, score);
  return errors;
}

}  // namespace hardy::core
