#pragma once
// What the tests of sample sources (the synthetic one and the readers of the climate layouts)
// share: a sample loaded as the trainer loads it, and the message of what an action throws.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "hardy/core/data/sample_source.hpp"

namespace hardy::testing {

struct Sample {
  std::vector<float> fields;
  std::vector<std::int32_t> labels;
  bool operator==(const Sample&) const = default;
};

// Sample `index` of `source`, in buffers of the shape the source reports.
inline Sample load(const core::SampleSource& source, std::size_t index) {
  const core::SampleShape shape = source.shape();
  Sample sample{std::vector<float>(shape.field_elements()),
                std::vector<std::int32_t>(shape.label_elements())};
  source.load(index, sample.fields, sample.labels);
  return sample;
}

// What `action` throws, or "(no exception)".
inline std::string message_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "(no exception)";
}

}  // namespace hardy::testing
