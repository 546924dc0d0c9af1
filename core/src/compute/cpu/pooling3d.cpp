// Volumetric max pooling on NDHWC tensors as plain loops. oneDNN has a pooling primitive, but
// its backward pass needs the forward's workspace, and its choice among tied maxima is its own;
// here both passes take the first maximum of a window in (d, h, w) order, which the CUDA kernels
// and PyTorch take too, so that bf16 inputs (where ties are common) route the gradient alike on
// every backend. The backward pass recomputes each window's maximum from x. f32 or bf16 volumes
// (a maximum is one of its inputs, so bf16 outputs are exact).
#include <algorithm>
#include <cstdint>
#include <limits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "compute/cpu/cpu_backend.hpp"
#include "compute/cpu/element_types.hpp"

namespace hardy::core {

using namespace cpu;  // the backend's internal helpers (element types)

namespace {

// Sizes of one pooling, validated by Backend: x (N, C, D, H, W), y (N, C, OD, OH, OW), NDHWC.
struct PoolShape {
  std::int64_t n, c, d, h, w, od, oh, ow;
  PoolGeometry g;

  PoolShape(const Tensor& x, const Tensor& y, const PoolGeometry& geometry)
      : n(x.dim(0)),
        c(x.dim(1)),
        d(x.dim(2)),
        h(x.dim(3)),
        w(x.dim(4)),
        od(y.dim(2)),
        oh(y.dim(3)),
        ow(y.dim(4)),
        g(geometry) {}

  // Calls visit(pixel) for the input pixels (n * D + id) * H * W + ... of the window of output
  // (n, o_d, o_h, o_w) that lie inside x, in (d, h, w) order.
  template <class Visit>
  void for_window(std::int64_t sample, std::int64_t o_d, std::int64_t o_h, std::int64_t o_w,
                  Visit&& visit) const {
    for (std::int64_t kd = 0; kd < g.kernel; ++kd) {
      const std::int64_t id = o_d * g.stride - g.padding + kd;
      if (id < 0 || id >= d) continue;
      for (std::int64_t kh = 0; kh < g.kernel; ++kh) {
        const std::int64_t ih = o_h * g.stride - g.padding + kh;
        if (ih < 0 || ih >= h) continue;
        for (std::int64_t kw = 0; kw < g.kernel; ++kw) {
          const std::int64_t iw = o_w * g.stride - g.padding + kw;
          if (iw < 0 || iw >= w) continue;
          visit(((sample * d + id) * h + ih) * w + iw);
        }
      }
    }
  }
};

// Channels handled together by one backward task: one AVX-512 vector of floats.
constexpr std::int64_t channel_block = 16;

template <class T>
void max_pool3d_forward_kernel(const Tensor& x, const PoolGeometry& geometry, Tensor& y) {
  const PoolShape s(x, y, geometry);
  const T* src = x.data<T>();
  T* dst = y.data<T>();
  const std::int64_t channels = s.c;
  const T lowest = from_float<T>(-std::numeric_limits<float>::infinity());
#pragma omp parallel for collapse(3) schedule(static)
  for (std::int64_t n = 0; n < s.n; ++n)
    for (std::int64_t o_d = 0; o_d < s.od; ++o_d)
      for (std::int64_t o_h = 0; o_h < s.oh; ++o_h)
        for (std::int64_t o_w = 0; o_w < s.ow; ++o_w) {
          T* out = dst + (((n * s.od + o_d) * s.oh + o_h) * s.ow + o_w) * channels;
          std::fill(out, out + channels, lowest);
          s.for_window(n, o_d, o_h, o_w, [&](std::int64_t pixel) {
            const T* in = src + pixel * channels;
            // Strictly greater: the first maximum stays.
            for (std::int64_t c = 0; c < channels; ++c)
              out[c] = to_float(in[c]) > to_float(out[c]) ? in[c] : out[c];
          });
        }
}

// The passes of the tiled backward below over one block of channels, as functions of restrict
// pointers: that is what lets the compiler vectorize them (inside the window loop it could not
// prove the pointers apart, and gathered element by element).
constexpr std::int64_t tiled_channel_block = 64;

template <class T>
inline void keep_larger(const T* __restrict in, std::int32_t k, std::int64_t width,
                        float* __restrict best, std::int32_t* __restrict chosen) {
  // Widened first, in a loop of its own: GCC 12 vectorizes no loop that mixes 16-bit loads with
  // the 32-bit selects below.
  float values[tiled_channel_block];
  for (std::int64_t c = 0; c < width; ++c) values[c] = to_float(in[c]);
  for (std::int64_t c = 0; c < width; ++c) {
    const float value = values[c];
    const bool larger = value > best[c];
    best[c] = larger ? value : best[c];
    chosen[c] = larger ? k : chosen[c];
  }
}

template <class T>
inline void route_gradient(const T* __restrict g, const std::int32_t* __restrict chosen,
                           std::int32_t k, std::int64_t width, T zero, T* __restrict out) {
#if defined(__AVX512F__)
  // dx is written whole and read next by the convolution's backward passes, never by this pass:
  // whole cache lines go straight to memory (non-temporal stores), without first reading each
  // line in for ownership. At CosmoFlow's 128^3 that is half of this pass's 537 MB of traffic.
  constexpr std::int64_t line = 64;
  if (width * std::int64_t{sizeof(T)} % line == 0 &&
      reinterpret_cast<std::uintptr_t>(out) % line == 0) {
    alignas(line) T routed[tiled_channel_block];
    for (std::int64_t c = 0; c < width; ++c) routed[c] = chosen[c] == k ? g[c] : zero;
    for (std::int64_t b = 0; b < width * std::int64_t{sizeof(T)}; b += line)
      _mm512_stream_si512(reinterpret_cast<__m512i*>(reinterpret_cast<char*>(out) + b),
                          _mm512_load_si512(reinterpret_cast<const char*>(routed) + b));
    return;
  }
#endif
  for (std::int64_t c = 0; c < width; ++c) out[c] = chosen[c] == k ? g[c] : zero;
}

// Windows of 2x2x2 that tile x exactly (stride 2, no padding, even sizes: CosmoFlow's pooling):
// every input voxel lies in one window, so dx is written once, in one pass over the outputs,
// without the general path's zero fill and scatter; the channel loop vectorizes. The same
// choice among tied maxima (the first in (d, h, w) order, none when no value exceeds -infinity).
template <class T>
bool max_pool3d_backward_tiled(const PoolShape& s, const T* src, const T* grad, T* grad_src) {
  constexpr std::int64_t kernel = 2, window = kernel * kernel * kernel;
  if (s.g.kernel != kernel || s.g.stride != kernel || s.g.padding != 0 || s.d != s.od * kernel ||
      s.h != s.oh * kernel || s.w != s.ow * kernel)
    return false;
  const std::int64_t channels = s.c;
  const T zero = from_float<T>(0.0f);
#pragma omp parallel
  {
#pragma omp for collapse(3) schedule(static)
    for (std::int64_t n = 0; n < s.n; ++n)
      for (std::int64_t o_d = 0; o_d < s.od; ++o_d)
        for (std::int64_t o_h = 0; o_h < s.oh; ++o_h)
          for (std::int64_t o_w = 0; o_w < s.ow; ++o_w) {
            std::int64_t at[window];
            int i = 0;
            s.for_window(n, o_d, o_h, o_w, [&](std::int64_t pixel) { at[i++] = pixel * channels; });
            const T* g = grad + (((n * s.od + o_d) * s.oh + o_h) * s.ow + o_w) * channels;
            // Channels in blocks, the channel loop innermost in every pass, so that each pass is
            // one vectorized sweep of selects.
            constexpr std::int64_t block = tiled_channel_block;
            for (std::int64_t first = 0; first < channels; first += block) {
              const std::int64_t width = std::min(block, channels - first);
              float best[block];
              std::int32_t chosen[block];
              for (std::int64_t c = 0; c < width; ++c) {
                best[c] = -std::numeric_limits<float>::infinity();
                chosen[c] = -1;
              }
              for (std::int32_t k = 0; k < window; ++k)
                keep_larger(src + at[k] + first, k, width, best, chosen);
              for (std::int32_t k = 0; k < window; ++k)
                route_gradient(g + first, chosen, k, width, zero, grad_src + at[k] + first);
            }
          }
#if defined(__AVX512F__)
    _mm_sfence();  // this thread's non-temporal stores are visible before the barrier below
#endif
  }
  return true;
}

// Each task owns one sample's block of channels, so windows that overlap (stride < kernel) add
// into dx from one thread, in output order: the result does not depend on the thread count.
template <class T>
void max_pool3d_backward_kernel(const Tensor& x, const Tensor& dy, const PoolGeometry& geometry,
                                Tensor& dx) {
  const PoolShape s(x, dy, geometry);
  const T* src = x.data<T>();
  const T* grad = dy.data<T>();
  T* grad_src = dx.data<T>();
  if (max_pool3d_backward_tiled(s, src, grad, grad_src)) return;
  const std::int64_t channels = s.c, pixels = s.d * s.h * s.w;
  const std::int64_t blocks = (channels + channel_block - 1) / channel_block;
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t n = 0; n < s.n; ++n)
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t first = b * channel_block;
      const std::int64_t width = std::min(channel_block, channels - first);
      for (std::int64_t p = 0; p < pixels; ++p)
        std::fill_n(grad_src + (n * pixels + p) * channels + first, width, from_float<T>(0.0f));
      for (std::int64_t o_d = 0; o_d < s.od; ++o_d)
        for (std::int64_t o_h = 0; o_h < s.oh; ++o_h)
          for (std::int64_t o_w = 0; o_w < s.ow; ++o_w) {
            float best[channel_block];
            std::int64_t where[channel_block];
            std::fill_n(best, width, -std::numeric_limits<float>::infinity());
            std::fill_n(where, width, std::int64_t{-1});
            s.for_window(n, o_d, o_h, o_w, [&](std::int64_t pixel) {
              const T* in = src + pixel * channels + first;
              for (std::int64_t j = 0; j < width; ++j)
                if (to_float(in[j]) > best[j]) {
                  best[j] = to_float(in[j]);
                  where[j] = pixel;
                }
            });
            const T* g = grad + (((n * s.od + o_d) * s.oh + o_h) * s.ow + o_w) * channels + first;
            for (std::int64_t j = 0; j < width; ++j)
              if (where[j] >= 0) {
                T& target = grad_src[where[j] * channels + first + j];
                target = from_float<T>(to_float(target) + to_float(g[j]));
              }
          }
    }
}

}  // namespace

void CpuBackend::do_max_pool3d_forward(const Tensor& x, const PoolGeometry& geometry, Tensor& y) {
  with_element_type(x.dtype(), [&](auto element) {
    max_pool3d_forward_kernel<decltype(element)>(x, geometry, y);
  });
}

void CpuBackend::do_max_pool3d_backward(const Tensor& x, const Tensor& dy,
                                        const PoolGeometry& geometry, Tensor& dx) {
  with_element_type(x.dtype(), [&](auto element) {
    max_pool3d_backward_kernel<decltype(element)>(x, dy, geometry, dx);
  });
}

}  // namespace hardy::core
