#include "hardy/core/support/digest.hpp"

#include <xxhash.h>

namespace hardy::core {

std::uint64_t xxhash64(std::span<const std::byte> bytes, std::uint64_t seed) {
  return XXH64(bytes.data(), bytes.size(), seed);
}

std::uint64_t xxh3_64(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

}  // namespace hardy::core
