#pragma once
#include <string>

#include "hardy/core/tensor.hpp"

namespace hardy::core {

// A trainable tensor and its gradient, named by its path in the model ("encoder.stem.conv.weight")
// so that checkpoints and optimizers can address it.
struct Parameter {
  std::string name;
  Tensor value;
  Tensor grad;
  bool weight_decay = true;  // false for biases and normalization scales/shifts
};

}  // namespace hardy::core
