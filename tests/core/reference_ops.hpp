#pragma once
// Naive reference implementations of the backend's forward operations: straight loops over the
// textbook formulas, accumulating in double, written for clarity rather than speed. They read
// and write through offset4 (offset5 for volumes), so they work for any activation layout.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/compute/tensor.hpp"

namespace hardy::test_reference {

using core::ConvGeometry;
using core::Layout;
using core::Tensor;

inline float& at(Tensor& t, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
  return t.data<float>()[core::offset4(t.layout(), t.c(), t.h(), t.w(), n, c, h, w)];
}

inline float at(const Tensor& t, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
  return t.data<float>()[core::offset4(t.layout(), t.c(), t.h(), t.w(), n, c, h, w)];
}

// Weights (O, I, KH, KW) stored row-major (a transposed convolution's (I, O, KH, KW) alike).
inline float weight_at(const Tensor& weight, std::int64_t o, std::int64_t i, std::int64_t kh,
                       std::int64_t kw) {
  return weight.data<float>()[((o * weight.dim(1) + i) * weight.dim(2) + kh) * weight.dim(3) + kw];
}

// Weights (O, I / groups, KH, KW): output channel o reads the input channels of its group.
inline Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor* bias,
                     const ConvGeometry& g) {
  const std::int64_t kernel_h = weight.dim(2), kernel_w = weight.dim(3);
  const std::int64_t group_inputs = weight.dim(1), group_outputs = weight.dim(0) / g.groups;
  const std::int64_t out_h =
      core::conv_output_size(static_cast<int>(x.h()), static_cast<int>(kernel_h), g);
  const std::int64_t out_w =
      core::conv_output_size(static_cast<int>(x.w()), static_cast<int>(kernel_w), g);
  Tensor y = Tensor::host({x.n(), weight.dim(0), out_h, out_w});
  for (std::int64_t n = 0; n < x.n(); ++n)
    for (std::int64_t o = 0; o < weight.dim(0); ++o)
      for (std::int64_t oh = 0; oh < out_h; ++oh)
        for (std::int64_t ow = 0; ow < out_w; ++ow) {
          double sum = bias != nullptr ? bias->data<float>()[o] : 0.0;
          const std::int64_t first_input = o / group_outputs * group_inputs;
          for (std::int64_t i = 0; i < group_inputs; ++i)
            for (std::int64_t kh = 0; kh < kernel_h; ++kh)
              for (std::int64_t kw = 0; kw < kernel_w; ++kw) {
                const std::int64_t ih = oh * g.stride - g.padding + kh * g.dilation;
                const std::int64_t iw = ow * g.stride - g.padding + kw * g.dilation;
                if (ih < 0 || ih >= x.h() || iw < 0 || iw >= x.w()) continue;
                sum += static_cast<double>(at(x, n, first_input + i, ih, iw)) *
                       weight_at(weight, o, i, kh, kw);
              }
          at(y, n, o, oh, ow) = static_cast<float>(sum);
        }
  return y;
}

// PyTorch's ConvTranspose2d: weight (I, O, KH, KW); each input pixel scatters its kernel into
// the (out_h, out_w) output, whose size picks the output padding.
inline Tensor conv2d_transpose(const Tensor& x, const Tensor& weight, const Tensor* bias,
                               const ConvGeometry& g, std::int64_t out_h, std::int64_t out_w) {
  const std::int64_t outputs = weight.dim(1), kernel_h = weight.dim(2), kernel_w = weight.dim(3);
  std::vector<double> sums(static_cast<std::size_t>(x.n() * outputs * out_h * out_w), 0.0);
  const auto sum_at = [&](std::int64_t n, std::int64_t o, std::int64_t h,
                          std::int64_t w) -> double& {
    return sums[static_cast<std::size_t>(((n * outputs + o) * out_h + h) * out_w + w)];
  };
  for (std::int64_t n = 0; n < x.n(); ++n)
    for (std::int64_t i = 0; i < x.c(); ++i)
      for (std::int64_t ih = 0; ih < x.h(); ++ih)
        for (std::int64_t iw = 0; iw < x.w(); ++iw)
          for (std::int64_t o = 0; o < outputs; ++o)
            for (std::int64_t kh = 0; kh < kernel_h; ++kh)
              for (std::int64_t kw = 0; kw < kernel_w; ++kw) {
                const std::int64_t oh = ih * g.stride - g.padding + kh * g.dilation;
                const std::int64_t ow = iw * g.stride - g.padding + kw * g.dilation;
                if (oh < 0 || oh >= out_h || ow < 0 || ow >= out_w) continue;
                sum_at(n, o, oh, ow) +=
                    static_cast<double>(at(x, n, i, ih, iw)) * weight_at(weight, i, o, kh, kw);
              }
  Tensor y = Tensor::host({x.n(), outputs, out_h, out_w});
  for (std::int64_t n = 0; n < x.n(); ++n)
    for (std::int64_t o = 0; o < outputs; ++o)
      for (std::int64_t h = 0; h < out_h; ++h)
        for (std::int64_t w = 0; w < out_w; ++w)
          at(y, n, o, h, w) = static_cast<float>(sum_at(n, o, h, w) +
                                                 (bias != nullptr ? bias->data<float>()[o] : 0.0));
  return y;
}

struct GroupNormResult {
  Tensor y;
  std::vector<double> mean, rstd;  // (N, groups) row-major
};

inline GroupNormResult group_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  int groups, float eps, bool relu) {
  GroupNormResult result{Tensor::host(x.dims()), {}, {}};
  const std::int64_t group_channels = x.c() / groups;
  for (std::int64_t n = 0; n < x.n(); ++n)
    for (std::int64_t g = 0; g < groups; ++g) {
      double sum = 0.0, count = 0.0;
      for (std::int64_t c = g * group_channels; c < (g + 1) * group_channels; ++c)
        for (std::int64_t h = 0; h < x.h(); ++h)
          for (std::int64_t w = 0; w < x.w(); ++w, count += 1.0) sum += at(x, n, c, h, w);
      const double mean = sum / count;
      double squares = 0.0;
      for (std::int64_t c = g * group_channels; c < (g + 1) * group_channels; ++c)
        for (std::int64_t h = 0; h < x.h(); ++h)
          for (std::int64_t w = 0; w < x.w(); ++w)
            squares += (at(x, n, c, h, w) - mean) * (at(x, n, c, h, w) - mean);
      const double rstd = 1.0 / std::sqrt(squares / count + eps);
      result.mean.push_back(mean);
      result.rstd.push_back(rstd);
      for (std::int64_t c = g * group_channels; c < (g + 1) * group_channels; ++c)
        for (std::int64_t h = 0; h < x.h(); ++h)
          for (std::int64_t w = 0; w < x.w(); ++w) {
            const double value =
                (at(x, n, c, h, w) - mean) * rstd * gamma.data<float>()[c] + beta.data<float>()[c];
            at(result.y, n, c, h, w) = static_cast<float>(relu ? std::max(value, 0.0) : value);
          }
    }
  return result;
}

inline Tensor batch_norm(const Tensor& x, const Tensor& mean, const Tensor& variance,
                         const Tensor& gamma, const Tensor& beta, float eps, bool relu) {
  Tensor y = Tensor::host(x.dims());
  for (std::int64_t n = 0; n < x.n(); ++n)
    for (std::int64_t c = 0; c < x.c(); ++c)
      for (std::int64_t h = 0; h < x.h(); ++h)
        for (std::int64_t w = 0; w < x.w(); ++w) {
          const double value = (at(x, n, c, h, w) - static_cast<double>(mean.data<float>()[c])) /
                                   std::sqrt(static_cast<double>(variance.data<float>()[c]) + eps) *
                                   gamma.data<float>()[c] +
                               beta.data<float>()[c];
          at(y, n, c, h, w) = static_cast<float>(relu ? std::max(value, 0.0) : value);
        }
  return y;
}

// PyTorch's align_corners=False source index along one axis: the two neighbours and the weight
// of the second.
struct LinearTap {
  std::int64_t first, second;
  double weight;
};

inline LinearTap linear_tap(std::int64_t out, std::int64_t in_size, std::int64_t out_size) {
  const double source = std::max(
      (static_cast<double>(out) + 0.5) * static_cast<double>(in_size) / out_size - 0.5, 0.0);
  const auto first = std::min(static_cast<std::int64_t>(source), in_size - 1);
  return {first, std::min(first + 1, in_size - 1), source - static_cast<double>(first)};
}

inline Tensor upsample_bilinear(const Tensor& x, std::int64_t out_h, std::int64_t out_w) {
  Tensor y = Tensor::host({x.n(), x.c(), out_h, out_w});
  for (std::int64_t n = 0; n < x.n(); ++n)
    for (std::int64_t c = 0; c < x.c(); ++c)
      for (std::int64_t oh = 0; oh < out_h; ++oh)
        for (std::int64_t ow = 0; ow < out_w; ++ow) {
          const LinearTap row = linear_tap(oh, x.h(), out_h);
          const LinearTap col = linear_tap(ow, x.w(), out_w);
          const double top = (1 - col.weight) * at(x, n, c, row.first, col.first) +
                             col.weight * at(x, n, c, row.first, col.second);
          const double bottom = (1 - col.weight) * at(x, n, c, row.second, col.first) +
                                col.weight * at(x, n, c, row.second, col.second);
          at(y, n, c, oh, ow) = static_cast<float>((1 - row.weight) * top + row.weight * bottom);
        }
  return y;
}

inline Tensor global_avg_pool(const Tensor& x) {
  Tensor y = Tensor::host({x.n(), x.c(), 1, 1});
  for (std::int64_t n = 0; n < x.n(); ++n)
    for (std::int64_t c = 0; c < x.c(); ++c) {
      double sum = 0.0;
      for (std::int64_t h = 0; h < x.h(); ++h)
        for (std::int64_t w = 0; w < x.w(); ++w) sum += at(x, n, c, h, w);
      at(y, n, c, 0, 0) = static_cast<float>(sum / static_cast<double>(x.h() * x.w()));
    }
  return y;
}

// ---- volumes (N, C, D, H, W) and the layers of a regression network ----

inline float& at5(Tensor& t, std::int64_t n, std::int64_t c, std::int64_t d, std::int64_t h,
                  std::int64_t w) {
  return t.data<float>()[core::offset5(t.layout(), t.dim(1), t.dim(2), t.dim(3), t.dim(4), n, c, d,
                                       h, w)];
}

inline float at5(const Tensor& t, std::int64_t n, std::int64_t c, std::int64_t d, std::int64_t h,
                 std::int64_t w) {
  return t.data<float>()[core::offset5(t.layout(), t.dim(1), t.dim(2), t.dim(3), t.dim(4), n, c, d,
                                       h, w)];
}

// Weights (O, I, KD, KH, KW) stored row-major.
inline float weight_at5(const Tensor& weight, std::int64_t o, std::int64_t i, std::int64_t kd,
                        std::int64_t kh, std::int64_t kw) {
  return weight.data<float>()
      [(((o * weight.dim(1) + i) * weight.dim(2) + kd) * weight.dim(3) + kh) * weight.dim(4) + kw];
}

// A new (N, C, D, H, W) tensor in `layout` with value(n, c, d, h, w) at every element.
template <class Value>
Tensor volume_of(const std::vector<std::int64_t>& dims, Layout layout, Value value) {
  Tensor y = Tensor::host(dims, core::DType::f32, layout);
  for (std::int64_t n = 0; n < dims[0]; ++n)
    for (std::int64_t c = 0; c < dims[1]; ++c)
      for (std::int64_t d = 0; d < dims[2]; ++d)
        for (std::int64_t h = 0; h < dims[3]; ++h)
          for (std::int64_t w = 0; w < dims[4]; ++w)
            at5(y, n, c, d, h, w) = static_cast<float>(value(n, c, d, h, w));
  return y;
}

// Whether (d, h, w) lies inside a volume's (N, C, D, H, W) extent (not in its padding).
inline bool inside5(const Tensor& x, std::int64_t d, std::int64_t h, std::int64_t w) {
  return d >= 0 && d < x.dim(2) && h >= 0 && h < x.dim(3) && w >= 0 && w < x.dim(4);
}

// PyTorch's Conv3d (groups 1): y in x's layout.
inline Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor* bias,
                     const ConvGeometry& g) {
  std::vector<std::int64_t> out{x.dim(0), weight.dim(0)};
  for (std::size_t i = 2; i < 5; ++i)
    out.push_back(
        core::conv_output_size(static_cast<int>(x.dim(i)), static_cast<int>(weight.dim(i)), g));
  return volume_of(out, x.layout(), [&](auto n, auto o, auto od, auto oh, auto ow) {
    double sum = bias != nullptr ? bias->data<float>()[o] : 0.0;
    for (std::int64_t i = 0; i < x.dim(1); ++i)
      for (std::int64_t kd = 0; kd < weight.dim(2); ++kd)
        for (std::int64_t kh = 0; kh < weight.dim(3); ++kh)
          for (std::int64_t kw = 0; kw < weight.dim(4); ++kw) {
            const std::int64_t id = od * g.stride - g.padding + kd * g.dilation;
            const std::int64_t ih = oh * g.stride - g.padding + kh * g.dilation;
            const std::int64_t iw = ow * g.stride - g.padding + kw * g.dilation;
            if (inside5(x, id, ih, iw))
              sum += static_cast<double>(at5(x, n, i, id, ih, iw)) *
                     weight_at5(weight, o, i, kd, kh, kw);
          }
    return sum;
  });
}

// PyTorch's MaxPool3d: padding is -infinity, the first maximum of a window wins.
inline Tensor max_pool3d(const Tensor& x, const core::PoolGeometry& g) {
  std::vector<std::int64_t> out{x.dim(0), x.dim(1)};
  for (std::size_t i = 2; i < 5; ++i)
    out.push_back(core::pool_output_size(static_cast<int>(x.dim(i)), g));
  return volume_of(out, x.layout(), [&](auto n, auto c, auto od, auto oh, auto ow) {
    double best = -INFINITY;
    for (std::int64_t kd = 0; kd < g.kernel; ++kd)
      for (std::int64_t kh = 0; kh < g.kernel; ++kh)
        for (std::int64_t kw = 0; kw < g.kernel; ++kw) {
          const std::int64_t id = od * g.stride - g.padding + kd;
          const std::int64_t ih = oh * g.stride - g.padding + kh;
          const std::int64_t iw = ow * g.stride - g.padding + kw;
          if (inside5(x, id, ih, iw))
            best = std::max(best, static_cast<double>(at5(x, n, c, id, ih, iw)));
        }
    return best;
  });
}

// nn.Linear: y (N, O) = x (N, K) weight (O, K)^T + bias.
inline Tensor dense(const Tensor& x, const Tensor& weight, const Tensor* bias) {
  const std::int64_t batch = x.dim(0), inputs = x.dim(1), outputs = weight.dim(0);
  Tensor y = Tensor::host({batch, outputs}, core::DType::f32, Layout::flat);
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t o = 0; o < outputs; ++o) {
      double sum = bias != nullptr ? bias->data<float>()[o] : 0.0;
      for (std::int64_t k = 0; k < inputs; ++k)
        sum += static_cast<double>(x.data<float>()[n * inputs + k]) *
               weight.data<float>()[o * inputs + k];
      y.data<float>()[n * outputs + o] = static_cast<float>(sum);
    }
  return y;
}

// torch.flatten(x, 1) of a volume: (N, C * D * H * W) in logical (C, D, H, W) order.
inline Tensor flatten(const Tensor& x) {
  const std::int64_t features = x.dim(1) * x.dim(2) * x.dim(3) * x.dim(4);
  Tensor y = Tensor::host({x.dim(0), features}, core::DType::f32, Layout::flat);
  std::int64_t i = 0;
  for (std::int64_t n = 0; n < x.dim(0); ++n)
    for (std::int64_t c = 0; c < x.dim(1); ++c)
      for (std::int64_t d = 0; d < x.dim(2); ++d)
        for (std::int64_t h = 0; h < x.dim(3); ++h)
          for (std::int64_t w = 0; w < x.dim(4); ++w) y.data<float>()[i++] = at5(x, n, c, d, h, w);
  return y;
}

}  // namespace hardy::test_reference
