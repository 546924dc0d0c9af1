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
// A dense layer (x (N, K), weights (O, K)) is such a 1x1 convolution over N pixels.
//
// 3-D convolutions (NDHWC, weights (O, I, KD, KH, KW)) are the same code with cuDNN's Nd
// descriptors: the tensors described by their dims and channels-last strides, the filter as
// NHWC (cuDNN's (O, KD, KH, KW, I)), which is the 2-D conversion of the weights with KD * KH
// rows of the kernel.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <climits>

#include "compute/cuda/cuda_support.hpp"
#include "hardy/core/support/enum_names.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::core {

using namespace cuda;  // the backend's internal helpers, declared in cuda_support.hpp

namespace {

// Sizes of one convolution, validated: x (N, C, [D,] H, W), weight (O, C / groups, [KD,] KH,
// KW), y (N, O, [OD,] OH, OW); a 2-D convolution has d = kd = od = 1 and volumetric false.
struct ConvShape {
  Index n, c, d, h, w, o, kd, kh, kw, od, oh, ow;
  ConvGeometry g;
  DType type;
  bool volumetric;

  Index rows() const { return n * d * h * w; }  // of x; n * od * oh * ow for a GEMM convolution
  Index group_inputs() const { return c / g.groups; }  // the weights' second dimension
  Index weight_count() const { return o * group_inputs() * kd * kh * kw; }
  // One 3x3 filter per channel of a 2-D convolution: depthwise.cu's kernels.
  bool depthwise() const {
    return !volumetric && g.groups > 1 && g.groups == c && o == c && kh == depthwise_kernel &&
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
    return kd == 1 && kh == 1 && kw == 1 && g.stride == 1 && g.padding == 0 && g.groups == 1 &&
           rows() <= INT_MAX && c <= INT_MAX && o <= INT_MAX;
  }
};

// The sizes of x, weight and y, which Backend has checked against each other and the geometry
// (operands::check_convolution, check_convolution3d). For a transposed convolution, pass its y
// as x and its x as y (operands::check_transposed_convolution checked that relation).
ConvShape conv_shape(const Tensor& x, const Tensor& weight, const Tensor& y,
                     const ConvGeometry& g) {
  const bool volumetric = x.rank() == 5;
  // Spatial dimension i (0: D, 1: H, 2: W) of t; a 4-D tensor has depth 1.
  const auto spatial = [&](const Tensor& t, int i) -> Index {
    if (volumetric) return t.dim(2 + static_cast<std::size_t>(i));
    return i == 0 ? 1 : t.dim(1 + static_cast<std::size_t>(i));
  };
  return {.n = x.dim(0),
          .c = x.dim(1),
          .d = spatial(x, 0),
          .h = spatial(x, 1),
          .w = spatial(x, 2),
          .o = weight.dim(0),
          .kd = spatial(weight, 0),
          .kh = spatial(weight, 1),
          .kw = spatial(weight, 2),
          .od = spatial(y, 0),
          .oh = spatial(y, 1),
          .ow = spatial(y, 2),
          .g = g,
          .type = x.dtype(),
          .volumetric = volumetric};
}

// A dense layer's x (N, K), weight (O, K) and y (N, O) as the 1x1 convolution of N pixels of K
// channels into O channels.
ConvShape dense_shape(const Tensor& x, const Tensor& weight) {
  return {.n = x.dim(0),
          .c = x.dim(1),
          .d = 1,
          .h = 1,
          .w = 1,
          .o = weight.dim(0),
          .kd = 1,
          .kh = 1,
          .kw = 1,
          .od = 1,
          .oh = 1,
          .ow = 1,
          .g = {},
          .type = x.dtype(),
          .volumetric = false};
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
  key.values = {pass, type, s.n,  s.c,  s.d,  s.h,        s.w,         s.o,          s.kd,
                s.kh, s.kw, s.od, s.oh, s.ow, s.g.stride, s.g.padding, s.g.dilation, s.g.groups};
  return key;
}

constexpr std::string_view kConvKindNames[] = {"forward", "backward data", "backward weights"};
static_assert(std::size(kConvKindNames) ==
              static_cast<std::size_t>(ConvKind::backward_weights) + 1);

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

// The descriptors of a 2-D convolution: NHWC tensors and filter, a 2-D convolution.
void describe_planar(ConvPlan& plan, const ConvShape& s, cudnnDataType_t type) {
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
}

// An NDHWC tensor (N, C, D, H, W) for cuDNN's Nd API: logical dims with channels-last strides.
void describe_ndhwc(TensorDescriptor& descriptor, cudnnDataType_t type, Index n, Index c, Index d,
                    Index h, Index w) {
  const auto as_int = [](Index v) { return static_cast<int>(v); };
  const int dims[5] = {as_int(n), as_int(c), as_int(d), as_int(h), as_int(w)};
  const int strides[5] = {as_int(d * h * w * c), 1, as_int(h * w * c), as_int(w * c), as_int(c)};
  HARDY_CUDNN_CHECK(cudnnSetTensorNdDescriptor(descriptor.get(), type, 5, dims, strides));
}

// The descriptors of a 3-D convolution: NDHWC tensors, the (O, KD, KH, KW, I) filter (cuDNN's
// NHWC format for 5-D filters) and a 3-D convolution with one geometry for every dimension.
void describe_volumetric(ConvPlan& plan, const ConvShape& s, cudnnDataType_t type) {
  const auto as_int = [](Index v) { return static_cast<int>(v); };
  describe_ndhwc(plan.x, type, s.n, s.c, s.d, s.h, s.w);
  describe_ndhwc(plan.y, type, s.n, s.o, s.od, s.oh, s.ow);
  const int filter[5] = {as_int(s.o), as_int(s.group_inputs()), as_int(s.kd), as_int(s.kh),
                         as_int(s.kw)};
  HARDY_CUDNN_CHECK(cudnnSetFilterNdDescriptor(plan.w.get(), type, CUDNN_TENSOR_NHWC, 5, filter));
  const int padding[3] = {s.g.padding, s.g.padding, s.g.padding};
  const int stride[3] = {s.g.stride, s.g.stride, s.g.stride};
  const int dilation[3] = {s.g.dilation, s.g.dilation, s.g.dilation};
  HARDY_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(plan.conv.get(), 3, padding, stride, dilation,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
}

ConvPlan& plan_for(CudaBackend::Impl& impl, ConvKind kind, const ConvShape& s,
                   const SearchOperands& operands) {
  const ConvKey key = key_of(kind, s);
  if (auto found = impl.conv_plans.find(key); found != impl.conv_plans.end()) return found->second;

  ConvPlan plan;
  const cudnnDataType_t type = cudnn_type(s.type);
  const auto as_int = [](Index v) { return static_cast<int>(v); };
  if (s.volumetric)
    describe_volumetric(plan, s, type);
  else
    describe_planar(plan, s, type);
  HARDY_CUDNN_CHECK(cudnnSetConvolutionGroupCount(plan.conv.get(), s.g.groups));
  const bool strict_fp32 = s.type == DType::f32 && !impl.options.allow_tf32;
  const cudnnMathType_t requested = s.type != DType::f32 ? CUDNN_TENSOR_OP_MATH
                                    : strict_fp32        ? CUDNN_FMA_MATH
                                                         : CUDNN_DEFAULT_MATH;
  HARDY_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv.get(), requested));
  // cuDNN must agree with hardy about the output size, or the descriptors are wrong.
  std::array<int, 5> out{};
  const int rank = s.volumetric ? 5 : 4;
  HARDY_CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(plan.conv.get(), plan.x.get(),
                                                          plan.w.get(), rank, out.data()));
  const std::array<int, 5> expected =
      s.volumetric
          ? std::array<int, 5>{as_int(s.n), as_int(s.o), as_int(s.od), as_int(s.oh), as_int(s.ow)}
          : std::array<int, 5>{as_int(s.n), as_int(s.o), as_int(s.oh), as_int(s.ow), 0};
  if (out != expected)
    throw BackendError(fmt::format("cuDNN computes output [{}] for a convolution hardy sizes [{}]",
                                   fmt::join(out.begin(), out.begin() + rank, ","),
                                   fmt::join(expected.begin(), expected.begin() + rank, ",")));

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
        "cuDNN has no {} algorithm for a {} convolution x [{},{},{},{},{}], weight "
        "[{},{},{},{},{}] (depth 1: 2-D), stride {}, padding {}, dilation {}, groups {} within a "
        "{} MiB workspace (of {} tried)",
        name_of(kConvKindNames, kind), to_string(s.type), s.n, s.c, s.d, s.h, s.w, s.o,
        s.group_inputs(), s.kd, s.kh, s.kw, s.g.stride, s.g.padding, s.g.dilation, s.g.groups,
        limit >> 20, returned));
  HARDY_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv.get(), plan.math));
  return impl.conv_plans.emplace(key, std::move(plan)).first->second;
}

// Weights in the layout and type a pass reads: cuDNN's (O, [KD,] KH, KW, I) in the activation
// type (a 3-D kernel converts as a 2-D one of KD * KH rows). For a 1x1 kernel that layout is the
// (O, I) matrix itself, so f32 GEMMs read the master copy.
const void* weights_for(CudaBackend::Impl& impl, const Tensor& weight, const ConvShape& s) {
  if (s.type == DType::f32 && s.kd == 1 && s.kh == 1 && s.kw == 1) return weight.raw();
  void* converted =
      impl.weights.get(static_cast<std::size_t>(s.weight_count()) * dtype_size(s.type));
  weights_to_ohwi(weight.data<float>(), converted, s.type, s.o, s.group_inputs(), s.kd * s.kh, s.kw,
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

// dbias = dy summed over every row (pixel, or sample of a dense layer) per channel; dy is
// channels-last (N, C, ...) or (N, C).
void add_bias_gradient(CudaBackend::Impl& impl, const Tensor& dy, Tensor& dbias) {
  const Index channels = dy.dim(1), rows = dy.numel() / std::max<Index>(channels, 1);
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
  weights_from_ohwi(converted, s.type, dweight.data<float>(), s.o, s.group_inputs(), s.kd * s.kh,
                    s.kw, impl.s());
}

}  // namespace

// ---- convolution, 2-D (4-D activations, depth 1) or 3-D (5-D, Nd descriptors) alike ----

// A transposed convolution is the convolution from y to x, run backwards: its forward pass is
// that convolution's data gradient, its data gradient that convolution's forward pass, and its
// weight gradient that convolution's with x and dy in each other's places.

void CudaBackend::do_convolution_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                         const ConvGeometry& geometry, Tensor& y) {
  const ConvShape s =
      geometry.transposed ? conv_shape(y, weight, x, geometry) : conv_shape(x, weight, y, geometry);
  if (geometry.transposed)
    convolve_backward_data(*impl_, s, x.raw(), weight, y.raw());
  else
    convolve(*impl_, s, x.raw(), weight, y.raw());
  if (bias != nullptr) {
    // y's pixels and channels: the output side of the convolution, or the input side of the one
    // a transposed convolution runs backwards.
    const Index pixels = geometry.transposed ? s.rows() : s.n * s.od * s.oh * s.ow;
    const Index channels = geometry.transposed ? s.c : s.o;
    add_channel_bias(y.raw(), s.type, bias->data<float>(), pixels, channels, impl_->s());
  }
}

void CudaBackend::do_convolution_backward_data(const Tensor& dy, const Tensor& weight,
                                               const ConvGeometry& geometry, Tensor& dx) {
  if (geometry.transposed)
    convolve(*impl_, conv_shape(dy, weight, dx, geometry), dy.raw(), weight, dx.raw());
  else
    convolve_backward_data(*impl_, conv_shape(dx, weight, dy, geometry), dy.raw(), weight,
                           dx.raw());
}

void CudaBackend::do_convolution_backward_weights(const Tensor& x, const Tensor& dy,
                                                  const ConvGeometry& geometry, Tensor& dweight,
                                                  Tensor* dbias) {
  if (geometry.transposed)
    convolve_backward_weights(*impl_, conv_shape(dy, dweight, x, geometry), dy.raw(), x.raw(),
                              dweight);
  else
    convolve_backward_weights(*impl_, conv_shape(x, dweight, dy, geometry), x.raw(), dy.raw(),
                              dweight);
  if (dbias != nullptr) add_bias_gradient(*impl_, dy, *dbias);
}

// ---- dense layers: 1x1 convolutions of N pixels, always cuBLAS ----

void CudaBackend::do_dense_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                   Tensor& y) {
  const ConvShape s = dense_shape(x, weight);
  convolve(*impl_, s, x.raw(), weight, y.raw());
  if (bias != nullptr) add_channel_bias(y.raw(), s.type, bias->data<float>(), s.n, s.o, impl_->s());
}

void CudaBackend::do_dense_backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) {
  convolve_backward_data(*impl_, dense_shape(dx, weight), dy.raw(), weight, dx.raw());
}

void CudaBackend::do_dense_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight,
                                            Tensor* dbias) {
  convolve_backward_weights(*impl_, dense_shape(x, dweight), x.raw(), dy.raw(), dweight);
  if (dbias != nullptr) add_bias_gradient(*impl_, dy, *dbias);
}

}  // namespace hardy::core
