#include "hardy/checkpoint/scalar_fields.hpp"

#include <type_traits>

#include "hardy/core/support/error.hpp"

namespace hardy::checkpoint {

namespace {

// A member's value as stored, and back: integers widen to 64 bits, the decay is its name.
template <class Stored, class Member>
Stored to_stored(const Member& member) {
  if constexpr (std::is_same_v<Member, core::LrSchedule::Decay>)
    return core::to_string(member);
  else
    return static_cast<Stored>(member);
}

template <class Member, class Stored>
Member from_stored(const Stored& value) {
  if constexpr (std::is_same_v<Member, core::LrSchedule::Decay>)
    return core::parse_lr_decay(value);
  else
    return static_cast<Member>(value);
}

// One table entry; `Access` is a captureless lambda that returns the member of a (const or not)
// TrainingState, so that get and set name the member once.
template <class Stored, class Access>
ScalarField field(std::string_view path, std::string_view json_pointer,
                  std::string_view description, Access) {
  static_assert(std::is_default_constructible_v<Access>, "Access must capture nothing");
  return {
      path, json_pointer, description,
      [](const TrainingState& state) -> ScalarValue { return to_stored<Stored>(Access{}(state)); },
      [](TrainingState& state, const ScalarValue& value) {
        auto& member = Access{}(state);
        member = from_stored<std::remove_cvref_t<decltype(member)>>(std::get<Stored>(value));
      }};
}

// A field that older checkpoints lack (see ScalarField::optional).
template <class Stored, class Access>
ScalarField optional_field(std::string_view path, std::string_view json_pointer,
                           std::string_view description, Access access) {
  ScalarField made = field<Stored>(path, json_pointer, description, access);
  made.optional = true;
  return made;
}

using I64 = std::int64_t;
using U64 = std::uint64_t;
using Strings = std::vector<std::string>;

}  // namespace

std::span<const ScalarField> scalar_fields() {
  // The order is the order of the datasets in a checkpoint (and in its manifest): keep it.
  static const std::vector<ScalarField> table = {
      field<I64>(
          "/train/step", "/step", "optimizer steps completed; a resumed job runs step + 1 next",
          [](auto& s) -> auto& { return s.step; }),
      field<I64>(
          "/train/epoch", "/epoch", "epoch of the last batch trained on",
          [](auto& s) -> auto& { return s.epoch; }),
      field<double>(
          "/train/loss", "/loss", "loss of the last step", [](auto& s) -> auto& { return s.loss; }),
      field<U64>(
          "/train/sampler/seed", "/sampler/seed", "seed of the epoch sampler's permutations",
          [](auto& s) -> auto& { return s.sampler.seed; }),
      field<I64>(
          "/train/sampler/epoch", "/sampler/epoch", "epoch of the next sample",
          [](auto& s) -> auto& { return s.sampler.epoch; }),
      field<I64>(
          "/train/sampler/cursor", "/sampler/cursor",
          "position of the next sample in its epoch's permutation",
          [](auto& s) -> auto& { return s.sampler.cursor; }),
      field<U64>(
          "/train/rng/seed", "/rng_seed",
          "the job's seed (the training loop has no other random state)",
          [](auto& s) -> auto& { return s.rng_seed; }),
      field<float>(
          "/train/lr/base_lr", "/lr_schedule/base_lr", "learning rate after warm-up",
          [](auto& s) -> auto& { return s.lr_schedule.base_lr; }),
      field<I64>(
          "/train/lr/warmup_steps", "/lr_schedule/warmup_steps", "steps of linear warm-up",
          [](auto& s) -> auto& { return s.lr_schedule.warmup_steps; }),
      field<I64>(
          "/train/lr/total_steps", "/lr_schedule/total_steps", "steps the schedule spans",
          [](auto& s) -> auto& { return s.lr_schedule.total_steps; }),
      field<std::string>(
          "/train/lr/decay", "/lr_schedule/decay", "decay after warm-up",
          [](auto& s) -> auto& { return s.lr_schedule.decay; }),
      field<float>(
          "/train/lr/final_fraction", "/lr_schedule/final_fraction",
          "the rate at the end as a fraction of base_lr",
          [](auto& s) -> auto& { return s.lr_schedule.final_fraction; }),
      field<float>(
          "/train/lr/poly_power", "/lr_schedule/poly_power", "exponent of the polynomial decay",
          [](auto& s) -> auto& { return s.lr_schedule.poly_power; }),
      field<I64>(
          "/train/lr/step_every", "/lr_schedule/step_every", "steps between step decays",
          [](auto& s) -> auto& { return s.lr_schedule.step_every; }),
      field<float>(
          "/train/lr/step_gamma", "/lr_schedule/step_gamma", "factor of each step decay",
          [](auto& s) -> auto& { return s.lr_schedule.step_gamma; }),
      field<float>(
          "/train/loss_scale/scale", "/loss_scale/scale",
          "mixed-precision loss scale (1 when not in use)",
          [](auto& s) -> auto& { return s.loss_scale; }),
      field<I64>(
          "/train/loss_scale/good_steps", "/loss_scale/good_steps",
          "steps since the loss scale last changed",
          [](auto& s) -> auto& { return s.loss_scale_good_steps; }),
      field<std::string>(
          "/train/optimizer/kind", "/optimizer/kind", "sgd, lars or adam",
          [](auto& s) -> auto& { return s.optimizer_kind; }),
      field<I64>(
          "/train/optimizer/steps", "/optimizer/steps",
          "the optimizer's step count (Adam's bias correction)",
          [](auto& s) -> auto& { return s.optimizer_steps; }),
      field<std::string>(
          "/job/config", "/config", "the effective configuration, as in the run's config.ini",
          [](auto& s) -> auto& { return s.config_ini; }),
      field<I64>(
          "/job/world_size", "/world_size", "ranks of the job that wrote it",
          [](auto& s) -> auto& { return s.world_size; }),
      field<std::string>(
          "/job/hardy_version", "/hardy_version", "the writer's version",
          [](auto& s) -> auto& { return s.hardy_version; }),
      field<Strings>(
          "/job/hosts", "/hosts", "host name of each rank",
          [](auto& s) -> auto& { return s.hosts; }),
      field<double>(
          "/job/unix_time", "/unix_time", "when the state was captured, seconds since 1970 (UTC)",
          [](auto& s) -> auto& { return s.unix_time; }),
      optional_field<std::string>(
          "/job/run_id", "/run_id",
          "the run directory's random id (its run_id file); empty: written before run ids",
          [](auto& s) -> auto& { return s.run_id; }),
      optional_field<std::string>(
          "/job/config_hash", "/config_hash",
          "hash of what a resume must match (model shape, optimizer, dataset and its size)",
          [](auto& s) -> auto& { return s.config_hash; }),
      optional_field<std::string>(
          "/job/precision", "/precision",
          "the precision the writer trained in: f32, bf16 or fp16 (its parameters and optimizer "
          "state are f32 in every one); empty: written before hardy recorded it",
          [](auto& s) -> auto& { return s.precision; }),
      optional_field<std::string>(
          "/job/committed_lines", "/committed_lines",
          "the step's lines of metrics.jsonl and samples.jsonl as JSON {\"metrics\": ..., "
          "\"audit\": ...}, for a restore to log a step its writer died before logging; empty: "
          "not recorded",
          [](auto& s) -> auto& { return s.committed_lines; }),
  };
  return table;
}

}  // namespace hardy::checkpoint
