#pragma once
// A Backend decorator for the GPU step benchmark (hardy_gpu_bench --op-profile): forwards every
// operation to a CudaBackend (a ForwardingBackend) and, while enabled, brackets each one with
// CUDA events on the backend's stream, so that the GPU time of every operation inside a real
// training step is measured without synchronising between operations. What the events do not
// cover (host work between operations, launch gaps) is the step's time minus their sum.
//
// Convolutions are also counted per pass and shape at 2 * N * OH * OW * O * I / groups * KH * KW
// floating-point operations (multiply and add), the convention of PyTorch's and NVIDIA's TFLOP/s
// figures (a transposed convolution at 2 * N * H * W * I * O * KH * KW, H and W its input's; a
// 3-D one at 2 * N * OD * OH * OW * O * I * KD * KH * KW; a dense layer at 2 * N * O * K);
// their time includes the conversion of the weights into cuDNN's layout, which the backend does
// inside each convolution.
#include <fmt/format.h>

#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hardy/core/compute/cuda_backend.hpp"
#include "hardy/core/compute/cuda_runtime.hpp"
#include "hardy/core/compute/forwarding_backend.hpp"

namespace hardy::bench {

class OpProfileBackend final : public core::ForwardingBackend {
 public:
  struct Entry {
    double flops = 0;    // summed over calls (convolutions only)
    double seconds = 0;  // summed over calls
    long calls = 0;
  };

  explicit OpProfileBackend(core::CudaBackend& inner)
      : core::ForwardingBackend(inner), inner_(inner) {}

  void enable(bool on) { enabled_ = on; }
  // Waits for the stream and adds the operations timed since the last collect() to the entries.
  void collect() {
    inner_.synchronize();
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      float ms = 0.0f;
      HARDY_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[2 * i].get(), events_[2 * i + 1].get()));
      const Pending& p = pending_[i];
      for (auto* table : {&operations_, p.convolution ? &convolutions_ : nullptr}) {
        if (table == nullptr) continue;
        Entry& entry = (*table)[table == &operations_ ? p.operation : p.shape];
        entry.flops += p.flops;
        entry.seconds += 1e-3 * ms;
        entry.calls += 1;
      }
    }
    pending_.clear();
  }
  // Per operation name (conv_forward, group_norm_backward, adam_update, ...).
  const std::map<std::string, Entry>& operations() const { return operations_; }
  // Per convolution pass and shape.
  const std::map<std::string, Entry>& convolutions() const { return convolutions_; }
  static double total_seconds(const std::map<std::string, Entry>& table) {
    double total = 0;
    for (const auto& [key, e] : table) total += e.seconds;
    return total;
  }
  static double total_flops(const std::map<std::string, Entry>& table) {
    double total = 0;
    for (const auto& [key, e] : table) total += e.flops;
    return total;
  }

 protected:
  using Base = core::ForwardingBackend;
  using Tensor = core::Tensor;

  void do_copy(const Tensor& src, Tensor& dst) override {
    timed("copy", [&] { Base::do_copy(src, dst); });
  }
  void do_fill(Tensor& t, float value) override {
    timed("fill", [&] { Base::do_fill(t, value); });
  }
  // A transposed convolution is a convolution from its output to its input, so its input side
  // takes the place of a convolution's output side (which the flop count is taken over).
  void do_convolution_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                              const core::ConvGeometry& g, Tensor& y) override {
    const auto run = [&] { Base::do_convolution_forward(x, weight, bias, g, y); };
    if (g.transposed)
      convolution("conv_transpose_forward", y, weight, g, x, run);
    else
      convolution(x.rank() == 5 ? "conv3d_forward" : "conv_forward", x, weight, g, y, run);
  }
  void do_convolution_backward_data(const Tensor& dy, const Tensor& weight,
                                    const core::ConvGeometry& g, Tensor& dx) override {
    const auto run = [&] { Base::do_convolution_backward_data(dy, weight, g, dx); };
    if (g.transposed)
      convolution("conv_transpose_backward_data", dy, weight, g, dx, run);
    else
      convolution(dx.rank() == 5 ? "conv3d_backward_data" : "conv_backward_data", dx, weight, g, dy,
                  run);
  }
  void do_convolution_backward_weights(const Tensor& x, const Tensor& dy,
                                       const core::ConvGeometry& g, Tensor& dweight,
                                       Tensor* dbias) override {
    const auto run = [&] { Base::do_convolution_backward_weights(x, dy, g, dweight, dbias); };
    if (g.transposed)
      convolution("conv_transpose_backward_weights", dy, dweight, g, x, run);
    else
      convolution(x.rank() == 5 ? "conv3d_backward_weights" : "conv_backward_weights", x, dweight,
                  g, dy, run);
  }
  void do_max_pool3d_forward(const Tensor& x, const core::PoolGeometry& g, Tensor& y) override {
    timed("max_pool3d_forward", [&] { Base::do_max_pool3d_forward(x, g, y); });
  }
  void do_max_pool3d_backward(const Tensor& x, const Tensor& dy, const core::PoolGeometry& g,
                              Tensor& dx) override {
    timed("max_pool3d_backward", [&] { Base::do_max_pool3d_backward(x, dy, g, dx); });
  }
  // A dense layer is a 1x1 convolution over N pixels: counted among the convolutions.
  void do_dense_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                        Tensor& y) override {
    dense("dense_forward", x, weight, y, [&] { Base::do_dense_forward(x, weight, bias, y); });
  }
  void do_dense_backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    dense("dense_backward_data", dx, weight, dy,
          [&] { Base::do_dense_backward_data(dy, weight, dx); });
  }
  void do_dense_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight,
                                 Tensor* dbias) override {
    dense("dense_backward_weights", x, dweight, dy,
          [&] { Base::do_dense_backward_weights(x, dy, dweight, dbias); });
  }
  void do_group_norm_forward(const core::GroupNormForward& args, Tensor& y, Tensor& mean,
                             Tensor& rstd) override {
    timed("group_norm_forward", [&] { Base::do_group_norm_forward(args, y, mean, rstd); });
  }
  void do_group_norm_backward(const core::GroupNormBackward& args, Tensor& dx, Tensor& dgamma,
                              Tensor& dbeta) override {
    timed("group_norm_backward", [&] { Base::do_group_norm_backward(args, dx, dgamma, dbeta); });
  }
  void do_batch_norm_statistics(const Tensor& x, Tensor& sum, Tensor& sum_squares) override {
    timed("batch_norm_statistics", [&] { Base::do_batch_norm_statistics(x, sum, sum_squares); });
  }
  void do_batch_norm_apply(const core::BatchNormApply& args, Tensor& y) override {
    timed("batch_norm_apply", [&] { Base::do_batch_norm_apply(args, y); });
  }
  void do_batch_norm_backward_statistics(const core::BatchNormBackwardStatistics& args,
                                         Tensor& dgamma, Tensor& dbeta) override {
    timed("batch_norm_backward_statistics",
          [&] { Base::do_batch_norm_backward_statistics(args, dgamma, dbeta); });
  }
  void do_batch_norm_backward_data(const core::BatchNormBackwardData& args, Tensor& dx) override {
    timed("batch_norm_backward_data", [&] { Base::do_batch_norm_backward_data(args, dx); });
  }
  void do_relu_forward(const Tensor& x, Tensor& y) override {
    timed("relu_forward", [&] { Base::do_relu_forward(x, y); });
  }
  void do_relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    timed("relu_backward", [&] { Base::do_relu_backward(y, dy, dx); });
  }
  void do_upsample_bilinear_forward(const Tensor& x, Tensor& y) override {
    timed("upsample_forward", [&] { Base::do_upsample_bilinear_forward(x, y); });
  }
  void do_upsample_bilinear_backward(const Tensor& dy, Tensor& dx) override {
    timed("upsample_backward", [&] { Base::do_upsample_bilinear_backward(dy, dx); });
  }
  void do_concat_channels(std::span<const Tensor* const> inputs, Tensor& y) override {
    timed("concat_channels", [&] { Base::do_concat_channels(inputs, y); });
  }
  void do_split_channels(const Tensor& dy, std::span<Tensor* const> outputs) override {
    timed("split_channels", [&] { Base::do_split_channels(dy, outputs); });
  }
  void do_global_avg_pool_forward(const Tensor& x, Tensor& y) override {
    timed("global_avg_pool_forward", [&] { Base::do_global_avg_pool_forward(x, y); });
  }
  void do_global_avg_pool_backward(const Tensor& dy, Tensor& dx) override {
    timed("global_avg_pool_backward", [&] { Base::do_global_avg_pool_backward(dy, dx); });
  }
  void do_leaky_relu_forward(const Tensor& x, float slope, Tensor& y) override {
    timed("leaky_relu_forward", [&] { Base::do_leaky_relu_forward(x, slope, y); });
  }
  void do_leaky_relu_backward(const Tensor& y, const Tensor& dy, float slope, Tensor& dx) override {
    timed("leaky_relu_backward", [&] { Base::do_leaky_relu_backward(y, dy, slope, dx); });
  }
  void do_scaled_tanh_forward(const Tensor& x, float scale, Tensor& y) override {
    timed("scaled_tanh_forward", [&] { Base::do_scaled_tanh_forward(x, scale, y); });
  }
  void do_scaled_tanh_backward(const Tensor& y, const Tensor& dy, float scale,
                               Tensor& dx) override {
    timed("scaled_tanh_backward", [&] { Base::do_scaled_tanh_backward(y, dy, scale, dx); });
  }
  void do_dropout_forward(const core::Dropout& args, Tensor& y) override {
    timed("dropout_forward", [&] { Base::do_dropout_forward(args, y); });
  }
  void do_dropout_backward(const core::Dropout& args, const Tensor& dy, Tensor& dx) override {
    timed("dropout_backward", [&] { Base::do_dropout_backward(args, dy, dx); });
  }
  core::PendingSum do_softmax_cross_entropy(const core::SoftmaxCrossEntropy& args,
                                            Tensor& dlogits) override {
    return timed("softmax_cross_entropy",
                 [&] { return Base::do_softmax_cross_entropy(args, dlogits); });
  }
  core::PendingSum do_mse_loss(const core::MseLoss& args, Tensor& dprediction) override {
    return timed("mse_loss", [&] { return Base::do_mse_loss(args, dprediction); });
  }
  void do_axpy(float alpha, const Tensor& x, Tensor& y) override {
    timed("axpy", [&] { Base::do_axpy(alpha, x, y); });
  }
  void do_scale(Tensor& x, float alpha) override {
    timed("scale", [&] { Base::do_scale(x, alpha); });
  }
  double do_sum_squares(const Tensor& x) override {
    return timed("sum_squares", [&] { return Base::do_sum_squares(x); });
  }
  void do_sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity,
                     const core::SgdStep& step) override {
    timed("sgd_update", [&] { Base::do_sgd_update(param, grad, velocity, step); });
  }
  void do_adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                      const core::AdamStep& step) override {
    timed("adam_update", [&] { Base::do_adam_update(param, grad, m, v, step); });
  }
  bool do_has_non_finite(std::span<const Tensor* const> tensors) override {
    return timed("has_non_finite", [&] { return Base::do_has_non_finite(tensors); });
  }

 private:
  struct Pending {
    std::string operation;
    bool convolution = false;
    std::string shape;  // convolutions: pass, kernel, stride, dilation, input and output dims
    double flops = 0;
  };

  // Records events around `call` on the stream; an operation that waits for the device inside
  // (a loss or a norm read back) still ends its bracket at its last queued work.
  template <class Call>
  auto timed(const char* operation, Call&& call, Pending pending = {})
      -> std::invoke_result_t<Call&> {
    if (!enabled_) return call();
    const std::size_t index = pending_.size();
    while (events_.size() < 2 * (index + 1)) events_.emplace_back(/*timing=*/true);
    events_[2 * index].record(inner_.stream());
    pending.operation = operation;
    pending_.push_back(std::move(pending));
    if constexpr (std::is_void_v<std::invoke_result_t<Call&>>) {
      call();
      events_[2 * index + 1].record(inner_.stream());
    } else {
      auto result = call();
      events_[2 * index + 1].record(inner_.stream());
      return result;
    }
  }

  // x: the convolution's input side, y: its output side, whatever the pass; 2-D or 3-D (the
  // output's spatial sizes times the weight's elements).
  template <class Call>
  void convolution(const char* pass, const Tensor& x, const Tensor& weight,
                   const core::ConvGeometry& g, const Tensor& y, Call&& call) {
    const double flops = 2.0 * static_cast<double>(y.dim(0) * y.spatial_size()) *
                         static_cast<double>(weight.numel());
    timed(pass, std::forward<Call>(call),
          {.operation = pass,
           .convolution = true,
           .shape =
               fmt::format("{:<23} k{} s{} d{}{} [{}]->[{}]", pass, weight.dim(2), g.stride,
                           g.dilation, g.groups > 1 ? fmt::format(" g{}", g.groups) : std::string(),
                           fmt::join(x.dims(), ","), fmt::join(y.dims(), ",")),
           .flops = flops});
  }
  // x (N, K), weight (O, K), y (N, O): 2 * N * O * K.
  template <class Call>
  void dense(const char* pass, const Tensor& x, const Tensor& weight, const Tensor& y,
             Call&& call) {
    timed(pass, std::forward<Call>(call),
          {.operation = pass,
           .convolution = true,
           .shape = fmt::format("{:<23} [{}]->[{}]", pass, fmt::join(x.dims(), ","),
                                fmt::join(y.dims(), ",")),
           .flops = 2.0 * static_cast<double>(x.dim(0)) * static_cast<double>(weight.numel())});
  }

  core::CudaBackend& inner_;  // the same backend as ForwardingBackend::inner(), for its stream
  bool enabled_ = false;
  std::vector<core::cuda::Event> events_;
  std::vector<Pending> pending_;
  std::map<std::string, Entry> operations_;
  std::map<std::string, Entry> convolutions_;
};

}  // namespace hardy::bench
