#pragma once
// Samples kept in memory after their first load, so that later epochs copy them instead of
// generating or reading and decoding them again. A sample is a pure function of its source and
// index (the synthetic generator's seed, a file's bytes), so a copy is the sample, bit for bit,
// and a resumed job computes what it would have computed without the cache.
//
// Why: the synthetic generator takes about as much CPU per sample as the tiny model's forward
// and backward, and on the loader thread it takes it from the step (examples/tiny.ini on 2 cores:
// a step of 16 ms whose forward and backward alone take 7.6). Loads that fail are not kept.
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "hardy/core/data/sample_source.hpp"

namespace hardy::core {

class CachedSamples final : public SampleSource {
 public:
  // Keeps samples of `source` until they take `budget_bytes`; later loads of others go to the
  // source each time.
  CachedSamples(std::unique_ptr<SampleSource> source, std::size_t budget_bytes);

  std::size_t size() const override { return source_->size(); }
  SampleShape shape() const override { return source_->shape(); }
  void load(std::size_t index, std::span<float> fields_chw,
            std::span<std::int32_t> labels_hw) const override;
  std::string describe() const override { return source_->describe(); }
  std::vector<std::string> channel_names() const override { return source_->channel_names(); }
  // Misses go to the source under its own rule.
  int load_concurrency() const override { return source_->load_concurrency(); }
  // Samples are kept as the source stores them (bf16 packed samples in half the memory).
  DType stored_dtype() const override { return source_->stored_dtype(); }
  void load_stored(std::size_t index, std::span<std::byte> fields_chw,
                   std::span<std::int32_t> labels_hw) const override;

  std::size_t cached_bytes() const;
  // What it keeps samples of (staging hands a file source its node-local copies).
  SampleSource& source() const { return *source_; }

 private:
  struct Sample {
    std::vector<std::byte> fields;  // as stored_dtype()
    std::vector<std::int32_t> labels;
  };
  // The kept sample, or null.
  const Sample* kept(std::size_t index) const;
  // Keeps a loaded sample if the budget allows.
  void keep(std::size_t index, std::span<const std::byte> fields,
            std::span<const std::int32_t> labels) const;
  std::unique_ptr<SampleSource> source_;
  std::size_t budget_bytes_;
  std::size_t sample_bytes_;
  mutable std::mutex mutex_;  // guards the table and the count; a kept sample never changes
  mutable std::vector<std::unique_ptr<const Sample>> kept_;
  mutable std::size_t kept_bytes_ = 0;
};

// The source under a cache, or `source` itself when it is none.
SampleSource& uncached(SampleSource& source);

}  // namespace hardy::core
