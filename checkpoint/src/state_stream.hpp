#pragma once
// A TrainingState as one byte stream: the fields of state_fields.hpp in a row, each with its path,
// type, shape and bytes. broadcast_state sends it between ranks; a node-local snapshot file
// (snapshot_file.hpp) is a header and this stream. Layout: the magic "hardy-state-v2" (as a
// length and bytes), the field count, then per field: path length, path, type, string size,
// rank, extents, byte count, zeros up to the next multiple of 64 bytes from the stream's start,
// bytes. Integers are little-endian like the fields themselves. The padding lets a writer copy
// a tensor straight into its place, aligned, and a reader take it from there.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "hardy/checkpoint/checkpoint_file.hpp"
#include "state_fields.hpp"

namespace hardy::checkpoint::detail {

inline constexpr std::uint64_t kStreamAlignment = 64;
// `offset` rounded up to a multiple of kStreamAlignment.
std::uint64_t aligned(std::uint64_t offset);
// Bytes of the stream of these fields, and of its preamble alone.
std::uint64_t stream_size(std::span<const Field> fields);
std::uint64_t preamble_size();

// The stream's first bytes (magic and field count), then each field's description (path, type,
// string size, rank, extents, and `bytes`, the count of its bytes that follow), appended to out:
// for a writer that puts the fields' bytes in place itself.
void append_preamble(std::vector<std::byte>& out, std::uint64_t field_count);
void append_description(std::vector<std::byte>& out, const Field& field, std::uint64_t bytes);
// Bytes of a field's description.
std::uint64_t description_size(const Field& field);

// Hands the stream to `out` piece by piece, in order (per field: its description, then its
// bytes, borrowed from the field: nothing is copied here).
using StreamOutput = std::function<void(std::span<const std::byte>)>;
void write_stream(std::span<const Field> fields, const StreamOutput& out);

// The fields' part of a stream that has `offset` bytes before them (the preamble and other
// fields): descriptions, padding and bytes, handed to `out` piece by piece.
void write_stream_fields(std::span<const Field> fields, std::uint64_t offset,
                         const StreamOutput& out);

// Decodes a stream. Throws CorruptCheckpoint "<source>: ..." when the bytes are not a whole
// stream of a training state. `datasets` (when given) gets every field's description, with the
// xxHash64 of its bytes as checksum.
TrainingState read_stream(std::span<const std::byte> bytes, std::string_view source,
                          std::vector<DatasetInfo>* datasets = nullptr);

}  // namespace hardy::checkpoint::detail
