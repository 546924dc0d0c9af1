#pragma once
// The CUDA backend's module (libhardy_core_cuda.so, core/src/compute/cuda/, support/modules.hpp):
// its file and its one entry, shared by make_backend (compute/backend.cpp), which loads it, and
// the module, which defines the entry. Nothing here needs CUDA's headers.
#include "hardy/core/compute/backend.hpp"

namespace hardy::core::cuda_module {

inline constexpr const char* kFile = "libhardy_core_cuda.so";
inline constexpr const char* kMakeBackend = "hardy_make_cuda_backend";
// A new CUDA backend, the caller's to delete; `activation_dtype` null for the environment's
// choice (CudaOptions::from_environment).
using MakeBackend = Backend* (*)(const DType* activation_dtype);

}  // namespace hardy::core::cuda_module
