#pragma once
// Optimizers update parameters in place from gradients that the caller has already averaged over
// the global batch, so an optimizer never talks to other ranks: every rank applies the same update
// to the same replica. All arithmetic runs through the Backend's element-wise kernels, so state
// lives wherever the backend keeps tensors (host or GPU memory).
//
// Notation, per parameter tensor w with gradient g, learning rate lr (from the schedule), and
// wd = OptimizerConfig::weight_decay when Parameter::weight_decay is true, else 0:
//
// sgd   g' = g + wd * w
//       v  = momentum * v + g'
//       w -= lr * v                          (nesterov: w -= lr * (g' + momentum * v))
//
// adam  g' = g + wd * w                      (L2 decay added to the gradient, not AdamW)
//       m  = beta1 * m + (1 - beta1) * g'
//       v  = beta2 * v + (1 - beta2) * g'^2
//       w -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps),  t = 1, 2, ...
//
// lars  (You, Gitman & Ginsburg 2017, "Large Batch Training of Convolutional Networks")
//       trust_ratio = lars_eta * ||w|| / (||g|| + wd * ||w|| + lars_eps)
//       local_lr    = lr * trust_ratio                    (larc_clip = false: LARS scaling)
//       local_lr    = lr * min(trust_ratio / lr, 1)       (larc_clip = true: NVIDIA apex LARC
//                   = min(trust_ratio, lr)                 clipping, never above the global lr)
//       local_lr    = lr when ||w|| = 0 or ||g|| = 0 (a trust ratio of 1 in either mode, as in
//                     apex: zero-initialised tensors and tensors without gradient signal take
//                     the plain global step instead of a zero or undefined one)
//       g' = g + wd * w
//       v  = momentum * v + local_lr * g'     (momentum accumulates the already scaled step)
//       w -= v                                (nesterov: w -= local_lr * g' + momentum * v)
//       Parameters with Parameter::weight_decay = false (biases, normalization scales and
//       shifts) are excluded from adaptation as usual for LARS: local_lr = lr and wd = 0.
//
// lamb  (You et al. 2020, "Large Batch Optimization for Deep Learning: Training BERT in 76
//       minutes"; as NVIDIA apex's FusedLAMB, which MLPerf HPC DeepCAM's reference trains with)
//       clip = max(||G|| / lamb_max_grad_norm, 1)   ||G||: the norm of all gradients together
//                                                   (lamb_max_grad_norm = 0: clip = 1)
//       g' = g / clip
//       m  = beta1 * m + (1 - beta1) * g'
//       v  = beta2 * v + (1 - beta2) * g'^2
//       u  = (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + wd * w   (decoupled decay)
//       trust_ratio = ||w|| / ||u||   (1 when either norm is 0, or when wd = 0 for the
//                                      parameter: apex's default use_nvlamb = false)
//       w -= lr * trust_ratio * u
//
// The norms are those of the whole parameter tensor (one trust ratio per tensor, not per layer
// group), computed with Backend::sum_squares.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/nn/parameter.hpp"

namespace hardy::core {

enum class OptimizerKind { sgd, lars, adam, lamb };

// "sgd", "lars", "adam", "lamb"; anything else throws InvalidArgument listing these.
OptimizerKind parse_optimizer_kind(std::string_view name);
std::string to_string(OptimizerKind kind);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::sgd;
  // Heavy-ball coefficient for sgd and lars, in [0, 1); 0 is plain gradient descent.
  float momentum = 0.9f;
  // L2 penalty coefficient added to the gradient (all kinds), >= 0. Applies only to parameters
  // whose Parameter::weight_decay is true.
  float weight_decay = 1e-4f;
  // Nesterov's look-ahead form of momentum (sgd and lars); requires momentum > 0.
  bool nesterov = false;
  // Adam's exponential decay rates of the first and second moment estimates, each in [0, 1).
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  // Adam's and LAMB's denominator guard against division by a vanishing second moment, > 0.
  float eps = 1e-8f;
  // LAMB: the gradients of all parameters together are scaled down to this norm when theirs is
  // larger (apex FusedLAMB's max_grad_norm, 1 by default); 0 turns the clipping off. >= 0.
  float lamb_max_grad_norm = 1.0f;
  // LARS trust coefficient: how far, relative to ||w||, one step may move a tensor, > 0.
  float lars_eta = 0.001f;
  // LARC clipping: use min(trust_ratio, lr) instead of lr * trust_ratio, so that the adaptive
  // rate only ever lowers a layer's learning rate (stable with warm-up and large base rates).
  bool larc_clip = true;
  // Guard in the trust ratio's denominator, >= 0.
  float lars_eps = 1e-9f;
};

// Throws InvalidArgument naming the first field outside its documented range.
void validate(const OptimizerConfig& config);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update to every parameter in params with learning rate lr (>= 0). State is
  // matched to parameters by name, so the span may list them in any order, but a name may appear
  // only once and must keep its element count from step to step. Every parameter needs a
  // gradient of the same element count. Increments steps_taken().
  // The model hands out pointers to parameters that its layers own.
  void step(std::span<Parameter* const> params, float lr);
  void step(std::span<Parameter> params, float lr);

  // Creates (zero-filled) the state of every parameter that has none yet, so that a checkpoint
  // restore can load into state_tensors() before the first step. step() does the same lazily.
  void initialize_state(std::span<Parameter* const> params);
  void initialize_state(std::span<Parameter> params);

  // Every state tensor, named "<kind-of-state>/<parameter name>" ("momentum/...", "adam_m/...",
  // "adam_v/..."), in the order the parameters were first seen; the pointers stay valid for the
  // optimizer's lifetime. A restore copies into them (Backend::copy) after initialize_state().
  virtual std::vector<std::pair<std::string, Tensor*>> state_tensors();

  long steps_taken() const { return steps_taken_; }
  // For checkpoint restore: Adam's bias correction depends on the step count.
  void set_steps_taken(long steps);

  const OptimizerConfig& config() const { return config_; }

 protected:
  Optimizer(const OptimizerConfig& config, Backend& backend, std::vector<std::string> state_kinds);

  // One parameter's update within step(), which has checked lr and every gradient and created
  // the missing state first, and counts the step after the last update.
  virtual void update(Parameter& param, float lr) = 0;
  // Called once per step() after those checks and before the first update(), with every
  // parameter of the step: for what depends on all gradients together (LAMB's global norm).
  virtual void prepare_step(std::span<Parameter* const> /*params*/) {}

  // The state tensors of one parameter, one per entry of state_kinds, in that order.
  std::span<Tensor> state_of(const Parameter& param);
  float decay_for(const Parameter& param) const {
    return param.weight_decay ? config_.weight_decay : 0.0f;
  }

  OptimizerConfig config_;
  Backend& backend_;

 private:
  struct ParameterState {
    std::string name;
    std::int64_t numel = 0;
    std::vector<Tensor> tensors;
    // begin_step() call that last saw this parameter, to reject a name listed twice.
    std::uint64_t last_seen_call = 0;
  };
  ParameterState& find_or_create_state(const Parameter& param);
  // Validates lr and each parameter's gradient, and creates missing state.
  void begin_step(std::span<Parameter* const> params, float lr);

  std::vector<std::string> state_kinds_;
  // ParameterState moves without reallocating its tensors vector, so Tensor pointers handed out
  // by state_tensors() survive growth of states_.
  std::vector<ParameterState> states_;
  std::unordered_map<std::string, std::size_t> state_index_by_name_;
  std::uint64_t begin_step_calls_ = 0;
  long steps_taken_ = 0;
};

// Throws InvalidArgument when the configuration is out of range (see validate).
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, Backend& backend);

}  // namespace hardy::core
