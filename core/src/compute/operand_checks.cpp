#include "compute/operand_checks.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>

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
  if (rules.reduced_precision ? !is_float_type(t.dtype()) : t.dtype() != DType::f32)
    throw tensor_error(operation, role, t, rules.reduced_precision ? "f32, bf16 or f16" : "f32");
}

void require_activation(const OperandRules& rules, std::string_view operation,
                        std::string_view role, const Tensor& t) {
  require_float(rules, operation, role, t);
  if (t.rank() != 4 || t.layout() != Layout::nhwc)
    throw tensor_error(operation, role, t, "a 4-D nhwc tensor");
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

}  // namespace hardy::core::operands
