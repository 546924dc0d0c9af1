#include "hardy/core/data/sample_source.hpp"

#include <fmt/format.h>

#include "hardy/core/support/error.hpp"

namespace hardy::core {

std::string to_string(const SampleShape& shape) {
  return fmt::format("{}x{}x{}", shape.channels, shape.height, shape.width);
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

}  // namespace hardy::core
