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

// What the loss reads: the class labels themselves, or the targets as f32 (N, K).
void ensure_targets(Backend& backend, const SampleShape& s, std::int64_t n, Tensor& labels) {
  ensure_tensor(backend, labels, batch_label_dims(s, n), s.regression() ? DType::f32 : DType::i32);
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

// Runs `load` (which fills `fields` and `labels`, or throws). Under `skip` a BadSample leaves
// the sample with fields 0 and labels left out of the loss, and is returned; under `fail`, and
// any other error, propagates.
template <class Load>
std::optional<SkippedSample> load_or_skip(Load&& load, BadSamplePolicy policy, bool regression,
                                          std::size_t index, std::span<std::byte> fields,
                                          std::span<std::int32_t> labels) {
  try {
    load();
    return std::nullopt;
  } catch (const BadSample& bad) {
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
    host_fields_ = backend_.empty_host(batch_field_dims(shape_, n), DType::f32, Layout::nchw);
    host_labels_ =
        backend_.empty_host(batch_label_dims(shape_, n), DType::i32,
                            shape_.regression() ? Layout::flat : backend_.activation_layout());
  }
  ensure_tensor(backend_, fields, batch_field_dims(shape_, n));
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

std::optional<SkippedSample> BatchAssembler::take_sample(SamplePrefetcher& prefetcher,
                                                         std::size_t index, BadSamplePolicy policy,
                                                         std::span<float> fields,
                                                         std::span<std::int32_t> labels,
                                                         double& wait_s) {
  const auto start = std::chrono::steady_clock::now();
  bool taken = false;
  auto skipped = load_or_skip(
      [&] {
        wait_s += prefetcher.take(index, fields, labels);
        taken = true;
      },
      policy, prefetcher.source().shape().regression(), index, std::as_writable_bytes(fields),
      labels);
  if (!taken) wait_s += seconds_since(start);
  return skipped;
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
        if (auto skipped = take_sample(prefetcher, indices[i], policy, sample_fields, sample_labels,
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
  ensure_tensor(backend_, staged_fields_, batch_field_dims(shape_, n));
  ensure_targets(backend_, shape_, n, staged_labels_);
  if (shape_.regression() && (!staged_host_labels_.defined() || staged_host_labels_.dim(0) != n))
    staged_host_labels_ =
        backend_.empty_host(batch_label_dims(shape_, n), DType::i32, Layout::flat);
  staged_.emplace(Staged{std::move(indices), backend_.start_upload(), {}});
  staged_->done = std::async(std::launch::async, [this, &prefetcher, policy,
                                                  &upload = *staged_->upload,
                                                  order = staged_->indices] {
    // Each sample stays in its loader's buffer (page-locked on a GPU) and goes to the device
    // from there: the leases end after finish(), when the device has its copies.
    std::vector<SamplePrefetcher::Lease> leases;
    leases.reserve(order.size());
    struct FinishedCopies {  // an error after the copies started: they may not read freed leases
      InputUpload& upload;
      bool finished = false;
      ~FinishedCopies() {
        if (!finished) try {
            upload.finish();
          } catch (...) {  // the batch is dropped with the error being thrown
          }
      }
    } copies{upload};
    BatchLoad load;
    load.staged = true;
    for (const std::size_t index : order) {
      SamplePrefetcher::Lease& lease = leases.emplace_back(prefetcher.lease(index));
      Tensor& fields = lease.fields();
      Tensor& labels = lease.labels();
      if (auto skipped =
              load_or_skip([&] { lease.rethrow_error(); }, policy, shape_.regression(), index,
                           {static_cast<std::byte*>(fields.raw()), fields.bytes()},
                           {labels.data<std::int32_t>(), static_cast<std::size_t>(labels.numel())}))
        load.skipped.push_back(std::move(*skipped));
    }
    std::vector<const Tensor*> fields, labels;
    for (auto& lease : leases) {
      fields.push_back(&lease.fields());
      labels.push_back(&lease.labels());
    }
    upload.copy_samples(fields, staged_fields_);
    if (shape_.regression()) {  // a few words per sample: converted to targets on the host
      const std::size_t words = shape_.label_elements();
      for (std::size_t i = 0; i < labels.size(); ++i)
        std::copy_n(labels[i]->data<std::int32_t>(), words,
                    staged_host_labels_.data<std::int32_t>() + i * words);
      copy_labels(backend_, shape_, staged_host_labels_, staged_host_targets_, staged_labels_,
                  [&](const Tensor& src, Tensor& dst) { upload.copy(src, dst); });
    } else {
      upload.copy_samples(labels, staged_labels_);
    }
    load.input_device_s = upload.finish();
    copies.finished = true;
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
