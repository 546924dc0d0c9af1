#pragma once
// A DeepLabV3+ small enough for unit tests on either backend (every part of the model is there:
// encoder, ASPP with two rates, decoder), `width` channels wide.
#include "hardy/core/nn/model.hpp"

namespace hardy::testing {

inline core::ModelConfig small_model_config(int width,
                                            core::NormKind norm = core::NormKind::group) {
  core::ModelConfig c;
  c.width = width;
  c.aspp_channels = width;
  c.aspp_rates = {1, 2};
  c.low_level_channels = width;
  c.decoder_channels = width;
  c.groups = 2;
  c.norm = norm;
  return c;
}

// A tiramisu with every part (dense blocks down and up, transitions, skips, dropout) on 3x3
// kernels and a few maps: inputs divide by 4.
inline core::ModelConfig small_tiramisu_config() {
  core::ModelConfig c;
  c.architecture = core::Architecture::tiramisu;
  c.dense_layers = {1, 2, 2};
  c.growth = 4;
  c.first_channels = 6;
  c.dense_kernel = 3;
  return c;
}

}  // namespace hardy::testing
