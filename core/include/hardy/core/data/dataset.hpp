#pragma once
// Climate samples on disk: a directory of HDF5 files plus index.json.
//
//   dir/climate-00000.h5, climate-00001.h5, ...   each holding
//     /fields  float32 (n, C, H, W), chunked one sample per chunk (a sample is one read)
//     /labels  uint8   (n, H, W), class per pixel, chunked likewise
//     root attributes: format = "hardy-climate", format_version = 1, class_names,
//                      channel_names, source (SampleSource::describe()), first_sample
//                      (index of the file's first sample in the source), seed (synthetic only),
//                      hardy_version
//   dir/index.json  {"format", "format_version", "shape", "samples", "source",
//                    "files": [{"name", "samples", "first_sample"}, ...]}
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

#include "hardy/core/data/sample_source.hpp"
#include "hardy/core/support/hdf5.hpp"

namespace hardy::core {

class FileDescriptor;  // file_reads.hpp

inline constexpr std::string_view kDatasetFormat = "hardy-climate";
inline constexpr int kDatasetFormatVersion = 1;
// The largest sample hardy reads (its fields as float): a bound on what a file's claimed shape
// can make it allocate. A full-size CAM5 sample (16 x 768 x 1152) is 54 MiB.
inline constexpr std::uint64_t kMaxSampleBytes = std::uint64_t{1} << 30;

// Writes samples [first, first + count) of source into dir (created if missing), at most
// samples_per_file per file. Each file is written under a ".tmp" name and renamed when complete,
// and index.json last, so a crash never leaves a partial file under a final name. Files of an
// earlier, larger dataset in dir are not removed; index.json says which files belong.
// Throws InvalidArgument for a bad range, IoError when dir or a file cannot be written.
void write_dataset(const SampleSource& source, std::size_t first, std::size_t count,
                   const std::filesystem::path& dir, std::size_t samples_per_file = 256);

// Reads a directory written by write_dataset: the files named by index.json, or without one
// every *.h5 file in name order (any files with /fields (N, C, H, W) floats and /labels (N, H, W)
// integers of one consistent sample shape). A single .h5 file may be given instead of a
// directory. Files stay open for the object's lifetime. Where a file stores its samples as hardy
// writes them (little-endian float32 fields, uint8 labels, unfiltered, a sample per chunk or
// contiguous), load() reads each sample's bytes at their place in the file, with no library call
// or lock: one read from the page cache, as cheap as a copy kept in memory, and loads run in
// parallel. Other files are read through HDF5, one hyperslab per dataset.
// Throws InvalidArgument, naming the file and the problem, for a missing path, no .h5 files,
// a foreign or newer format, wrong or inconsistent shapes, and (from load) labels outside
// [0, kNumClasses).
//
// Read through HDF5, concurrent load() calls are correct only with a thread-safe HDF5 build
// (h5::library_is_thread_safe()), which serializes them anyway; with any other build no two
// threads may use HDF5 at the same time, even through different objects.
class Hdf5Dataset final : public SampleSource {
 public:
  explicit Hdf5Dataset(const std::filesystem::path& path);

  std::size_t size() const override { return size_; }
  SampleShape shape() const override { return shape_; }
  void load(std::size_t index, std::span<float> fields_chw,
            std::span<std::int32_t> labels_hw) const override;
  std::string describe() const override;
  std::vector<std::string> channel_names() const override;
  int load_concurrency() const override;
  bool reads_from_page_cache() const override { return direct_; }
  std::vector<std::filesystem::path> files() const;

 private:
  struct File {
    std::filesystem::path path;
    h5::Handle file, fields, labels;
    std::size_t first = 0, count = 0;  // samples [first, first + count) of this dataset
    // Read without the library: a descriptor of the file and where each sample's fields and
    // labels begin in it; both empty when the file stores them otherwise.
    std::shared_ptr<const FileDescriptor> descriptor;
    std::vector<std::uint64_t> fields_at, labels_at;
  };
  // Finds where each sample's bytes lie, when they can be read without the library.
  static void locate_samples(File& file, const SampleShape& shape);
  void read_direct(const File& file, std::size_t row, std::span<float> fields_chw,
                   std::span<std::int32_t> labels_hw) const;
  // Opens one file, checks its format and datasets and returns it with its sample shape.
  static File open_and_validate(const std::filesystem::path& path, SampleShape& shape);

  std::filesystem::path root_;
  std::vector<File> files_;
  SampleShape shape_{};
  std::size_t size_ = 0;
  std::vector<std::string> channel_names_;
  bool direct_ = false;  // every file's samples are read without the library
};

}  // namespace hardy::core
