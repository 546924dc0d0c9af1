// Per-pixel softmax cross-entropy and argmax over the channels of NHWC logits, where each
// pixel's class scores are contiguous; the mean-squared-error loss of regression outputs. Logits
// and predictions are f32 or bf16; the loss is computed in f32 (sums in double), and a bf16
// gradient is rounded once, at the end.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "compute/cpu/dnnl_support.hpp"
#include "compute/cpu/element_types.hpp"
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

template <class T, class Impl>
double softmax_cross_entropy_kernel(Impl& impl, const SoftmaxCrossEntropy& args, Tensor& dlogits) {
  // Named references, not a structured binding: Clang before 16 cannot capture bindings in
  // the OpenMP regions below.
  const auto& logits = args.logits;
  const auto& labels = args.labels;
  const auto& class_weights = args.class_weights;
  const auto& grad_scale = args.grad_scale;
  const std::int64_t classes = logits.c(), pixels = labels.numel();
  check_label_range(labels, classes);
  const T* scores = logits.data<T>();
  const std::int32_t* label = labels.data<std::int32_t>();
  // The work is in f32: in dlogits itself where that is f32, else in a buffer of its own, which
  // is rounded into dlogits at the end.
  constexpr bool in_place = std::is_same_v<T, float>;
  Tensor work = in_place ? dlogits : Tensor::host({dlogits.numel()}, DType::f32, Layout::flat);
  float* grad = work.data<float>();
  // The exponentials go through oneDNN's element-wise kernel, which runs at the machine's full
  // vector width over the whole buffer; a per-pixel std::exp over a handful of classes (and a
  // logarithm in double) took 9% of the tiny configuration's step. The plain loops around it do
  // a few flops per pixel.
  const auto exponentials_in_place = [&] {
    dnnl_checked("softmax_cross_entropy", {&logits, &labels, &dlogits}, [&] {
      const dnnl::memory::desc data({work.numel()}, dnnl::memory::data_type::f32,
                                    dnnl::memory::format_tag::a);
      const auto key = PrimitiveKey{}
                           .add(static_cast<std::int64_t>(PrimitiveKind::exponential))
                           .add(work.numel());
      const CachedPrimitive& exp = impl.cached(key, [&] {
        const dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference,
                                               dnnl::algorithm::eltwise_exp, data, 0.0f, 0.0f);
        const dnnl::eltwise_forward::primitive_desc pd(desc, impl.engine);
        return CachedPrimitive{dnnl::eltwise_forward(pd), implementation_name(pd)};
      });
      const dnnl::memory values = dnnl_memory(impl.engine, data, work);
      impl.execute(exp.primitive, {{DNNL_ARG_SRC, values}, {DNNL_ARG_DST, values}});
    });
  };
  // 1. Scores shifted by each pixel's largest, so that no exponential overflows (into dlogits,
  //    which may alias logits); the target's shifted score is kept for the loss.
  Tensor target_shifted = Tensor::host({pixels}, DType::f32, Layout::flat);
  float* target_z = target_shifted.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t pixel = 0; pixel < pixels; ++pixel) {
    const T* row = scores + pixel * classes;
    float* grad_row = grad + pixel * classes;
    float largest = to_float(row[0]);
    for (std::int64_t c = 1; c < classes; ++c) largest = std::max(largest, to_float(row[c]));
    const std::int32_t target = label[pixel];
    target_z[pixel] = target == kIgnoreLabel ? 0.0f : to_float(row[target]) - largest;
    for (std::int64_t c = 0; c < classes; ++c) grad_row[c] = to_float(row[c]) - largest;
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
  if constexpr (!in_place) {
    T* out = dlogits.data<T>();
    const std::int64_t count = dlogits.numel();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < count; ++i) out[i] = from_float<T>(grad[i]);
  }
  return loss[0];
}

template <class T>
void argmax_channels_kernel(const Tensor& logits, Tensor& labels) {
  const std::int64_t classes = logits.c(), pixels = labels.numel();
  const T* scores = logits.data<T>();
  std::int32_t* label = labels.data<std::int32_t>();
#pragma omp parallel for schedule(static)
  for (std::int64_t pixel = 0; pixel < pixels; ++pixel) {
    const T* row = scores + pixel * classes;
    std::int64_t best = 0;
    for (std::int64_t c = 1; c < classes; ++c)
      if (to_float(row[c]) > to_float(row[best])) best = c;
    label[pixel] = static_cast<std::int32_t>(best);
  }
}

// The regression outputs are a handful of values per sample (CosmoFlow's 4), so one pass on the
// calling thread, summed in double in element order (the same sum for any thread count).
template <class T>
double mse_loss_kernel(const MseLoss& args, Tensor& dprediction) {
  const T* prediction = args.prediction.data<T>();
  const float* target = args.target.data<float>();
  T* gradient = dprediction.data<T>();  // may be prediction itself
  const double twice_scale = 2.0 * static_cast<double>(args.grad_scale);
  const std::int64_t count = args.prediction.numel();
  double total = 0.0;
  for (std::int64_t i = 0; i < count; ++i) {
    // A NaN target is one left out (a skipped sample's): no loss, no gradient.
    const double error =
        std::isnan(target[i]) ? 0.0 : static_cast<double>(to_float(prediction[i])) - target[i];
    total += error * error;
    gradient[i] = from_float<T>(static_cast<float>(twice_scale * error));
  }
  return total;
}

}  // namespace

PendingSum CpuBackend::do_softmax_cross_entropy(const SoftmaxCrossEntropy& args, Tensor& dlogits) {
  return PendingSum::ready(with_element_type(args.logits.dtype(), [&](auto element) {
    return softmax_cross_entropy_kernel<decltype(element)>(*impl_, args, dlogits);
  }));
}

void CpuBackend::do_argmax_channels(const Tensor& logits, Tensor& labels) {
  with_element_type(logits.dtype(), [&](auto element) {
    argmax_channels_kernel<decltype(element)>(logits, labels);
  });
}

PendingSum CpuBackend::do_mse_loss(const MseLoss& args, Tensor& dprediction) {
  return PendingSum::ready(with_element_type(args.prediction.dtype(), [&](auto element) {
    return mse_loss_kernel<decltype(element)>(args, dprediction);
  }));
}

}  // namespace hardy::core
