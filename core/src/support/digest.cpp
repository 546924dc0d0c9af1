#include "hardy/core/support/digest.hpp"

#include <xxhash.h>

namespace hardy::core {

std::uint64_t xxhash64(std::span<const std::byte> bytes, std::uint64_t seed) {
  return XXH64(bytes.data(), bytes.size(), seed);
}

}  // namespace hardy::core
