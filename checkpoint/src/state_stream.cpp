#include "state_stream.hpp"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <string>
#include <type_traits>

#include "hardy/core/support/digest.hpp"

namespace hardy::checkpoint::detail {

namespace {

constexpr std::string_view kMagic = "hardy-state-v2";
constexpr std::size_t kMaxRank = 32;

template <class T>
requires std::is_arithmetic_v<T>
void append_number(std::vector<std::byte>& out, T value) {
  const auto* bytes = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

void append_text(std::vector<std::byte>& out, std::string_view text) {
  append_number<std::uint64_t>(out, text.size());
  const auto* bytes = reinterpret_cast<const std::byte*>(text.data());
  out.insert(out.end(), bytes, bytes + text.size());
}

class Decoder {
 public:
  Decoder(std::span<const std::byte> in, std::string_view source) : in_(in), source_(source) {}
  std::span<const std::byte> take(std::uint64_t count) {
    if (count > in_.size() - offset_)
      throw CorruptCheckpoint(fmt::format(
          "{}: the state ends after {} bytes, in the middle of a field", source_, in_.size()));
    const auto part = in_.subspan(offset_, static_cast<std::size_t>(count));
    offset_ += static_cast<std::size_t>(count);
    return part;
  }
  template <class T>
  requires std::is_arithmetic_v<T> T get() {
    T value{};
    std::memcpy(&value, take(sizeof(T)).data(), sizeof(T));
    return value;
  }
  std::string text() {
    const auto bytes = take(get<std::uint64_t>());
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  bool done() const { return offset_ == in_.size(); }
  std::size_t offset() const { return offset_; }
  void skip_to(std::uint64_t offset) { take(offset - offset_); }

 private:
  std::span<const std::byte> in_;
  std::string_view source_;
  std::size_t offset_ = 0;
};

}  // namespace

std::uint64_t description_size(const Field& field) {
  return 8 + field.path.size() + 1 + 8 + 8 + 8 * field.shape.size() + 8;
}

void append_preamble(std::vector<std::byte>& out, std::uint64_t field_count) {
  append_text(out, kMagic);
  append_number<std::uint64_t>(out, field_count);
}

void append_description(std::vector<std::byte>& out, const Field& field, std::uint64_t bytes) {
  append_text(out, field.path);
  append_number<std::uint8_t>(out, static_cast<std::uint8_t>(field.type));
  append_number<std::uint64_t>(out, field.string_size);
  append_number<std::uint64_t>(out, field.shape.size());
  for (std::uint64_t extent : field.shape) append_number<std::uint64_t>(out, extent);
  append_number<std::uint64_t>(out, bytes);
}

std::uint64_t aligned(std::uint64_t offset) {
  return (offset + kStreamAlignment - 1) / kStreamAlignment * kStreamAlignment;
}

std::uint64_t preamble_size() { return 8 + kMagic.size() + 8; }

std::uint64_t stream_size(std::span<const Field> fields) {
  std::uint64_t size = preamble_size();
  for (const Field& field : fields)
    size = aligned(size + description_size(field)) + field.bytes().size();
  return size;
}

namespace {

// Hands `encoded` (the preamble, if any, and the fields) to out from stream offset `offset`.
void write_fields(std::vector<std::byte>& encoded, std::span<const Field> fields,
                  std::uint64_t offset, const StreamOutput& out) {
  for (const Field& field : fields) {
    append_description(encoded, field, field.bytes().size());
    encoded.resize(aligned(offset + encoded.size()) - offset);  // zeros up to the bytes
    out(encoded);
    offset += encoded.size();
    encoded.clear();
    if (!field.bytes().empty()) out(field.bytes());
    offset += field.bytes().size();
  }
  if (!encoded.empty()) out(encoded);
}

}  // namespace

void write_stream(std::span<const Field> fields, const StreamOutput& out) {
  std::vector<std::byte> encoded;
  append_preamble(encoded, fields.size());
  write_fields(encoded, fields, 0, out);
}

void write_stream_fields(std::span<const Field> fields, std::uint64_t offset,
                         const StreamOutput& out) {
  std::vector<std::byte> encoded;
  write_fields(encoded, fields, offset, out);
}

TrainingState read_stream(std::span<const std::byte> bytes, std::string_view source,
                          std::vector<DatasetInfo>* datasets) {
  Decoder in(bytes, source);
  const bool magic = bytes.size() >= 8 + kMagic.size() &&
                     in.get<std::uint64_t>() == kMagic.size() &&
                     std::memcmp(in.take(kMagic.size()).data(), kMagic.data(), kMagic.size()) == 0;
  if (!magic)
    throw CorruptCheckpoint(fmt::format("{}: not a serialized hardy training state", source));
  TrainingState state;
  std::map<std::string, Field, std::less<>> scalars;
  const auto count = in.get<std::uint64_t>();
  for (std::uint64_t i = 0; i < count; ++i) {
    Field field;
    field.path = in.text();
    const auto type = in.get<std::uint8_t>();
    if (type > static_cast<std::uint8_t>(FieldType::str))
      throw CorruptCheckpoint(
          fmt::format("{}: field {} has an unknown type {}", source, field.path, type));
    field.type = static_cast<FieldType>(type);
    field.string_size = static_cast<std::size_t>(in.get<std::uint64_t>());
    const auto rank = in.get<std::uint64_t>();
    if (rank > kMaxRank)
      throw CorruptCheckpoint(
          fmt::format("{}: field {} claims {} dimensions", source, field.path, rank));
    field.shape.resize(static_cast<std::size_t>(rank));
    for (std::uint64_t& extent : field.shape) extent = in.get<std::uint64_t>();
    const auto byte_count = in.get<std::uint64_t>();
    in.skip_to(aligned(in.offset()));
    const auto data = in.take(byte_count);
    if (data.size() != field.element_count() * field.element_size())
      throw CorruptCheckpoint(fmt::format("{}: field {} holds {} bytes, not the {} its shape needs",
                                          source, field.path, data.size(),
                                          field.element_count() * field.element_size()));
    if (datasets)
      datasets->push_back(
          {field.path, std::string(type_name(field.type)), field.shape, core::xxhash64(data)});
    if (is_tensor_path(field.path)) {
      if (field.type != FieldType::f32)
        throw CorruptCheckpoint(fmt::format("{}: tensor {} is not f32", source, field.path));
      NamedTensor tensor;
      tensor.dims.assign(field.shape.begin(), field.shape.end());
      tensor.values.resize(field.element_count());
      std::memcpy(tensor.values.data(), data.data(), data.size());
      add_tensor(state, field.path, std::move(tensor));
    } else {
      field.storage.assign(data.begin(), data.end());
      std::string path = field.path;
      scalars.emplace(std::move(path), std::move(field));
    }
  }
  if (!in.done()) throw CorruptCheckpoint(fmt::format("{}: bytes after its last field", source));
  read_scalars(scalars, state, source);
  return state;
}

}  // namespace hardy::checkpoint::detail
