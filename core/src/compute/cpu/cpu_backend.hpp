#pragma once
// The CPU backend: oneDNN primitives for convolution (2-D: also grouped and transposed; 3-D),
// dense layers (inner product), batch-norm application, relu and leaky relu, resampling and
// concatenation; OpenMP loops for what oneDNN has no primitive for (group normalization, the
// split batch-norm reductions, global average pooling, 3-D max pooling, dropout, scaled tanh,
// the losses, optimizer updates); a 3-D convolution and the max pooling that alone reads it,
// fused a slab at a time (cpu/conv3d_max_pool.cpp).
// Activations are NHWC (NDHWC), weights OIHW (OIDHW).
//
// Precision contract (the CUDA backend's, hardy/core/compute/cuda_backend.hpp): activations
// (4-D, 5-D and the dense layers' 2-D ones, and their gradients) are f32 or, in mixed precision,
// bf16; parameters, their gradients, optimizer state and normalization statistics are f32
// always. In bf16, convolutions and dense layers read bf16 activations and the f32 weights
// converted to bf16 (oneDNN's reorder, into the primitive's own layout), accumulate in f32 and
// write weight gradients in f32; the hand-written kernels load bf16 into float, reduce in double
// and round once when they store (compute/cpu/element_types.hpp).
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "hardy/core/compute/backend.hpp"

namespace hardy::core {

struct CpuOptions {
  // f32, or bf16 (mixed precision). bf16 needs a CPU on which oneDNN computes it natively
  // (cpu_has_native_bf16()): the constructor refuses it elsewhere.
  DType activation_dtype = DType::f32;
};

// Whether oneDNN computes bf16 natively on this CPU (AVX512-BF16 or AMX), within any limit set by
// ONEDNN_MAX_CPU_ISA (DNNL_MAX_CPU_ISA); the name of the instruction set it would use.
bool cpu_has_native_bf16();
std::string cpu_isa_name();
// Why the CPU backend cannot keep activations in `dtype` here, or nullopt when it can.
std::optional<std::string> cpu_precision_unsupported(DType dtype);

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(CpuOptions options = {});
  ~CpuBackend() override;

  std::string_view name() const override { return "cpu"; }
  Layout activation_layout() const override { return Layout::nhwc; }
  Device device() const override { return Device::host; }
  DType activation_dtype() const override { return activation_dtype_; }

  // Number of cached oneDNN primitives (a convolution counts once with its weights reorder);
  // tests use it to check that repeating a shape creates nothing new.
  std::size_t cached_primitive_count() const;

  // Defined in cpu/conv3d_max_pool.cpp.
  bool fuses_conv3d_max_pool(const ConvGeometry& convolution,
                             const PoolGeometry& pooling) const override;

 protected:
  // Backend's hooks, called with operands already checked against operands::cpu_rules.
  Tensor do_empty(std::vector<std::int64_t> dims, DType dtype, Layout layout) override;
  void do_copy(const Tensor& src, Tensor& dst) override;
  void do_fill(Tensor& t, float value) override;

  // Defined in cpu/convolution.cpp.
  void do_convolution_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                              const ConvGeometry& geometry, Tensor& y) override;
  void do_convolution_backward_data(const Tensor& dy, const Tensor& weight,
                                    const ConvGeometry& geometry, Tensor& dx) override;
  void do_convolution_backward_weights(const Tensor& x, const Tensor& dy,
                                       const ConvGeometry& geometry, Tensor& dweight,
                                       Tensor* dbias) override;

  // Defined in cpu/pooling3d.cpp.
  void do_max_pool3d_forward(const Tensor& x, const PoolGeometry& geometry, Tensor& y) override;
  void do_max_pool3d_backward(const Tensor& x, const Tensor& dy, const PoolGeometry& geometry,
                              Tensor& dx) override;
  // Defined in cpu/conv3d_max_pool.cpp.
  void do_conv3d_max_pool_forward(const Conv3dMaxPool& op, Tensor& y, Tensor& window) override;
  void do_conv3d_max_pool_backward(const Conv3dMaxPool& op, const Tensor& dy, const Tensor& window,
                                   Tensor* dx, Tensor& dweight, Tensor* dbias) override;
  // Defined in cpu/dense.cpp.
  void do_dense_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                        Tensor& y) override;
  void do_dense_backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override;
  void do_dense_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight,
                                 Tensor* dbias) override;
  // Defined in cpu/activations.cpp.
  void do_leaky_relu_forward(const Tensor& x, float slope, Tensor& y) override;
  void do_leaky_relu_backward(const Tensor& y, const Tensor& dy, float slope, Tensor& dx) override;
  void do_scaled_tanh_forward(const Tensor& x, float scale, Tensor& y) override;
  void do_scaled_tanh_backward(const Tensor& y, const Tensor& dy, float scale, Tensor& dx) override;

  // Defined in cpu/normalization.cpp.
  void do_group_norm_forward(const GroupNormForward& args, Tensor& y, Tensor& mean,
                             Tensor& rstd) override;
  void do_group_norm_backward(const GroupNormBackward& args, Tensor& dx, Tensor& dgamma,
                              Tensor& dbeta) override;
  void do_batch_norm_statistics(const Tensor& x, Tensor& sum, Tensor& sum_squares) override;
  void do_batch_norm_apply(const BatchNormApply& args, Tensor& y) override;
  void do_batch_norm_backward_statistics(const BatchNormBackwardStatistics& args, Tensor& dgamma,
                                         Tensor& dbeta) override;
  void do_batch_norm_backward_data(const BatchNormBackwardData& args, Tensor& dx) override;

  // Defined in cpu/resample_pool_concat.cpp.
  void do_relu_forward(const Tensor& x, Tensor& y) override;
  void do_relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override;
  void do_upsample_bilinear_forward(const Tensor& x, Tensor& y) override;
  void do_upsample_bilinear_backward(const Tensor& dy, Tensor& dx) override;
  void do_concat_channels(std::span<const Tensor* const> inputs, Tensor& y) override;
  void do_split_channels(const Tensor& dy, std::span<Tensor* const> outputs) override;
  void do_global_avg_pool_forward(const Tensor& x, Tensor& y) override;
  void do_global_avg_pool_backward(const Tensor& dy, Tensor& dx) override;

  // Defined in cpu/dropout.cpp.
  void do_dropout_forward(const Dropout& args, Tensor& y) override;
  void do_dropout_backward(const Dropout& args, const Tensor& dy, Tensor& dx) override;

  // Defined in cpu/loss.cpp.
  PendingSum do_softmax_cross_entropy(const SoftmaxCrossEntropy& args, Tensor& dlogits) override;
  void do_argmax_channels(const Tensor& logits, Tensor& labels) override;
  PendingSum do_mse_loss(const MseLoss& args, Tensor& dprediction) override;

  // Defined in cpu/elementwise.cpp.
  void do_axpy(float alpha, const Tensor& x, Tensor& y) override;
  void do_scale(Tensor& x, float alpha) override;
  double do_sum_squares(const Tensor& x) override;
  void do_sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity,
                     const SgdStep& step) override;
  void do_adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                      const AdamStep& step) override;
  bool do_has_non_finite(std::span<const Tensor* const> tensors) override;

 private:
  // oneDNN engine, stream and the primitive caches (keyed by shapes and geometry) live here so
  // that dnnl.hpp stays out of every other translation unit.
  struct Impl;
  std::unique_ptr<Impl> impl_;
  DType activation_dtype_;
};

}  // namespace hardy::core
