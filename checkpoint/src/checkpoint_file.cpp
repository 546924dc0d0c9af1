#include "hardy/checkpoint/checkpoint_file.hpp"

#include <fmt/format.h>
#include <hdf5.h>

#include <map>
#include <nlohmann/json.hpp>

#include "hardy/checkpoint/model_file.hpp"
#include "hardy/checkpoint/snapshot_file.hpp"
#include "hardy/core/support/atomic_file.hpp"
#include "hardy/core/support/digest.hpp"
#include "hardy/core/support/hdf5.hpp"
#include "hardy/core/version.hpp"
#include "hdf5_writer.hpp"
#include "state_fields.hpp"

namespace hardy::checkpoint {

namespace {

namespace h5 = core::h5;
using detail::Field;
using detail::FieldType;
using nlohmann::json;

std::string hex(std::uint64_t value) { return fmt::format("{:016x}", value); }

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ","));
}

// ---- writing ----

json manifest_of(const std::vector<Field>& fields) {
  json datasets = json::array();
  for (const Field& field : fields)
    datasets.push_back({{"path", field.path},
                        {"dtype", detail::type_name(field.type)},
                        {"shape", field.shape},
                        {"checksum", hex(field.checksum)}});
  return {{"format", kFormatName},
          {"format_version", kFormatVersion},
          {"checksum_algorithm", kChecksumAlgorithm},
          {"datasets", std::move(datasets)}};
}

// ---- reading ----

struct ManifestEntry {
  std::string path;
  FieldType type;
  std::vector<std::uint64_t> shape;
  std::uint64_t checksum;
};

std::vector<ManifestEntry> parse_manifest(const std::string& text, const std::string& source) {
  const json manifest = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object() || !manifest.contains("datasets") ||
      !manifest["datasets"].is_array())
    throw CorruptCheckpoint(
        fmt::format("{}: the manifest attribute is not the expected JSON object", source));
  std::vector<ManifestEntry> entries;
  for (const json& item : manifest["datasets"]) {
    const auto bad = [&](std::string_view why) {
      return CorruptCheckpoint(fmt::format("{}: manifest entry {} {}", source, item.dump(), why));
    };
    if (!item.is_object() || !item.contains("path") || !item["path"].is_string() ||
        !item.contains("dtype") || !item["dtype"].is_string() || !item.contains("shape") ||
        !item["shape"].is_array() || !item.contains("checksum") || !item["checksum"].is_string())
      throw bad("lacks path, dtype, shape or checksum");
    ManifestEntry entry;
    entry.path = item["path"].get<std::string>();
    if (!entry.path.starts_with('/')) throw bad("has a relative path");
    const auto type = detail::parse_type_name(item["dtype"].get<std::string>());
    if (!type) throw bad("has an unknown dtype");
    entry.type = *type;
    for (const json& extent : item["shape"]) {
      if (!extent.is_number_unsigned()) throw bad("has a malformed shape");
      entry.shape.push_back(extent.get<std::uint64_t>());
    }
    const std::string checksum = item["checksum"].get<std::string>();
    std::size_t parsed = 0;
    try {
      entry.checksum = std::stoull(checksum, &parsed, 16);
    } catch (const std::exception&) {
      parsed = 0;
    }
    if (checksum.size() != 16 || parsed != 16) throw bad("has a malformed checksum");
    entries.push_back(std::move(entry));
  }
  return entries;
}

// The dtype the manifest should say for a stored type, and the string size for strings.
std::pair<std::string, std::size_t> describe_stored_type(hid_t type) {
  const H5T_class_t type_class = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  if (type_class == H5T_STRING)
    return {H5Tis_variable_str(type) > 0 ? "variable-length string" : "str", size};
  const bool little = H5Tget_order(type) == H5T_ORDER_LE;
  std::string name = "another type";
  if (type_class == H5T_FLOAT && little) name = size == 4 ? "f32" : size == 8 ? "f64" : name;
  if (type_class == H5T_INTEGER && little && size == 8)
    name = H5Tget_sign(type) == H5T_SGN_NONE ? "u64" : "i64";
  return {name, size};
}

// Reads one dataset the manifest lists into `storage`, checking its type, shape and checksums.
void read_field(const ManifestEntry& entry, hid_t dataset, hid_t type, std::span<std::byte> storage,
                const std::string& source) {
  if (!storage.empty())
    h5::check(H5Dread(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, storage.data()), "H5Dread",
              entry.path);
  if (!h5::has_attribute(dataset, "checksum"))
    throw CorruptCheckpoint(
        fmt::format("{}: dataset {} has no checksum attribute", source, entry.path));
  const auto attribute = h5::read_attribute<std::uint64_t>(dataset, "checksum");
  if (attribute != entry.checksum)
    throw CorruptCheckpoint(
        fmt::format("{}: the checksum attribute of {} ({}) differs from the manifest's ({})",
                    source, entry.path, hex(attribute), hex(entry.checksum)));
  const std::uint64_t actual = core::xxhash64(storage);
  if (actual != entry.checksum)
    throw CorruptCheckpoint(
        fmt::format("{}: checksum mismatch in {}: the data hashes to {}, the checkpoint "
                    "recorded {}; the data is damaged",
                    source, entry.path, hex(actual), hex(entry.checksum)));
}

// A dataset's shape is a claim until its bytes are in the file: refuses, before anything is
// allocated for it, a shape whose size overflows or that the file does not store (hardy writes
// every dataset whole and uncompressed; HDF5 would read missing parts as zeros).
void check_stored(const ManifestEntry& entry, hid_t dataset, std::uint64_t file_bytes,
                  const std::string& source) {
  const h5::StoredData stored = h5::stored_data(dataset);
  std::uint64_t needed = stored.element_bytes;
  bool overflow = false;
  for (const std::uint64_t extent : entry.shape)
    overflow |= __builtin_mul_overflow(needed, extent, &needed);
  if (overflow || stored.filtered || stored.bytes < needed || needed > file_bytes)
    throw CorruptCheckpoint(fmt::format(
        "{}: dataset {} has shape {}{}, but the file stores {} bytes of it{}", source, entry.path,
        shape_text(entry.shape),
        overflow ? " (too large to address)" : fmt::format(" ({} bytes)", needed), stored.bytes,
        stored.filtered ? ", compressed (hardy writes checkpoints uncompressed)" : ""));
}

CheckpointContents read_validated(const std::filesystem::path& path) {
  const h5::Exclusive exclusive;
  const std::string source = path.string();
  const std::uint64_t file_bytes = std::filesystem::file_size(path);
  h5::Handle file;
  try {
    file = h5::open_file(path);
  } catch (const IoError& e) {
    throw CorruptCheckpoint(fmt::format(
        "{}: HDF5 cannot open it, the file is truncated or damaged ({})", source, e.what()));
  }
  const hid_t root = file.id();
  if (!h5::has_attribute(root, "format") ||
      h5::read_string_attribute(root, "format") != kFormatName)
    throw InvalidArgument(
        fmt::format("{} is an HDF5 file but not a hardy checkpoint (its root has no format = "
                    "\"{}\" attribute)",
                    source, kFormatName));
  CheckpointContents contents;
  if (!h5::has_attribute(root, "format_version"))
    throw CorruptCheckpoint(fmt::format("{}: has no format_version attribute", source));
  contents.format_version = h5::read_attribute<int>(root, "format_version");
  if (contents.format_version != kFormatVersion)
    throw CorruptCheckpoint(
        fmt::format("{}: checkpoint format version {} is unknown; this hardy ({}) reads "
                    "version {}{}",
                    source, contents.format_version, HARDY_VERSION, kFormatVersion,
                    contents.format_version > kFormatVersion ? " (use a newer hardy)" : ""));
  if (!h5::has_attribute(root, "checksum_algorithm") ||
      h5::read_string_attribute(root, "checksum_algorithm") != kChecksumAlgorithm)
    throw CorruptCheckpoint(
        fmt::format("{}: the checksum algorithm is not {}", source, kChecksumAlgorithm));
  if (!h5::has_attribute(root, "manifest"))
    throw CorruptCheckpoint(fmt::format("{}: has no manifest attribute", source));
  const auto entries = parse_manifest(h5::read_string_attribute(root, "manifest"), source);

  std::map<std::string, Field, std::less<>> scalars;
  TrainingState& state = contents.state;
  for (const ManifestEntry& entry : entries) {
    if (!h5::exists(root, entry.path))
      throw CorruptCheckpoint(
          fmt::format("{}: dataset {} listed in the manifest is missing", source, entry.path));
    h5::Handle dataset = h5::open_dataset(root, entry.path);
    const auto dims = h5::dataset_dims(dataset.id());
    const std::vector<std::uint64_t> shape(dims.begin(), dims.end());
    if (shape != entry.shape)
      throw CorruptCheckpoint(fmt::format("{}: dataset {} has shape {}, the manifest says {}",
                                          source, entry.path, shape_text(shape),
                                          shape_text(entry.shape)));
    h5::Handle type{H5Dget_type(dataset.id()), "H5Dget_type", entry.path};
    const auto [stored, string_size] = describe_stored_type(type.id());
    if (stored != detail::type_name(entry.type))
      throw CorruptCheckpoint(fmt::format("{}: dataset {} is stored as {}, the manifest says {}",
                                          source, entry.path, stored,
                                          detail::type_name(entry.type)));
    check_stored(entry, dataset.id(), file_bytes, source);
    Field field(entry.path, entry.type, entry.shape, string_size);
    if (detail::is_tensor_path(entry.path)) {
      if (entry.type != FieldType::f32)
        throw CorruptCheckpoint(
            fmt::format("{}: tensor {} is {}, not f32", source, entry.path, stored));
      NamedTensor tensor;
      tensor.dims.assign(shape.begin(), shape.end());
      tensor.values.resize(field.element_count());
      read_field(entry, dataset.id(), type.id(), std::as_writable_bytes(std::span(tensor.values)),
                 source);
      detail::add_tensor(state, entry.path, std::move(tensor));
    } else {
      field.storage.resize(field.element_count() * field.element_size());
      read_field(entry, dataset.id(), type.id(), field.storage, source);
      if (!scalars.emplace(entry.path, std::move(field)).second)
        throw CorruptCheckpoint(fmt::format("{}: the manifest lists {} twice", source, entry.path));
    }
    contents.datasets.push_back(
        {entry.path, std::string(detail::type_name(entry.type)), entry.shape, entry.checksum});
  }
  detail::read_scalars(scalars, state, source);
  return contents;
}

}  // namespace

std::uint64_t write_checkpoint_file(const TrainingState& state, const std::filesystem::path& path,
                                    const WriteProgress& progress, FileAccess access) {
  const std::vector<Field> fields = detail::fields_of(state);
  try {
    const detail::RootAttributes root{.text = {{"format", kFormatName},
                                               {"checksum_algorithm", kChecksumAlgorithm},
                                               {"manifest", manifest_of(fields).dump()}},
                                      .numbers = {{"format_version", kFormatVersion}}};
    core::write_atomically(path, [&](const std::filesystem::path& temporary) {
      detail::write_hdf5_file(fields, root, temporary, progress, access);
    });
  } catch (const IoError& e) {
    throw IoError(fmt::format("checkpoint {} was not written: {}", path.string(), e.what()));
  }
  return std::filesystem::file_size(path);
}

CheckpointContents read_checkpoint_file(const std::filesystem::path& path) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (!std::filesystem::exists(status))
    throw InvalidArgument(fmt::format("checkpoint file {} does not exist", path.string()));
  if (!std::filesystem::is_regular_file(status))
    throw InvalidArgument(fmt::format("{} is not a file", path.string()));
  if (is_snapshot_file(path)) return read_snapshot_file(path);
  bool hdf5 = false;
  try {
    hdf5 = core::h5::is_hdf5_file(path);
  } catch (const IoError&) {
  }
  if (!hdf5) throw InvalidArgument(fmt::format("{} is not an HDF5 file", path.string()));
  CheckpointContents contents;
  try {
    contents = read_validated(path);
  } catch (const CorruptCheckpoint&) {
    throw;
  } catch (const IoError& e) {  // HDF5 failed on something inside: damaged metadata
    throw CorruptCheckpoint(fmt::format("{}: cannot be read: {}", path.string(), e.what()));
  }
  contents.file_bytes = std::filesystem::file_size(path);
  return contents;
}

TrainingState read_checkpoint(const std::filesystem::path& path) {
  return read_checkpoint_file(path).state;
}

}  // namespace hardy::checkpoint
