#include "hdf5_writer.hpp"

#include <fmt/format.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

#include "hardy/core/support/hdf5.hpp"
#include "posix_file.hpp"

namespace hardy::checkpoint::detail {

namespace {

namespace h5 = core::h5;

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
  const h5::Handle attribute{
      H5Acreate2(object, name, type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT), "H5Acreate2",
      what};
  const std::string padded = value.empty() ? std::string(1, '\0') : std::string(value);
  h5::check(H5Awrite(attribute.id(), type.id(), padded.data()), "H5Awrite", what);
}

h5::Handle stored_type(const Field& field) {
  static constexpr const char* call = "H5Tcopy";
  switch (field.type) {
    case FieldType::f32:
      return {H5Tcopy(H5T_IEEE_F32LE), call, "f32 type"};
    case FieldType::f64:
      return {H5Tcopy(H5T_IEEE_F64LE), call, "f64 type"};
    case FieldType::i64:
      return {H5Tcopy(H5T_STD_I64LE), call, "i64 type"};
    case FieldType::u64:
      return {H5Tcopy(H5T_STD_U64LE), call, "u64 type"};
    case FieldType::str:
      break;
  }
  return string_type(field.string_size, field.path);
}

h5::Handle dataspace(const Field& field) {
  if (field.shape.empty()) return {H5Screate(H5S_SCALAR), "H5Screate", field.path};
  const std::vector<hsize_t> dims(field.shape.begin(), field.shape.end());
  return {H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "H5Screate_simple",
          field.path};
}

// Contiguous datasets whose file space HDF5 allocates at creation and never fills: the layout is
// final before any data is written, so the data can be streamed into place afterwards.
h5::Handle preallocated_layout() {
  h5::Handle properties{H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", "dataset creation properties"};
  h5::check(H5Pset_layout(properties.id(), H5D_CONTIGUOUS), "H5Pset_layout",
            "dataset creation properties");
  h5::check(H5Pset_alloc_time(properties.id(), H5D_ALLOC_TIME_EARLY), "H5Pset_alloc_time",
            "dataset creation properties");
  h5::check(H5Pset_fill_time(properties.id(), H5D_FILL_TIME_NEVER), "H5Pset_fill_time",
            "dataset creation properties");
  return properties;
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
    callbacks.image_memcpy = [](void* to, const void* from, std::size_t size, H5FD_file_image_op_t,
                                void*) -> void* { return std::memcpy(to, from, size); };
    callbacks.image_realloc = [](void* old, std::size_t size, H5FD_file_image_op_t,
                                 void* self) -> void* {
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
    return kept_ ? std::span(static_cast<const std::byte*>(data_), size_)
                 : std::span<const std::byte>();
  }

 private:
  void* track(void* memory, std::size_t size) {
    if (memory != nullptr) {
      // A file closed before this one (H5Fcreate's look at an existing file of the same name) is
      // not the image wanted.
      if (kept_ && memory != data_) std::free(data_);
      kept_ = false;
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
// (about 350 bytes measured, plus its name in the group's link storage), the root's attributes
// (the manifest, in its attribute heap), the superblock and groups. HDF5 takes metadata space in
// blocks of this size: when one block holds all of it, every metadata byte lies before the
// first tensor's data, so the in-memory image stays this small however large the tensors are.
// A guess too small costs memory (the image then reaches past the tensors), never correctness;
// the unused rest of the block is a hole in the file that nothing writes.
hsize_t metadata_block_size(const std::vector<Field>& fields, const RootAttributes& root) {
  hsize_t guess = 8192;
  for (const auto& [name, value] : root.text) guess += 2 * value.size();
  for (const Field& field : fields) guess += 640 + 2 * field.path.size();
  return (guess + 4095) / 4096 * 4096;
}

// Lays the file out with HDF5 in memory (core driver, no backing store): groups, datasets with
// their attributes, the root's attributes. HDF5 reserves each dataset's space but writes
// no data; nothing touches the disk.
void lay_out(const std::vector<Field>& fields, const RootAttributes& root,
             const std::filesystem::path& file_path, Layout& layout) {
  h5::quiet_errors();
  const std::string what = fmt::format("file '{}' (in memory)", file_path.string());
  h5::Handle access{H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", "file access properties"};
  // Pages: the image, and with it the file, ends at most a page after the last thing in it.
  h5::check(H5Pset_fapl_core(access.id(), 4096, /*backing_store=*/false), "H5Pset_fapl_core", what);
  H5FD_file_image_callbacks_t callbacks = layout.metadata.callbacks();
  h5::check(H5Pset_file_image_callbacks(access.id(), &callbacks), "H5Pset_file_image_callbacks",
            what);
  h5::check(H5Pset_meta_block_size(access.id(), metadata_block_size(fields, root)),
            "H5Pset_meta_block_size", what);
  // The 1.8 format, read by every HDF5 since 2008: unlike the earliest format its object headers
  // carry checksums, and attributes may exceed 64 KiB (the manifest of a large model).
  h5::check(H5Pset_libver_bounds(access.id(), H5F_LIBVER_V18, H5F_LIBVER_V18),
            "H5Pset_libver_bounds", what);
  h5::Handle file{H5Fcreate(file_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.id()),
                  "H5Fcreate", what};
  const h5::Handle dataset_layout = preallocated_layout();
  {
    std::map<std::string, h5::Handle> groups;
    for (const Field& field : fields) {
      const auto slash = field.path.rfind('/');
      const std::string parent = field.path.substr(0, slash), name = field.path.substr(slash + 1);
      auto group = groups.find(parent);
      if (group == groups.end())
        group = groups.emplace(parent, h5::create_groups(file.id(), parent)).first;
      const h5::Handle type = stored_type(field);
      const h5::Handle space = dataspace(field);
      h5::Handle dataset{H5Dcreate2(group->second.id(), name.c_str(), type.id(), space.id(),
                                    H5P_DEFAULT, dataset_layout.id(), H5P_DEFAULT),
                         "H5Dcreate2", field.path};
      h5::write_attribute(dataset.id(), "checksum", field.checksum);
      write_text_attribute(dataset.id(), "checksum_algorithm", kChecksumAlgorithm);
      // Empty datasets (a job without hosts) have no storage, hence no offset.
      layout.offsets.push_back(
          field.bytes().empty()
              ? 0
              : static_cast<std::uint64_t>(h5::check(
                    static_cast<hid_t>(H5Dget_offset(dataset.id())), "H5Dget_offset", field.path)));
      dataset.close();
    }
    for (auto& [name, group] : groups) group.close();
  }
  for (const auto& [name, value] : root.text) write_text_attribute(file.id(), name.c_str(), value);
  for (const auto& [name, value] : root.numbers) h5::write_attribute(file.id(), name, value);
  hsize_t file_bytes = 0;
  h5::check(H5Fget_filesize(file.id(), &file_bytes), "H5Fget_filesize", what);
  layout.file_bytes = file_bytes;
  file.close();
}

// Every byte of the file is written here, into `file` (created empty at `file_path`), HDF5's
// metadata image first, then one pwrite per field into the space HDF5 reserved for it. HDF5 itself
// never writes to the disk: a full disk surfaces as ENOSPC from pwrite, in hardy's code (where the
// fault injection sits too), rather than as a failed H5Fclose, after which HDF5 1.10 keeps a
// half-closed file that crashes the process at exit. HDF5's global lock is held only while the
// image is built in memory.
void write_image(const Layout& layout, const std::vector<Field>& fields, PosixFile& file,
                 const std::filesystem::path& file_path, const WriteProgress& progress) {
  const auto metadata = layout.metadata.bytes();
  if (metadata.empty())
    throw IoError(fmt::format("HDF5 produced no file image for {}", file_path.string()));
  std::uint64_t end = layout.file_bytes;
  for (std::size_t i = 0; i < fields.size(); ++i)
    end = std::max(end, layout.offsets[i] + fields[i].bytes().size());
  // The metadata image and the fields in file order. Runs of pieces that lie back to back (most
  // of them: HDF5 allocates datasets one after another) go out in one call each. Should the
  // image reach over data (see metadata_block_size), the data written after it wins.
  std::vector<std::pair<std::uint64_t, PosixFile::Piece>> pieces;
  pieces.push_back(
      {0, {metadata.first(std::min<std::uint64_t>(metadata.size(), end)), "the HDF5 metadata"}});
  for (std::size_t i = 0; i < fields.size(); ++i)
    if (!fields[i].bytes().empty())
      pieces.push_back({layout.offsets[i], {fields[i].bytes(), fields[i].path}});
  std::sort(pieces.begin(), pieces.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::uint64_t total = 0, written = 0;
  for (const auto& [offset, piece] : pieces) total += piece.bytes.size();

  std::vector<PosixFile::Piece> run;
  std::uint64_t run_start = 0, run_end = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (run.empty()) run_start = run_end = pieces[i].first;
    run.push_back(pieces[i].second);
    run_end += pieces[i].second.bytes.size();
    if (i + 1 < pieces.size() && pieces[i + 1].first == run_end) continue;
    file.write_at(run_start, run);
    written += run_end - run_start;
    if (progress) progress(static_cast<double>(written) / static_cast<double>(total));
    run.clear();
  }
  file.extend_to(end);  // HDF5 checks that the file reaches the end it recorded
  file.close();
}

}  // namespace

void write_hdf5_file(const std::vector<Field>& fields, const RootAttributes& root,
                     const std::filesystem::path& path, const WriteProgress& progress,
                     FileAccess access) {
  const core::h5::Exclusive exclusive;  // see hdf5.hpp: the whole file, one writer at a time
  // Created before HDF5 sees the name, replacing whatever was there without following a link:
  // H5Fcreate first opens an existing file at that name as if to read it, and the core driver
  // then loads all of it into memory (a crashed write's leftover: the model's size, read in full).
  PosixFile file = PosixFile::create(path, access == FileAccess::owner_only ? 0600 : 0644);
  Layout layout;
  lay_out(fields, root, path, layout);
  write_image(layout, fields, file, path, progress);
}

}  // namespace hardy::checkpoint::detail
