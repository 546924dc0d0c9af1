#pragma once
// A thin RAII and error-checking layer over the HDF5 C API, shared by the data pipeline and the
// checkpoint library. Every id lives in an h5::Handle, which closes it with the matching H5*close;
// every call that can fail goes through h5::check, which turns a failure into one hardy::IoError
// that names the call, the object and what HDF5's error stack says, instead of HDF5's default
// multi-line dump on stderr.
//
// This header does not include <hdf5.h>: ids are h5::Id (HDF5's hid_t, int64_t since 1.10) and
// extents h5::Extent (hsize_t's width), so that code that only reads and writes datasets through
// these functions does not see HDF5's C API. Code that calls that API itself includes <hdf5.h>
// and passes its hid_t values straight in (hdf5.cpp checks that the types agree).
//
// Thread safety: HDF5 serializes all calls behind a global lock only when built thread-safe
// (library_is_thread_safe()); otherwise at most one thread may use HDF5 at a time, and every
// operation that may run beside another thread's (a sample read on a loader thread, a checkpoint
// or snapshot written on its writer's thread) holds an h5::Exclusive while it calls HDF5.
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace hardy::core::h5 {

using Id = std::int64_t;              // hid_t
using Extent = std::uint64_t;         // hsize_t
inline constexpr Id kInvalidId = -1;  // H5I_INVALID_HID

// Stops HDF5 from printing its error stack on the calling thread (the setting is per thread in
// thread-safe builds). Everything in this header calls it; call it before using the raw C API.
void quiet_errors();

// Throw hardy::IoError when an HDF5 call failed (negative result), e.g.
//   check(H5Dwrite(...), "H5Dwrite", "dataset /fields in 'a.h5'")
// and pass the result through otherwise (htri_t results are herr_t).
Id check(Id id, const char* call, std::string_view what);
int check(int status, const char* call, std::string_view what);  // herr_t, htri_t

// The calling thread's HDF5 error stack as one line, innermost cause last; clears the stack.
std::string take_error_stack();

bool library_is_thread_safe();

// Held for a whole HDF5 operation (reading a sample, validating a file, writing a checkpoint):
// with a library built without thread safety (Spack's and HDF5's own default) one operation at a
// time in the process; with a thread-safe one nothing (HDF5 locks itself, call by call).
// Reentrant: an operation may call another.
class Exclusive {
 public:
  Exclusive();
  bool engaged() const { return lock_.owns_lock(); }
  // Tests: serialize as for a library without thread safety, whatever this one is.
  static void force_for_testing(bool force);

 private:
  std::unique_lock<std::recursive_mutex> lock_;
};

// Owns one HDF5 id of any kind and closes it with the right function for that kind.
class Handle {
 public:
  Handle() noexcept = default;
  // Checks id (see check) and takes ownership of it.
  Handle(Id id, const char* call, std::string_view what);
  Handle(Handle&& other) noexcept : id_(other.release()) {}
  Handle& operator=(Handle&& other) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle();

  Id id() const noexcept { return id_; }
  bool valid() const noexcept { return id_ >= 0; }
  Id release() noexcept;
  // Closes now and throws IoError when HDF5 reports a failure; closing a file flushes it, so a
  // writer calls this to learn about a full disk instead of losing the error in a destructor.
  void close();

 private:
  Id id_ = kInvalidId;
};

template <class T>
concept Number = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

// The in-memory type of an arithmetic C++ type (hdf5.cpp maps it to H5T_NATIVE_*).
enum class NumberType : std::uint8_t { f32, f64, i8, u8, i16, u16, i32, u32, i64, u64 };

template <Number T>
constexpr NumberType number_type() {
  if constexpr (std::is_same_v<T, float>) {
    return NumberType::f32;
  } else if constexpr (std::is_same_v<T, double>) {
    return NumberType::f64;
  } else if constexpr (sizeof(T) == 1) {
    return std::is_signed_v<T> ? NumberType::i8 : NumberType::u8;
  } else if constexpr (sizeof(T) == 2) {
    return std::is_signed_v<T> ? NumberType::i16 : NumberType::u16;
  } else if constexpr (sizeof(T) == 4) {
    return std::is_signed_v<T> ? NumberType::i32 : NumberType::u32;
  } else {
    static_assert(sizeof(T) == 8, "no HDF5 type for T");
    return std::is_signed_v<T> ? NumberType::i64 : NumberType::u64;
  }
}

// H5T_NATIVE_FLOAT, ... for a NumberType.
Id native_type(NumberType type);

// ---- files and groups ----
enum class FileMode { read_only, read_write };
Handle create_file(const std::filesystem::path& path);  // truncates an existing file
Handle open_file(const std::filesystem::path& path, FileMode mode = FileMode::read_only);
bool is_hdf5_file(const std::filesystem::path& path);
// The file an object belongs to, for error messages.
std::string file_name(Id object);

// Opens the group at a '/'-separated path below parent, creating it and any missing groups on
// the way.
Handle create_groups(Id parent, std::string_view path);
Handle open_group(Id parent, std::string_view path);
// Whether every link along path exists (H5Lexists alone fails on a missing intermediate group).
bool exists(Id parent, std::string_view path);
// Names of the links directly inside a group, in name order.
std::vector<std::string> list_children(Id group);

// ---- datasets ----
// file_type: a raw HDF5 type id (H5T_IEEE_F32LE, ...); chunk_dims empty: contiguous storage.
Handle create_dataset(Id parent, std::string_view name, Id file_type,
                      const std::vector<Extent>& dims, const std::vector<Extent>& chunk_dims = {});
Handle open_dataset(Id parent, std::string_view name);
std::vector<Extent> dataset_dims(Id dataset);
enum class TypeClass { integer, floating_point, string, other };  // H5T_INTEGER, H5T_FLOAT, ...
TypeClass dataset_type_class(Id dataset);
// What the file holds of a dataset's data: HDF5 stores nothing for parts never written (it reads
// them back as the fill value), so a shape is only a claim until the bytes are there. `filtered`:
// compression sits between the stored bytes and the data, so they may be fewer than the shape's.
struct StoredData {
  std::uint64_t bytes = 0;
  bool filtered = false;
  std::size_t element_bytes = 0;  // of the stored type
};
StoredData stored_data(Id dataset);

namespace detail {
void write_all(Id dataset, Id memory_type, const void* data, std::size_t count);
void read_all(Id dataset, Id memory_type, void* data, std::size_t count);
void write_rows(Id dataset, Extent first, Extent rows, Id memory_type, const void* data,
                std::size_t count);
void read_rows(Id dataset, Extent first, Extent rows, Id memory_type, void* data,
               std::size_t count);
}  // namespace detail

// Whole datasets, stored with T's type. data.size() must match dims.
template <Number T>
void write_dataset(Id parent, std::string_view name, std::span<const T> data,
                   const std::vector<Extent>& dims) {
  Handle dataset = create_dataset(parent, name, native_type(number_type<T>()), dims);
  detail::write_all(dataset.id(), native_type(number_type<T>()), data.data(), data.size());
  dataset.close();
}
// HDF5 converts from the stored type; out.size() must be the dataset's element count.
template <Number T>
void read_dataset(Id parent, std::string_view name, std::span<T> out) {
  Handle dataset = open_dataset(parent, name);
  detail::read_all(dataset.id(), native_type(number_type<T>()), out.data(), out.size());
}
template <Number T>
std::vector<T> read_dataset(Id parent, std::string_view name) {
  Handle dataset = open_dataset(parent, name);
  std::size_t count = 1;
  for (Extent extent : dataset_dims(dataset.id())) count *= extent;
  std::vector<T> out(count);
  detail::read_all(dataset.id(), native_type(number_type<T>()), out.data(), out.size());
  return out;
}

// Rows [first, first + rows) along the first dimension, e.g. samples of an (N, C, H, W) dataset.
template <Number T>
void write_rows(Id dataset, Extent first, Extent rows, std::span<const T> data) {
  detail::write_rows(dataset, first, rows, native_type(number_type<T>()), data.data(), data.size());
}
template <Number T>
void read_rows(Id dataset, Extent first, Extent rows, std::span<T> out) {
  detail::read_rows(dataset, first, rows, native_type(number_type<T>()), out.data(), out.size());
}

// ---- attributes (replaced when they exist) ----
bool has_attribute(Id object, std::string_view name);
void write_attribute(Id object, std::string_view name, std::string_view value);
void write_attribute(Id object, std::string_view name, const std::vector<std::string>& values);
std::string read_string_attribute(Id object, std::string_view name);
std::vector<std::string> read_strings_attribute(Id object, std::string_view name);

namespace detail {
void write_scalar_attribute(Id object, std::string_view name, Id type, const void* value);
void read_scalar_attribute(Id object, std::string_view name, Id type, void* value);
}  // namespace detail

template <Number T>
void write_attribute(Id object, std::string_view name, T value) {
  detail::write_scalar_attribute(object, name, native_type(number_type<T>()), &value);
}
template <Number T>
T read_attribute(Id object, std::string_view name) {
  T value{};
  detail::read_scalar_attribute(object, name, native_type(number_type<T>()), &value);
  return value;
}

}  // namespace hardy::core::h5
