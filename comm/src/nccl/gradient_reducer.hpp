#pragma once
// The NCCL side of make_gradient_reducers (only the CUDA build compiles it).
#include "hardy/comm/gradient_reducer.hpp"

namespace hardy::comm::detail {

std::vector<std::unique_ptr<GradientReducer>> make_nccl_gradient_reducers(
    Communicator& comm, core::Backend& backend, std::vector<core::Parameter*> params,
    std::size_t bucket_bytes, std::size_t steps_in_flight);

}  // namespace hardy::comm::detail
