#pragma once
// What the training loop reads samples from: SampleShape (the size of one sample) and the
// SampleSource interface. A segmentation sample is a stack of 2-D fields (channels, latitude
// rows, longitude columns) and a per-pixel class label (compute/labels.hpp). A regression sample
// (CosmoFlow) is a stack of 3-D volumes (channels, depth, rows, columns) and a few real-valued
// targets. Implementations: SyntheticClimate (climate_data.hpp) and SyntheticCosmology
// (cosmology_data.hpp) make samples on the fly, Hdf5Dataset (dataset.hpp) and the DeepCAM reader
// (deepcam.hpp) read them from disk.
//
// Both kinds of target travel as 4-byte "label words" through the same buffers (loaders, cache,
// prefetcher, staging, the skip of a bad sample): a class index per pixel, or each target's
// float bits (target_word / target_value), so that no path between a source and the loss needs
// to know the task.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hardy/core/compute/labels.hpp"
#include "hardy/core/compute/tensor.hpp"

namespace hardy::core {

struct SampleShape {
  int channels = 16;
  int height = 64;  // latitude rows, north at row 0
  int width = 64;   // longitude columns, periodic
  int depth = 1;    // > 1: volumes (channels, depth, height, width)
  int targets = 0;  // > 0: regression, this many real-valued targets per sample; 0: a class per
                    // pixel

  bool volumetric() const { return depth > 1; }
  bool regression() const { return targets > 0; }
  std::size_t field_elements() const {
    return static_cast<std::size_t>(channels) * depth * height * width;
  }
  // Label words per sample: one per pixel, or one per target.
  std::size_t label_elements() const {
    return regression() ? static_cast<std::size_t>(targets)
                        : static_cast<std::size_t>(height) * width;
  }
  bool operator==(const SampleShape&) const = default;
};
// "16x64x64", a volume "4x32x32x32", a regression "4x32x32x32 -> 4 targets".
std::string to_string(const SampleShape& shape);
// A batch of n such samples: fields (N, C, H, W), or (N, C, D, H, W) for volumes, and label
// words i32 (N, 1, H, W), or (N, K) for regression targets' bits.
std::vector<std::int64_t> batch_field_dims(const SampleShape& shape, std::int64_t n);
std::vector<std::int64_t> batch_label_dims(const SampleShape& shape, std::int64_t n);

// A regression target in a label word and back (its float bits; a NaN word is a target left
// out, as kIgnoreLabel is a pixel left out).
inline std::int32_t target_word(float value) { return std::bit_cast<std::int32_t>(value); }
inline float target_value(std::int32_t word) { return std::bit_cast<float>(word); }

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual std::size_t size() const = 0;
  virtual SampleShape shape() const = 0;
  // Writes sample `index`: fields in (C, H, W) order, labels (H, W) in [0, kNumClasses).
  // Throws InvalidArgument for an index >= size() or spans of the wrong size.
  virtual void load(std::size_t index, std::span<float> fields_chw,
                    std::span<std::int32_t> labels_hw) const = 0;
  // One line for logs and provenance, e.g. "synthetic climate 16x64x64, 1000 samples, seed 7".
  virtual std::string describe() const = 0;
  // One name per channel; "channel_0", ... unless the source knows better.
  virtual std::vector<std::string> channel_names() const;
  // How many threads may be inside load() at once and actually overlap: 0 when only the thread
  // that owns the source may call it, 1 when any one thread at a time may (a library lock
  // serializes them anyway), more when loads run in parallel.
  virtual int load_concurrency() const { return 0; }
  // The dtype the source holds fields in: f32, or bf16 for packed samples. load() always writes
  // f32 (widening where needed); load_stored() writes the values as stored, so that a consumer
  // that converts on a device moves half the bytes and converts nothing on the host.
  virtual DType stored_dtype() const { return DType::f32; }
  // As load(), with the fields in stored_dtype() (bf16: 16-bit words) in field_elements() times
  // its size of bytes. The default serves f32 sources through load().
  virtual void load_stored(std::size_t index, std::span<std::byte> fields_chw,
                           std::span<std::int32_t> labels_hw) const;
  // Whether a load is a plain read of bytes the operating system's page cache keeps for every
  // process of the node (a file read as stored, nothing decoded). A sample cache over such a
  // source keeps nothing (data_sources.cpp): its copy would cost more to fill than a read (a
  // fresh page per 4 KiB, after every launch) and save nothing after.
  virtual bool reads_from_page_cache() const { return false; }

 protected:
  void check_load_arguments(std::size_t index, std::span<float> fields_chw,
                            std::span<std::int32_t> labels_hw) const;
  void check_stored_arguments(std::size_t index, std::span<std::byte> fields_chw,
                              std::span<std::int32_t> labels_hw) const;
};

// A float viewed in its stored bytes (f32 fields handed around as bytes).
std::span<float> as_floats(std::span<std::byte> bytes);

}  // namespace hardy::core
