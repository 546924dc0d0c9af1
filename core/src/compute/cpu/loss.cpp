// Per-pixel softmax cross-entropy and argmax over the channels of NHWC logits, where each
// pixel's class scores are contiguous; the mean-squared-error loss of regression outputs.
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

PendingSum CpuBackend::do_softmax_cross_entropy(const SoftmaxCrossEntropy& args, Tensor& dlogits) {
  // Named references, not a structured binding: Clang before 16 cannot capture bindings in
  // the OpenMP regions below.
  const auto& logits = args.logits;
  const auto& labels = args.labels;
  const auto& class_weights = args.class_weights;
  const auto& grad_scale = args.grad_scale;
  const std::int64_t classes = logits.c(), pixels = labels.numel();
  check_label_range(labels, classes);
  const float* scores = logits.data<float>();
  const std::int32_t* label = labels.data<std::int32_t>();
  float* grad = dlogits.data<float>();
  // The exponentials go through oneDNN's element-wise kernel, which runs at the machine's full
  // vector width over the whole buffer; a per-pixel std::exp over a handful of classes (and a
  // logarithm in double) took 9% of the tiny configuration's step. The plain loops around it do
  // a few flops per pixel.
  const auto exponentials_in_place = [&] {
    dnnl_checked("softmax_cross_entropy", {&logits, &labels, &dlogits}, [&] {
      const dnnl::memory::desc data = dnnl_flat_desc(dlogits);
      const auto key = PrimitiveKey{}
                           .add(static_cast<std::int64_t>(PrimitiveKind::exponential))
                           .add(dlogits.numel());
      const CachedPrimitive& exp = impl_->cached(key, [&] {
        const dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference,
                                               dnnl::algorithm::eltwise_exp, data, 0.0f, 0.0f);
        const dnnl::eltwise_forward::primitive_desc pd(desc, impl_->engine);
        return CachedPrimitive{dnnl::eltwise_forward(pd), implementation_name(pd)};
      });
      const dnnl::memory values = dnnl_memory(impl_->engine, data, dlogits);
      impl_->execute(exp.primitive, {{DNNL_ARG_SRC, values}, {DNNL_ARG_DST, values}});
    });
  };
  // 1. Scores shifted by each pixel's largest, so that no exponential overflows (into dlogits,
  //    which may alias logits); the target's shifted score is kept for the loss.
  Tensor target_shifted = Tensor::host({pixels}, DType::f32, Layout::flat);
  float* target_z = target_shifted.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t pixel = 0; pixel < pixels; ++pixel) {
    const float* row = scores + pixel * classes;
    float* grad_row = grad + pixel * classes;
    const float largest = *std::max_element(row, row + classes);
    const std::int32_t target = label[pixel];
    target_z[pixel] = target == kIgnoreLabel ? 0.0f : row[target] - largest;
    for (std::int64_t c = 0; c < classes; ++c) grad_row[c] = row[c] - largest;
  }
  exponentials_in_place();
  // 2. Each pixel's sum of exponentials, in double: the image-pooling branch's gradient sums
  //    these over every pixel, and the PyTorch cross-check (float64) notices float sums there.
  std::vector<double> sum(static_cast<std::size_t>(pixels));
#pragma omp parallel for schedule(static)
  for (std::int64_t pixel = 0; pixel < pixels; ++pixel) {
    const float* e = grad + pixel * classes;
    double total = 0.0;
    for (std::int64_t c = 0; c < classes; ++c) total += e[c];
    sum[static_cast<std::size_t>(pixel)] = total;
  }
  // 3. The loss, summed in a partition fixed by the shape (reproducible for any thread count),
  //    and the gradient: softmax minus the one-hot target, weighted and scaled.
  const std::vector<double> loss =
      sum_over_pixels(1, pixels, 1, [&](std::int64_t, std::int64_t pixel, double* total) {
        float* grad_row = grad + pixel * classes;
        const std::int32_t target = label[pixel];
        if (target == kIgnoreLabel) {
          std::fill(grad_row, grad_row + classes, 0.0f);
          return;
        }
        const float weight = class_weights[target];
        // One logarithm per pixel, from the C library: oneDNN's vectorized one is off by about
        // 2e-6 of the loss, which the hand-checked cases notice.
        const double exp_sum = sum[static_cast<std::size_t>(pixel)];
        total[0] += static_cast<double>(weight) * (std::log(exp_sum) - target_z[pixel]);
        const auto scale = static_cast<float>(static_cast<double>(grad_scale) * weight / exp_sum);
        for (std::int64_t c = 0; c < classes; ++c) grad_row[c] *= scale;
        grad_row[target] -= grad_scale * weight;
      });
  return PendingSum::ready(loss[0]);
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

// The regression outputs are a handful of values per sample (CosmoFlow's 4), so one pass on the
// calling thread, summed in double in element order (the same sum for any thread count).
PendingSum CpuBackend::do_mse_loss(const MseLoss& args, Tensor& dprediction) {
  const float* prediction = args.prediction.data<float>();
  const float* target = args.target.data<float>();
  float* gradient = dprediction.data<float>();  // may be prediction itself
  const double twice_scale = 2.0 * static_cast<double>(args.grad_scale);
  const std::int64_t count = args.prediction.numel();
  double total = 0.0;
  for (std::int64_t i = 0; i < count; ++i) {
    // A NaN target is one left out (a skipped sample's): no loss, no gradient.
    const double error =
        std::isnan(target[i]) ? 0.0 : static_cast<double>(prediction[i]) - target[i];
    total += error * error;
    gradient[i] = static_cast<float>(twice_scale * error);
  }
  return PendingSum::ready(total);
}

}  // namespace hardy::core
