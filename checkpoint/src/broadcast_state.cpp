#include "hardy/checkpoint/broadcast_state.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <type_traits>

#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/core/support/digest.hpp"
#include "state_fields.hpp"

namespace hardy::checkpoint {

namespace {

using detail::Field;
using detail::FieldType;

// The byte stream: magic, field count, then per field: path length, path, type, string size,
// rank, extents, byte count, bytes. Integers are little-endian like the fields themselves.
constexpr std::string_view kMagic = "hardy-state-v1";
// MPI counts are ints: stay well below 2 GiB per broadcast.
constexpr std::size_t kChunkBytes = std::size_t{256} << 20;

class Writer {
 public:
  template <class T>
  requires std::is_arithmetic_v<T>
  void number(T value) {
    const auto* bytes = reinterpret_cast<const std::byte*>(&value);
    out_.insert(out_.end(), bytes, bytes + sizeof(T));
  }
  void bytes(std::span<const std::byte> bytes) {
    out_.insert(out_.end(), bytes.begin(), bytes.end());
  }
  void text(std::string_view text) {
    number<std::uint64_t>(text.size());
    bytes(std::as_bytes(std::span(text.data(), text.size())));
  }
  std::vector<std::byte>& output() { return out_; }

 private:
  std::vector<std::byte> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  std::span<const std::byte> take(std::uint64_t count) {
    if (count > in_.size() - offset_)
      throw CorruptCheckpoint(fmt::format(
          "the serialized state ends after {} bytes, in the middle of a field", in_.size()));
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

 private:
  std::span<const std::byte> in_;
  std::size_t offset_ = 0;
};

void broadcast_in_chunks(comm::Communicator& comm, std::span<std::byte> bytes, int root) {
  for (std::size_t offset = 0; offset < bytes.size(); offset += kChunkBytes)
    comm.broadcast(bytes.subspan(offset, std::min(kChunkBytes, bytes.size() - offset)), root);
}

}  // namespace

std::vector<std::byte> serialize(const TrainingState& state) {
  const std::vector<Field> fields = detail::fields_of(state);
  Writer out;
  std::uint64_t payload = 0;
  for (const Field& field : fields) payload += field.bytes().size() + field.path.size() + 64;
  out.output().reserve(static_cast<std::size_t>(payload));
  out.text(kMagic);
  out.number<std::uint64_t>(fields.size());
  for (const Field& field : fields) {
    out.text(field.path);
    out.number<std::uint8_t>(static_cast<std::uint8_t>(field.type));
    out.number<std::uint64_t>(field.string_size);
    out.number<std::uint64_t>(field.shape.size());
    for (std::uint64_t extent : field.shape) out.number<std::uint64_t>(extent);
    out.number<std::uint64_t>(field.bytes().size());
    out.bytes(field.bytes());
  }
  return std::move(out.output());
}

TrainingState deserialize(std::span<const std::byte> bytes) {
  Reader in(bytes);
  const bool magic = bytes.size() >= 8 + kMagic.size() &&
                     in.get<std::uint64_t>() == kMagic.size() &&
                     std::memcmp(in.take(kMagic.size()).data(), kMagic.data(), kMagic.size()) == 0;
  if (!magic) throw CorruptCheckpoint("the bytes are not a serialized hardy training state");
  TrainingState state;
  std::map<std::string, Field, std::less<>> scalars;
  const auto count = in.get<std::uint64_t>();
  for (std::uint64_t i = 0; i < count; ++i) {
    Field field;
    field.path = in.text();
    const auto type = in.get<std::uint8_t>();
    if (type > static_cast<std::uint8_t>(FieldType::str))
      throw CorruptCheckpoint(
          fmt::format("serialized field {} has an unknown type {}", field.path, type));
    field.type = static_cast<FieldType>(type);
    field.string_size = static_cast<std::size_t>(in.get<std::uint64_t>());
    const auto rank = in.get<std::uint64_t>();
    if (rank > 32)
      throw CorruptCheckpoint(
          fmt::format("serialized field {} claims {} dimensions", field.path, rank));
    field.shape.resize(static_cast<std::size_t>(rank));
    for (std::uint64_t& extent : field.shape) extent = in.get<std::uint64_t>();
    const auto data = in.take(in.get<std::uint64_t>());
    if (data.size() != field.element_count() * field.element_size())
      throw CorruptCheckpoint(
          fmt::format("serialized field {} holds {} bytes, not the {} its shape needs", field.path,
                      data.size(), field.element_count() * field.element_size()));
    if (detail::is_tensor_path(field.path)) {
      if (field.type != FieldType::f32)
        throw CorruptCheckpoint(fmt::format("serialized tensor {} is not f32", field.path));
      NamedTensor tensor;
      tensor.dims.assign(field.shape.begin(), field.shape.end());
      tensor.values.resize(field.element_count());
      std::memcpy(tensor.values.data(), data.data(), data.size());
      detail::add_tensor(state, field.path, std::move(tensor));
    } else {
      field.storage.assign(data.begin(), data.end());
      std::string path = field.path;
      scalars.emplace(std::move(path), std::move(field));
    }
  }
  if (!in.done()) throw CorruptCheckpoint("the serialized state has bytes after its last field");
  detail::read_scalars(scalars, state, "the serialized state");
  return state;
}

void broadcast_state(comm::Communicator& comm, TrainingState& state, int root) {
  if (comm.size() == 1) return;
  const bool is_root = comm.rank() == root;
  std::vector<std::byte> bytes;
  // Root's size and digest go first, so that the others can allocate and later compare.
  std::uint64_t header[2] = {0, 0};
  if (is_root) {
    bytes = serialize(state);
    header[0] = bytes.size();
    header[1] = core::xxhash64(bytes);
  }
  comm.broadcast(std::as_writable_bytes(std::span(header)), root);
  if (!is_root) bytes.resize(static_cast<std::size_t>(header[0]));
  broadcast_in_chunks(comm, bytes, root);
  const std::int64_t mismatches =
      comm::allreduce(comm, core::xxhash64(bytes) != header[1] ? 1 : 0, comm::ReduceOp::sum);
  if (mismatches != 0)
    throw Error(fmt::format(
        "broadcast_state: {} of {} ranks received a training state whose digest differs from "
        "rank {}'s; the state was not restored",
        mismatches, comm.size(), root));
  if (!is_root) state = deserialize(bytes);
}

}  // namespace hardy::checkpoint
