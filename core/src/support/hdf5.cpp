#include "hardy/core/support/hdf5.hpp"

#include <fmt/format.h>
#include <hdf5.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <type_traits>

#include "hardy/core/support/error.hpp"

namespace hardy::core::h5 {

// The header's stand-ins for HDF5's types (it does not include <hdf5.h>).
static_assert(std::is_same_v<Id, hid_t>, "h5::Id must be HDF5's hid_t (HDF5 1.10 or later)");
static_assert(sizeof(Extent) == sizeof(hsize_t) && std::is_unsigned_v<hsize_t>,
              "h5::Extent must hold an hsize_t");
static_assert(kInvalidId == H5I_INVALID_HID);
static_assert(std::is_same_v<herr_t, int> && std::is_same_v<htri_t, int>,
              "h5::check(int) takes herr_t and htri_t");

namespace {

// The main thread is quiet before anyone can make a failing call through the raw C API.
[[maybe_unused]] const bool quiet_at_startup = (quiet_errors(), true);

herr_t collect_error(unsigned /*depth*/, const H5E_error2_t* entry, void* lines_ptr) {
  auto& lines = *static_cast<std::vector<std::string>*>(lines_ptr);
  std::string line = entry->desc != nullptr ? entry->desc : "";
  if (line.empty()) {
    char minor[256] = {};
    H5Eget_msg(entry->min_num, nullptr, minor, sizeof minor);
    line = minor;
  }
  if (!line.empty() && (lines.empty() || lines.back() != line)) lines.push_back(std::move(line));
  return 0;
}

// Closes id with the function for its kind, whose name goes to call for error messages.
herr_t close_id(hid_t id, const char*& call) {
  struct Closer {
    H5I_type_t kind;
    const char* call;
    herr_t (*close)(hid_t);
  };
  static const Closer closers[] = {
      {H5I_FILE, "H5Fclose", H5Fclose},       {H5I_GROUP, "H5Gclose", H5Gclose},
      {H5I_DATASET, "H5Dclose", H5Dclose},    {H5I_DATASPACE, "H5Sclose", H5Sclose},
      {H5I_DATATYPE, "H5Tclose", H5Tclose},   {H5I_ATTR, "H5Aclose", H5Aclose},
      {H5I_GENPROP_LST, "H5Pclose", H5Pclose}};
  const H5I_type_t kind = H5Iget_type(id);
  for (const Closer& closer : closers) {
    if (closer.kind == kind) {
      call = closer.call;
      return closer.close(id);
    }
  }
  call = "H5Idec_ref";
  return H5Idec_ref(id) < 0 ? -1 : 0;
}

herr_t close_id(hid_t id) {
  const char* call = nullptr;
  return close_id(id, call);
}

// "'/fields' in 'a.h5'": the object's path and its file.
std::string describe(hid_t object) {
  const hid_t pending_errors = H5Eget_current_stack();  // see file_name
  char path[512] = {};
  H5Iget_name(object, path, sizeof path);
  if (pending_errors >= 0) H5Eset_current_stack(pending_errors);
  return fmt::format("'{}' in '{}'", path, file_name(object));
}

std::string describe(hid_t parent, std::string_view name) {
  return fmt::format("'{}' in '{}'", name, file_name(parent));
}

template <class Extents>
std::size_t element_count(const Extents& dims) {
  return std::accumulate(dims.begin(), dims.end(), std::size_t{1}, std::multiplies<>());
}

Handle simple_space(const std::vector<hsize_t>& dims) {
  if (dims.empty()) return {H5Screate(H5S_SCALAR), "H5Screate", "a scalar dataspace"};
  return {H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "H5Screate_simple",
          "a dataspace"};
}

void require_count(std::size_t expected, std::size_t given, std::string_view what) {
  if (expected != given)
    throw InvalidArgument(
        fmt::format("{} holds {} elements but the buffer has {}", what, expected, given));
}

// Selects rows [first, first + rows) of a dataset's dataspace; returns it with the selection's
// dimensions. A memory dataspace of those same dimensions lets HDF5 copy whole chunks instead of
// mapping element by element, which is many times slower.
std::pair<Handle, std::vector<hsize_t>> select_rows(hid_t dataset, hsize_t first, hsize_t rows) {
  const std::string what = "dataset " + describe(dataset);
  Handle space{H5Dget_space(dataset), "H5Dget_space", what};
  const std::vector<Extent> extents = dataset_dims(dataset);
  std::vector<hsize_t> dims(extents.begin(), extents.end());
  if (dims.empty() || first + rows > dims[0])
    throw InvalidArgument(fmt::format("rows [{}, {}) are outside {} with {} rows", first,
                                      first + rows, what, dims.empty() ? 0 : dims[0]));
  std::vector<hsize_t> start(dims.size(), 0);
  start[0] = first;
  dims[0] = rows;
  check(
      H5Sselect_hyperslab(space.id(), H5S_SELECT_SET, start.data(), nullptr, dims.data(), nullptr),
      "H5Sselect_hyperslab", what);
  return {std::move(space), dims};
}

void delete_attribute_if_present(hid_t object, const std::string& name) {
  if (has_attribute(object, name))
    check(H5Adelete(object, name.c_str()), "H5Adelete", describe(object, name));
}

Handle variable_string_type() {
  Handle type{H5Tcopy(H5T_C_S1), "H5Tcopy", "string type"};
  check(H5Tset_size(type.id(), H5T_VARIABLE), "H5Tset_size", "string type");
  check(H5Tset_cset(type.id(), H5T_CSET_UTF8), "H5Tset_cset", "string type");
  return type;
}

void write_strings(hid_t object, std::string_view name, const std::vector<std::string>& values,
                   bool scalar) {
  quiet_errors();
  const std::string key(name);
  delete_attribute_if_present(object, key);
  Handle type = variable_string_type();
  Handle space =
      simple_space(scalar ? std::vector<hsize_t>{} : std::vector<hsize_t>{values.size()});
  Handle attribute{H5Acreate2(object, key.c_str(), type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT),
                   "H5Acreate2", describe(object, key)};
  std::vector<const char*> pointers;
  for (const std::string& value : values) pointers.push_back(value.c_str());
  check(H5Awrite(attribute.id(), type.id(), pointers.data()), "H5Awrite", describe(object, key));
}

}  // namespace

void quiet_errors() {
  thread_local bool quiet = false;
  if (!quiet) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    quiet = true;
  }
}

std::string take_error_stack() {
  std::vector<std::string> lines;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &lines);
  H5Eclear2(H5E_DEFAULT);
  if (lines.empty()) return {};
  // The outermost entry says what failed, the innermost why; those between mostly repeat them.
  std::string summary = lines.front();
  if (lines.size() > 1) summary += ": " + lines.back();
  std::replace(summary.begin(), summary.end(), '\n', ' ');
  return summary;
}

hid_t check(hid_t id, const char* call, std::string_view what) {
  if (id >= 0) return id;
  std::string stack = take_error_stack();
  throw IoError(fmt::format("HDF5 {} failed for {}: {}", call, what,
                            stack.empty() ? "no details on the HDF5 error stack" : stack));
}

herr_t check(herr_t status, const char* call, std::string_view what) {
  check(static_cast<hid_t>(status), call, what);
  return status;
}

bool library_is_thread_safe() {
  hbool_t thread_safe = false;
  check(H5is_library_threadsafe(&thread_safe), "H5is_library_threadsafe", "the HDF5 library");
  return thread_safe;
}

namespace {
std::recursive_mutex exclusive_mutex;
std::atomic<bool> exclusive_forced{false};
}  // namespace

Exclusive::Exclusive() {
  static const bool thread_safe = library_is_thread_safe();
  if (!thread_safe || exclusive_forced.load()) lock_ = std::unique_lock(exclusive_mutex);
}

void Exclusive::force_for_testing(bool force) { exclusive_forced.store(force); }

Handle::Handle(hid_t id, const char* call, std::string_view what) {
  quiet_errors();
  id_ = check(id, call, what);
}

Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    if (valid()) close_id(id_);
    id_ = other.release();
  }
  return *this;
}

Handle::~Handle() {
  if (valid() && close_id(id_) < 0) H5Eclear2(H5E_DEFAULT);  // nowhere to report it
}

hid_t Handle::release() noexcept {
  hid_t id = id_;
  id_ = H5I_INVALID_HID;
  return id;
}

void Handle::close() {
  if (!valid()) return;
  const std::string what = describe(id_);
  const char* call = nullptr;
  herr_t status = close_id(release(), call);
  check(status, call, what);
}

Handle create_file(const std::filesystem::path& path) {
  quiet_errors();
  return {H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "H5Fcreate",
          fmt::format("file '{}'", path.string())};
}

Handle open_file(const std::filesystem::path& path, FileMode mode) {
  quiet_errors();
  return {H5Fopen(path.c_str(), mode == FileMode::read_only ? H5F_ACC_RDONLY : H5F_ACC_RDWR,
                  H5P_DEFAULT),
          "H5Fopen", fmt::format("file '{}'", path.string())};
}

bool is_hdf5_file(const std::filesystem::path& path) {
  quiet_errors();
  return check(H5Fis_hdf5(path.c_str()), "H5Fis_hdf5", fmt::format("file '{}'", path.string())) > 0;
}

std::string file_name(hid_t object) {
  // Any successful HDF5 call clears the error stack, and this runs while a failure's stack
  // still waits to be reported: set it aside meanwhile.
  const hid_t pending_errors = H5Eget_current_stack();
  std::string name = "<unknown file>";
  const ssize_t length = H5Fget_name(object, nullptr, 0);
  if (length >= 0) {
    name.assign(static_cast<std::size_t>(length) + 1, '\0');
    H5Fget_name(object, name.data(), name.size());
    name.resize(static_cast<std::size_t>(length));
  }
  if (pending_errors >= 0) H5Eset_current_stack(pending_errors);
  return name;
}

Handle create_groups(hid_t parent, std::string_view path) {
  quiet_errors();
  Handle current{H5Oopen(parent, ".", H5P_DEFAULT), "H5Oopen", describe(parent, ".")};
  std::size_t begin = 0;
  while (begin <= path.size()) {
    std::size_t end = std::min(path.find('/', begin), path.size());
    const std::string part(path.substr(begin, end - begin));
    begin = end + 1;
    if (part.empty()) continue;
    const std::string what = describe(parent, path.substr(0, end));
    if (check(H5Lexists(current.id(), part.c_str(), H5P_DEFAULT), "H5Lexists", what) > 0)
      current = Handle{H5Gopen2(current.id(), part.c_str(), H5P_DEFAULT), "H5Gopen2", what};
    else
      current =
          Handle{H5Gcreate2(current.id(), part.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                 "H5Gcreate2", what};
  }
  return current;
}

Handle open_group(hid_t parent, std::string_view path) {
  quiet_errors();
  const std::string key(path);
  return {H5Gopen2(parent, key.c_str(), H5P_DEFAULT), "H5Gopen2", describe(parent, path)};
}

bool exists(hid_t parent, std::string_view path) {
  quiet_errors();
  for (std::size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string prefix(path.substr(0, end));
    if (!prefix.empty() && prefix != "/" &&
        check(H5Lexists(parent, prefix.c_str(), H5P_DEFAULT), "H5Lexists",
              describe(parent, prefix)) <= 0)
      return false;
    if (end == std::string_view::npos) return true;
  }
}

std::vector<std::string> list_children(hid_t group) {
  quiet_errors();
  std::vector<std::string> names;
  auto append = [](hid_t, const char* name, const H5L_info_t*, void* names_ptr) -> herr_t {
    static_cast<std::vector<std::string>*>(names_ptr)->emplace_back(name);
    return 0;
  };
  check(H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, nullptr, append, &names), "H5Literate",
        describe(group, "group"));
  return names;
}

Handle create_dataset(hid_t parent, std::string_view name, hid_t file_type,
                      const std::vector<Extent>& dims, const std::vector<Extent>& chunk_extents) {
  quiet_errors();
  const std::string key(name);
  Handle space = simple_space(std::vector<hsize_t>(dims.begin(), dims.end()));
  const std::vector<hsize_t> chunk_dims(chunk_extents.begin(), chunk_extents.end());
  Handle properties{H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", "dataset creation properties"};
  if (!chunk_dims.empty())
    check(H5Pset_chunk(properties.id(), static_cast<int>(chunk_dims.size()), chunk_dims.data()),
          "H5Pset_chunk", describe(parent, name));
  return {H5Dcreate2(parent, key.c_str(), file_type, space.id(), H5P_DEFAULT, properties.id(),
                     H5P_DEFAULT),
          "H5Dcreate2", describe(parent, name)};
}

Handle open_dataset(hid_t parent, std::string_view name) {
  quiet_errors();
  const std::string key(name);
  return {H5Dopen2(parent, key.c_str(), H5P_DEFAULT), "H5Dopen2", describe(parent, name)};
}

std::vector<Extent> dataset_dims(hid_t dataset) {
  const std::string what = "dataset " + describe(dataset);
  Handle space{H5Dget_space(dataset), "H5Dget_space", what};
  int rank = check(H5Sget_simple_extent_ndims(space.id()), "H5Sget_simple_extent_ndims", what);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  check(H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr), "H5Sget_simple_extent_dims",
        what);
  return {dims.begin(), dims.end()};
}

TypeClass dataset_type_class(hid_t dataset) {
  Handle type{H5Dget_type(dataset), "H5Dget_type", "dataset " + describe(dataset)};
  switch (H5Tget_class(type.id())) {
    case H5T_INTEGER:
      return TypeClass::integer;
    case H5T_FLOAT:
      return TypeClass::floating_point;
    case H5T_STRING:
      return TypeClass::string;
    default:
      return TypeClass::other;
  }
}

StoredData stored_data(hid_t dataset) {
  Handle properties{H5Dget_create_plist(dataset), "H5Dget_create_plist",
                    "dataset " + describe(dataset)};
  const int filters = check(H5Pget_nfilters(properties.id()), "H5Pget_nfilters", describe(dataset));
  Handle type{H5Dget_type(dataset), "H5Dget_type", "dataset " + describe(dataset)};
  return {.bytes = H5Dget_storage_size(dataset),
          .filtered = filters > 0,
          .element_bytes = H5Tget_size(type.id())};
}

hid_t native_type(NumberType type) {
  switch (type) {
    case NumberType::f32:
      return H5T_NATIVE_FLOAT;
    case NumberType::f64:
      return H5T_NATIVE_DOUBLE;
    case NumberType::i8:
      return H5T_NATIVE_INT8;
    case NumberType::u8:
      return H5T_NATIVE_UINT8;
    case NumberType::i16:
      return H5T_NATIVE_INT16;
    case NumberType::u16:
      return H5T_NATIVE_UINT16;
    case NumberType::i32:
      return H5T_NATIVE_INT32;
    case NumberType::u32:
      return H5T_NATIVE_UINT32;
    case NumberType::i64:
      return H5T_NATIVE_INT64;
    case NumberType::u64:
      return H5T_NATIVE_UINT64;
  }
  throw InvalidArgument(fmt::format("no HDF5 type for number type {}", static_cast<int>(type)));
}

namespace detail {

void write_all(hid_t dataset, hid_t memory_type, const void* data, std::size_t count) {
  const std::string what = "dataset " + describe(dataset);
  require_count(element_count(dataset_dims(dataset)), count, what);
  check(H5Dwrite(dataset, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "H5Dwrite", what);
}

void read_all(hid_t dataset, hid_t memory_type, void* data, std::size_t count) {
  const std::string what = "dataset " + describe(dataset);
  require_count(element_count(dataset_dims(dataset)), count, what);
  check(H5Dread(dataset, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "H5Dread", what);
}

// Rows [first, first + rows) of a dataset, checked to hold `count` elements: the file's selection
// and a memory space of the same shape, for one H5Dread or H5Dwrite.
struct RowTransfer {
  std::string what;
  Handle file_space, memory_space;
};

RowTransfer select_rows_of(hid_t dataset, Extent first, Extent rows, std::size_t count) {
  std::string what =
      fmt::format("rows [{}, {}) of dataset {}", first, first + rows, describe(dataset));
  auto [file_space, selected] = select_rows(dataset, first, rows);
  require_count(element_count(selected), count, what);
  Handle memory_space = simple_space(selected);
  return {std::move(what), std::move(file_space), std::move(memory_space)};
}

void write_rows(hid_t dataset, Extent first, Extent rows, hid_t memory_type, const void* data,
                std::size_t count) {
  const RowTransfer rows_of = select_rows_of(dataset, first, rows, count);
  check(H5Dwrite(dataset, memory_type, rows_of.memory_space.id(), rows_of.file_space.id(),
                 H5P_DEFAULT, data),
        "H5Dwrite", rows_of.what);
}

void read_rows(hid_t dataset, Extent first, Extent rows, hid_t memory_type, void* data,
               std::size_t count) {
  const RowTransfer rows_of = select_rows_of(dataset, first, rows, count);
  check(H5Dread(dataset, memory_type, rows_of.memory_space.id(), rows_of.file_space.id(),
                H5P_DEFAULT, data),
        "H5Dread", rows_of.what);
}

void write_scalar_attribute(hid_t object, std::string_view name, hid_t type, const void* value) {
  quiet_errors();
  const std::string key(name);
  delete_attribute_if_present(object, key);
  Handle space = simple_space({});
  Handle attribute{H5Acreate2(object, key.c_str(), type, space.id(), H5P_DEFAULT, H5P_DEFAULT),
                   "H5Acreate2", describe(object, key)};
  check(H5Awrite(attribute.id(), type, value), "H5Awrite", describe(object, key));
}

void read_scalar_attribute(hid_t object, std::string_view name, hid_t type, void* value) {
  quiet_errors();
  const std::string key(name);
  Handle attribute{H5Aopen(object, key.c_str(), H5P_DEFAULT), "H5Aopen", describe(object, key)};
  Handle space{H5Aget_space(attribute.id()), "H5Aget_space", describe(object, key)};
  if (H5Sget_simple_extent_npoints(space.id()) != 1)
    throw InvalidArgument(fmt::format("attribute {} is not a scalar", describe(object, key)));
  check(H5Aread(attribute.id(), type, value), "H5Aread", describe(object, key));
}

}  // namespace detail

bool has_attribute(hid_t object, std::string_view name) {
  quiet_errors();
  const std::string key(name);
  return check(H5Aexists(object, key.c_str()), "H5Aexists", describe(object, key)) > 0;
}

void write_attribute(hid_t object, std::string_view name, std::string_view value) {
  write_strings(object, name, {std::string(value)}, /*scalar=*/true);
}

void write_attribute(hid_t object, std::string_view name, const std::vector<std::string>& values) {
  write_strings(object, name, values, /*scalar=*/false);
}

std::vector<std::string> read_strings_attribute(hid_t object, std::string_view name) {
  quiet_errors();
  const std::string key(name);
  const std::string what = describe(object, key);
  Handle attribute{H5Aopen(object, key.c_str(), H5P_DEFAULT), "H5Aopen", what};
  // Reading with the stored type itself handles fixed-length (NumPy bytes) and variable-length
  // (h5py str, hardy) strings without conversion.
  Handle type{H5Aget_type(attribute.id()), "H5Aget_type", what};
  if (H5Tget_class(type.id()) != H5T_STRING)
    throw InvalidArgument(fmt::format("attribute {} does not hold strings", what));
  Handle space{H5Aget_space(attribute.id()), "H5Aget_space", what};
  const auto count =
      static_cast<std::size_t>(check(static_cast<hid_t>(H5Sget_simple_extent_npoints(space.id())),
                                     "H5Sget_simple_extent_npoints", what));
  std::vector<std::string> values;
  if (check(H5Tis_variable_str(type.id()), "H5Tis_variable_str", what) > 0) {
    std::vector<char*> pointers(count, nullptr);
    check(H5Aread(attribute.id(), type.id(), pointers.data()), "H5Aread", what);
    for (char* pointer : pointers) {
      values.emplace_back(pointer != nullptr ? pointer : "");
      H5free_memory(pointer);
    }
  } else {
    const std::size_t size = H5Tget_size(type.id());
    std::vector<char> buffer(count * size);
    check(H5Aread(attribute.id(), type.id(), buffer.data()), "H5Aread", what);
    for (std::size_t i = 0; i < count; ++i) {
      std::string_view value(buffer.data() + i * size, size);
      values.emplace_back(value.substr(0, value.find('\0')));
    }
  }
  return values;
}

std::string read_string_attribute(hid_t object, std::string_view name) {
  std::vector<std::string> values = read_strings_attribute(object, name);
  if (values.size() != 1)
    throw InvalidArgument(fmt::format("attribute {} holds {} strings, not one",
                                      describe(object, name), values.size()));
  return values.front();
}

}  // namespace hardy::core::h5
