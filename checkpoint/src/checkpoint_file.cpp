#include "hardy/checkpoint/checkpoint_file.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hardy/checkpoint/model_file.hpp"
#include "hardy/core/digest.hpp"
#include "hardy/core/hdf5.hpp"
#include "posix_file.hpp"
#include "state_fields.hpp"

namespace hardy::checkpoint {

namespace {

namespace h5 = core::h5;
using detail::Field;
using detail::FieldType;
using nlohmann::json;

std::string hex(std::uint64_t value) { return fmt::format("{:016x}", value); }

std::string shape_text(const std::vector<std::uint64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

// ---- writing ----

// Fixed-length strings only, attributes included: HDF5 keeps variable-length strings in a global
// heap that it places among the raw data, which would put metadata after the tensors (see
// metadata_block_size).
h5::Handle string_type(std::size_t size, std::string_view what) {
  h5::Handle type{H5Tcopy(H5T_C_S1), "H5Tcopy", what};
  h5::check(H5Tset_size(type.id(), std::max<std::size_t>(size, 1)), "H5Tset_size", what);
  h5::check(H5Tset_strpad(type.id(), H5T_STR_NULLPAD), "H5Tset_strpad", what);
  h5::check(H5Tset_cset(type.id(), H5T_CSET_UTF8), "H5Tset_cset", what);
  return type;
}

void write_text_attribute(hid_t object, const char* name, std::string_view value) {
  const std::string what = fmt::format("attribute {}", name);
  const h5::Handle type = string_type(value.size(), what);
  const h5::Handle space{H5Screate(H5S_SCALAR), "H5Screate", what};
  const h5::Handle attribute{H5Acreate2(object, name, type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT), "H5Acreate2",
                             what};
  const std::string padded = value.empty() ? std::string(1, '\0') : std::string(value);
  h5::check(H5Awrite(attribute.id(), type.id(), padded.data()), "H5Awrite", what);
}

h5::Handle stored_type(const Field& field) {
  static constexpr const char* call = "H5Tcopy";
  switch (field.type) {
    case FieldType::f32: return {H5Tcopy(H5T_IEEE_F32LE), call, "f32 type"};
    case FieldType::f64: return {H5Tcopy(H5T_IEEE_F64LE), call, "f64 type"};
    case FieldType::i64: return {H5Tcopy(H5T_STD_I64LE), call, "i64 type"};
    case FieldType::u64: return {H5Tcopy(H5T_STD_U64LE), call, "u64 type"};
    case FieldType::str: break;
  }
  return string_type(field.string_size, field.path);
}

h5::Handle dataspace(const Field& field) {
  if (field.shape.empty()) return {H5Screate(H5S_SCALAR), "H5Screate", field.path};
  const std::vector<hsize_t> dims(field.shape.begin(), field.shape.end());
  return {H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "H5Screate_simple", field.path};
}

// Contiguous datasets whose file space HDF5 allocates at creation and never fills: the layout is
// final before any data is written, so the data can be streamed into place afterwards.
h5::Handle preallocated_layout() {
  h5::Handle properties{H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", "dataset creation properties"};
  h5::check(H5Pset_layout(properties.id(), H5D_CONTIGUOUS), "H5Pset_layout", "dataset creation properties");
  h5::check(H5Pset_alloc_time(properties.id(), H5D_ALLOC_TIME_EARLY), "H5Pset_alloc_time",
            "dataset creation properties");
  h5::check(H5Pset_fill_time(properties.id(), H5D_FILL_TIME_NEVER), "H5Pset_fill_time",
            "dataset creation properties");
  return properties;
}

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

// The core driver's memory, allocated through these callbacks so that the finished image is
// still there after H5Fclose, which would otherwise free it.
class MemoryImage {
 public:
  MemoryImage() = default;
  MemoryImage(const MemoryImage&) = delete;
  MemoryImage& operator=(const MemoryImage&) = delete;
  ~MemoryImage() {
    if (kept_) std::free(data_);
  }

  H5FD_file_image_callbacks_t callbacks() {
    H5FD_file_image_callbacks_t callbacks{};
    callbacks.image_malloc = [](std::size_t size, H5FD_file_image_op_t, void* self) -> void* {
      return static_cast<MemoryImage*>(self)->track(std::malloc(size), size);
    };
    callbacks.image_memcpy = [](void* to, const void* from, std::size_t size, H5FD_file_image_op_t, void*) -> void* {
      return std::memcpy(to, from, size);
    };
    callbacks.image_realloc = [](void* old, std::size_t size, H5FD_file_image_op_t, void* self) -> void* {
      return static_cast<MemoryImage*>(self)->track(std::realloc(old, size), size);
    };
    callbacks.image_free = [](void* memory, H5FD_file_image_op_t op, void* self) -> herr_t {
      auto* image = static_cast<MemoryImage*>(self);
      if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && memory == image->data_)
        image->kept_ = true;  // the file is complete: keep it for writing out
      else
        std::free(memory);
      return 0;
    };
    // The property list is copied into the file; all copies share this one object.
    callbacks.udata_copy = [](void* self) -> void* { return self; };
    callbacks.udata_free = [](void*) -> herr_t { return 0; };
    callbacks.udata = this;
    return callbacks;
  }
  // The image once the file is closed.
  std::span<const std::byte> bytes() const {
    return kept_ ? std::span(static_cast<const std::byte*>(data_), size_) : std::span<const std::byte>();
  }

 private:
  void* track(void* memory, std::size_t size) {
    if (memory != nullptr) {
      data_ = memory;
      size_ = size;
    }
    return memory;
  }
  void* data_ = nullptr;
  std::size_t size_ = 0;
  bool kept_ = false;
};

struct Layout {
  MemoryImage metadata;                // HDF5's part of the file, from offset 0
  std::vector<std::uint64_t> offsets;  // where each field's data goes
  std::uint64_t file_bytes = 0;        // the end of the file HDF5 allocated
};

// A generous guess of the metadata's size: an object header with two attributes per dataset
// (about 350 bytes measured, plus its name in the group's link storage), the manifest (stored
// once in the root's attribute heap), the superblock and groups. HDF5 takes metadata space in
// blocks of this size: when one block holds all of it, every metadata byte lies before the
// first tensor's data, so the in-memory image stays this small however large the tensors are.
// A guess too small costs memory (the image then reaches past the tensors), never correctness;
// the unused rest of the block is a hole in the file that nothing writes.
hsize_t metadata_block_size(const std::vector<Field>& fields, std::size_t manifest_bytes) {
  hsize_t guess = 8192 + 2 * manifest_bytes;
  for (const Field& field : fields) guess += 640 + 2 * field.path.size();
  return (guess + 4095) / 4096 * 4096;
}

// Lays the file out with HDF5 in memory (core driver, no backing store): groups, datasets with
// their attributes, root attributes and manifest. HDF5 reserves each dataset's space but writes
// no data; nothing touches the disk.
void lay_out(const std::vector<Field>& fields, const std::filesystem::path& file_path, Layout& layout) {
  h5::quiet_errors();
  const std::string what = fmt::format("file '{}' (in memory)", file_path.string());
  const std::string manifest = manifest_of(fields).dump();
  h5::Handle access{H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", "file access properties"};
  // Pages: the image, and with it the file, ends at most a page after the last thing in it.
  h5::check(H5Pset_fapl_core(access.id(), 4096, /*backing_store=*/false), "H5Pset_fapl_core", what);
  H5FD_file_image_callbacks_t callbacks = layout.metadata.callbacks();
  h5::check(H5Pset_file_image_callbacks(access.id(), &callbacks), "H5Pset_file_image_callbacks", what);
  h5::check(H5Pset_meta_block_size(access.id(), metadata_block_size(fields, manifest.size())),
            "H5Pset_meta_block_size", what);
  // The 1.8 format, read by every HDF5 since 2008: unlike the earliest format its object headers
  // carry checksums, and attributes may exceed 64 KiB (the manifest of a large model).
  h5::check(H5Pset_libver_bounds(access.id(), H5F_LIBVER_V18, H5F_LIBVER_V18), "H5Pset_libver_bounds", what);
  h5::Handle file{H5Fcreate(file_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.id()), "H5Fcreate", what};
  const h5::Handle dataset_layout = preallocated_layout();
  {
    std::map<std::string, h5::Handle> groups;
    for (const Field& field : fields) {
      const auto slash = field.path.rfind('/');
      const std::string parent = field.path.substr(0, slash), name = field.path.substr(slash + 1);
      auto group = groups.find(parent);
      if (group == groups.end()) group = groups.emplace(parent, h5::create_groups(file.id(), parent)).first;
      const h5::Handle type = stored_type(field);
      const h5::Handle space = dataspace(field);
      h5::Handle dataset{H5Dcreate2(group->second.id(), name.c_str(), type.id(), space.id(), H5P_DEFAULT,
                                    dataset_layout.id(), H5P_DEFAULT),
                         "H5Dcreate2", field.path};
      h5::write_attribute(dataset.id(), "checksum", field.checksum);
      write_text_attribute(dataset.id(), "checksum_algorithm", kChecksumAlgorithm);
      // Empty datasets (a job without hosts) have no storage, hence no offset.
      layout.offsets.push_back(field.bytes().empty()
                                   ? 0
                                   : static_cast<std::uint64_t>(h5::check(
                                         static_cast<hid_t>(H5Dget_offset(dataset.id())), "H5Dget_offset", field.path)));
      dataset.close();
    }
    for (auto& [name, group] : groups) group.close();
  }
  write_text_attribute(file.id(), "format", kFormatName);
  h5::write_attribute(file.id(), "format_version", kFormatVersion);
  write_text_attribute(file.id(), "checksum_algorithm", kChecksumAlgorithm);
  write_text_attribute(file.id(), "manifest", manifest);
  hsize_t file_bytes = 0;
  h5::check(H5Fget_filesize(file.id(), &file_bytes), "H5Fget_filesize", what);
  layout.file_bytes = file_bytes;
  file.close();
}

// Every byte of the file is written here, HDF5's metadata image first, then one pwrite per field
// into the space HDF5 reserved for it. HDF5 itself never writes to the disk: a full disk
// surfaces as ENOSPC from pwrite, in hardy's code (where the fault injection sits too), rather
// than as a failed H5Fclose, after which HDF5 1.10 keeps a half-closed file that crashes the
// process at exit. HDF5's global lock is held only while the image is built in memory.
void write_file(const Layout& layout, const std::vector<Field>& fields, const std::filesystem::path& file_path,
                const WriteProgress& progress) {
  const auto metadata = layout.metadata.bytes();
  if (metadata.empty()) throw IoError(fmt::format("HDF5 produced no file image for {}", file_path.string()));
  std::uint64_t end = layout.file_bytes, written = 0;
  for (std::size_t i = 0; i < fields.size(); ++i) end = std::max(end, layout.offsets[i] + fields[i].bytes().size());
  std::uint64_t total = std::min<std::uint64_t>(metadata.size(), end);
  for (const Field& field : fields) total += field.bytes().size();
  detail::PosixFile file = detail::PosixFile::create(file_path);
  const auto advance = [&](std::size_t bytes) {
    written += bytes;
    if (progress) progress(static_cast<double>(written) / static_cast<double>(total));
  };
  const auto image = metadata.first(std::min<std::uint64_t>(metadata.size(), end));
  file.write_at(0, image, "the HDF5 metadata");
  advance(image.size());
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto bytes = fields[i].bytes();
    if (bytes.empty()) continue;
    file.write_at(layout.offsets[i], bytes, fields[i].path);
    advance(bytes.size());
  }
  file.extend_to(end);  // HDF5 checks that the file reaches the end it recorded
  file.close();
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
    throw CorruptCheckpoint(fmt::format("{}: the manifest attribute is not the expected JSON object", source));
  std::vector<ManifestEntry> entries;
  for (const json& item : manifest["datasets"]) {
    const auto bad = [&](std::string_view why) {
      return CorruptCheckpoint(fmt::format("{}: manifest entry {} {}", source, item.dump(), why));
    };
    if (!item.is_object() || !item.contains("path") || !item["path"].is_string() || !item.contains("dtype") ||
        !item["dtype"].is_string() || !item.contains("shape") || !item["shape"].is_array() ||
        !item.contains("checksum") || !item["checksum"].is_string())
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
  if (type_class == H5T_INTEGER && little && size == 8) name = H5Tget_sign(type) == H5T_SGN_NONE ? "u64" : "i64";
  return {name, size};
}

// Reads one dataset the manifest lists into `storage`, checking its type, shape and checksums.
void read_field(const ManifestEntry& entry, hid_t dataset, hid_t type, std::span<std::byte> storage,
                const std::string& source) {
  if (!storage.empty())
    h5::check(H5Dread(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, storage.data()), "H5Dread", entry.path);
  if (!h5::has_attribute(dataset, "checksum"))
    throw CorruptCheckpoint(fmt::format("{}: dataset {} has no checksum attribute", source, entry.path));
  const auto attribute = h5::read_attribute<std::uint64_t>(dataset, "checksum");
  if (attribute != entry.checksum)
    throw CorruptCheckpoint(fmt::format("{}: the checksum attribute of {} ({}) differs from the manifest's ({})",
                                        source, entry.path, hex(attribute), hex(entry.checksum)));
  const std::uint64_t actual = core::xxhash64(storage);
  if (actual != entry.checksum)
    throw CorruptCheckpoint(fmt::format("{}: checksum mismatch in {}: the data hashes to {}, the checkpoint "
                                        "recorded {}; the data is damaged",
                                        source, entry.path, hex(actual), hex(entry.checksum)));
}

CheckpointContents read_validated(const std::filesystem::path& path) {
  const std::string source = path.string();
  h5::Handle file;
  try {
    file = h5::open_file(path);
  } catch (const IoError& e) {
    throw CorruptCheckpoint(fmt::format("{}: HDF5 cannot open it, the file is truncated or damaged ({})", source,
                                        e.what()));
  }
  const hid_t root = file.id();
  if (!h5::has_attribute(root, "format") || h5::read_string_attribute(root, "format") != kFormatName)
    throw InvalidArgument(fmt::format("{} is an HDF5 file but not a hardy checkpoint (its root has no format = "
                                      "\"{}\" attribute)",
                                      source, kFormatName));
  CheckpointContents contents;
  if (!h5::has_attribute(root, "format_version"))
    throw CorruptCheckpoint(fmt::format("{}: has no format_version attribute", source));
  contents.format_version = h5::read_attribute<int>(root, "format_version");
  if (contents.format_version != kFormatVersion)
    throw CorruptCheckpoint(fmt::format("{}: checkpoint format version {} is unknown; this hardy ({}) reads "
                                        "version {}{}",
                                        source, contents.format_version, HARDY_VERSION, kFormatVersion,
                                        contents.format_version > kFormatVersion ? " (use a newer hardy)" : ""));
  if (!h5::has_attribute(root, "checksum_algorithm") ||
      h5::read_string_attribute(root, "checksum_algorithm") != kChecksumAlgorithm)
    throw CorruptCheckpoint(fmt::format("{}: the checksum algorithm is not {}", source, kChecksumAlgorithm));
  if (!h5::has_attribute(root, "manifest"))
    throw CorruptCheckpoint(fmt::format("{}: has no manifest attribute", source));
  const auto entries = parse_manifest(h5::read_string_attribute(root, "manifest"), source);

  std::map<std::string, Field, std::less<>> scalars;
  TrainingState& state = contents.state;
  for (const ManifestEntry& entry : entries) {
    if (!h5::exists(root, entry.path))
      throw CorruptCheckpoint(fmt::format("{}: dataset {} listed in the manifest is missing", source, entry.path));
    h5::Handle dataset = h5::open_dataset(root, entry.path);
    const auto dims = h5::dataset_dims(dataset.id());
    const std::vector<std::uint64_t> shape(dims.begin(), dims.end());
    if (shape != entry.shape)
      throw CorruptCheckpoint(fmt::format("{}: dataset {} has shape {}, the manifest says {}", source, entry.path,
                                          shape_text(shape), shape_text(entry.shape)));
    h5::Handle type{H5Dget_type(dataset.id()), "H5Dget_type", entry.path};
    const auto [stored, string_size] = describe_stored_type(type.id());
    if (stored != detail::type_name(entry.type))
      throw CorruptCheckpoint(fmt::format("{}: dataset {} is stored as {}, the manifest says {}", source,
                                          entry.path, stored, detail::type_name(entry.type)));
    Field field(entry.path, entry.type, entry.shape, string_size);
    if (detail::is_tensor_path(entry.path)) {
      if (entry.type != FieldType::f32)
        throw CorruptCheckpoint(fmt::format("{}: tensor {} is {}, not f32", source, entry.path, stored));
      NamedTensor tensor;
      tensor.dims.assign(shape.begin(), shape.end());
      tensor.values.resize(field.element_count());
      read_field(entry, dataset.id(), type.id(), std::as_writable_bytes(std::span(tensor.values)), source);
      detail::add_tensor(state, entry.path, std::move(tensor));
    } else {
      field.storage.resize(field.element_count() * field.element_size());
      read_field(entry, dataset.id(), type.id(), field.storage, source);
      if (!scalars.emplace(entry.path, std::move(field)).second)
        throw CorruptCheckpoint(fmt::format("{}: the manifest lists {} twice", source, entry.path));
    }
    contents.datasets.push_back({entry.path, std::string(detail::type_name(entry.type)), entry.shape, entry.checksum});
  }
  detail::read_scalars(scalars, state, source);
  return contents;
}

}  // namespace

std::uint64_t write_checkpoint_file(const TrainingState& state, const std::filesystem::path& path,
                                    const WriteProgress& progress) {
  const std::vector<Field> fields = detail::fields_of(state);
  try {
    write_atomically(path, [&](const std::filesystem::path& temporary) {
      Layout layout;
      lay_out(fields, temporary, layout);
      write_file(layout, fields, temporary, progress);
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

TrainingState read_checkpoint(const std::filesystem::path& path) { return read_checkpoint_file(path).state; }

}  // namespace hardy::checkpoint
