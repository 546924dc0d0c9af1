#include "hardy/core/data/batch_assembler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/process_info.hpp"

namespace hardy::core {

BatchAssembler::BatchAssembler(Backend& backend, SampleShape shape)
    : backend_(backend), shape_(shape) {}

BadSamplePolicy parse_bad_sample_policy(const std::string& name) {
  if (name == "fail") return BadSamplePolicy::fail;
  if (name == "skip") return BadSamplePolicy::skip;
  throw InvalidArgument(fmt::format("unknown bad-sample policy '{}' (choose fail or skip)", name));
}

std::string to_string(BadSamplePolicy policy) {
  return policy == BadSamplePolicy::skip ? "skip" : "fail";
}

namespace {

void check_shape(const SampleSource& source, const SampleShape& expected) {
  const auto s = source.shape();
  if (s != expected)
    throw InvalidArgument(fmt::format("{} has samples of {}, expected {}", source.describe(),
                                      to_string(s), to_string(expected)));
}

// The batch's fields: (N, C, H, W), or (N, C, D, H, W) for volumes.
std::vector<std::int64_t> field_dims(const SampleShape& s, std::int64_t n) {
  if (s.volumetric()) return {n, s.channels, s.depth, s.height, s.width};
  return {n, s.channels, s.height, s.width};
}

// The label words as loaded: i32 (N, 1, H, W) classes, or (N, K) targets' bits.
std::vector<std::int64_t> label_word_dims(const SampleShape& s, std::int64_t n) {
  if (s.regression()) return {n, s.targets};
  return {n, 1, s.height, s.width};
}

// What the loss reads: the class labels themselves, or the targets as f32 (N, K).
void ensure_targets(Backend& backend, const SampleShape& s, std::int64_t n, Tensor& labels) {
  ensure_tensor(backend, labels, label_word_dims(s, n), s.regression() ? DType::f32 : DType::i32);
}

// Host label words into the backend's labels, through `host_targets` for regression targets.
template <class Copy>
void copy_labels(Backend& backend, const SampleShape& s, const Tensor& host_words,
                 Tensor& host_targets, Tensor& labels, Copy&& copy) {
  if (!s.regression()) return copy(host_words, labels);
  if (!host_targets.defined() || host_targets.dims() != host_words.dims())
    host_targets = backend.empty_host(host_words.dims(), DType::f32, Layout::flat);
  const std::int32_t* words = host_words.data<std::int32_t>();
  float* values = host_targets.data<float>();
  for (std::int64_t i = 0; i < host_words.numel(); ++i) values[i] = target_value(words[i]);
  copy(host_targets, labels);
}

// Batches of at least this many bytes of fields are taken from the prefetcher by several
// threads at once: one thread's copy out of the loaders' buffers (28 MB per CAM5-sized bf16
// sample, 57 MB in f32) would take longer than a GPU's step (12 ms at that size on an H200).
constexpr std::size_t kParallelTakeBytes = std::size_t{64} << 20;

// As many as the rank has loader threads (its share of the node's cores for loading), at most
// 8: the takes run in bursts between the loaders' reads.
std::size_t take_threads(std::size_t samples, int loaders) {
  return std::clamp<std::size_t>(std::min(samples, static_cast<std::size_t>(loaders)), 1, 8);
}

}  // namespace

template <class LoadSample>
void BatchAssembler::assemble(const SampleSource& source, std::size_t count, Tensor& fields,
                              Tensor& labels, LoadSample&& load_sample) {
  check_shape(source, shape_);
  const std::int64_t n = static_cast<std::int64_t>(count);
  // Samples are stored channel-major (C, [D,] H, W): the host batch keeps that order, so that
  // each sample is loaded straight into its place, and the backend's copy converts to its own
  // layout (oneDNN's reorder on the CPU, a kernel on the GPU) in one parallel pass.
  if (!host_fields_.defined() || host_fields_.dim(0) != n) {
    host_fields_ = backend_.empty_host(field_dims(shape_, n), DType::f32, Layout::nchw);
    host_labels_ =
        backend_.empty_host(label_word_dims(shape_, n), DType::i32,
                            shape_.regression() ? Layout::flat : backend_.activation_layout());
  }
  ensure_tensor(backend_, fields, field_dims(shape_, n));
  ensure_targets(backend_, shape_, n, labels);
  const std::size_t words = shape_.label_elements();
  const std::size_t sample_size = shape_.field_elements();
  for (std::int64_t i = 0; i < n; ++i)
    load_sample(static_cast<std::size_t>(i),
                std::span<float>(host_fields_.data<float>() + i * sample_size, sample_size),
                std::span<std::int32_t>(host_labels_.data<std::int32_t>() + i * words, words));
  const auto copy_start = std::chrono::steady_clock::now();
  backend_.copy(host_fields_, fields);
  copy_labels(backend_, shape_, host_labels_, host_targets_, labels,
              [&](const Tensor& src, Tensor& dst) { backend_.copy(src, dst); });
  last_copy_s_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - copy_start).count();
}

void BatchAssembler::load(const SampleSource& source, std::span<const std::size_t> indices,
                          Tensor& fields, Tensor& labels) {
  assemble(
      source, indices.size(), fields, labels,
      [&](std::size_t i, std::span<float> sample_fields, std::span<std::int32_t> sample_labels) {
        source.load(indices[i], sample_fields, sample_labels);
      });
}

std::optional<SkippedSample> BatchAssembler::take_sample(
    SamplePrefetcher& prefetcher, std::size_t index, BadSamplePolicy policy, bool as_stored,
    std::span<std::byte> fields, std::span<std::int32_t> labels, double& wait_s) {
  const bool regression = prefetcher.source().shape().regression();
  const auto start = std::chrono::steady_clock::now();
  try {
    wait_s += as_stored ? prefetcher.take_stored(index, fields, labels)
                        : prefetcher.take(index, as_floats(fields), labels);
    return std::nullopt;
  } catch (const BadSample& bad) {
    wait_s += seconds_since(start);
    if (policy == BadSamplePolicy::fail) throw;
    std::fill(fields.begin(), fields.end(), std::byte{0});  // 0.0 in every float type
    // A pixel or a target left out of the loss (the label word says which: labels hold
    // class indices, targets the bits of floats).
    std::fill(labels.begin(), labels.end(),
              regression ? target_word(std::numeric_limits<float>::quiet_NaN()) : kIgnoreLabel);
    // BadSample's message is "file: reason".
    std::string reason = bad.what();
    if (reason.starts_with(bad.file() + ": ")) reason.erase(0, bad.file().size() + 2);
    return SkippedSample{index, bad.file(), std::move(reason)};
  }
}

BatchLoad BatchAssembler::load(SamplePrefetcher& prefetcher, std::span<const std::size_t> indices,
                               Tensor& fields, Tensor& labels, BadSamplePolicy policy) {
  if (is_staged(indices)) {
    // What the step waits for: whatever of the loads and the copy the previous step did not hide.
    const auto start = std::chrono::steady_clock::now();
    Staged staged = std::move(*staged_);
    staged_.reset();
    BatchLoad result = staged.done.get();  // the loads' error, if any, is this step's
    result.data_wait_s = seconds_since(start);
    const auto copy_start = std::chrono::steady_clock::now();
    staged.upload->hand_over();
    result.input_copy_s = seconds_since(copy_start);
    staged.upload.reset();
    std::swap(fields, staged_fields_);
    std::swap(labels, staged_labels_);
    return result;
  }
  drop_staged();
  BatchLoad result;
  assemble(
      prefetcher.source(), indices.size(), fields, labels,
      [&](std::size_t i, std::span<float> sample_fields, std::span<std::int32_t> sample_labels) {
        if (auto skipped = take_sample(prefetcher, indices[i], policy, /*as_stored=*/false,
                                       std::as_writable_bytes(sample_fields), sample_labels,
                                       result.data_wait_s))
          result.skipped.push_back(std::move(*skipped));
      });
  result.input_copy_s = last_copy_s_;
  return result;
}

void BatchAssembler::stage(SamplePrefetcher& prefetcher, std::vector<std::size_t> indices,
                           BadSamplePolicy policy) {
  drop_staged();
  check_shape(prefetcher.source(), shape_);
  const std::int64_t n = static_cast<std::int64_t>(indices.size());
  // Fields stored in fewer bytes (bf16 packed samples) travel so, and the backend's copy widens
  // them, where it converts float types (on a GPU, as the kernel that reorders them).
  const DType stored = prefetcher.source().stored_dtype();
  const bool as_stored = stored != DType::f32 && backend_.operand_rules().copy_converts_float_types;
  const DType host_dtype = as_stored ? stored : DType::f32;
  if (!staged_host_fields_.defined() || staged_host_fields_.dim(0) != n ||
      staged_host_fields_.dtype() != host_dtype) {
    staged_host_fields_ = backend_.empty_host(field_dims(shape_, n), host_dtype, Layout::nchw);
    staged_host_labels_ =
        backend_.empty_host(label_word_dims(shape_, n), DType::i32,
                            shape_.regression() ? Layout::flat : backend_.activation_layout());
  }
  ensure_tensor(backend_, staged_fields_, field_dims(shape_, n));
  ensure_targets(backend_, shape_, n, staged_labels_);
  staged_.emplace(Staged{std::move(indices), backend_.start_upload(), {}});
  staged_->done = std::async(std::launch::async, [this, &prefetcher, policy, as_stored,
                                                  &upload = *staged_->upload,
                                                  order = staged_->indices] {
    const std::size_t count = order.size();
    const std::size_t plane = shape_.label_elements();
    const std::size_t sample = shape_.field_elements() * dtype_size(staged_host_fields_.dtype());
    const std::size_t threads =
        count * sample >= kParallelTakeBytes ? take_threads(count, prefetcher.workers()) : 1;
    std::vector<std::optional<SkippedSample>> skipped(count);
    auto take_every = [&](std::size_t first) {
      double wait_s = 0;
      for (std::size_t i = first; i < count; i += threads)
        skipped[i] = take_sample(
            prefetcher, order[i], policy, as_stored,
            std::span<std::byte>(static_cast<std::byte*>(staged_host_fields_.raw()) + i * sample,
                                 sample),
            std::span<std::int32_t>(staged_host_labels_.data<std::int32_t>() + i * plane, plane),
            wait_s);
    };
    {
      std::vector<std::future<void>> helpers;
      for (std::size_t t = 1; t < threads; ++t)
        helpers.push_back(std::async(std::launch::async, take_every, t));
      take_every(0);
      for (auto& helper : helpers) helper.get();
    }
    BatchLoad load;
    load.staged = true;
    for (auto& sample_skipped : skipped)
      if (sample_skipped) load.skipped.push_back(std::move(*sample_skipped));
    upload.copy(staged_host_fields_, staged_fields_);
    copy_labels(backend_, shape_, staged_host_labels_, staged_host_targets_, staged_labels_,
                [&](const Tensor& src, Tensor& dst) { upload.copy(src, dst); });
    load.input_device_s = upload.finish();
    return load;
  });
}

void BatchAssembler::drop_staged() {
  if (!staged_) return;
  staged_->done.wait();  // its error, if any, belonged to a batch nobody takes
  staged_.reset();
}

}  // namespace hardy::core

namespace hardy::core {

SampleRange::SampleRange(const SampleSource& source, std::size_t first, std::size_t count)
    : source_(source), first_(first), count_(count) {
  if (first + count > source.size())
    throw InvalidArgument(fmt::format("samples [{}, {}) are outside {} ({} samples)", first,
                                      first + count, source.describe(), source.size()));
}

void SampleRange::load(std::size_t index, std::span<float> fields_chw,
                       std::span<std::int32_t> labels_hw) const {
  if (index >= count_)
    throw InvalidArgument(fmt::format("sample {} is outside {}", index, describe()));
  source_.load(first_ + index, fields_chw, labels_hw);
}

void SampleRange::load_stored(std::size_t index, std::span<std::byte> fields_chw,
                              std::span<std::int32_t> labels_hw) const {
  if (index >= count_)
    throw InvalidArgument(fmt::format("sample {} is outside {}", index, describe()));
  source_.load_stored(first_ + index, fields_chw, labels_hw);
}

std::string SampleRange::describe() const {
  return fmt::format("samples {}..{} of {}", first_, first_ + count_ - 1, source_.describe());
}

}  // namespace hardy::core
