#include "hardy/core/nn/parameter.hpp"

#include <xxhash.h>

#include <memory>

#include "hardy/core/compute/backend.hpp"

namespace hardy::core {

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
