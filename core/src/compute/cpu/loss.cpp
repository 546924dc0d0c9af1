// Per-pixel softmax cross-entropy and argmax over the channels of NHWC logits, where each
// pixel's class scores are contiguous.
#include <algorithm>
#include <cmath>

#include "compute/cpu/dnnl_support.hpp"
#include "hardy/core/compute/labels.hpp"

namespace hardy::core {

using namespace cpu;  // the backend's internal helpers, declared in dnnl_support.hpp

namespace {

// Labels come from data files, so they are checked before any arithmetic depends on them.
// kIgnoreLabel marks pixels that count for nothing (a skipped sample's).
void check_label_range(const Tensor& labels, std::int64_t classes) {
  const std::int32_t* label = labels.data<std::int32_t>();
  const std::int64_t pixels = labels.numel();
  for (std::int64_t i = 0; i < pixels; ++i)
    if ((label[i] < 0 && label[i] != kIgnoreLabel) || label[i] >= classes) {
      const std::int64_t plane = labels.h() * labels.w();
      throw InvalidArgument(
          fmt::format("softmax_cross_entropy: label {} at (n={}, h={}, w={}) is outside [0, {})",
                      label[i], i / plane, i % plane / labels.w(), i % labels.w(), classes));
    }
}

}  // namespace

double CpuBackend::do_softmax_cross_entropy(const SoftmaxCrossEntropy& args, Tensor& dlogits) {
  // Named references, not a structured binding: Clang before 16 cannot capture bindings in
  // the OpenMP regions below.
  const auto& logits = args.logits;
  const auto& labels = args.labels;
  const auto& class_weights = args.class_weights;
  const auto& grad_scale = args.grad_scale;
  const std::int64_t classes = logits.c();
  check_label_range(labels, classes);
  const float* scores = logits.data<float>();
  const std::int32_t* label = labels.data<std::int32_t>();
  float* grad = dlogits.data<float>();
  const std::vector<double> loss =
      sum_over_pixels(1, labels.numel(), 1, [&](std::int64_t, std::int64_t pixel, double* total) {
        const float* row = scores + pixel * classes;
        float* grad_row = grad + pixel * classes;
        const std::int32_t target = label[pixel];
        if (target == kIgnoreLabel) {
          std::fill(grad_row, grad_row + classes, 0.0f);
          return;
        }
        const float target_score = row[target];  // read first: dlogits may alias logits
        // log-sum-exp shifted by the maximum so that no exponential overflows; the
        // exponentials wait in grad_row until their sum is known.
        const float largest = *std::max_element(row, row + classes);
        double exp_sum = 0.0;
        for (std::int64_t c = 0; c < classes; ++c) {
          grad_row[c] = std::exp(row[c] - largest);
          exp_sum += grad_row[c];
        }
        const double weight = class_weights[target];
        total[0] += weight * (std::log(exp_sum) + largest - target_score);
        const float scale = static_cast<float>(grad_scale * weight / exp_sum);
        for (std::int64_t c = 0; c < classes; ++c) grad_row[c] *= scale;
        grad_row[target] -= static_cast<float>(grad_scale * weight);
      });
  return loss[0];
}

void CpuBackend::do_argmax_channels(const Tensor& logits, Tensor& labels) {
  const std::int64_t classes = logits.c(), pixels = labels.numel();
  const float* scores = logits.data<float>();
  std::int32_t* label = labels.data<std::int32_t>();
#pragma omp parallel for schedule(static)
  for (std::int64_t pixel = 0; pixel < pixels; ++pixel) {
    const float* row = scores + pixel * classes;
    std::int64_t best = 0;
    for (std::int64_t c = 1; c < classes; ++c)
      if (row[c] > row[best]) best = c;
    label[pixel] = static_cast<std::int32_t>(best);
  }
}

}  // namespace hardy::core
