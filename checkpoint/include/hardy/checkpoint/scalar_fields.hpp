#pragma once
// The one list of a TrainingState's scalars (everything but the tensors): for each, the HDF5
// dataset that holds it, how it is stored, where `hardy ckpt inspect --json` puts it, and how to
// read and set it in a TrainingState. Writing a checkpoint, reading one, the broadcast byte
// stream and `hardy ckpt inspect` all go through this table, so a field added here is written,
// read, sent and shown everywhere (tests/checkpoint/test_scalar_fields.cpp checks that).
// docs/checkpoint-format.md describes the same datasets for people.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "hardy/checkpoint/training_state.hpp"

namespace hardy::checkpoint {

// The groups of the tensor datasets: "/model/<name>", "/optimizer/<kind>/<parameter name>".
inline constexpr std::string_view kModelGroup = "/model/";
inline constexpr std::string_view kOptimizerGroup = "/optimizer/";

// A scalar as stored: i64, u64, f32, f64, a string, or a list of strings (shape [n]).
using ScalarValue =
    std::variant<std::int64_t, std::uint64_t, float, double, std::string, std::vector<std::string>>;

struct ScalarField {
  std::string_view path;          // the HDF5 dataset, "/train/lr/base_lr"
  std::string_view json_pointer;  // in `hardy ckpt inspect --json`: "/lr_schedule/base_lr"
  std::string_view description;   // one line for people
  ScalarValue (*get)(const TrainingState& state);
  // Throws InvalidArgument when the value does not fit the member (an unknown decay name);
  // a value of another alternative than get() returns is a programming error (bad_variant_access).
  void (*set)(TrainingState& state, const ScalarValue& value);
  // Added after checkpoints without it were written: a file that lacks it still reads, and the
  // member keeps its default (docs/checkpoint-format.md says what that means for each).
  bool optional = false;
};

// Every scalar of a TrainingState, in the order a checkpoint stores them (/train, then /job).
std::span<const ScalarField> scalar_fields();

}  // namespace hardy::checkpoint
