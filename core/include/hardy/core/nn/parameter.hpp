#pragma once
// Parameter: a trainable tensor, its gradient and its name; and the replica digest over a list
// of them.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hardy/core/compute/tensor.hpp"

namespace hardy::core {

// A trainable tensor and its gradient, named by its path in the model ("encoder.stem.conv.weight")
// so that checkpoints and optimizers can address it.
// How Model::initialize draws a weight (biases start at 0, normalization scales at 1).
enum class WeightInit {
  kaiming_normal,  // std sqrt(2 / fan_in): hardy's ReLU networks, as PyTorch's kaiming_normal_
  glorot_uniform,  // U(-a, a), a = sqrt(6 / (fan_in + fan_out)): Keras's default, which
                   // CosmoFlow's reference uses (without normalization, the larger Kaiming
                   // weights saturate its tanh output from the first step)
};

struct Parameter {
  std::string name;
  Tensor value;
  Tensor grad;
  bool weight_decay = true;  // false for biases and normalization scales/shifts
  WeightInit init = WeightInit::kaiming_normal;
};

// Pointers to parameters held by value (tests, benchmarks); models hand out pointers already.
inline std::vector<Parameter*> pointers_to(std::span<Parameter> params) {
  std::vector<Parameter*> pointers;
  pointers.reserve(params.size());
  for (Parameter& p : params) pointers.push_back(&p);
  return pointers;
}

class Backend;

// xxHash64 over the bytes of every parameter value, in order (device values are copied to the
// host through `backend`): equal digests on two ranks mean bit-identical replicas.
std::uint64_t parameter_digest(Backend& backend, std::span<Parameter* const> params);

}  // namespace hardy::core
