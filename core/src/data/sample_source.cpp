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

void widen_stored(DType dtype, std::span<const std::byte> stored, std::span<float> fields) {
  if (dtype == DType::f32) {
    std::memcpy(fields.data(), stored.data(), std::min(stored.size(), fields.size_bytes()));
    return;
  }
  if (dtype != DType::bf16)
    throw Error(fmt::format("fields stored as {} cannot be widened", to_string(dtype)));
  const auto* words = reinterpret_cast<const std::uint16_t*>(stored.data());
  const std::size_t count = std::min(stored.size() / 2, fields.size());
  for (std::size_t i = 0; i < count; ++i)
    fields[i] = std::bit_cast<float>(static_cast<std::uint32_t>(words[i]) << 16);
}

}  // namespace hardy::core
