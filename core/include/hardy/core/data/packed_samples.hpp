#pragma once
// Samples packed for the hot path (`hardy data pack`, docs/data.md): a dataset read once as
// training reads it (its window, channels and normalisation applied) and written back as one file
// per sample of bf16 fields in (C, H, W) order and int8 labels. Half the bytes of the fp32
// fields, nothing left to normalise or reorder: a load is one read and a widening to fp32, and a
// device can take the bf16 fields as they are.
//
//   ROOT/packed.json   {"format": "hardy-packed", "version": 1, "dtype": "bf16", "channels":
//                      [names], "height": H, "width": W, "source": what was packed, "splits":
//                      {"train": N, ...}}; written last, so its presence means complete
//   ROOT/train/, ROOT/validation/, ROOT/test/ (those packed)
//     NNNNNNNN.hpk     sample NNNNNNNN of the split: a 32-byte header (kPackedMagic, version,
//                      dtype, C, H, W, all little-endian u32), C*H*W bf16 fields, H*W int8 labels
//
// Each split's files are SampleFiles, so --stage-to and `hardy data stage` copy them to
// node-local storage as they do the published layouts' files.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "hardy/core/data/sample_files.hpp"
#include "hardy/core/data/sample_source.hpp"

namespace hardy::core {

inline constexpr std::string_view kPackedManifest = "packed.json";
inline constexpr std::string_view kPackedExtension = ".hpk";

// Whether root holds a complete packed dataset (its packed.json).
bool is_packed_layout(const std::filesystem::path& root);

struct PackedSplit {
  std::string name;  // "train", "validation" or "test"
  const SampleSource* source;
};

struct PackReport {
  std::map<std::string, std::size_t> samples;  // per split
  std::uint64_t bytes = 0;                     // of the sample files
};

// Writes every sample of each split into ROOT/<split>/ (created; ROOT must not hold a packed
// dataset or anything else already), `threads` samples at a time, each file atomically, and
// packed.json last. Every split must have the same sample shape. Throws InvalidArgument for no
// splits, a split of no samples, an unknown split name, mismatched shapes, a non-empty ROOT,
// and for a sample the source cannot load (BadSample, naming its file): a packed dataset holds
// every sample of its source. IoError when a file cannot be written.
PackReport pack_dataset(const std::vector<PackedSplit>& splits, const std::filesystem::path& root,
                        int threads, const std::function<void(std::size_t done)>& progress = {});

// One split of a packed dataset. load() throws BadSample (naming the file) for a file that is
// missing, truncated, of another shape or format, or that holds a non-finite field or a label
// outside the classes. Every const member may be called from any number of threads at once.
class PackedSamples final : public FileSampleSource {
 public:
  // Throws InvalidArgument for a root without a valid packed.json or a split it does not hold
  // (or whose files do not match its count).
  PackedSamples(const std::filesystem::path& root, std::string_view split);

  void load(std::size_t index, std::span<float> fields_chw,
            std::span<std::int32_t> labels_hw) const override;
  // "packed bf16 train split of ROOT: 1536 samples of 16x768x1152 (from ...)".
  std::string describe() const override;
  std::vector<std::string> channel_names() const override { return channel_names_; }
  // bf16, read as stored: one read, nothing widened (each value still checked).
  DType stored_dtype() const override { return DType::bf16; }
  void load_stored(std::size_t index, std::span<std::byte> fields_chw,
                   std::span<std::int32_t> labels_hw) const override;

 private:
  // Exactly one of `widened` (f32) and `stored` (bf16 words) is given.
  void read_sample(std::size_t index, std::span<float> widened, std::span<std::byte> stored,
                   std::span<std::int32_t> labels_hw) const;

  std::filesystem::path root_;
  std::string split_;
  std::string source_;
  std::vector<std::string> channel_names_;
};

// The channel count a packed dataset's samples have (its packed.json); throws InvalidArgument
// when root is not one.
int packed_channels(const std::filesystem::path& root);

}  // namespace hardy::core
