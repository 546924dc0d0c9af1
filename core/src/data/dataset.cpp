#include "hardy/core/data/dataset.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hdf5.h>  // the stored types of /fields and /labels
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "file_reads.hpp"
#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/support/atomic_file.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/json_fields.hpp"
#include "hardy/core/version.hpp"

namespace hardy::core {
namespace fs = std::filesystem;
namespace {

std::string quoted(const fs::path& path) { return fmt::format("'{}'", path.string()); }

void write_file(const SampleSource& source, std::size_t first, std::size_t count,
                const fs::path& path) {
  const h5::Exclusive exclusive;
  const SampleShape shape = source.shape();
  const auto C = static_cast<h5::Extent>(shape.channels), H = static_cast<h5::Extent>(shape.height),
             W = static_cast<h5::Extent>(shape.width);
  h5::Handle file = h5::create_file(path);
  const h5::Id root = file.id();
  h5::write_attribute(root, "format", kDatasetFormat);
  h5::write_attribute(root, "format_version", kDatasetFormatVersion);
  h5::write_attribute(root, "class_names",
                      std::vector<std::string>(kClassNames.begin(), kClassNames.end()));
  h5::write_attribute(root, "channel_names", source.channel_names());
  h5::write_attribute(root, "source", source.describe());
  h5::write_attribute(root, "first_sample", static_cast<std::uint64_t>(first));
  if (const auto* synthetic = dynamic_cast<const SyntheticClimate*>(&source))
    h5::write_attribute(root, "seed", synthetic->seed());
  h5::write_attribute(root, "hardy_version", std::string_view(HARDY_VERSION));
  // Explicit little-endian file types: the files read the same on any machine.
  h5::Handle fields =
      h5::create_dataset(root, "fields", H5T_IEEE_F32LE, {count, C, H, W}, {1, C, H, W});
  h5::Handle labels = h5::create_dataset(root, "labels", H5T_STD_U8LE, {count, H, W}, {1, H, W});

  std::vector<float> sample_fields(shape.field_elements());
  std::vector<std::int32_t> sample_labels(shape.label_elements());
  std::vector<std::uint8_t> stored_labels(shape.label_elements());
  for (std::size_t k = 0; k < count; ++k) {
    source.load(first + k, sample_fields, sample_labels);
    for (std::size_t p = 0; p < sample_labels.size(); ++p) {
      if (sample_labels[p] < 0 || sample_labels[p] >= kNumClasses)
        throw InvalidArgument(fmt::format("{} gave label {} in sample {}; classes are 0 to {}",
                                          source.describe(), sample_labels[p], first + k,
                                          kNumClasses - 1));
      stored_labels[p] = static_cast<std::uint8_t>(sample_labels[p]);
    }
    h5::write_rows<float>(fields.id(), k, 1, sample_fields);
    h5::write_rows<std::uint8_t>(labels.id(), k, 1, stored_labels);
  }
  fields.close();
  labels.close();
  file.close();  // flushes: a full disk shows up here, before the rename
}

std::vector<fs::path> files_from_index(const fs::path& dir, std::vector<std::size_t>& counts) {
  const fs::path index_path = dir / "index.json";
  nlohmann::json index;
  try {
    std::ifstream stream(index_path);
    index = nlohmann::json::parse(stream);
  } catch (const nlohmann::json::exception& error) {
    throw InvalidArgument(
        fmt::format("{} is not valid JSON: {}", quoted(index_path), error.what()));
  }
  if (!index.is_object() ||
      read_field<std::string>(index, "format").value_or(std::string(kDatasetFormat)) !=
          kDatasetFormat ||
      !index.contains("files") || !index["files"].is_array())
    throw InvalidArgument(fmt::format("{} is not a {} index (no \"files\" list)",
                                      quoted(index_path), kDatasetFormat));
  std::vector<fs::path> paths;
  for (const nlohmann::json& entry : index["files"]) {
    const auto name = read_field<std::string>(entry, "name");
    if (!name)
      throw InvalidArgument(fmt::format("{} has a file entry without a name", quoted(index_path)));
    const fs::path path = dir / *name;
    if (!fs::is_regular_file(path))
      throw InvalidArgument(
          fmt::format("{} lists {}, which does not exist", quoted(index_path), quoted(path)));
    paths.push_back(path);
    const auto samples = read_field<std::size_t>(entry, "samples");
    if (entry.contains("samples") && !samples)
      throw InvalidArgument(fmt::format("{}: the entry of {} has a \"samples\" that is not a count",
                                        quoted(index_path), *name));
    counts.push_back(samples.value_or(0));
  }
  return paths;
}

std::vector<fs::path> dataset_files(const fs::path& path, std::vector<std::size_t>& counts) {
  if (!fs::exists(path))
    throw InvalidArgument(fmt::format("dataset {} does not exist", quoted(path)));
  if (!fs::is_directory(path)) return {path};
  if (fs::exists(path / "index.json")) return files_from_index(path, counts);
  std::vector<fs::path> paths;
  for (const fs::directory_entry& entry : fs::directory_iterator(path))
    if (entry.is_regular_file() && entry.path().extension() == ".h5") paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  if (paths.empty())
    throw InvalidArgument(fmt::format("dataset directory {} holds no .h5 files", quoted(path)));
  return paths;
}

// Where each of `rows` samples of a dataset begins in its file, when they can be read as bytes:
// stored as `type` (little-endian, this host's order), unfiltered, contiguous or one sample per
// chunk, every byte inside the file. Empty otherwise (the library reads them).
std::vector<std::uint64_t> sample_offsets(h5::Id dataset, const std::string& what, hid_t type,
                                          std::size_t rows, std::uint64_t row_bytes,
                                          std::uint64_t file_bytes) {
  if constexpr (std::endian::native != std::endian::little) return {};
  h5::Handle stored{H5Dget_type(dataset), "H5Dget_type", what};
  if (h5::check(H5Tequal(stored.id(), type), "H5Tequal", what) <= 0) return {};
  h5::Handle properties{H5Dget_create_plist(dataset), "H5Dget_create_plist", what};
  if (h5::check(H5Pget_nfilters(properties.id()), "H5Pget_nfilters", what) != 0) return {};
  std::vector<std::uint64_t> offsets(rows);
  const H5D_layout_t layout = H5Pget_layout(properties.id());
  if (layout == H5D_CONTIGUOUS) {
    const haddr_t base = H5Dget_offset(dataset);
    h5::take_error_stack();  // H5Dget_offset leaves one behind for data never written
    if (base == HADDR_UNDEF) return {};
    for (std::size_t r = 0; r < rows; ++r) offsets[r] = base + r * row_bytes;
  } else if (layout == H5D_CHUNKED) {
    const std::vector<h5::Extent> dims = h5::dataset_dims(dataset);
    std::vector<hsize_t> chunk(dims.size());
    if (H5Pget_chunk(properties.id(), static_cast<int>(chunk.size()), chunk.data()) !=
        static_cast<int>(chunk.size()))
      return {};
    if (chunk[0] != 1 || !std::equal(chunk.begin() + 1, chunk.end(), dims.begin() + 1)) return {};
    std::vector<hsize_t> at(dims.size(), 0);
    for (std::size_t r = 0; r < rows; ++r) {
      at[0] = r;
      unsigned filter_mask = 0;
      haddr_t address = HADDR_UNDEF;
      hsize_t size = 0;
      if (H5Dget_chunk_info_by_coord(dataset, at.data(), &filter_mask, &address, &size) < 0 ||
          address == HADDR_UNDEF || size != row_bytes) {
        h5::take_error_stack();
        return {};
      }
      offsets[r] = address;
    }
  } else {
    return {};
  }
  for (const std::uint64_t offset : offsets)
    if (offset > file_bytes || file_bytes - offset < row_bytes) return {};
  return offsets;
}

}  // namespace

void write_dataset(const SampleSource& source, std::size_t first, std::size_t count,
                   const fs::path& dir, std::size_t samples_per_file) {
  if (samples_per_file == 0) throw InvalidArgument("samples_per_file must be at least 1");
  if (first > source.size() || count > source.size() - first)
    throw InvalidArgument(fmt::format("cannot write samples [{}, {}) of {}, which has {}", first,
                                      first + count, source.describe(), source.size()));
  std::error_code error;
  fs::create_directories(dir, error);
  if (error)
    throw IoError(
        fmt::format("cannot create dataset directory {}: {}", quoted(dir), error.message()));

  const SampleShape shape = source.shape();
  nlohmann::json index = {
      {"format", kDatasetFormat},
      {"format_version", kDatasetFormatVersion},
      {"shape", {{"channels", shape.channels}, {"height", shape.height}, {"width", shape.width}}},
      {"samples", count},
      {"source", source.describe()},
      {"class_names", kClassNames},
      {"channel_names", source.channel_names()},
      {"files", nlohmann::json::array()}};
  for (std::size_t written = 0, file_number = 0; written < count; ++file_number) {
    const std::size_t samples = std::min(samples_per_file, count - written);
    const std::string name = fmt::format("climate-{:05d}.h5", file_number);
    write_atomically(dir / name, [&](const fs::path& temporary) {
      write_file(source, first + written, samples, temporary);
    });
    index["files"].push_back(
        {{"name", name}, {"samples", samples}, {"first_sample", first + written}});
    written += samples;
  }
  write_atomically(dir / "index.json", [&](const fs::path& temporary) {
    std::ofstream stream(temporary);
    stream << index.dump(2) << '\n';
    stream.close();
    if (!stream) throw IoError(fmt::format("cannot write {}", quoted(temporary)));
  });
}

Hdf5Dataset::File Hdf5Dataset::open_and_validate(const fs::path& path, SampleShape& shape) {
  const h5::Exclusive exclusive;
  if (!h5::is_hdf5_file(path))
    throw InvalidArgument(fmt::format("{} is not an HDF5 file", quoted(path)));
  File file;
  file.path = path;
  file.file = h5::open_file(path);
  const h5::Id root = file.file.id();
  if (h5::has_attribute(root, "format")) {
    const std::string format = h5::read_string_attribute(root, "format");
    if (format != kDatasetFormat)
      throw InvalidArgument(
          fmt::format("{} holds format '{}', not '{}'", quoted(path), format, kDatasetFormat));
  }
  if (h5::has_attribute(root, "format_version")) {
    const auto version = h5::read_attribute<std::int64_t>(root, "format_version");
    if (version > kDatasetFormatVersion)
      throw InvalidArgument(
          fmt::format("{} has format version {}; this build of hardy reads versions up to {}",
                      quoted(path), version, kDatasetFormatVersion));
  }
  for (const char* name : {"fields", "labels"})
    if (!h5::exists(root, name))
      throw InvalidArgument(
          fmt::format("{} has no dataset /{}; expected /fields (N, C, H, W) and /labels (N, H, W)",
                      quoted(path), name));
  file.fields = h5::open_dataset(root, "fields");
  file.labels = h5::open_dataset(root, "labels");
  const std::vector<h5::Extent> fields = h5::dataset_dims(file.fields.id());
  const std::vector<h5::Extent> labels = h5::dataset_dims(file.labels.id());
  const bool shapes_fit = fields.size() == 4 && labels.size() == 3 && fields[0] == labels[0] &&
                          fields[2] == labels[1] && fields[3] == labels[2] && fields[1] > 0 &&
                          fields[2] > 0 && fields[3] > 0 && fields[1] <= 1u << 20 &&
                          fields[2] <= 1u << 20 && fields[3] <= 1u << 20;
  if (!shapes_fit)
    throw InvalidArgument(fmt::format(
        "{} has /fields of shape [{}] and /labels of shape [{}]; expected (N, C, H, W) and "
        "(N, H, W) with the same N, H and W",
        quoted(path), fmt::join(fields, ", "), fmt::join(labels, ", ")));
  if (h5::dataset_type_class(file.fields.id()) != h5::TypeClass::floating_point ||
      h5::dataset_type_class(file.labels.id()) != h5::TypeClass::integer)
    throw InvalidArgument(
        fmt::format("{} must hold floating-point /fields and integer /labels", quoted(path)));
  const std::uint64_t sample_values = fields[1] * fields[2] * fields[3];  // each <= 2^20
  if (sample_values * sizeof(float) > kMaxSampleBytes)
    throw InvalidArgument(fmt::format(
        "{} has samples of {} x {} x {} values ({:.1f} GiB each as float); hardy reads samples "
        "of up to {} GiB",
        quoted(path), fields[1], fields[2], fields[3],
        static_cast<double>(sample_values) * sizeof(float) / (1u << 30), kMaxSampleBytes >> 30));
  // The shapes are claims until the bytes are in the file: HDF5 reads parts never written as
  // zeros, and the sampler allocates by the sample count.
  for (const auto& [name, dataset, row_values] :
       {std::tuple{"fields", file.fields.id(), sample_values},
        std::tuple{"labels", file.labels.id(), fields[2] * fields[3]}}) {
    const h5::StoredData stored = h5::stored_data(dataset);
    std::uint64_t needed = 0;
    const bool overflow =
        __builtin_mul_overflow(fields[0], row_values * stored.element_bytes, &needed);
    // Compressed data may be smaller than its shape, but not below a byte a sample.
    if (overflow || (stored.filtered ? stored.bytes < fields[0] : stored.bytes < needed))
      throw InvalidArgument(
          fmt::format("{} declares {} samples in /{} but stores only {} bytes of them: the file is "
                      "truncated or was never completely written",
                      quoted(path), fields[0], name, stored.bytes));
  }
  file.count = static_cast<std::size_t>(fields[0]);
  shape = {static_cast<int>(fields[1]), static_cast<int>(fields[2]), static_cast<int>(fields[3])};
  return file;
}

Hdf5Dataset::Hdf5Dataset(const fs::path& path) : root_(path) {
  std::vector<std::size_t> indexed_counts;
  const std::vector<fs::path> paths = dataset_files(path, indexed_counts);
  for (std::size_t k = 0; k < paths.size(); ++k) {
    SampleShape file_shape;
    File file = open_and_validate(paths[k], file_shape);
    if (k == 0) {
      shape_ = file_shape;
      if (h5::has_attribute(file.file.id(), "channel_names"))
        channel_names_ = h5::read_strings_attribute(file.file.id(), "channel_names");
    } else if (file_shape != shape_) {
      throw InvalidArgument(fmt::format("{} holds samples of shape {} but {} holds {}",
                                        quoted(paths[k]), to_string(file_shape), quoted(paths[0]),
                                        to_string(shape_)));
    }
    if (k < indexed_counts.size() && indexed_counts[k] != file.count)
      throw InvalidArgument(fmt::format("{} holds {} samples but index.json says {}",
                                        quoted(paths[k]), file.count, indexed_counts[k]));
    file.first = size_;
    size_ += file.count;
    if (file.count > 0) {
      locate_samples(file, shape_);
      files_.push_back(std::move(file));
    }
  }
  direct_ = !files_.empty() && std::ranges::all_of(files_, [](const File& file) {
    return file.descriptor != nullptr;
  });
  if (channel_names_.size() != static_cast<std::size_t>(shape_.channels)) channel_names_.clear();
}

void Hdf5Dataset::locate_samples(File& file, const SampleShape& shape) {
  const h5::Exclusive exclusive;
  auto descriptor = std::make_shared<const FileDescriptor>(file.path);
  struct stat status {};
  if (descriptor->get() < 0 || ::fstat(descriptor->get(), &status) != 0)
    return;  // the library reads
  const auto file_bytes = static_cast<std::uint64_t>(status.st_size);
  const std::string where = quoted(file.path);
  file.fields_at = sample_offsets(file.fields.id(), where + " /fields", H5T_IEEE_F32LE, file.count,
                                  shape.field_elements() * sizeof(float), file_bytes);
  file.labels_at = sample_offsets(file.labels.id(), where + " /labels", H5T_STD_U8LE, file.count,
                                  shape.label_elements(), file_bytes);
  if (file.fields_at.empty() || file.labels_at.empty()) {
    file.fields_at.clear();
    file.labels_at.clear();
    return;
  }
  file.descriptor = std::move(descriptor);
}

void Hdf5Dataset::read_direct(const File& file, std::size_t row, std::span<float> fields_chw,
                              std::span<std::int32_t> labels_hw) const {
  const std::size_t index = file.first + row;
  const int fd = file.descriptor->get();
  std::string problem =
      read_exactly(fd, fields_chw.data(), fields_chw.size_bytes(), file.fields_at[row]);
  if (!problem.empty()) throw BadSample(index, file.path.string(), "/fields " + problem);
  thread_local std::vector<std::uint8_t> stored;
  stored.resize(labels_hw.size());
  problem = read_exactly(fd, stored.data(), stored.size(), file.labels_at[row]);
  if (!problem.empty()) throw BadSample(index, file.path.string(), "/labels " + problem);
  std::copy(stored.begin(), stored.end(), labels_hw.begin());
}

int Hdf5Dataset::load_concurrency() const {
  if (direct_) return 1 << 20;
  return h5::library_is_thread_safe() ? 1 : 0;
}

void Hdf5Dataset::load(std::size_t index, std::span<float> fields_chw,
                       std::span<std::int32_t> labels_hw) const {
  check_load_arguments(index, fields_chw, labels_hw);
  const auto after =
      std::upper_bound(files_.begin(), files_.end(), index,
                       [](std::size_t i, const File& file) { return i < file.first; });
  const File& file = *std::prev(after);
  const h5::Extent row = index - file.first;
  if (file.descriptor != nullptr) {
    read_direct(file, row, fields_chw, labels_hw);
  } else {
    const h5::Exclusive exclusive;
    h5::read_rows<float>(file.fields.id(), row, 1, fields_chw);
    h5::read_rows<std::int32_t>(file.labels.id(), row, 1, labels_hw);
  }
  for (std::size_t p = 0; p < labels_hw.size(); ++p) {
    if (labels_hw[p] < 0 || labels_hw[p] >= kNumClasses)
      throw InvalidArgument(
          fmt::format("{} has label {} in sample {} at row {}, column {}; classes are 0 to {}",
                      quoted(file.path), labels_hw[p], row, p / shape_.width, p % shape_.width,
                      kNumClasses - 1));
  }
}

std::string Hdf5Dataset::describe() const {
  return fmt::format("HDF5 climate dataset {} ({} samples of {} in {} files)", quoted(root_), size_,
                     to_string(shape_), files_.size());
}

std::vector<std::string> Hdf5Dataset::channel_names() const {
  return channel_names_.empty() ? SampleSource::channel_names() : channel_names_;
}

std::vector<fs::path> Hdf5Dataset::files() const {
  std::vector<fs::path> paths;
  for (const File& file : files_) paths.push_back(file.path);
  return paths;
}

}  // namespace hardy::core
