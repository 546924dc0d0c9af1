#include "hardy/core/support/digest.hpp"

#include <xxhash.h>

#include <memory>

namespace hardy::core {

std::uint64_t xxhash64(std::span<const std::byte> bytes, std::uint64_t seed) {
  return XXH64(bytes.data(), bytes.size(), seed);
}

std::uint64_t parameter_digest(Backend& backend, std::span<Parameter* const> params) {
  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> state(XXH64_createState(),
                                                                   XXH64_freeState);
  XXH64_reset(state.get(), 0);
  for (const Parameter* p : params) {
    const Tensor& value = p->value;
    if (value.device() == Device::host) {
      XXH64_update(state.get(), value.raw(), value.bytes());
    } else {
      Tensor host = Tensor::host(value.dims(), value.dtype(), value.layout());
      backend.copy(value, host);
      XXH64_update(state.get(), host.raw(), host.bytes());
    }
  }
  return XXH64_digest(state.get());
}

}  // namespace hardy::core
