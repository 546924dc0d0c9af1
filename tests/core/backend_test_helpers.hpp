#pragma once
// What the CPU backend's tests share: random host tensors, element-wise comparison, and the
// central-difference check of an analytic gradient against a scalar objective L = sum(y .* r).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "hardy/core/compute/tensor.hpp"

namespace hardy::test_backend {

using core::DType;
using core::Layout;
using core::Tensor;

inline Tensor random_tensor(std::vector<std::int64_t> dims, unsigned seed, float low = -1.0f,
                            float high = 1.0f, Layout layout = Layout::nhwc) {
  Tensor t = Tensor::host(std::move(dims), DType::f32, layout);
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(low, high);
  for (float& value : t.f32()) value = uniform(generator);
  return t;
}

// Values in +-[min_magnitude, 1]: inputs of a relu stay clear of its kink.
inline Tensor away_from_zero(std::vector<std::int64_t> dims, unsigned seed, float min_magnitude) {
  Tensor t = random_tensor(std::move(dims), seed, min_magnitude, 1.0f);
  std::mt19937 generator(seed + 1000);
  for (float& value : t.f32())
    if (generator() % 2 == 0) value = -value;
  return t;
}

inline Tensor channel_vector(std::int64_t channels, unsigned seed, float low, float high) {
  return random_tensor({channels}, seed, low, high, Layout::flat);
}

inline Tensor values_tensor(std::vector<std::int64_t> dims, const std::vector<float>& values) {
  Tensor t = Tensor::host(std::move(dims));
  REQUIRE(t.numel() == static_cast<std::int64_t>(values.size()));
  std::copy(values.begin(), values.end(), t.f32().begin());
  return t;
}

inline double weighted_sum(const Tensor& y, const Tensor& r) {
  REQUIRE(y.dims() == r.dims());
  double sum = 0.0;
  for (std::size_t i = 0; i < y.f32().size(); ++i)
    sum += static_cast<double>(y.f32()[i]) * r.f32()[i];
  return sum;
}

inline double min_magnitude(const Tensor& t) {
  double smallest = INFINITY;
  for (float value : t.f32()) smallest = std::min(smallest, std::fabs(static_cast<double>(value)));
  return smallest;
}

// Element-wise |actual - expected| <= tolerance * (1 + |expected|), reporting the first miss.
inline void check_close(const Tensor& actual, const Tensor& expected, double tolerance = 1e-4) {
  REQUIRE(actual.dims() == expected.dims());
  REQUIRE(actual.layout() == expected.layout());
  std::size_t misses = 0;
  for (std::size_t i = 0; i < actual.f32().size(); ++i) {
    const double a = actual.f32()[i], e = expected.f32()[i];
    if (std::fabs(a - e) <= tolerance * (1.0 + std::fabs(e))) continue;
    if (misses++ == 0)
      UNSCOPED_INFO("first mismatch at flat index " << i << ": " << a << " vs " << e);
  }
  CHECK(misses == 0);
}

struct GradientComparison {
  double relative_error;  // ||numeric - analytic|| / max(||numeric||, ||analytic||)
  double worst_element;   // max |numeric - analytic| / max |analytic|
  double analytic_norm;
};

// Larger tensors are checked on this many evenly spread elements, which keeps the number of
// forward passes (two per element) and so the test time bounded.
inline constexpr std::size_t max_checked_elements = 400;

// Central differences of objective() with respect to the elements of input (which the
// objective reads through a shared tensor handle), against the analytic gradient.
inline GradientComparison compare_gradient(Tensor& input, const Tensor& analytic,
                                           const std::function<double()>& objective, float step) {
  REQUIRE(input.dims() == analytic.dims());
  double difference_squares = 0, numeric_squares = 0, analytic_squares = 0;
  double worst_difference = 0, largest_analytic = 0;
  const std::size_t count = input.f32().size();
  const std::size_t checked = std::min(count, max_checked_elements);
  for (std::size_t k = 0; k < checked; ++k) {
    const std::size_t i = k * count / checked;
    float& value = input.f32()[i];
    const float original = value;
    // The steps actually taken in f32, which differ from `step` by rounding.
    value = original + step;
    const double step_up = static_cast<double>(value) - original;
    const double up = objective();
    value = original - step;
    const double step_down = original - static_cast<double>(value);
    const double down = objective();
    value = original;
    const double numeric = (up - down) / (step_up + step_down);
    const double exact = analytic.f32()[i];
    difference_squares += (numeric - exact) * (numeric - exact);
    numeric_squares += numeric * numeric;
    analytic_squares += exact * exact;
    worst_difference = std::max(worst_difference, std::fabs(numeric - exact));
    largest_analytic = std::max(largest_analytic, std::fabs(exact));
  }
  const double scale = std::max(std::sqrt(numeric_squares), std::sqrt(analytic_squares));
  return {scale > 0 ? std::sqrt(difference_squares) / scale : 0.0,
          largest_analytic > 0 ? worst_difference / largest_analytic : worst_difference,
          std::sqrt(analytic_squares)};
}

// Central differences through f32 forward passes agree with the analytic gradients here to
// about 2e-4 (measured); 2e-3 leaves headroom and still catches a gradient that is 1 % off.
inline constexpr double gradient_tolerance = 2e-3;

inline void check_gradient(const std::string& what, Tensor& input, const Tensor& analytic,
                           const std::function<double()>& objective, float step = 1e-2f) {
  const GradientComparison comparison = compare_gradient(input, analytic, objective, step);
  INFO(what << ": relative error " << comparison.relative_error << ", worst element "
            << comparison.worst_element << ", |analytic| " << comparison.analytic_norm);
  CHECK(comparison.analytic_norm > 1e-3);  // a vanishing gradient would make the check vacuous
  CHECK(comparison.relative_error < gradient_tolerance);
  CHECK(comparison.worst_element < 2 * gradient_tolerance);
}

// One convolution case's tensors: input, weights, bias and output.
struct ConvTensors {
  Tensor x, weight, bias, y;
};

// A convolution's three passes (ordinary or transposed, 2-D or 3-D), bound to a backend and a
// geometry, so that one gradient check serves them all.
struct ConvPasses {
  std::function<void(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y)> forward;
  std::function<void(const Tensor& dy, const Tensor& weight, Tensor& dx)> backward_data;
  std::function<void(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias)>
      backward_weights;
};

// The passes as member functions of a backend (&Backend::conv3d_forward, ...) at geometry g.
template <typename Backend, typename Geometry, typename Forward, typename BackwardData,
          typename BackwardWeights>
ConvPasses bind_conv_passes(Backend& backend, Geometry g, Forward forward,
                            BackwardData backward_data, BackwardWeights backward_weights) {
  return {
      [&backend, g, forward](const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
        (backend.*forward)(x, w, b, g, y);
      },
      [&backend, g, backward_data](const Tensor& dy, const Tensor& w, Tensor& dx) {
        (backend.*backward_data)(dy, w, g, dx);
      },
      [&backend, g, backward_weights](const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) {
        (backend.*backward_weights)(x, dy, g, dw, db);
      }};
}

// dx, dweight and (with_bias) dbias of L = sum(y .* r), r random from `seed`, against central
// differences.
inline void check_conv_gradients(ConvTensors& t, bool with_bias, unsigned seed,
                                 const ConvPasses& passes) {
  const Tensor* bias = with_bias ? &t.bias : nullptr;
  const Tensor r = random_tensor(t.y.dims(), seed);
  const auto objective = [&] {
    passes.forward(t.x, t.weight, bias, t.y);
    return weighted_sum(t.y, r);
  };
  Tensor dx = Tensor::host(t.x.dims());
  Tensor dweight = Tensor::host(t.weight.dims(), DType::f32, Layout::nchw);
  Tensor dbias = Tensor::host(t.bias.dims(), DType::f32, Layout::flat);
  passes.backward_data(r, t.weight, dx);
  passes.backward_weights(t.x, r, dweight, with_bias ? &dbias : nullptr);
  check_gradient("dx", t.x, dx, objective);
  check_gradient("dweight", t.weight, dweight, objective);
  if (with_bias) check_gradient("dbias", t.bias, dbias, objective);
}

}  // namespace hardy::test_backend
