// CudaBackend: options, memory (allocation, copies with layout and type conversion, fill), and
// every operation except convolution (cuda/convolution.cpp). Operands arrive checked (Backend's
// public operations check them against operands::cuda_rules); each hook queues kernels
// (kernels.hpp) on the backend's stream.
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

#include "compute/cuda/cuda_support.hpp"
#include "compute/cuda_module.hpp"
#include "compute/dropout_mask.hpp"
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
  // hardy train --precision replaces this (make_cuda_backend); the variable stays for scripts.
  options.activation_dtype = core::activation_dtype(default_precision("cuda"));
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

std::unique_ptr<Backend> make_cuda_backend(std::optional<DType> activation_dtype) {
  CudaOptions options = CudaOptions::from_environment();
  if (activation_dtype) options.activation_dtype = *activation_dtype;
  return std::make_unique<CudaBackend>(options);
}

}  // namespace hardy::core

// The module's entry (compute/cuda_module.hpp): make_backend("cuda") loads this module for it.
extern "C" __attribute__((visibility("default"))) hardy::core::Backend* hardy_make_cuda_backend(
    const hardy::core::DType* activation_dtype) {
  return hardy::core::make_cuda_backend(activation_dtype ? std::optional(*activation_dtype)
                                                         : std::nullopt)
      .release();
}
static_assert(
    std::is_same_v<decltype(&hardy_make_cuda_backend), hardy::core::cuda_module::MakeBackend>);

namespace hardy::core {

// ---- lifetime and properties ----

CudaBackend::CudaBackend(CudaOptions options)
    : Backend(operands::cuda_rules), impl_(std::make_unique<Impl>(options)) {}
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

void CudaBackend::do_synchronize() { impl_->wait("synchronize"); }

// ---- memory ----

Tensor CudaBackend::do_empty(std::vector<std::int64_t> dims, DType dtype, Layout layout) {
  std::int64_t count = 1;
  for (std::int64_t d : dims) count *= d;
  // Another thread (a checkpoint writer) may have another device current.
  HARDY_CUDA_CHECK(cudaSetDevice(impl_->device));
  auto buffer = std::make_shared<DeviceBuffer>(static_cast<std::size_t>(count) * dtype_size(dtype),
                                               impl_->stream);
  return Tensor(std::move(dims), dtype, layout, std::move(buffer));
}

namespace {

// Channels second and channels last address the same bytes when C == 1 or the spatial size is 1
// (and a flat 4-D or 5-D tensor is channels second), as in the CPU backend.
bool same_memory_order(const Tensor& a, const Tensor& b) {
  if (a.rank() != 4 && a.rank() != 5) return true;
  if ((a.layout() == Layout::nhwc) == (b.layout() == Layout::nhwc)) return true;
  return a.dim(1) == 1 || a.spatial_size() == 1;
}

cudaMemcpyKind copy_kind(const Tensor& src, const Tensor& dst) {
  const bool from_device = src.device() == Device::cuda, to_device = dst.device() == Device::cuda;
  if (from_device) return to_device ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost;
  return to_device ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost;
}

}  // namespace

void CudaBackend::Impl::convert_async(const Tensor& src, const Tensor& dst, void* to,
                                      cuda::DeviceScratch& scratch, cudaStream_t on) {
  const void* from = src.raw();
  if (src.device() == Device::host) {
    void* staged = scratch.get(src.bytes());
    HARDY_CUDA_CHECK(cudaMemcpyAsync(staged, src.raw(), src.bytes(), cudaMemcpyHostToDevice, on));
    from = staged;
  }
  convert_on_device(from, src.dtype(), src.layout(), dst, to, on);
}

void CudaBackend::Impl::convert_on_device(const void* from, DType from_dtype, Layout from_layout,
                                          const Tensor& dst, void* to, cudaStream_t on) {
  // Channels second and channels last address the same bytes when C == 1 or the spatial size
  // is 1 (a flat tensor is channels second). A 5-D permutation between NCDHW and NDHWC is the
  // 4-D one with D * H * W pixels in a row.
  const bool from_nhwc = from_layout == Layout::nhwc, to_nhwc = dst.layout() == Layout::nhwc;
  if ((dst.rank() == 4 || dst.rank() == 5) && from_nhwc != to_nhwc && dst.dim(1) != 1 &&
      dst.spatial_size() != 1)
    convert_permute(from, from_dtype, from_nhwc, to, dst.dtype(), to_nhwc, dst.dim(0), dst.dim(1),
                    dst.spatial_size(), 1, on);
  else
    convert_permute(from, from_dtype, false, to, dst.dtype(), false, dst.numel(), 1, 1, 1, on);
}

namespace {

// start_upload()'s copies, on the lane's stream: it waits (on the device) for the work queued
// on the backend's stream before the start, and the backend's stream waits for its end.
class CudaInputUpload final : public InputUpload {
 public:
  CudaInputUpload(CudaBackend::Impl& impl, const OperandRules& rules)
      : InputUpload(rules), impl_(impl), lane_(*impl.upload_lane) {
    if (lane_.in_use)
      throw Error("start_upload: the previous upload of this CUDA backend is still running");
    HARDY_CUDA_CHECK(cudaSetDevice(impl_.device));
    lane_.queued.record(impl_.s());
    lane_.queued.make_wait(lane_.stream->get());
    lane_.in_use = true;
  }
  // An upload dropped before hand_over() (its loads failed, or the batch was not wanted) may
  // still be reading its host source: the caller reuses that memory next.
  ~CudaInputUpload() override {
    if (!finished_) cudaStreamSynchronize(lane_.stream->get());
    lane_.in_use = false;
  }
  double finish() override {
    HARDY_CUDA_CHECK(cudaSetDevice(impl_.device));
    lane_.end.record(lane_.stream->get());
    HARDY_CUDA_CHECK(cudaEventSynchronize(lane_.end.get()));
    finished_ = true;
    if (!copied_) return 0.0;
    float ms = 0;
    HARDY_CUDA_CHECK(cudaEventElapsedTime(&ms, lane_.start.get(), lane_.end.get()));
    return ms / 1e3;
  }
  void hand_over() override {
    if (!finished_) throw Error("InputUpload::hand_over before finish");
    HARDY_CUDA_CHECK(cudaSetDevice(impl_.device));
    lane_.end.make_wait(impl_.s());
  }

 protected:
  void do_copy(const Tensor& src, Tensor& dst) override {
    HARDY_CUDA_CHECK(cudaSetDevice(impl_.device));
    // Timed from the first copy: before it the stream idles while the host loads the batch.
    if (!std::exchange(copied_, true)) lane_.start.record(lane_.stream->get());
    if (src.dtype() == dst.dtype() && same_memory_order(src, dst))
      HARDY_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.bytes(), cudaMemcpyHostToDevice,
                                       lane_.stream->get()));
    else
      impl_.convert_async(src, dst, dst.raw(), lane_.staging, lane_.stream->get());
  }
  // Each sample straight from its own memory into its place: in dst itself when nothing needs
  // converting, else in the lane's staging, converted from there in one kernel.
  void do_copy_samples(std::span<const Tensor* const> samples, Tensor& dst) override {
    HARDY_CUDA_CHECK(cudaSetDevice(impl_.device));
    if (!std::exchange(copied_, true)) lane_.start.record(lane_.stream->get());
    const Tensor& first = *samples.front();
    const bool direct = first.dtype() == dst.dtype() && same_memory_order(first, dst);
    const std::size_t bytes = first.bytes();
    auto* to =
        static_cast<std::byte*>(direct ? dst.raw() : lane_.staging.get(bytes * samples.size()));
    for (std::size_t i = 0; i < samples.size(); ++i)
      HARDY_CUDA_CHECK(cudaMemcpyAsync(to + i * bytes, samples[i]->raw(), bytes,
                                       cudaMemcpyHostToDevice, lane_.stream->get()));
    if (!direct)
      impl_.convert_on_device(to, first.dtype(), first.layout(), dst, dst.raw(),
                              lane_.stream->get());
  }

 private:
  CudaBackend::Impl& impl_;
  cuda::UploadLane& lane_;
  bool copied_ = false, finished_ = false;
};

// Two timing events on the backend's stream. Made per span (a few microseconds each): a span
// lives until the step it times is committed, when the next ones are already queued.
class CudaDeviceSpan final : public DeviceSpan {
 public:
  explicit CudaDeviceSpan(CudaBackend::Impl& impl)
      : device_(impl.device), stream_(impl.stream), start_(true), end_(true) {
    HARDY_CUDA_CHECK(cudaSetDevice(device_));
    start_.record(stream_->get());
  }
  void end() override {
    HARDY_CUDA_CHECK(cudaSetDevice(device_));
    end_.record(stream_->get());
    ended_ = true;
  }
  double seconds() override {
    if (!ended_) throw Error("DeviceSpan::seconds before end");
    HARDY_CUDA_CHECK(cudaSetDevice(device_));
    HARDY_CUDA_CHECK(cudaEventSynchronize(end_.get()));
    float ms = 0;
    HARDY_CUDA_CHECK(cudaEventElapsedTime(&ms, start_.get(), end_.get()));
    return ms / 1e3;
  }

 private:
  int device_;
  std::shared_ptr<const cuda::Stream> stream_;
  cuda::Event start_, end_;
  bool ended_ = false;
};

}  // namespace

std::unique_ptr<DeviceSpan> CudaBackend::do_start_device_span() {
  return std::make_unique<CudaDeviceSpan>(*impl_);
}

std::unique_ptr<InputUpload> CudaBackend::do_start_upload() {
  if (!impl_->upload_lane) {
    HARDY_CUDA_CHECK(cudaSetDevice(impl_->device));
    impl_->upload_lane = std::make_unique<cuda::UploadLane>();
  }
  return std::make_unique<CudaInputUpload>(*impl_, operand_rules());
}

void CudaBackend::do_copy(const Tensor& src, Tensor& dst) {
  constexpr std::string_view operation = "copy";
  const bool convert = src.dtype() != dst.dtype();
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
  void* to = to_host ? impl_->staging_out.get(dst.bytes()) : dst.raw();
  impl_->convert_async(src, dst, to, impl_->staging, impl_->s());
  if (to_host) {
    impl_->copy_async(dst.raw(), to, dst.bytes(), cudaMemcpyDeviceToHost);
    impl_->wait("copy to the host");
  }
}

void CudaBackend::do_copy_many(std::span<const Tensor* const> src, std::span<Tensor* const> dst) {
  // Plain copies are queued and waited for once; conversions take do_copy's path.
  HARDY_CUDA_CHECK(cudaSetDevice(impl_->device));
  bool to_host = false;
  for (std::size_t i = 0; i < src.size(); ++i) {
    const Tensor& from = *src[i];
    Tensor& to = *dst[i];
    if (from.dtype() != to.dtype() || !same_memory_order(from, to) ||
        (from.raw() == to.raw() && from.numel() > 0)) {
      do_copy(from, to);
      continue;
    }
    impl_->copy_async(to.raw(), from.raw(), from.bytes(), copy_kind(from, to));
    to_host = to_host || to.device() == Device::host;
  }
  if (to_host) impl_->wait("copy to the host");
}

Tensor CudaBackend::do_empty_host(std::vector<std::int64_t> dims, DType dtype, Layout layout) {
  std::int64_t count = 1;
  for (std::int64_t d : dims) count *= d;
  HARDY_CUDA_CHECK(cudaSetDevice(impl_->device));
  auto buffer =
      std::make_shared<cuda::PinnedBuffer>(static_cast<std::size_t>(count) * dtype_size(dtype));
  return Tensor(std::move(dims), dtype, layout, std::move(buffer));
}

void CudaBackend::do_fill(Tensor& t, float value) {
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

// What the backward sums of a normalization read: x, dy (masked by the fused relu's output y)
// and the forward statistics.
ChannelSumInput backward_sums_input(const Tensor& x, const Tensor& y, const Tensor& dy,
                                    bool fuse_relu, const Tensor& mean, const float* rstd) {
  ChannelSumInput input;
  input.x = x.raw();
  input.dy = dy.raw();
  input.y = fuse_relu ? y.raw() : nullptr;
  input.relu_mask = fuse_relu;
  input.mean = mean.data<float>();
  input.rstd = rstd;
  return input;
}

}  // namespace

void CudaBackend::do_group_norm_forward(const GroupNormForward& args, Tensor& y, Tensor& mean,
                                        Tensor& rstd) {
  const Tensor& x = args.x;
  const int groups = args.groups;
  const Index batch = x.n(), channels = x.c(), pixels = x.h() * x.w();
  const double group_size = static_cast<double>(channels / groups * pixels);
  if (group_size == 0) return;
  const ReductionScratch scratch = reduction_scratch(*impl_, batch, pixels, channels);
  ChannelSumInput input;
  input.x = x.raw();
  // One pass over x for both statistics: sums of squares about each channel's first value
  // (inside the data's range), not about zero, which would lose the variance of data whose
  // mean is large against its spread. The CPU makes two passes (mean, then centred squares).
  channel_sums(ChannelSum::shifted_values_and_squares, input, x.dtype(), batch, pixels, channels,
               scratch.partials, scratch.sums, impl_->s());
  group_norm_statistics(scratch.sums, x.raw(), x.dtype(), batch, pixels, channels, groups, args.eps,
                        mean.data<float>(), rstd.data<float>(), impl_->s());
  cuda::group_norm_apply(x.raw(), x.dtype(), args.gamma.data<float>(), args.beta.data<float>(),
                         mean.data<float>(), rstd.data<float>(), batch, pixels, channels, groups,
                         args.fuse_relu, y.raw(), impl_->s());
}

void CudaBackend::do_group_norm_backward(const GroupNormBackward& args, Tensor& dx, Tensor& dgamma,
                                         Tensor& dbeta) {
  const auto& [x, y, dy, gamma, mean, rstd, groups, fuse_relu] = args;
  const Index batch = x.n(), channels = x.c(), pixels = x.h() * x.w();
  const double group_size = static_cast<double>(channels / groups * pixels);
  const ReductionScratch scratch =
      reduction_scratch(*impl_, batch, pixels, channels, 2 * batch * groups);
  ChannelSumInput input = backward_sums_input(x, y, dy, fuse_relu, mean, rstd.data<float>());
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

void CudaBackend::do_batch_norm_statistics(const Tensor& x, Tensor& sum, Tensor& sum_squares) {
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

void CudaBackend::do_batch_norm_apply(const BatchNormApply& args, Tensor& y) {
  const Tensor& x = args.x;
  cuda::batch_norm_apply(x.raw(), x.dtype(), args.mean.data<float>(), args.variance.data<float>(),
                         args.gamma.data<float>(), args.beta.data<float>(), args.eps,
                         args.fuse_relu, x.n() * x.h() * x.w(), x.c(), y.raw(), impl_->s());
}

void CudaBackend::do_batch_norm_backward_statistics(const BatchNormBackwardStatistics& args,
                                                    Tensor& dgamma, Tensor& dbeta) {
  const auto& [x, y, dy, mean, variance, eps, fuse_relu] = args;
  const Index channels = x.c(), rows = x.n() * x.h() * x.w();
  float* rstd = impl_->small.get_as<float>(static_cast<std::size_t>(channels));
  rstd_from_variance(variance.data<float>(), eps, channels, rstd, impl_->s());
  const ReductionScratch scratch = reduction_scratch(*impl_, 1, rows, channels);
  const ChannelSumInput input = backward_sums_input(x, y, dy, fuse_relu, mean, rstd);
  channel_sums(ChannelSum::backward, input, x.dtype(), 1, rows, channels, scratch.partials,
               scratch.sums, impl_->s());
  doubles_to_floats(scratch.sums, 1, dgamma.data<float>(), channels, 1.0, impl_->s());
  doubles_to_floats(scratch.sums + channels, 1, dbeta.data<float>(), channels, 1.0, impl_->s());
}

void CudaBackend::do_batch_norm_backward_data(const BatchNormBackwardData& args, Tensor& dx) {
  const Tensor& x = args.x;
  const bool fuse_relu = args.fuse_relu;
  const Index channels = x.c();
  float* coefficients = impl_->small.get_as<float>(static_cast<std::size_t>(3 * channels));
  cuda::batch_norm_backward_data(
      x.raw(), fuse_relu ? args.y.raw() : nullptr, args.dy.raw(), x.dtype(), fuse_relu,
      args.mean.data<float>(), args.variance.data<float>(), args.gamma.data<float>(),
      args.dgamma.data<float>(), args.dbeta.data<float>(), args.eps, args.count,
      x.n() * x.h() * x.w(), channels, coefficients, dx.raw(), impl_->s());
}

// ---- activations and shape operations ----

namespace {

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

void CudaBackend::do_relu_forward(const Tensor& x, Tensor& y) {
  cuda::relu_forward(x.raw(), y.raw(), x.dtype(), x.numel(), impl_->s());
}

void CudaBackend::do_relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  cuda::relu_backward(y.raw(), dy.raw(), dx.raw(), y.dtype(), y.numel(), impl_->s());
}

void CudaBackend::do_upsample_bilinear_forward(const Tensor& x, Tensor& y) {
  const LinearTaps rows = impl_->linear_taps(x.h(), y.h());
  const LinearTaps columns = impl_->linear_taps(x.w(), y.w());
  cuda::upsample_bilinear_forward(x.raw(), x.dtype(), x.n(), x.c(), x.h(), x.w(), y.h(), y.w(),
                                  rows, columns, y.raw(), impl_->s());
}

void CudaBackend::do_upsample_bilinear_backward(const Tensor& dy, Tensor& dx) {
  const LinearTaps rows = impl_->linear_taps(dx.h(), dy.h());
  const LinearTaps columns = impl_->linear_taps(dx.w(), dy.w());
  const Index staged = dx.n() * dy.h() * dx.w() * dx.c();
  float* along_w =
      impl_->staging.get_as<float>(static_cast<std::size_t>(std::max<Index>(staged, 1)));
  cuda::upsample_bilinear_backward(dy.raw(), dy.dtype(), dx.n(), dx.c(), dx.h(), dx.w(), dy.h(),
                                   dy.w(), rows, columns, along_w, dx.raw(), impl_->s());
}

void CudaBackend::do_concat_channels(std::span<const Tensor* const> inputs, Tensor& y) {
  copy_slices(y, inputs, /*to_whole=*/true, impl_->s());
}

void CudaBackend::do_split_channels(const Tensor& dy, std::span<Tensor* const> outputs) {
  copy_slices(dy, outputs, /*to_whole=*/false, impl_->s());
}

void CudaBackend::do_global_avg_pool_forward(const Tensor& x, Tensor& y) {
  const Index batch = x.n(), channels = x.c(), pixels = x.h() * x.w();
  const ReductionScratch scratch = reduction_scratch(*impl_, batch, pixels, channels);
  ChannelSumInput input;
  input.x = x.raw();
  channel_sums(ChannelSum::values, input, x.dtype(), batch, pixels, channels, scratch.partials,
               scratch.sums, impl_->s());
  global_avg_pool_finish(scratch.sums, batch, channels, static_cast<double>(pixels), y.raw(),
                         y.dtype(), impl_->s());
}

void CudaBackend::do_global_avg_pool_backward(const Tensor& dy, Tensor& dx) {
  cuda::global_avg_pool_backward(dy.raw(), dy.dtype(), dx.n(), dx.h() * dx.w(), dx.c(), dx.raw(),
                                 impl_->s());
}

namespace {

// out = in * keep / (1 - rate): the per-sample stream states are mixed on the host (as the CPU
// backend mixes them) and uploaded, the keep decisions are the kernel's, from the same header.
void run_dropout(CudaBackend::Impl& impl, const Dropout& args, const Tensor& in, Tensor& out) {
  std::vector<std::uint64_t> states(args.sample_keys.size());
  for (std::size_t n = 0; n < states.size(); ++n)
    states[n] = dropout::sample_state(args.seed, args.sample_keys[n]);
  auto* device_states = impl.small.get_as<std::uint64_t>(std::max<std::size_t>(states.size(), 1));
  // From pageable memory, as the loss's class weights: the copy has read `states` on return.
  impl.copy_async(device_states, states.data(), states.size() * sizeof(std::uint64_t),
                  cudaMemcpyHostToDevice);
  // (N, C, spatial) covers every rank: a 5-D volume's D * H * W pixels, a matrix's 1.
  cuda::apply_dropout(in.raw(), out.raw(), in.dtype(), in.layout() == Layout::nhwc, in.dim(0),
                      in.dim(1), in.spatial_size(), 1, device_states,
                      dropout::keep_threshold(args.rate), 1.0f / (1.0f - args.rate), impl.s());
}

}  // namespace

void CudaBackend::do_dropout_forward(const Dropout& args, Tensor& y) {
  run_dropout(*impl_, args, args.x, y);
}

void CudaBackend::do_dropout_backward(const Dropout& args, const Tensor& dy, Tensor& dx) {
  run_dropout(*impl_, args, dy, dx);
}

// ---- loss ----

// The loss's partial sums, the first bad pixel and its label come back to the host in one copy,
// queued behind the kernels; the host reads them when the caller asks (PendingSum).
PendingSum CudaBackend::do_softmax_cross_entropy(const SoftmaxCrossEntropy& args, Tensor& dlogits) {
  const auto& [logits, labels, class_weights, grad_scale] = args;
  const Index classes = logits.c(), pixels = labels.numel();
  // small: [partials][first bad pixel][its label, padding][class weights], as the result slot
  constexpr std::size_t head_bytes = cuda::ResultSlot::bytes;
  constexpr std::size_t partial_bytes = cuda::ResultSlot::partials_bytes;
  auto* base = static_cast<char*>(impl_->small.get(head_bytes + class_weights.size_bytes()));
  auto* partials = reinterpret_cast<double*>(base);
  auto* first_bad = reinterpret_cast<unsigned long long*>(base + partial_bytes);
  auto* bad_label =
      reinterpret_cast<std::int32_t*>(base + partial_bytes + sizeof(unsigned long long));
  auto* weights = reinterpret_cast<float*>(base + head_bytes);
  // From pageable memory: the copy has read class_weights on return.
  impl_->copy_async(weights, class_weights.data(), class_weights.size_bytes(),
                    cudaMemcpyHostToDevice);
  HARDY_CUDA_CHECK(cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned long long), impl_->s()));
  const int blocks =
      cuda::softmax_cross_entropy(logits.raw(), logits.dtype(), labels.data<std::int32_t>(),
                                  weights, pixels, static_cast<int>(classes), grad_scale,
                                  dlogits.raw(), partials, first_bad, bad_label, impl_->s());
  std::shared_ptr<cuda::ResultSlot> slot = impl_->results->take();
  impl_->copy_async(slot->memory.as<char>(), base, head_bytes, cudaMemcpyDeviceToHost);
  slot->arrived.record(impl_->s());
  return cuda::pending_partials_sum(
      impl_->device, std::move(slot), blocks,
      cuda::LabelPlane{
          .height = labels.h(), .width = labels.w(), .classes = static_cast<int>(classes)});
}

void CudaBackend::do_argmax_channels(const Tensor& logits, Tensor& labels) {
  cuda::argmax_channels(logits.raw(), logits.dtype(), labels.data<std::int32_t>(), labels.numel(),
                        static_cast<int>(logits.c()), impl_->s());
}

// ---- element-wise operations for optimizers and gradient handling ----

void CudaBackend::do_axpy(float alpha, const Tensor& x, Tensor& y) {
  cuda::axpy(alpha, x.raw(), y.raw(), y.dtype(), y.numel(), impl_->s());
}

void CudaBackend::do_scale(Tensor& x, float alpha) {
  cuda::scale(x.raw(), x.dtype(), alpha, x.numel(), impl_->s());
}

double CudaBackend::do_sum_squares(const Tensor& x) {
  auto* partials = impl_->small.get_as<double>(max_reduction_blocks);
  const int blocks = sum_squares_partials(x.raw(), x.dtype(), x.numel(), partials, impl_->s());
  impl_->copy_async(impl_->pinned.as<double>(), partials,
                    static_cast<std::size_t>(blocks) * sizeof(double), cudaMemcpyDeviceToHost);
  impl_->wait("sum_squares");
  const double* host = impl_->pinned.as<double>();
  return std::accumulate(host, host + blocks, 0.0);
}

void CudaBackend::do_sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity,
                                const SgdStep& step) {
  cuda::sgd_update(param.data<float>(), grad.data<float>(), velocity.data<float>(), param.numel(),
                   step.lr, step.momentum, step.weight_decay, step.nesterov, impl_->s());
}

void CudaBackend::do_adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                                 const AdamStep& step) {
  // Bias corrections folded into two scalars on the host, exactly as the CPU backend does.
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(step.beta1), step.step);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(step.beta2), step.step);
  cuda::adam_update(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(),
                    param.numel(), static_cast<float>(step.lr / bias_correction1),
                    static_cast<float>(1.0 / std::sqrt(bias_correction2)), step.beta1, step.beta2,
                    step.eps, step.weight_decay, impl_->s());
}

bool CudaBackend::do_has_non_finite(std::span<const Tensor* const> tensors) {
  // Every tensor's kernel raises the same flag, which is read once.
  int* flag = impl_->small.get_as<int>(1);
  HARDY_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), impl_->s()));
  for (const Tensor* x : tensors)
    find_non_finite(x->raw(), x->dtype(), x->numel(), flag, impl_->s());
  impl_->copy_async(impl_->pinned.as<int>(), flag, sizeof(int), cudaMemcpyDeviceToHost);
  impl_->wait("has_non_finite");
  return *impl_->pinned.as<int>() != 0;
}

}  // namespace hardy::core
