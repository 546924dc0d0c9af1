#include "compute/operand_checks.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <string>
#include <utility>

#include "hardy/core/support/error.hpp"

namespace hardy::core::operands {

namespace {

InvalidArgument tensor_error(std::string_view operation, std::string_view role, const Tensor& t,
                             std::string_view expectation) {
  return InvalidArgument(
      fmt::format("{}: {} is {}, expected {}", operation, role, t.describe(), expectation));
}

}  // namespace

bool is_float_type(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
}

void require_on(const OperandRules& rules, std::string_view operation, std::string_view role,
                const Tensor& t) {
  if (!t.defined()) throw InvalidArgument(fmt::format("{}: {} is undefined", operation, role));
  if (t.device() != rules.device)
    throw InvalidArgument(
        fmt::format("{}: {} is {}; {}", operation, role, t.describe(), rules.elsewhere_hint));
}

void require_f32(const OperandRules& rules, std::string_view operation, std::string_view role,
                 const Tensor& t) {
  require_on(rules, operation, role, t);
  if (t.dtype() != DType::f32)
    throw tensor_error(operation, role, t,
                       fmt::format("a {} f32 tensor (parameters, gradients and statistics are f32)",
                                   rules.device_name));
}

void require_float(const OperandRules& rules, std::string_view operation, std::string_view role,
                   const Tensor& t) {
  require_on(rules, operation, role, t);
  const bool accepted = t.dtype() == DType::f32 ||
                        (t.dtype() == DType::bf16 && rules.bf16_activations) ||
                        (t.dtype() == DType::f16 && rules.f16_activations);
  if (!accepted) {
    const std::string_view expected = rules.f16_activations    ? "f32, bf16 or f16"
                                      : rules.bf16_activations ? "f32 or bf16"
                                                               : "f32";
    throw tensor_error(operation, role, t, expected);
  }
}

void require_activation(const OperandRules& rules, std::string_view operation,
                        std::string_view role, const Tensor& t) {
  require_float(rules, operation, role, t);
  if (t.rank() != 4 || t.layout() != Layout::nhwc)
    throw tensor_error(operation, role, t, "a 4-D nhwc tensor");
}

void require_volume(const OperandRules& rules, std::string_view operation, std::string_view role,
                    const Tensor& t) {
  require_float(rules, operation, role, t);
  if (t.rank() != 5 || t.layout() != Layout::nhwc)
    throw tensor_error(operation, role, t, "a 5-D ndhwc tensor (N, C, D, H, W), channels last");
}

void require_matrix(const OperandRules& rules, std::string_view operation, std::string_view role,
                    const Tensor& t) {
  require_float(rules, operation, role, t);
  if (t.rank() != 2) throw tensor_error(operation, role, t, "a 2-D (N, K) tensor");
}

void require_like(const OperandRules& rules, std::string_view operation, std::string_view role,
                  const Tensor& t, std::string_view reference_role, const Tensor& reference) {
  require_activation(rules, operation, role, t);
  if (t.dims() != reference.dims() || t.dtype() != reference.dtype())
    throw InvalidArgument(fmt::format("{}: {} ({}) must have the dims and dtype of {} ({})",
                                      operation, role, t.describe(), reference_role,
                                      reference.describe()));
}

void require_dims(std::string_view operation, std::string_view role, const Tensor& t,
                  const std::vector<std::int64_t>& expected) {
  if (t.dims() != expected)
    throw tensor_error(operation, role, t, fmt::format("dims [{}]", fmt::join(expected, ",")));
}

void require_same_dims(std::string_view operation, std::string_view role_a, const Tensor& a,
                       std::string_view role_b, const Tensor& b) {
  if (a.dims() != b.dims())
    throw InvalidArgument(fmt::format("{}: {} ({}) and {} ({}) must have the same dims", operation,
                                      role_a, a.describe(), role_b, b.describe()));
}

void require_same_numel(std::string_view operation, std::string_view reference_role,
                        const Tensor& reference, std::string_view role, const Tensor& t) {
  if (t.numel() != reference.numel())
    throw InvalidArgument(fmt::format("{}: {} ({}) and {} ({}) differ in element count", operation,
                                      reference_role, reference.describe(), role, t.describe()));
}

void check_group_norm(const OperandRules& rules, std::string_view operation, const Tensor& x,
                      const Tensor& gamma, const Tensor& mean, const Tensor& rstd, int groups) {
  require_activation(rules, operation, "x", x);
  if (groups < 1 || x.c() % groups != 0)
    throw InvalidArgument(fmt::format("{}: {} channels of x ({}) do not split into {} groups",
                                      operation, x.c(), x.describe(), groups));
  check_channel_vector(rules, operation, "gamma", gamma, x);
  require_f32(rules, operation, "mean", mean);
  require_dims(operation, "mean", mean, {x.n(), groups});
  require_f32(rules, operation, "rstd", rstd);
  require_dims(operation, "rstd", rstd, {x.n(), groups});
}

void check_channel_vector(const OperandRules& rules, std::string_view operation,
                          std::string_view role, const Tensor& t, const Tensor& x) {
  require_f32(rules, operation, role, t);
  require_dims(operation, role, t, {x.c()});
}

void check_normalization(const OperandRules& rules, std::string_view operation, const Tensor& x,
                         std::initializer_list<Operand> like_x,
                         std::initializer_list<Operand> per_channel) {
  require_activation(rules, operation, "x", x);
  for (const Operand& operand : like_x)
    if (operand.tensor != nullptr)
      require_like(rules, operation, operand.role, *operand.tensor, "x", x);
  for (const Operand& operand : per_channel)
    check_channel_vector(rules, operation, operand.role, *operand.tensor, x);
}

void check_spatial_pair(const OperandRules& rules, std::string_view operation,
                        std::string_view role_a, const Tensor& a, std::string_view role_b,
                        const Tensor& b) {
  require_activation(rules, operation, role_a, a);
  require_activation(rules, operation, role_b, b);
  if (a.n() != b.n() || a.c() != b.c() || a.dtype() != b.dtype())
    throw InvalidArgument(fmt::format("{}: {} ({}) and {} ({}) differ in batch, channels or dtype",
                                      operation, role_a, a.describe(), role_b, b.describe()));
}

void check_channel_slices(const OperandRules& rules, std::string_view operation,
                          std::span<const Tensor* const> slices, std::string_view full_role,
                          const Tensor& full) {
  require_activation(rules, operation, full_role, full);
  if (slices.empty()) throw InvalidArgument(fmt::format("{}: no slices given", operation));
  std::int64_t channels = 0;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    const std::string role = fmt::format("slice {}", i);
    if (slices[i] == nullptr) throw InvalidArgument(fmt::format("{}: {} is null", operation, role));
    const Tensor& slice = *slices[i];
    require_activation(rules, operation, role, slice);
    if (slice.n() != full.n() || slice.h() != full.h() || slice.w() != full.w() ||
        slice.dtype() != full.dtype())
      throw InvalidArgument(fmt::format("{}: {} ({}) does not match {} ({}) in N, H, W or dtype",
                                        operation, role, slice.describe(), full_role,
                                        full.describe()));
    channels += slice.c();
  }
  if (channels != full.c())
    throw InvalidArgument(fmt::format("{}: slices have {} channels in total but {} ({}) has {}",
                                      operation, channels, full_role, full.describe(), full.c()));
}

void check_channel_slices(const OperandRules& rules, std::string_view operation,
                          std::span<Tensor* const> slices, std::string_view full_role,
                          const Tensor& full) {
  const std::vector<const Tensor*> readonly(slices.begin(), slices.end());
  check_channel_slices(rules, operation, std::span<const Tensor* const>(readonly), full_role, full);
}

void check_copy(const OperandRules& rules, const Tensor& src, const Tensor& dst) {
  constexpr std::string_view operation = "copy";
  for (const auto& [role, t] : {std::pair<std::string_view, const Tensor*>{"src", &src},
                                std::pair<std::string_view, const Tensor*>{"dst", &dst}}) {
    // A backend's copy() is also how data enters and leaves it, so host tensors are welcome.
    if (t->defined() && t->device() == Device::host) continue;
    require_on(rules, operation, role, *t);
  }
  require_same_dims(operation, "src", src, "dst", dst);
  if (src.dtype() == dst.dtype()) return;
  if (!rules.copy_converts_float_types)
    throw InvalidArgument(fmt::format("{}: src {} and dst {} differ in dtype", operation,
                                      src.describe(), dst.describe()));
  if (!is_float_type(src.dtype()) || !is_float_type(dst.dtype()))
    throw InvalidArgument(
        fmt::format("{}: src {} and dst {} differ in dtype (only f32, bf16 and f16 convert into "
                    "each other)",
                    operation, src.describe(), dst.describe()));
}

namespace {

// The checks a convolution and a transposed one share: the activations, the f32 weights laid out
// as the backend reads them, a valid geometry and one dtype for both activations.
void check_convolution_operands(const OperandRules& rules, std::string_view operation,
                                const ConvRoles& roles, const Tensor& x, const Tensor& weight,
                                const Tensor& y, const ConvGeometry& g,
                                std::string_view weight_dims) {
  require_activation(rules, operation, roles.input, x);
  require_activation(rules, operation, roles.output, y);
  require_f32(rules, operation, roles.weight, weight);
  if (g.stride < 1 || g.dilation < 1 || g.padding < 0 || g.groups < 1)
    throw InvalidArgument(
        fmt::format("{}: invalid geometry stride {}, padding {}, dilation {}, groups {}", operation,
                    g.stride, g.padding, g.dilation, g.groups));
  if (x.dtype() != y.dtype())
    throw InvalidArgument(fmt::format("{}: {} ({}) and {} ({}) differ in dtype", operation,
                                      roles.input, x.describe(), roles.output, y.describe()));
  if (rules.oihw_weights_only && weight.layout() == Layout::nhwc)
    throw InvalidArgument(fmt::format("{}: {} is {}; weights are {} row-major (nchw)", operation,
                                      roles.weight, weight.describe(), weight_dims));
  if (weight.rank() != 4)
    throw tensor_error(operation, roles.weight, weight, fmt::format("a 4-D {}", weight_dims));
}

}  // namespace

std::string_view convolution_operation(int spatial_dims, bool transposed, ConvPass pass) {
  static constexpr std::string_view names[3][3] = {
      {"conv2d_forward", "conv2d_backward_data", "conv2d_backward_weights"},
      {"conv3d_forward", "conv3d_backward_data", "conv3d_backward_weights"},
      {"conv2d_transpose_forward", "conv2d_transpose_backward_data",
       "conv2d_transpose_backward_weights"}};
  return names[transposed ? 2 : spatial_dims == 3 ? 1 : 0][static_cast<int>(pass)];
}

void check_convolution(const OperandRules& rules, std::string_view operation,
                       const ConvRoles& roles, const Tensor& x, const Tensor& weight,
                       const Tensor& y, const ConvGeometry& g) {
  check_convolution_operands(rules, operation, roles, x, weight, y, g, "(O, I / groups, KH, KW)");
  if (x.c() % g.groups != 0 || weight.dim(0) % g.groups != 0)
    throw InvalidArgument(fmt::format(
        "{}: groups {} must divide the input channels of {} ({}) and the output "
        "channels of {} ({})",
        operation, g.groups, roles.input, x.describe(), roles.weight, weight.describe()));
  if (weight.dim(1) != x.c() / g.groups)
    throw InvalidArgument(fmt::format(
        "{}: {} {} does not fit {} {}{} (expected [O,{},KH,KW])", operation, roles.weight,
        weight.describe(), roles.input, x.describe(),
        g.groups > 1 ? fmt::format(" in {} groups", g.groups) : std::string(), x.c() / g.groups));
  const std::vector<std::int64_t> expected{
      x.n(), weight.dim(0),
      conv_output_size(static_cast<int>(x.h()), static_cast<int>(weight.dim(2)), g),
      conv_output_size(static_cast<int>(x.w()), static_cast<int>(weight.dim(3)), g)};
  if (expected[2] < 1 || expected[3] < 1 || y.dims() != expected)
    throw InvalidArgument(fmt::format(
        "{}: {} {} does not match {} {}, {} {}, stride {}, padding {}, dilation {} (expected [{}])",
        operation, roles.output, y.describe(), roles.input, x.describe(), roles.weight,
        weight.describe(), g.stride, g.padding, g.dilation, fmt::join(expected, ",")));
}

void check_transposed_convolution(const OperandRules& rules, std::string_view operation,
                                  const ConvRoles& roles, const Tensor& x, const Tensor& weight,
                                  const Tensor& y, const ConvGeometry& g) {
  check_convolution_operands(rules, operation, roles, x, weight, y, g, "(I, O, KH, KW)");
  if (g.groups != 1)
    throw InvalidArgument(
        fmt::format("{}: groups {} is not supported (transposed convolutions take groups 1)",
                    operation, g.groups));
  if (weight.dim(0) != x.c())
    throw InvalidArgument(fmt::format("{}: {} {} does not fit {} {} (expected [{},O,KH,KW])",
                                      operation, roles.weight, weight.describe(), roles.input,
                                      x.describe(), x.c()));
  // Every size in [smallest, smallest + stride - 1] is the input size of a convolution whose
  // output is x's size (PyTorch's output_padding picks one).
  const auto smallest = [&](std::int64_t input, std::int64_t kernel) {
    return static_cast<std::int64_t>(
        conv_transpose_output_size(static_cast<int>(input), static_cast<int>(kernel), g));
  };
  const std::int64_t h = smallest(x.h(), weight.dim(2)), w = smallest(x.w(), weight.dim(3));
  const auto fits = [&](std::int64_t size, std::int64_t lowest) {
    return size >= lowest && size <= lowest + g.stride - 1;
  };
  if (h < 1 || w < 1 || y.n() != x.n() || y.c() != weight.dim(1) || !fits(y.h(), h) ||
      !fits(y.w(), w))
    throw InvalidArgument(fmt::format(
        "{}: {} {} does not match {} {}, {} {}, stride {}, padding {}, dilation {} (expected "
        "[{},{},{}..{},{}..{}])",
        operation, roles.output, y.describe(), roles.input, x.describe(), roles.weight,
        weight.describe(), g.stride, g.padding, g.dilation, x.n(), weight.dim(1), h,
        h + g.stride - 1, w, w + g.stride - 1));
}

std::vector<std::int64_t> checked_conv3d_output_dims(const OperandRules& rules,
                                                     std::string_view operation,
                                                     const ConvRoles& roles, const Tensor& x,
                                                     const Tensor& weight, const ConvGeometry& g) {
  require_volume(rules, operation, roles.input, x);
  require_f32(rules, operation, roles.weight, weight);
  if (g.stride < 1 || g.dilation < 1 || g.padding < 0)
    throw InvalidArgument(fmt::format("{}: invalid geometry stride {}, padding {}, dilation {}",
                                      operation, g.stride, g.padding, g.dilation));
  if (g.groups != 1)
    throw InvalidArgument(fmt::format(
        "{}: groups {} is not supported (3-D convolutions take groups 1)", operation, g.groups));
  if (weight.rank() != 5 || weight.layout() == Layout::nhwc)
    throw tensor_error(operation, roles.weight, weight,
                       "a 5-D (O, I, KD, KH, KW) tensor, row-major (nchw or flat)");
  if (weight.dim(1) != x.dim(1))
    throw InvalidArgument(fmt::format("{}: {} {} does not fit {} {} (expected [O,{},KD,KH,KW])",
                                      operation, roles.weight, weight.describe(), roles.input,
                                      x.describe(), x.dim(1)));
  std::vector<std::int64_t> expected{x.dim(0), weight.dim(0)};
  for (std::size_t i = 2; i < 5; ++i)
    expected.push_back(
        conv_output_size(static_cast<int>(x.dim(i)), static_cast<int>(weight.dim(i)), g));
  if (expected[2] < 1 || expected[3] < 1 || expected[4] < 1)
    throw InvalidArgument(
        fmt::format("{}: {} {} leaves no output of {} {}, stride {}, padding {}, dilation {}",
                    operation, roles.weight, weight.describe(), roles.input, x.describe(), g.stride,
                    g.padding, g.dilation));
  return expected;
}

void check_convolution3d(const OperandRules& rules, std::string_view operation,
                         const ConvRoles& roles, const Tensor& x, const Tensor& weight,
                         const Tensor& y, const ConvGeometry& g) {
  const std::vector<std::int64_t> expected =
      checked_conv3d_output_dims(rules, operation, roles, x, weight, g);
  require_volume(rules, operation, roles.output, y);
  if (x.dtype() != y.dtype())
    throw InvalidArgument(fmt::format("{}: {} ({}) and {} ({}) differ in dtype", operation,
                                      roles.input, x.describe(), roles.output, y.describe()));
  if (y.dims() != expected)
    throw InvalidArgument(fmt::format(
        "{}: {} {} does not match {} {}, {} {}, stride {}, padding {}, dilation {} (expected [{}])",
        operation, roles.output, y.describe(), roles.input, x.describe(), roles.weight,
        weight.describe(), g.stride, g.padding, g.dilation, fmt::join(expected, ",")));
}

void check_conv3d_max_pool(const OperandRules& rules, std::string_view operation,
                           const Conv3dMaxPool& op, std::string_view y_role, const Tensor& y,
                           const Tensor& window) {
  const std::vector<std::int64_t> convolved = checked_conv3d_output_dims(
      rules, operation, {"x", "weight", y_role}, op.x, op.weight, op.convolution);
  if (op.bias != nullptr) check_bias(rules, operation, "bias", *op.bias, op.weight.dim(0));
  const PoolGeometry& g = op.pooling;
  if (g.kernel < 1 || g.stride < 1 || g.padding < 0 || g.padding > g.kernel / 2)
    throw InvalidArgument(fmt::format(
        "{}: invalid pooling kernel {}, stride {}, padding {} (padding at most kernel / 2)",
        operation, g.kernel, g.stride, g.padding));
  require_volume(rules, operation, y_role, y);
  if (op.x.dtype() != y.dtype())
    throw InvalidArgument(fmt::format("{}: x ({}) and {} ({}) differ in dtype", operation,
                                      op.x.describe(), y_role, y.describe()));
  std::vector<std::int64_t> expected{convolved[0], convolved[1]};
  for (std::size_t i = 2; i < 5; ++i)
    expected.push_back(pool_output_size(static_cast<int>(convolved[i]), g));
  if (expected[2] < 1 || expected[3] < 1 || expected[4] < 1 || y.dims() != expected)
    throw InvalidArgument(fmt::format(
        "{}: {} {} does not match x {} convolved by {} and pooled by kernel {}, stride {}, "
        "padding {} (expected [{}])",
        operation, y_role, y.describe(), op.x.describe(), op.weight.describe(), g.kernel, g.stride,
        g.padding, fmt::join(expected, ",")));
  require_on(rules, operation, "window", window);
  if (window.dtype() != DType::u8 || window.dims() != y.dims() || window.layout() != y.layout())
    throw tensor_error(
        operation, "window", window,
        fmt::format("a u8 tensor with the dims and layout of {} ({})", y_role, y.describe()));
}

void check_pool3d(const OperandRules& rules, std::string_view operation, std::string_view x_role,
                  const Tensor& x, std::string_view y_role, const Tensor& y,
                  const PoolGeometry& g) {
  require_volume(rules, operation, x_role, x);
  require_volume(rules, operation, y_role, y);
  if (g.kernel < 1 || g.stride < 1 || g.padding < 0 || g.padding > g.kernel / 2)
    throw InvalidArgument(fmt::format(
        "{}: invalid pooling kernel {}, stride {}, padding {} (padding at most kernel / 2)",
        operation, g.kernel, g.stride, g.padding));
  if (x.dtype() != y.dtype())
    throw InvalidArgument(fmt::format("{}: {} ({}) and {} ({}) differ in dtype", operation, x_role,
                                      x.describe(), y_role, y.describe()));
  std::vector<std::int64_t> expected{x.dim(0), x.dim(1)};
  for (std::size_t i = 2; i < 5; ++i)
    expected.push_back(pool_output_size(static_cast<int>(x.dim(i)), g));
  if (expected[2] < 1 || expected[3] < 1 || expected[4] < 1 || y.dims() != expected)
    throw InvalidArgument(fmt::format(
        "{}: {} {} does not match {} {} pooled by kernel {}, stride {}, padding {} (expected [{}])",
        operation, y_role, y.describe(), x_role, x.describe(), g.kernel, g.stride, g.padding,
        fmt::join(expected, ",")));
}

void require_like_volume(std::string_view operation, std::string_view role, const Tensor& t,
                         std::string_view reference_role, const Tensor& reference) {
  if (t.dims() != reference.dims() || t.dtype() != reference.dtype() ||
      t.layout() != reference.layout() || t.device() != reference.device())
    throw InvalidArgument(fmt::format("{}: {} ({}) must have the dims, dtype and layout of {} ({})",
                                      operation, role, t.describe(), reference_role,
                                      reference.describe()));
}

void check_flatten(const OperandRules& rules, std::string_view operation,
                   std::string_view volume_role, const Tensor& volume, std::string_view flat_role,
                   const Tensor& flat) {
  require_float(rules, operation, volume_role, volume);
  require_float(rules, operation, flat_role, flat);
  if (volume.rank() != 4 && volume.rank() != 5)
    throw tensor_error(operation, volume_role, volume, "a 4-D or 5-D tensor (N, C, ...)");
  const std::int64_t features = volume.dim(1) * volume.spatial_size();
  if (flat.rank() != 2 || flat.dim(0) != volume.dim(0) || flat.dim(1) != features ||
      flat.dtype() != volume.dtype())
    throw InvalidArgument(fmt::format(
        "{}: {} is {}, expected {} [{},{}] to match {} ({})", operation, flat_role, flat.describe(),
        to_string(volume.dtype()), volume.dim(0), features, volume_role, volume.describe()));
}

void check_slope(std::string_view operation, float slope) {
  if (!(slope >= 0.0f) || !std::isfinite(slope))
    throw InvalidArgument(fmt::format("{}: slope {} must be finite and >= 0", operation, slope));
}

void check_tanh_scale(std::string_view operation, float scale) {
  if (scale == 0.0f || !std::isfinite(scale))
    throw InvalidArgument(fmt::format("{}: scale {} must be finite and nonzero", operation, scale));
}

void check_dense(const OperandRules& rules, std::string_view operation, const ConvRoles& roles,
                 const Tensor& x, const Tensor& weight, const Tensor& y) {
  require_matrix(rules, operation, roles.input, x);
  require_matrix(rules, operation, roles.output, y);
  require_f32(rules, operation, roles.weight, weight);
  if (x.dtype() != y.dtype())
    throw InvalidArgument(fmt::format("{}: {} ({}) and {} ({}) differ in dtype", operation,
                                      roles.input, x.describe(), roles.output, y.describe()));
  if (weight.rank() != 2 || weight.dim(1) != x.dim(1))
    throw InvalidArgument(fmt::format("{}: {} {} does not fit {} {} (expected [O,{}])", operation,
                                      roles.weight, weight.describe(), roles.input, x.describe(),
                                      x.dim(1)));
  require_dims(operation, roles.output, y, {x.dim(0), weight.dim(0)});
}

void check_bias(const OperandRules& rules, std::string_view operation, std::string_view role,
                const Tensor& bias, std::int64_t output_channels) {
  require_f32(rules, operation, role, bias);
  require_dims(operation, role, bias, {output_channels});
}

void check_dropout(const OperandRules& rules, std::string_view operation, const Dropout& args) {
  require_float(rules, operation, "x", args.x);
  if (args.x.rank() != 2 && args.x.rank() != 4 && args.x.rank() != 5)
    throw tensor_error(operation, "x", args.x, "a 2-D, 4-D or 5-D tensor");
  // Written so that NaN fails too.
  if (!(args.rate >= 0.0f && args.rate < 1.0f))
    throw InvalidArgument(fmt::format("{}: rate {} is outside [0, 1)", operation, args.rate));
  if (args.sample_keys.size() != static_cast<std::size_t>(args.x.dim(0)))
    throw InvalidArgument(fmt::format("{}: {} sample keys for the {} samples of x ({})", operation,
                                      args.sample_keys.size(), args.x.dim(0), args.x.describe()));
}

void check_elementwise_pair(const OperandRules& rules, std::string_view operation,
                            std::string_view role_a, const Tensor& a, std::string_view role_b,
                            const Tensor& b) {
  require_float(rules, operation, role_a, a);
  require_float(rules, operation, role_b, b);
  if (a.dtype() != b.dtype() || a.dims() != b.dims() || a.layout() != b.layout())
    throw InvalidArgument(
        fmt::format("{}: {} ({}) and {} ({}) must have equal dims, dtype and layout", operation,
                    role_a, a.describe(), role_b, b.describe()));
}

void check_mse(const OperandRules& rules, std::string_view operation, const MseLoss& args,
               const Tensor& dprediction) {
  require_float(rules, operation, "prediction", args.prediction);
  // A target read from a data file may stay on the host: the backend copies what it needs.
  if (!(args.target.defined() && args.target.device() == Device::host))
    require_on(rules, operation, "target", args.target);
  if (args.target.dtype() != DType::f32)
    throw tensor_error(operation, "target", args.target, "an f32 tensor");
  require_same_dims(operation, "prediction", args.prediction, "target", args.target);
  require_float(rules, operation, "dprediction", dprediction);
  if (dprediction.dims() != args.prediction.dims() ||
      dprediction.dtype() != args.prediction.dtype())
    throw InvalidArgument(
        fmt::format("{}: dprediction ({}) must have the dims and dtype of "
                    "prediction ({})",
                    operation, dprediction.describe(), args.prediction.describe()));
  if (!std::isfinite(args.grad_scale))
    throw InvalidArgument(
        fmt::format("{}: grad_scale {} is not finite", operation, args.grad_scale));
}

void check_labels(const OperandRules& rules, std::string_view operation, const Tensor& logits,
                  const Tensor& labels) {
  require_activation(rules, operation, "logits", logits);
  require_on(rules, operation, "labels", labels);
  if (labels.dtype() != DType::i32)
    throw tensor_error(operation, "labels", labels,
                       fmt::format("a {} i32 tensor", rules.device_name));
  // With a single channel every layout addresses the same bytes.
  require_dims(operation, "labels", labels, {logits.n(), 1, logits.h(), logits.w()});
}

}  // namespace hardy::core::operands
