#pragma once
// xxHash64, the one hash of hardy's checksums and digests (checkpoint fields, node-local
// snapshots, staging placement, replica digests). Bytes in, 64 bits out; depends on nothing.
#include <cstddef>
#include <cstdint>
#include <span>

namespace hardy::core {

// xxHash64 of a byte range (checkpoint checksums use the same function).
std::uint64_t xxhash64(std::span<const std::byte> bytes, std::uint64_t seed = 0);

}  // namespace hardy::core
