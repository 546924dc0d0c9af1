// Convolution through oneDNN: activations stay NHWC (oneDNN picks its brgemm/jit AVX-512 kernels
// for channels-last f32), weights are reordered between the user's OIHW tensor and whatever
// blocked layout the primitive asks for.
#include "compute/cpu/dnnl_support.hpp"

namespace hardy::core {

using namespace cpu;  // the backend's internal helpers, declared in dnnl_support.hpp

namespace {

using dnnl::memory;

// The shapes and geometry of one convolution, validated, in oneDNN's terms.
struct ConvProblem {
  memory::desc source;       // x or dx, NHWC
  memory::desc destination;  // y or dy, NHWC
  memory::desc user_weights;
  memory::desc bias;
  memory::dims strides, dilation, padding;
  PrimitiveKey key;

  memory::desc any_weights() const {
    return memory::desc(user_weights.dims(), memory::data_type::f32, memory::format_tag::any);
  }
};

// The descriptors of x (N, I, H, W), weight (O, I, KH, KW) and y (N, O, OH, OW), which Backend
// has checked against each other and the geometry; the same relation holds for dx/dy in the
// backward passes.
ConvProblem make_problem(PrimitiveKind kind, const Tensor& x, const Tensor& weight, const Tensor& y,
                         const ConvGeometry& g, bool with_bias) {
  ConvProblem problem;
  problem.source = dnnl_desc(x);
  problem.destination = dnnl_desc(y);
  problem.user_weights = dnnl_desc(weight);
  problem.bias = memory::desc({weight.dim(0)}, memory::data_type::f32, memory::format_tag::a);
  problem.strides = {g.stride, g.stride};
  problem.dilation = {g.dilation - 1, g.dilation - 1};  // oneDNN counts the gaps
  problem.padding = {g.padding, g.padding};
  problem.key.add(static_cast<std::int64_t>(kind))
      .add(x.dims())
      .add(weight.dims())
      .add(static_cast<std::int64_t>(weight.layout() == Layout::nhwc))
      .add(with_bias)
      .add(g.stride)
      .add(g.padding)
      .add(g.dilation);
  return problem;
}

dnnl::convolution_forward::primitive_desc forward_descriptor(const dnnl::engine& engine,
                                                             const ConvProblem& p, bool with_bias) {
  const auto desc =
      with_bias
          ? dnnl::convolution_forward::desc(
                dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, p.source,
                p.any_weights(), p.bias, p.destination, p.strides, p.dilation, p.padding, p.padding)
          : dnnl::convolution_forward::desc(
                dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, p.source,
                p.any_weights(), p.destination, p.strides, p.dilation, p.padding, p.padding);
  return {desc, engine};
}

// Prepares the reorder between the user's weights and the primitive's layout, if they differ.
void attach_weights_reorder(const dnnl::engine& engine, CachedPrimitive& cached,
                            const memory::desc& user, const memory::desc& primitive_layout,
                            bool into_primitive) {
  if (primitive_layout == user) return;
  cached.weights_in_primitive_layout = memory(primitive_layout, engine);
  const auto& from = into_primitive ? user : primitive_layout;
  const auto& to = into_primitive ? primitive_layout : user;
  cached.weights_reorder = dnnl::reorder(dnnl::reorder::primitive_desc(engine, from, engine, to));
}

// The weights argument of a primitive that reads them: the user's tensor itself or its copy in
// the primitive's layout (queued on the in-order stream ahead of the primitive).
memory weights_for_reading(dnnl::stream& stream, const CachedPrimitive& cached,
                           const memory& user) {
  if (!cached.weights_reorder) return user;
  cached.weights_reorder->execute(
      stream, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, cached.weights_in_primitive_layout}});
  return cached.weights_in_primitive_layout;
}

}  // namespace

void CpuBackend::do_conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                   const ConvGeometry& geometry, Tensor& y) {
  constexpr std::string_view operation = "conv2d_forward";
  const bool with_bias = bias != nullptr;
  const ConvProblem problem =
      make_problem(PrimitiveKind::conv_forward, x, weight, y, geometry, with_bias);
  dnnl_checked(operation, {&x, &weight, bias, &y}, [&] {
    const CachedPrimitive& conv = impl_->cached(problem.key, [&] {
      const auto pd = forward_descriptor(impl_->engine, problem, with_bias);
      CachedPrimitive cached{dnnl::convolution_forward(pd), implementation_name(pd)};
      attach_weights_reorder(impl_->engine, cached, problem.user_weights, pd.weights_desc(), true);
      return cached;
    });
    std::unordered_map<int, memory> arguments{
        {DNNL_ARG_SRC, dnnl_memory(impl_->engine, problem.source, x)},
        {DNNL_ARG_WEIGHTS,
         weights_for_reading(impl_->stream, conv,
                             dnnl_memory(impl_->engine, problem.user_weights, weight))},
        {DNNL_ARG_DST, dnnl_memory(impl_->engine, problem.destination, y)}};
    if (with_bias)
      arguments.emplace(DNNL_ARG_BIAS, dnnl_memory(impl_->engine, problem.bias, *bias));
    impl_->execute(conv.primitive, arguments);
  });
}

void CpuBackend::do_conv2d_backward_data(const Tensor& dy, const Tensor& weight,
                                         const ConvGeometry& geometry, Tensor& dx) {
  constexpr std::string_view operation = "conv2d_backward_data";
  const ConvProblem problem =
      make_problem(PrimitiveKind::conv_backward_data, dx, weight, dy, geometry, false);
  dnnl_checked(operation, {&dy, &weight, &dx}, [&] {
    const CachedPrimitive& conv = impl_->cached(problem.key, [&] {
      const auto hint = forward_descriptor(impl_->engine, problem, false);
      const dnnl::convolution_backward_data::desc desc(
          dnnl::algorithm::convolution_direct, problem.source, problem.any_weights(),
          problem.destination, problem.strides, problem.dilation, problem.padding, problem.padding);
      const dnnl::convolution_backward_data::primitive_desc pd(desc, impl_->engine, hint);
      CachedPrimitive cached{dnnl::convolution_backward_data(pd), implementation_name(pd)};
      attach_weights_reorder(impl_->engine, cached, problem.user_weights, pd.weights_desc(), true);
      return cached;
    });
    impl_->execute(conv.primitive,
                   {{DNNL_ARG_DIFF_DST, dnnl_memory(impl_->engine, problem.destination, dy)},
                    {DNNL_ARG_WEIGHTS,
                     weights_for_reading(impl_->stream, conv,
                                         dnnl_memory(impl_->engine, problem.user_weights, weight))},
                    {DNNL_ARG_DIFF_SRC, dnnl_memory(impl_->engine, problem.source, dx)}});
  });
}

void CpuBackend::do_conv2d_backward_weights(const Tensor& x, const Tensor& dy,
                                            const ConvGeometry& geometry, Tensor& dweight,
                                            Tensor* dbias) {
  constexpr std::string_view operation = "conv2d_backward_weights";
  const bool with_bias = dbias != nullptr;
  const ConvProblem problem =
      make_problem(PrimitiveKind::conv_backward_weights, x, dweight, dy, geometry, with_bias);
  dnnl_checked(operation, {&x, &dy, &dweight, dbias}, [&] {
    const CachedPrimitive& conv = impl_->cached(problem.key, [&] {
      const auto hint = forward_descriptor(impl_->engine, problem, with_bias);
      const auto desc =
          with_bias ? dnnl::convolution_backward_weights::desc(
                          dnnl::algorithm::convolution_direct, problem.source,
                          problem.any_weights(), problem.bias, problem.destination, problem.strides,
                          problem.dilation, problem.padding, problem.padding)
                    : dnnl::convolution_backward_weights::desc(
                          dnnl::algorithm::convolution_direct, problem.source,
                          problem.any_weights(), problem.destination, problem.strides,
                          problem.dilation, problem.padding, problem.padding);
      const dnnl::convolution_backward_weights::primitive_desc pd(desc, impl_->engine, hint);
      CachedPrimitive cached{dnnl::convolution_backward_weights(pd), implementation_name(pd)};
      attach_weights_reorder(impl_->engine, cached, problem.user_weights, pd.diff_weights_desc(),
                             false);
      return cached;
    });
    const memory user_weights = dnnl_memory(impl_->engine, problem.user_weights, dweight);
    std::unordered_map<int, memory> arguments{
        {DNNL_ARG_SRC, dnnl_memory(impl_->engine, problem.source, x)},
        {DNNL_ARG_DIFF_DST, dnnl_memory(impl_->engine, problem.destination, dy)},
        {DNNL_ARG_DIFF_WEIGHTS,
         conv.weights_reorder ? conv.weights_in_primitive_layout : user_weights}};
    if (with_bias)
      arguments.emplace(DNNL_ARG_DIFF_BIAS, dnnl_memory(impl_->engine, problem.bias, *dbias));
    impl_->execute(conv.primitive, arguments);
    if (conv.weights_reorder)
      impl_->execute(*conv.weights_reorder, {{DNNL_ARG_FROM, conv.weights_in_primitive_layout},
                                             {DNNL_ARG_TO, user_weights}});
  });
}

}  // namespace hardy::core
