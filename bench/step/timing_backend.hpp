#pragma once
// A Backend decorator (a ForwardingBackend overriding every do_* hook) that forwards every
// operation to another backend and adds up the wall time of each, keyed by operation and shape.
// The model only sees the Backend interface, so this profiles hardy's training step per kernel
// without touching core/: every operation is synchronous on the CPU backend, and the decorator
// calls synchronize() before stopping the clock so that it would also time a queueing (GPU) backend
// correctly. Besides wall time it records the process's CPU time, which on a shared machine is the
// steadier measure of a single-threaded run (time spent descheduled does not count).
#include <fmt/format.h>
#include <time.h>

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hardy/core/compute/forwarding_backend.hpp"

namespace hardy::bench {

class TimingBackend final : public core::ForwardingBackend {
 private:
  // Defined before their callers: GCC needs a deduced return type before its first use.
  static std::string shape(const core::Tensor& t) {
    return fmt::format("[{}]", fmt::join(t.dims(), ","));
  }
  // "k3 s2 d1 [8,16,64,64]->[8,16,32,32]": the input side, kernel and geometry (and groups, when
  // there are several), output side.
  static std::string conv_shape(const core::Tensor& x, const core::Tensor& weight,
                                const core::ConvGeometry& g, const core::Tensor& y) {
    return fmt::format("k{} s{} d{}{} {}->{}", weight.dim(2), g.stride, g.dilation,
                       g.groups > 1 ? fmt::format(" g{}", g.groups) : std::string(), shape(x),
                       shape(y));
  }

  // A convolution pass's name: conv_fwd, conv3d_bwd_data, conv_transpose_bwd_weights, ...
  enum Pass { kForward, kBackwardData, kBackwardWeights };
  static const char* pass_name(const core::Tensor& activations, const core::ConvGeometry& g,
                               Pass pass) {
    static constexpr const char* names[3][3] = {
        {"conv_fwd", "conv_bwd_data", "conv_bwd_weights"},
        {"conv3d_fwd", "conv3d_bwd_data", "conv3d_bwd_weights"},
        {"conv_transpose_fwd", "conv_transpose_bwd_data", "conv_transpose_bwd_weights"}};
    return names[g.transposed ? 2 : activations.rank() == 5 ? 1 : 0][pass];
  }

  template <class Call>
  decltype(auto) timed(const char* operation, const std::string& detail, Call&& call) {
    if (!enabled_) return call();
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    const double cpu_start = process_cpu_seconds();
    // The result (if any) is kept until the clock stops; void calls need their own branch.
    if constexpr (std::is_void_v<decltype(call())>) {
      call();
      inner().synchronize();
      record(operation, detail, Clock::now() - start, process_cpu_seconds() - cpu_start);
    } else {
      auto result = call();
      inner().synchronize();
      record(operation, detail, Clock::now() - start, process_cpu_seconds() - cpu_start);
      return result;
    }
  }
  void record(const char* operation, const std::string& detail,
              std::chrono::steady_clock::duration elapsed, double cpu_seconds) {
    Entry& entry = entries_[detail.empty() ? operation : fmt::format("{} {}", operation, detail)];
    entry.seconds += std::chrono::duration<double>(elapsed).count();
    entry.cpu_seconds += cpu_seconds;
    ++entry.calls;
  }

 public:
  struct Entry {
    double seconds = 0;      // wall time
    double cpu_seconds = 0;  // CPU time of all the process's threads
    long calls = 0;
  };

  // CPU time of the whole process (all threads), in seconds.
  static double process_cpu_seconds() {
    timespec now{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
  }

  explicit TimingBackend(core::Backend& inner) : core::ForwardingBackend(inner) {}

  // Per-key totals since the last reset(); the key is "operation shape".
  const std::map<std::string, Entry>& entries() const { return entries_; }
  void reset() { entries_.clear(); }
  // Off: calls are forwarded without timing (warm-up, or timing whole steps only).
  void set_enabled(bool enabled) { enabled_ = enabled; }

 protected:
  // Backend's public operations check the operands (against the inner backend's rules, outside
  // the clock); the hooks below time the inner backend's implementation.
  using Base = core::ForwardingBackend;

  core::Tensor do_empty(std::vector<std::int64_t> dims, core::DType dtype,
                        core::Layout layout) override {
    return timed("empty", {}, [&] { return Base::do_empty(std::move(dims), dtype, layout); });
  }
  void do_copy(const core::Tensor& src, core::Tensor& dst) override {
    timed("copy", shape(src), [&] { Base::do_copy(src, dst); });
  }
  void do_fill(core::Tensor& t, float value) override {
    timed("fill", shape(t), [&] { Base::do_fill(t, value); });
  }

  void do_convolution_forward(const core::Tensor& x, const core::Tensor& weight,
                              const core::Tensor* bias, const core::ConvGeometry& geometry,
                              core::Tensor& y) override {
    timed(pass_name(x, geometry, kForward), conv_shape(x, weight, geometry, y),
          [&] { Base::do_convolution_forward(x, weight, bias, geometry, y); });
  }
  void do_convolution_backward_data(const core::Tensor& dy, const core::Tensor& weight,
                                    const core::ConvGeometry& geometry, core::Tensor& dx) override {
    timed(pass_name(dx, geometry, kBackwardData), conv_shape(dx, weight, geometry, dy),
          [&] { Base::do_convolution_backward_data(dy, weight, geometry, dx); });
  }
  void do_convolution_backward_weights(const core::Tensor& x, const core::Tensor& dy,
                                       const core::ConvGeometry& geometry, core::Tensor& dweight,
                                       core::Tensor* dbias) override {
    timed(pass_name(x, geometry, kBackwardWeights), conv_shape(x, dweight, geometry, dy),
          [&] { Base::do_convolution_backward_weights(x, dy, geometry, dweight, dbias); });
  }

  void do_max_pool3d_forward(const core::Tensor& x, const core::PoolGeometry& geometry,
                             core::Tensor& y) override {
    timed("max_pool3d_fwd", fmt::format("{}->{}", shape(x), shape(y)),
          [&] { Base::do_max_pool3d_forward(x, geometry, y); });
  }
  void do_max_pool3d_backward(const core::Tensor& x, const core::Tensor& dy,
                              const core::PoolGeometry& geometry, core::Tensor& dx) override {
    timed("max_pool3d_bwd", fmt::format("{}->{}", shape(dy), shape(dx)),
          [&] { Base::do_max_pool3d_backward(x, dy, geometry, dx); });
  }
  void do_conv3d_max_pool_forward(const core::Conv3dMaxPool& op, core::Tensor& y,
                                  core::Tensor& window) override {
    timed("conv3d_max_pool_fwd", fmt::format("{}->{}", shape(op.x), shape(y)),
          [&] { Base::do_conv3d_max_pool_forward(op, y, window); });
  }
  void do_conv3d_max_pool_backward(const core::Conv3dMaxPool& op, const core::Tensor& dy,
                                   const core::Tensor& window, core::Tensor* dx,
                                   core::Tensor& dweight, core::Tensor* dbias) override {
    timed(dx != nullptr ? "conv3d_max_pool_bwd" : "conv3d_max_pool_bwd_weights",
          fmt::format("{}->{}", shape(dy), shape(op.x)),
          [&] { Base::do_conv3d_max_pool_backward(op, dy, window, dx, dweight, dbias); });
  }
  void do_dense_forward(const core::Tensor& x, const core::Tensor& weight, const core::Tensor* bias,
                        core::Tensor& y) override {
    timed("dense_fwd", fmt::format("{}->{}", shape(x), shape(y)),
          [&] { Base::do_dense_forward(x, weight, bias, y); });
  }
  void do_dense_backward_data(const core::Tensor& dy, const core::Tensor& weight,
                              core::Tensor& dx) override {
    timed("dense_bwd_data", fmt::format("{}->{}", shape(dy), shape(dx)),
          [&] { Base::do_dense_backward_data(dy, weight, dx); });
  }
  void do_dense_backward_weights(const core::Tensor& x, const core::Tensor& dy,
                                 core::Tensor& dweight, core::Tensor* dbias) override {
    timed("dense_bwd_weights", shape(dweight),
          [&] { Base::do_dense_backward_weights(x, dy, dweight, dbias); });
  }

  void do_group_norm_forward(const core::GroupNormForward& args, core::Tensor& y,
                             core::Tensor& mean, core::Tensor& rstd) override {
    timed("group_norm_fwd", fmt::format("{} g{}", shape(args.x), args.groups),
          [&] { Base::do_group_norm_forward(args, y, mean, rstd); });
  }
  void do_group_norm_backward(const core::GroupNormBackward& args, core::Tensor& dx,
                              core::Tensor& dgamma, core::Tensor& dbeta) override {
    timed("group_norm_bwd", fmt::format("{} g{}", shape(args.x), args.groups),
          [&] { Base::do_group_norm_backward(args, dx, dgamma, dbeta); });
  }

  void do_batch_norm_statistics(const core::Tensor& x, core::Tensor& sum,
                                core::Tensor& sum_squares) override {
    timed("batch_norm_statistics", shape(x),
          [&] { Base::do_batch_norm_statistics(x, sum, sum_squares); });
  }
  void do_batch_norm_apply(const core::BatchNormApply& args, core::Tensor& y) override {
    timed("batch_norm_apply", shape(args.x), [&] { Base::do_batch_norm_apply(args, y); });
  }
  void do_batch_norm_backward_statistics(const core::BatchNormBackwardStatistics& args,
                                         core::Tensor& dgamma, core::Tensor& dbeta) override {
    timed("batch_norm_backward_statistics", shape(args.x),
          [&] { Base::do_batch_norm_backward_statistics(args, dgamma, dbeta); });
  }
  void do_batch_norm_backward_data(const core::BatchNormBackwardData& args,
                                   core::Tensor& dx) override {
    timed("batch_norm_backward_data", shape(args.x),
          [&] { Base::do_batch_norm_backward_data(args, dx); });
  }

  void do_relu_forward(const core::Tensor& x, core::Tensor& y) override {
    timed("relu_fwd", shape(x), [&] { Base::do_relu_forward(x, y); });
  }
  void do_relu_backward(const core::Tensor& y, const core::Tensor& dy, core::Tensor& dx) override {
    timed("relu_bwd", shape(y), [&] { Base::do_relu_backward(y, dy, dx); });
  }
  void do_upsample_bilinear_forward(const core::Tensor& x, core::Tensor& y) override {
    timed("upsample_fwd", fmt::format("{}->{}", shape(x), shape(y)),
          [&] { Base::do_upsample_bilinear_forward(x, y); });
  }
  void do_upsample_bilinear_backward(const core::Tensor& dy, core::Tensor& dx) override {
    timed("upsample_bwd", fmt::format("{}->{}", shape(dy), shape(dx)),
          [&] { Base::do_upsample_bilinear_backward(dy, dx); });
  }
  void do_concat_channels(std::span<const core::Tensor* const> inputs, core::Tensor& y) override {
    timed("concat", shape(y), [&] { Base::do_concat_channels(inputs, y); });
  }
  void do_split_channels(const core::Tensor& dy, std::span<core::Tensor* const> outputs) override {
    timed("split", shape(dy), [&] { Base::do_split_channels(dy, outputs); });
  }
  void do_global_avg_pool_forward(const core::Tensor& x, core::Tensor& y) override {
    timed("avg_pool_fwd", shape(x), [&] { Base::do_global_avg_pool_forward(x, y); });
  }
  void do_global_avg_pool_backward(const core::Tensor& dy, core::Tensor& dx) override {
    timed("avg_pool_bwd", shape(dx), [&] { Base::do_global_avg_pool_backward(dy, dx); });
  }
  void do_leaky_relu_forward(const core::Tensor& x, float slope, core::Tensor& y) override {
    timed("leaky_relu_fwd", shape(x), [&] { Base::do_leaky_relu_forward(x, slope, y); });
  }
  void do_leaky_relu_backward(const core::Tensor& y, const core::Tensor& dy, float slope,
                              core::Tensor& dx) override {
    timed("leaky_relu_bwd", shape(y), [&] { Base::do_leaky_relu_backward(y, dy, slope, dx); });
  }
  void do_scaled_tanh_forward(const core::Tensor& x, float scale, core::Tensor& y) override {
    timed("scaled_tanh_fwd", shape(x), [&] { Base::do_scaled_tanh_forward(x, scale, y); });
  }
  void do_scaled_tanh_backward(const core::Tensor& y, const core::Tensor& dy, float scale,
                               core::Tensor& dx) override {
    timed("scaled_tanh_bwd", shape(y), [&] { Base::do_scaled_tanh_backward(y, dy, scale, dx); });
  }
  void do_dropout_forward(const core::Dropout& args, core::Tensor& y) override {
    timed("dropout_fwd", shape(args.x), [&] { Base::do_dropout_forward(args, y); });
  }
  void do_dropout_backward(const core::Dropout& args, const core::Tensor& dy,
                           core::Tensor& dx) override {
    timed("dropout_bwd", shape(dy), [&] { Base::do_dropout_backward(args, dy, dx); });
  }

  core::PendingSum do_softmax_cross_entropy(const core::SoftmaxCrossEntropy& args,
                                            core::Tensor& dlogits) override {
    return timed("softmax_cross_entropy", shape(args.logits),
                 [&] { return Base::do_softmax_cross_entropy(args, dlogits); });
  }
  void do_argmax_channels(const core::Tensor& logits, core::Tensor& labels) override {
    timed("argmax", shape(logits), [&] { Base::do_argmax_channels(logits, labels); });
  }
  core::PendingSum do_mse_loss(const core::MseLoss& args, core::Tensor& dprediction) override {
    return timed("mse_loss", shape(args.prediction),
                 [&] { return Base::do_mse_loss(args, dprediction); });
  }

  // The optimizer's element-wise kernels run once per parameter tensor; they are summed under one
  // key each (no shape) because there are dozens of small tensors.
  void do_axpy(float alpha, const core::Tensor& x, core::Tensor& y) override {
    timed("axpy", shape(x), [&] { Base::do_axpy(alpha, x, y); });
  }
  void do_scale(core::Tensor& x, float alpha) override {
    timed("scale", {}, [&] { Base::do_scale(x, alpha); });
  }
  double do_sum_squares(const core::Tensor& x) override {
    return timed("sum_squares", {}, [&] { return Base::do_sum_squares(x); });
  }
  void do_sgd_update(core::Tensor& param, const core::Tensor& grad, core::Tensor& velocity,
                     const core::SgdStep& step) override {
    timed("sgd_update", {}, [&] { Base::do_sgd_update(param, grad, velocity, step); });
  }
  void do_adam_update(core::Tensor& param, const core::Tensor& grad, core::Tensor& m,
                      core::Tensor& v, const core::AdamStep& step) override {
    timed("adam_update", {}, [&] { Base::do_adam_update(param, grad, m, v, step); });
  }
  bool do_has_non_finite(std::span<const core::Tensor* const> tensors) override {
    return timed("has_non_finite", {}, [&] { return Base::do_has_non_finite(tensors); });
  }

 private:
  bool enabled_ = true;
  std::map<std::string, Entry> entries_;
};

}  // namespace hardy::bench
