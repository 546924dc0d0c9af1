// CudaBackend: options, memory (allocation, copies with layout and type conversion, fill), and
// every operation except convolution (cuda/convolution.cpp). Each operation validates its
// tensors here, on the host, then queues kernels (kernels.hpp) on the backend's stream.
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>

#include "compute/cuda/cuda_support.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::core {

using namespace cuda;  // the backend's internal helpers, declared in cuda_support.hpp

// ---- options ----

namespace {

const char* environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

long environment_integer(const char* name, long minimum) {
  const char* value = environment(name);
  char* end = nullptr;
  const long number = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || number < minimum)
    throw InvalidArgument(fmt::format("{}={} is not an integer >= {}", name, value, minimum));
  return number;
}

}  // namespace

CudaOptions CudaOptions::from_environment() {
  CudaOptions options;
  if (const char* precision = environment("HARDY_CUDA_PRECISION")) {
    const std::string_view text = precision;
    if (text == "bf16")
      options.activation_dtype = DType::bf16;
    else if (text == "fp16" || text == "f16")
      options.activation_dtype = DType::f16;
    else if (text == "fp32" || text == "f32")
      options.activation_dtype = DType::f32;
    else
      throw InvalidArgument(
          fmt::format("HARDY_CUDA_PRECISION={} is not one of bf16, fp16, fp32", text));
  }
  if (environment("HARDY_CUDA_DEVICE"))
    options.device = static_cast<int>(environment_integer("HARDY_CUDA_DEVICE", 0));
  if (environment("HARDY_CUDA_TF32"))
    options.allow_tf32 = environment_integer("HARDY_CUDA_TF32", 0) != 0;
  if (environment("HARDY_CUDNN_WORKSPACE_MIB"))
    options.workspace_limit_bytes =
        static_cast<std::size_t>(environment_integer("HARDY_CUDNN_WORKSPACE_MIB", 0)) << 20;
  if (const char* algorithms = environment("HARDY_CUDNN_ALGORITHMS")) {
    const std::string_view text = algorithms;
    if (text == "benchmark")
      options.benchmark_algorithms = true;
    else if (text == "heuristic")
      options.benchmark_algorithms = false;
    else
      throw InvalidArgument(
          fmt::format("HARDY_CUDNN_ALGORITHMS={} is not benchmark or heuristic", text));
  }
  return options;
}

std::unique_ptr<Backend> make_cuda_backend() {
  return std::make_unique<CudaBackend>(CudaOptions::from_environment());
}

// ---- lifetime and properties ----

CudaBackend::CudaBackend(CudaOptions options) : impl_(std::make_unique<Impl>(options)) {}
CudaBackend::~CudaBackend() = default;

DType CudaBackend::activation_dtype() const { return impl_->options.activation_dtype; }
const CudaOptions& CudaBackend::options() const { return impl_->options; }
int CudaBackend::device_index() const { return impl_->device; }
cudaStream_t CudaBackend::stream() const { return impl_->s(); }
std::size_t CudaBackend::cached_convolution_count() const { return impl_->conv_plans.size(); }

std::string CudaBackend::device_description() const {
  const cudaDeviceProp& p = impl_->properties;
  return fmt::format("{} (sm_{}{}, {:.1f} GiB, {} SMs)", p.name, p.major, p.minor,
                     static_cast<double>(p.totalGlobalMem) / (1 << 30), p.multiProcessorCount);
}

void CudaBackend::synchronize() { impl_->wait("synchronize"); }

// ---- memory ----

Tensor CudaBackend::empty(std::vector<std::int64_t> dims, DType dtype, Layout layout) {
  std::int64_t count = 1;
  for (std::int64_t d : dims) {
    if (d < 0)
      throw InvalidArgument(fmt::format("empty: negative dimension in [{}]", fmt::join(dims, ",")));
    count *= d;
  }
  // Another thread (a checkpoint writer) may have another device current.
  HARDY_CUDA_CHECK(cudaSetDevice(impl_->device));
  auto buffer = std::make_shared<DeviceBuffer>(static_cast<std::size_t>(count) * dtype_size(dtype),
                                               impl_->stream);
  return Tensor(std::move(dims), dtype, layout, std::move(buffer));
}

namespace {

// nchw and nhwc address the same bytes when C == 1 or H * W == 1 (and a flat 4-D tensor is
// nchw), as in the CPU backend.
bool same_memory_order(const Tensor& a, const Tensor& b) {
  if (a.rank() != 4) return true;
  if ((a.layout() == Layout::nhwc) == (b.layout() == Layout::nhwc)) return true;
  return a.c() == 1 || a.h() * a.w() == 1;
}

cudaMemcpyKind copy_kind(const Tensor& src, const Tensor& dst) {
  const bool from_device = src.device() == Device::cuda, to_device = dst.device() == Device::cuda;
  if (from_device) return to_device ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost;
  return to_device ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost;
}

}  // namespace

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
  constexpr std::string_view operation = "copy";
  if (!src.defined() || !dst.defined())
    throw InvalidArgument(
        fmt::format("{}: {} is undefined", operation, src.defined() ? "dst" : "src"));
  if (src.dims() != dst.dims())
    throw InvalidArgument(fmt::format("{}: src {} and dst {} differ in dims", operation,
                                      src.describe(), dst.describe()));
  const bool convert = src.dtype() != dst.dtype();
  if (convert && !(is_float_type(src.dtype()) && is_float_type(dst.dtype())))
    throw InvalidArgument(
        fmt::format("{}: src {} and dst {} differ in dtype (only f32, bf16 and "
                    "f16 convert into each other)",
                    operation, src.describe(), dst.describe()));
  const bool reorder = !same_memory_order(src, dst);
  if (src.raw() == dst.raw() && src.numel() > 0) {
    if (!convert && !reorder) return;
    throw InvalidArgument(fmt::format("{}: src {} and dst {} share memory but need a conversion",
                                      operation, src.describe(), dst.describe()));
  }
  HARDY_CUDA_CHECK(cudaSetDevice(impl_->device));
  const bool to_host = dst.device() == Device::host;
  if (!convert && !reorder) {
    impl_->copy_async(dst.raw(), src.raw(), src.bytes(), copy_kind(src, dst));
    if (to_host) impl_->wait("copy to the host");
    return;
  }
  // Conversions run on the device: a host source is uploaded first, a host destination gets
  // the converted result downloaded.
  const void* from = src.raw();
  if (src.device() == Device::host) {
    void* staged = impl_->staging.get(src.bytes());
    impl_->copy_async(staged, src.raw(), src.bytes(), cudaMemcpyHostToDevice);
    from = staged;
  }
  void* to = to_host ? impl_->staging_out.get(dst.bytes()) : dst.raw();
  if (src.rank() == 4 && reorder)
    convert_permute(from, src.dtype(), src.layout() == Layout::nhwc, to, dst.dtype(),
                    dst.layout() == Layout::nhwc, src.n(), src.c(), src.h(), src.w(), impl_->s());
  else
    convert_permute(from, src.dtype(), false, to, dst.dtype(), false, src.numel(), 1, 1, 1,
                    impl_->s());
  if (to_host) {
    impl_->copy_async(dst.raw(), to, dst.bytes(), cudaMemcpyDeviceToHost);
    impl_->wait("copy to the host");
  }
}

void CudaBackend::fill(Tensor& t, float value) {
  require_device("fill", "t", t);
  cuda::fill(t.raw(), t.dtype(), value, t.numel(), impl_->s());
}

// ---- group normalization ----

namespace {

// A reduction's scratch: float partials and `extra` doubles after the 2 * batches * C results.
struct ReductionScratch {
  float* partials;
  double* sums;
};

ReductionScratch reduction_scratch(CudaBackend::Impl& impl, Index batches, Index rows,
                                   Index channels, Index extra_doubles = 0) {
  const Index partial_floats = channel_sums_scratch(batches, rows, channels);
  return {
      impl.partials.get_as<float>(static_cast<std::size_t>(std::max<Index>(partial_floats, 1))),
      impl.sums.get_as<double>(static_cast<std::size_t>(2 * batches * channels + extra_doubles))};
}

}  // namespace

void CudaBackend::group_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     int groups, float eps, bool fuse_relu, Tensor& y, Tensor& mean,
                                     Tensor& rstd) {
  constexpr std::string_view operation = "group_norm_forward";
  check_group_norm(operation, x, gamma, mean, rstd, groups);
  check_normalization(operation, x, {{"y", &y}}, {{"beta", &beta}});
  const Index batch = x.n(), channels = x.c(), pixels = x.h() * x.w();
  const double group_size = static_cast<double>(channels / groups * pixels);
  if (group_size == 0) return;
  const ReductionScratch scratch = reduction_scratch(*impl_, batch, pixels, channels);
  ChannelSumInput input;
  input.x = x.raw();
  // Two passes (mean, then centred squares), as on the CPU: one-pass sums of squares lose the
  // variance of data whose mean is large against its spread.
  channel_sums(ChannelSum::values, input, x.dtype(), batch, pixels, channels, scratch.partials,
               scratch.sums, impl_->s());
  group_norm_mean(scratch.sums, batch, channels, groups, group_size, mean.data<float>(),
                  impl_->s());
  input.mean = mean.data<float>();
  input.stat_batch_stride = groups;
  input.channels_per_stat = channels / groups;
  channel_sums(ChannelSum::centred_squares, input, x.dtype(), batch, pixels, channels,
               scratch.partials, scratch.sums, impl_->s());
  group_norm_rstd(scratch.sums, batch, channels, groups, group_size, eps, rstd.data<float>(),
                  impl_->s());
  cuda::group_norm_apply(x.raw(), x.dtype(), gamma.data<float>(), beta.data<float>(),
                         mean.data<float>(), rstd.data<float>(), batch, pixels, channels, groups,
                         fuse_relu, y.raw(), impl_->s());
}

void CudaBackend::group_norm_backward(const Tensor& x, const Tensor& y, const Tensor& dy,
                                      const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                                      int groups, bool fuse_relu, Tensor& dx, Tensor& dgamma,
                                      Tensor& dbeta) {
  constexpr std::string_view operation = "group_norm_backward";
  check_group_norm(operation, x, gamma, mean, rstd, groups);
  check_normalization(operation, x, {{"y", fuse_relu ? &y : nullptr}, {"dy", &dy}, {"dx", &dx}},
                      {{"dgamma", &dgamma}, {"dbeta", &dbeta}});
  const Index batch = x.n(), channels = x.c(), pixels = x.h() * x.w();
  const double group_size = static_cast<double>(channels / groups * pixels);
  const ReductionScratch scratch =
      reduction_scratch(*impl_, batch, pixels, channels, 2 * batch * groups);
  ChannelSumInput input;
  input.x = x.raw();
  input.dy = dy.raw();
  input.y = fuse_relu ? y.raw() : nullptr;
  input.relu_mask = fuse_relu;
  input.mean = mean.data<float>();
  input.rstd = rstd.data<float>();
  input.stat_batch_stride = groups;
  input.channels_per_stat = channels / groups;
  channel_sums(ChannelSum::backward, input, x.dtype(), batch, pixels, channels, scratch.partials,
               scratch.sums, impl_->s());
  double* group_terms = scratch.sums + 2 * batch * channels;
  group_norm_backward_terms(scratch.sums, gamma.data<float>(), batch, channels, groups,
                            dgamma.data<float>(), dbeta.data<float>(), group_terms, impl_->s());
  if (group_size == 0) return;
  cuda::group_norm_backward_data(x.raw(), input.y, dy.raw(), x.dtype(), fuse_relu,
                                 gamma.data<float>(), mean.data<float>(), rstd.data<float>(),
                                 group_terms, batch, pixels, channels, groups, group_size, dx.raw(),
                                 impl_->s());
}

// ---- batch normalization ----

void CudaBackend::batch_norm_statistics(const Tensor& x, Tensor& sum, Tensor& sum_squares) {
  constexpr std::string_view operation = "batch_norm_statistics";
  check_normalization(operation, x, {}, {{"sum", &sum}, {"sum_squares", &sum_squares}});
  const Index channels = x.c(), rows = x.n() * x.h() * x.w();
  const ReductionScratch scratch = reduction_scratch(*impl_, 1, rows, channels);
  ChannelSumInput input;
  input.x = x.raw();
  channel_sums(ChannelSum::values_and_squares, input, x.dtype(), 1, rows, channels,
               scratch.partials, scratch.sums, impl_->s());
  doubles_to_floats(scratch.sums, 1, sum.data<float>(), channels, 1.0, impl_->s());
  doubles_to_floats(scratch.sums + channels, 1, sum_squares.data<float>(), channels, 1.0,
                    impl_->s());
}

void CudaBackend::batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& variance,
                                   const Tensor& gamma, const Tensor& beta, float eps,
                                   bool fuse_relu, Tensor& y) {
  constexpr std::string_view operation = "batch_norm_apply";
  check_normalization(
      operation, x, {{"y", &y}},
      {{"mean", &mean}, {"variance", &variance}, {"gamma", &gamma}, {"beta", &beta}});
  cuda::batch_norm_apply(x.raw(), x.dtype(), mean.data<float>(), variance.data<float>(),
                         gamma.data<float>(), beta.data<float>(), eps, fuse_relu,
                         x.n() * x.h() * x.w(), x.c(), y.raw(), impl_->s());
}

void CudaBackend::batch_norm_backward_statistics(const Tensor& x, const Tensor& y, const Tensor& dy,
                                                 const Tensor& mean, const Tensor& variance,
                                                 float eps, bool fuse_relu, Tensor& dgamma,
                                                 Tensor& dbeta) {
  constexpr std::string_view operation = "batch_norm_backward_statistics";
  check_normalization(
      operation, x, {{"y", fuse_relu ? &y : nullptr}, {"dy", &dy}},
      {{"mean", &mean}, {"variance", &variance}, {"dgamma", &dgamma}, {"dbeta", &dbeta}});
  const Index channels = x.c(), rows = x.n() * x.h() * x.w();
  float* rstd = impl_->small.get_as<float>(static_cast<std::size_t>(channels));
  rstd_from_variance(variance.data<float>(), eps, channels, rstd, impl_->s());
  const ReductionScratch scratch = reduction_scratch(*impl_, 1, rows, channels);
  ChannelSumInput input;
  input.x = x.raw();
  input.dy = dy.raw();
  input.y = fuse_relu ? y.raw() : nullptr;
  input.relu_mask = fuse_relu;
  input.mean = mean.data<float>();
  input.rstd = rstd;
  channel_sums(ChannelSum::backward, input, x.dtype(), 1, rows, channels, scratch.partials,
               scratch.sums, impl_->s());
  doubles_to_floats(scratch.sums, 1, dgamma.data<float>(), channels, 1.0, impl_->s());
  doubles_to_floats(scratch.sums + channels, 1, dbeta.data<float>(), channels, 1.0, impl_->s());
}

void CudaBackend::batch_norm_backward_data(const Tensor& x, const Tensor& y, const Tensor& dy,
                                           const Tensor& mean, const Tensor& variance,
                                           const Tensor& gamma, const Tensor& dgamma,
                                           const Tensor& dbeta, float eps, bool fuse_relu,
                                           double count, Tensor& dx) {
  constexpr std::string_view operation = "batch_norm_backward_data";
  check_normalization(operation, x, {{"y", fuse_relu ? &y : nullptr}, {"dy", &dy}, {"dx", &dx}},
                      {{"mean", &mean},
                       {"variance", &variance},
                       {"gamma", &gamma},
                       {"dgamma", &dgamma},
                       {"dbeta", &dbeta}});
  if (!(count > 0))
    throw InvalidArgument(fmt::format("{}: count must be positive, got {}", operation, count));
  const Index channels = x.c();
  float* coefficients = impl_->small.get_as<float>(static_cast<std::size_t>(3 * channels));
  cuda::batch_norm_backward_data(
      x.raw(), fuse_relu ? y.raw() : nullptr, dy.raw(), x.dtype(), fuse_relu, mean.data<float>(),
      variance.data<float>(), gamma.data<float>(), dgamma.data<float>(), dbeta.data<float>(), eps,
      count, x.n() * x.h() * x.w(), channels, coefficients, dx.raw(), impl_->s());
}

// ---- activations and shape operations ----

namespace {

// Relu works on the flat array: any shape, as long as both sides agree in dims, dtype, layout.
void check_elementwise_pair(std::string_view operation, std::string_view role_a, const Tensor& a,
                            std::string_view role_b, const Tensor& b) {
  require_device(operation, role_a, a);
  require_device(operation, role_b, b);
  if (!is_float_type(a.dtype()) || a.dtype() != b.dtype() || a.dims() != b.dims() ||
      a.layout() != b.layout())
    throw InvalidArgument(fmt::format(
        "{}: {} ({}) and {} ({}) must be floating-point tensors of equal dims, dtype and layout",
        operation, role_a, a.describe(), role_b, b.describe()));
}

// Runs copy_channel_slices over the slices, max_slices_per_launch at a time.
template <class TensorPointer>
void copy_slices(const Tensor& whole, std::span<TensorPointer const> slices, bool to_whole,
                 cudaStream_t stream) {
  const Index rows = whole.n() * whole.h() * whole.w();
  Index first_channel = 0;
  for (std::size_t begin = 0; begin < slices.size(); begin += max_slices_per_launch) {
    ChannelSlices batch{};
    for (std::size_t i = begin; i < std::min(slices.size(), begin + max_slices_per_launch); ++i) {
      const Tensor& slice = *slices[i];
      // Inputs of a concatenation are only read; the kernel takes every slice as void*.
      batch.data[batch.count] = const_cast<void*>(slice.raw());
      batch.channels[batch.count] = slice.c();
      batch.first_channel[batch.count] = first_channel;
      first_channel += slice.c();
      ++batch.count;
    }
    copy_channel_slices(const_cast<void*>(whole.raw()), rows, whole.c(), batch,
                        static_cast<int>(dtype_size(whole.dtype())), to_whole, stream);
  }
}

}  // namespace

void CudaBackend::relu_forward(const Tensor& x, Tensor& y) {
  check_elementwise_pair("relu_forward", "x", x, "y", y);
  cuda::relu_forward(x.raw(), y.raw(), x.dtype(), x.numel(), impl_->s());
}

void CudaBackend::relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  check_elementwise_pair("relu_backward", "y", y, "dy", dy);
  check_elementwise_pair("relu_backward", "y", y, "dx", dx);
  cuda::relu_backward(y.raw(), dy.raw(), dx.raw(), y.dtype(), y.numel(), impl_->s());
}

void CudaBackend::upsample_bilinear_forward(const Tensor& x, Tensor& y) {
  check_spatial_pair("upsample_bilinear_forward", "x", x, "y", y);
  const LinearTaps rows = impl_->linear_taps(x.h(), y.h());
  const LinearTaps columns = impl_->linear_taps(x.w(), y.w());
  cuda::upsample_bilinear_forward(x.raw(), x.dtype(), x.n(), x.c(), x.h(), x.w(), y.h(), y.w(),
                                  rows, columns, y.raw(), impl_->s());
}

void CudaBackend::upsample_bilinear_backward(const Tensor& dy, Tensor& dx) {
  check_spatial_pair("upsample_bilinear_backward", "dy", dy, "dx", dx);
  const LinearTaps rows = impl_->linear_taps(dx.h(), dy.h());
  const LinearTaps columns = impl_->linear_taps(dx.w(), dy.w());
  const Index staged = dx.n() * dy.h() * dx.w() * dx.c();
  float* along_w =
      impl_->staging.get_as<float>(static_cast<std::size_t>(std::max<Index>(staged, 1)));
  cuda::upsample_bilinear_backward(dy.raw(), dy.dtype(), dx.n(), dx.c(), dx.h(), dx.w(), dy.h(),
                                   dy.w(), rows, columns, along_w, dx.raw(), impl_->s());
}

void CudaBackend::concat_channels(std::span<const Tensor* const> inputs, Tensor& y) {
  check_channel_slices("concat_channels", inputs, "y", y);
  copy_slices(y, inputs, /*to_whole=*/true, impl_->s());
}

void CudaBackend::split_channels(const Tensor& dy, std::span<Tensor* const> outputs) {
  check_channel_slices("split_channels", outputs, "dy", dy);
  copy_slices(dy, outputs, /*to_whole=*/false, impl_->s());
}

void CudaBackend::global_avg_pool_forward(const Tensor& x, Tensor& y) {
  constexpr std::string_view operation = "global_avg_pool_forward";
  check_spatial_pair(operation, "x", x, "y", y);
  require_dims(operation, "y", y, {x.n(), x.c(), 1, 1});
  const Index batch = x.n(), channels = x.c(), pixels = x.h() * x.w();
  const ReductionScratch scratch = reduction_scratch(*impl_, batch, pixels, channels);
  ChannelSumInput input;
  input.x = x.raw();
  channel_sums(ChannelSum::values, input, x.dtype(), batch, pixels, channels, scratch.partials,
               scratch.sums, impl_->s());
  global_avg_pool_finish(scratch.sums, batch, channels, static_cast<double>(pixels), y.raw(),
                         y.dtype(), impl_->s());
}

void CudaBackend::global_avg_pool_backward(const Tensor& dy, Tensor& dx) {
  constexpr std::string_view operation = "global_avg_pool_backward";
  check_spatial_pair(operation, "dx", dx, "dy", dy);
  require_dims(operation, "dy", dy, {dx.n(), dx.c(), 1, 1});
  cuda::global_avg_pool_backward(dy.raw(), dy.dtype(), dx.n(), dx.h() * dx.w(), dx.c(), dx.raw(),
                                 impl_->s());
}

// ---- loss ----

namespace {

void check_labels(std::string_view operation, const Tensor& logits, const Tensor& labels) {
  require_activation(operation, "logits", logits);
  require_device(operation, "labels", labels);
  if (labels.dtype() != DType::i32)
    throw InvalidArgument(
        fmt::format("{}: labels are {}, expected an i32 tensor", operation, labels.describe()));
  // With a single channel every layout addresses the same bytes.
  require_dims(operation, "labels", labels, {logits.n(), 1, logits.h(), logits.w()});
}

}  // namespace

double CudaBackend::softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                          std::span<const float> class_weights, float grad_scale,
                                          Tensor& dlogits) {
  constexpr std::string_view operation = "softmax_cross_entropy";
  check_labels(operation, logits, labels);
  require_like(operation, "dlogits", dlogits, "logits", logits);
  const Index classes = logits.c(), pixels = labels.numel();
  if (class_weights.size() != static_cast<std::size_t>(classes))
    throw InvalidArgument(fmt::format("{}: {} class weights for {} classes in logits {}", operation,
                                      class_weights.size(), classes, logits.describe()));
  // small: [max_reduction_blocks partials][first bad pixel][class weights]
  constexpr std::size_t partial_bytes = std::size_t{max_reduction_blocks} * sizeof(double);
  auto* base = static_cast<char*>(
      impl_->small.get(partial_bytes + sizeof(unsigned long long) + class_weights.size_bytes()));
  auto* partials = reinterpret_cast<double*>(base);
  auto* first_bad = reinterpret_cast<unsigned long long*>(base + partial_bytes);
  auto* weights = reinterpret_cast<float*>(base + partial_bytes + sizeof(unsigned long long));
  impl_->copy_async(weights, class_weights.data(), class_weights.size_bytes(),
                    cudaMemcpyHostToDevice);
  HARDY_CUDA_CHECK(cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned long long), impl_->s()));
  const int blocks = cuda::softmax_cross_entropy(
      logits.raw(), logits.dtype(), labels.data<std::int32_t>(), weights, pixels,
      static_cast<int>(classes), grad_scale, dlogits.raw(), partials, first_bad, impl_->s());
  // One copy back: the partials and the bad-pixel marker are adjacent.
  impl_->copy_async(impl_->pinned.as<char>(), base, partial_bytes + sizeof(unsigned long long),
                    cudaMemcpyDeviceToHost);
  impl_->wait(operation.data());
  const double* host_partials = impl_->pinned.as<double>();
  unsigned long long bad = 0;
  std::memcpy(&bad, impl_->pinned.as<char>() + partial_bytes, sizeof bad);
  if (bad != std::numeric_limits<unsigned long long>::max()) {
    // Labels come from data files: report the first bad one as the CPU backend does.
    std::int32_t label = 0;
    HARDY_CUDA_CHECK(cudaMemcpy(&label, labels.data<std::int32_t>() + bad, sizeof label,
                                cudaMemcpyDeviceToHost));
    const auto pixel = static_cast<std::int64_t>(bad), plane = labels.h() * labels.w();
    throw InvalidArgument(fmt::format("{}: label {} at (n={}, h={}, w={}) is outside [0, {})",
                                      operation, label, pixel / plane, pixel % plane / labels.w(),
                                      pixel % labels.w(), classes));
  }
  double total = 0.0;
  for (int b = 0; b < blocks; ++b) total += host_partials[b];
  return total;
}

void CudaBackend::argmax_channels(const Tensor& logits, Tensor& labels) {
  check_labels("argmax_channels", logits, labels);
  cuda::argmax_channels(logits.raw(), logits.dtype(), labels.data<std::int32_t>(), labels.numel(),
                        static_cast<int>(logits.c()), impl_->s());
}

// ---- element-wise operations for optimizers and gradient handling ----

namespace {}  // namespace

void CudaBackend::axpy(float alpha, const Tensor& x, Tensor& y) {
  constexpr std::string_view operation = "axpy";
  require_float(operation, "x", x);
  require_float(operation, "y", y);
  require_same_numel(operation, "x", x, "y", y);
  if (x.dtype() != y.dtype())
    throw InvalidArgument(fmt::format("{}: x ({}) and y ({}) differ in dtype", operation,
                                      x.describe(), y.describe()));
  cuda::axpy(alpha, x.raw(), y.raw(), y.dtype(), y.numel(), impl_->s());
}

void CudaBackend::scale(Tensor& x, float alpha) {
  require_float("scale", "x", x);
  cuda::scale(x.raw(), x.dtype(), alpha, x.numel(), impl_->s());
}

double CudaBackend::sum_squares(const Tensor& x) {
  require_float("sum_squares", "x", x);
  auto* partials = impl_->small.get_as<double>(max_reduction_blocks);
  const int blocks = sum_squares_partials(x.raw(), x.dtype(), x.numel(), partials, impl_->s());
  impl_->copy_async(impl_->pinned.as<double>(), partials,
                    static_cast<std::size_t>(blocks) * sizeof(double), cudaMemcpyDeviceToHost);
  impl_->wait("sum_squares");
  const double* host = impl_->pinned.as<double>();
  return std::accumulate(host, host + blocks, 0.0);
}

void CudaBackend::sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, float lr,
                             float momentum, float weight_decay, bool nesterov) {
  constexpr std::string_view operation = "sgd_update";
  require_device_f32(operation, "param", param);
  require_device_f32(operation, "grad", grad);
  require_device_f32(operation, "velocity", velocity);
  require_same_numel(operation, "param", param, "grad", grad);
  require_same_numel(operation, "param", param, "velocity", velocity);
  cuda::sgd_update(param.data<float>(), grad.data<float>(), velocity.data<float>(), param.numel(),
                   lr, momentum, weight_decay, nesterov, impl_->s());
}

void CudaBackend::adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr,
                              float beta1, float beta2, float eps, float weight_decay, long step) {
  constexpr std::string_view operation = "adam_update";
  require_device_f32(operation, "param", param);
  require_device_f32(operation, "grad", grad);
  require_device_f32(operation, "m", m);
  require_device_f32(operation, "v", v);
  require_same_numel(operation, "param", param, "grad", grad);
  require_same_numel(operation, "param", param, "m", m);
  require_same_numel(operation, "param", param, "v", v);
  if (step < 1) throw InvalidArgument(fmt::format("adam_update: step counts from 1, got {}", step));
  // Bias corrections folded into two scalars on the host, exactly as the CPU backend does.
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(beta1), step);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(beta2), step);
  cuda::adam_update(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(),
                    param.numel(), static_cast<float>(lr / bias_correction1),
                    static_cast<float>(1.0 / std::sqrt(bias_correction2)), beta1, beta2, eps,
                    weight_decay, impl_->s());
}

bool CudaBackend::has_non_finite(const Tensor& x) {
  require_float("has_non_finite", "x", x);
  int* flag = impl_->small.get_as<int>(1);
  HARDY_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), impl_->s()));
  find_non_finite(x.raw(), x.dtype(), x.numel(), flag, impl_->s());
  impl_->copy_async(impl_->pinned.as<int>(), flag, sizeof(int), cudaMemcpyDeviceToHost);
  impl_->wait("has_non_finite");
  return *impl_->pinned.as<int>() != 0;
}

}  // namespace hardy::core
