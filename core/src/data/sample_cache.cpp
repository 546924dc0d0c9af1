#include "hardy/core/data/sample_cache.hpp"

#include <algorithm>
#include <vector>

namespace hardy::core {

CachedSamples::CachedSamples(std::unique_ptr<SampleSource> source, std::size_t budget_bytes)
    : source_(std::move(source)), budget_bytes_(budget_bytes), kept_(source_->size()) {
  const SampleShape s = source_->shape();
  sample_bytes_ = s.field_elements() * dtype_size(source_->stored_dtype()) +
                  s.label_elements() * sizeof(std::int32_t);
}

const CachedSamples::Sample* CachedSamples::kept(std::size_t index) const {
  std::lock_guard lock(mutex_);
  return kept_[index].get();
}

void CachedSamples::keep(std::size_t index, std::span<const std::byte> fields,
                         std::span<const std::int32_t> labels) const {
  std::lock_guard lock(mutex_);
  if (kept_[index] != nullptr || kept_bytes_ + sample_bytes_ > budget_bytes_) return;
  kept_[index] = std::make_unique<const Sample>(
      Sample{{fields.begin(), fields.end()}, {labels.begin(), labels.end()}});
  kept_bytes_ += sample_bytes_;
}

void CachedSamples::load(std::size_t index, std::span<float> fields_chw,
                         std::span<std::int32_t> labels_hw) const {
  check_load_arguments(index, fields_chw, labels_hw);
  if (const Sample* sample = kept(index)) {
    widen_to_f32(source_->stored_dtype(), sample->fields, fields_chw);
    std::copy(sample->labels.begin(), sample->labels.end(), labels_hw.begin());
    return;
  }
  if (source_->stored_dtype() == DType::f32) {
    source_->load(index, fields_chw, labels_hw);  // throws for a sample that cannot be read
    keep(index, std::as_bytes(fields_chw), labels_hw);
    return;
  }
  // Kept as stored: loaded so, then widened for this caller.
  std::vector<std::byte> stored(fields_chw.size() * dtype_size(source_->stored_dtype()));
  source_->load_stored(index, stored, labels_hw);
  widen_to_f32(source_->stored_dtype(), stored, fields_chw);
  keep(index, stored, labels_hw);
}

void CachedSamples::load_stored(std::size_t index, std::span<std::byte> fields_chw,
                                std::span<std::int32_t> labels_hw) const {
  check_stored_arguments(index, fields_chw, labels_hw);
  if (const Sample* sample = kept(index)) {
    std::copy(sample->fields.begin(), sample->fields.end(), fields_chw.begin());
    std::copy(sample->labels.begin(), sample->labels.end(), labels_hw.begin());
    return;
  }
  source_->load_stored(index, fields_chw, labels_hw);
  keep(index, fields_chw, labels_hw);
}

SampleSource& uncached(SampleSource& source) {
  auto* cache = dynamic_cast<CachedSamples*>(&source);
  return cache != nullptr ? cache->source() : source;
}

std::size_t CachedSamples::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return kept_bytes_;
}

}  // namespace hardy::core
