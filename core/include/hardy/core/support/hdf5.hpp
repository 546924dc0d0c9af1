#pragma once
// A thin RAII and error-checking layer over the HDF5 C API, shared by the data pipeline and the
// checkpoint library. Every id lives in an h5::Handle, which closes it with the matching H5*close;
// every call that can fail goes through h5::check, which turns a failure into one hardy::IoError
// that names the call, the object and what HDF5's error stack says, instead of HDF5's default
// multi-line dump on stderr.
//
// Thread safety: HDF5 serializes all calls behind a global lock only when built thread-safe
// (library_is_thread_safe()); otherwise at most one thread may use HDF5 at a time.
#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace hardy::core::h5 {

// Stops HDF5 from printing its error stack on the calling thread (the setting is per thread in
// thread-safe builds). Everything in this header calls it; call it before using the raw C API.
void quiet_errors();

// Throw hardy::IoError when an HDF5 call failed (negative result), e.g.
//   check(H5Dwrite(...), "H5Dwrite", "dataset /fields in 'a.h5'")
// and pass the result through otherwise (htri_t results are herr_t).
hid_t check(hid_t id, const char* call, std::string_view what);
herr_t check(herr_t status, const char* call, std::string_view what);

// The calling thread's HDF5 error stack as one line, innermost cause last; clears the stack.
std::string take_error_stack();

bool library_is_thread_safe();

// Owns one HDF5 id of any kind and closes it with the right function for that kind.
class Handle {
 public:
  Handle() noexcept = default;
  // Checks id (see check) and takes ownership of it.
  Handle(hid_t id, const char* call, std::string_view what);
  Handle(Handle&& other) noexcept : id_(other.release()) {}
  Handle& operator=(Handle&& other) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle();

  hid_t id() const noexcept { return id_; }
  bool valid() const noexcept { return id_ >= 0; }
  hid_t release() noexcept;
  // Closes now and throws IoError when HDF5 reports a failure; closing a file flushes it, so a
  // writer calls this to learn about a full disk instead of losing the error in a destructor.
  void close();

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// The in-memory HDF5 type of an arithmetic C++ type.
template <class T>
hid_t native_type() {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, "no HDF5 type for T");
  if constexpr (std::is_same_v<T, float>) {
    return H5T_NATIVE_FLOAT;
  } else if constexpr (std::is_same_v<T, double>) {
    return H5T_NATIVE_DOUBLE;
  } else if constexpr (sizeof(T) == 1) {
    return std::is_signed_v<T> ? H5T_NATIVE_INT8 : H5T_NATIVE_UINT8;
  } else if constexpr (sizeof(T) == 2) {
    return std::is_signed_v<T> ? H5T_NATIVE_INT16 : H5T_NATIVE_UINT16;
  } else if constexpr (sizeof(T) == 4) {
    return std::is_signed_v<T> ? H5T_NATIVE_INT32 : H5T_NATIVE_UINT32;
  } else {
    static_assert(sizeof(T) == 8, "no HDF5 type for T");
    return std::is_signed_v<T> ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64;
  }
}

template <class T>
concept Number = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

// ---- files and groups ----
enum class FileMode { read_only, read_write };
Handle create_file(const std::filesystem::path& path);  // truncates an existing file
Handle open_file(const std::filesystem::path& path, FileMode mode = FileMode::read_only);
bool is_hdf5_file(const std::filesystem::path& path);
// The file an object belongs to, for error messages.
std::string file_name(hid_t object);

// Opens the group at a '/'-separated path below parent, creating it and any missing groups on
// the way.
Handle create_groups(hid_t parent, std::string_view path);
Handle open_group(hid_t parent, std::string_view path);
// Whether every link along path exists (H5Lexists alone fails on a missing intermediate group).
bool exists(hid_t parent, std::string_view path);
// Names of the links directly inside a group, in name order.
std::vector<std::string> list_children(hid_t group);

// ---- datasets ----
// chunk_dims empty: contiguous storage.
Handle create_dataset(hid_t parent, std::string_view name, hid_t file_type,
                      const std::vector<hsize_t>& dims,
                      const std::vector<hsize_t>& chunk_dims = {});
Handle open_dataset(hid_t parent, std::string_view name);
std::vector<hsize_t> dataset_dims(hid_t dataset);
H5T_class_t dataset_type_class(hid_t dataset);  // H5T_FLOAT, H5T_INTEGER, ...

namespace detail {
void write_all(hid_t dataset, hid_t memory_type, const void* data, std::size_t count);
void read_all(hid_t dataset, hid_t memory_type, void* data, std::size_t count);
void write_rows(hid_t dataset, hsize_t first, hsize_t rows, hid_t memory_type, const void* data,
                std::size_t count);
void read_rows(hid_t dataset, hsize_t first, hsize_t rows, hid_t memory_type, void* data,
               std::size_t count);
}  // namespace detail

// Whole datasets, stored with T's type. data.size() must match dims.
template <Number T>
void write_dataset(hid_t parent, std::string_view name, std::span<const T> data,
                   const std::vector<hsize_t>& dims) {
  Handle dataset = create_dataset(parent, name, native_type<T>(), dims);
  detail::write_all(dataset.id(), native_type<T>(), data.data(), data.size());
  dataset.close();
}
// HDF5 converts from the stored type; out.size() must be the dataset's element count.
template <Number T>
void read_dataset(hid_t parent, std::string_view name, std::span<T> out) {
  Handle dataset = open_dataset(parent, name);
  detail::read_all(dataset.id(), native_type<T>(), out.data(), out.size());
}
template <Number T>
std::vector<T> read_dataset(hid_t parent, std::string_view name) {
  Handle dataset = open_dataset(parent, name);
  std::size_t count = 1;
  for (hsize_t extent : dataset_dims(dataset.id())) count *= extent;
  std::vector<T> out(count);
  detail::read_all(dataset.id(), native_type<T>(), out.data(), out.size());
  return out;
}

// Rows [first, first + rows) along the first dimension, e.g. samples of an (N, C, H, W) dataset.
template <Number T>
void write_rows(hid_t dataset, hsize_t first, hsize_t rows, std::span<const T> data) {
  detail::write_rows(dataset, first, rows, native_type<T>(), data.data(), data.size());
}
template <Number T>
void read_rows(hid_t dataset, hsize_t first, hsize_t rows, std::span<T> out) {
  detail::read_rows(dataset, first, rows, native_type<T>(), out.data(), out.size());
}

// ---- attributes (replaced when they exist) ----
bool has_attribute(hid_t object, std::string_view name);
void write_attribute(hid_t object, std::string_view name, std::string_view value);
void write_attribute(hid_t object, std::string_view name, const std::vector<std::string>& values);
std::string read_string_attribute(hid_t object, std::string_view name);
std::vector<std::string> read_strings_attribute(hid_t object, std::string_view name);

namespace detail {
void write_scalar_attribute(hid_t object, std::string_view name, hid_t type, const void* value);
void read_scalar_attribute(hid_t object, std::string_view name, hid_t type, void* value);
}  // namespace detail

template <Number T>
void write_attribute(hid_t object, std::string_view name, T value) {
  detail::write_scalar_attribute(object, name, native_type<T>(), &value);
}
template <Number T>
T read_attribute(hid_t object, std::string_view name) {
  T value{};
  detail::read_scalar_attribute(object, name, native_type<T>(), &value);
  return value;
}

}  // namespace hardy::core::h5
