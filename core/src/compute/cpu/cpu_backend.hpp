#pragma once
// The CPU backend: oneDNN primitives for convolution, batch-norm application, relu, resampling
// and concatenation; OpenMP loops for what oneDNN has no primitive for (group normalization, the
// split batch-norm reductions, global average pooling, the loss, optimizer updates).
// Activations are NHWC, weights OIHW.
#include <cstddef>
#include <memory>

#include "hardy/core/compute/backend.hpp"

namespace hardy::core {

class CpuBackend final : public Backend {
 public:
  CpuBackend();
  ~CpuBackend() override;

  std::string_view name() const override { return "cpu"; }
  Layout activation_layout() const override { return Layout::nhwc; }
  Device device() const override { return Device::host; }

  Tensor empty(std::vector<std::int64_t> dims, DType dtype, Layout layout) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void fill(Tensor& t, float value) override;

  void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                      const ConvGeometry& geometry, Tensor& y) override;
  void conv2d_backward_data(const Tensor& dy, const Tensor& weight, const ConvGeometry& geometry,
                            Tensor& dx) override;
  void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const ConvGeometry& geometry,
                               Tensor& dweight, Tensor* dbias) override;

  void group_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, int groups,
                          float eps, bool fuse_relu, Tensor& y, Tensor& mean,
                          Tensor& rstd) override;
  void group_norm_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma,
                           const Tensor& mean, const Tensor& rstd, int groups, bool fuse_relu,
                           Tensor& dx, Tensor& dgamma, Tensor& dbeta) override;

  void batch_norm_statistics(const Tensor& x, Tensor& sum, Tensor& sum_squares) override;
  void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& variance,
                        const Tensor& gamma, const Tensor& beta, float eps, bool fuse_relu,
                        Tensor& y) override;
  void batch_norm_backward_statistics(const Tensor& x, const Tensor& y, const Tensor& dy,
                                      const Tensor& mean, const Tensor& variance, float eps,
                                      bool fuse_relu, Tensor& dgamma, Tensor& dbeta) override;
  void batch_norm_backward_data(const Tensor& x, const Tensor& y, const Tensor& dy,
                                const Tensor& mean, const Tensor& variance, const Tensor& gamma,
                                const Tensor& dgamma, const Tensor& dbeta, float eps,
                                bool fuse_relu, double count, Tensor& dx) override;

  void relu_forward(const Tensor& x, Tensor& y) override;
  void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override;
  void upsample_bilinear_forward(const Tensor& x, Tensor& y) override;
  void upsample_bilinear_backward(const Tensor& dy, Tensor& dx) override;
  void concat_channels(std::span<const Tensor* const> inputs, Tensor& y) override;
  void split_channels(const Tensor& dy, std::span<Tensor* const> outputs) override;
  void global_avg_pool_forward(const Tensor& x, Tensor& y) override;
  void global_avg_pool_backward(const Tensor& dy, Tensor& dx) override;

  double softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                               std::span<const float> class_weights, float grad_scale,
                               Tensor& dlogits) override;
  void argmax_channels(const Tensor& logits, Tensor& labels) override;

  // Defined in cpu/elementwise.cpp.
  void axpy(float alpha, const Tensor& x, Tensor& y) override;
  void scale(Tensor& x, float alpha) override;
  double sum_squares(const Tensor& x) override;
  void sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, float lr, float momentum,
                  float weight_decay, bool nesterov) override;
  void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
                   float beta2, float eps, float weight_decay, long step) override;
  bool has_non_finite(const Tensor& x) override;

  // Number of cached oneDNN primitives (a convolution counts once with its weights reorder);
  // tests use it to check that repeating a shape creates nothing new.
  std::size_t cached_primitive_count() const;

 private:
  // oneDNN engine, stream and the primitive caches (keyed by shapes and geometry) live here so
  // that dnnl.hpp stays out of every other translation unit.
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hardy::core
