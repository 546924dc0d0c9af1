#pragma once
#include <cstdint>
#include <span>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/nn/parameter.hpp"

namespace hardy::core {

// xxHash64 over the bytes of every parameter value, in order: equal digests on two ranks mean
// bit-identical replicas.
std::uint64_t parameter_digest(Backend& backend, std::span<Parameter* const> params);
// xxHash64 of a byte range (checkpoint checksums use the same function).
std::uint64_t xxhash64(std::span<const std::byte> bytes, std::uint64_t seed = 0);

}  // namespace hardy::core
