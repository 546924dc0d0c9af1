#pragma once
// An enum's names written once, as a table in the enum's order (names[i] names the value i):
// printing, parsing and the "choose ..." list of an error message all read the same table, so a
// value cannot be printed one way and parsed another. Each table sits beside a static_assert
// that it has a name for every value.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace hardy::core {

// The name of `value`, or `unknown` for a value past the table (a cast from a bad integer).
template <typename Enum, std::size_t N>
constexpr std::string_view name_of(const std::string_view (&names)[N], Enum value,
                                   std::string_view unknown = "?") {
  const auto index = static_cast<std::size_t>(value);
  return index < N ? names[index] : unknown;
}

template <typename Enum, std::size_t N>
constexpr std::optional<Enum> value_named(const std::string_view (&names)[N],
                                          std::string_view name) {
  for (std::size_t i = 0; i < N; ++i)
    if (names[i] == name) return static_cast<Enum>(i);
  return std::nullopt;
}

// "a, b or c": the choices an error message offers.
template <std::size_t N>
std::string choice_list(const std::string_view (&names)[N]) {
  std::string list;
  for (std::size_t i = 0; i < N; ++i) {
    if (i > 0) list += i + 1 == N ? " or " : ", ";
    list += names[i];
  }
  return list;
}

}  // namespace hardy::core
