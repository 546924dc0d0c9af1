#pragma once
// MLPerf HPC CosmoFlow's sample files, read in place (docs/data.md, "CosmoFlow"):
//
//   ROOT/train/, ROOT/validation/, optionally ROOT/test/: one sample per file, in name order,
//   in one of two variants (a split holds one of them):
//     HDF5   NAME.h5 or NAME.hdf5 holding
//              x  int16 (D, H, W, 4): particle counts of 4 redshifts, channels last, D = H = W
//              y  float (4): the 4 cosmological parameters, scaled to [-1, 1]
//     NumPy  NAME_data.npy  int16 '<i2' (D, H, W, 4), C order, and beside it
//            NAME_label.npy float32 '<f4' (4,)
//
// The network is fed log(1 + counts) (log1p_count), channels first (C, D, H, W); each target
// travels as its label word (target_word). The published TFRecord files (gzip-compressed
// protocol buffers) are not read: docs/data.md says why and how to convert them.
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "hardy/core/data/cosmology_data.hpp"
#include "hardy/core/data/sample_files.hpp"

namespace hardy::core {

enum class CosmoFlowVariant { hdf5, numpy };
std::string_view to_string(CosmoFlowVariant variant);

// Whether root looks like the layout above: a train/ directory holding *_data.npy, *.h5 or *.hdf5
// files, and no stats.h5 (which makes it DeepCAM's). What the files hold is checked on reading.
bool is_cosmoflow_layout(const std::filesystem::path& root);

// The header of a .npy file (NumPy's format, versions 1 to 3): its element type ('descr', e.g.
// "<i2"), order and shape, and where its data starts.
struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::uint64_t> shape;
  std::uint64_t data_offset = 0;
};
// Parses the header at the start of `bytes` (the first bytes of a file; a header is at most
// kMaxNpyHeaderBytes long). Throws InvalidArgument saying what is wrong: not a .npy file, an
// unknown version, a header longer than the limit or than `bytes`, a dictionary that is not
// NumPy's (keys other than descr, fortran_order and shape, or one of them missing).
inline constexpr std::size_t kMaxNpyHeaderBytes = 1 << 16;
NpyHeader parse_npy_header(std::string_view bytes);

// One split of a CosmoFlow dataset as a SampleSource: shape {4 channels, edge^3, 4 targets}.
//
// The first file is validated at construction (it sets the edge); every other one when it is
// first loaded. HDF5 files are checked through HDF5 (holding h5::Exclusive: HDF5 is not
// reentrant unless built thread-safe) and their y read then; a contiguous, unfiltered,
// little-endian x is then read with pread without HDF5, any other storage through HDF5. NumPy
// files need no library: their headers are parsed and their data read with pread, so loads run
// in parallel; a sample's targets are kept after its first load (16 bytes each), so its label
// file is read once per process.
//
// Exceptions: InvalidArgument at construction for a split that cannot be used as a whole (no or
// an empty split directory, both variants in one split, a bad first file). load() throws
// BadSample (naming the file) for anything wrong with one sample: not HDF5 or not .npy, missing
// x or y or label file, another element type (x a 16-bit signed integer, y floating point; NumPy
// exactly '<i2' and '<f4' in C order), a shape other than the first file's, a sample larger than
// kMaxSampleBytes (refused before anything is allocated for it), a truncated file or one with
// bytes after its data, a negative count, a non-finite target. A bad file is remembered: loading
// it again throws again at once.
//
// Thread-safety: every const member, load() included, may be called from any number of threads
// at once; set_file_locator() too.
class CosmoFlowDataset final : public FileSampleSource {
 public:
  // split: "train", "validation" or "test".
  CosmoFlowDataset(const std::filesystem::path& root, std::string_view split);
  ~CosmoFlowDataset() override;

  void load(std::size_t index, std::span<float> fields_cdhw,
            std::span<std::int32_t> target_words) const override;
  // "CosmoFlow train split of 'ROOT': 512 samples of 4x128x128x128 -> 4 targets (HDF5)".
  std::string describe() const override;
  std::vector<std::string> channel_names() const override;
  // files() are the HDF5 files, or the NumPy *_data.npy files, in sample order. Staging copies
  // these; a NumPy sample's label file is read from ROOT (once per process).
  CosmoFlowVariant variant() const { return variant_; }

 private:
  struct FileLayout;  // where a validated file keeps x, its targets, or why it is bad
  FileLayout layout_of(std::size_t index) const;
  FileLayout inspect(std::size_t index, int edge) const;

  std::filesystem::path root_;
  std::string split_;
  CosmoFlowVariant variant_ = CosmoFlowVariant::hdf5;

  InspectedFiles<FileLayout> inspected_;
};

struct CosmoFlowGenerateOptions {
  std::size_t train = 16, validation = 4;  // samples per split
  int volume = 128;                        // the cube's edge, at least 4
  std::uint64_t seed = 1;
  CosmoFlowVariant variant = CosmoFlowVariant::hdf5;
};

// Writes SyntheticCosmology's samples (train first, then validation: indices 0, 1, ... of one
// source) in the layout above: cosmo-NNNNN.h5, or cosmo-NNNNN_data.npy and cosmo-NNNNN_label.npy.
// The same options give the same files. Each file is written under a ".tmp" name and renamed.
// Throws InvalidArgument for bad options (no training samples, a volume under 4 or over the
// sample limit) or a split directory that already holds samples, IoError when a file cannot be
// written.
void write_cosmoflow_dataset(const std::filesystem::path& root,
                             const CosmoFlowGenerateOptions& options);

}  // namespace hardy::core
