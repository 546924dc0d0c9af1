#include "hardy/core/nn/loss_scaler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "hardy/core/support/error.hpp"

namespace hardy::core {

LossScalerConfig LossScalerConfig::for_activations(DType activation_dtype) {
  LossScalerConfig config;
  if (activation_dtype != DType::f16) {
    config.dynamic = false;
    config.initial_scale = 1.0f;
  }
  return config;
}

void LossScalerConfig::validate() const {
  const auto positive = [](float v) { return std::isfinite(v) && v > 0.0f; };
  if (!positive(initial_scale) || !positive(min_scale) || !positive(max_scale) ||
      min_scale > max_scale)
    throw InvalidArgument(fmt::format(
        "loss scaler: scales must be positive and finite with min <= max (initial {}, min {}, "
        "max {})",
        initial_scale, min_scale, max_scale));
  if (dynamic && (initial_scale < min_scale || initial_scale > max_scale))
    throw InvalidArgument(fmt::format("loss scaler: initial scale {} is outside [{}, {}]",
                                      initial_scale, min_scale, max_scale));
  if (!(std::isfinite(growth_factor) && growth_factor > 1.0f))
    throw InvalidArgument(
        fmt::format("loss scaler: growth factor {} must exceed 1", growth_factor));
  if (!(backoff_factor > 0.0f && backoff_factor < 1.0f))
    throw InvalidArgument(
        fmt::format("loss scaler: backoff factor {} must lie in (0, 1)", backoff_factor));
  if (growth_interval < 1)
    throw InvalidArgument(
        fmt::format("loss scaler: growth interval {} must be at least 1", growth_interval));
}

LossScaler::LossScaler(LossScalerConfig config) : config_(config) {
  config_.validate();
  state_.scale = config_.initial_scale;
}

void LossScaler::restore(const LossScalerState& state) {
  if (!(std::isfinite(state.scale) && state.scale > 0.0f) || state.good_steps < 0 ||
      state.skipped_steps < 0)
    throw InvalidArgument(
        fmt::format("loss scaler: cannot restore scale {} with {} good and {} "
                    "skipped steps",
                    state.scale, state.good_steps, state.skipped_steps));
  state_ = state;
}

bool LossScaler::unscale(Backend& backend, std::span<Parameter* const> params) const {
  const float inverse = 1.0f / state_.scale;
  std::vector<const Tensor*> grads;
  for (Parameter* p : params) {
    if (!p->grad.defined()) continue;
    if (inverse != 1.0f) backend.scale(p->grad, inverse);
    grads.push_back(&p->grad);
  }
  // One check over all of them: on a GPU, one wait for the device per step.
  return backend.has_non_finite(grads);
}

bool LossScaler::update(bool found_non_finite) {
  if (found_non_finite) {
    ++state_.skipped_steps;
    state_.good_steps = 0;
    if (config_.dynamic)
      state_.scale = std::max(config_.min_scale, state_.scale * config_.backoff_factor);
    return false;
  }
  ++state_.good_steps;
  if (config_.dynamic && state_.good_steps >= config_.growth_interval) {
    state_.scale = std::min(config_.max_scale, state_.scale * config_.growth_factor);
    state_.good_steps = 0;
  }
  return true;
}

}  // namespace hardy::core
