#pragma once
#include <algorithm>
#include <future>
#include <memory>
#include <optional>
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
  // A staged batch (BatchAssembler::stage): the device's seconds for its copy, measured with
  // events on the copy's own stream (0 on the CPU, whose copy is input_copy_s).
  double input_device_s = 0;
  bool staged = false;  // loaded and copied while the previous step computed
  std::vector<SkippedSample> skipped;
};

// Gathers samples by index into the backend's input tensors: fields (N, C, H, W), or
// (N, C, D, H, W) for volumes, in the backend's activation layout, and labels i32 (N, 1, H, W),
// or for regression the targets f32 (N, K) (a skipped sample's targets NaN).
class BatchAssembler {
 public:
  BatchAssembler(Backend& backend, SampleShape shape);
  // Loads every sample on this thread (evaluation, tests).
  void load(const SampleSource& source, std::span<const std::size_t> indices, Tensor& fields,
            Tensor& labels);
  // Takes the samples from `prefetcher` (training). Under `skip`, a BadSample leaves its sample
  // with fields 0 and labels kIgnoreLabel, and is reported; any other error propagates.
  // A batch staged with these indices is taken instead (its tensors swapped with `fields` and
  // `labels`, whose memory the next stage() fills); any other staged batch is dropped first.
  BatchLoad load(SamplePrefetcher& prefetcher, std::span<const std::size_t> indices, Tensor& fields,
                 Tensor& labels, BadSamplePolicy policy = BadSamplePolicy::fail);

  // Starts taking `indices` from `prefetcher` on a thread of its own, each sample leased in its
  // loader's buffer (page-locked where the prefetcher's memory is the backend's empty_host), and
  // their copy into a second pair of input tensors beside the backend's work
  // (Backend::start_upload): the next step's input, while this step computes. The leases hold
  // one batch of the prefetcher's buffers until the copy is done. Call it on the thread that queues
  // the backend's work, after this step's work that reads the input tensors was queued. Replaces a
  // staged batch not yet taken.
  void stage(SamplePrefetcher& prefetcher, std::vector<std::size_t> indices,
             BadSamplePolicy policy = BadSamplePolicy::fail);
  // Whether the staged batch (ready or still loading) holds exactly these indices.
  bool is_staged(std::span<const std::size_t> indices) const {
    return staged_ && std::ranges::equal(staged_->indices, indices);
  }
  // Waits for a staged batch and forgets it, e.g. before the prefetcher it takes from goes away.
  void drop_staged();
  ~BatchAssembler() { drop_staged(); }
  BatchAssembler(const BatchAssembler&) = delete;
  BatchAssembler& operator=(const BatchAssembler&) = delete;

 private:
  struct Staged {
    std::vector<std::size_t> indices;
    std::unique_ptr<InputUpload> upload;
    std::future<BatchLoad> done;  // the loads and the copy, on their own thread
  };
  // Takes sample `index` from the prefetcher into its place in the host batch, adding the wait
  // to wait_s; under `skip` a BadSample leaves the sample with fields 0 and labels kIgnoreLabel
  // and is returned, any other error propagates.
  static std::optional<SkippedSample> take_sample(SamplePrefetcher& prefetcher, std::size_t index,
                                                  BadSamplePolicy policy, std::span<float> fields,
                                                  std::span<std::int32_t> labels, double& wait_s);

  // Fills every sample i through load_sample(i, fields_chw, labels_hw), converts to the
  // backend's layout and copies to the backend's tensors.
  template <class LoadSample>
  void assemble(const SampleSource& source, std::size_t n, Tensor& fields, Tensor& labels,
                LoadSample&& load_sample);

  Backend& backend_;
  SampleShape shape_;
  Tensor host_fields_, host_labels_;
  Tensor host_targets_, staged_host_targets_;  // regression targets, as floats, before the copy
  double last_copy_s_ = 0;                     // assemble()'s copy into the backend's tensors
  // stage()'s input tensors (swapped with the caller's when taken), and its regression targets'
  // words gathered from the leased samples.
  Tensor staged_fields_, staged_labels_, staged_host_labels_;
  std::optional<Staged> staged_;
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
  DType stored_dtype() const override { return source_.stored_dtype(); }
  void load_stored(std::size_t index, std::span<std::byte> fields_chw,
                   std::span<std::int32_t> labels_hw) const override;

 private:
  const SampleSource& source_;
  std::size_t first_, count_;
};

}  // namespace hardy::core
