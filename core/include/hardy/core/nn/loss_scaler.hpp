#pragma once
// Dynamic loss scaling for fp16 training (Micikevicius et al., 2018; PyTorch's GradScaler):
// the loss gradient is multiplied by scale() so that small gradients survive fp16's narrow
// exponent range, gradients are divided by it again before the optimizer sees them, and a step
// whose gradients overflowed (Inf or NaN) is skipped with the scale lowered. After
// growth_interval good steps in a row the scale grows again. bf16 shares fp32's exponent range,
// so bf16 and fp32 training use a static scale of 1 (still skipping non-finite steps).
//
// One step, with the scaler owned by the trainer:
//   softmax_cross_entropy(..., grad_scale * scaler.scale(), dlogits); backward; allreduce;
//   const bool overflow = scaler.unscale(backend, params);
//   if (scaler.update(overflow)) optimizer.step(params, lr);
// Every rank sees the same (allreduced) gradients, so every rank takes the same decision.
#include <span>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/nn/parameter.hpp"

namespace hardy::core {

struct LossScalerConfig {
  bool dynamic = true;             // false: the scale stays initial_scale
  float initial_scale = 65536.0f;  // 2^16, PyTorch's GradScaler default
  float growth_factor = 2.0f;      // after growth_interval good steps in a row
  float backoff_factor = 0.5f;     // after an overflow
  long growth_interval = 2000;
  float min_scale = 1.0f;
  float max_scale = 16777216.0f;  // 2^24: beyond it fp32 master gradients lose nothing more

  // The configuration for a precision: dynamic from 2^16 for f16, a static 1 otherwise.
  static LossScalerConfig for_activations(DType activation_dtype);
  void validate() const;  // throws InvalidArgument naming the bad field
};

// What a checkpoint needs to continue with the same scale.
struct LossScalerState {
  float scale = 1.0f;
  long good_steps = 0;     // consecutive steps without overflow since the last change
  long skipped_steps = 0;  // over the whole run
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerConfig config = {});

  float scale() const { return state_.scale; }
  const LossScalerConfig& config() const { return config_; }
  const LossScalerState& state() const { return state_; }
  void restore(const LossScalerState& state);

  // Divides every parameter gradient by scale() (exact: the scale is a power of two when the
  // factors are) and returns whether any gradient holds an Inf or NaN.
  bool unscale(Backend& backend, std::span<Parameter* const> params) const;

  // Records the outcome of a step and returns whether its update should be applied: false
  // (skip) after an overflow, which also lowers the scale (not below min_scale) and restarts
  // the count of good steps; true otherwise, and every growth_interval-th good step in a row
  // raises the scale (not above max_scale).
  bool update(bool found_non_finite);

 private:
  LossScalerConfig config_;
  LossScalerState state_;
};

}  // namespace hardy::core
