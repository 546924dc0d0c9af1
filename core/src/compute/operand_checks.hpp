#pragma once
// Argument validation shared by the backends. Each backend states once what it accepts (an
// OperandRules: its device, and whether activations may be bf16/f16), and its kernels check their
// operands against that; every check throws InvalidArgument naming the operation, the tensor's
// role, the tensor and what was expected.
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>
#include <vector>

#include "hardy/core/compute/tensor.hpp"

namespace hardy::core::operands {

struct OperandRules {
  Device device;                    // where the backend computes
  std::string_view device_name;     // "host" or "device", for messages
  std::string_view elsewhere_hint;  // why a tensor on another device is refused
  bool reduced_precision;           // activations may be bf16 or f16
};

inline constexpr OperandRules cpu_rules{Device::host, "host",
                                        "the cpu backend works on host tensors only", false};
inline constexpr OperandRules cuda_rules{
    Device::cuda, "device", "the cuda backend computes on device tensors (copy host data in first)",
    true};

bool is_float_type(DType dtype);

// Defined and on the backend's device.
void require_on(const OperandRules& rules, std::string_view operation, std::string_view role,
                const Tensor& t);
// ... and f32, any shape: parameters, gradients, statistics, optimizer state.
void require_f32(const OperandRules& rules, std::string_view operation, std::string_view role,
                 const Tensor& t);
// ... and of a floating-point type the backend computes in.
void require_float(const OperandRules& rules, std::string_view operation, std::string_view role,
                   const Tensor& t);
// ... and 4-D NHWC: an activation or its gradient.
void require_activation(const OperandRules& rules, std::string_view operation,
                        std::string_view role, const Tensor& t);
// An activation with the dims and dtype of `reference`.
void require_like(const OperandRules& rules, std::string_view operation, std::string_view role,
                  const Tensor& t, std::string_view reference_role, const Tensor& reference);

void require_dims(std::string_view operation, std::string_view role, const Tensor& t,
                  const std::vector<std::int64_t>& expected);
void require_same_dims(std::string_view operation, std::string_view role_a, const Tensor& a,
                       std::string_view role_b, const Tensor& b);
void require_same_numel(std::string_view operation, std::string_view reference_role,
                        const Tensor& reference, std::string_view role, const Tensor& t);

// Group normalization: x, gamma over its channels, and the (N, groups) mean and rstd.
void check_group_norm(const OperandRules& rules, std::string_view operation, const Tensor& x,
                      const Tensor& gamma, const Tensor& mean, const Tensor& rstd, int groups);
// An f32 vector with one value per channel of x.
void check_channel_vector(const OperandRules& rules, std::string_view operation,
                          std::string_view role, const Tensor& t, const Tensor& x);
// A role and its tensor; a null tensor is an operand switched off (the y of an unfused relu).
struct Operand {
  std::string_view role;
  const Tensor* tensor;
};
// The operands of a normalization around the activation x: `like_x` are activations with x's
// dims and dtype, `per_channel` are f32 vectors with one value per channel of x.
void check_normalization(const OperandRules& rules, std::string_view operation, const Tensor& x,
                         std::initializer_list<Operand> like_x,
                         std::initializer_list<Operand> per_channel);
// Two activations with the same batch, channels and dtype, any spatial size: the pairs of
// resampling and pooling.
void check_spatial_pair(const OperandRules& rules, std::string_view operation,
                        std::string_view role_a, const Tensor& a, std::string_view role_b,
                        const Tensor& b);
// The inputs of a channel concatenation (or outputs of a split) against the full tensor.
void check_channel_slices(const OperandRules& rules, std::string_view operation,
                          std::span<const Tensor* const> slices, std::string_view full_role,
                          const Tensor& full);
void check_channel_slices(const OperandRules& rules, std::string_view operation,
                          std::span<Tensor* const> slices, std::string_view full_role,
                          const Tensor& full);

}  // namespace hardy::core::operands
