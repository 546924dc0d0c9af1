// Depthwise 3x3 convolutions (groups == input channels == output channels) on NHWC activations.
//
// cuDNN's legacy API runs these as grouped convolutions at 0.1-0.6 TFLOP/s on an H200 (2026-11-27,
// DeepCAM's DeepLabv3+ at 768x1152, batch 2: 76 of the step's 116 ms went to its 3x3 depthwise
// convolutions, while PyTorch's whole step took 26-39 ms). A depthwise convolution does 9
// multiply-adds per element read, so it is bound by memory, not arithmetic: one thread per output
// element, consecutive threads on consecutive channels (coalesced NHWC rows), fp32 accumulation,
// the f32 master weights read directly (no conversion to cuDNN's layout).
//
// The weight gradient sums over every output pixel, in two deterministic stages instead of
// atomics (a step recomputed after a rollback gives the same bits): blocks of 32 channels x 8 row
// lanes sum their chunk of rows into per-chunk partials, then one thread per (channel, tap) adds
// the chunks in order.
#include "device_math.cuh"

namespace hardy::core::cuda {

namespace {

constexpr int kTaps = depthwise_kernel * depthwise_kernel;
constexpr int kChannelsPerBlock = 32;
constexpr int kRowLanes = 8;
constexpr Index kMinRowsPerChunk = 64;
// Enough blocks to fill an H200 several times over in the first stage.
constexpr Index kTargetBlocks = 4096;

template <class T>
__global__ void depthwise_forward_kernel(const T* __restrict__ x, const float* __restrict__ weight,
                                         T* __restrict__ y, DepthwiseShape s) {
  const Index count = s.n * s.oh * s.ow * s.c;
  HARDY_GRID_STRIDE_LOOP(i, count) {
    const Index c = i % s.c;
    Index pixel = i / s.c;
    const Index ow = pixel % s.ow;
    pixel /= s.ow;
    const Index oh = pixel % s.oh;
    const Index n = pixel / s.oh;
    const float* w = weight + c * kTaps;
    float sum = 0.0f;
#pragma unroll
    for (int a = 0; a < depthwise_kernel; ++a) {
      const Index ih = oh * s.stride - s.padding + a * s.dilation;
      if (ih < 0 || ih >= s.h) continue;
      const T* row = x + ((n * s.h + ih) * s.w) * s.c + c;
#pragma unroll
      for (int b = 0; b < depthwise_kernel; ++b) {
        const Index iw = ow * s.stride - s.padding + b * s.dilation;
        if (iw < 0 || iw >= s.w) continue;
        sum += to_float(row[iw * s.c]) * w[a * depthwise_kernel + b];
      }
    }
    y[i] = from_float<T>(sum);
  }
}

// dx[n, ih, iw, c] = sum over the taps (a, b) that read (ih, iw) of dy[n, oh, ow, c] * w[c, a, b],
// where oh * stride = ih + padding - a * dilation (and likewise for the columns).
template <class T>
__global__ void depthwise_backward_data_kernel(const T* __restrict__ dy,
                                               const float* __restrict__ weight, T* __restrict__ dx,
                                               DepthwiseShape s) {
  const Index count = s.n * s.h * s.w * s.c;
  HARDY_GRID_STRIDE_LOOP(i, count) {
    const Index c = i % s.c;
    Index pixel = i / s.c;
    const Index iw = pixel % s.w;
    pixel /= s.w;
    const Index ih = pixel % s.h;
    const Index n = pixel / s.h;
    const float* w = weight + c * kTaps;
    float sum = 0.0f;
#pragma unroll
    for (int a = 0; a < depthwise_kernel; ++a) {
      const Index th = ih + s.padding - a * s.dilation;
      if (th < 0 || th % s.stride != 0) continue;
      const Index oh = th / s.stride;
      if (oh >= s.oh) continue;
      const T* row = dy + ((n * s.oh + oh) * s.ow) * s.c + c;
#pragma unroll
      for (int b = 0; b < depthwise_kernel; ++b) {
        const Index tw = iw + s.padding - b * s.dilation;
        if (tw < 0 || tw % s.stride != 0) continue;
        const Index ow = tw / s.stride;
        if (ow >= s.ow) continue;
        sum += to_float(row[ow * s.c]) * w[a * depthwise_kernel + b];
      }
    }
    dx[i] = from_float<T>(sum);
  }
}

// Stage 1: block (channel tile, chunk) sums dy * x over its chunk's output pixels into
// partials[chunk][channel][tap].
template <class T>
__global__ void depthwise_weight_partials_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                                                 float* __restrict__ partials, DepthwiseShape s,
                                                 Index rows_per_chunk) {
  __shared__ float lanes[kRowLanes][kChannelsPerBlock][kTaps];
  const Index c = static_cast<Index>(blockIdx.x) * kChannelsPerBlock + threadIdx.x;
  const Index rows = s.n * s.oh * s.ow;
  const Index first = static_cast<Index>(blockIdx.y) * rows_per_chunk;
  const Index last = first + rows_per_chunk < rows ? first + rows_per_chunk : rows;
  float sum[kTaps] = {};
  if (c < s.c) {
    for (Index r = first + threadIdx.y; r < last; r += kRowLanes) {
      const Index ow = r % s.ow;
      const Index oh = (r / s.ow) % s.oh;
      const Index n = r / (s.ow * s.oh);
      const float g = to_float(dy[r * s.c + c]);
#pragma unroll
      for (int a = 0; a < depthwise_kernel; ++a) {
        const Index ih = oh * s.stride - s.padding + a * s.dilation;
        if (ih < 0 || ih >= s.h) continue;
        const T* row = x + ((n * s.h + ih) * s.w) * s.c + c;
#pragma unroll
        for (int b = 0; b < depthwise_kernel; ++b) {
          const Index iw = ow * s.stride - s.padding + b * s.dilation;
          if (iw < 0 || iw >= s.w) continue;
          sum[a * depthwise_kernel + b] += g * to_float(row[iw * s.c]);
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTaps; ++t) lanes[threadIdx.y][threadIdx.x][t] = sum[t];
  __syncthreads();
  if (threadIdx.y != 0 || c >= s.c) return;
#pragma unroll
  for (int t = 0; t < kTaps; ++t) {
    float total = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) total += lanes[lane][threadIdx.x][t];
    partials[(static_cast<Index>(blockIdx.y) * s.c + c) * kTaps + t] = total;
  }
}

// Stage 2: dweight[c][tap] = the chunks' partials, added in chunk order.
__global__ void depthwise_weight_finish_kernel(const float* __restrict__ partials, Index chunks,
                                               Index entries, float* __restrict__ dweight) {
  HARDY_GRID_STRIDE_LOOP(i, entries) {
    float total = 0.0f;
    for (Index chunk = 0; chunk < chunks; ++chunk) total += partials[chunk * entries + i];
    dweight[i] = total;
  }
}

Index channel_tiles(const DepthwiseShape& s) {
  return (s.c + kChannelsPerBlock - 1) / kChannelsPerBlock;
}

Index rows_per_chunk(const DepthwiseShape& s) {
  const Index rows = s.n * s.oh * s.ow;
  const Index chunks = std::max<Index>(1, kTargetBlocks / channel_tiles(s));
  return std::max(kMinRowsPerChunk, (rows + chunks - 1) / chunks);
}

Index chunk_count(const DepthwiseShape& s) {
  const Index rows = s.n * s.oh * s.ow, per_chunk = rows_per_chunk(s);
  return std::max<Index>(1, (rows + per_chunk - 1) / per_chunk);
}

}  // namespace

void depthwise_forward(const void* x, const float* weight, void* y, DType type,
                       const DepthwiseShape& s, cudaStream_t stream) {
  const Index count = s.n * s.oh * s.ow * s.c;
  launch_per_element(type, count, "depthwise_forward", [&](auto tag, unsigned int blocks) {
    using T = decltype(tag);
    depthwise_forward_kernel<T><<<blocks, threads_per_block, 0, stream>>>(
        static_cast<const T*>(x), weight, static_cast<T*>(y), s);
  });
}

void depthwise_backward_data(const void* dy, const float* weight, void* dx, DType type,
                             const DepthwiseShape& s, cudaStream_t stream) {
  const Index count = s.n * s.h * s.w * s.c;
  launch_per_element(type, count, "depthwise_backward_data", [&](auto tag, unsigned int blocks) {
    using T = decltype(tag);
    depthwise_backward_data_kernel<T><<<blocks, threads_per_block, 0, stream>>>(
        static_cast<const T*>(dy), weight, static_cast<T*>(dx), s);
  });
}

Index depthwise_backward_weights_scratch(const DepthwiseShape& s) {
  return chunk_count(s) * s.c * kTaps;
}

void depthwise_backward_weights(const void* x, const void* dy, float* dweight, DType type,
                                const DepthwiseShape& s, float* scratch, cudaStream_t stream) {
  const Index chunks = chunk_count(s);
  const dim3 grid(static_cast<unsigned int>(channel_tiles(s)), static_cast<unsigned int>(chunks));
  const dim3 block(kChannelsPerBlock, kRowLanes);
  const Index per_chunk = rows_per_chunk(s);
  dispatch_float(type, [&](auto tag) {
    using T = decltype(tag);
    depthwise_weight_partials_kernel<T><<<grid, block, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(dy), scratch, s, per_chunk);
  });
  check_launch("depthwise_weight_partials");
  const Index entries = s.c * kTaps;
  depthwise_weight_finish_kernel<<<blocks_for(entries), threads_per_block, 0, stream>>>(
      scratch, chunks, entries, dweight);
  check_launch("depthwise_weight_finish");
}

}  // namespace hardy::core::cuda
