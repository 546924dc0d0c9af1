// Backend's public operations: each checks its operands once, against the backend's
// OperandRules (compute/operand_checks.hpp), then runs the backend's do_* hook.
#include "hardy/core/compute/backend.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <cstring>
#include <deque>

#include "compute/cpu/cpu_backend.hpp"
#include "compute/operand_checks.hpp"
#include "hardy/core/support/error.hpp"
#ifdef HARDY_HAVE_CUDA
#include "compute/cuda_module.hpp"
#include "hardy/core/support/modules.hpp"
#endif

namespace hardy::core {

using namespace operands;

int conv_output_size(int input, int kernel, const ConvGeometry& g) {
  return (input + 2 * g.padding - g.dilation * (kernel - 1) - 1) / g.stride + 1;
}

int pool_output_size(int input, const PoolGeometry& g) {
  return (input + 2 * g.padding - g.kernel) / g.stride + 1;
}

int conv_transpose_output_size(int input, int kernel, const ConvGeometry& g) {
  return (input - 1) * g.stride - 2 * g.padding + g.dilation * (kernel - 1) + 1;
}

std::vector<std::string> available_backends() {
  std::vector<std::string> names{"cpu"};
#ifdef HARDY_HAVE_CUDA
  names.emplace_back("cuda");
#endif
  return names;
}

std::string_view to_string(Precision precision) {
  switch (precision) {
    case Precision::f32:
      return "f32";
    case Precision::bf16:
      return "bf16";
    case Precision::fp16:
      return "fp16";
  }
  return "unknown";
}

Precision parse_precision(std::string_view text) {
  if (text == "f32" || text == "fp32") return Precision::f32;
  if (text == "bf16") return Precision::bf16;
  if (text == "fp16" || text == "f16") return Precision::fp16;
  throw InvalidArgument(fmt::format("precision '{}' is not one of f32, bf16, fp16", text));
}

DType activation_dtype(Precision precision) {
  switch (precision) {
    case Precision::bf16:
      return DType::bf16;
    case Precision::fp16:
      return DType::f16;
    case Precision::f32:
      break;
  }
  return DType::f32;
}

Precision default_precision(std::string_view backend_name) {
  if (backend_name != "cuda") return Precision::f32;
  const char* text = std::getenv("HARDY_CUDA_PRECISION");
  if (text == nullptr) return Precision::bf16;
  try {
    return parse_precision(text);
  } catch (const InvalidArgument&) {
    throw InvalidArgument(
        fmt::format("HARDY_CUDA_PRECISION={} is not one of bf16, fp16, fp32", text));
  }
}

std::optional<std::string> precision_unsupported(std::string_view backend_name,
                                                 Precision precision) {
  if (backend_name != "cpu") return std::nullopt;
  return cpu_precision_unsupported(activation_dtype(precision));
}

std::unique_ptr<Backend> make_backend(std::string_view name, std::optional<Precision> precision) {
  if (name == "cpu")
    return std::make_unique<CpuBackend>(
        CpuOptions{.activation_dtype = activation_dtype(precision.value_or(Precision::f32))});
#ifdef HARDY_HAVE_CUDA
  if (name == "cuda") {
    const auto make = reinterpret_cast<cuda_module::MakeBackend>(
        module_symbol(cuda_module::kFile, cuda_module::kMakeBackend, "the cuda backend"));
    const std::optional<DType> dtype =
        precision ? std::optional(activation_dtype(*precision)) : std::nullopt;
    return std::unique_ptr<Backend>(make(dtype ? &*dtype : nullptr));
  }
#endif
  throw InvalidArgument(fmt::format("unknown backend '{}'; this build has: {}", name,
                                    fmt::join(available_backends(), ", ")));
}

// ---- memory ----

Tensor Backend::empty(std::vector<std::int64_t> dims, DType dtype, Layout layout) {
  for (std::int64_t d : dims)
    if (d < 0)
      throw InvalidArgument(fmt::format("empty: negative dimension in [{}]", fmt::join(dims, ",")));
  return do_empty(std::move(dims), dtype, layout);
}

void Backend::copy(const Tensor& src, Tensor& dst) {
  check_copy(rules_, src, dst);
  do_copy(src, dst);
}

void Backend::copy(std::span<const Tensor* const> src, std::span<Tensor* const> dst) {
  if (src.size() != dst.size())
    throw InvalidArgument(
        fmt::format("copy: {} sources for {} destinations", src.size(), dst.size()));
  for (std::size_t i = 0; i < src.size(); ++i) check_copy(rules_, *src[i], *dst[i]);
  do_copy_many(src, dst);
}

Tensor Backend::empty_host(std::vector<std::int64_t> dims, DType dtype, Layout layout) {
  for (std::int64_t d : dims)
    if (d < 0)
      throw InvalidArgument(
          fmt::format("empty_host: negative dimension in [{}]", fmt::join(dims, ",")));
  return do_empty_host(std::move(dims), dtype, layout);
}

void InputUpload::copy(const Tensor& src, Tensor& dst) {
  if (src.device() != Device::host)
    throw InvalidArgument(fmt::format("upload: src {} is not a host tensor", src.describe()));
  check_copy(rules_, src, dst);
  do_copy(src, dst);
}

void InputUpload::copy_samples(std::span<const Tensor* const> samples, Tensor& dst) {
  constexpr std::string_view operation = "upload of samples";
  if (dst.rank() < 2 || samples.size() != static_cast<std::size_t>(dst.dim(0)))
    throw InvalidArgument(
        fmt::format("{}: {} samples for dst {}", operation, samples.size(), dst.describe()));
  std::vector<std::int64_t> sample_dims = dst.dims();
  sample_dims[0] = 1;
  const Tensor& first = *samples.front();
  for (const Tensor* sample : samples) {
    if (sample->device() != Device::host || sample->dims() != sample_dims ||
        sample->dtype() != first.dtype() || sample->layout() != first.layout())
      throw InvalidArgument(fmt::format("{}: sample {} is not a host tensor like {} for dst {}",
                                        operation, sample->describe(), first.describe(),
                                        dst.describe()));
  }
  if (first.dtype() != dst.dtype() && !(is_float_type(first.dtype()) && is_float_type(dst.dtype())))
    throw InvalidArgument(fmt::format("{}: samples {} and dst {} differ in dtype", operation,
                                      first.describe(), dst.describe()));
  if (dst.device() != Device::host) require_on(rules_, operation, "dst", dst);
  do_copy_samples(samples, dst);
}

namespace {

// A backend without a device of its own: its copies would compete with its kernels for the
// same cores, so they wait for hand_over() and run there, on the thread that queues the work.
class DeferredUpload final : public InputUpload {
 public:
  explicit DeferredUpload(Backend& backend)
      : InputUpload(backend.operand_rules()), backend_(backend) {}
  double finish() override { return 0.0; }
  void hand_over() override {
    for (auto& [src, dst] : copies_) backend_.copy(*src, *dst);
    copies_.clear();
    gathered_.clear();
  }

 protected:
  void do_copy(const Tensor& src, Tensor& dst) override { copies_.emplace_back(&src, &dst); }
  // Gathered into one host batch now, so that the samples' memory is free after finish(); in
  // f32 where the backend's copy does not convert float types.
  void do_copy_samples(std::span<const Tensor* const> samples, Tensor& dst) override {
    const Tensor& first = *samples.front();
    const bool widen =
        first.dtype() != dst.dtype() && !backend_.operand_rules().copy_converts_float_types;
    Tensor& batch = gathered_.emplace_back(
        Tensor::host(dst.dims(), widen ? DType::f32 : first.dtype(), first.layout()));
    const std::size_t bytes = first.bytes();
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const auto from = std::span(static_cast<const std::byte*>(samples[i]->raw()), bytes);
      if (widen)
        widen_to_f32(first.dtype(), from,
                     batch.f32().subspan(i * static_cast<std::size_t>(first.numel()),
                                         static_cast<std::size_t>(first.numel())));
      else
        std::memcpy(static_cast<std::byte*>(batch.raw()) + i * bytes, from.data(), bytes);
    }
    copies_.emplace_back(&batch, &dst);
  }

 private:
  Backend& backend_;
  std::vector<std::pair<const Tensor*, Tensor*>> copies_;
  std::deque<Tensor> gathered_;  // copy_samples()'s batches (a deque: their addresses stay)
};

}  // namespace

std::unique_ptr<InputUpload> Backend::do_start_upload() {
  return std::make_unique<DeferredUpload>(*this);
}

void Backend::fill(Tensor& t, float value) {
  require_on(rules_, "fill", "t", t);
  do_fill(t, value);
}

// ---- convolution ----

namespace {

// The public operation of a family's pass (Backend::ConvFamily).
template <class Family>
std::string_view convolution_operation(Family family, ConvPass pass) {
  return convolution_operation(family == Family::volumetric ? 3 : 2, family == Family::transposed,
                               pass);
}

// The shape checks of a family's pass (Backend::ConvFamily); the geometry the hooks get.
template <class Family>
ConvGeometry checked_geometry(const OperandRules& rules, Family family, std::string_view operation,
                              const ConvRoles& roles, const Tensor& x, const Tensor& weight,
                              const Tensor& y, const ConvGeometry& geometry) {
  if (geometry.transposed && family != Family::transposed)
    throw InvalidArgument(fmt::format(
        "{}: the geometry says transposed; a transposed convolution is conv2d_transpose_*",
        operation));
  if (family == Family::planar) {
    check_convolution(rules, operation, roles, x, weight, y, geometry);
    return geometry;
  }
  if (family == Family::volumetric) {
    check_convolution3d(rules, operation, roles, x, weight, y, geometry);
    return geometry;
  }
  check_transposed_convolution(rules, operation, roles, x, weight, y, geometry);
  ConvGeometry transposed = geometry;
  transposed.transposed = true;
  return transposed;
}

}  // namespace

void Backend::checked_convolution_forward(ConvFamily family, const Tensor& x, const Tensor& weight,
                                          const Tensor* bias, const ConvGeometry& geometry,
                                          Tensor& y) {
  const std::string_view operation = convolution_operation(family, ConvPass::forward);
  const ConvGeometry checked =
      checked_geometry(rules_, family, operation, {"x", "weight", "y"}, x, weight, y, geometry);
  // One bias per output channel: the weight's first extent, or a transposed one's second.
  if (bias != nullptr) check_bias(rules_, operation, "bias", *bias, y.dim(1));
  do_convolution_forward(x, weight, bias, checked, y);
}

void Backend::checked_convolution_backward_data(ConvFamily family, const Tensor& dy,
                                                const Tensor& weight, const ConvGeometry& geometry,
                                                Tensor& dx) {
  const ConvGeometry checked =
      checked_geometry(rules_, family, convolution_operation(family, ConvPass::backward_data),
                       {"dx", "weight", "dy"}, dx, weight, dy, geometry);
  do_convolution_backward_data(dy, weight, checked, dx);
}

void Backend::checked_convolution_backward_weights(ConvFamily family, const Tensor& x,
                                                   const Tensor& dy, const ConvGeometry& geometry,
                                                   Tensor& dweight, Tensor* dbias) {
  const std::string_view operation = convolution_operation(family, ConvPass::backward_weights);
  const ConvGeometry checked =
      checked_geometry(rules_, family, operation, {"x", "dweight", "dy"}, x, dweight, dy, geometry);
  if (dbias != nullptr) check_bias(rules_, operation, "dbias", *dbias, dy.dim(1));
  do_convolution_backward_weights(x, dy, checked, dweight, dbias);
}

void Backend::conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                             const ConvGeometry& geometry, Tensor& y) {
  checked_convolution_forward(ConvFamily::planar, x, weight, bias, geometry, y);
}

void Backend::conv2d_backward_data(const Tensor& dy, const Tensor& weight,
                                   const ConvGeometry& geometry, Tensor& dx) {
  checked_convolution_backward_data(ConvFamily::planar, dy, weight, geometry, dx);
}

void Backend::conv2d_backward_weights(const Tensor& x, const Tensor& dy,
                                      const ConvGeometry& geometry, Tensor& dweight,
                                      Tensor* dbias) {
  checked_convolution_backward_weights(ConvFamily::planar, x, dy, geometry, dweight, dbias);
}

void Backend::conv2d_transpose_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                       const ConvGeometry& geometry, Tensor& y) {
  checked_convolution_forward(ConvFamily::transposed, x, weight, bias, geometry, y);
}

void Backend::conv2d_transpose_backward_data(const Tensor& dy, const Tensor& weight,
                                             const ConvGeometry& geometry, Tensor& dx) {
  checked_convolution_backward_data(ConvFamily::transposed, dy, weight, geometry, dx);
}

void Backend::conv2d_transpose_backward_weights(const Tensor& x, const Tensor& dy,
                                                const ConvGeometry& geometry, Tensor& dweight,
                                                Tensor* dbias) {
  checked_convolution_backward_weights(ConvFamily::transposed, x, dy, geometry, dweight, dbias);
}

// ---- volumetric convolution and pooling ----

void Backend::conv3d_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                             const ConvGeometry& geometry, Tensor& y) {
  checked_convolution_forward(ConvFamily::volumetric, x, weight, bias, geometry, y);
}

void Backend::conv3d_backward_data(const Tensor& dy, const Tensor& weight,
                                   const ConvGeometry& geometry, Tensor& dx) {
  checked_convolution_backward_data(ConvFamily::volumetric, dy, weight, geometry, dx);
}

void Backend::conv3d_backward_weights(const Tensor& x, const Tensor& dy,
                                      const ConvGeometry& geometry, Tensor& dweight,
                                      Tensor* dbias) {
  checked_convolution_backward_weights(ConvFamily::volumetric, x, dy, geometry, dweight, dbias);
}

void Backend::max_pool3d_forward(const Tensor& x, const PoolGeometry& geometry, Tensor& y) {
  check_pool3d(rules_, "max_pool3d_forward", "x", x, "y", y, geometry);
  do_max_pool3d_forward(x, geometry, y);
}

void Backend::max_pool3d_backward(const Tensor& x, const Tensor& dy, const PoolGeometry& geometry,
                                  Tensor& dx) {
  constexpr std::string_view operation = "max_pool3d_backward";
  check_pool3d(rules_, operation, "x", x, "dy", dy, geometry);
  require_like_volume(operation, "dx", dx, "x", x);
  do_max_pool3d_backward(x, dy, geometry, dx);
}

bool Backend::fuses_conv3d_max_pool(const ConvGeometry&, const PoolGeometry&) const {
  return false;
}

namespace {

constexpr std::string_view kConv3dMaxPoolForward = "conv3d_max_pool_forward";
constexpr std::string_view kConv3dMaxPoolBackward = "conv3d_max_pool_backward";

void require_fused(const Backend& backend, std::string_view operation, const Conv3dMaxPool& op) {
  if (!backend.fuses_conv3d_max_pool(op.convolution, op.pooling))
    throw InvalidArgument(fmt::format(
        "{}: the {} backend does not fuse this convolution (stride {}, padding {}, dilation {}) "
        "and pooling (kernel {}, stride {}, padding {}); run conv3d_* and max_pool3d_*",
        operation, backend.name(), op.convolution.stride, op.convolution.padding,
        op.convolution.dilation, op.pooling.kernel, op.pooling.stride, op.pooling.padding));
}

}  // namespace

void Backend::conv3d_max_pool_forward(const Conv3dMaxPool& op, Tensor& y, Tensor& window) {
  check_conv3d_max_pool(rules_, kConv3dMaxPoolForward, op, "y", y, window);
  require_fused(*this, kConv3dMaxPoolForward, op);
  do_conv3d_max_pool_forward(op, y, window);
}

void Backend::conv3d_max_pool_backward(const Conv3dMaxPool& op, const Tensor& dy,
                                       const Tensor& window, Tensor* dx, Tensor& dweight,
                                       Tensor* dbias) {
  constexpr std::string_view operation = kConv3dMaxPoolBackward;
  check_conv3d_max_pool(rules_, operation, op, "dy", dy, window);
  require_fused(*this, operation, op);
  if (dx != nullptr) require_like_volume(operation, "dx", *dx, "x", op.x);
  require_f32(rules_, operation, "dweight", dweight);
  if (dweight.dims() != op.weight.dims())
    throw InvalidArgument(fmt::format("{}: dweight ({}) must have the dims of weight ({})",
                                      operation, dweight.describe(), op.weight.describe()));
  if ((dbias == nullptr) != (op.bias == nullptr))
    throw InvalidArgument(fmt::format("{}: dbias is given exactly when the bias is", operation));
  if (dbias != nullptr) check_bias(rules_, operation, "dbias", *dbias, op.weight.dim(0));
  do_conv3d_max_pool_backward(op, dy, window, dx, dweight, dbias);
}

void Backend::do_conv3d_max_pool_forward(const Conv3dMaxPool& op, Tensor&, Tensor&) {
  require_fused(*this, kConv3dMaxPoolForward, op);  // refuses: no backend fuses by default
}

void Backend::do_conv3d_max_pool_backward(const Conv3dMaxPool& op, const Tensor&, const Tensor&,
                                          Tensor*, Tensor&, Tensor*) {
  require_fused(*this, kConv3dMaxPoolBackward, op);
}

// ---- dense layers ----

void Backend::dense_forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) {
  constexpr std::string_view operation = "dense_forward";
  check_dense(rules_, operation, {"x", "weight", "y"}, x, weight, y);
  if (bias != nullptr) check_bias(rules_, operation, "bias", *bias, weight.dim(0));
  do_dense_forward(x, weight, bias, y);
}

void Backend::dense_backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) {
  check_dense(rules_, "dense_backward_data", {"dx", "weight", "dy"}, dx, weight, dy);
  do_dense_backward_data(dy, weight, dx);
}

void Backend::dense_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight,
                                     Tensor* dbias) {
  constexpr std::string_view operation = "dense_backward_weights";
  check_dense(rules_, operation, {"x", "dweight", "dy"}, x, dweight, dy);
  if (dbias != nullptr) check_bias(rules_, operation, "dbias", *dbias, dweight.dim(0));
  do_dense_backward_weights(x, dy, dweight, dbias);
}

// ---- group normalization ----

void Backend::group_norm_forward(const GroupNormForward& args, Tensor& y, Tensor& mean,
                                 Tensor& rstd) {
  constexpr std::string_view operation = "group_norm_forward";
  check_group_norm(rules_, operation, args.x, args.gamma, mean, rstd, args.groups);
  check_normalization(rules_, operation, args.x, {{"y", &y}}, {{"beta", &args.beta}});
  do_group_norm_forward(args, y, mean, rstd);
}

void Backend::group_norm_backward(const GroupNormBackward& args, Tensor& dx, Tensor& dgamma,
                                  Tensor& dbeta) {
  constexpr std::string_view operation = "group_norm_backward";
  check_group_norm(rules_, operation, args.x, args.gamma, args.mean, args.rstd, args.groups);
  check_normalization(rules_, operation, args.x,
                      {{"y", args.fuse_relu ? &args.y : nullptr}, {"dy", &args.dy}, {"dx", &dx}},
                      {{"dgamma", &dgamma}, {"dbeta", &dbeta}});
  do_group_norm_backward(args, dx, dgamma, dbeta);
}

// ---- batch normalization ----

void Backend::batch_norm_statistics(const Tensor& x, Tensor& sum, Tensor& sum_squares) {
  check_normalization(rules_, "batch_norm_statistics", x, {},
                      {{"sum", &sum}, {"sum_squares", &sum_squares}});
  do_batch_norm_statistics(x, sum, sum_squares);
}

void Backend::batch_norm_apply(const BatchNormApply& args, Tensor& y) {
  check_normalization(rules_, "batch_norm_apply", args.x, {{"y", &y}},
                      {{"mean", &args.mean},
                       {"variance", &args.variance},
                       {"gamma", &args.gamma},
                       {"beta", &args.beta}});
  do_batch_norm_apply(args, y);
}

void Backend::batch_norm_backward_statistics(const BatchNormBackwardStatistics& args,
                                             Tensor& dgamma, Tensor& dbeta) {
  check_normalization(
      rules_, "batch_norm_backward_statistics", args.x,
      {{"y", args.fuse_relu ? &args.y : nullptr}, {"dy", &args.dy}},
      {{"mean", &args.mean}, {"variance", &args.variance}, {"dgamma", &dgamma}, {"dbeta", &dbeta}});
  do_batch_norm_backward_statistics(args, dgamma, dbeta);
}

void Backend::batch_norm_backward_data(const BatchNormBackwardData& args, Tensor& dx) {
  constexpr std::string_view operation = "batch_norm_backward_data";
  check_normalization(rules_, operation, args.x,
                      {{"y", args.fuse_relu ? &args.y : nullptr}, {"dy", &args.dy}, {"dx", &dx}},
                      {{"mean", &args.mean},
                       {"variance", &args.variance},
                       {"gamma", &args.gamma},
                       {"dgamma", &args.dgamma},
                       {"dbeta", &args.dbeta}});
  if (!(args.count > 0))
    throw InvalidArgument(fmt::format("{}: count must be positive, got {}", operation, args.count));
  do_batch_norm_backward_data(args, dx);
}

// ---- activations and shape operations ----

void Backend::relu_forward(const Tensor& x, Tensor& y) {
  check_elementwise_pair(rules_, "relu_forward", "x", x, "y", y);
  do_relu_forward(x, y);
}

void Backend::relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  check_elementwise_pair(rules_, "relu_backward", "y", y, "dy", dy);
  check_elementwise_pair(rules_, "relu_backward", "y", y, "dx", dx);
  do_relu_backward(y, dy, dx);
}

void Backend::upsample_bilinear_forward(const Tensor& x, Tensor& y) {
  check_spatial_pair(rules_, "upsample_bilinear_forward", "x", x, "y", y);
  do_upsample_bilinear_forward(x, y);
}

void Backend::upsample_bilinear_backward(const Tensor& dy, Tensor& dx) {
  check_spatial_pair(rules_, "upsample_bilinear_backward", "dy", dy, "dx", dx);
  do_upsample_bilinear_backward(dy, dx);
}

void Backend::concat_channels(std::span<const Tensor* const> inputs, Tensor& y) {
  check_channel_slices(rules_, "concat_channels", inputs, "y", y);
  do_concat_channels(inputs, y);
}

void Backend::split_channels(const Tensor& dy, std::span<Tensor* const> outputs) {
  check_channel_slices(rules_, "split_channels", outputs, "dy", dy);
  do_split_channels(dy, outputs);
}

void Backend::global_avg_pool_forward(const Tensor& x, Tensor& y) {
  constexpr std::string_view operation = "global_avg_pool_forward";
  check_spatial_pair(rules_, operation, "x", x, "y", y);
  require_dims(operation, "y", y, {x.n(), x.c(), 1, 1});
  do_global_avg_pool_forward(x, y);
}

void Backend::global_avg_pool_backward(const Tensor& dy, Tensor& dx) {
  constexpr std::string_view operation = "global_avg_pool_backward";
  check_spatial_pair(rules_, operation, "dx", dx, "dy", dy);
  require_dims(operation, "dy", dy, {dx.n(), dx.c(), 1, 1});
  do_global_avg_pool_backward(dy, dx);
}

void Backend::leaky_relu_forward(const Tensor& x, float slope, Tensor& y) {
  constexpr std::string_view operation = "leaky_relu_forward";
  check_elementwise_pair(rules_, operation, "x", x, "y", y);
  check_slope(operation, slope);
  do_leaky_relu_forward(x, slope, y);
}

void Backend::leaky_relu_backward(const Tensor& y, const Tensor& dy, float slope, Tensor& dx) {
  constexpr std::string_view operation = "leaky_relu_backward";
  check_elementwise_pair(rules_, operation, "y", y, "dy", dy);
  check_elementwise_pair(rules_, operation, "y", y, "dx", dx);
  check_slope(operation, slope);
  do_leaky_relu_backward(y, dy, slope, dx);
}

void Backend::scaled_tanh_forward(const Tensor& x, float scale, Tensor& y) {
  constexpr std::string_view operation = "scaled_tanh_forward";
  check_elementwise_pair(rules_, operation, "x", x, "y", y);
  check_tanh_scale(operation, scale);
  do_scaled_tanh_forward(x, scale, y);
}

void Backend::scaled_tanh_backward(const Tensor& y, const Tensor& dy, float scale, Tensor& dx) {
  constexpr std::string_view operation = "scaled_tanh_backward";
  check_elementwise_pair(rules_, operation, "y", y, "dy", dy);
  check_elementwise_pair(rules_, operation, "y", y, "dx", dx);
  check_tanh_scale(operation, scale);
  do_scaled_tanh_backward(y, dy, scale, dx);
}

// Flattening is a copy into y seen as (N, C, ...) row-major: the backend's layout conversion
// does the permutation from channels-last, so there is no kernel of its own.
void Backend::flatten_forward(const Tensor& x, Tensor& y) {
  constexpr std::string_view operation = "flatten_forward";
  check_flatten(rules_, operation, "x", x, "y", y);
  Tensor logical = y.view(x.dims(), Layout::nchw);
  do_copy(x, logical);
}

void Backend::flatten_backward(const Tensor& dy, Tensor& dx) {
  constexpr std::string_view operation = "flatten_backward";
  check_flatten(rules_, operation, "dx", dx, "dy", dy);
  do_copy(dy.view(dx.dims(), Layout::nchw), dx);
}

void Backend::dropout_forward(const Dropout& args, Tensor& y) {
  constexpr std::string_view operation = "dropout_forward";
  check_dropout(rules_, operation, args);
  check_elementwise_pair(rules_, operation, "x", args.x, "y", y);
  do_dropout_forward(args, y);
}

void Backend::dropout_backward(const Dropout& args, const Tensor& dy, Tensor& dx) {
  constexpr std::string_view operation = "dropout_backward";
  check_dropout(rules_, operation, args);
  require_same_dims(operation, "x", args.x, "dy", dy);
  check_elementwise_pair(rules_, operation, "dy", dy, "dx", dx);
  do_dropout_backward(args, dy, dx);
}

// ---- loss ----

PendingSum PendingSum::ready(double value) {
  PendingSum sum;
  sum.value_ = value;
  return sum;
}

double PendingSum::value() {
  if (source_) {
    value_ = source_->read();  // a throw leaves the source, to throw again
    source_.reset();
  }
  return value_;
}

double Backend::softmax_cross_entropy(const SoftmaxCrossEntropy& args, Tensor& dlogits) {
  return queue_softmax_cross_entropy(args, dlogits).value();
}

PendingSum Backend::queue_softmax_cross_entropy(const SoftmaxCrossEntropy& args, Tensor& dlogits) {
  constexpr std::string_view operation = "softmax_cross_entropy";
  check_labels(rules_, operation, args.logits, args.labels);
  require_like(rules_, operation, "dlogits", dlogits, "logits", args.logits);
  if (args.class_weights.size() != static_cast<std::size_t>(args.logits.c()))
    throw InvalidArgument(fmt::format("{}: {} class weights for {} classes in logits {}", operation,
                                      args.class_weights.size(), args.logits.c(),
                                      args.logits.describe()));
  return do_softmax_cross_entropy(args, dlogits);
}

double Backend::mse_loss(const MseLoss& args, Tensor& dprediction) {
  return queue_mse_loss(args, dprediction).value();
}

PendingSum Backend::queue_mse_loss(const MseLoss& args, Tensor& dprediction) {
  check_mse(rules_, "mse_loss", args, dprediction);
  return do_mse_loss(args, dprediction);
}

void Backend::argmax_channels(const Tensor& logits, Tensor& labels) {
  check_labels(rules_, "argmax_channels", logits, labels);
  do_argmax_channels(logits, labels);
}

// ---- element-wise operations ----

void Backend::axpy(float alpha, const Tensor& x, Tensor& y) {
  constexpr std::string_view operation = "axpy";
  require_float(rules_, operation, "x", x);
  require_float(rules_, operation, "y", y);
  require_same_numel(operation, "x", x, "y", y);
  if (x.dtype() != y.dtype())
    throw InvalidArgument(fmt::format("{}: x ({}) and y ({}) differ in dtype", operation,
                                      x.describe(), y.describe()));
  do_axpy(alpha, x, y);
}

void Backend::scale(Tensor& x, float alpha) {
  require_float(rules_, "scale", "x", x);
  do_scale(x, alpha);
}

double Backend::sum_squares(const Tensor& x) {
  require_float(rules_, "sum_squares", "x", x);
  return do_sum_squares(x);
}

void Backend::sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, const SgdStep& step) {
  constexpr std::string_view operation = "sgd_update";
  require_f32(rules_, operation, "param", param);
  require_f32(rules_, operation, "grad", grad);
  require_f32(rules_, operation, "velocity", velocity);
  require_same_numel(operation, "param", param, "grad", grad);
  require_same_numel(operation, "param", param, "velocity", velocity);
  do_sgd_update(param, grad, velocity, step);
}

void Backend::adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                          const AdamStep& step) {
  constexpr std::string_view operation = "adam_update";
  require_f32(rules_, operation, "param", param);
  require_f32(rules_, operation, "grad", grad);
  require_f32(rules_, operation, "m", m);
  require_f32(rules_, operation, "v", v);
  require_same_numel(operation, "param", param, "grad", grad);
  require_same_numel(operation, "param", param, "m", m);
  require_same_numel(operation, "param", param, "v", v);
  if (step.step < 1)
    throw InvalidArgument(fmt::format("{}: step counts from 1, got {}", operation, step.step));
  do_adam_update(param, grad, m, v, step);
}

bool Backend::has_non_finite(const Tensor& x) {
  const Tensor* one[] = {&x};
  return has_non_finite(one);
}

bool Backend::has_non_finite(std::span<const Tensor* const> tensors) {
  for (const Tensor* x : tensors) require_float(rules_, "has_non_finite", "x", *x);
  return do_has_non_finite(tensors);
}

Tensor& ensure_tensor(Backend& backend, Tensor& t, const std::vector<std::int64_t>& dims,
                      std::optional<DType> requested) {
  const bool activation = dims.size() == 4 || dims.size() == 5;
  const DType dtype = requested.value_or(activation ? backend.activation_dtype() : DType::f32);
  if (!t.defined() || t.dims() != dims || t.dtype() != dtype) {
    const Layout layout = activation ? backend.activation_layout() : Layout::flat;
    t = backend.empty(dims, dtype, layout);
  }
  return t;
}

}  // namespace hardy::core
