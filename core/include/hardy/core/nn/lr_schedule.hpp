#pragma once
// Learning rate as a function of the optimizer step (0-based), the same on every rank.
//
// Warm-up (Goyal et al. 2017, "Accurate, Large Minibatch SGD"): for step < warmup_steps,
//   lr = base_lr * (step + 1) / warmup_steps
// i.e. base_lr / warmup_steps at step 0, rising linearly to base_lr at step warmup_steps - 1,
// so that a large-batch run never takes its first steps at the full rate.
//
// Decay, for step >= warmup_steps, over the remaining decay_steps = total_steps - warmup_steps:
//   progress = min((step - warmup_steps) / decay_steps, 1)   (1 when decay_steps = 0)
//   floor    = final_fraction * base_lr
//   none:    lr = base_lr
//   cosine:  lr = floor + (base_lr - floor) * (1 + cos(pi * progress)) / 2
//   poly:    lr = floor + (base_lr - floor) * (1 - progress)^poly_power
//   step:    lr = base_lr * step_gamma^floor((step - warmup_steps) / step_every)
// Steps at or past total_steps keep the final value (floor for cosine and poly).
#include <string>
#include <string_view>

namespace hardy::core {

struct LrSchedule {
  enum class Decay { none, cosine, poly, step };

  // Peak learning rate, reached at the end of warm-up; finite and >= 0.
  float base_lr = 0.1f;
  // Steps of linear warm-up; 0 starts directly at base_lr. At most total_steps.
  long warmup_steps = 0;
  // Length of the whole run in optimizer steps, warm-up included; > 0 (0 marks "not set yet"
  // and fails validation).
  long total_steps = 0;
  Decay decay = Decay::cosine;
  // cosine and poly: the rate at total_steps as a fraction of base_lr, in [0, 1].
  float final_fraction = 0.0f;
  // poly: exponent of (1 - progress); > 0 (1 is linear decay).
  float poly_power = 2.0f;
  // step: the rate is multiplied by step_gamma every step_every steps after warm-up; > 0 when
  // decay is step (0 marks "not set yet").
  long step_every = 0;
  // step: the factor per period, in (0, 1].
  float step_gamma = 0.1f;

  // Throws InvalidArgument naming the first field outside its documented range.
  void validate() const;
  // The learning rate for optimizer step `step` (>= 0). Validates first, so a schedule that
  // was never validated cannot produce a meaningless rate.
  float at(long step) const;
};

// "none", "cosine", "poly", "step"; anything else throws InvalidArgument listing these.
LrSchedule::Decay parse_lr_decay(std::string_view name);
std::string to_string(LrSchedule::Decay decay);

}  // namespace hardy::core
