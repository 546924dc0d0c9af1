#pragma once
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace hardy::core {

// A field of a JSON object read back from a file hardy does not control (events.jsonl and
// metrics.jsonl for the supervisor and `hardy status`, a dataset's index.json), or nullopt when it
// is missing or holds something else. Such files outlive the process that wrote them: a crash
// cuts a line short, a person edits one, another hardy version writes other fields; none of that
// may throw a JSON type error into the reader. Integers must be whole numbers within T's range (a
// float or a huge value is "something else", not a conversion with undefined behaviour); arrays
// must hold only such elements.
template <class T>
std::optional<T> read_field(const nlohmann::json& record, std::string_view key);

namespace detail {
template <class T>
std::optional<T> convert(const nlohmann::json& value) {
  if constexpr (std::is_same_v<T, std::string>) {
    if (value.is_string()) return value.get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (value.is_boolean()) return value.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (value.is_number_unsigned()) {
      const auto v = value.get<std::uint64_t>();
      if (v <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(v);
    } else if (value.is_number_integer()) {
      const auto v = value.get<std::int64_t>();
      if (std::in_range<T>(v)) return static_cast<T>(v);
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (value.is_number()) return value.get<T>();
  } else {  // std::vector<E>
    if (!value.is_array()) return std::nullopt;
    T out;
    for (const auto& element : value) {
      auto converted = convert<typename T::value_type>(element);
      if (!converted) return std::nullopt;
      out.push_back(std::move(*converted));
    }
    return out;
  }
  return std::nullopt;
}
}  // namespace detail

template <class T>
std::optional<T> read_field(const nlohmann::json& record, std::string_view key) {
  if (!record.is_object()) return std::nullopt;
  const auto found = record.find(std::string(key));
  if (found == record.end()) return std::nullopt;
  return detail::convert<T>(*found);
}

}  // namespace hardy::core
