#pragma once
// What hardy's model benchmarks share: the flags that describe the model and its input, number
// parsing, and timing statistics. Each benchmark keeps its own flags and usage text.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "hardy/core/nn/model.hpp"

namespace hardy::bench {

// A bad flag or value; each benchmark prints it with its usage and exits with status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class T>
T parse_number(std::string_view flag, std::string_view text) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size())
    throw UsageError(fmt::format("{} expects a number, got '{}'", flag, text));
  return value;
}

inline std::vector<int> parse_rates(std::string_view flag, std::string_view text) {
  std::vector<int> rates;
  while (!text.empty()) {
    const auto comma = text.find(',');
    rates.push_back(parse_number<int>(flag, text.substr(0, comma)));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
  }
  return rates;
}

// The input batch and the model's shape.
struct ModelShape {
  int batch, height, width;
  core::ModelConfig model;
};

// Applies one of the shape flags (--batch, --height, --width, --input-channels, --classes,
// --model-width, --depth, --aspp-channels, --aspp-rates, --low-level-channels,
// --decoder-channels, --groups); false when `flag` is none of them.
inline bool apply_shape_flag(std::string_view flag, std::string_view value, ModelShape& shape) {
  auto integer = [&] { return parse_number<int>(flag, value); };
  auto& m = shape.model;
  if (flag == "--batch")
    shape.batch = integer();
  else if (flag == "--height")
    shape.height = integer();
  else if (flag == "--width")
    shape.width = integer();
  else if (flag == "--input-channels")
    m.input_channels = integer();
  else if (flag == "--classes")
    m.num_classes = integer();
  else if (flag == "--model-width")
    m.width = integer();
  else if (flag == "--depth")
    m.depth = integer();
  else if (flag == "--aspp-channels")
    m.aspp_channels = integer();
  else if (flag == "--aspp-rates")
    m.aspp_rates = parse_rates(flag, value);
  else if (flag == "--low-level-channels")
    m.low_level_channels = integer();
  else if (flag == "--decoder-channels")
    m.decoder_channels = integer();
  else if (flag == "--groups")
    m.groups = integer();
  else
    return false;
  return true;
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

inline double seconds_between(std::chrono::steady_clock::time_point from,
                              std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace hardy::bench
