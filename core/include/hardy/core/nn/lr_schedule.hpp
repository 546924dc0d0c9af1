#pragma once
// Learning rate as a function of the optimizer step (0-based), the same on every rank.
//
// Warm-up (Goyal et al. 2017, "Accurate, Large Minibatch SGD"): for step < warmup_steps (or,
// when warmup_fraction > 0, warmup_steps = round(warmup_fraction * total_steps)),
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
//   multistep: lr = base_lr * milestone_factors[i] for the last i with step >= milestone_step(i),
//              base_lr before the first milestone; a milestone below 1 is a fraction of the run
//              (milestone_step = round(milestones[i] * total_steps)), one of 1 or more a step
//              (MLPerf HPC CosmoFlow's decay_schedule, in epochs of a fixed-length run, becomes
//              fractions; DeepCAM's MultiStepLR milestones are steps)
// Steps at or past total_steps keep the final value (floor for cosine and poly).
#include <string>
#include <string_view>
#include <vector>

namespace hardy::core {

struct LrSchedule {
  enum class Decay { none, cosine, poly, step, multistep };

  // Peak learning rate, reached at the end of warm-up; finite and >= 0.
  float base_lr = 0.1f;
  // Steps of linear warm-up; 0 starts directly at base_lr. At most total_steps.
  long warmup_steps = 0;
  // When > 0, the warm-up is this fraction of total_steps instead (rounded), in [0, 1].
  float warmup_fraction = 0.0f;
  // true: warmup_steps may exceed total_steps, and a run shorter than its warm-up ends inside it
  // (a training recipe's warm-up, sized for the reference's run); false: that is an error.
  bool warmup_may_outlast_run = false;
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
  // multistep: where the rate changes, ascending: fractions of total_steps in (0, 1) or whole
  // steps >= 1; and the rate from each of them on as a factor of base_lr, finite and > 0 (the
  // same count, at least one).
  std::vector<double> milestones;
  std::vector<float> milestone_factors;

  // Throws InvalidArgument naming the first field outside its documented range.
  void validate() const;
  // The warm-up's length in steps: warmup_steps, or warmup_fraction of total_steps.
  long warmup() const;
  // Milestone i (multistep) as a step.
  long milestone_step(std::size_t i) const;
  // The learning rate for optimizer step `step` (>= 0). Validates first, so a schedule that
  // was never validated cannot produce a meaningless rate.
  float at(long step) const;
};

// "none", "cosine", "poly", "step", "multistep"; anything else throws InvalidArgument listing
// these.
LrSchedule::Decay parse_lr_decay(std::string_view name);
std::string to_string(LrSchedule::Decay decay);

}  // namespace hardy::core
