// Dense (fully connected) layers through oneDNN's inner product: x (N, K) and y (N, O) are plain
// row-major matrices, the weights PyTorch's (O, K) (oneDNN's "oi"), read and written in place.
// The layers follow a flatten (CosmoFlow's first one has K = 32768), where the batch is small:
// oneDNN's GEMM-based implementation takes plain layouts, so no weight reorder is needed in f32.
// With bf16 activations the passes that read the weights take a bf16 copy of them (a reorder
// per step, like the convolutions'), and the weight gradient is written in f32.
#include "compute/cpu/dnnl_support.hpp"

namespace hardy::core {

using namespace cpu;  // the backend's internal helpers, declared in dnnl_support.hpp

namespace {

using dnnl::memory;

// The descriptors of x (N, K), weight (O, K), bias (O) and y (N, O), which Backend has checked
// against each other; the same relation holds for dx/dy in the backward passes.
struct DenseProblem {
  // weights: the user's f32 (O, K); primitive_weights: as the primitive takes them (the
  // activations' type, except for the f32 weight gradient).
  memory::desc source, weights, primitive_weights, bias, destination;
  // The weights as the forward pass reads them (a backward pass's hint).
  memory::desc forward_weights;
  PrimitiveKey key;

  DenseProblem(PrimitiveKind kind, const Tensor& x, const Tensor& weight, const Tensor& y,
               bool with_bias)
      : source(dnnl_desc(x)),
        weights(memory::desc(weight.dims(), memory::data_type::f32, memory::format_tag::ab)),
        primitive_weights(memory::desc(
            weight.dims(),
            kind == PrimitiveKind::dense_backward_weights ? memory::data_type::f32
                                                          : dnnl_data_type(x.dtype()),
            // f32 reads the user's weights in place; bf16 converts them anyway, into whatever
            // layout the primitive prefers.
            x.dtype() == DType::f32 ? memory::format_tag::ab : memory::format_tag::any)),
        bias(memory::desc({weight.dim(0)}, memory::data_type::f32, memory::format_tag::a)),
        destination(dnnl_desc(y)),
        forward_weights(memory::desc(
            weight.dims(), dnnl_data_type(x.dtype()),
            x.dtype() == DType::f32 ? memory::format_tag::ab : memory::format_tag::any)) {
    key.add(static_cast<std::int64_t>(kind))
        .add(static_cast<std::int64_t>(x.dtype()))
        .add(x.dims())
        .add(weight.dims())
        .add(with_bias);
  }
};

dnnl::inner_product_forward::primitive_desc forward_descriptor(const dnnl::engine& engine,
                                                               const DenseProblem& p,
                                                               bool with_bias) {
  const auto desc =
      with_bias ? dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, p.source,
                                                    p.forward_weights, p.bias, p.destination)
                : dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, p.source,
                                                    p.forward_weights, p.destination);
  return {desc, engine};
}

}  // namespace

void CpuBackend::do_dense_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                  Tensor& y) {
  const bool with_bias = bias != nullptr;
  const DenseProblem problem(PrimitiveKind::dense_forward, x, weight, y, with_bias);
  dnnl_checked("dense_forward", {&x, &weight, bias, &y}, [&] {
    const CachedPrimitive& dense = impl_->cached(problem.key, [&] {
      const auto pd = forward_descriptor(impl_->engine, problem, with_bias);
      CachedPrimitive cached{dnnl::inner_product_forward(pd), implementation_name(pd)};
      attach_weights_reorder(impl_->engine, cached, problem.weights, pd.weights_desc(), true);
      return cached;
    });
    std::unordered_map<int, memory> arguments{
        {DNNL_ARG_SRC, dnnl_memory(impl_->engine, problem.source, x)},
        {DNNL_ARG_WEIGHTS,
         weights_for_reading(impl_->stream, dense,
                             dnnl_memory(impl_->engine, problem.weights, weight))},
        {DNNL_ARG_DST, dnnl_memory(impl_->engine, problem.destination, y)}};
    if (with_bias)
      arguments.emplace(DNNL_ARG_BIAS, dnnl_memory(impl_->engine, problem.bias, *bias));
    impl_->execute(dense.primitive, arguments);
  });
}

void CpuBackend::do_dense_backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) {
  const DenseProblem problem(PrimitiveKind::dense_backward_data, dx, weight, dy, false);
  dnnl_checked("dense_backward_data", {&dy, &weight, &dx}, [&] {
    const CachedPrimitive& dense = impl_->cached(problem.key, [&] {
      const auto hint = forward_descriptor(impl_->engine, problem, false);
      const dnnl::inner_product_backward_data::desc desc(problem.source, problem.primitive_weights,
                                                         problem.destination);
      const dnnl::inner_product_backward_data::primitive_desc pd(desc, impl_->engine, hint);
      CachedPrimitive cached{dnnl::inner_product_backward_data(pd), implementation_name(pd)};
      attach_weights_reorder(impl_->engine, cached, problem.weights, pd.weights_desc(), true);
      return cached;
    });
    impl_->execute(dense.primitive,
                   {{DNNL_ARG_DIFF_DST, dnnl_memory(impl_->engine, problem.destination, dy)},
                    {DNNL_ARG_WEIGHTS,
                     weights_for_reading(impl_->stream, dense,
                                         dnnl_memory(impl_->engine, problem.weights, weight))},
                    {DNNL_ARG_DIFF_SRC, dnnl_memory(impl_->engine, problem.source, dx)}});
  });
}

void CpuBackend::do_dense_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight,
                                           Tensor* dbias) {
  const bool with_bias = dbias != nullptr;
  const DenseProblem problem(PrimitiveKind::dense_backward_weights, x, dweight, dy, with_bias);
  dnnl_checked("dense_backward_weights", {&x, &dy, &dweight, dbias}, [&] {
    const CachedPrimitive& dense = impl_->cached(problem.key, [&] {
      const auto hint = forward_descriptor(impl_->engine, problem, with_bias);
      const auto desc =
          with_bias ? dnnl::inner_product_backward_weights::desc(problem.source, problem.weights,
                                                                 problem.bias, problem.destination)
                    : dnnl::inner_product_backward_weights::desc(problem.source, problem.weights,
                                                                 problem.destination);
      const dnnl::inner_product_backward_weights::primitive_desc pd(desc, impl_->engine, hint);
      return CachedPrimitive{dnnl::inner_product_backward_weights(pd), implementation_name(pd)};
    });
    std::unordered_map<int, memory> arguments{
        {DNNL_ARG_SRC, dnnl_memory(impl_->engine, problem.source, x)},
        {DNNL_ARG_DIFF_DST, dnnl_memory(impl_->engine, problem.destination, dy)},
        {DNNL_ARG_DIFF_WEIGHTS, dnnl_memory(impl_->engine, problem.weights, dweight)}};
    if (with_bias)
      arguments.emplace(DNNL_ARG_DIFF_BIAS, dnnl_memory(impl_->engine, problem.bias, *dbias));
    impl_->execute(dense.primitive, arguments);
  });
}

}  // namespace hardy::core
