#pragma once
// The NCCL side of make_gradient_reducer (only the CUDA build compiles it).
#include "hardy/comm/gradient_reducer.hpp"

namespace hardy::comm::detail {

std::unique_ptr<GradientReducer> make_nccl_gradient_reducer(Communicator& comm,
                                                            core::Backend& backend,
                                                            std::vector<core::Parameter*> params,
                                                            std::size_t bucket_bytes);

}  // namespace hardy::comm::detail
