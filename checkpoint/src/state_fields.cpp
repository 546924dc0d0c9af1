#include "state_fields.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <type_traits>
#include <variant>

#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/core/support/digest.hpp"
#include "hardy/core/support/enum_names.hpp"

namespace hardy::checkpoint::detail {

namespace {

template <class T>
constexpr FieldType field_type() {
  if constexpr (std::is_same_v<T, float>) return FieldType::f32;
  if constexpr (std::is_same_v<T, double>) return FieldType::f64;
  if constexpr (std::is_same_v<T, std::int64_t>) return FieldType::i64;
  if constexpr (std::is_same_v<T, std::uint64_t>) return FieldType::u64;
}

template <class T>
Field number(std::string_view field_path, T value) {
  Field field(std::string(field_path), field_type<T>());
  field.storage.resize(sizeof(T));
  std::memcpy(field.storage.data(), &value, sizeof(T));
  return field;
}

// Fixed-length strings: every element padded with NULs to the longest (at least one byte, as
// HDF5 requires), so the stored bytes, and with them the checksum, are well defined.
Field strings(std::string_view field_path, const std::vector<std::string>& values, bool scalar) {
  std::size_t size = 1;
  for (const std::string& value : values) size = std::max(size, value.size());
  Field field(std::string(field_path), FieldType::str, {}, size);
  if (!scalar) field.shape = {values.size()};
  field.storage.resize(size * values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    std::memcpy(field.storage.data() + i * size, values[i].data(), values[i].size());
  return field;
}

Field scalar_field(std::string_view field_path, const ScalarValue& value) {
  return std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>)
          return strings(field_path, {v}, true);
        else if constexpr (std::is_same_v<T, std::vector<std::string>>)
          return strings(field_path, v, false);
        else
          return number<T>(field_path, v);
      },
      value);
}

// ---- reading ----

using FieldMap = std::map<std::string, Field, std::less<>>;

const Field& find(const FieldMap& fields, std::string_view field_path, FieldType type, bool scalar,
                  std::string_view source) {
  const auto found = fields.find(field_path);
  if (found == fields.end())
    throw CorruptCheckpoint(fmt::format("{}: has no dataset {}", source, field_path));
  const Field& field = found->second;
  if (field.type != type || (scalar && !field.shape.empty()) ||
      (!scalar && field.shape.size() != 1))
    throw CorruptCheckpoint(
        fmt::format("{}: dataset {} is {} {}, expected {} {}", source, field_path,
                    field.shape.empty() ? "a scalar" : "an array of", type_name(field.type),
                    scalar ? "a scalar" : "a list of", type_name(type)));
  if (field.bytes().size() != field.element_count() * field.element_size())
    throw CorruptCheckpoint(fmt::format("{}: dataset {} holds {} bytes instead of {}", source,
                                        field_path, field.bytes().size(),
                                        field.element_count() * field.element_size()));
  return field;
}

template <class T>
T read_number(const FieldMap& fields, std::string_view field_path, std::string_view source) {
  const Field& field = find(fields, field_path, field_type<T>(), true, source);
  T value{};
  std::memcpy(&value, field.bytes().data(), sizeof(T));
  return value;
}

std::vector<std::string> read_strings(const FieldMap& fields, std::string_view field_path,
                                      bool scalar, std::string_view source) {
  const Field& field = find(fields, field_path, FieldType::str, scalar, source);
  const auto bytes = field.bytes();
  std::vector<std::string> values;
  for (std::size_t offset = 0; offset < bytes.size(); offset += field.string_size) {
    std::string value(reinterpret_cast<const char*>(bytes.data()) + offset, field.string_size);
    value.resize(std::strlen(value.c_str()));  // drop the padding
    values.push_back(std::move(value));
  }
  return values;
}

// The field at `field_path` as a value of the same alternative as `like` (what the table's get
// returns for it).
ScalarValue read_value(const FieldMap& fields, std::string_view field_path, const ScalarValue& like,
                       std::string_view source) {
  return std::visit(
      [&](const auto& v) -> ScalarValue {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>)
          return read_strings(fields, field_path, true, source).front();
        else if constexpr (std::is_same_v<T, std::vector<std::string>>)
          return read_strings(fields, field_path, false, source);
        else
          return read_number<T>(fields, field_path, source);
      },
      like);
}

}  // namespace

namespace {
constexpr std::string_view kFieldTypeNames[] = {"f32", "f64", "i64", "u64", "str"};
static_assert(std::size(kFieldTypeNames) == static_cast<std::size_t>(FieldType::str) + 1);
}  // namespace

std::string_view type_name(FieldType type) { return core::name_of(kFieldTypeNames, type); }

std::optional<FieldType> parse_type_name(std::string_view name) {
  return core::value_named<FieldType>(kFieldTypeNames, name);
}

std::uint64_t Field::element_count() const {
  return std::accumulate(shape.begin(), shape.end(), std::uint64_t{1}, std::multiplies<>());
}

std::size_t Field::element_size() const {
  switch (type) {
    case FieldType::f32:
      return 4;
    case FieldType::str:
      return string_size;
    default:
      return 8;
  }
}

Field tensor_field(std::string_view group, const NamedTensor& tensor) {
  Field field(std::string(group) + tensor.name, FieldType::f32,
              std::vector<std::uint64_t>(tensor.dims.begin(), tensor.dims.end()));
  field.borrowed = std::as_bytes(std::span(tensor.values));
  field.borrows = true;
  return field;
}

std::vector<Field> scalar_fields_of(const TrainingState& s, Checksums checksums) {
  std::vector<Field> fields;
  for (const ScalarField& scalar : scalar_fields()) {
    fields.push_back(scalar_field(scalar.path, scalar.get(s)));
    if (checksums == Checksums::compute)
      fields.back().checksum = core::xxhash64(fields.back().bytes());
  }
  return fields;
}

std::vector<Field> fields_of(const TrainingState& s, Checksums checksums) {
  std::vector<Field> fields;
  for (const NamedTensor& t : s.model) fields.push_back(tensor_field(kModelGroup, t));
  for (const NamedTensor& t : s.optimizer) fields.push_back(tensor_field(kOptimizerGroup, t));
  if (checksums == Checksums::compute)
    for (Field& field : fields) field.checksum = core::xxhash64(field.bytes());
  for (Field& field : scalar_fields_of(s, checksums)) fields.push_back(std::move(field));
  return fields;
}

bool is_tensor_path(std::string_view field_path) {
  return field_path.starts_with(kModelGroup) || field_path.starts_with(kOptimizerGroup);
}

void add_tensor(TrainingState& state, std::string_view field_path, NamedTensor tensor) {
  if (field_path.starts_with(kModelGroup)) {
    tensor.name = field_path.substr(kModelGroup.size());
    state.model.push_back(std::move(tensor));
  } else {
    tensor.name = field_path.substr(kOptimizerGroup.size());
    state.optimizer.push_back(std::move(tensor));
  }
}

void read_scalars(const FieldMap& fields, TrainingState& state, std::string_view source) {
  const TrainingState defaults;  // what get() returns tells the stored type of each field
  for (const ScalarField& scalar : scalar_fields()) {
    if (scalar.optional && !fields.contains(scalar.path)) continue;  // an older checkpoint
    ScalarValue value = read_value(fields, scalar.path, scalar.get(defaults), source);
    try {
      scalar.set(state, value);
    } catch (const InvalidArgument& e) {
      throw CorruptCheckpoint(fmt::format("{}: {}: {}", source, scalar.path, e.what()));
    }
  }
}

}  // namespace hardy::checkpoint::detail
