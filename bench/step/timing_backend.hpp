#pragma once
// A Backend decorator that forwards every call to another backend and adds up the wall time of
// each operation, keyed by operation and shape. The model only sees the Backend interface, so
// this profiles hardy's training step per kernel without touching core/: every operation is
// synchronous on the CPU backend, and the decorator calls synchronize() before stopping the
// clock so that it would also time a queueing (GPU) backend correctly. Besides wall time it
// records the process's CPU time, which on a shared machine is the steadier measure of a
// single-threaded run (time spent descheduled does not count).
#include <fmt/format.h>
#include <time.h>

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hardy/core/compute/backend.hpp"

namespace hardy::bench {

class TimingBackend final : public core::Backend {
 private:
  // Defined before their callers: GCC needs a deduced return type before its first use.
  static std::string shape(const core::Tensor& t) {
    return fmt::format("[{}]", fmt::join(t.dims(), ","));
  }
  // "k3 s2 d1 [8,16,64,64]->[8,16,32,32]": the input side, kernel and geometry, output side.
  static std::string conv_shape(const core::Tensor& x, const core::Tensor& weight,
                                const core::ConvGeometry& g, const core::Tensor& y) {
    return fmt::format("k{} s{} d{} {}->{}", weight.dim(2), g.stride, g.dilation, shape(x),
                       shape(y));
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
      inner_.synchronize();
      record(operation, detail, Clock::now() - start, process_cpu_seconds() - cpu_start);
    } else {
      auto result = call();
      inner_.synchronize();
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

  explicit TimingBackend(core::Backend& inner) : inner_(inner) {}

  // Per-key totals since the last reset(); the key is "operation shape".
  const std::map<std::string, Entry>& entries() const { return entries_; }
  void reset() { entries_.clear(); }
  // Off: calls are forwarded without timing (warm-up, or timing whole steps only).
  void set_enabled(bool enabled) { enabled_ = enabled; }

  std::string_view name() const override { return inner_.name(); }
  core::Layout activation_layout() const override { return inner_.activation_layout(); }
  core::Device device() const override { return inner_.device(); }

  core::Tensor empty(std::vector<std::int64_t> dims, core::DType dtype,
                     core::Layout layout) override {
    return timed("empty", {}, [&] { return inner_.empty(std::move(dims), dtype, layout); });
  }
  void copy(const core::Tensor& src, core::Tensor& dst) override {
    timed("copy", shape(src), [&] { inner_.copy(src, dst); });
  }
  void fill(core::Tensor& t, float value) override {
    timed("fill", shape(t), [&] { inner_.fill(t, value); });
  }
  void synchronize() override { inner_.synchronize(); }

  void conv2d_forward(const core::Tensor& x, const core::Tensor& weight, const core::Tensor* bias,
                      const core::ConvGeometry& geometry, core::Tensor& y) override {
    timed("conv_fwd", conv_shape(x, weight, geometry, y),
          [&] { inner_.conv2d_forward(x, weight, bias, geometry, y); });
  }
  void conv2d_backward_data(const core::Tensor& dy, const core::Tensor& weight,
                            const core::ConvGeometry& geometry, core::Tensor& dx) override {
    timed("conv_bwd_data", conv_shape(dx, weight, geometry, dy),
          [&] { inner_.conv2d_backward_data(dy, weight, geometry, dx); });
  }
  void conv2d_backward_weights(const core::Tensor& x, const core::Tensor& dy,
                               const core::ConvGeometry& geometry, core::Tensor& dweight,
                               core::Tensor* dbias) override {
    timed("conv_bwd_weights", conv_shape(x, dweight, geometry, dy),
          [&] { inner_.conv2d_backward_weights(x, dy, geometry, dweight, dbias); });
  }

  void group_norm_forward(const core::Tensor& x, const core::Tensor& gamma,
                          const core::Tensor& beta, int groups, float eps, bool fuse_relu,
                          core::Tensor& y, core::Tensor& mean, core::Tensor& rstd) override {
    timed("group_norm_fwd", fmt::format("{} g{}", shape(x), groups), [&] {
      inner_.group_norm_forward(x, gamma, beta, groups, eps, fuse_relu, y, mean, rstd);
    });
  }
  void group_norm_backward(const core::Tensor& x, const core::Tensor& y, const core::Tensor& dy,
                           const core::Tensor& gamma, const core::Tensor& mean,
                           const core::Tensor& rstd, int groups, bool fuse_relu, core::Tensor& dx,
                           core::Tensor& dgamma, core::Tensor& dbeta) override {
    timed("group_norm_bwd", fmt::format("{} g{}", shape(x), groups), [&] {
      inner_.group_norm_backward(x, y, dy, gamma, mean, rstd, groups, fuse_relu, dx, dgamma, dbeta);
    });
  }

  void batch_norm_statistics(const core::Tensor& x, core::Tensor& sum,
                             core::Tensor& sum_squares) override {
    timed("batch_norm_statistics", shape(x),
          [&] { inner_.batch_norm_statistics(x, sum, sum_squares); });
  }
  void batch_norm_apply(const core::Tensor& x, const core::Tensor& mean,
                        const core::Tensor& variance, const core::Tensor& gamma,
                        const core::Tensor& beta, float eps, bool fuse_relu,
                        core::Tensor& y) override {
    timed("batch_norm_apply", shape(x),
          [&] { inner_.batch_norm_apply(x, mean, variance, gamma, beta, eps, fuse_relu, y); });
  }
  void batch_norm_backward_statistics(const core::Tensor& x, const core::Tensor& y,
                                      const core::Tensor& dy, const core::Tensor& mean,
                                      const core::Tensor& variance, float eps, bool fuse_relu,
                                      core::Tensor& dgamma, core::Tensor& dbeta) override {
    timed("batch_norm_backward_statistics", shape(x), [&] {
      inner_.batch_norm_backward_statistics(x, y, dy, mean, variance, eps, fuse_relu, dgamma,
                                            dbeta);
    });
  }
  void batch_norm_backward_data(const core::Tensor& x, const core::Tensor& y,
                                const core::Tensor& dy, const core::Tensor& mean,
                                const core::Tensor& variance, const core::Tensor& gamma,
                                const core::Tensor& dgamma, const core::Tensor& dbeta, float eps,
                                bool fuse_relu, double count, core::Tensor& dx) override {
    timed("batch_norm_backward_data", shape(x), [&] {
      inner_.batch_norm_backward_data(x, y, dy, mean, variance, gamma, dgamma, dbeta, eps,
                                      fuse_relu, count, dx);
    });
  }

  void relu_forward(const core::Tensor& x, core::Tensor& y) override {
    timed("relu_fwd", shape(x), [&] { inner_.relu_forward(x, y); });
  }
  void relu_backward(const core::Tensor& y, const core::Tensor& dy, core::Tensor& dx) override {
    timed("relu_bwd", shape(y), [&] { inner_.relu_backward(y, dy, dx); });
  }
  void upsample_bilinear_forward(const core::Tensor& x, core::Tensor& y) override {
    timed("upsample_fwd", fmt::format("{}->{}", shape(x), shape(y)),
          [&] { inner_.upsample_bilinear_forward(x, y); });
  }
  void upsample_bilinear_backward(const core::Tensor& dy, core::Tensor& dx) override {
    timed("upsample_bwd", fmt::format("{}->{}", shape(dy), shape(dx)),
          [&] { inner_.upsample_bilinear_backward(dy, dx); });
  }
  void concat_channels(std::span<const core::Tensor* const> inputs, core::Tensor& y) override {
    timed("concat", shape(y), [&] { inner_.concat_channels(inputs, y); });
  }
  void split_channels(const core::Tensor& dy, std::span<core::Tensor* const> outputs) override {
    timed("split", shape(dy), [&] { inner_.split_channels(dy, outputs); });
  }
  void global_avg_pool_forward(const core::Tensor& x, core::Tensor& y) override {
    timed("avg_pool_fwd", shape(x), [&] { inner_.global_avg_pool_forward(x, y); });
  }
  void global_avg_pool_backward(const core::Tensor& dy, core::Tensor& dx) override {
    timed("avg_pool_bwd", shape(dx), [&] { inner_.global_avg_pool_backward(dy, dx); });
  }

  double softmax_cross_entropy(const core::Tensor& logits, const core::Tensor& labels,
                               std::span<const float> class_weights, float grad_scale,
                               core::Tensor& dlogits) override {
    return timed("softmax_cross_entropy", shape(logits), [&] {
      return inner_.softmax_cross_entropy(logits, labels, class_weights, grad_scale, dlogits);
    });
  }
  void argmax_channels(const core::Tensor& logits, core::Tensor& labels) override {
    timed("argmax", shape(logits), [&] { inner_.argmax_channels(logits, labels); });
  }

  // The optimizer's element-wise kernels run once per parameter tensor; they are summed under one
  // key each (no shape) because there are dozens of small tensors.
  void axpy(float alpha, const core::Tensor& x, core::Tensor& y) override {
    timed("axpy", shape(x), [&] { inner_.axpy(alpha, x, y); });
  }
  void scale(core::Tensor& x, float alpha) override {
    timed("scale", {}, [&] { inner_.scale(x, alpha); });
  }
  double sum_squares(const core::Tensor& x) override {
    return timed("sum_squares", {}, [&] { return inner_.sum_squares(x); });
  }
  void sgd_update(core::Tensor& param, const core::Tensor& grad, core::Tensor& velocity, float lr,
                  float momentum, float weight_decay, bool nesterov) override {
    timed("sgd_update", {},
          [&] { inner_.sgd_update(param, grad, velocity, lr, momentum, weight_decay, nesterov); });
  }
  void adam_update(core::Tensor& param, const core::Tensor& grad, core::Tensor& m, core::Tensor& v,
                   float lr, float beta1, float beta2, float eps, float weight_decay,
                   long step) override {
    timed("adam_update", {}, [&] {
      inner_.adam_update(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step);
    });
  }
  bool has_non_finite(const core::Tensor& x) override {
    return timed("has_non_finite", {}, [&] { return inner_.has_non_finite(x); });
  }

 private:
  core::Backend& inner_;
  bool enabled_ = true;
  std::map<std::string, Entry> entries_;
};

}  // namespace hardy::bench
