#pragma once
// A TrainingState as one byte stream: the fields of state_fields.hpp in a row, each with its path,
// type, shape and bytes. broadcast_state sends it between ranks; a node-local snapshot file
// (snapshot_file.hpp) is a header and this stream. Layout: the magic "hardy-state-v1" (as a
// length and bytes), the field count, then per field: path length, path, type, string size,
// rank, extents, byte count, bytes. Integers are little-endian like the fields themselves.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "hardy/checkpoint/checkpoint_file.hpp"
#include "state_fields.hpp"

namespace hardy::checkpoint::detail {

// Bytes of the stream of these fields.
std::uint64_t stream_size(std::span<const Field> fields);

// Hands the stream to `out` piece by piece, in order (per field: its description, then its
// bytes, borrowed from the field: nothing is copied here).
using StreamOutput = std::function<void(std::span<const std::byte>)>;
void write_stream(std::span<const Field> fields, const StreamOutput& out);

// Decodes a stream. Throws CorruptCheckpoint "<source>: ..." when the bytes are not a whole
// stream of a training state. `datasets` (when given) gets every field's description, with the
// xxHash64 of its bytes as checksum.
TrainingState read_stream(std::span<const std::byte> bytes, std::string_view source,
                          std::vector<DatasetInfo>* datasets = nullptr);

}  // namespace hardy::checkpoint::detail
