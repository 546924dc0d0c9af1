#pragma once
#include <span>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/data/climate_data.hpp"

namespace hardy::core {

// Gathers samples by index into the backend's input tensors: fields (N, C, H, W) in the
// backend's activation layout and labels i32 (N, 1, H, W).
class BatchAssembler {
 public:
  BatchAssembler(Backend& backend, SampleShape shape);
  void load(const SampleSource& source, std::span<const std::size_t> indices, Tensor& fields,
            Tensor& labels);

 private:
  Backend& backend_;
  SampleShape shape_;
  std::vector<float> sample_fields_;
  Tensor host_fields_, host_labels_;
};

}  // namespace hardy::core

namespace hardy::core {

// A contiguous range [first, first + count) of another source, seen as a source of its own
// (the held-out part of a synthetic stream or of a dataset directory).
class SampleRange final : public SampleSource {
 public:
  SampleRange(const SampleSource& source, std::size_t first, std::size_t count);
  std::size_t size() const override { return count_; }
  SampleShape shape() const override { return source_.shape(); }
  void load(std::size_t index, std::span<float> fields_chw,
            std::span<std::int32_t> labels_hw) const override;
  std::string describe() const override;
  std::vector<std::string> channel_names() const override { return source_.channel_names(); }
  int load_concurrency() const override { return source_.load_concurrency(); }

 private:
  const SampleSource& source_;
  std::size_t first_, count_;
};

}  // namespace hardy::core
