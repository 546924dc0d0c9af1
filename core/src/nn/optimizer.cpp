#include "hardy/core/nn/optimizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "hardy/core/support/error.hpp"

namespace hardy::core {

namespace {

constexpr std::array optimizer_kind_names{
    std::pair{OptimizerKind::sgd, "sgd"}, std::pair{OptimizerKind::lars, "lars"},
    std::pair{OptimizerKind::adam, "adam"}, std::pair{OptimizerKind::lamb, "lamb"}};

void require_in_unit_interval(float value, std::string_view field) {
  if (!(value >= 0.0f && value < 1.0f))
    throw InvalidArgument(fmt::format("optimizer {} must be in [0, 1), got {}", field, value));
}

}  // namespace

OptimizerKind parse_optimizer_kind(std::string_view name) {
  for (const auto& [kind, kind_name] : optimizer_kind_names)
    if (name == kind_name) return kind;
  std::vector<std::string_view> choices;
  for (const auto& entry : optimizer_kind_names) choices.emplace_back(entry.second);
  throw InvalidArgument(
      fmt::format("unknown optimizer '{}'; choose one of: {}", name, fmt::join(choices, ", ")));
}

std::string to_string(OptimizerKind kind) {
  for (const auto& [known_kind, kind_name] : optimizer_kind_names)
    if (kind == known_kind) return kind_name;
  throw Error(fmt::format("unknown OptimizerKind {}", static_cast<int>(kind)));
}

void validate(const OptimizerConfig& config) {
  require_in_unit_interval(config.momentum, "momentum");
  require_in_unit_interval(config.beta1, "beta1");
  require_in_unit_interval(config.beta2, "beta2");
  // Negated comparisons so that NaN fails them too.
  if (!(config.weight_decay >= 0.0f) || std::isinf(config.weight_decay))
    throw InvalidArgument(
        fmt::format("optimizer weight_decay must be finite and >= 0, got {}", config.weight_decay));
  if (!(config.eps > 0.0f) || std::isinf(config.eps))
    throw InvalidArgument(fmt::format("optimizer eps must be finite and > 0, got {}", config.eps));
  if (!(config.lars_eta > 0.0f) || std::isinf(config.lars_eta))
    throw InvalidArgument(
        fmt::format("optimizer lars_eta must be finite and > 0, got {}", config.lars_eta));
  if (!(config.lamb_max_grad_norm >= 0.0f) || std::isinf(config.lamb_max_grad_norm))
    throw InvalidArgument(fmt::format(
        "optimizer lamb_max_grad_norm must be finite and >= 0, got {}", config.lamb_max_grad_norm));
  if (!(config.lars_eps >= 0.0f) || std::isinf(config.lars_eps))
    throw InvalidArgument(
        fmt::format("optimizer lars_eps must be finite and >= 0, got {}", config.lars_eps));
  if (config.nesterov &&
      (config.kind == OptimizerKind::sgd || config.kind == OptimizerKind::lars) &&
      config.momentum == 0.0f)
    throw InvalidArgument("optimizer nesterov needs momentum > 0");
}

// ---- Optimizer ----

Optimizer::Optimizer(const OptimizerConfig& config, Backend& backend,
                     std::vector<std::string> state_kinds)
    : config_(config), backend_(backend), state_kinds_(std::move(state_kinds)) {
  validate(config_);
}

void Optimizer::initialize_state(std::span<Parameter* const> params) {
  for (const Parameter* param : params) find_or_create_state(*param);
}

std::vector<std::pair<std::string, Tensor*>> Optimizer::state_tensors() {
  std::vector<std::pair<std::string, Tensor*>> named;
  named.reserve(states_.size() * state_kinds_.size());
  for (ParameterState& state : states_)
    for (std::size_t k = 0; k < state_kinds_.size(); ++k)
      named.emplace_back(state_kinds_[k] + "/" + state.name, &state.tensors[k]);
  return named;
}

void Optimizer::step(std::span<Parameter* const> params, float lr) {
  begin_step(params, lr);
  prepare_step(params);
  for (Parameter* param : params) update(*param, lr);
  ++steps_taken_;
}

void Optimizer::step(std::span<Parameter> params, float lr) {
  const auto pointers = pointers_to(params);
  step(std::span<Parameter* const>(pointers), lr);
}

void Optimizer::initialize_state(std::span<Parameter> params) {
  for (const Parameter& param : params) find_or_create_state(param);
}

void Optimizer::set_steps_taken(long steps) {
  if (steps < 0)
    throw InvalidArgument(fmt::format("optimizer step count must be >= 0, got {}", steps));
  steps_taken_ = steps;
}

Optimizer::ParameterState& Optimizer::find_or_create_state(const Parameter& param) {
  if (!param.value.defined())
    throw InvalidArgument(fmt::format("parameter '{}' has no value tensor", param.name));
  if (auto found = state_index_by_name_.find(param.name); found != state_index_by_name_.end()) {
    ParameterState& state = states_[found->second];
    if (state.numel != param.value.numel())
      throw InvalidArgument(fmt::format(
          "parameter '{}' is now {} but its optimizer state was created for {} elements",
          param.name, param.value.describe(), state.numel));
    return state;
  }
  ParameterState state{.name = param.name, .numel = param.value.numel(), .tensors = {}};
  for (std::size_t k = 0; k < state_kinds_.size(); ++k) {
    Tensor tensor = backend_.empty(param.value.dims(), DType::f32, param.value.layout());
    backend_.fill(tensor, 0.0f);
    state.tensors.push_back(std::move(tensor));
  }
  state_index_by_name_.emplace(param.name, states_.size());
  states_.push_back(std::move(state));
  return states_.back();
}

std::span<Tensor> Optimizer::state_of(const Parameter& param) {
  return states_[state_index_by_name_.at(param.name)].tensors;
}

void Optimizer::begin_step(std::span<Parameter* const> params, float lr) {
  if (!(lr >= 0.0f) || std::isinf(lr))
    throw InvalidArgument(fmt::format("learning rate must be finite and >= 0, got {}", lr));
  // All checks happen before any parameter changes, so a rejected step leaves the model intact.
  ++begin_step_calls_;
  for (const Parameter* param_pointer : params) {
    const Parameter& param = *param_pointer;
    ParameterState& state = find_or_create_state(param);
    if (state.last_seen_call == begin_step_calls_)
      throw InvalidArgument(
          fmt::format("parameter '{}' is listed twice in one optimizer step", param.name));
    state.last_seen_call = begin_step_calls_;
    if (!param.grad.defined())
      throw InvalidArgument(fmt::format("parameter '{}' has no gradient", param.name));
    if (param.grad.numel() != param.value.numel())
      throw InvalidArgument(fmt::format("parameter '{}' is {} but its gradient is {}", param.name,
                                        param.value.describe(), param.grad.describe()));
  }
}

namespace {

class SgdOptimizer final : public Optimizer {
 public:
  SgdOptimizer(const OptimizerConfig& config, Backend& backend)
      : Optimizer(config, backend, {"momentum"}) {}

  void update(Parameter& param, float lr) override {
    backend_.sgd_update(param.value, param.grad, state_of(param)[0],
                        {.lr = lr,
                         .momentum = config_.momentum,
                         .weight_decay = decay_for(param),
                         .nesterov = config_.nesterov});
  }
};

class AdamOptimizer final : public Optimizer {
 public:
  AdamOptimizer(const OptimizerConfig& config, Backend& backend)
      : Optimizer(config, backend, {"adam_m", "adam_v"}) {}

  void update(Parameter& param, float lr) override {
    std::span<Tensor> moments = state_of(param);
    backend_.adam_update(param.value, param.grad, moments[0], moments[1],
                         {.lr = lr,
                          .beta1 = config_.beta1,
                          .beta2 = config_.beta2,
                          .eps = config_.eps,
                          .weight_decay = decay_for(param),
                          .step = steps_taken() + 1});  // counted after the step's updates
  }
};

class LarsOptimizer final : public Optimizer {
 public:
  LarsOptimizer(const OptimizerConfig& config, Backend& backend)
      : Optimizer(config, backend, {"momentum"}) {}

  void update(Parameter& param, float lr) override {
    const float local_lr = local_learning_rate(param, lr);
    const float weight_decay = decay_for(param);
    // sgd_update computes v = momentum * v + (g~ + wd~ * w); w -= 1 * v. Feeding it
    // g~ = local_lr * g and wd~ = local_lr * wd makes that v = momentum * v + local_lr * g'.
    // The scaled gradient goes to scratch so that the caller's gradient stays as it was.
    Tensor& scaled_grad = scratch_for(param.grad.numel());
    backend_.fill(scaled_grad, 0.0f);
    backend_.axpy(local_lr, param.grad, scaled_grad);
    backend_.sgd_update(param.value, scaled_grad, state_of(param)[0],
                        {.lr = 1.0f,
                         .momentum = config_.momentum,
                         .weight_decay = local_lr * weight_decay,
                         .nesterov = config_.nesterov});
  }

 private:
  float local_learning_rate(const Parameter& param, float lr) {
    if (!param.weight_decay) return lr;
    const double weight_norm = std::sqrt(backend_.sum_squares(param.value));
    const double grad_norm = std::sqrt(backend_.sum_squares(param.grad));
    if (weight_norm == 0.0 || grad_norm == 0.0) return lr;
    const double trust_ratio =
        config_.lars_eta * weight_norm /
        (grad_norm + static_cast<double>(config_.weight_decay) * weight_norm + config_.lars_eps);
    return static_cast<float>(config_.larc_clip ? std::min(trust_ratio, static_cast<double>(lr))
                                                : lr * trust_ratio);
  }

  // The element-wise kernels only need matching element counts, so one flat scratch tensor per
  // distinct size serves every parameter of that size.
  Tensor& scratch_for(std::int64_t numel) {
    auto [it, inserted] = scratch_by_numel_.try_emplace(numel);
    if (inserted) it->second = backend_.empty({numel}, DType::f32, Layout::flat);
    return it->second;
  }

  std::map<std::int64_t, Tensor> scratch_by_numel_;
};

class LambOptimizer final : public Optimizer {
 public:
  LambOptimizer(const OptimizerConfig& config, Backend& backend)
      : Optimizer(config, backend, {"lamb_m", "lamb_v"}) {}

 protected:
  void prepare_step(std::span<Parameter* const> params) override {
    grad_scale_ = 1.0f;
    if (config_.lamb_max_grad_norm == 0.0f) return;
    double squares = 0;
    for (const Parameter* param : params) squares += backend_.sum_squares(param->grad);
    const double norm = std::sqrt(squares);
    if (norm > config_.lamb_max_grad_norm)
      grad_scale_ = static_cast<float>(config_.lamb_max_grad_norm / norm);
  }

  void update(Parameter& param, float lr) override {
    std::span<Tensor> moments = state_of(param);
    // The clipped gradient, in scratch so that the caller's gradient stays as it was.
    Tensor& grad = scratch_for(param.grad.numel(), 0);
    backend_.fill(grad, 0.0f);
    backend_.axpy(grad_scale_, param.grad, grad);
    // adam_update with lr 1 and no decay, applied to a zero tensor, leaves in it minus Adam's
    // bias-corrected direction m^ / (sqrt(v^) + eps), and updates the moments as LAMB does.
    Tensor& update_step = scratch_for(param.grad.numel(), 1);
    backend_.fill(update_step, 0.0f);
    backend_.adam_update(update_step, grad, moments[0], moments[1],
                         {.lr = 1.0f,
                          .beta1 = config_.beta1,
                          .beta2 = config_.beta2,
                          .eps = config_.eps,
                          .weight_decay = 0.0f,
                          .step = steps_taken() + 1});
    // update_step = -(direction + wd * w) = -u.
    const float weight_decay = decay_for(param);
    if (weight_decay != 0.0f) backend_.axpy(-weight_decay, param.value, update_step);
    double trust_ratio = 1.0;
    if (weight_decay != 0.0f) {
      const double weight_norm = std::sqrt(backend_.sum_squares(param.value));
      const double update_norm = std::sqrt(backend_.sum_squares(update_step));
      if (weight_norm > 0.0 && update_norm > 0.0) trust_ratio = weight_norm / update_norm;
    }
    backend_.axpy(static_cast<float>(lr * trust_ratio), update_step, param.value);
  }

 private:
  // Two flat scratch tensors per distinct size (the clipped gradient, the update).
  Tensor& scratch_for(std::int64_t numel, int which) {
    auto [it, inserted] = scratch_by_numel_.try_emplace({numel, which});
    if (inserted) it->second = backend_.empty({numel}, DType::f32, Layout::flat);
    return it->second;
  }
  std::map<std::pair<std::int64_t, int>, Tensor> scratch_by_numel_;
  float grad_scale_ = 1.0f;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, Backend& backend) {
  switch (config.kind) {
    case OptimizerKind::sgd:
      return std::make_unique<SgdOptimizer>(config, backend);
    case OptimizerKind::lars:
      return std::make_unique<LarsOptimizer>(config, backend);
    case OptimizerKind::adam:
      return std::make_unique<AdamOptimizer>(config, backend);
    case OptimizerKind::lamb:
      return std::make_unique<LambOptimizer>(config, backend);
  }
  throw InvalidArgument(fmt::format("unknown optimizer kind {}", static_cast<int>(config.kind)));
}

}  // namespace hardy::core
