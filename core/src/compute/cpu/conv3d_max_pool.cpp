// A 3-D convolution and the max pooling that alone reads its output (CosmoFlow's blocks), in one
// operation that never keeps the convolution's output whole. At CosmoFlow's published 128^3 the
// first block's output is 537 MB in bf16: computed whole it goes out to memory once and comes
// back once for the pooling, and its gradient does the same in the backward pass; these are
// memory-bound passes on a CPU (the pooling alone took 30 ms forward and 56 ms backward of a
// 1 s step on two cores). Here the output is computed a slab at a time (a few planes of one
// sample, or whole samples where they are small), small enough to stay in cache, and pooled
// at once; only the pooled values and each window's choice of maximum (a byte) are kept. The
// backward pass routes dy through those bytes into a slab of the convolution's gradient and
// runs the weight gradient on that slab, accumulating over slabs in a fixed order (the result
// does not depend on the thread count). Where x's gradient is wanted too, the convolution's
// gradient is built whole instead (from the bytes, without reading the convolution's output)
// and the usual backward passes run on it.
//
// The convolution of a slab is oneDNN's, with the slab's own depth padding (zero inside the
// volume, the convolution's at its faces), so each output value is the same sum as the whole
// convolution's; the pooling takes the first maximum of a window in (d, h, w) order, as
// max_pool3d does on every backend.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <vector>

#include "compute/cpu/dnnl_support.hpp"
#include "compute/cpu/element_types.hpp"

namespace hardy::core {

using namespace cpu;  // the backend's internal helpers

namespace {

using dnnl::memory;

// A slab of the convolution's output is at most about this large (or one pooling window's
// planes of one sample, when those alone are larger): it stays in the last-level cache between
// the pass that writes it and the passes that read it. Measured on a Zen 5 with 2 cores (32 MiB
// of L3) at CosmoFlow's 128^3 in bf16, with the scratch on huge pages (HostBuffer): slabs of 2,
// 4, 6, 8 and 16 MiB all gave steps of 0.99 to 1.04 s, within the machine's noise. (On 4 KiB
// pages, before HostBuffer aligned large buffers, 4 MiB slabs routed the gradient in 41-46 ms
// against 16-18 ms for 6 MiB.)
constexpr std::size_t kSlabBytes = std::size_t{6} << 20;
constexpr std::uint8_t kNoMaximum = 255;

// The sizes of one fused operation, from checked operands.
struct FusedShape {
  std::int64_t n, in_channels, d, h, w;   // x
  std::int64_t out_channels, kd, kh, kw;  // weight
  std::int64_t od, oh, ow;                // the convolution's output
  std::int64_t pd, ph, pw;                // the pooled output
  std::int64_t pool;                      // the window's edge (= its stride)
  std::int64_t padding;
  DType dtype;

  explicit FusedShape(const Conv3dMaxPool& op)
      : n(op.x.dim(0)),
        in_channels(op.x.dim(1)),
        d(op.x.dim(2)),
        h(op.x.dim(3)),
        w(op.x.dim(4)),
        out_channels(op.weight.dim(0)),
        kd(op.weight.dim(2)),
        kh(op.weight.dim(3)),
        kw(op.weight.dim(4)),
        od(d + 2 * op.convolution.padding - kd + 1),
        oh(h + 2 * op.convolution.padding - kh + 1),
        ow(w + 2 * op.convolution.padding - kw + 1),
        pd(od / op.pooling.kernel),
        ph(oh / op.pooling.kernel),
        pw(ow / op.pooling.kernel),
        pool(op.pooling.kernel),
        padding(op.convolution.padding),
        dtype(op.x.dtype()) {}

  // A 'same' convolution (odd kernel, padding half of it): output plane i is centred on input
  // plane i, so x's gradient can be computed a slab of planes at a time from the slab's
  // convolution gradient and `padding` planes either side of it.
  bool same_size() const { return kd == kh && kh == kw && kd == 2 * padding + 1; }
  std::int64_t element_bytes() const { return static_cast<std::int64_t>(dtype_size(dtype)); }
  std::int64_t output_plane_elements() const { return oh * ow * out_channels; }
  std::int64_t input_plane_elements() const { return h * w * in_channels; }
};

// One slab: `samples` samples from `first_sample`, output planes [first_plane, first_plane +
// planes). Either one sample's planes (starting on a window's first plane; all but the last
// slab a whole number of windows) or whole samples (every output plane).
struct Slab {
  std::int64_t first_sample, samples, first_plane, planes;
};

std::vector<Slab> plan_slabs(const FusedShape& s) {
  const std::int64_t plane_bytes = s.output_plane_elements() * s.element_bytes();
  const auto budget = static_cast<std::int64_t>(kSlabBytes);
  std::vector<Slab> slabs;
  if (s.od * plane_bytes <= budget) {
    // Whole samples, as many as fit and divide the batch (one primitive shape for all).
    std::int64_t samples = std::max<std::int64_t>(1, budget / (s.od * plane_bytes));
    while (s.n % samples != 0) --samples;
    for (std::int64_t first = 0; first < s.n; first += samples)
      slabs.push_back({first, samples, 0, s.od});
    return slabs;
  }
  // Every output plane (those past the last whole window too: their gradient is zero, but x's
  // gradient near them is not), in slabs that start on a window's first plane.
  const std::int64_t planes = s.pool * std::max<std::int64_t>(1, budget / (plane_bytes * s.pool));
  for (std::int64_t sample = 0; sample < s.n; ++sample)
    for (std::int64_t first = 0; first < s.od; first += planes)
      slabs.push_back({sample, 1, first, std::min(planes, s.od - first)});
  return slabs;
}

// How a slab's convolution maps planes: `samples` samples of `source_planes` planes of x (or
// dx) and `destination_planes` planes of the convolution's output (or its gradient), related by
// this depth padding (the convolution's at the volume's faces, what lies outside the slab
// elsewhere).
struct SlabGeometry {
  std::int64_t samples, source_planes, destination_planes, padding_front, padding_back;
  std::int64_t first_source_plane;  // in x
};

// The forward pass and the weight gradient of a slab: its output planes from the input planes
// they read.
SlabGeometry convolution_geometry(const FusedShape& s, const Slab& slab) {
  const std::int64_t wanted_first = slab.first_plane - s.padding;
  const std::int64_t wanted_end = slab.first_plane + slab.planes - s.padding + s.kd - 1;
  const std::int64_t first = std::max<std::int64_t>(0, wanted_first);
  const std::int64_t end = std::min(s.d, wanted_end);
  return {slab.samples, end - first, slab.planes, first - wanted_first, wanted_end - end, first};
}

// The convolution-gradient planes a slab's backward passes read: its own, and for x's gradient
// (of a 'same' convolution) `padding` more on either side inside the volume.
Slab routed_planes(const FusedShape& s, const Slab& slab, bool input_gradient) {
  const std::int64_t halo = input_gradient ? s.padding : 0;
  const std::int64_t first = std::max<std::int64_t>(0, slab.first_plane - halo);
  const std::int64_t end = std::min(s.od, slab.first_plane + slab.planes + halo);
  return {slab.first_sample, slab.samples, first, end - first};
}

// x's gradient over a slab's planes (a 'same' convolution: input plane i is output plane i)
// from the routed gradient planes: the forward relation between them, as oneDNN states it.
SlabGeometry input_gradient_geometry(const FusedShape& s, const Slab& slab, const Slab& routed) {
  const std::int64_t front = s.padding + slab.first_plane - routed.first_plane;
  const std::int64_t back = routed.planes - slab.planes - front + s.kd - 1;
  return {slab.samples, slab.planes, routed.planes, front, back, slab.first_plane};
}

enum class SlabPass { forward, backward_weights, backward_data };

// oneDNN's descriptors of a slab's convolution: the slab's activations (NDHWC, contiguous
// because a slab is whole planes of consecutive samples) and the convolution's weights.
struct SlabProblem {
  memory::desc source, destination, user_weights, bias;
  memory::dims strides{1, 1, 1}, dilation{0, 0, 0}, padding, padding_back;
  memory::data_type activation_type;
  PrimitiveKey key;
};

SlabProblem slab_problem(SlabPass pass, const Conv3dMaxPool& op, const FusedShape& s,
                         const SlabGeometry& g) {
  SlabProblem p;
  p.activation_type = dnnl_data_type(s.dtype);
  p.source = memory::desc({g.samples, s.in_channels, g.source_planes, s.h, s.w}, p.activation_type,
                          memory::format_tag::ndhwc);
  p.destination = memory::desc({g.samples, s.out_channels, g.destination_planes, s.oh, s.ow},
                               p.activation_type, memory::format_tag::ndhwc);
  p.user_weights = dnnl_desc(op.weight);
  p.bias = memory::desc({s.out_channels}, memory::data_type::f32, memory::format_tag::a);
  p.padding = {g.padding_front, s.padding, s.padding};
  p.padding_back = {g.padding_back, s.padding, s.padding};
  const PrimitiveKind kind = pass == SlabPass::forward ? PrimitiveKind::conv3d_slab_forward
                             : pass == SlabPass::backward_weights
                                 ? PrimitiveKind::conv3d_slab_backward_weights
                                 : PrimitiveKind::conv3d_slab_backward_data;
  p.key.add(static_cast<std::int64_t>(kind))
      .add(static_cast<std::int64_t>(s.dtype))
      .add(p.source.dims())
      .add(p.destination.dims())
      .add(op.weight.dims())
      .add(op.bias != nullptr)
      .add(s.padding)
      .add(g.padding_front)
      .add(g.padding_back);
  return p;
}

dnnl::convolution_forward::primitive_desc forward_descriptor(const dnnl::engine& engine,
                                                             const SlabProblem& p, bool with_bias) {
  const memory::desc weights(p.user_weights.dims(), p.activation_type, memory::format_tag::any);
  using Desc = dnnl::convolution_forward::desc;
  const auto training = dnnl::prop_kind::forward_training;
  const auto direct = dnnl::algorithm::convolution_direct;
  return {with_bias ? Desc(training, direct, p.source, weights, p.bias, p.destination, p.strides,
                           p.dilation, p.padding, p.padding_back)
                    : Desc(training, direct, p.source, weights, p.destination, p.strides,
                           p.dilation, p.padding, p.padding_back),
          engine};
}

// (The backend's Impl is a template parameter, as in convolution.cpp: its name is private.)
template <class Impl>
const CachedPrimitive& slab_forward(Impl& impl, const SlabProblem& p, bool with_bias) {
  return impl.cached(p.key, [&] {
    const auto pd = forward_descriptor(impl.engine, p, with_bias);
    CachedPrimitive cached{dnnl::convolution_forward(pd), implementation_name(pd)};
    attach_weights_reorder(impl.engine, cached, p.user_weights, pd.weights_desc(), true);
    return cached;
  });
}

template <class Impl>
const CachedPrimitive& slab_backward_weights(Impl& impl, const SlabProblem& p, bool with_bias) {
  return impl.cached(p.key, [&] {
    const auto hint = forward_descriptor(impl.engine, p, with_bias);
    const memory::desc weights(p.user_weights.dims(), memory::data_type::f32,
                               memory::format_tag::any);
    using Desc = dnnl::convolution_backward_weights::desc;
    const auto direct = dnnl::algorithm::convolution_direct;
    const Desc desc = with_bias ? Desc(direct, p.source, weights, p.bias, p.destination, p.strides,
                                       p.dilation, p.padding, p.padding_back)
                                : Desc(direct, p.source, weights, p.destination, p.strides,
                                       p.dilation, p.padding, p.padding_back);
    const dnnl::convolution_backward_weights::primitive_desc pd(desc, impl.engine, hint);
    CachedPrimitive cached{dnnl::convolution_backward_weights(pd), implementation_name(pd)};
    attach_weights_reorder(impl.engine, cached, p.user_weights, pd.diff_weights_desc(), false);
    return cached;
  });
}

template <class Impl>
const CachedPrimitive& slab_backward_data(Impl& impl, const SlabProblem& p) {
  return impl.cached(p.key, [&] {
    const auto hint = forward_descriptor(impl.engine, p, false);
    const memory::desc weights(p.user_weights.dims(), p.activation_type, memory::format_tag::any);
    const dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, p.source,
                                                     weights, p.destination, p.strides, p.dilation,
                                                     p.padding, p.padding_back);
    const dnnl::convolution_backward_data::primitive_desc pd(desc, impl.engine, hint);
    CachedPrimitive cached{dnnl::convolution_backward_data(pd), implementation_name(pd)};
    attach_weights_reorder(impl.engine, cached, p.user_weights, pd.weights_desc(), true);
    return cached;
  });
}

// The weights a primitive reads, in its layout: converted once per call for each primitive.
class WeightsForReading {
 public:
  WeightsForReading(const dnnl::engine& engine, const Tensor& weight)
      : user_(dnnl_memory(engine, dnnl_desc(weight), weight)) {}
  memory operator()(dnnl::stream& stream, const CachedPrimitive& cached) {
    if (!cached.weights_reorder) return user_;
    if (std::find(ready_.begin(), ready_.end(), &cached) == ready_.end()) {
      weights_for_reading(stream, cached, user_);
      ready_.push_back(&cached);
    }
    return cached.weights_in_primitive_layout;
  }

 private:
  memory user_;
  std::vector<const CachedPrimitive*> ready_;
};

// Where a slab's planes start in a volume of `planes` planes of `plane_elements` each.
template <class T>
T* slab_planes(T* volume, std::int64_t planes, std::int64_t plane_elements,
               std::int64_t first_sample, std::int64_t first_plane) {
  return volume + (first_sample * planes + first_plane) * plane_elements;
}

// The kernels below take 16 channels at a time (one AVX-512 vector of floats), masked at the
// end of the channels. Plain loops over so few channels spend their time on loop overhead: at
// 128^3 the first pooling took 39 ms and the routing 79 ms that way, against about 60 ms for the
// slab's whole convolution. Without AVX-512 the same lane kernels are plain loops.
constexpr std::int64_t kLanes = 16;

// Where the voxels of one pooling window lie in a slab: voxel (a, b, e) of the window (in its
// depth, row and column) at first + a * plane + b * row + e * voxel.
struct WindowStrides {
  std::int64_t plane, row, voxel, edge;
};

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)

// GCC 12's own intrinsics start some results from _mm512_undefined_*() and then warn that they
// may be used uninitialized (a false positive of its headers, not of this code).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

inline __mmask16 lanes_mask(std::int64_t count) {
  return count >= kLanes ? static_cast<__mmask16>(0xffff)
                         : static_cast<__mmask16>((1u << count) - 1);
}

inline __m512 load_floats(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load_floats(const bf16* p, __mmask16 m) {
  const __m256i raw = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline void store_floats(float* p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }
// v holds bf16 values exactly (maxima of bf16 inputs, or -infinity): their upper halves.
inline void store_floats(bf16* p, __mmask16 m, __m512 v) {
  _mm256_mask_storeu_epi16(p, m,
                           _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)));
}

// dy's values where `chosen`, zero elsewhere, stored (16 lanes of T).
inline void store_routed(float* p, __mmask16 m, __mmask16 chosen, const float* g) {
  _mm512_mask_storeu_ps(p, m, _mm512_maskz_loadu_ps(chosen, g));
}
inline void store_routed(bf16* p, __mmask16 m, __mmask16 chosen, const bf16* g) {
  _mm256_mask_storeu_epi16(p, m, _mm256_maskz_loadu_epi16(chosen, g));
}

// The maximum of `width` (at most kLanes) channels over one window whose first voxel's channels
// start at `in`, and the window's voxel that held it.
template <class T>
void pool_lanes(const T* in, const WindowStrides& w, std::int64_t width, T* y,
                std::uint8_t* window) {
  const __mmask16 m = lanes_mask(width);
  __m512 best = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512i which = _mm512_set1_epi32(kNoMaximum);
  std::int32_t index = 0;
  for (std::int64_t a = 0; a < w.edge; ++a)
    for (std::int64_t b = 0; b < w.edge; ++b)
      for (std::int64_t e = 0; e < w.edge; ++e, ++index) {
        const __m512 value = load_floats(in + a * w.plane + b * w.row + e * w.voxel, m);
        // Strictly greater (ordered: a NaN never wins): the first maximum stays.
        const __mmask16 larger = _mm512_mask_cmp_ps_mask(m, value, best, _CMP_GT_OQ);
        best = _mm512_mask_mov_ps(best, larger, value);
        which = _mm512_mask_set1_epi32(which, larger, index);
      }
  store_floats(y, m, best);
  _mm_mask_storeu_epi8(window, m, _mm512_cvtepi32_epi8(which));
}

// One window row's `edge` voxels of the convolution's gradient, `width` channels from `out`
// (voxels `voxel` apart): dy where the window chose the voxel numbered offset + e, else zero.
template <class T>
void route_lanes(const T* dy, const std::uint8_t* window, std::int64_t offset,
                 const WindowStrides& w, std::int64_t width, T* out) {
  const __mmask16 m = lanes_mask(width);
  const __m512i which = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, window));
  for (std::int64_t e = 0; e < w.edge; ++e) {
    const __mmask16 chosen =
        _mm512_mask_cmpeq_epi32_mask(m, which, _mm512_set1_epi32(static_cast<int>(offset + e)));
    store_routed(out + e * w.voxel, m, chosen, dy);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#else  // without AVX-512

template <class T>
void pool_lanes(const T* in, const WindowStrides& w, std::int64_t width, T* y,
                std::uint8_t* window) {
  for (std::int64_t i = 0; i < width; ++i) {
    float best = -std::numeric_limits<float>::infinity();
    std::uint8_t which = kNoMaximum, index = 0;
    for (std::int64_t a = 0; a < w.edge; ++a)
      for (std::int64_t b = 0; b < w.edge; ++b)
        for (std::int64_t e = 0; e < w.edge; ++e, ++index) {
          const float value = to_float(in[a * w.plane + b * w.row + e * w.voxel + i]);
          if (value > best) {  // strictly greater: the first maximum stays
            best = value;
            which = index;
          }
        }
    y[i] = from_float<T>(best);
    window[i] = which;
  }
}

template <class T>
void route_lanes(const T* dy, const std::uint8_t* window, std::int64_t offset,
                 const WindowStrides& w, std::int64_t width, T* out) {
  for (std::int64_t e = 0; e < w.edge; ++e)
    for (std::int64_t i = 0; i < width; ++i)
      out[e * w.voxel + i] = window[i] == offset + e ? dy[i] : from_float<T>(0.0f);
}

#endif

// Pools a slab of the convolution's output (samples x planes x OH x OW x C) into y and window.
template <class T>
void pool_slab(const FusedShape& s, const Slab& slab, const T* convolved, T* y,
               std::uint8_t* window) {
  const std::int64_t k = s.pool, c = s.out_channels;
  const std::int64_t pooled_planes = std::min(slab.planes / k, s.pd - slab.first_plane / k);
  const WindowStrides strides{s.oh * s.ow * c, s.ow * c, c, k};
#pragma omp parallel for collapse(3) schedule(static)
  for (std::int64_t j = 0; j < slab.samples; ++j)
    for (std::int64_t p = 0; p < pooled_planes; ++p)
      for (std::int64_t r = 0; r < s.ph; ++r) {
        const std::int64_t row =
            ((slab.first_sample + j) * s.pd + slab.first_plane / k + p) * s.ph + r;
        for (std::int64_t q = 0; q < s.pw; ++q)
          for (std::int64_t first = 0; first < c; first += kLanes) {
            const T* in =
                convolved + (((j * slab.planes + p * k) * s.oh + r * k) * s.ow + q * k) * c;
            const std::int64_t at = (row * s.pw + q) * c + first;
            pool_lanes(in + first, strides, std::min(kLanes, c - first), y + at, window + at);
          }
      }
}

// The convolution's gradient over a slab (samples x planes x OH x OW x C): dy where the window
// chose that voxel, zero elsewhere (also in the planes, rows and columns no window covers).
template <class T>
void route_slab(const FusedShape& s, const Slab& slab, const T* dy, const std::uint8_t* window,
                T* convolved_grad) {
  const std::int64_t k = s.pool, c = s.out_channels;
  const T zero = from_float<T>(0.0f);
  const WindowStrides strides{s.oh * s.ow * c, s.ow * c, c, k};
#pragma omp parallel for collapse(3) schedule(static)
  for (std::int64_t j = 0; j < slab.samples; ++j)
    for (std::int64_t plane = 0; plane < slab.planes; ++plane)
      for (std::int64_t r = 0; r < s.oh; ++r) {
        T* out = convolved_grad + ((j * slab.planes + plane) * s.oh + r) * s.ow * c;
        const std::int64_t global_plane = slab.first_plane + plane;
        const std::int64_t p = global_plane / k, pr = r / k;
        if (p >= s.pd || pr >= s.ph) {
          std::fill(out, out + s.ow * c, zero);
          continue;
        }
        const std::int64_t row = ((slab.first_sample + j) * s.pd + p) * s.ph + pr;
        const std::int64_t offset = ((global_plane % k) * k + r % k) * k;
        for (std::int64_t q = 0; q < s.pw; ++q)
          for (std::int64_t first = 0; first < c; first += kLanes) {
            const std::int64_t at = (row * s.pw + q) * c + first;
            route_lanes(dy + at, window + at, offset, strides, std::min(kLanes, c - first),
                        out + q * k * c + first);
          }
        std::fill(out + s.pw * k * c, out + s.ow * c, zero);
      }
}

// The most elements any slab's buffer holds, with `halo` more planes on either side.
std::int64_t largest_slab(const FusedShape& s, const std::vector<Slab>& slabs, std::int64_t halo) {
  std::int64_t largest = 0;
  for (const Slab& slab : slabs)
    largest =
        std::max(largest, slab.samples * (slab.planes + 2 * halo) * s.output_plane_elements());
  return largest;
}

template <class T, class Impl>
void fused_forward(Impl& impl, const Conv3dMaxPool& op, Tensor& y, Tensor& window) {
  const FusedShape s(op);
  const std::vector<Slab> slabs = plan_slabs(s);
  T* convolved = static_cast<T*>(
      impl.scratch(0, static_cast<std::size_t>(largest_slab(s, slabs, 0)) * sizeof(T)));
  WeightsForReading weights(impl.engine, op.weight);
  for (const Slab& slab : slabs) {
    const SlabGeometry g = convolution_geometry(s, slab);
    const SlabProblem p = slab_problem(SlabPass::forward, op, s, g);
    const CachedPrimitive& cached = slab_forward(impl, p, op.bias != nullptr);
    const T* source = slab_planes(op.x.data<T>(), s.d, s.input_plane_elements(), slab.first_sample,
                                  g.first_source_plane);
    std::unordered_map<int, memory> arguments{
        {DNNL_ARG_SRC, memory(p.source, impl.engine, const_cast<T*>(source))},
        {DNNL_ARG_WEIGHTS, weights(impl.stream, cached)},
        {DNNL_ARG_DST, memory(p.destination, impl.engine, convolved)}};
    if (op.bias != nullptr)
      arguments.emplace(DNNL_ARG_BIAS, dnnl_memory(impl.engine, p.bias, *op.bias));
    impl.execute(cached.primitive, arguments);
    pool_slab<T>(s, slab, convolved, y.data<T>(), window.data<std::uint8_t>());
  }
}

// dweight and dbias, accumulated over the slabs in their order, and dx (unless null) slab by
// slab: from each slab's convolution gradient, routed into the cache and never kept whole.
template <class T, class Impl>
void fused_backward(Impl& impl, const Conv3dMaxPool& op, const Tensor& dy, const Tensor& window,
                    Tensor* dx, Tensor& dweight, Tensor* dbias) {
  const FusedShape s(op);
  const std::vector<Slab> slabs = plan_slabs(s);
  const bool input_gradient = dx != nullptr;
  T* routed = static_cast<T*>(impl.scratch(
      0, static_cast<std::size_t>(largest_slab(s, slabs, input_gradient ? s.padding : 0)) *
             sizeof(T)));
  const auto weight_count = static_cast<std::size_t>(dweight.numel());
  const auto bias_count = static_cast<std::size_t>(s.out_channels);
  std::vector<float> slab_dweight(weight_count), slab_dbias(bias_count);
  float* total_dweight = dweight.data<float>();
  float* total_dbias = dbias != nullptr ? dbias->data<float>() : nullptr;
  const memory::desc user_weights = dnnl_desc(op.weight);
  WeightsForReading weights(impl.engine, op.weight);
  bool first = true;
  for (const Slab& slab : slabs) {
    const Slab routed_slab = routed_planes(s, slab, input_gradient);
    route_slab<T>(s, routed_slab, dy.data<T>(), window.data<std::uint8_t>(), routed);
    // A slab of several samples covers every plane, so its own planes start the buffer then.
    const T* slab_gradient =
        routed + (slab.first_plane - routed_slab.first_plane) * s.output_plane_elements();

    const SlabGeometry g = convolution_geometry(s, slab);
    const SlabProblem p = slab_problem(SlabPass::backward_weights, op, s, g);
    const CachedPrimitive& cached = slab_backward_weights(impl, p, dbias != nullptr);
    // The first slab writes the totals directly; later ones go through slab_* and are added.
    float* to_weights = first ? total_dweight : slab_dweight.data();
    float* to_bias = first ? total_dbias : slab_dbias.data();
    const memory user(user_weights, impl.engine, to_weights);
    const T* source = slab_planes(op.x.data<T>(), s.d, s.input_plane_elements(), slab.first_sample,
                                  g.first_source_plane);
    std::unordered_map<int, memory> arguments{
        {DNNL_ARG_SRC, memory(p.source, impl.engine, const_cast<T*>(source))},
        {DNNL_ARG_DIFF_DST, memory(p.destination, impl.engine, const_cast<T*>(slab_gradient))},
        {DNNL_ARG_DIFF_WEIGHTS,
         cached.weights_reorder ? cached.weights_in_primitive_layout : user}};
    if (dbias != nullptr)
      arguments.emplace(DNNL_ARG_DIFF_BIAS, memory(p.bias, impl.engine, to_bias));
    impl.execute(cached.primitive, arguments);
    if (cached.weights_reorder)
      impl.execute(*cached.weights_reorder,
                   {{DNNL_ARG_FROM, cached.weights_in_primitive_layout}, {DNNL_ARG_TO, user}});
    if (!first) {
      for (std::size_t i = 0; i < weight_count; ++i) total_dweight[i] += slab_dweight[i];
      if (dbias != nullptr)
        for (std::size_t i = 0; i < bias_count; ++i) total_dbias[i] += slab_dbias[i];
    }
    first = false;

    if (input_gradient) {
      const SlabGeometry gx = input_gradient_geometry(s, slab, routed_slab);
      const SlabProblem px = slab_problem(SlabPass::backward_data, op, s, gx);
      const CachedPrimitive& data = slab_backward_data(impl, px);
      T* grad_source = slab_planes(dx->data<T>(), s.d, s.input_plane_elements(), slab.first_sample,
                                   slab.first_plane);
      impl.execute(data.primitive,
                   {{DNNL_ARG_DIFF_DST, memory(px.destination, impl.engine, routed)},
                    {DNNL_ARG_WEIGHTS, weights(impl.stream, data)},
                    {DNNL_ARG_DIFF_SRC, memory(px.source, impl.engine, grad_source)}});
    }
  }
}

}  // namespace

bool CpuBackend::fuses_conv3d_max_pool(const ConvGeometry& convolution,
                                       const PoolGeometry& pooling) const {
  // Slabs of whole planes need a convolution that maps plane to plane (stride 1, undilated) and
  // windows that do not overlap; a window's voxel is numbered in a byte.
  return convolution.stride == 1 && convolution.dilation == 1 && convolution.groups == 1 &&
         !convolution.transposed && pooling.kernel == pooling.stride && pooling.padding == 0 &&
         pooling.kernel * pooling.kernel * pooling.kernel < kNoMaximum;
}

void CpuBackend::do_conv3d_max_pool_forward(const Conv3dMaxPool& op, Tensor& y, Tensor& window) {
  dnnl_checked("conv3d_max_pool_forward", {&op.x, &op.weight, op.bias, &y}, [&] {
    with_element_type(op.x.dtype(), [&](auto element) {
      fused_forward<decltype(element)>(*impl_, op, y, window);
    });
  });
}

void CpuBackend::do_conv3d_max_pool_backward(const Conv3dMaxPool& op, const Tensor& dy,
                                             const Tensor& window, Tensor* dx, Tensor& dweight,
                                             Tensor* dbias) {
  dnnl_checked("conv3d_max_pool_backward", {&op.x, &op.weight, &dy, dx, &dweight}, [&] {
    with_element_type(op.x.dtype(), [&](auto element) {
      using T = decltype(element);
      const FusedShape s(op);
      if (dx == nullptr || s.same_size()) {
        fused_backward<T>(*impl_, op, dy, window, dx, dweight, dbias);
        return;
      }
      // x's gradient of a convolution that changes the volume's size: the convolution's whole
      // gradient, routed into one tensor (kept from call to call), then the usual passes.
      const Slab whole{0, s.n, 0, s.od};
      const std::vector<std::int64_t> dims{s.n, s.out_channels, s.od, s.oh, s.ow};
      const auto bytes =
          static_cast<std::size_t>(s.n * s.od * s.output_plane_elements()) * sizeof(T);
      Tensor convolved_grad(dims, s.dtype, Layout::nhwc, impl_->scratch_buffer(1, bytes));
      route_slab<T>(s, whole, dy.data<T>(), window.data<std::uint8_t>(), convolved_grad.data<T>());
      do_convolution_backward_weights(op.x, convolved_grad, op.convolution, dweight, dbias);
      do_convolution_backward_data(convolved_grad, op.weight, op.convolution, *dx);
    });
  });
}

}  // namespace hardy::core
