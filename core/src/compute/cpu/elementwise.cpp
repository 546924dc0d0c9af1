// The CPU backend's element-wise kernels for optimizers and gradient handling. They run over
// every parameter every step, so each is a single pass that the compiler can vectorise (no
// branches or calls in the loop bodies). Reductions accumulate in double: however OpenMP splits
// the loop, the partial sums then agree far below float resolution, which keeps LARS trust ratios
// (and so the replicas of a data-parallel run) from drifting with the thread count. axpy, scale,
// sum_squares and the finiteness test also take bf16 activations (their gradients are summed
// where a network branches); the optimizer updates work on f32 parameters only.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "compute/cpu/cpu_backend.hpp"
#include "compute/cpu/dnnl_support.hpp"
#include "compute/cpu/element_types.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::core {

using namespace cpu;  // the backend's internal helpers, declared in dnnl_support.hpp

namespace {

// Below this many elements starting a parallel region costs more than the loop itself; biases
// and normalization parameters (tens to hundreds of elements) stay on the calling thread.
constexpr std::int64_t parallel_threshold = 1 << 15;

}  // namespace

namespace {

template <class T>
void axpy_kernel(float alpha, const Tensor& x, Tensor& y) {
  const T* __restrict xs = x.data<T>();
  T* __restrict ys = y.data<T>();
  const std::int64_t n = y.numel();
#pragma omp parallel for simd schedule(static) if (parallel : n >= parallel_threshold)
  for (std::int64_t i = 0; i < n; ++i)
    ys[i] = from_float<T>(to_float(ys[i]) + alpha * to_float(xs[i]));
}

template <class T>
void scale_kernel(Tensor& x, float alpha) {
  T* xs = x.data<T>();
  const std::int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (parallel : n >= parallel_threshold)
  for (std::int64_t i = 0; i < n; ++i) xs[i] = from_float<T>(to_float(xs[i]) * alpha);
}

template <class T>
double sum_squares_kernel(const Tensor& x) {
  const T* xs = x.data<T>();
  const std::int64_t n = x.numel();
  double total = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : total) if (parallel : n >= parallel_threshold)
  for (std::int64_t i = 0; i < n; ++i) {
    const double value = to_float(xs[i]);
    total += value * value;
  }
  return total;
}

}  // namespace

void CpuBackend::do_axpy(float alpha, const Tensor& x, Tensor& y) {
  with_element_type(y.dtype(), [&](auto element) { axpy_kernel<decltype(element)>(alpha, x, y); });
}

void CpuBackend::do_scale(Tensor& x, float alpha) {
  with_element_type(x.dtype(), [&](auto element) { scale_kernel<decltype(element)>(x, alpha); });
}

double CpuBackend::do_sum_squares(const Tensor& x) {
  return with_element_type(x.dtype(),
                           [&](auto element) { return sum_squares_kernel<decltype(element)>(x); });
}

void CpuBackend::do_sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity,
                               const SgdStep& step) {
  const float lr = step.lr, momentum = step.momentum, weight_decay = step.weight_decay;
  float* __restrict p = param.data<float>();
  const float* __restrict g = grad.data<float>();
  float* __restrict v = velocity.data<float>();
  const std::int64_t n = param.numel();
  // The step is gradient_weight * g' + velocity_weight * v: (0, 1) gives v, (1, momentum) gives
  // Nesterov's g' + momentum * v, so one branch-free loop serves both.
  const float gradient_weight = step.nesterov ? 1.0f : 0.0f;
  const float velocity_weight = step.nesterov ? momentum : 1.0f;
#pragma omp parallel for simd schedule(static) if (parallel : n >= parallel_threshold)
  for (std::int64_t i = 0; i < n; ++i) {
    const float decayed_grad = g[i] + weight_decay * p[i];
    const float new_velocity = momentum * v[i] + decayed_grad;
    v[i] = new_velocity;
    p[i] -= lr * (gradient_weight * decayed_grad + velocity_weight * new_velocity);
  }
}

void CpuBackend::do_adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                                const AdamStep& adam) {
  const float beta1 = adam.beta1, beta2 = adam.beta2, eps = adam.eps;
  const float weight_decay = adam.weight_decay;
  const long step = adam.step;
  // Without -fno-math-errno the compilers keep std::sqrt's errno path and run this loop
  // scalar; it still stays a single pass over the four tensors.
  // Bias corrections folded into two scalars, as in PyTorch:
  // p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(beta1), step);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(beta2), step);
  const float step_size = static_cast<float>(adam.lr / bias_correction1);
  const float inverse_sqrt_bias_correction2 = static_cast<float>(1.0 / std::sqrt(bias_correction2));
  const float one_minus_beta1 = 1.0f - beta1;
  const float one_minus_beta2 = 1.0f - beta2;
  float* __restrict p = param.data<float>();
  const float* __restrict g = grad.data<float>();
  float* __restrict first_moment = m.data<float>();
  float* __restrict second_moment = v.data<float>();
  const std::int64_t n = param.numel();
#pragma omp parallel for simd schedule(static) if (parallel : n >= parallel_threshold)
  for (std::int64_t i = 0; i < n; ++i) {
    const float decayed_grad = g[i] + weight_decay * p[i];
    const float new_m = beta1 * first_moment[i] + one_minus_beta1 * decayed_grad;
    const float new_v = beta2 * second_moment[i] + one_minus_beta2 * decayed_grad * decayed_grad;
    first_moment[i] = new_m;
    second_moment[i] = new_v;
    p[i] -= step_size * new_m / (std::sqrt(new_v) * inverse_sqrt_bias_correction2 + eps);
  }
}

namespace {

template <class T>
bool has_non_finite_elements(const Tensor& x) {
  const T* xs = x.data<T>();
  const std::int64_t n = x.numel();
  // std::isfinite rather than testing exponent bits: GCC and Clang both vectorise it, while
  // Clang 14 gives up on the bit-pattern form inside an OpenMP reduction. It relies on hardy
  // never being built with -ffast-math, which would fold the test to "finite".
  int found = 0;
#pragma omp parallel for simd schedule(static) reduction(|                     \
                                                         : found) if (parallel \
                                                                      : n >= parallel_threshold)
  for (std::int64_t i = 0; i < n; ++i) found |= static_cast<int>(!std::isfinite(to_float(xs[i])));
  return found != 0;
}

}  // namespace

bool CpuBackend::do_has_non_finite(std::span<const Tensor* const> tensors) {
  return std::any_of(tensors.begin(), tensors.end(), [](const Tensor* x) {
    return with_element_type(
        x->dtype(), [&](auto element) { return has_non_finite_elements<decltype(element)>(*x); });
  });
}

}  // namespace hardy::core
