#pragma once
// A TrainingState whose every scalar (checkpoint::scalar_fields()) differs from a default
// TrainingState's (numbers and strings also from each other's), so that a field lost or crossed
// on the way through a file, a broadcast or `hardy ckpt inspect` shows. Built from the table: a
// field added to it is covered without touching the tests.
#include <catch2/catch.hpp>
#include <string>
#include <type_traits>
#include <variant>

#include "hardy/checkpoint/scalar_fields.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::checkpoint::testing {

inline TrainingState distinct_scalars() {
  const TrainingState defaults;
  TrainingState state;
  int index = 0;
  for (const ScalarField& scalar : scalar_fields()) {
    ++index;
    const ScalarValue value = std::visit(
        [&](const auto& like) -> ScalarValue {
          using T = std::decay_t<decltype(like)>;
          if constexpr (std::is_same_v<T, std::string>)
            return "value-" + std::to_string(index);
          else if constexpr (std::is_same_v<T, std::vector<std::string>>)
            return std::vector<std::string>{"host-" + std::to_string(index), "host-x",
                                            "host-" + std::to_string(index)};
          else if constexpr (std::is_floating_point_v<T>)
            return static_cast<T>(1000 + index) + static_cast<T>(0.25);
          else
            return static_cast<T>(1000 + index);
        },
        scalar.get(defaults));
    try {
      scalar.set(state, value);
    } catch (const InvalidArgument&) {
      // A string with a closed set of names (the decay): the first accepted one unlike the default.
      for (const char* name : {"none", "cosine", "poly", "step"}) {
        try {
          scalar.set(state, std::string(name));
        } catch (const InvalidArgument&) {
          continue;
        }
        if (scalar.get(state) != scalar.get(defaults)) break;
      }
    }
    INFO(scalar.path);
    REQUIRE(scalar.get(state) != scalar.get(defaults));
  }
  return state;
}

}  // namespace hardy::checkpoint::testing
