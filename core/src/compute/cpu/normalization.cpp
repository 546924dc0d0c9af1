// Group normalization (oneDNN 2.6 has none) and the split batch-normalization API. The kernels
// stream NHWC memory row by row with per-channel accumulators (a per-group walk would stride
// across every row); reductions accumulate in double and are summed in a fixed order, so results
// do not depend on the number of threads. Batch-norm application is oneDNN's inference
// primitive. Activations are f32 or bf16 (element_types.hpp), statistics and parameters f32.
#include <bit>
#include <cmath>
#include <type_traits>

#include "compute/cpu/dnnl_support.hpp"
#include "compute/cpu/element_types.hpp"

namespace hardy::core {

using namespace cpu;  // the backend's internal helpers, declared in dnnl_support.hpp

namespace {

// Runs kernel(std::true_type) or kernel(std::false_type), so that the relu mask is a
// compile-time choice and the loops vectorise without a branch.
template <class Kernel>
void with_relu_choice(bool fuse_relu, Kernel&& kernel) {
  if (fuse_relu)
    kernel(std::true_type{});
  else
    kernel(std::false_type{});
}

// dy masked by the fused relu: the relu passed gradient only where its output was positive.
template <bool FuseRelu, class T>
inline float masked_gradient(const T* y, const T* dy, std::int64_t i) {
  // Both loads unconditional: a load under the condition keeps the loops from vectorizing.
  const float gradient = to_float(dy[i]);
  if constexpr (FuseRelu) return to_float(y[i]) > 0.0f ? gradient : 0.0f;
  return gradient;
}

// Sizes of an NHWC activation as the kernels walk it: batch rows of `pixels` rows of `channels`.
struct NhwcExtent {
  std::int64_t batch, channels, pixels;

  explicit NhwcExtent(const Tensor& t) : batch(t.n()), channels(t.c()), pixels(t.h() * t.w()) {}
  std::int64_t rows() const { return batch * pixels; }
};

// Group statistics broadcast to every (sample, channel), for the element-wise passes.
struct ChannelStatistics {
  std::vector<float> mean, rstd;
};

ChannelStatistics per_channel(const NhwcExtent& extent, int groups, const float* group_mean,
                              const float* group_rstd) {
  const std::int64_t group_channels = extent.channels / groups;
  ChannelStatistics statistics;
  for (std::int64_t n = 0; n < extent.batch; ++n)
    for (std::int64_t c = 0; c < extent.channels; ++c) {
      statistics.mean.push_back(group_mean[n * groups + c / group_channels]);
      statistics.rstd.push_back(group_rstd[n * groups + c / group_channels]);
    }
  return statistics;
}

}  // namespace

namespace {

template <class T>
void group_norm_forward_kernel(const GroupNormForward& args, Tensor& y, Tensor& mean,
                               Tensor& rstd) {
  // Named references, not structured bindings (here and below): Clang before 16 cannot capture
  // bindings in OpenMP regions.
  const auto& x = args.x;
  const auto& gamma = args.gamma;
  const auto& beta = args.beta;
  const auto& groups = args.groups;
  const auto& eps = args.eps;
  const auto& fuse_relu = args.fuse_relu;
  const NhwcExtent extent(x);
  const std::int64_t channels = extent.channels, group_channels = channels / groups;
  const double group_size = static_cast<double>(group_channels * extent.pixels);
  if (group_size == 0) return;
  const T* src = x.data<T>();

  // Two passes (mean, then centred squares): one-pass sums of squares lose the variance of data
  // whose mean is large against its spread.
  const std::vector<double> sums = sum_over_pixels(
      extent.batch, extent.pixels, channels, [&](std::int64_t n, std::int64_t p, double* totals) {
        const T* row = src + (n * extent.pixels + p) * channels;
        for (std::int64_t c = 0; c < channels; ++c) totals[c] += to_float(row[c]);
      });
  std::vector<double> channel_mean(static_cast<std::size_t>(extent.batch * channels));
  for (std::int64_t n = 0; n < extent.batch; ++n)
    for (std::int64_t g = 0; g < groups; ++g) {
      double group_sum = 0.0;
      for (std::int64_t c = g * group_channels; c < (g + 1) * group_channels; ++c)
        group_sum += sums[n * channels + c];
      mean.data<float>()[n * groups + g] = static_cast<float>(group_sum / group_size);
      for (std::int64_t c = g * group_channels; c < (g + 1) * group_channels; ++c)
        channel_mean[n * channels + c] = group_sum / group_size;
    }
  const std::vector<double> squares = sum_over_pixels(
      extent.batch, extent.pixels, channels, [&](std::int64_t n, std::int64_t p, double* totals) {
        const T* row = src + (n * extent.pixels + p) * channels;
        const double* centre = channel_mean.data() + n * channels;
        for (std::int64_t c = 0; c < channels; ++c) {
          const double centred = to_float(row[c]) - centre[c];
          totals[c] += centred * centred;
        }
      });
  for (std::int64_t n = 0; n < extent.batch; ++n)
    for (std::int64_t g = 0; g < groups; ++g) {
      double group_squares = 0.0;
      for (std::int64_t c = g * group_channels; c < (g + 1) * group_channels; ++c)
        group_squares += squares[n * channels + c];
      rstd.data<float>()[n * groups + g] =
          static_cast<float>(1.0 / std::sqrt(group_squares / group_size + eps));
    }

  const ChannelStatistics statistics =
      per_channel(extent, groups, mean.data<float>(), rstd.data<float>());
  const float* scale = gamma.data<float>();
  const float* shift = beta.data<float>();
  T* dst = y.data<T>();
  with_relu_choice(fuse_relu, [&](auto fuse) {
#pragma omp parallel for schedule(static)
    for (std::int64_t row = 0; row < extent.rows(); ++row) {
      const std::int64_t first = (row / extent.pixels) * channels;
      const float* centre = statistics.mean.data() + first;
      const float* inv_std = statistics.rstd.data() + first;
      for (std::int64_t c = 0; c < channels; ++c) {
        // x - mean first: it is exact for x near a large mean, where x * a + b would not be.
        const float value =
            (to_float(src[row * channels + c]) - centre[c]) * (inv_std[c] * scale[c]) + shift[c];
        dst[row * channels + c] =
            from_float<T>(decltype(fuse)::value ? std::max(value, 0.0f) : value);
      }
    }
  });
}

}  // namespace

void CpuBackend::do_group_norm_forward(const GroupNormForward& args, Tensor& y, Tensor& mean,
                                       Tensor& rstd) {
  with_element_type(args.x.dtype(), [&](auto element) {
    group_norm_forward_kernel<decltype(element)>(args, y, mean, rstd);
  });
}

namespace {

template <class T>
void group_norm_backward_kernel(const GroupNormBackward& args, Tensor& dx, Tensor& dgamma,
                                Tensor& dbeta) {
  const auto& x = args.x;
  const auto& y = args.y;
  const auto& dy = args.dy;
  const auto& gamma = args.gamma;
  const auto& mean = args.mean;
  const auto& rstd = args.rstd;
  const auto& groups = args.groups;
  const auto& fuse_relu = args.fuse_relu;
  const NhwcExtent extent(x);
  const std::int64_t channels = extent.channels, group_channels = channels / groups;
  const double group_size = static_cast<double>(group_channels * extent.pixels);
  const T* src = x.data<T>();
  const T* out = fuse_relu ? y.data<T>() : nullptr;
  const T* grad = dy.data<T>();
  const float* scale = gamma.data<float>();
  T* grad_src = dx.data<T>();
  const ChannelStatistics statistics =
      per_channel(extent, groups, mean.data<float>(), rstd.data<float>());

  with_relu_choice(fuse_relu, [&](auto fuse) {
    constexpr bool fused = decltype(fuse)::value;
    // Per sample and channel: sum(dy' * xhat) in [0, C), sum(dy') in [C, 2C).
    const std::vector<double> sums = sum_over_pixels_blocked(
        extent.batch, extent.pixels, 2 * channels,
        [&](std::int64_t n, std::int64_t p, float* __restrict totals) {
          const std::int64_t first = (n * extent.pixels + p) * channels;
          const float* __restrict centre = statistics.mean.data() + n * channels;
          const float* __restrict inv_std = statistics.rstd.data() + n * channels;
          for (std::int64_t c = 0; c < channels; ++c) {
            const float d = masked_gradient<fused>(out, grad, first + c);
            totals[c] += d * ((to_float(src[first + c]) - centre[c]) * inv_std[c]);
            totals[channels + c] += d;
          }
        });
    for (std::int64_t c = 0; c < channels; ++c) {
      double total_dgamma = 0.0, total_dbeta = 0.0;
      for (std::int64_t n = 0; n < extent.batch; ++n) {
        total_dgamma += sums[n * 2 * channels + c];
        total_dbeta += sums[n * 2 * channels + channels + c];
      }
      dgamma.data<float>()[c] = static_cast<float>(total_dgamma);
      dbeta.data<float>()[c] = static_cast<float>(total_dbeta);
    }
    if (group_size == 0) return;

    // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) with dxhat = dy' * gamma,
    // means over the group; per (sample, channel) as dy_scale * dy' + centred_scale * (x - mean)
    // + offset.
    const std::size_t coefficients = static_cast<std::size_t>(extent.batch * channels);
    std::vector<float> dy_scale(coefficients), centred_scale(coefficients), offset(coefficients);
    for (std::int64_t n = 0; n < extent.batch; ++n)
      for (std::int64_t g = 0; g < groups; ++g) {
        const double* sample = sums.data() + n * 2 * channels;
        double sum_dxhat = 0.0, sum_dxhat_xhat = 0.0;
        for (std::int64_t c = g * group_channels; c < (g + 1) * group_channels; ++c) {
          sum_dxhat += scale[c] * sample[channels + c];
          sum_dxhat_xhat += scale[c] * sample[c];
        }
        const double inv_std = rstd.data<float>()[n * groups + g];
        for (std::int64_t c = g * group_channels; c < (g + 1) * group_channels; ++c) {
          dy_scale[n * channels + c] = static_cast<float>(inv_std * scale[c]);
          centred_scale[n * channels + c] =
              static_cast<float>(-inv_std * inv_std * sum_dxhat_xhat / group_size);
          offset[n * channels + c] = static_cast<float>(-inv_std * sum_dxhat / group_size);
        }
      }
#pragma omp parallel for schedule(static)
    for (std::int64_t row = 0; row < extent.rows(); ++row) {
      const std::int64_t first = (row / extent.pixels) * channels;
      for (std::int64_t c = 0; c < channels; ++c) {
        const std::int64_t i = row * channels + c;
        grad_src[i] = from_float<T>(dy_scale[first + c] * masked_gradient<fused>(out, grad, i) +
                                    centred_scale[first + c] *
                                        (to_float(src[i]) - statistics.mean[first + c]) +
                                    offset[first + c]);
      }
    }
  });
}

}  // namespace

void CpuBackend::do_group_norm_backward(const GroupNormBackward& args, Tensor& dx, Tensor& dgamma,
                                        Tensor& dbeta) {
  with_element_type(args.x.dtype(), [&](auto element) {
    group_norm_backward_kernel<decltype(element)>(args, dx, dgamma, dbeta);
  });
}

namespace {

template <class T>
std::vector<double> channel_sums(const Tensor& x) {
  const NhwcExtent extent(x);
  const std::int64_t channels = extent.channels;
  const T* src = x.data<T>();
  return sum_over_pixels(1, extent.rows(), 2 * channels,
                         [&](std::int64_t, std::int64_t row, double* totals) {
                           const T* values = src + row * channels;
                           for (std::int64_t c = 0; c < channels; ++c) {
                             const double value = to_float(values[c]);
                             totals[c] += value;
                             totals[channels + c] += value * value;
                           }
                         });
}

}  // namespace

void CpuBackend::do_batch_norm_statistics(const Tensor& x, Tensor& sum, Tensor& sum_squares) {
  const std::int64_t channels = x.c();
  const std::vector<double> sums = with_element_type(
      x.dtype(), [&](auto element) { return channel_sums<decltype(element)>(x); });
  for (std::int64_t c = 0; c < channels; ++c) {
    sum.data<float>()[c] = static_cast<float>(sums[c]);
    sum_squares.data<float>()[c] = static_cast<float>(sums[channels + c]);
  }
}

namespace {

// Batch-norm application on bf16 activations: oneDNN 2.6 has no jit kernel for bf16 channels-last
// batch norm and falls back to its generic one ("nspc_bnorm:any"), which took 9.4 ms of DeepCAM's
// 147 ms bf16 step at 64x64; this loop is what its f32 jit kernel computes, per channel
// (x - mean) * gamma / sqrt(variance + eps) + beta [then relu].
void batch_norm_apply_bf16(const BatchNormApply& args, Tensor& y) {
  const NhwcExtent extent(args.x);
  const std::int64_t channels = extent.channels;
  std::vector<float> scale(static_cast<std::size_t>(channels));
  const float* gamma = args.gamma.data<float>();
  const float* variance = args.variance.data<float>();
  for (std::int64_t c = 0; c < channels; ++c)
    scale[c] =
        static_cast<float>(gamma[c] / std::sqrt(static_cast<double>(variance[c]) + args.eps));
  const float* centre = args.mean.data<float>();
  const float* shift = args.beta.data<float>();
  const bf16* src = args.x.data<bf16>();
  bf16* dst = y.data<bf16>();
  with_relu_choice(args.fuse_relu, [&](auto fuse) {
#pragma omp parallel for schedule(static) if (extent.rows() * channels >= (1 << 15))
    for (std::int64_t row = 0; row < extent.rows(); ++row) {
      const bf16* __restrict in = src + row * channels;
      bf16* __restrict out = dst + row * channels;
      for (std::int64_t c = 0; c < channels; ++c) {
        const float value = (to_float(in[c]) - centre[c]) * scale[c] + shift[c];
        out[c] = from_float<bf16>(decltype(fuse)::value ? std::max(value, 0.0f) : value);
      }
    }
  });
}

}  // namespace

void CpuBackend::do_batch_norm_apply(const BatchNormApply& args, Tensor& y) {
  if (args.x.dtype() == DType::bf16) return batch_norm_apply_bf16(args, y);
  constexpr std::string_view operation = "batch_norm_apply";
  const auto& x = args.x;
  const auto& mean = args.mean;
  const auto& variance = args.variance;
  const auto& gamma = args.gamma;
  const auto& beta = args.beta;
  const auto& eps = args.eps;
  const auto& fuse_relu = args.fuse_relu;
  dnnl_checked(operation, {&x, &mean, &variance, &gamma, &beta, &y}, [&] {
    const dnnl::memory::desc data = dnnl_desc(x);
    const auto key = PrimitiveKey{}
                         .add(static_cast<std::int64_t>(PrimitiveKind::batch_norm_apply))
                         .add(x.dims())
                         .add(std::bit_cast<std::int32_t>(eps))
                         .add(fuse_relu);
    const CachedPrimitive& norm = impl_->cached(key, [&] {
      auto flags = dnnl::normalization_flags::use_global_stats |
                   dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
      if (fuse_relu) flags = flags | dnnl::normalization_flags::fuse_norm_relu;
      const dnnl::batch_normalization_forward::desc desc(dnnl::prop_kind::forward_inference, data,
                                                         eps, flags);
      const dnnl::batch_normalization_forward::primitive_desc pd(desc, impl_->engine);
      return CachedPrimitive{dnnl::batch_normalization_forward(pd), implementation_name(pd)};
    });
    const auto& engine = impl_->engine;
    impl_->execute(norm.primitive,
                   {{DNNL_ARG_SRC, dnnl_memory(engine, data, x)},
                    {DNNL_ARG_MEAN, dnnl_memory(engine, dnnl_flat_desc(mean), mean)},
                    {DNNL_ARG_VARIANCE, dnnl_memory(engine, dnnl_flat_desc(variance), variance)},
                    {DNNL_ARG_SCALE, dnnl_memory(engine, dnnl_flat_desc(gamma), gamma)},
                    {DNNL_ARG_SHIFT, dnnl_memory(engine, dnnl_flat_desc(beta), beta)},
                    {DNNL_ARG_DST, dnnl_memory(engine, data, y)}});
  });
}

namespace {

std::vector<float> channel_rstd(const Tensor& variance, float eps) {
  const auto var = variance.f32();
  std::vector<float> rstd(var.size());
  for (std::size_t c = 0; c < var.size(); ++c)
    rstd[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[c]) + eps));
  return rstd;
}

}  // namespace

namespace {

template <class T>
void batch_norm_backward_statistics_kernel(const BatchNormBackwardStatistics& args, Tensor& dgamma,
                                           Tensor& dbeta) {
  const auto& x = args.x;
  const auto& y = args.y;
  const auto& dy = args.dy;
  const auto& mean = args.mean;
  const auto& variance = args.variance;
  const auto& eps = args.eps;
  const auto& fuse_relu = args.fuse_relu;
  const NhwcExtent extent(x);
  const std::int64_t channels = extent.channels;
  const std::vector<float> rstd = channel_rstd(variance, eps);
  const T* src = x.data<T>();
  const T* out = fuse_relu ? y.data<T>() : nullptr;
  const T* grad = dy.data<T>();
  const float* centre = mean.data<float>();
  with_relu_choice(fuse_relu, [&](auto fuse) {
    // sum(dy' * xhat) in [0, C), sum(dy') in [C, 2C).
    const std::vector<double> sums = sum_over_pixels(
        1, extent.rows(), 2 * channels, [&](std::int64_t, std::int64_t row, double* totals) {
          for (std::int64_t c = 0; c < channels; ++c) {
            const std::int64_t i = row * channels + c;
            const double d = masked_gradient<decltype(fuse)::value>(out, grad, i);
            totals[c] += d * ((to_float(src[i]) - centre[c]) * rstd[c]);
            totals[channels + c] += d;
          }
        });
    for (std::int64_t c = 0; c < channels; ++c) {
      dgamma.data<float>()[c] = static_cast<float>(sums[c]);
      dbeta.data<float>()[c] = static_cast<float>(sums[channels + c]);
    }
  });
}

}  // namespace

void CpuBackend::do_batch_norm_backward_statistics(const BatchNormBackwardStatistics& args,
                                                   Tensor& dgamma, Tensor& dbeta) {
  with_element_type(args.x.dtype(), [&](auto element) {
    batch_norm_backward_statistics_kernel<decltype(element)>(args, dgamma, dbeta);
  });
}

namespace {

template <class T>
void batch_norm_backward_data_kernel(const BatchNormBackwardData& args, Tensor& dx) {
  const auto& x = args.x;
  const auto& y = args.y;
  const auto& dy = args.dy;
  const auto& mean = args.mean;
  const auto& variance = args.variance;
  const auto& gamma = args.gamma;
  const auto& dgamma = args.dgamma;
  const auto& dbeta = args.dbeta;
  const auto& eps = args.eps;
  const auto& fuse_relu = args.fuse_relu;
  const auto& count = args.count;
  const NhwcExtent extent(x);
  const std::int64_t channels = extent.channels;
  const std::vector<float> rstd = channel_rstd(variance, eps);
  // dx = gamma * rstd * (dy' - dbeta / count - xhat * dgamma / count), per channel as
  // dx = dy_scale * dy' + centred_scale * (x - mean) + offset.
  std::vector<float> dy_scale(channels), centred_scale(channels), offset(channels);
  for (std::int64_t c = 0; c < channels; ++c) {
    const double g = static_cast<double>(gamma.data<float>()[c]) * rstd[c];
    dy_scale[c] = static_cast<float>(g);
    centred_scale[c] = static_cast<float>(-g * dgamma.data<float>()[c] / count * rstd[c]);
    offset[c] = static_cast<float>(-g * dbeta.data<float>()[c] / count);
  }
  const T* src = x.data<T>();
  const T* out = fuse_relu ? y.data<T>() : nullptr;
  const T* grad = dy.data<T>();
  const float* centre = mean.data<float>();
  T* grad_src = dx.data<T>();
  with_relu_choice(fuse_relu, [&](auto fuse) {
#pragma omp parallel for schedule(static)
    for (std::int64_t row = 0; row < extent.rows(); ++row)
      for (std::int64_t c = 0; c < channels; ++c) {
        const std::int64_t i = row * channels + c;
        grad_src[i] =
            from_float<T>(dy_scale[c] * masked_gradient<decltype(fuse)::value>(out, grad, i) +
                          centred_scale[c] * (to_float(src[i]) - centre[c]) + offset[c]);
      }
  });
}

}  // namespace

void CpuBackend::do_batch_norm_backward_data(const BatchNormBackwardData& args, Tensor& dx) {
  with_element_type(args.x.dtype(), [&](auto element) {
    batch_norm_backward_data_kernel<decltype(element)>(args, dx);
  });
}

}  // namespace hardy::core
