#include "hardy/core/data/sample_source.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "hardy/core/support/error.hpp"

namespace hardy::core {

std::string to_string(const SampleShape& shape) {
  std::string text =
      shape.volumetric()
          ? fmt::format("{}x{}x{}x{}", shape.channels, shape.depth, shape.height, shape.width)
          : fmt::format("{}x{}x{}", shape.channels, shape.height, shape.width);
  if (shape.regression()) text += fmt::format(" -> {} targets", shape.targets);
  return text;
}

std::vector<std::int64_t> batch_field_dims(const SampleShape& s, std::int64_t n) {
  if (s.volumetric()) return {n, s.channels, s.depth, s.height, s.width};
  return {n, s.channels, s.height, s.width};
}

std::vector<std::int64_t> batch_label_dims(const SampleShape& s, std::int64_t n) {
  if (s.regression()) return {n, s.targets};
  return {n, 1, s.height, s.width};
}

std::vector<std::string> SampleSource::channel_names() const {
  std::vector<std::string> names;
  for (int c = 0; c < shape().channels; ++c) names.push_back(fmt::format("channel_{}", c));
  return names;
}

void SampleSource::check_load_arguments(std::size_t index, std::span<float> fields_chw,
                                        std::span<std::int32_t> labels_hw) const {
  const SampleShape s = shape();
  if (index >= size())
    throw InvalidArgument(
        fmt::format("sample {} requested from {}, which has {}", index, describe(), size()));
  if (fields_chw.size() != s.field_elements() || labels_hw.size() != s.label_elements())
    throw InvalidArgument(fmt::format(
        "buffers of {} field and {} label elements given for samples of shape {} ({} and {})",
        fields_chw.size(), labels_hw.size(), to_string(s), s.field_elements(), s.label_elements()));
}

void SampleSource::check_stored_arguments(std::size_t index, std::span<std::byte> fields_chw,
                                          std::span<std::int32_t> labels_hw) const {
  const std::size_t values = fields_chw.size() / dtype_size(stored_dtype());
  if (fields_chw.size() % dtype_size(stored_dtype()) != 0)
    throw InvalidArgument(fmt::format("{} field bytes given for {} values of {}", fields_chw.size(),
                                      describe(), to_string(stored_dtype())));
  // check_load_arguments() reads the spans' sizes alone.
  check_load_arguments(index, std::span<float>(static_cast<float*>(nullptr), values), labels_hw);
}

void SampleSource::load_stored(std::size_t index, std::span<std::byte> fields_chw,
                               std::span<std::int32_t> labels_hw) const {
  if (stored_dtype() != DType::f32)
    throw Error(fmt::format("{} stores {} fields but cannot load them as stored", describe(),
                            to_string(stored_dtype())));
  check_stored_arguments(index, fields_chw, labels_hw);
  load(index, as_floats(fields_chw), labels_hw);
}

std::span<float> as_floats(std::span<std::byte> bytes) {
  return {reinterpret_cast<float*>(bytes.data()), bytes.size() / sizeof(float)};
}

}  // namespace hardy::core
