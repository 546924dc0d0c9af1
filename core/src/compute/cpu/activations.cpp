// The activations of regression networks (CosmoFlow): leaky relu through oneDNN's relu with a
// negative slope (its backward takes the mask from the output, as relu's does), and the scaled
// tanh of the output layer as a plain loop (a few values per sample).
#include <bit>
#include <cmath>

#include "compute/cpu/dnnl_support.hpp"
#include "compute/cpu/element_types.hpp"

namespace hardy::core {

using namespace cpu;  // the backend's internal helpers, declared in dnnl_support.hpp

namespace {

using dnnl::memory;

constexpr std::int64_t parallel_threshold = 1 << 15;

// A leaky ReLU pass over `t`'s elements; the slope is part of the primitive, so it is part of its
// key (bit for bit).
PrimitiveKey relu_key(PrimitiveKind pass, const Tensor& t, float slope) {
  return PrimitiveKey{}
      .add(static_cast<std::int64_t>(pass))
      .add(t.numel())
      .add(std::bit_cast<std::uint32_t>(slope));
}

}  // namespace

void CpuBackend::do_leaky_relu_forward(const Tensor& x, float slope, Tensor& y) {
  dnnl_checked("leaky_relu_forward", {&x, &y}, [&] {
    const memory::desc data = dnnl_flat_desc(x);
    const CachedPrimitive& relu =
        impl_->cached(relu_key(PrimitiveKind::leaky_relu_forward, x, slope), [&] {
          const dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference,
                                                 dnnl::algorithm::eltwise_relu, data, slope);
          const dnnl::eltwise_forward::primitive_desc pd(desc, impl_->engine);
          return CachedPrimitive{dnnl::eltwise_forward(pd), implementation_name(pd)};
        });
    impl_->execute(relu.primitive, {{DNNL_ARG_SRC, dnnl_memory(impl_->engine, data, x)},
                                    {DNNL_ARG_DST, dnnl_memory(impl_->engine, data, y)}});
  });
}

void CpuBackend::do_leaky_relu_backward(const Tensor& y, const Tensor& dy, float slope,
                                        Tensor& dx) {
  dnnl_checked("leaky_relu_backward", {&y, &dy, &dx}, [&] {
    const memory::desc data = dnnl_flat_desc(y);
    const CachedPrimitive& relu =
        impl_->cached(relu_key(PrimitiveKind::leaky_relu_backward, y, slope), [&] {
          // With slope >= 0 the output has the input's sign, so the mask comes from the output.
          const auto algorithm = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;
          const dnnl::eltwise_forward::primitive_desc hint(
              {dnnl::prop_kind::forward_training, algorithm, data, slope}, impl_->engine);
          const dnnl::eltwise_backward::desc desc(algorithm, data, data, slope);
          const dnnl::eltwise_backward::primitive_desc pd(desc, impl_->engine, hint);
          return CachedPrimitive{dnnl::eltwise_backward(pd), implementation_name(pd)};
        });
    impl_->execute(relu.primitive, {{DNNL_ARG_DST, dnnl_memory(impl_->engine, data, y)},
                                    {DNNL_ARG_DIFF_DST, dnnl_memory(impl_->engine, data, dy)},
                                    {DNNL_ARG_DIFF_SRC, dnnl_memory(impl_->engine, data, dx)}});
  });
}

namespace {

template <class T>
void scaled_tanh_forward_kernel(const Tensor& x, float scale, Tensor& y) {
  const T* in = x.data<T>();
  T* out = y.data<T>();
  const std::int64_t count = x.numel();
#pragma omp parallel for schedule(static) if (count >= parallel_threshold)
  for (std::int64_t i = 0; i < count; ++i)
    out[i] = from_float<T>(scale * std::tanh(to_float(in[i])));
}

// d(scale * tanh x)/dx = scale * (1 - tanh^2 x) = scale - y^2 / scale.
template <class T>
void scaled_tanh_backward_kernel(const Tensor& y, const Tensor& dy, float scale, Tensor& dx) {
  const T* out = y.data<T>();
  const T* grad = dy.data<T>();
  T* grad_src = dx.data<T>();
  const float inverse_scale = 1.0f / scale;
  const std::int64_t count = y.numel();
#pragma omp parallel for schedule(static) if (count >= parallel_threshold)
  for (std::int64_t i = 0; i < count; ++i) {
    const float t = to_float(out[i]) * inverse_scale;
    grad_src[i] = from_float<T>(to_float(grad[i]) * scale * (1.0f - t * t));
  }
}

}  // namespace

void CpuBackend::do_scaled_tanh_forward(const Tensor& x, float scale, Tensor& y) {
  with_element_type(
      x.dtype(), [&](auto element) { scaled_tanh_forward_kernel<decltype(element)>(x, scale, y); });
}

void CpuBackend::do_scaled_tanh_backward(const Tensor& y, const Tensor& dy, float scale,
                                         Tensor& dx) {
  with_element_type(y.dtype(), [&](auto element) {
    scaled_tanh_backward_kernel<decltype(element)>(y, dy, scale, dx);
  });
}

}  // namespace hardy::core
