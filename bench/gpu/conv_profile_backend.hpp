#pragma once
// A Backend decorator for the GPU step benchmark: forwards every operation to a CudaBackend (a
// ForwardingBackend overriding the convolution hooks) and, while enabled, brackets each
// convolution pass with CUDA events on the backend's stream, so that
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
#include "hardy/core/compute/forwarding_backend.hpp"

namespace hardy::bench {

class ConvProfileBackend final : public core::ForwardingBackend {
 public:
  struct Entry {
    double flops = 0;    // per call
    double seconds = 0;  // summed over calls
    long calls = 0;
  };

  explicit ConvProfileBackend(core::CudaBackend& inner)
      : core::ForwardingBackend(inner), inner_(inner) {}

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

 protected:
  using Base = core::ForwardingBackend;

  // Only the convolutions are timed; every other hook is ForwardingBackend's.
  void do_conv2d_forward(const core::Tensor& x, const core::Tensor& weight,
                         const core::Tensor* bias, const core::ConvGeometry& g,
                         core::Tensor& y) override {
    timed("forward", x, weight, g, y, [&] { Base::do_conv2d_forward(x, weight, bias, g, y); });
  }
  void do_conv2d_backward_data(const core::Tensor& dy, const core::Tensor& weight,
                               const core::ConvGeometry& g, core::Tensor& dx) override {
    timed("bwd-data", dx, weight, g, dy, [&] { Base::do_conv2d_backward_data(dy, weight, g, dx); });
  }
  void do_conv2d_backward_weights(const core::Tensor& x, const core::Tensor& dy,
                                  const core::ConvGeometry& g, core::Tensor& dweight,
                                  core::Tensor* dbias) override {
    timed("bwd-weights", x, dweight, g, dy,
          [&] { Base::do_conv2d_backward_weights(x, dy, g, dweight, dbias); });
  }

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

  core::CudaBackend& inner_;  // the same backend as ForwardingBackend::inner(), for its stream
  bool enabled_ = false;
  std::vector<core::cuda::Event> events_;
  std::vector<Pending> pending_;
  std::map<std::string, Entry> entries_;
};

}  // namespace hardy::bench
