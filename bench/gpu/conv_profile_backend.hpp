#pragma once
// A Backend decorator for the GPU step benchmark: forwards every call to a CudaBackend and, while
// enabled, brackets each convolution pass with CUDA events on the backend's stream, so that
// the GPU time of every convolution inside a real training step is measured without
// synchronising between operations. Each pass is counted at 2 * N * OH * OW * O * I * KH * KW
// floating-point operations (multiply and add), the convention of PyTorch's and NVIDIA's
// TFLOP/s figures.
#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

#include "hardy/core/compute/cuda_backend.hpp"
#include "hardy/core/compute/cuda_runtime.hpp"

namespace hardy::bench {

class ConvProfileBackend final : public core::Backend {
 public:
  struct Entry {
    double flops = 0;    // per call
    double seconds = 0;  // summed over calls
    long calls = 0;
  };

  explicit ConvProfileBackend(core::CudaBackend& inner) : inner_(inner) {}

  void enable(bool on) { enabled_ = on; }
  // Waits for the stream and adds the timed convolutions of the last step(s) to the entries.
  void collect() {
    inner_.synchronize();
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      float ms = 0.0f;
      HARDY_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[2 * i].get(), events_[2 * i + 1].get()));
      Entry& entry = entries_[pending_[i].key];
      entry.flops = pending_[i].flops;
      entry.seconds += 1e-3 * ms;
      entry.calls += 1;
    }
    pending_.clear();
  }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  // Convolution FLOPs of everything recorded so far (after collect()).
  double total_flops() const {
    double total = 0;
    for (const auto& [key, e] : entries_) total += e.flops * static_cast<double>(e.calls);
    return total;
  }
  double total_seconds() const {
    double total = 0;
    for (const auto& [key, e] : entries_) total += e.seconds;
    return total;
  }
  void reset() {
    entries_.clear();
    pending_.clear();
  }

  std::string_view name() const override { return inner_.name(); }
  core::Layout activation_layout() const override { return inner_.activation_layout(); }
  core::Device device() const override { return inner_.device(); }
  core::Tensor empty(std::vector<std::int64_t> dims, core::DType dtype,
                     core::Layout layout) override {
    return inner_.empty(std::move(dims), dtype, layout);
  }
  void copy(const core::Tensor& src, core::Tensor& dst) override { inner_.copy(src, dst); }
  void fill(core::Tensor& t, float value) override { inner_.fill(t, value); }
  void synchronize() override { inner_.synchronize(); }

  void conv2d_forward(const core::Tensor& x, const core::Tensor& weight, const core::Tensor* bias,
                      const core::ConvGeometry& g, core::Tensor& y) override {
    timed("forward", x, weight, g, y, [&] { inner_.conv2d_forward(x, weight, bias, g, y); });
  }
  void conv2d_backward_data(const core::Tensor& dy, const core::Tensor& weight,
                            const core::ConvGeometry& g, core::Tensor& dx) override {
    timed("bwd-data", dx, weight, g, dy, [&] { inner_.conv2d_backward_data(dy, weight, g, dx); });
  }
  void conv2d_backward_weights(const core::Tensor& x, const core::Tensor& dy,
                               const core::ConvGeometry& g, core::Tensor& dweight,
                               core::Tensor* dbias) override {
    timed("bwd-weights", x, dweight, g, dy,
          [&] { inner_.conv2d_backward_weights(x, dy, g, dweight, dbias); });
  }

  void group_norm_forward(const core::Tensor& x, const core::Tensor& gamma,
                          const core::Tensor& beta, int groups, float eps, bool fuse_relu,
                          core::Tensor& y, core::Tensor& mean, core::Tensor& rstd) override {
    inner_.group_norm_forward(x, gamma, beta, groups, eps, fuse_relu, y, mean, rstd);
  }
  void group_norm_backward(const core::Tensor& x, const core::Tensor& y, const core::Tensor& dy,
                           const core::Tensor& gamma, const core::Tensor& mean,
                           const core::Tensor& rstd, int groups, bool fuse_relu, core::Tensor& dx,
                           core::Tensor& dgamma, core::Tensor& dbeta) override {
    inner_.group_norm_backward(x, y, dy, gamma, mean, rstd, groups, fuse_relu, dx, dgamma, dbeta);
  }
  void batch_norm_statistics(const core::Tensor& x, core::Tensor& sum,
                             core::Tensor& sum_squares) override {
    inner_.batch_norm_statistics(x, sum, sum_squares);
  }
  void batch_norm_apply(const core::Tensor& x, const core::Tensor& mean,
                        const core::Tensor& variance, const core::Tensor& gamma,
                        const core::Tensor& beta, float eps, bool fuse_relu,
                        core::Tensor& y) override {
    inner_.batch_norm_apply(x, mean, variance, gamma, beta, eps, fuse_relu, y);
  }
  void batch_norm_backward_statistics(const core::Tensor& x, const core::Tensor& y,
                                      const core::Tensor& dy, const core::Tensor& mean,
                                      const core::Tensor& variance, float eps, bool fuse_relu,
                                      core::Tensor& dgamma, core::Tensor& dbeta) override {
    inner_.batch_norm_backward_statistics(x, y, dy, mean, variance, eps, fuse_relu, dgamma, dbeta);
  }
  void batch_norm_backward_data(const core::Tensor& x, const core::Tensor& y,
                                const core::Tensor& dy, const core::Tensor& mean,
                                const core::Tensor& variance, const core::Tensor& gamma,
                                const core::Tensor& dgamma, const core::Tensor& dbeta, float eps,
                                bool fuse_relu, double count, core::Tensor& dx) override {
    inner_.batch_norm_backward_data(x, y, dy, mean, variance, gamma, dgamma, dbeta, eps, fuse_relu,
                                    count, dx);
  }
  void relu_forward(const core::Tensor& x, core::Tensor& y) override { inner_.relu_forward(x, y); }
  void relu_backward(const core::Tensor& y, const core::Tensor& dy, core::Tensor& dx) override {
    inner_.relu_backward(y, dy, dx);
  }
  void upsample_bilinear_forward(const core::Tensor& x, core::Tensor& y) override {
    inner_.upsample_bilinear_forward(x, y);
  }
  void upsample_bilinear_backward(const core::Tensor& dy, core::Tensor& dx) override {
    inner_.upsample_bilinear_backward(dy, dx);
  }
  void concat_channels(std::span<const core::Tensor* const> inputs, core::Tensor& y) override {
    inner_.concat_channels(inputs, y);
  }
  void split_channels(const core::Tensor& dy, std::span<core::Tensor* const> outputs) override {
    inner_.split_channels(dy, outputs);
  }
  void global_avg_pool_forward(const core::Tensor& x, core::Tensor& y) override {
    inner_.global_avg_pool_forward(x, y);
  }
  void global_avg_pool_backward(const core::Tensor& dy, core::Tensor& dx) override {
    inner_.global_avg_pool_backward(dy, dx);
  }
  double softmax_cross_entropy(const core::Tensor& logits, const core::Tensor& labels,
                               std::span<const float> class_weights, float grad_scale,
                               core::Tensor& dlogits) override {
    return inner_.softmax_cross_entropy(logits, labels, class_weights, grad_scale, dlogits);
  }
  void argmax_channels(const core::Tensor& logits, core::Tensor& labels) override {
    inner_.argmax_channels(logits, labels);
  }
  void axpy(float alpha, const core::Tensor& x, core::Tensor& y) override {
    inner_.axpy(alpha, x, y);
  }
  void scale(core::Tensor& x, float alpha) override { inner_.scale(x, alpha); }
  double sum_squares(const core::Tensor& x) override { return inner_.sum_squares(x); }
  void sgd_update(core::Tensor& param, const core::Tensor& grad, core::Tensor& velocity, float lr,
                  float momentum, float weight_decay, bool nesterov) override {
    inner_.sgd_update(param, grad, velocity, lr, momentum, weight_decay, nesterov);
  }
  void adam_update(core::Tensor& param, const core::Tensor& grad, core::Tensor& m, core::Tensor& v,
                   float lr, float beta1, float beta2, float eps, float weight_decay,
                   long step) override {
    inner_.adam_update(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step);
  }
  bool has_non_finite(const core::Tensor& x) override { return inner_.has_non_finite(x); }

 private:
  struct Pending {
    std::string key;
    double flops;
  };

  // x: the convolution's input side, y: its output side, whatever the pass.
  template <class Call>
  void timed(const char* pass, const core::Tensor& x, const core::Tensor& weight,
             const core::ConvGeometry& g, const core::Tensor& y, Call&& call) {
    if (!enabled_) return call();
    const std::size_t index = pending_.size();
    while (events_.size() < 2 * (index + 1)) events_.emplace_back(/*timing=*/true);
    events_[2 * index].record(inner_.stream());
    call();
    events_[2 * index + 1].record(inner_.stream());
    const double flops =
        2.0 * static_cast<double>(y.n() * y.h() * y.w()) *
        static_cast<double>(weight.dim(0) * weight.dim(1) * weight.dim(2) * weight.dim(3));
    pending_.push_back({fmt::format("{:<11} k{} s{} d{} [{}]->[{}]", pass, weight.dim(2), g.stride,
                                    g.dilation, fmt::join(x.dims(), ","), fmt::join(y.dims(), ",")),
                        flops});
  }

  core::CudaBackend& inner_;
  bool enabled_ = false;
  std::vector<core::cuda::Event> events_;
  std::vector<Pending> pending_;
  std::map<std::string, Entry> entries_;
};

}  // namespace hardy::bench
