#pragma once
// The base of Backend decorators (profilers, tracers): a Backend with the inner backend's name,
// layout, dtype and operand rules whose every do_* hook calls the inner backend's hook. A
// decorator overrides the hooks it wraps and calls ForwardingBackend::do_*() inside. Operands
// are checked once, by the decorator's public operation, against the inner backend's rules, so
// the inner backend's hooks are called directly rather than through its public operations.
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "hardy/core/compute/backend.hpp"

namespace hardy::core {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend& inner) : Backend(inner.operand_rules()), inner_(inner) {}

  std::string_view name() const override { return inner_.name(); }
  Layout activation_layout() const override { return inner_.activation_layout(); }
  Device device() const override { return inner_.device(); }
  DType activation_dtype() const override { return inner_.activation_dtype(); }

  Backend& inner() { return inner_; }
  bool fuses_conv3d_max_pool(const ConvGeometry& convolution,
                             const PoolGeometry& pooling) const override {
    return inner_.fuses_conv3d_max_pool(convolution, pooling);
  }

 protected:
  // A decorator that changes what is accepted (a test's fake device over the CPU backend).
  ForwardingBackend(Backend& inner, const OperandRules& rules) : Backend(rules), inner_(inner) {}

  Tensor do_empty(std::vector<std::int64_t> dims, DType dtype, Layout layout) override {
    return inner_.do_empty(std::move(dims), dtype, layout);
  }
  void do_copy(const Tensor& src, Tensor& dst) override { inner_.do_copy(src, dst); }
  void do_copy_many(std::span<const Tensor* const> src, std::span<Tensor* const> dst) override {
    inner_.do_copy_many(src, dst);
  }
  Tensor do_empty_host(std::vector<std::int64_t> dims, DType dtype, Layout layout) override {
    return inner_.do_empty_host(std::move(dims), dtype, layout);
  }
  void do_fill(Tensor& t, float value) override { inner_.do_fill(t, value); }
  std::unique_ptr<InputUpload> do_start_upload() override { return inner_.do_start_upload(); }
  void do_synchronize() override { inner_.do_synchronize(); }
  std::unique_ptr<DeviceSpan> do_start_device_span() override {
    return inner_.do_start_device_span();
  }

  void do_convolution_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                              const ConvGeometry& geometry, Tensor& y) override {
    inner_.do_convolution_forward(x, weight, bias, geometry, y);
  }
  void do_convolution_backward_data(const Tensor& dy, const Tensor& weight,
                                    const ConvGeometry& geometry, Tensor& dx) override {
    inner_.do_convolution_backward_data(dy, weight, geometry, dx);
  }
  void do_convolution_backward_weights(const Tensor& x, const Tensor& dy,
                                       const ConvGeometry& geometry, Tensor& dweight,
                                       Tensor* dbias) override {
    inner_.do_convolution_backward_weights(x, dy, geometry, dweight, dbias);
  }

  void do_max_pool3d_forward(const Tensor& x, const PoolGeometry& geometry, Tensor& y) override {
    inner_.do_max_pool3d_forward(x, geometry, y);
  }
  void do_max_pool3d_backward(const Tensor& x, const Tensor& dy, const PoolGeometry& geometry,
                              Tensor& dx) override {
    inner_.do_max_pool3d_backward(x, dy, geometry, dx);
  }
  void do_conv3d_max_pool_forward(const Conv3dMaxPool& op, Tensor& y, Tensor& window) override {
    inner_.do_conv3d_max_pool_forward(op, y, window);
  }
  void do_conv3d_max_pool_backward(const Conv3dMaxPool& op, const Tensor& dy, const Tensor& window,
                                   Tensor* dx, Tensor& dweight, Tensor* dbias) override {
    inner_.do_conv3d_max_pool_backward(op, dy, window, dx, dweight, dbias);
  }
  void do_dense_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                        Tensor& y) override {
    inner_.do_dense_forward(x, weight, bias, y);
  }
  void do_dense_backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    inner_.do_dense_backward_data(dy, weight, dx);
  }
  void do_dense_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight,
                                 Tensor* dbias) override {
    inner_.do_dense_backward_weights(x, dy, dweight, dbias);
  }

  void do_group_norm_forward(const GroupNormForward& args, Tensor& y, Tensor& mean,
                             Tensor& rstd) override {
    inner_.do_group_norm_forward(args, y, mean, rstd);
  }
  void do_group_norm_backward(const GroupNormBackward& args, Tensor& dx, Tensor& dgamma,
                              Tensor& dbeta) override {
    inner_.do_group_norm_backward(args, dx, dgamma, dbeta);
  }

  void do_batch_norm_statistics(const Tensor& x, Tensor& sum, Tensor& sum_squares) override {
    inner_.do_batch_norm_statistics(x, sum, sum_squares);
  }
  void do_batch_norm_apply(const BatchNormApply& args, Tensor& y) override {
    inner_.do_batch_norm_apply(args, y);
  }
  void do_batch_norm_backward_statistics(const BatchNormBackwardStatistics& args, Tensor& dgamma,
                                         Tensor& dbeta) override {
    inner_.do_batch_norm_backward_statistics(args, dgamma, dbeta);
  }
  void do_batch_norm_backward_data(const BatchNormBackwardData& args, Tensor& dx) override {
    inner_.do_batch_norm_backward_data(args, dx);
  }

  void do_relu_forward(const Tensor& x, Tensor& y) override { inner_.do_relu_forward(x, y); }
  void do_relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    inner_.do_relu_backward(y, dy, dx);
  }
  void do_upsample_bilinear_forward(const Tensor& x, Tensor& y) override {
    inner_.do_upsample_bilinear_forward(x, y);
  }
  void do_upsample_bilinear_backward(const Tensor& dy, Tensor& dx) override {
    inner_.do_upsample_bilinear_backward(dy, dx);
  }
  void do_concat_channels(std::span<const Tensor* const> inputs, Tensor& y) override {
    inner_.do_concat_channels(inputs, y);
  }
  void do_split_channels(const Tensor& dy, std::span<Tensor* const> outputs) override {
    inner_.do_split_channels(dy, outputs);
  }
  void do_global_avg_pool_forward(const Tensor& x, Tensor& y) override {
    inner_.do_global_avg_pool_forward(x, y);
  }
  void do_global_avg_pool_backward(const Tensor& dy, Tensor& dx) override {
    inner_.do_global_avg_pool_backward(dy, dx);
  }
  void do_leaky_relu_forward(const Tensor& x, float slope, Tensor& y) override {
    inner_.do_leaky_relu_forward(x, slope, y);
  }
  void do_leaky_relu_backward(const Tensor& y, const Tensor& dy, float slope, Tensor& dx) override {
    inner_.do_leaky_relu_backward(y, dy, slope, dx);
  }
  void do_scaled_tanh_forward(const Tensor& x, float scale, Tensor& y) override {
    inner_.do_scaled_tanh_forward(x, scale, y);
  }
  void do_scaled_tanh_backward(const Tensor& y, const Tensor& dy, float scale,
                               Tensor& dx) override {
    inner_.do_scaled_tanh_backward(y, dy, scale, dx);
  }
  void do_dropout_forward(const Dropout& args, Tensor& y) override {
    inner_.do_dropout_forward(args, y);
  }
  void do_dropout_backward(const Dropout& args, const Tensor& dy, Tensor& dx) override {
    inner_.do_dropout_backward(args, dy, dx);
  }

  PendingSum do_softmax_cross_entropy(const SoftmaxCrossEntropy& args, Tensor& dlogits) override {
    return inner_.do_softmax_cross_entropy(args, dlogits);
  }
  void do_argmax_channels(const Tensor& logits, Tensor& labels) override {
    inner_.do_argmax_channels(logits, labels);
  }
  PendingSum do_mse_loss(const MseLoss& args, Tensor& dprediction) override {
    return inner_.do_mse_loss(args, dprediction);
  }

  void do_axpy(float alpha, const Tensor& x, Tensor& y) override { inner_.do_axpy(alpha, x, y); }
  void do_scale(Tensor& x, float alpha) override { inner_.do_scale(x, alpha); }
  double do_sum_squares(const Tensor& x) override { return inner_.do_sum_squares(x); }
  void do_sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity,
                     const SgdStep& step) override {
    inner_.do_sgd_update(param, grad, velocity, step);
  }
  void do_adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                      const AdamStep& step) override {
    inner_.do_adam_update(param, grad, m, v, step);
  }
  bool do_has_non_finite(std::span<const Tensor* const> tensors) override {
    return inner_.do_has_non_finite(tensors);
  }

 private:
  Backend& inner_;
};

}  // namespace hardy::core
