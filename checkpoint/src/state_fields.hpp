#pragma once
// A TrainingState as the list of datasets a checkpoint stores, shared by the HDF5 file (one
// dataset per field) and the byte stream that broadcast_state sends (the same fields in a row),
// so that both carry exactly the same content and decode through the same code.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hardy/checkpoint/scalar_fields.hpp"
#include "hardy/checkpoint/training_state.hpp"

namespace hardy::checkpoint::detail {

// Fields hold numbers as stored on disk, little-endian; hardy runs on little-endian machines
// only, so the bytes of a host float are also its stored bytes.
static_assert(std::endian::native == std::endian::little,
              "hardy checkpoints assume a little-endian host");

enum class FieldType : std::uint8_t { f32, f64, i64, u64, str };

std::string_view type_name(FieldType type);  // "f32", ..., "str" (the manifest's dtype)
std::optional<FieldType> parse_type_name(std::string_view name);

struct Field {
  Field() = default;
  Field(std::string path, FieldType type, std::vector<std::uint64_t> shape = {},
        std::size_t string_size = 0)
      : path(std::move(path)), type(type), shape(std::move(shape)), string_size(string_size) {}

  std::string path;  // "/train/step"
  FieldType type = FieldType::f32;
  std::vector<std::uint64_t> shape;     // empty: a scalar
  std::size_t string_size = 0;          // str: bytes per element (>= 1), NUL-padded
  std::uint64_t checksum = 0;           // xxHash64 of bytes()
  std::vector<std::byte> storage;       // the bytes, when the field owns them
  std::span<const std::byte> borrowed;  // the bytes, when they live in a TrainingState's tensor
  bool borrows = false;

  std::span<const std::byte> bytes() const {
    return borrows ? borrowed : std::span<const std::byte>(storage);
  }
  std::uint64_t element_count() const;
  std::size_t element_size() const;
};

// Whether fields_of computes each field's xxHash64 (the HDF5 file stores them; a byte stream that
// is hashed as a whole does not need them, and they cost a pass over every byte).
enum class Checksums { compute, skip };

// Every dataset of a checkpoint: the model's tensors, then the optimizer's, then /train and /job
// as scalar_fields() lists them. Tensor fields borrow the state's memory: keep the state alive.
std::vector<Field> fields_of(const TrainingState& state, Checksums checksums = Checksums::compute);
// Only the /train and /job fields of fields_of.
std::vector<Field> scalar_fields_of(const TrainingState& state,
                                    Checksums checksums = Checksums::compute);
// One tensor as the f32 dataset `group` + name ("/model/..."), borrowing the tensor's memory.
Field tensor_field(std::string_view group, const NamedTensor& tensor);

// Whether a path names a tensor (/model/... or /optimizer/...), which are f32 and decoded into
// NamedTensors; everything else is a scalar of /train or /job.
bool is_tensor_path(std::string_view path);
// Adds a tensor read from `path` to the right list of state.
void add_tensor(TrainingState& state, std::string_view path, NamedTensor tensor);

// Sets the scalar members of state from the /train and /job fields (scalar_fields()), keyed by
// path; fields the table does not know are ignored. Throws
// CorruptCheckpoint "<source>: ..." naming a missing dataset or one of the wrong type or shape.
void read_scalars(const std::map<std::string, Field, std::less<>>& fields, TrainingState& state,
                  std::string_view source);

}  // namespace hardy::checkpoint::detail
