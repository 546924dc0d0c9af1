#include "hardy/core/data/data_sources.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "hardy/core/data/batch_assembler.hpp"
#include "hardy/core/data/cosmoflow.hpp"
#include "hardy/core/data/dataset.hpp"
#include "hardy/core/data/packed_samples.hpp"
#include "hardy/core/data/sample_cache.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::core {

DatasetLayout dataset_layout(const std::filesystem::path& root) {
  if (is_packed_layout(root)) return DatasetLayout::packed;
  if (is_deepcam_layout(root)) return DatasetLayout::deepcam;
  if (is_cosmoflow_layout(root)) return DatasetLayout::cosmoflow;
  if (is_climatenet_layout(root)) return DatasetLayout::climatenet;
  return DatasetLayout::other;
}

std::unique_ptr<SampleSource> open_split(const DataSpec& spec, std::string_view split) {
  switch (dataset_layout(spec.dataset)) {
    case DatasetLayout::deepcam:
      return std::make_unique<DeepCamDataset>(spec.dataset, split, spec.deepcam);
    case DatasetLayout::climatenet:
      return std::make_unique<ClimateNetDataset>(spec.dataset, split, spec.climatenet);
    case DatasetLayout::packed:
      return std::make_unique<PackedSamples>(spec.dataset, split);
    case DatasetLayout::cosmoflow:
      return std::make_unique<CosmoFlowDataset>(spec.dataset, split);
    case DatasetLayout::other:
      break;
  }
  throw InvalidArgument(fmt::format(
      "{} is not a dataset of splits (the DeepCAM layout: ROOT/stats.h5 and ROOT/train/*.h5; "
      "ClimateNet's: ROOT/train/*.nc; CosmoFlow's: ROOT/train/*.h5 or *_data.npy; or one `hardy "
      "data "
      "pack` wrote: ROOT/packed.json)",
      spec.dataset.string()));
}

std::string held_out_split(const std::filesystem::path& root) {
  std::error_code error;
  const DatasetLayout layout = dataset_layout(root);
  return (layout == DatasetLayout::climatenet || layout == DatasetLayout::packed ||
          layout == DatasetLayout::cosmoflow) &&
                 !std::filesystem::is_directory(root / "validation", error)
             ? "test"
             : "validation";
}

DataSources open_data(const DataSpec& spec) {
  DataSources data;
  const std::size_t held_out = spec.eval_samples;
  std::size_t train_count = 0;
  if (spec.synthetic) {
    train_count = spec.samples;
    if (spec.shape.regression())
      data.storage =
          std::make_unique<SyntheticCosmology>(spec.shape.depth, train_count + held_out, spec.seed);
    else
      data.storage =
          std::make_unique<SyntheticClimate>(spec.shape, train_count + held_out, spec.seed);
  } else if (dataset_layout(spec.dataset) != DatasetLayout::other) {
    data.storage = open_split(spec, "train");
    train_count = data.storage->size();
    if (held_out > 0) {
      data.held_out_storage = open_split(spec, held_out_split(spec.dataset));
      data.held_out = std::make_unique<SampleRange>(
          *data.held_out_storage, 0, std::min(held_out, data.held_out_storage->size()));
    }
  } else {
    data.storage = std::make_unique<Hdf5Dataset>(spec.dataset);
    if (data.storage->size() <= held_out)
      throw InvalidArgument(
          fmt::format("{} has {} samples; holding out {} (--eval-samples) leaves none to train on",
                      spec.dataset.string(), data.storage->size(), held_out));
    train_count = data.storage->size() - held_out;
  }
  if (!spec.synthetic && spec.shape.regression() != data.storage->shape().regression())
    throw InvalidArgument(fmt::format(
        "{} holds {} samples ({}); the model {}", spec.dataset.string(),
        data.storage->shape().regression() ? "regression" : "segmentation",
        to_string(data.storage->shape()),
        spec.shape.regression() ? "regresses targets (--model cosmoflow)" : "segments fields"));
  if (!spec.synthetic && spec.shape.regression() && data.storage->shape() != spec.shape)
    throw InvalidArgument(fmt::format("{} holds samples of {}; the model takes {}",
                                      spec.dataset.string(), to_string(data.storage->shape()),
                                      to_string(spec.shape)));
  if (!spec.synthetic && data.storage->shape().channels != spec.shape.channels)
    throw InvalidArgument(fmt::format("{} has {} channels; the model takes {}",
                                      spec.dataset.string(), data.storage->shape().channels,
                                      spec.shape.channels));
  if (spec.cache_bytes > 0 && !data.storage->reads_from_page_cache())
    data.storage = std::make_unique<CachedSamples>(std::move(data.storage), spec.cache_bytes);
  data.train = std::make_unique<SampleRange>(*data.storage, 0, train_count);
  if (held_out > 0 && !data.held_out)
    data.held_out = std::make_unique<SampleRange>(*data.storage, train_count, held_out);
  return data;
}

std::vector<float> resolve_class_weights(const std::optional<std::vector<float>>& given,
                                         const SampleSource& source, int classes,
                                         double frequency_power) {
  if (given) return *given;
  const auto frequencies = class_frequencies(source, 64);
  std::vector<float> weights(static_cast<std::size_t>(classes));
  double mean_weight = 0;
  for (int c = 0; c < classes; ++c) {
    const double f = std::max(frequencies[static_cast<std::size_t>(c)], 1e-4);
    // The inverse square root exactly as before recipes had other powers (bit for bit).
    const double weight =
        frequency_power == -0.5 ? 1.0 / std::sqrt(f) : std::pow(f, frequency_power);
    weights[static_cast<std::size_t>(c)] = static_cast<float>(weight);
    mean_weight += f * weight;
  }
  for (auto& w : weights) w = static_cast<float>(w / mean_weight);
  return weights;
}

}  // namespace hardy::core
