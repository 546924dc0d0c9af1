#include "hardy/core/data/batch_assembler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "hardy/core/support/error.hpp"

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

template <class LoadSample>
void BatchAssembler::assemble(const SampleSource& source, std::size_t count, Tensor& fields,
                              Tensor& labels, LoadSample&& load_sample) {
  const auto s = source.shape();
  if (s.channels != shape_.channels || s.height != shape_.height || s.width != shape_.width)
    throw InvalidArgument(fmt::format("{} has samples of {}x{}x{}, expected {}x{}x{}",
                                      source.describe(), s.channels, s.height, s.width,
                                      shape_.channels, shape_.height, shape_.width));
  const std::int64_t n = static_cast<std::int64_t>(count), C = s.channels, H = s.height,
                     W = s.width;
  const Layout layout = backend_.activation_layout();
  // Samples are stored channel-major (C, H, W): the host batch keeps that order, so that each
  // sample is loaded straight into its place, and the backend's copy converts to its own layout
  // (oneDNN's reorder on the CPU, a kernel on the GPU) in one parallel pass.
  if (!host_fields_.defined() || host_fields_.n() != n) {
    host_fields_ = Tensor::host({n, C, H, W}, DType::f32, Layout::nchw);
    host_labels_ = Tensor::host({n, 1, H, W}, DType::i32, layout);
  }
  ensure_tensor(backend_, fields, {n, C, H, W});
  ensure_tensor(backend_, labels, {n, 1, H, W}, DType::i32);
  const std::size_t plane = static_cast<std::size_t>(H * W);
  const std::size_t sample_size = static_cast<std::size_t>(C) * plane;
  for (std::int64_t i = 0; i < n; ++i)
    load_sample(static_cast<std::size_t>(i),
                std::span<float>(host_fields_.data<float>() + i * C * H * W, sample_size),
                std::span<std::int32_t>(host_labels_.data<std::int32_t>() + i * H * W, plane));
  const auto copy_start = std::chrono::steady_clock::now();
  backend_.copy(host_fields_, fields);
  backend_.copy(host_labels_, labels);
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

BatchLoad BatchAssembler::load(SamplePrefetcher& prefetcher, std::span<const std::size_t> indices,
                               Tensor& fields, Tensor& labels, BadSamplePolicy policy) {
  BatchLoad result;
  assemble(
      prefetcher.source(), indices.size(), fields, labels,
      [&](std::size_t i, std::span<float> sample_fields, std::span<std::int32_t> sample_labels) {
        const auto start = std::chrono::steady_clock::now();
        try {
          result.data_wait_s += prefetcher.take(indices[i], sample_fields, sample_labels);
        } catch (const BadSample& bad) {
          result.data_wait_s +=
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          if (policy == BadSamplePolicy::fail) throw;
          std::fill(sample_fields.begin(), sample_fields.end(), 0.0f);
          std::fill(sample_labels.begin(), sample_labels.end(), kIgnoreLabel);
          // BadSample's message is "file: reason".
          std::string reason = bad.what();
          if (reason.starts_with(bad.file() + ": ")) reason.erase(0, bad.file().size() + 2);
          result.skipped.push_back({indices[i], bad.file(), std::move(reason)});
        }
      });
  result.input_copy_s = last_copy_s_;
  return result;
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

std::string SampleRange::describe() const {
  return fmt::format("samples {}..{} of {}", first_, first_ + count_ - 1, source_.describe());
}

}  // namespace hardy::core
