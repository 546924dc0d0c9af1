#include "hardy/core/data/sample_cache.hpp"

#include <algorithm>

namespace hardy::core {

CachedSamples::CachedSamples(std::unique_ptr<SampleSource> source, std::size_t budget_bytes)
    : source_(std::move(source)), budget_bytes_(budget_bytes), kept_(source_->size()) {
  const SampleShape s = source_->shape();
  sample_bytes_ = s.field_elements() * sizeof(float) + s.label_elements() * sizeof(std::int32_t);
}

void CachedSamples::load(std::size_t index, std::span<float> fields_chw,
                         std::span<std::int32_t> labels_hw) const {
  check_load_arguments(index, fields_chw, labels_hw);
  const Sample* kept = nullptr;
  {
    std::lock_guard lock(mutex_);
    kept = kept_[index].get();
  }
  if (kept != nullptr) {
    std::copy(kept->fields.begin(), kept->fields.end(), fields_chw.begin());
    std::copy(kept->labels.begin(), kept->labels.end(), labels_hw.begin());
    return;
  }
  source_->load(index, fields_chw, labels_hw);  // throws for a sample that cannot be read
  std::lock_guard lock(mutex_);
  if (kept_[index] != nullptr || kept_bytes_ + sample_bytes_ > budget_bytes_) return;
  kept_[index] = std::make_unique<const Sample>(
      Sample{{fields_chw.begin(), fields_chw.end()}, {labels_hw.begin(), labels_hw.end()}});
  kept_bytes_ += sample_bytes_;
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
