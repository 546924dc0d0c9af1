#pragma once
#include <span>
#include <string>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/data/prefetcher.hpp"
#include "hardy/core/data/sample_source.hpp"

namespace hardy::core {

// What a sample that a reader rejects (BadSample) does to the job: end it with the reader's
// message, or leave the sample out (its pixels labelled kIgnoreLabel) and go on.
enum class BadSamplePolicy { fail, skip };
BadSamplePolicy parse_bad_sample_policy(const std::string& name);  // "fail" | "skip"
std::string to_string(BadSamplePolicy policy);

// A sample left out under BadSamplePolicy::skip.
struct SkippedSample {
  std::size_t index;
  std::string file;
  std::string reason;
};

struct BatchLoad {
  double data_wait_s = 0;  // how long the caller waited for the batch's samples
  // The assembled batch copied into the backend's input tensors: on the CPU the reorder into
  // its layout, on a GPU the copy from host memory (host time: from pageable memory the call
  // returns once the bytes are staged).
  double input_copy_s = 0;
  std::vector<SkippedSample> skipped;
};

// Gathers samples by index into the backend's input tensors: fields (N, C, H, W) in the
// backend's activation layout and labels i32 (N, 1, H, W).
class BatchAssembler {
 public:
  BatchAssembler(Backend& backend, SampleShape shape);
  // Loads every sample on this thread (evaluation, tests).
  void load(const SampleSource& source, std::span<const std::size_t> indices, Tensor& fields,
            Tensor& labels);
  // Takes the samples from `prefetcher` (training). Under `skip`, a BadSample leaves its sample
  // with fields 0 and labels kIgnoreLabel, and is reported; any other error propagates.
  BatchLoad load(SamplePrefetcher& prefetcher, std::span<const std::size_t> indices, Tensor& fields,
                 Tensor& labels, BadSamplePolicy policy = BadSamplePolicy::fail);

 private:
  // Fills every sample i through load_sample(i, fields_chw, labels_hw), converts to the
  // backend's layout and copies to the backend's tensors.
  template <class LoadSample>
  void assemble(const SampleSource& source, std::size_t n, Tensor& fields, Tensor& labels,
                LoadSample&& load_sample);

  Backend& backend_;
  SampleShape shape_;
  Tensor host_fields_, host_labels_;
  double last_copy_s_ = 0;  // assemble()'s copy into the backend's tensors
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
