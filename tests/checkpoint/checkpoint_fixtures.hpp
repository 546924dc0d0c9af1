#pragma once
// Shared by the checkpoint tests: a small trained model with optimizer state, states with every
// scalar set, scratch directories, and byte-level damage to files.
#include <hdf5.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "hardy/checkpoint/training_state.hpp"
#include "hardy/core/compute/backend.hpp"
#include "hardy/core/nn/model.hpp"
#include "hardy/core/nn/optimizer.hpp"
#include "hardy/core/support/hdf5.hpp"
#include "hardy/core/support/random.hpp"
#include "scratch_directory.hpp"

namespace hardy::checkpoint::testing {

using hardy::testing::ScratchDirectory;

inline core::ModelConfig tiny_model_config(int width = 4) {
  core::ModelConfig config;
  config.width = width;
  config.aspp_channels = 4;
  config.aspp_rates = {1, 2};
  config.low_level_channels = 4;
  config.decoder_channels = 4;
  config.groups = 2;
  config.norm = core::NormKind::batch;  // so that the model has normalization buffers
  return config;
}

inline void fill_random(core::Backend& backend, core::Tensor& tensor, core::SplitMix64& rng) {
  core::Tensor host = core::Tensor::host(tensor.dims(), core::DType::f32, tensor.layout());
  for (float& value : host.f32()) value = static_cast<float>(rng.normal());
  backend.copy(host, tensor);
}

// A model and an optimizer that have taken `steps` steps on random gradients, with random
// normalization statistics: every tensor a checkpoint holds is non-trivial.
struct TrainedModel {
  TrainedModel(std::uint64_t seed, core::OptimizerKind kind = core::OptimizerKind::adam,
               int steps = 2, core::ModelConfig config = tiny_model_config())
      : backend(core::make_backend("cpu")), model(*backend, config) {
    model.initialize(seed);
    core::OptimizerConfig optimizer_config;
    optimizer_config.kind = kind;
    optimizer = core::make_optimizer(optimizer_config, *backend);
    core::SplitMix64 rng(seed * 7919 + 1);
    for (int s = 0; s < steps; ++s) {
      random_gradients(rng);
      optimizer->step(model.parameters(), 0.01f);
    }
    for (auto& [name, buffer] : model.buffers()) fill_random(*backend, *buffer, rng);
  }
  void random_gradients(core::SplitMix64& rng) {
    for (core::Parameter* p : model.parameters()) fill_random(*backend, p->grad, rng);
  }

  std::unique_ptr<core::Backend> backend;
  core::Model model;
  std::unique_ptr<core::Optimizer> optimizer;
};

// Sets every scalar of a state to a value other than its default.
inline void set_scalars(TrainingState& state, long step) {
  state.step = step;
  state.epoch = 3;
  state.sampler = {.seed = 42, .epoch = 3, .cursor = 17};
  state.rng_seed = 42;
  state.lr_schedule.base_lr = 0.25f;
  state.lr_schedule.warmup_steps = 5;
  state.lr_schedule.total_steps = 100;
  state.lr_schedule.decay = core::LrSchedule::Decay::poly;
  state.lr_schedule.final_fraction = 0.01f;
  state.lr_schedule.poly_power = 1.5f;
  state.lr_schedule.step_every = 7;
  state.lr_schedule.step_gamma = 0.5f;
  state.loss_scale = 1024.0f;
  state.loss_scale_good_steps = 12;
  state.loss = 0.6931471805599453;
  state.config_ini = "steps = 100\nlr = 0.25\n# a comment with UTF-8: \xc2\xb5m\n";
  state.world_size = 4;
  state.hosts = {"node-a", "node-a", "node-bb", "node-c"};
}

// A state without a model: `floats` values in one model tensor and one optimizer tensor.
inline TrainingState synthetic_state(long step, std::size_t floats = 1000) {
  TrainingState state;
  set_scalars(state, step);
  state.optimizer_kind = "sgd";
  state.optimizer_steps = step;
  NamedTensor weight{
      "layer.weight", {static_cast<std::int64_t>(floats)}, std::vector<float>(floats)};
  for (std::size_t i = 0; i < floats; ++i)
    weight.values[i] = static_cast<float>(step) + 0.001f * static_cast<float>(i);
  state.model.push_back(weight);
  weight.name = "momentum/layer.weight";
  state.optimizer.push_back(std::move(weight));
  state.unix_time = 1.7e9 + static_cast<double>(step);
  return state;
}

// Where a contiguous dataset's data starts in its file (H5Dget_offset).
inline std::uint64_t data_offset(const std::filesystem::path& file,
                                 const std::string& dataset_path) {
  namespace h5 = core::h5;
  h5::Handle handle = h5::open_file(file);
  h5::Handle dataset = h5::open_dataset(handle.id(), dataset_path);
  const haddr_t offset = H5Dget_offset(dataset.id());
  h5::check(static_cast<hid_t>(offset), "H5Dget_offset", dataset_path);
  return offset;
}

inline void flip_byte(const std::filesystem::path& file, std::uint64_t offset) {
  std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
  stream.seekg(static_cast<std::streamoff>(offset));
  char byte = 0;
  stream.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x5a);
  stream.seekp(static_cast<std::streamoff>(offset));
  stream.write(&byte, 1);
}

}  // namespace hardy::checkpoint::testing
