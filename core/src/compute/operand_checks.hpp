#pragma once
// Argument validation for Backend's public operations (backend.cpp). Each backend states once
// what it accepts (an OperandRules: its device, whether activations may be bf16/f16, ...), and
// every operation checks its operands against that before it calls the backend's do_* hook;
// every check throws InvalidArgument naming the operation, the tensor's role, the tensor and
// what was expected.
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/compute/tensor.hpp"

namespace hardy::core::operands {

inline constexpr OperandRules cpu_rules{
    .device = Device::host,
    .device_name = "host",
    .elsewhere_hint = "the cpu backend works on host tensors only",
    .bf16_activations = false,
    .f16_activations = false,
    .copy_converts_float_types = false,
    .oihw_weights_only = false};
// The CPU backend in bf16 mixed precision (CpuOptions::activation_dtype bf16): bf16 activations,
// converted from and to f32 by copy().
inline constexpr OperandRules cpu_bf16_rules{
    .device = Device::host,
    .device_name = "host",
    .elsewhere_hint = "the cpu backend works on host tensors only",
    .bf16_activations = true,
    .f16_activations = false,
    .copy_converts_float_types = true,
    .oihw_weights_only = false};
inline constexpr OperandRules cuda_rules{
    .device = Device::cuda,
    .device_name = "device",
    .elsewhere_hint = "the cuda backend computes on device tensors (copy host data in first)",
    .bf16_activations = true,
    .f16_activations = true,
    .copy_converts_float_types = true,
    .oihw_weights_only = true};

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
// ... and 5-D channels-last (NDHWC): a volumetric activation or its gradient.
void require_volume(const OperandRules& rules, std::string_view operation, std::string_view role,
                    const Tensor& t);
// ... and 2-D (N, K): the activations of a dense layer (any layout tag: a matrix is row-major).
void require_matrix(const OperandRules& rules, std::string_view operation, std::string_view role,
                    const Tensor& t);
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

// copy(): both defined, each on the backend's device or the host, equal dims, and equal dtypes
// unless the backend converts between floating-point types.
void check_copy(const OperandRules& rules, const Tensor& src, const Tensor& dst);
// x (N, I, H, W), weight (O, I / groups, KH, KW) and y (N, O, OH, OW) against each other and
// the geometry; the same relation holds for dx/dy in the backward passes, whose roles are given.
struct ConvRoles {
  std::string_view input, weight, output;
};
enum class ConvPass { forward, backward_data, backward_weights };
// The public operation a convolution's pass belongs to (conv2d_forward, conv3d_backward_data,
// conv2d_transpose_backward_weights, ...), for errors; without an allocation.
std::string_view convolution_operation(int spatial_dims, bool transposed, ConvPass pass);
void check_convolution(const OperandRules& rules, std::string_view operation,
                       const ConvRoles& roles, const Tensor& x, const Tensor& weight,
                       const Tensor& y, const ConvGeometry& geometry);
// A transposed convolution's x (N, I, H, W), weight (I, O, KH, KW) and y (N, O, OH, OW), OH
// (and OW) between conv_transpose_output_size and that + stride - 1; groups must be 1.
void check_transposed_convolution(const OperandRules& rules, std::string_view operation,
                                  const ConvRoles& roles, const Tensor& x, const Tensor& weight,
                                  const Tensor& y, const ConvGeometry& geometry);
// A 3-D convolution's x (N, I, D, H, W), weight (O, I, KD, KH, KW) and y (N, O, OD, OH, OW)
// against each other and the geometry (groups 1); the same relation for dx/dy.
void check_convolution3d(const OperandRules& rules, std::string_view operation,
                         const ConvRoles& roles, const Tensor& x, const Tensor& weight,
                         const Tensor& y, const ConvGeometry& geometry);
// A fused 3-D convolution and max pooling's operands: x, weight and bias as conv3d's, y (or dy)
// the pooled convolution's dims, window a u8 tensor of y's dims.
void check_conv3d_max_pool(const OperandRules& rules, std::string_view operation,
                           const Conv3dMaxPool& op, std::string_view y_role, const Tensor& y,
                           const Tensor& window);
// A 3-D max pooling's x (N, C, D, H, W) and y (N, C, OD, OH, OW) (or dx and dy): volumes of one
// dtype, y's sizes the pooled sizes of x's under a valid geometry.
void check_pool3d(const OperandRules& rules, std::string_view operation, std::string_view x_role,
                  const Tensor& x, std::string_view y_role, const Tensor& y,
                  const PoolGeometry& geometry);
// dx of a pooling's backward: a volume with the dims and dtype of x.
void require_like_volume(std::string_view operation, std::string_view role, const Tensor& t,
                         std::string_view reference_role, const Tensor& reference);
// A flatten's (N, C, ...) side, 4-D or 5-D float in any layout, and its (N, C * ...) side of the
// same dtype.
void check_flatten(const OperandRules& rules, std::string_view operation,
                   std::string_view volume_role, const Tensor& volume, std::string_view flat_role,
                   const Tensor& flat);
// A leaky relu's slope: finite and >= 0 (so that the backward mask can come from y).
void check_slope(std::string_view operation, float slope);
// A scaled tanh's output scale: finite and nonzero (backward divides by it).
void check_tanh_scale(std::string_view operation, float scale);
// A dense layer's x (N, K), weight (O, K) f32 and y (N, O) (or dx, dweight, dy), x and y of one
// dtype.
void check_dense(const OperandRules& rules, std::string_view operation, const ConvRoles& roles,
                 const Tensor& x, const Tensor& weight, const Tensor& y);
// A convolution's bias (or its gradient): f32 with one value per output channel.
void check_bias(const OperandRules& rules, std::string_view operation, std::string_view role,
                const Tensor& bias, std::int64_t output_channels);
// Dropout's settings and x: a 2-D, 4-D or 5-D tensor of a floating-point type (any layout), a
// rate in [0, 1) and one sample key per sample of x (its first dimension).
void check_dropout(const OperandRules& rules, std::string_view operation, const Dropout& args);
// Two tensors of a floating-point type with equal dims, dtype and layout, any shape: relu works
// on the flat array.
void check_elementwise_pair(const OperandRules& rules, std::string_view operation,
                            std::string_view role_a, const Tensor& a, std::string_view role_b,
                            const Tensor& b);
// The MSE loss: prediction a float tensor, target f32 of its dims (on the backend's device or
// the host), dprediction of the prediction's dims and dtype, grad_scale finite.
void check_mse(const OperandRules& rules, std::string_view operation, const MseLoss& args,
               const Tensor& dprediction);
// The logits (an activation) and i32 labels (N, 1, H, W) of the loss and of argmax.
void check_labels(const OperandRules& rules, std::string_view operation, const Tensor& logits,
                  const Tensor& labels);

}  // namespace hardy::core::operands
