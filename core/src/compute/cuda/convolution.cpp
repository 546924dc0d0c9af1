// Convolutions on the GPU. NHWC activations in f32, bf16 or f16; weights are the f32 (O, I, KH,
// KW) master copy, converted on the device into cuDNN's NHWC filter layout (O, KH, KW, I) in the
// activation type before each use (a few MB per step, against GB of activations). Grouped
// convolutions are cuDNN's (cudnnSetConvolutionGroupCount), with (O, I / groups, KH, KW) weights
// converted the same way, except depthwise 3x3 ones (one filter per channel), which run hardy's
// own memory-bound kernels (depthwise.cu: cuDNN took 5-15 times longer for DeepCAM's).
//
// A transposed convolution (PyTorch's ConvTranspose2d, weights (I, O, KH, KW)) is the data
// gradient of the convolution from its output to its input, whose weights (O', I') = (I, O) are
// the very same tensor: its forward pass is that convolution's backward-data pass
// (cudnnConvolutionBackwardData), its data gradient that convolution's forward pass, and its
// weight gradient that convolution's weight gradient with x and dy in swapped roles. The output
// padding needs nothing: the convolution's floor division maps every allowed output size back to
// the input's.
//
// cuDNN's legacy convolution API (still in cuDNN 9): per shape and pass, descriptors are built
// once and the algorithm is chosen once, by timing every algorithm on the real tensors
// (cudnnFind*AlgorithmEx, like PyTorch's cudnn.benchmark) or by cuDNN's heuristics (cudnnGet*_v7),
// within CudaOptions::workspace_limit_bytes; the plan is cached. bf16/f16 run with tensor-op
// math and fp32 accumulation (compute type CUDNN_DATA_FLOAT); f32 runs with CUDNN_FMA_MATH
// (true fp32) unless TF32 is allowed.
//
// 1x1 convolutions with stride 1 and no padding are plain matrix products over the N*H*W rows
// of an NHWC tensor, so they go to cuBLAS (cublasGemmEx), which also writes the weight gradient
// straight into the f32 master gradient (bf16 inputs, fp32 output) without a bf16 round trip.
#include <fmt/format.h>

#include <climits>

#include "compute/cuda/cuda_support.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::core {

using namespace cuda;  // the backend's internal helpers, declared in cuda_support.hpp

namespace {

// Sizes of one convolution, validated: x (N, C, H, W), weight (O, C / groups, KH, KW),
// y (N, O, OH, OW).
struct ConvShape {
  Index n, c, h, w, o, kh, kw, oh, ow;
  ConvGeometry g;
  DType type;

  Index rows() const { return n * h * w; }  // of x; equals n * oh * ow for a GEMM convolution
  Index group_inputs() const { return c / g.groups; }  // the weights' second dimension
  Index weight_count() const { return o * group_inputs() * kh * kw; }
  // One 3x3 filter per channel: depthwise.cu's kernels.
  bool depthwise() const {
    return g.groups > 1 && g.groups == c && o == c && kh == depthwise_kernel &&
           kw == depthwise_kernel;
  }
  DepthwiseShape depthwise_shape() const {
    return {.n = n,
            .c = c,
            .h = h,
            .w = w,
            .oh = oh,
            .ow = ow,
            .stride = g.stride,
            .padding = g.padding,
            .dilation = g.dilation};
  }
  bool gemm() const {
    return kh == 1 && kw == 1 && g.stride == 1 && g.padding == 0 && g.groups == 1 &&
           rows() <= INT_MAX && c <= INT_MAX && o <= INT_MAX;
  }
};

// The sizes of x (N, C, H, W), weight (O, C / groups, KH, KW) and y (N, O, OH, OW), which
// Backend has checked against each other and the geometry (operands::check_convolution). For a
// transposed convolution, pass its y as x and its x as y (operands::check_transposed_convolution
// checked that relation).
ConvShape conv_shape(const Tensor& x, const Tensor& weight, const Tensor& y,
                     const ConvGeometry& g) {
  return {.n = x.n(),
          .c = x.c(),
          .h = x.h(),
          .w = x.w(),
          .o = weight.dim(0),
          .kh = weight.dim(2),
          .kw = weight.dim(3),
          .oh = y.h(),
          .ow = y.w(),
          .g = g,
          .type = x.dtype()};
}

cudnnDataType_t cudnn_type(DType type) {
  switch (type) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      throw InvalidArgument("cuDNN convolutions take f32, bf16 or f16 tensors, not " +
                            to_string(type));
  }
}

cudaDataType_t blas_type(DType type) {
  switch (type) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      throw InvalidArgument("cuBLAS products take f32, bf16 or f16 tensors, not " +
                            to_string(type));
  }
}

ConvKey key_of(ConvKind kind, const ConvShape& s) {
  const auto pass = static_cast<std::int64_t>(kind), type = static_cast<std::int64_t>(s.type);
  ConvKey key;
  key.values = {pass, type, s.n,  s.c,        s.h,         s.w,          s.o,       s.kh,
                s.kw, s.oh, s.ow, s.g.stride, s.g.padding, s.g.dilation, s.g.groups};
  return key;
}

const char* kind_name(ConvKind kind) {
  switch (kind) {
    case ConvKind::forward:
      return "forward";
    case ConvKind::backward_data:
      return "backward data";
    case ConvKind::backward_weights:
      return "backward weights";
  }
  return "?";
}

// The first (fastest, for Find; best ranked, for Get) algorithm that worked and fits the
// workspace limit. For strict fp32 only true-fp32 (FMA) results qualify when there are any.
template <class Perf>
bool choose_algorithm(const Perf* results, int count, std::size_t limit, bool strict_fp32,
                      ConvPlan& plan) {
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < count; ++i) {
      const Perf& r = results[i];
      if (r.status != CUDNN_STATUS_SUCCESS || r.memory > limit) continue;
      if (pass == 0 && strict_fp32 && r.mathType != CUDNN_FMA_MATH) continue;
      plan.algorithm = static_cast<int>(r.algo);
      plan.workspace_bytes = r.memory;
      plan.math = r.mathType;
      return true;
    }
    if (!strict_fp32) break;
  }
  return false;
}

// The operands a plan is searched with, in the pass's own order: forward (x, w, y), backward
// data (w, dy, dx), backward weights (x, dy, dw). The search writes into the last one, which
// the pass overwrites right after anyway.
struct SearchOperands {
  const void* a;
  const void* b;
  void* out;
};

ConvPlan& plan_for(CudaBackend::Impl& impl, ConvKind kind, const ConvShape& s,
                   const SearchOperands& operands) {
  const ConvKey key = key_of(kind, s);
  if (auto found = impl.conv_plans.find(key); found != impl.conv_plans.end()) return found->second;

  ConvPlan plan;
  const cudnnDataType_t type = cudnn_type(s.type);
  const auto as_int = [](Index v) { return static_cast<int>(v); };
  HARDY_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan.x.get(), CUDNN_TENSOR_NHWC, type, as_int(s.n),
                                               as_int(s.c), as_int(s.h), as_int(s.w)));
  HARDY_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan.y.get(), CUDNN_TENSOR_NHWC, type, as_int(s.n),
                                               as_int(s.o), as_int(s.oh), as_int(s.ow)));
  HARDY_CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan.w.get(), type, CUDNN_TENSOR_NHWC, as_int(s.o),
                                               as_int(s.group_inputs()), as_int(s.kh),
                                               as_int(s.kw)));
  HARDY_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      plan.conv.get(), s.g.padding, s.g.padding, s.g.stride, s.g.stride, s.g.dilation, s.g.dilation,
      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  HARDY_CUDNN_CHECK(cudnnSetConvolutionGroupCount(plan.conv.get(), s.g.groups));
  const bool strict_fp32 = s.type == DType::f32 && !impl.options.allow_tf32;
  const cudnnMathType_t requested = s.type != DType::f32 ? CUDNN_TENSOR_OP_MATH
                                    : strict_fp32        ? CUDNN_FMA_MATH
                                                         : CUDNN_DEFAULT_MATH;
  HARDY_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv.get(), requested));
  // cuDNN must agree with hardy about the output size, or the descriptors are wrong.
  int out_n = 0, out_c = 0, out_h = 0, out_w = 0;
  HARDY_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(
      plan.conv.get(), plan.x.get(), plan.w.get(), &out_n, &out_c, &out_h, &out_w));
  if (out_n != s.n || out_c != s.o || out_h != s.oh || out_w != s.ow)
    throw BackendError(
        fmt::format("cuDNN computes output [{},{},{},{}] for a convolution hardy "
                    "sizes [{},{},{},{}]",
                    out_n, out_c, out_h, out_w, s.n, s.o, s.oh, s.ow));

  const std::size_t limit = impl.options.workspace_limit_bytes;
  const bool benchmark = impl.options.benchmark_algorithms;
  void* workspace = benchmark ? impl.workspace.get(limit) : nullptr;
  constexpr int max_results = 16;
  int returned = 0;
  bool chosen = false;
  cudnnHandle_t handle = impl.cudnn.get();
  switch (kind) {
    case ConvKind::forward: {
      cudnnConvolutionFwdAlgoPerf_t results[max_results];
      if (benchmark)
        HARDY_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
            handle, plan.x.get(), operands.a, plan.w.get(), operands.b, plan.conv.get(),
            plan.y.get(), operands.out, max_results, &returned, results, workspace, limit));
      else
        HARDY_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, plan.x.get(), plan.w.get(),
                                                                 plan.conv.get(), plan.y.get(),
                                                                 max_results, &returned, results));
      chosen = choose_algorithm(results, returned, limit, strict_fp32, plan);
      break;
    }
    case ConvKind::backward_data: {
      cudnnConvolutionBwdDataAlgoPerf_t results[max_results];
      if (benchmark)
        HARDY_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
            handle, plan.w.get(), operands.a, plan.y.get(), operands.b, plan.conv.get(),
            plan.x.get(), operands.out, max_results, &returned, results, workspace, limit));
      else
        HARDY_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
            handle, plan.w.get(), plan.y.get(), plan.conv.get(), plan.x.get(), max_results,
            &returned, results));
      chosen = choose_algorithm(results, returned, limit, strict_fp32, plan);
      break;
    }
    case ConvKind::backward_weights: {
      cudnnConvolutionBwdFilterAlgoPerf_t results[max_results];
      if (benchmark)
        HARDY_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            handle, plan.x.get(), operands.a, plan.y.get(), operands.b, plan.conv.get(),
            plan.w.get(), operands.out, max_results, &returned, results, workspace, limit));
      else
        HARDY_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            handle, plan.x.get(), plan.y.get(), plan.conv.get(), plan.w.get(), max_results,
            &returned, results));
      chosen = choose_algorithm(results, returned, limit, strict_fp32, plan);
      break;
    }
  }
  if (!chosen)
    throw BackendError(fmt::format(
        "cuDNN has no {} algorithm for a {} convolution x [{},{},{},{}], weight [{},{},{},{}], "
        "stride {}, padding {}, dilation {}, groups {} within a {} MiB workspace (of {} tried)",
        kind_name(kind), to_string(s.type), s.n, s.c, s.h, s.w, s.o, s.group_inputs(), s.kh, s.kw,
        s.g.stride, s.g.padding, s.g.dilation, s.g.groups, limit >> 20, returned));
  HARDY_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv.get(), plan.math));
  return impl.conv_plans.emplace(key, std::move(plan)).first->second;
}

// Weights in the layout and type a pass reads: cuDNN's (O, KH, KW, I) in the activation type.
// For a 1x1 kernel that layout is the (O, I) matrix itself, so f32 GEMMs read the master copy.
const void* weights_for(CudaBackend::Impl& impl, const Tensor& weight, const ConvShape& s) {
  if (s.type == DType::f32 && s.kh == 1 && s.kw == 1) return weight.raw();
  void* converted =
      impl.weights.get(static_cast<std::size_t>(s.weight_count()) * dtype_size(s.type));
  weights_to_ohwi(weight.data<float>(), converted, s.type, s.o, s.group_inputs(), s.kh, s.kw,
                  impl.s());
  return converted;
}

cublasComputeType_t gemm_compute(const CudaBackend::Impl& impl, DType type) {
  return type == DType::f32 && impl.options.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                       : CUBLAS_COMPUTE_32F;
}

// cuBLAS is column-major: an NHWC activation with R rows of K channels is a K x R matrix (ld K),
// and (O, I) weights are an I x O matrix (ld I).
void gemm(CudaBackend::Impl& impl, cublasOperation_t op_a, cublasOperation_t op_b, Index m, Index n,
          Index k, const void* a, DType a_type, Index lda, const void* b, Index ldb, void* c,
          DType c_type, Index ldc, DType input_type) {
  const float one = 1.0f, zero = 0.0f;
  const auto as_int = [](Index v) { return static_cast<int>(v); };
  HARDY_CUBLAS_CHECK(cublasGemmEx(impl.cublas.get(), op_a, op_b, as_int(m), as_int(n), as_int(k),
                                  &one, a, blas_type(a_type), as_int(lda), b, blas_type(input_type),
                                  as_int(ldb), &zero, c, blas_type(c_type), as_int(ldc),
                                  gemm_compute(impl, input_type), CUBLAS_GEMM_DEFAULT));
}

void add_bias_gradient(CudaBackend::Impl& impl, const Tensor& dy, Tensor& dbias) {
  const Index rows = dy.n() * dy.h() * dy.w(), channels = dy.c();
  float* partials = impl.partials.get_as<float>(
      static_cast<std::size_t>(std::max<Index>(channel_sums_scratch(1, rows, channels), 1)));
  double* sums = impl.sums.get_as<double>(static_cast<std::size_t>(2 * channels));
  ChannelSumInput input;
  input.x = dy.raw();
  channel_sums(ChannelSum::values, input, dy.dtype(), 1, rows, channels, partials, sums, impl.s());
  doubles_to_floats(sums, 1, dbias.data<float>(), channels, 1.0, impl.s());
}

// The three passes of the convolution s on its operands: x (N, C, H, W) or dx, y (N, O, OH, OW)
// or dy, and the f32 (O, C / groups, KH, KW) weights or their gradient.
void convolve(CudaBackend::Impl& impl, const ConvShape& s, const void* x, const Tensor& weight,
              void* y) {
  if (s.depthwise())
    return depthwise_forward(x, weight.data<float>(), y, s.type, s.depthwise_shape(), impl.s());
  const void* w = weights_for(impl, weight, s);
  if (s.gemm()) {
    // y (O x R) = W^T (O x C) * x (C x R)
    gemm(impl, CUBLAS_OP_T, CUBLAS_OP_N, s.o, s.rows(), s.c, w, s.type, s.c, x, s.c, y, s.type, s.o,
         s.type);
    return;
  }
  const ConvPlan& plan = plan_for(impl, ConvKind::forward, s, {x, w, y});
  const float one = 1.0f, zero = 0.0f;
  void* workspace = impl.workspace.get(plan.workspace_bytes);
  HARDY_CUDNN_CHECK(cudnnConvolutionForward(
      impl.cudnn.get(), &one, plan.x.get(), x, plan.w.get(), w, plan.conv.get(),
      static_cast<cudnnConvolutionFwdAlgo_t>(plan.algorithm), workspace, plan.workspace_bytes,
      &zero, plan.y.get(), y));
}

void convolve_backward_data(CudaBackend::Impl& impl, const ConvShape& s, const void* dy,
                            const Tensor& weight, void* dx) {
  if (s.depthwise())
    return depthwise_backward_data(dy, weight.data<float>(), dx, s.type, s.depthwise_shape(),
                                   impl.s());
  const void* w = weights_for(impl, weight, s);
  if (s.gemm()) {
    // dx (C x R) = W (C x O) * dy (O x R)
    gemm(impl, CUBLAS_OP_N, CUBLAS_OP_N, s.c, s.rows(), s.o, w, s.type, s.c, dy, s.o, dx, s.type,
         s.c, s.type);
    return;
  }
  const ConvPlan& plan = plan_for(impl, ConvKind::backward_data, s, {w, dy, dx});
  const float one = 1.0f, zero = 0.0f;
  void* workspace = impl.workspace.get(plan.workspace_bytes);
  HARDY_CUDNN_CHECK(cudnnConvolutionBackwardData(
      impl.cudnn.get(), &one, plan.w.get(), w, plan.y.get(), dy, plan.conv.get(),
      static_cast<cudnnConvolutionBwdDataAlgo_t>(plan.algorithm), workspace, plan.workspace_bytes,
      &zero, plan.x.get(), dx));
}

void convolve_backward_weights(CudaBackend::Impl& impl, const ConvShape& s, const void* x,
                               const void* dy, Tensor& dweight) {
  if (s.depthwise()) {
    const DepthwiseShape shape = s.depthwise_shape();
    float* scratch = impl.partials.get_as<float>(
        static_cast<std::size_t>(depthwise_backward_weights_scratch(shape)));
    return depthwise_backward_weights(x, dy, dweight.data<float>(), s.type, shape, scratch,
                                      impl.s());
  }
  if (s.gemm()) {
    // dW (C x O) = x (C x R) * dy^T (R x O), accumulated in fp32 and written as f32 directly.
    gemm(impl, CUBLAS_OP_N, CUBLAS_OP_T, s.c, s.o, s.rows(), x, s.type, s.c, dy, s.o, dweight.raw(),
         DType::f32, s.c, s.type);
    return;
  }
  // cuDNN writes the gradient in the activation type and (O, KH, KW, C / groups) layout.
  void* converted =
      impl.weights.get(static_cast<std::size_t>(s.weight_count()) * dtype_size(s.type));
  const ConvPlan& plan = plan_for(impl, ConvKind::backward_weights, s, {x, dy, converted});
  const float one = 1.0f, zero = 0.0f;
  void* workspace = impl.workspace.get(plan.workspace_bytes);
  HARDY_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
      impl.cudnn.get(), &one, plan.x.get(), x, plan.y.get(), dy, plan.conv.get(),
      static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan.algorithm), workspace, plan.workspace_bytes,
      &zero, plan.w.get(), converted));
  weights_from_ohwi(converted, s.type, dweight.data<float>(), s.o, s.group_inputs(), s.kh, s.kw,
                    impl.s());
}

}  // namespace

void CudaBackend::do_conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                    const ConvGeometry& geometry, Tensor& y) {
  const ConvShape s = conv_shape(x, weight, y, geometry);
  convolve(*impl_, s, x.raw(), weight, y.raw());
  if (bias != nullptr)
    add_channel_bias(y.raw(), s.type, bias->data<float>(), s.n * s.oh * s.ow, s.o, impl_->s());
}

void CudaBackend::do_conv2d_backward_data(const Tensor& dy, const Tensor& weight,
                                          const ConvGeometry& geometry, Tensor& dx) {
  convolve_backward_data(*impl_, conv_shape(dx, weight, dy, geometry), dy.raw(), weight, dx.raw());
}

void CudaBackend::do_conv2d_backward_weights(const Tensor& x, const Tensor& dy,
                                             const ConvGeometry& geometry, Tensor& dweight,
                                             Tensor* dbias) {
  convolve_backward_weights(*impl_, conv_shape(x, dweight, dy, geometry), x.raw(), dy.raw(),
                            dweight);
  if (dbias != nullptr) add_bias_gradient(*impl_, dy, *dbias);
}

// ---- transposed convolution: the convolution from y to x, run backwards ----

void CudaBackend::do_conv2d_transpose_forward(const Tensor& x, const Tensor& weight,
                                              const Tensor* bias, const ConvGeometry& geometry,
                                              Tensor& y) {
  const ConvShape s = conv_shape(y, weight, x, geometry);
  convolve_backward_data(*impl_, s, x.raw(), weight, y.raw());
  if (bias != nullptr)
    add_channel_bias(y.raw(), s.type, bias->data<float>(), s.rows(), s.c, impl_->s());
}

void CudaBackend::do_conv2d_transpose_backward_data(const Tensor& dy, const Tensor& weight,
                                                    const ConvGeometry& geometry, Tensor& dx) {
  convolve(*impl_, conv_shape(dy, weight, dx, geometry), dy.raw(), weight, dx.raw());
}

void CudaBackend::do_conv2d_transpose_backward_weights(const Tensor& x, const Tensor& dy,
                                                       const ConvGeometry& geometry,
                                                       Tensor& dweight, Tensor* dbias) {
  convolve_backward_weights(*impl_, conv_shape(dy, dweight, x, geometry), dy.raw(), x.raw(),
                            dweight);
  if (dbias != nullptr) add_bias_gradient(*impl_, dy, *dbias);
}

}  // namespace hardy::core
