#pragma once
// The training and held-out samples a job reads.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/data/climatenet.hpp"
#include "hardy/core/data/cosmology_data.hpp"
#include "hardy/core/data/deepcam.hpp"

namespace hardy::core {

struct DataSpec {
  bool synthetic = true;
  std::filesystem::path dataset;  // when not synthetic
  std::size_t samples = 1024;     // synthetic training-set size
  std::size_t eval_samples = 64;  // held out
  SampleShape shape;              // synthetic sample shape (a regression one: SyntheticCosmology)
  std::uint64_t seed = 1;
  // A dataset in the published DeepCAM layout (ROOT/stats.h5, ROOT/train/, ROOT/validation/):
  // label set, channels, crop and downsampling. Ignored for the other sources.
  DeepCamOptions deepcam;
  // A dataset in the ClimateNet layout (ROOT/train/*.nc, ROOT/test/): variables, crop,
  // downsampling and the normalisation statistics.
  ClimateNetOptions climatenet;
  // Training samples kept in memory after their first load, up to this many bytes per process
  // (sample_cache.hpp); 0 keeps none.
  std::size_t cache_bytes = 0;
};

struct DataSources {
  std::unique_ptr<SampleSource> storage;           // owns the samples
  std::unique_ptr<SampleSource> train;             // a view of storage
  std::unique_ptr<SampleSource> held_out;          // null when eval_samples is 0
  std::unique_ptr<SampleSource> held_out_storage;  // when held out from another split
};

// Synthetic: samples [0, samples) train and the next eval_samples are held out (each sample is
// a pure function of seed and index, so these are unseen). A dataset of splits (DeepCAM,
// CosmoFlow or ClimateNet layout): train/ trains and the first eval_samples of held_out_split() are
// held out. Another dataset directory: the last eval_samples samples are held out. Throws
// InvalidArgument when nothing would be left to train, or when the samples do not have the channels
// the model takes.
DataSources open_data(const DataSpec& spec);

// The layout of a dataset directory: DeepCAM (ROOT/stats.h5, ROOT/train/*.h5), CosmoFlow
// (ROOT/train/*.h5 without stats.h5, or ROOT/train/*_data.npy; cosmoflow.hpp), ClimateNet
// (ROOT/train/*.nc), packed by `hardy data pack` (ROOT/packed.json, packed_samples.hpp) or none
// of them (a directory of `hardy data generate` files, or not a dataset).
enum class DatasetLayout { deepcam, climatenet, packed, cosmoflow, other };
DatasetLayout dataset_layout(const std::filesystem::path& root);
// One split ("train", "validation" or "test") of a DeepCAM, CosmoFlow, ClimateNet or packed
// dataset, read with the spec's options for its layout (a packed one has its window applied
// already). Throws InvalidArgument for any other dataset or a missing split.
std::unique_ptr<SampleSource> open_split(const DataSpec& spec, std::string_view split);
// The split scored by default: validation/ (DeepCAM; ClimateNet, CosmoFlow and packed when the
// directory exists), else test/ (the ClimateNet release has train/ and test/ only).
std::string held_out_split(const std::filesystem::path& root);

// Given weights are used as they are; without, each class's frequency over the first samples to
// the power `frequency_power` (-0.5, the inverse square root, unless a training recipe says
// otherwise: DeepCAM's -1/8, the Gordon Bell Tiramisu's -1), normalised so that the average pixel
// weight is 1. Frequencies below 1e-4 count as 1e-4.
std::vector<float> resolve_class_weights(const std::optional<std::vector<float>>& given,
                                         const SampleSource& source, int classes,
                                         double frequency_power = -0.5);

}  // namespace hardy::core
