// An enum's names as one table (core/support/enum_names.hpp): printing and parsing read the same
// table, a value past it prints as the fallback, and error messages list the choices.
#include <catch2/catch.hpp>
#include <string_view>

#include "hardy/core/nn/model.hpp"
#include "hardy/core/support/enum_names.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy::core;

namespace {

enum class Colour { red, light_green, blue };
constexpr std::string_view kColourNames[] = {"red", "light green", "blue"};

}  // namespace

TEST_CASE("enum names: every value prints as its name and parses back", "[core]") {
  for (Colour colour : {Colour::red, Colour::light_green, Colour::blue})
    CHECK(value_named<Colour>(kColourNames, name_of(kColourNames, colour)) == colour);
  CHECK(name_of(kColourNames, Colour::light_green) == "light green");
}

TEST_CASE("enum names: unknown names and values are told apart from known ones", "[core]") {
  CHECK_FALSE(value_named<Colour>(kColourNames, "green").has_value());
  CHECK_FALSE(value_named<Colour>(kColourNames, "").has_value());
  CHECK(name_of(kColourNames, static_cast<Colour>(7)) == "?");
  CHECK(name_of(kColourNames, static_cast<Colour>(7), "unknown") == "unknown");
}

TEST_CASE("enum names: the choices read as a sentence", "[core]") {
  CHECK(choice_list(kColourNames) == "red, light green or blue");
  constexpr std::string_view one[] = {"only"};
  CHECK(choice_list(one) == "only");
  // What `hardy train --model` says, from the same table that prints a checkpoint's network.
  CHECK_THROWS_WITH(parse_architecture("resnet"),
                    Catch::Contains("(choose compact, deepcam, tiramisu or cosmoflow)"));
  CHECK(to_string(parse_architecture("tiramisu")) == "tiramisu");
}
