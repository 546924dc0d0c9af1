#include "hardy/core/nn/evaluation.hpp"

#include <algorithm>
#include <numeric>

#include "hardy/core/data/batch_assembler.hpp"

namespace hardy::core {

ConfusionMatrix evaluate(Model& model, const SampleSource& source, std::size_t batch_size,
                         const EvaluatedBatch& each_batch) {
  Backend& backend = model.backend();
  BatchAssembler assembler(backend, source.shape());
  ConfusionMatrix confusion(model.config().num_classes);
  Tensor fields, labels, predicted;
  std::vector<std::size_t> indices;
  for (std::size_t first = 0; first < source.size(); first += batch_size) {
    const std::size_t count = std::min(batch_size, source.size() - first);
    indices.resize(count);
    std::iota(indices.begin(), indices.end(), first);
    assembler.load(source, indices, fields, labels);
    const Tensor& logits = model.forward(fields, /*training=*/false);
    if (each_batch) each_batch(first, fields, logits);
    Tensor host_predicted = Tensor::host(labels.dims(), DType::i32, labels.layout());
    Tensor host_labels = Tensor::host(labels.dims(), DType::i32, labels.layout());
    ensure_tensor(backend, predicted, labels.dims(), DType::i32);
    backend.argmax_channels(logits, predicted);
    backend.copy(predicted, host_predicted);
    backend.copy(labels, host_labels);
    const auto n = static_cast<std::size_t>(labels.numel());
    confusion.add({host_labels.data<std::int32_t>(), n}, {host_predicted.data<std::int32_t>(), n});
  }
  return confusion;
}

}  // namespace hardy::core
