// Kernels that work per channel or per pixel neighbourhood of NHWC activations: the channel
// reductions behind normalization, pooling and bias gradients, the normalization passes, and
// bilinear resampling. Reductions are two-stage with a partition fixed by the shape (fp32 within
// a thread, double across chunks in chunk order), so they are deterministic; resampling's
// backward is a gather, not a scatter with atomics, for the same reason.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "device_math.cuh"

namespace hardy::core::cuda {

namespace {

// ---- channel reductions ----

// A block is 32 x 8 threads. Each warp (fixed threadIdx.y) covers `lanes` channels of
// `row_lanes` consecutive rows, so that tensors with fewer than 32 channels still read whole
// contiguous runs of memory; the 8 warps of a block stride through the block's chunk of rows.
constexpr int reduce_warps = 8;

struct ReduceShape {
  int lanes;      // channels per warp: min(channels, 32)
  int row_lanes;  // rows per warp: 32 / lanes
  Index chunks;   // chunks of rows per batch, one block per (channel block, chunk, batch)
  Index channel_blocks;
};

ReduceShape reduce_shape(Index batches, Index rows, Index channels) {
  ReduceShape s;
  s.lanes = static_cast<int>(std::min<Index>(channels, 32));
  s.row_lanes = 32 / s.lanes;
  s.channel_blocks = (channels + s.lanes - 1) / s.lanes;
  // About 2048 blocks fill an H100/H200 (132 SMs) many times; a chunk gets at least four passes
  // of the block over its rows, so that each thread has a few rows to sum.
  const Index rows_per_pass = Index{reduce_warps} * s.row_lanes;
  const Index wanted = std::max<Index>(1, 2048 / std::max<Index>(1, s.channel_blocks * batches));
  const Index useful = std::max<Index>(1, rows / (4 * rows_per_pass));
  s.chunks = std::clamp<Index>(std::min(wanted, useful), 1, 65535);
  return s;
}

template <class T, ChannelSum What>
__global__ void channel_partial_sums_kernel(ChannelSumInput in, Index rows, Index channels,
                                            int lanes, int row_lanes, Index chunks,
                                            float* partial) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int lane_channel = tx % lanes, lane_row = tx / lanes;
  const Index channel = static_cast<Index>(blockIdx.x) * lanes + lane_channel;
  const Index chunk = blockIdx.y, batch = blockIdx.z;
  const Index begin = rows * chunk / chunks, end = rows * (chunk + 1) / chunks;
  float first = 0.0f, second = 0.0f;
  if (lane_row < row_lanes && channel < channels) {
    float mean = 0.0f, rstd = 1.0f;
    if constexpr (What == ChannelSum::backward) {
      const Index stat = batch * in.stat_batch_stride + channel / in.channels_per_stat;
      mean = in.mean[stat];
      rstd = in.rstd[stat];
    }
    // dy and y are read (and may be set) for the backward sums only.
    const Index base = batch * rows * channels + channel;
    const T* x = static_cast<const T*>(in.x);
    const T* dy = static_cast<const T*>(in.dy);
    const T* y = static_cast<const T*>(in.y);
    for (Index row = begin + ty * row_lanes + lane_row; row < end;
         row += Index{reduce_warps} * row_lanes) {
      const Index i = base + row * channels;
      const float value = to_float(x[i]);
      if constexpr (What == ChannelSum::values) {
        first += value;
      } else if constexpr (What == ChannelSum::values_and_squares) {
        first += value;
        second += value * value;
      } else if constexpr (What == ChannelSum::shifted_values_and_squares) {
        const float shifted = value - to_float(x[base]);
        first += shifted;
        second += shifted * shifted;
      } else {
        float gradient = to_float(dy[i]);
        if (in.relu_mask && !(to_float(y[i]) > 0.0f)) gradient = 0.0f;
        first += gradient * ((value - mean) * rstd);
        second += gradient;
      }
    }
  }
  __shared__ float sums[2][reduce_warps][32];
  sums[0][ty][tx] = first;
  sums[1][ty][tx] = second;
  __syncthreads();
  // Warp 0 finishes the first sum, warp 1 the second, each lane one channel, in a fixed order.
  if (ty < 2 && tx < lanes) {
    const Index c = static_cast<Index>(blockIdx.x) * lanes + tx;
    if (c < channels) {
      float total = 0.0f;
      for (int w = 0; w < reduce_warps; ++w)
        for (int r = 0; r < row_lanes; ++r) total += sums[ty][w][r * lanes + tx];
      partial[((batch * chunks + chunk) * 2 + ty) * channels + c] = total;
    }
  }
}

__global__ void channel_sums_finish_kernel(const float* partial, Index batches, Index chunks,
                                           Index channels, double* out) {
  HARDY_GRID_STRIDE_LOOP(i, batches * 2 * channels) {
    const Index batch = i / (2 * channels), which = (i / channels) % 2, c = i % channels;
    double total = 0.0;
    for (Index k = 0; k < chunks; ++k)
      total += partial[((batch * chunks + k) * 2 + which) * channels + c];
    out[i] = total;
  }
}

__global__ void doubles_to_floats_kernel(const double* src, Index src_stride, float* dst,
                                         Index count, double scale) {
  HARDY_GRID_STRIDE_LOOP(i, count) { dst[i] = static_cast<float>(src[i * src_stride] * scale); }
}

// ---- group normalization ----

// One thread per (sample, group): each channel's mean and sum of centred squares from its
// shifted sums (S1 = sum(x - s), S2 = sum((x - s)^2): mean s + S1 / P, M2 = S2 - S1^2 / P), then
// the group's from its channels' (M2 = sum M2_c + P sum (mean_c - mean)^2).
template <class T>
__global__ void group_norm_statistics_kernel(const double* sums, const T* x, Index batch,
                                             Index pixels, Index channels, Index groups, float eps,
                                             float* mean, float* rstd) {
  const Index group_channels = channels / groups;
  const double p = static_cast<double>(pixels);
  HARDY_GRID_STRIDE_LOOP(i, batch * groups) {
    const Index n = i / groups, g = i % groups;
    const double* s = sums + n * 2 * channels;
    const T* shifts = x + n * pixels * channels;
    double group_mean = 0.0;
    for (Index c = g * group_channels; c < (g + 1) * group_channels; ++c)
      group_mean += static_cast<double>(to_float(shifts[c])) + s[c] / p;
    group_mean /= static_cast<double>(group_channels);
    double m2 = 0.0;
    for (Index c = g * group_channels; c < (g + 1) * group_channels; ++c) {
      const double channel_mean = static_cast<double>(to_float(shifts[c])) + s[c] / p;
      const double deviation = channel_mean - group_mean;
      m2 += fmax(s[channels + c] - s[c] * s[c] / p, 0.0) + p * deviation * deviation;
    }
    mean[i] = static_cast<float>(group_mean);
    rstd[i] = static_cast<float>(1.0 / sqrt(m2 / (p * static_cast<double>(group_channels)) + eps));
  }
}

// The per-element normalization passes walk each sample's (pixels x channels) block in runs of
// Width consecutive channels: one 16-byte load or store per run (Width = 16 / sizeof(T)) where
// the channel count and the pointers allow it, else Width 1; the run's channel and group come
// from 32-bit arithmetic once per run. (64-bit division per element, as a flat grid-stride loop
// needs, made these passes several times slower than the memory allows.)
template <class T, int Width>
struct Run {
  T v[Width];
};

template <class T, int Width>
__device__ __forceinline__ Run<T, Width> load_run(const T* base, std::uint32_t run) {
  if constexpr (Width * sizeof(T) == 16) {
    const uint4 raw = reinterpret_cast<const uint4*>(base)[run];
    return *reinterpret_cast<const Run<T, Width>*>(&raw);
  } else {
    return reinterpret_cast<const Run<T, Width>*>(base)[run];
  }
}

template <class T, int Width>
__device__ __forceinline__ void store_run(T* base, std::uint32_t run, const Run<T, Width>& value) {
  if constexpr (Width * sizeof(T) == 16)
    reinterpret_cast<uint4*>(base)[run] = *reinterpret_cast<const uint4*>(&value);
  else
    reinterpret_cast<Run<T, Width>*>(base)[run] = value;
}

// The shape of a normalization pass: runs per sample, runs per pixel (channels / Width) and the
// channels of a group.
struct RunShape {
  std::uint32_t runs_per_sample;
  std::uint32_t runs_per_pixel;
  std::uint32_t group_channels;
  std::uint32_t groups;
};

#define HARDY_RUNS_OF_SAMPLES(n, run, shape, batch)                                              \
  for (Index n = blockIdx.y; n < (batch); n += gridDim.y)                                        \
    for (std::uint32_t run = blockIdx.x * blockDim.x + threadIdx.x; run < shape.runs_per_sample; \
         run += blockDim.x * gridDim.x)

template <class T, int Width>
__global__ void group_norm_apply_kernel(const T* x, const float* gamma, const float* beta,
                                        const float* mean, const float* rstd, Index batch,
                                        RunShape shape, bool relu, T* y) {
  HARDY_RUNS_OF_SAMPLES(n, run, shape, batch) {
    const std::size_t sample = static_cast<std::size_t>(n) * shape.runs_per_sample;
    const Run<T, Width> in = load_run<T, Width>(x + sample * Width, run);
    Run<T, Width> out;
    const std::uint32_t first = (run % shape.runs_per_pixel) * Width;
    std::uint32_t group = first / shape.group_channels, in_group = first % shape.group_channels;
#pragma unroll
    for (int k = 0; k < Width; ++k) {
      const std::uint32_t c = first + k;
      const Index stat = n * shape.groups + group;
      // x - mean first: exact for x near a large mean, where x * a + b would not be.
      const float value = (to_float(in.v[k]) - mean[stat]) * (rstd[stat] * gamma[c]) + beta[c];
      out.v[k] = from_float<T>(relu ? fmaxf(value, 0.0f) : value);
      if (++in_group == shape.group_channels) in_group = 0, ++group;
    }
    store_run<T, Width>(y + sample * Width, run, out);
  }
}

__global__ void group_norm_backward_terms_kernel(const double* sums, const float* gamma,
                                                 Index batch, Index channels, Index groups,
                                                 float* dgamma, float* dbeta, double* group_terms) {
  const Index group_channels = channels / groups;
  const Index count = channels > batch * groups ? channels : batch * groups;
  HARDY_GRID_STRIDE_LOOP(i, count) {
    if (i < channels) {
      double total_dgamma = 0.0, total_dbeta = 0.0;
      for (Index n = 0; n < batch; ++n) {
        total_dgamma += sums[n * 2 * channels + i];
        total_dbeta += sums[n * 2 * channels + channels + i];
      }
      dgamma[i] = static_cast<float>(total_dgamma);
      dbeta[i] = static_cast<float>(total_dbeta);
    }
    if (i < batch * groups) {
      const Index n = i / groups, g = i % groups;
      double sum_dxhat = 0.0, sum_dxhat_xhat = 0.0;
      for (Index c = g * group_channels; c < (g + 1) * group_channels; ++c) {
        sum_dxhat += gamma[c] * sums[n * 2 * channels + channels + c];
        sum_dxhat_xhat += gamma[c] * sums[n * 2 * channels + c];
      }
      group_terms[2 * i] = sum_dxhat;
      group_terms[2 * i + 1] = sum_dxhat_xhat;
    }
  }
}

// dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = gamma * dy', as on the
// CPU (cpu/normalization.cpp); the per-group terms in double once per group within a run.
template <class T, int Width>
__global__ void group_norm_backward_data_kernel(const T* x, const T* y, const T* dy, bool relu,
                                                const float* gamma, const float* mean,
                                                const float* rstd, const double* group_terms,
                                                Index batch, RunShape shape, double group_size,
                                                T* dx) {
  HARDY_RUNS_OF_SAMPLES(n, run, shape, batch) {
    const std::size_t sample = static_cast<std::size_t>(n) * shape.runs_per_sample * Width;
    const Run<T, Width> xs = load_run<T, Width>(x + sample, run);
    const Run<T, Width> dys = load_run<T, Width>(dy + sample, run);
    Run<T, Width> ys{};
    if (relu) ys = load_run<T, Width>(y + sample, run);
    Run<T, Width> out;
    const std::uint32_t first = (run % shape.runs_per_pixel) * Width;
    std::uint32_t group = first / shape.group_channels, in_group = first % shape.group_channels;
    float inv_std = 0.0f, centred_scale = 0.0f, offset = 0.0f, group_mean = 0.0f;
    std::uint32_t terms_of = ~0u;
#pragma unroll
    for (int k = 0; k < Width; ++k) {
      if (group != terms_of) {
        const Index stat = n * shape.groups + group;
        const double s = rstd[stat];
        inv_std = static_cast<float>(s);
        centred_scale = static_cast<float>(-s * s * group_terms[2 * stat + 1] / group_size);
        offset = static_cast<float>(-s * group_terms[2 * stat] / group_size);
        group_mean = mean[stat];
        terms_of = group;
      }
      const std::uint32_t c = first + k;
      float gradient = to_float(dys.v[k]);
      if (relu && !(to_float(ys.v[k]) > 0.0f)) gradient = 0.0f;
      out.v[k] = from_float<T>(inv_std * gamma[c] * gradient +
                               centred_scale * (to_float(xs.v[k]) - group_mean) + offset);
      if (++in_group == shape.group_channels) in_group = 0, ++group;
    }
    store_run<T, Width>(dx + sample, run, out);
  }
}

// ---- batch normalization ----

__global__ void rstd_from_variance_kernel(const float* variance, float eps, Index channels,
                                          float* rstd) {
  HARDY_GRID_STRIDE_LOOP(c, channels) {
    rstd[c] = static_cast<float>(1.0 / sqrt(static_cast<double>(variance[c]) + eps));
  }
}

template <class T>
__global__ void batch_norm_apply_kernel(const T* x, const float* mean, const float* variance,
                                        const float* gamma, const float* beta, float eps, bool relu,
                                        Index count, Index channels, T* y) {
  HARDY_GRID_STRIDE_LOOP(i, count) {
    const Index c = i % channels;
    const float value = gamma[c] * (to_float(x[i]) - mean[c]) / sqrtf(variance[c] + eps) + beta[c];
    y[i] = from_float<T>(relu ? fmaxf(value, 0.0f) : value);
  }
}

// Per channel: dy_scale, centred_scale, offset of dx = dy_scale dy' + centred_scale (x - mean)
// + offset, in double as on the CPU.
__global__ void batch_norm_coefficients_kernel(const float* variance, const float* gamma,
                                               const float* dgamma, const float* dbeta, float eps,
                                               double count, Index channels, float* coefficients) {
  HARDY_GRID_STRIDE_LOOP(c, channels) {
    const double rstd = static_cast<float>(1.0 / sqrt(static_cast<double>(variance[c]) + eps));
    const double g = static_cast<double>(gamma[c]) * rstd;
    coefficients[c] = static_cast<float>(g);
    coefficients[channels + c] = static_cast<float>(-g * dgamma[c] / count * rstd);
    coefficients[2 * channels + c] = static_cast<float>(-g * dbeta[c] / count);
  }
}

template <class T>
__global__ void batch_norm_backward_data_kernel(const T* x, const T* y, const T* dy, bool relu,
                                                const float* mean, const float* coefficients,
                                                Index count, Index channels, T* dx) {
  HARDY_GRID_STRIDE_LOOP(i, count) {
    const Index c = i % channels;
    float gradient = to_float(dy[i]);
    if (relu && !(to_float(y[i]) > 0.0f)) gradient = 0.0f;
    dx[i] = from_float<T>(coefficients[c] * gradient +
                          coefficients[channels + c] * (to_float(x[i]) - mean[c]) +
                          coefficients[2 * channels + c]);
  }
}

// ---- pooling ----

template <class T>
__global__ void global_avg_pool_finish_kernel(const double* sums, Index batch, Index channels,
                                              double pixels, T* y) {
  HARDY_GRID_STRIDE_LOOP(i, batch * channels) {
    const Index n = i / channels, c = i % channels;
    y[i] = from_float<T>(static_cast<float>(sums[n * 2 * channels + c] / pixels));
  }
}

template <class T>
__global__ void global_avg_pool_backward_kernel(const T* dy, Index batch, Index pixels,
                                                Index channels, float share, T* dx) {
  HARDY_GRID_STRIDE_LOOP(i, batch * pixels * channels) {
    const Index c = i % channels, n = i / (pixels * channels);
    dx[i] = from_float<T>(to_float(dy[n * channels + c]) * share);
  }
}

// ---- bilinear resampling ----

template <class T>
__global__ void upsample_forward_kernel(const T* x, Index batch, Index channels, Index in_h,
                                        Index in_w, Index out_h, Index out_w, LinearTaps rows,
                                        LinearTaps columns, T* y) {
  HARDY_GRID_STRIDE_LOOP(i, batch * out_h * out_w * channels) {
    const Index c = i % channels;
    const Index ow = (i / channels) % out_w;
    const Index oh = (i / (channels * out_w)) % out_h;
    const Index n = i / (channels * out_w * out_h);
    const T* plane = x + n * in_h * in_w * channels + c;
    const Index h0 = rows.first[oh], h1 = rows.second[oh];
    const Index w0 = columns.first[ow], w1 = columns.second[ow];
    const float top = columns.first_weight[ow] * to_float(plane[(h0 * in_w + w0) * channels]) +
                      columns.second_weight[ow] * to_float(plane[(h0 * in_w + w1) * channels]);
    const float bottom = columns.first_weight[ow] * to_float(plane[(h1 * in_w + w0) * channels]) +
                         columns.second_weight[ow] * to_float(plane[(h1 * in_w + w1) * channels]);
    y[i] = from_float<T>(rows.first_weight[oh] * top + rows.second_weight[oh] * bottom);
  }
}

// The weight with which output coordinate o reads input coordinate i.
__device__ __forceinline__ float tap_weight(const LinearTaps& taps, Index o, Index i) {
  return (taps.first[o] == i ? taps.first_weight[o] : 0.0f) +
         (taps.second[o] == i ? taps.second_weight[o] : 0.0f);
}

template <class T>
__global__ void upsample_backward_columns_kernel(const T* dy, Index batch, Index channels,
                                                 Index in_w, Index out_h, Index out_w,
                                                 LinearTaps columns, float* along_w) {
  HARDY_GRID_STRIDE_LOOP(i, batch * out_h * in_w * channels) {
    const Index c = i % channels;
    const Index iw = (i / channels) % in_w;
    const Index row = i / (channels * in_w);  // n * out_h + oh
    const T* from = dy + row * out_w * channels + c;
    float total = 0.0f;
    for (Index ow = columns.lo[iw]; ow <= columns.hi[iw]; ++ow)
      total += tap_weight(columns, ow, iw) * to_float(from[ow * channels]);
    along_w[i] = total;
  }
}

template <class T>
__global__ void upsample_backward_rows_kernel(const float* along_w, Index batch, Index channels,
                                              Index in_h, Index in_w, Index out_h, LinearTaps rows,
                                              T* dx) {
  HARDY_GRID_STRIDE_LOOP(i, batch * in_h * in_w * channels) {
    const Index column = i % (in_w * channels);  // iw * channels + c
    const Index ih = (i / (in_w * channels)) % in_h;
    const Index n = i / (in_w * channels * in_h);
    const float* from = along_w + n * out_h * in_w * channels + column;
    float total = 0.0f;
    for (Index oh = rows.lo[ih]; oh <= rows.hi[ih]; ++oh)
      total += tap_weight(rows, oh, ih) * from[oh * in_w * channels];
    dx[i] = from_float<T>(total);
  }
}

// Launches a normalization pass over runs of channels (see Run): 16-byte runs when the channel
// count is a multiple of the run and every pointer is 16-byte aligned, else runs of one element;
// launch(T{}, width, shape, grid) with width a std::integral_constant.
template <class Launch>
void launch_runs(DType type, Index batch, Index pixels, Index channels, Index groups,
                 std::initializer_list<const void*> pointers, const char* kernel, Launch&& launch) {
  if (batch * pixels * channels == 0) return;
  if (pixels * channels > Index{UINT32_MAX})
    throw std::length_error(std::string(kernel) + ": more than 2^32 elements in one sample");
  dispatch_float(type, [&](auto tag) {
    using T = decltype(tag);
    constexpr int wide = static_cast<int>(16 / sizeof(T));
    const bool aligned = std::all_of(pointers.begin(), pointers.end(), [](const void* p) {
      return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
    });
    const auto go = [&](auto width) {
      RunShape shape{static_cast<std::uint32_t>(pixels * channels / width()),
                     static_cast<std::uint32_t>(channels / width()),
                     static_cast<std::uint32_t>(channels / groups),
                     static_cast<std::uint32_t>(groups)};
      // About 2048 blocks in all, as the reductions use; samples beyond 65535 loop on y.
      const Index per_sample = (shape.runs_per_sample + threads_per_block - 1) / threads_per_block;
      const Index across = std::clamp<Index>(2048 / std::max<Index>(batch, 1), 1, per_sample);
      launch(tag, width, shape,
             dim3(static_cast<unsigned int>(across),
                  static_cast<unsigned int>(std::min<Index>(batch, 65535))));
    };
    if (channels % wide == 0 && aligned)
      go(std::integral_constant<int, wide>{});
    else
      go(std::integral_constant<int, 1>{});
  });
  check_launch(kernel);
}

template <class T, ChannelSum What>
void launch_channel_partial_sums(const ChannelSumInput& input, Index batches, Index rows,
                                 Index channels, const ReduceShape& shape, float* scratch,
                                 cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned int>(shape.channel_blocks),
                  static_cast<unsigned int>(shape.chunks), static_cast<unsigned int>(batches));
  channel_partial_sums_kernel<T, What><<<grid, dim3(32, reduce_warps), 0, stream>>>(
      input, rows, channels, shape.lanes, shape.row_lanes, shape.chunks, scratch);
}

}  // namespace

Index channel_sums_scratch(Index batches, Index rows, Index channels) {
  return batches * reduce_shape(batches, rows, channels).chunks * 2 * channels;
}

void channel_sums(ChannelSum what, const ChannelSumInput& input, DType type, Index batches,
                  Index rows, Index channels, float* scratch, double* out, cudaStream_t stream) {
  if (batches * channels == 0) return;
  const ReduceShape shape = reduce_shape(batches, rows, channels);
  if (batches > 65535) throw std::logic_error("channel_sums: more than 65535 batches");
  dispatch_float(type, [&](auto tag) {
    using T = decltype(tag);
    switch (what) {
      case ChannelSum::values:
        return launch_channel_partial_sums<T, ChannelSum::values>(input, batches, rows, channels,
                                                                  shape, scratch, stream);
      case ChannelSum::values_and_squares:
        return launch_channel_partial_sums<T, ChannelSum::values_and_squares>(
            input, batches, rows, channels, shape, scratch, stream);
      case ChannelSum::shifted_values_and_squares:
        return launch_channel_partial_sums<T, ChannelSum::shifted_values_and_squares>(
            input, batches, rows, channels, shape, scratch, stream);
      case ChannelSum::backward:
        return launch_channel_partial_sums<T, ChannelSum::backward>(input, batches, rows, channels,
                                                                    shape, scratch, stream);
    }
  });
  check_launch("channel_partial_sums");
  channel_sums_finish_kernel<<<blocks_for(batches * 2 * channels), threads_per_block, 0, stream>>>(
      scratch, batches, shape.chunks, channels, out);
  check_launch("channel_sums_finish");
}

void doubles_to_floats(const double* src, Index src_stride, float* dst, Index count, double scale,
                       cudaStream_t stream) {
  if (count == 0) return;
  doubles_to_floats_kernel<<<blocks_for(count), threads_per_block, 0, stream>>>(src, src_stride,
                                                                                dst, count, scale);
  check_launch("doubles_to_floats");
}

void group_norm_statistics(const double* sums, const void* x, DType type, Index batch, Index pixels,
                           Index channels, Index groups, float eps, float* mean, float* rstd,
                           cudaStream_t stream) {
  dispatch_float(type, [&](auto tag) {
    using T = decltype(tag);
    group_norm_statistics_kernel<<<blocks_for(batch * groups), threads_per_block, 0, stream>>>(
        sums, static_cast<const T*>(x), batch, pixels, channels, groups, eps, mean, rstd);
  });
  check_launch("group_norm_statistics");
}

void group_norm_apply(const void* x, DType type, const float* gamma, const float* beta,
                      const float* mean, const float* rstd, Index batch, Index pixels,
                      Index channels, Index groups, bool relu, void* y, cudaStream_t stream) {
  launch_runs(type, batch, pixels, channels, groups, {x, y}, "group_norm_apply",
              [&](auto tag, auto width, RunShape shape, dim3 grid) {
                using T = decltype(tag);
                group_norm_apply_kernel<T, width()><<<grid, threads_per_block, 0, stream>>>(
                    static_cast<const T*>(x), gamma, beta, mean, rstd, batch, shape, relu,
                    static_cast<T*>(y));
              });
}

void group_norm_backward_terms(const double* sums, const float* gamma, Index batch, Index channels,
                               Index groups, float* dgamma, float* dbeta, double* group_terms,
                               cudaStream_t stream) {
  group_norm_backward_terms_kernel<<<blocks_for(std::max(channels, batch * groups)),
                                     threads_per_block, 0, stream>>>(
      sums, gamma, batch, channels, groups, dgamma, dbeta, group_terms);
  check_launch("group_norm_backward_terms");
}

void group_norm_backward_data(const void* x, const void* y, const void* dy, DType type, bool relu,
                              const float* gamma, const float* mean, const float* rstd,
                              const double* group_terms, Index batch, Index pixels, Index channels,
                              Index groups, double group_size, void* dx, cudaStream_t stream) {
  launch_runs(type, batch, pixels, channels, groups, {x, relu ? y : x, dy, dx},
              "group_norm_backward_data", [&](auto tag, auto width, RunShape shape, dim3 grid) {
                using T = decltype(tag);
                group_norm_backward_data_kernel<T, width()><<<grid, threads_per_block, 0, stream>>>(
                    static_cast<const T*>(x), static_cast<const T*>(y), static_cast<const T*>(dy),
                    relu, gamma, mean, rstd, group_terms, batch, shape, group_size,
                    static_cast<T*>(dx));
              });
}

void rstd_from_variance(const float* variance, float eps, Index channels, float* rstd,
                        cudaStream_t stream) {
  rstd_from_variance_kernel<<<blocks_for(channels), threads_per_block, 0, stream>>>(variance, eps,
                                                                                    channels, rstd);
  check_launch("rstd_from_variance");
}

void batch_norm_apply(const void* x, DType type, const float* mean, const float* variance,
                      const float* gamma, const float* beta, float eps, bool relu, Index rows,
                      Index channels, void* y, cudaStream_t stream) {
  const Index count = rows * channels;
  launch_per_element(type, count, "batch_norm_apply", [&](auto tag, unsigned int blocks) {
    using T = decltype(tag);
    batch_norm_apply_kernel<<<blocks, threads_per_block, 0, stream>>>(
        static_cast<const T*>(x), mean, variance, gamma, beta, eps, relu, count, channels,
        static_cast<T*>(y));
  });
}

void batch_norm_backward_data(const void* x, const void* y, const void* dy, DType type, bool relu,
                              const float* mean, const float* variance, const float* gamma,
                              const float* dgamma, const float* dbeta, float eps, double count,
                              Index rows, Index channels, float* coefficients, void* dx,
                              cudaStream_t stream) {
  batch_norm_coefficients_kernel<<<blocks_for(channels), threads_per_block, 0, stream>>>(
      variance, gamma, dgamma, dbeta, eps, count, channels, coefficients);
  check_launch("batch_norm_coefficients");
  const Index elements = rows * channels;
  launch_per_element(
      type, elements, "batch_norm_backward_data", [&](auto tag, unsigned int blocks) {
        using T = decltype(tag);
        batch_norm_backward_data_kernel<<<blocks, threads_per_block, 0, stream>>>(
            static_cast<const T*>(x), static_cast<const T*>(y), static_cast<const T*>(dy), relu,
            mean, coefficients, elements, channels, static_cast<T*>(dx));
      });
}

void global_avg_pool_finish(const double* sums, Index batch, Index channels, double pixels, void* y,
                            DType type, cudaStream_t stream) {
  dispatch_float(type, [&](auto tag) {
    using T = decltype(tag);
    global_avg_pool_finish_kernel<<<blocks_for(batch * channels), threads_per_block, 0, stream>>>(
        sums, batch, channels, pixels, static_cast<T*>(y));
  });
  check_launch("global_avg_pool_finish");
}

void global_avg_pool_backward(const void* dy, DType type, Index batch, Index pixels, Index channels,
                              void* dx, cudaStream_t stream) {
  const Index count = batch * pixels * channels;
  launch_per_element(type, count, "global_avg_pool_backward", [&](auto tag, unsigned int blocks) {
    using T = decltype(tag);
    const float share = 1.0f / static_cast<float>(pixels);
    global_avg_pool_backward_kernel<<<blocks, threads_per_block, 0, stream>>>(
        static_cast<const T*>(dy), batch, pixels, channels, share, static_cast<T*>(dx));
  });
}

void upsample_bilinear_forward(const void* x, DType type, Index batch, Index channels, Index in_h,
                               Index in_w, Index out_h, Index out_w, const LinearTaps& rows,
                               const LinearTaps& columns, void* y, cudaStream_t stream) {
  const Index count = batch * out_h * out_w * channels;
  launch_per_element(type, count, "upsample_bilinear_forward", [&](auto tag, unsigned int blocks) {
    using T = decltype(tag);
    upsample_forward_kernel<<<blocks, threads_per_block, 0, stream>>>(
        static_cast<const T*>(x), batch, channels, in_h, in_w, out_h, out_w, rows, columns,
        static_cast<T*>(y));
  });
}

void upsample_bilinear_backward(const void* dy, DType type, Index batch, Index channels, Index in_h,
                                Index in_w, Index out_h, Index out_w, const LinearTaps& rows,
                                const LinearTaps& columns, float* along_w, void* dx,
                                cudaStream_t stream) {
  const Index staged = batch * out_h * in_w * channels;
  const Index count = batch * in_h * in_w * channels;
  if (count == 0) return;
  dispatch_float(type, [&](auto tag) {
    using T = decltype(tag);
    upsample_backward_columns_kernel<<<blocks_for(staged), threads_per_block, 0, stream>>>(
        static_cast<const T*>(dy), batch, channels, in_w, out_h, out_w, columns, along_w);
    check_launch("upsample_bilinear_backward (columns)");
    upsample_backward_rows_kernel<<<blocks_for(count), threads_per_block, 0, stream>>>(
        along_w, batch, channels, in_h, in_w, out_h, rows, static_cast<T*>(dx));
  });
  check_launch("upsample_bilinear_backward (rows)");
}

}  // namespace hardy::core::cuda
