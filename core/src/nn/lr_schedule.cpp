#include "hardy/core/nn/lr_schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <utility>
#include <vector>

#include "hardy/core/support/error.hpp"

namespace hardy::core {

namespace {

constexpr std::array decay_names{
    std::pair{LrSchedule::Decay::none, "none"}, std::pair{LrSchedule::Decay::cosine, "cosine"},
    std::pair{LrSchedule::Decay::poly, "poly"}, std::pair{LrSchedule::Decay::step, "step"},
    std::pair{LrSchedule::Decay::multistep, "multistep"}};

}  // namespace

LrSchedule::Decay parse_lr_decay(std::string_view name) {
  for (const auto& [decay, decay_name] : decay_names)
    if (name == decay_name) return decay;
  std::vector<std::string_view> choices;
  for (const auto& entry : decay_names) choices.emplace_back(entry.second);
  throw InvalidArgument(fmt::format("unknown learning-rate decay '{}'; choose one of: {}", name,
                                    fmt::join(choices, ", ")));
}

std::string to_string(LrSchedule::Decay decay) {
  for (const auto& [known_decay, decay_name] : decay_names)
    if (decay == known_decay) return decay_name;
  throw Error(fmt::format("unknown LrSchedule::Decay {}", static_cast<int>(decay)));
}

void LrSchedule::validate() const {
  // Negated comparisons so that NaN fails them too.
  if (!(base_lr >= 0.0f) || std::isinf(base_lr))
    throw InvalidArgument(
        fmt::format("base learning rate must be finite and >= 0, got {}", base_lr));
  if (total_steps <= 0)
    throw InvalidArgument(fmt::format("total steps must be > 0, got {}", total_steps));
  if (!(warmup_fraction >= 0.0f && warmup_fraction <= 1.0f))
    throw InvalidArgument(
        fmt::format("warm-up fraction must be in [0, 1], got {}", warmup_fraction));
  if (warmup_steps < 0 || (warmup_steps > total_steps && !warmup_may_outlast_run))
    throw InvalidArgument(fmt::format("warm-up steps must be in [0, total steps = {}], got {}",
                                      total_steps, warmup_steps));
  if (!(final_fraction >= 0.0f && final_fraction <= 1.0f))
    throw InvalidArgument(
        fmt::format("learning-rate final fraction must be in [0, 1], got {}", final_fraction));
  if (decay == Decay::poly && (!(poly_power > 0.0f) || std::isinf(poly_power)))
    throw InvalidArgument(
        fmt::format("poly decay power must be finite and > 0, got {}", poly_power));
  if (decay == Decay::step && step_every <= 0)
    throw InvalidArgument(fmt::format("step decay period must be > 0 steps, got {}", step_every));
  if (decay == Decay::step && !(step_gamma > 0.0f && step_gamma <= 1.0f))
    throw InvalidArgument(fmt::format("step decay gamma must be in (0, 1], got {}", step_gamma));
  if (decay == Decay::multistep) {
    if (milestones.empty() || milestones.size() != milestone_factors.size())
      throw InvalidArgument(fmt::format(
          "multistep decay needs as many milestone factors as milestones, at least one (got {} "
          "milestones, {} factors)",
          milestones.size(), milestone_factors.size()));
    for (std::size_t i = 0; i < milestones.size(); ++i) {
      const double m = milestones[i];
      // Ascending as given; fractions of a short run may land on the same step (0.25 and 0.5 of
      // 2 steps both round to step 1), where the later factor applies, as at() reads them.
      const bool ascending = i == 0 || ((m < 1.0) == (milestones[i - 1] < 1.0)
                                            ? m > milestones[i - 1]
                                            : milestone_step(i) >= milestone_step(i - 1));
      if (!(m > 0.0) || std::isinf(m) || (m >= 1.0 && m != std::trunc(m)) || !ascending)
        throw InvalidArgument(fmt::format(
            "multistep milestones must be ascending fractions of the run in (0, 1) or whole "
            "steps >= 1, got {}",
            fmt::join(milestones, ",")));
      if (!(milestone_factors[i] > 0.0f) || std::isinf(milestone_factors[i]))
        throw InvalidArgument(
            fmt::format("multistep milestone factors must be finite and > 0, got {}",
                        fmt::join(milestone_factors, ",")));
    }
  }
}

long LrSchedule::milestone_step(std::size_t i) const {
  const double m = milestones.at(i);
  return m < 1.0 ? std::lround(m * static_cast<double>(total_steps)) : std::lround(m);
}

long LrSchedule::warmup() const {
  if (warmup_fraction > 0.0f)
    return std::lround(static_cast<double>(warmup_fraction) * static_cast<double>(total_steps));
  return warmup_steps;
}

float LrSchedule::at(long step) const {
  validate();
  if (step < 0) throw InvalidArgument(fmt::format("learning-rate step must be >= 0, got {}", step));
  const double base = base_lr;
  const long warmup_length = warmup();
  if (step < warmup_length)
    return static_cast<float>(base * static_cast<double>(step + 1) /
                              static_cast<double>(warmup_length));

  const long steps_after_warmup = std::min(step, total_steps) - warmup_length;
  const long decay_steps = total_steps - warmup_length;
  const double progress =
      decay_steps == 0 ? 1.0
                       : static_cast<double>(steps_after_warmup) / static_cast<double>(decay_steps);
  const double floor_lr = static_cast<double>(final_fraction) * base;
  switch (decay) {
    case Decay::none:
      return base_lr;
    case Decay::cosine:
      return static_cast<float>(floor_lr + (base - floor_lr) * 0.5 *
                                               (1.0 + std::cos(std::numbers::pi * progress)));
    case Decay::poly:
      return static_cast<float>(floor_lr +
                                (base - floor_lr) * std::pow(1.0 - progress, poly_power));
    case Decay::step:
      return static_cast<float>(
          base * std::pow(static_cast<double>(step_gamma), steps_after_warmup / step_every));
    case Decay::multistep: {
      double factor = 1.0;
      for (std::size_t i = 0; i < milestones.size(); ++i)
        if (step >= milestone_step(i)) factor = milestone_factors[i];
      return static_cast<float>(base * factor);
    }
  }
  throw Error(fmt::format("unknown LrSchedule::Decay {}", static_cast<int>(decay)));
}

}  // namespace hardy::core
