#pragma once
// The NCCL transport's module (libhardy_comm_nccl.so, comm/src/nccl/, core/support/modules.hpp):
// its file and its one entry, shared by make_gradient_reducers (gradient_reducer.cpp), which
// loads it for device gradients, and the module, which defines the entry. Nothing here needs
// NCCL's or CUDA's headers.
#include <cstddef>
#include <memory>
#include <vector>

#include "hardy/comm/gradient_reducer.hpp"

namespace hardy::comm::nccl_module {

inline constexpr const char* kFile = "libhardy_comm_nccl.so";
inline constexpr const char* kMakeReducers = "hardy_make_nccl_gradient_reducers";

// make_gradient_reducers' arguments, and its answer in `reducers`.
struct ReducersRequest {
  Communicator* comm = nullptr;
  core::Backend* backend = nullptr;
  std::vector<core::Parameter*> params;
  std::size_t bucket_bytes = 0;
  std::size_t steps_in_flight = 0;
  std::vector<std::unique_ptr<GradientReducer>> reducers;
};
using MakeReducers = void (*)(ReducersRequest* request);

}  // namespace hardy::comm::nccl_module
