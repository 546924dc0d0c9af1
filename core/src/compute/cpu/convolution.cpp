// Convolution (2-D and 3-D) and transposed convolution through oneDNN (its convolution and
// deconvolution primitives): activations stay NHWC / NDHWC (oneDNN picks its brgemm/jit AVX-512
// kernels for channels-last f32), weights are reordered between the user's OIHW / OIDHW (or,
// transposed, IOHW) tensor and whatever blocked layout the primitive asks for. A 3-D
// convolution is the same code with one more spatial dimension in every descriptor. With bf16
// activations the forward and backward-data passes read the weights converted to bf16 by that
// same reorder, and the backward-weights pass writes f32 gradients (oneDNN accumulates in f32).
#include "compute/cpu/dnnl_support.hpp"

namespace hardy::core {

using namespace cpu;  // the backend's internal helpers, declared in dnnl_support.hpp
using operands::convolution_operation;
using operands::ConvPass;

namespace {

using dnnl::memory;

// The shapes and geometry of one convolution (or transposed convolution), validated, in
// oneDNN's terms.
struct ConvProblem {
  memory::desc source;       // x or dx, NHWC (a transposed convolution's too)
  memory::desc destination;  // y or dy, NHWC
  memory::desc user_weights;
  memory::desc bias;
  memory::dims strides, dilation, padding, padding_right;
  // The weights' type inside the primitive: the activations' for the passes that read weights,
  // f32 for the weight gradient (the master weights' type).
  memory::data_type weights_type = memory::data_type::f32;
  memory::data_type activation_type = memory::data_type::f32;
  PrimitiveKey key;

  memory::desc any_weights() const {
    return memory::desc(user_weights.dims(), weights_type, memory::format_tag::any);
  }
  // The problem seen as its forward pass (a backward pass's hint), which reads the weights in
  // the activations' type.
  ConvProblem as_forward() const {
    ConvProblem forward = *this;
    forward.weights_type = activation_type;
    return forward;
  }
};

// What convolutions and transposed convolutions describe alike: the activations, the geometry
// and the start of the primitive key.
ConvProblem common_problem(PrimitiveKind kind, const Tensor& x, const Tensor& weight,
                           const Tensor& y, const ConvGeometry& g, bool with_bias) {
  ConvProblem problem;
  problem.source = dnnl_desc(x);
  problem.destination = dnnl_desc(y);
  const std::size_t spatial = x.rank() - 2;  // 2 or 3
  problem.strides.assign(spatial, g.stride);
  problem.dilation.assign(spatial, g.dilation - 1);  // oneDNN counts the gaps
  problem.padding.assign(spatial, g.padding);
  problem.padding_right = problem.padding;
  const bool weight_gradient = kind == PrimitiveKind::conv_backward_weights ||
                               kind == PrimitiveKind::deconv_backward_weights;
  problem.activation_type = dnnl_data_type(x.dtype());
  problem.weights_type = weight_gradient ? memory::data_type::f32 : problem.activation_type;
  problem.key.add(static_cast<std::int64_t>(kind))
      .add(static_cast<std::int64_t>(x.dtype()))
      .add(x.dims())
      .add(weight.dims())
      .add(static_cast<std::int64_t>(weight.layout() == Layout::nhwc))
      .add(with_bias)
      .add(g.stride)
      .add(g.padding)
      .add(g.dilation)
      .add(g.groups);
  return problem;
}

// The descriptors of x (N, I, H, W), weight (O, I / groups, KH, KW) and y (N, O, OH, OW), which
// Backend has checked against each other and the geometry; the same relation holds for dx/dy in
// the backward passes. Grouped weights are described as oneDNN's 5-D (G, O / G, I / G, KH, KW),
// which is the same memory as hardy's (O, I / G, KH, KW) (goihw, or gohwi for nhwc weights).
ConvProblem make_problem(PrimitiveKind kind, const Tensor& x, const Tensor& weight, const Tensor& y,
                         const ConvGeometry& g, bool with_bias) {
  ConvProblem problem = common_problem(kind, x, weight, y, g, with_bias);
  if (g.groups == 1) {
    problem.user_weights = dnnl_desc(weight);
  } else {
    const std::int64_t groups = g.groups;
    const auto tag =
        weight.layout() == Layout::nhwc ? memory::format_tag::gohwi : memory::format_tag::goihw;
    problem.user_weights =
        memory::desc({groups, weight.dim(0) / groups, weight.dim(1), weight.dim(2), weight.dim(3)},
                     memory::data_type::f32, tag);
  }
  problem.bias = memory::desc({weight.dim(0)}, memory::data_type::f32, memory::format_tag::a);
  return problem;
}

// The same for a transposed convolution: x (N, I, H, W), PyTorch's weight (I, O, KH, KW) and
// y (N, O, OH, OW). oneDNN's deconvolution weights are (O, I, KH, KW) in its own terms, so
// PyTorch's memory is its iohw (ihwo for nhwc weights). y may be up to stride - 1 larger than
// the smallest output (PyTorch's output_padding); oneDNN takes that as less padding on the
// high side (negative down to 1 - stride, which it accepts), so that its size equation is exact.
ConvProblem make_transposed_problem(PrimitiveKind kind, const Tensor& x, const Tensor& weight,
                                    const Tensor& y, const ConvGeometry& g, bool with_bias) {
  ConvProblem problem = common_problem(kind, x, weight, y, g, with_bias);
  problem.key.add(y.dims());  // the output padding
  const auto tag =
      weight.layout() == Layout::nhwc ? memory::format_tag::ihwo : memory::format_tag::iohw;
  problem.user_weights = memory::desc({weight.dim(1), weight.dim(0), weight.dim(2), weight.dim(3)},
                                      memory::data_type::f32, tag);
  problem.bias = memory::desc({weight.dim(1)}, memory::data_type::f32, memory::format_tag::a);
  const auto output_padding = [&](std::int64_t input, std::int64_t kernel, std::int64_t output) {
    return output -
           conv_transpose_output_size(static_cast<int>(input), static_cast<int>(kernel), g);
  };
  problem.padding_right = {g.padding - output_padding(x.h(), weight.dim(2), y.h()),
                           g.padding - output_padding(x.w(), weight.dim(3), y.w())};
  return problem;
}

// What tells a convolution's passes from a transposed convolution's: the oneDNN primitives
// (its deconvolution takes the same descriptors as its convolution), their algorithm, the keys
// of their cached primitives and how the weights are described.
template <class ForwardPrimitive, class BackwardDataPrimitive, class BackwardWeightsPrimitive,
          dnnl::algorithm kAlgorithm, PrimitiveKind kForward, PrimitiveKind kBackwardData,
          PrimitiveKind kBackwardWeights, auto kDescribe>
struct ConvolutionKind {
  using Forward = ForwardPrimitive;
  using BackwardData = BackwardDataPrimitive;
  using BackwardWeights = BackwardWeightsPrimitive;
  static constexpr dnnl::algorithm algorithm = kAlgorithm;
  static constexpr PrimitiveKind forward = kForward;
  static constexpr PrimitiveKind backward_data = kBackwardData;
  static constexpr PrimitiveKind backward_weights = kBackwardWeights;
  static constexpr auto* describe = kDescribe;
};

using Direct =
    ConvolutionKind<dnnl::convolution_forward, dnnl::convolution_backward_data,
                    dnnl::convolution_backward_weights, dnnl::algorithm::convolution_direct,
                    PrimitiveKind::conv_forward, PrimitiveKind::conv_backward_data,
                    PrimitiveKind::conv_backward_weights, &make_problem>;
using Transposed =
    ConvolutionKind<dnnl::deconvolution_forward, dnnl::deconvolution_backward_data,
                    dnnl::deconvolution_backward_weights, dnnl::algorithm::deconvolution_direct,
                    PrimitiveKind::deconv_forward, PrimitiveKind::deconv_backward_data,
                    PrimitiveKind::deconv_backward_weights, &make_transposed_problem>;

// The descriptor of a pass that may have a bias, with or without it (oneDNN has a constructor
// for each); `lead` is what comes before the algorithm (the forward pass's prop_kind, or nothing).
template <class Desc, class... Lead>
Desc descriptor(const ConvProblem& p, bool with_bias, dnnl::algorithm algorithm, Lead... lead) {
  return with_bias ? Desc(lead..., algorithm, p.source, p.any_weights(), p.bias, p.destination,
                          p.strides, p.dilation, p.padding, p.padding_right)
                   : Desc(lead..., algorithm, p.source, p.any_weights(), p.destination, p.strides,
                          p.dilation, p.padding, p.padding_right);
}

template <class Kind>
typename Kind::Forward::primitive_desc forward_descriptor(const dnnl::engine& engine,
                                                          const ConvProblem& p, bool with_bias) {
  return {descriptor<typename Kind::Forward::desc>(p.as_forward(), with_bias, Kind::algorithm,
                                                   dnnl::prop_kind::forward_training),
          engine};
}

// The runs of the three passes, the same for a convolution and a transposed convolution once
// their primitive is made (the weights reordered into the primitive's layout where it has its
// own, and a weight gradient back into the user's).
template <class Impl>
void run_forward(Impl& impl, const CachedPrimitive& cached, const ConvProblem& problem,
                 const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) {
  std::unordered_map<int, memory> arguments{
      {DNNL_ARG_SRC, dnnl_memory(impl.engine, problem.source, x)},
      {DNNL_ARG_WEIGHTS,
       weights_for_reading(impl.stream, cached,
                           dnnl_memory(impl.engine, problem.user_weights, weight))},
      {DNNL_ARG_DST, dnnl_memory(impl.engine, problem.destination, y)}};
  if (bias != nullptr)
    arguments.emplace(DNNL_ARG_BIAS, dnnl_memory(impl.engine, problem.bias, *bias));
  impl.execute(cached.primitive, arguments);
}

template <class Impl>
void run_backward_data(Impl& impl, const CachedPrimitive& cached, const ConvProblem& problem,
                       const Tensor& dy, const Tensor& weight, Tensor& dx) {
  impl.execute(cached.primitive,
               {{DNNL_ARG_DIFF_DST, dnnl_memory(impl.engine, problem.destination, dy)},
                {DNNL_ARG_WEIGHTS,
                 weights_for_reading(impl.stream, cached,
                                     dnnl_memory(impl.engine, problem.user_weights, weight))},
                {DNNL_ARG_DIFF_SRC, dnnl_memory(impl.engine, problem.source, dx)}});
}

template <class Impl>
void run_backward_weights(Impl& impl, const CachedPrimitive& cached, const ConvProblem& problem,
                          const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) {
  const memory user_weights = dnnl_memory(impl.engine, problem.user_weights, dweight);
  std::unordered_map<int, memory> arguments{
      {DNNL_ARG_SRC, dnnl_memory(impl.engine, problem.source, x)},
      {DNNL_ARG_DIFF_DST, dnnl_memory(impl.engine, problem.destination, dy)},
      {DNNL_ARG_DIFF_WEIGHTS,
       cached.weights_reorder ? cached.weights_in_primitive_layout : user_weights}};
  if (dbias != nullptr)
    arguments.emplace(DNNL_ARG_DIFF_BIAS, dnnl_memory(impl.engine, problem.bias, *dbias));
  impl.execute(cached.primitive, arguments);
  if (cached.weights_reorder)
    impl.execute(*cached.weights_reorder, {{DNNL_ARG_FROM, cached.weights_in_primitive_layout},
                                           {DNNL_ARG_TO, user_weights}});
}

// The three passes of a convolution (2-D or 3-D alike: the descriptors carry the rank) or of a
// transposed convolution.
template <class Kind, class Impl>
void forward_pass(Impl& impl, std::string_view operation, const Tensor& x, const Tensor& weight,
                  const Tensor* bias, const ConvGeometry& geometry, Tensor& y) {
  const bool with_bias = bias != nullptr;
  const ConvProblem problem = Kind::describe(Kind::forward, x, weight, y, geometry, with_bias);
  dnnl_checked(operation, {&x, &weight, bias, &y}, [&] {
    const CachedPrimitive& primitive = impl.cached(problem.key, [&] {
      const auto pd = forward_descriptor<Kind>(impl.engine, problem, with_bias);
      CachedPrimitive cached{typename Kind::Forward(pd), implementation_name(pd)};
      attach_weights_reorder(impl.engine, cached, problem.user_weights, pd.weights_desc(), true);
      return cached;
    });
    run_forward(impl, primitive, problem, x, weight, bias, y);
  });
}

template <class Kind, class Impl>
void backward_data_pass(Impl& impl, std::string_view operation, const Tensor& dy,
                        const Tensor& weight, const ConvGeometry& geometry, Tensor& dx) {
  const ConvProblem problem = Kind::describe(Kind::backward_data, dx, weight, dy, geometry, false);
  dnnl_checked(operation, {&dy, &weight, &dx}, [&] {
    const CachedPrimitive& primitive = impl.cached(problem.key, [&] {
      const auto hint = forward_descriptor<Kind>(impl.engine, problem, false);
      const typename Kind::BackwardData::desc desc(
          Kind::algorithm, problem.source, problem.any_weights(), problem.destination,
          problem.strides, problem.dilation, problem.padding, problem.padding_right);
      const typename Kind::BackwardData::primitive_desc pd(desc, impl.engine, hint);
      CachedPrimitive cached{typename Kind::BackwardData(pd), implementation_name(pd)};
      attach_weights_reorder(impl.engine, cached, problem.user_weights, pd.weights_desc(), true);
      return cached;
    });
    run_backward_data(impl, primitive, problem, dy, weight, dx);
  });
}

// Whether every kernel size of (O, I, K...) weights is 1.
bool pointwise_kernel(const Tensor& weight) {
  for (std::size_t i = 2; i < weight.rank(); ++i)
    if (weight.dim(i) != 1) return false;
  return true;
}

template <class Kind, class Impl>
void backward_weights_pass(Impl& impl, std::string_view operation, const Tensor& x,
                           const Tensor& dy, const ConvGeometry& geometry, Tensor& dweight,
                           Tensor* dbias) {
  const bool with_bias = dbias != nullptr;
  const ConvProblem problem =
      Kind::describe(Kind::backward_weights, x, dweight, dy, geometry, with_bias);
  dnnl_checked(operation, {&x, &dy, &dweight, dbias}, [&] {
    const CachedPrimitive& primitive = impl.cached(problem.key, [&] {
      const auto hint = forward_descriptor<Kind>(impl.engine, problem, with_bias);
      // A named descriptor: oneDNN 2.6's primitive_desc keeps a pointer to it, which next_impl()
      // below reads.
      const auto desc =
          descriptor<typename Kind::BackwardWeights::desc>(problem, with_bias, Kind::algorithm);
      typename Kind::BackwardWeights::primitive_desc pd(desc, impl.engine, hint);
      // oneDNN 2.6's jit_1x1 backward-weights kernel (Debian 12's libdnnl2 2.6.3) reads out of
      // bounds for a strided 1x1 convolution on NHWC inputs whose channels are not a multiple of
      // 16 (e.g. 14 channels, 64x64 -> 32x32, stride 2: SIGSEGV). The tiramisu's transitions
      // down are such convolutions; the next implementation oneDNN offers computes them. A
      // strided 1x1x1 3-D convolution (or a transposed one) is kept away from it the same way.
      const bool strided_1x1 = pointwise_kernel(dweight) && geometry.stride > 1;
      while (strided_1x1 && implementation_name(pd).starts_with("jit_1x1") && pd.next_impl()) {
      }
      CachedPrimitive cached{typename Kind::BackwardWeights(pd), implementation_name(pd)};
      attach_weights_reorder(impl.engine, cached, problem.user_weights, pd.diff_weights_desc(),
                             false);
      return cached;
    });
    run_backward_weights(impl, primitive, problem, x, dy, dweight, dbias);
  });
}

// The operation a convolution's errors name: transposed by the geometry, else 2-D or 3-D by the
// rank of its activations.
std::string_view operation_name(const Tensor& activations, const ConvGeometry& geometry,
                                ConvPass pass) {
  return convolution_operation(static_cast<int>(activations.rank()) - 2, geometry.transposed, pass);
}

}  // namespace

// A transposed convolution runs oneDNN's deconvolution primitives, on the same weight handling.

void CpuBackend::do_convolution_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                        const ConvGeometry& geometry, Tensor& y) {
  const std::string_view operation = operation_name(x, geometry, ConvPass::forward);
  if (geometry.transposed)
    forward_pass<Transposed>(*impl_, operation, x, weight, bias, geometry, y);
  else
    forward_pass<Direct>(*impl_, operation, x, weight, bias, geometry, y);
}

void CpuBackend::do_convolution_backward_data(const Tensor& dy, const Tensor& weight,
                                              const ConvGeometry& geometry, Tensor& dx) {
  const std::string_view operation = operation_name(dy, geometry, ConvPass::backward_data);
  if (geometry.transposed)
    backward_data_pass<Transposed>(*impl_, operation, dy, weight, geometry, dx);
  else
    backward_data_pass<Direct>(*impl_, operation, dy, weight, geometry, dx);
}

void CpuBackend::do_convolution_backward_weights(const Tensor& x, const Tensor& dy,
                                                 const ConvGeometry& geometry, Tensor& dweight,
                                                 Tensor* dbias) {
  const std::string_view operation = operation_name(x, geometry, ConvPass::backward_weights);
  if (geometry.transposed)
    backward_weights_pass<Transposed>(*impl_, operation, x, dy, geometry, dweight, dbias);
  else
    backward_weights_pass<Direct>(*impl_, operation, x, dy, geometry, dweight, dbias);
}

}  // namespace hardy::core
