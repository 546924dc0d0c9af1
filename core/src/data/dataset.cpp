#include "hardy/core/data/dataset.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hdf5.h>  // the stored types of /fields and /labels

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

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
    if (file.count > 0) files_.push_back(std::move(file));
  }
  if (channel_names_.size() != static_cast<std::size_t>(shape_.channels)) channel_names_.clear();
}

void Hdf5Dataset::load(std::size_t index, std::span<float> fields_chw,
                       std::span<std::int32_t> labels_hw) const {
  check_load_arguments(index, fields_chw, labels_hw);
  const h5::Exclusive exclusive;
  const auto after =
      std::upper_bound(files_.begin(), files_.end(), index,
                       [](std::size_t i, const File& file) { return i < file.first; });
  const File& file = *std::prev(after);
  const h5::Extent row = index - file.first;
  h5::read_rows<float>(file.fields.id(), row, 1, fields_chw);
  h5::read_rows<std::int32_t>(file.labels.id(), row, 1, labels_hw);
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
