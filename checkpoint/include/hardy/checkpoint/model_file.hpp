#pragma once
// A model file holds a trained model's parameters and normalization statistics, one dataset per
// tensor under /model, named by layer path (the same layout as a checkpoint's /model group), so
// that h5ls, h5dump and h5py read it without hardy.
#include <filesystem>
#include <functional>

#include "hardy/core/nn/model.hpp"

namespace hardy::checkpoint {

inline constexpr int kModelFileVersion = 1;

// Writes atomically: a temporary file is written, flushed and fsynced, then renamed over `path`.
void save_model(core::Model& model, const std::filesystem::path& path);
// Loads every parameter and buffer; throws InvalidArgument naming the file and the tensor when a
// tensor is missing or has another shape (a model built with another configuration).
void load_model(core::Model& model, const std::filesystem::path& path);

}  // namespace hardy::checkpoint
