#include "hardy/core/support/digest.hpp"

#include <xxhash.h>

#include <new>

namespace hardy::core {

std::uint64_t xxhash64(std::span<const std::byte> bytes, std::uint64_t seed) {
  return XXH64(bytes.data(), bytes.size(), seed);
}

std::uint64_t xxh3_64(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

struct Xxh3Stream::State {
  XXH3_state_t* handle = XXH3_createState();
  ~State() { XXH3_freeState(handle); }
};

Xxh3Stream::Xxh3Stream() : state_(std::make_unique<State>()) {
  if (state_->handle == nullptr) throw std::bad_alloc();
  reset();
}

Xxh3Stream::~Xxh3Stream() = default;

void Xxh3Stream::reset() { XXH3_64bits_reset(state_->handle); }

void Xxh3Stream::update(std::span<const std::byte> bytes) {
  XXH3_64bits_update(state_->handle, bytes.data(), bytes.size());
}

std::uint64_t Xxh3Stream::digest() const { return XXH3_64bits_digest(state_->handle); }

}  // namespace hardy::core
