#pragma once
// Shared by the .cu files: element loads and stores in fp32 whatever the storage type, the
// dispatch from DType to a storage type, and launch geometry. Arithmetic is always fp32 (or
// double for sums across threads); bf16 and f16 are storage formats only.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "hardy/core/compute/cuda_runtime.hpp"
#include "kernels.hpp"

namespace hardy::core::cuda {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Calls f(T{}) with T the storage type of a float DType. The validation in CudaBackend rules
// out other types; reaching the throw is a bug in the backend.
template <class F>
void dispatch_float(DType type, F&& f) {
  switch (type) {
    case DType::f32:
      return f(float{});
    case DType::f16:
      return f(__half{});
    case DType::bf16:
      return f(__nv_bfloat16{});
    case DType::i32:
    case DType::u8:
      break;
  }
  throw std::logic_error("cuda kernels: " + to_string(type) + " is not a floating-point type");
}

inline constexpr int threads_per_block = 256;

// Blocks for a grid-stride loop over `count` elements: enough to fill an H100/H200 several
// times over, never more than the work needs.
inline unsigned int blocks_for(Index count) {
  const Index needed = (count + threads_per_block - 1) / threads_per_block;
  return static_cast<unsigned int>(std::clamp<Index>(needed, 1, Index{1} << 16));
}

// The launch of a kernel with one thread per element of `count` elements of a float type:
// nothing when there are none; otherwise launch(T{}, blocks) enqueues the kernel for the
// storage type T with blocks_for(count) blocks, and the launch is checked, naming `kernel`.
template <class Launch>
void launch_per_element(DType type, Index count, const char* kernel, Launch&& launch) {
  if (count == 0) return;
  dispatch_float(type, [&](auto tag) { launch(tag, blocks_for(count)); });
  check_launch(kernel);
}

#define HARDY_GRID_STRIDE_LOOP(i, count)                                                 \
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < (count); \
       i += static_cast<Index>(blockDim.x) * gridDim.x)

}  // namespace hardy::core::cuda
