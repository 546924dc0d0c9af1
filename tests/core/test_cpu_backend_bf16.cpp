// The CPU backend in bf16 mixed precision against the same backend in f32: every operation on
// the same inputs (the f32 reference gets the bf16 inputs widened, so that both start from the
// same values), parameters and gradients in f32 on both sides. A bf16 result is rounded to 8
// significant bits once and accumulation orders differ, so the bound is a few units of that
// rounding in the 2-norm (the CUDA tests' bound for bf16). Also: the rounding itself, the
// operand rules of a bf16 backend, and the precision option's parsing and refusals.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../../core/src/compute/cpu/cpu_backend.hpp"
#include "../../core/src/compute/cpu/element_types.hpp"
#include "backend_test_helpers.hpp"
#include "hardy/core/compute/labels.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy::core;
using namespace hardy::test_backend;

namespace {

constexpr double kBf16Tolerance = 3e-2;

// Skips a test on a CPU where the bf16 backend is refused (it says why).
#define REQUIRE_NATIVE_BF16()                                                  \
  do {                                                                         \
    if (!cpu_has_native_bf16()) {                                              \
      WARN("this CPU has no native bf16 (" << cpu_isa_name() << "): skipped"); \
      return;                                                                  \
    }                                                                          \
  } while (false)

struct Backends {
  CpuBackend f32;
  CpuBackend bf16{CpuOptions{.activation_dtype = DType::bf16}};
};

// A host tensor's values on the bf16 side (rounded) and on the f32 side (those rounded values).
struct Twin {
  Tensor bf16, f32;
};

Twin twin(Backends& b, const Tensor& values) {
  Twin t{Tensor::host(values.dims(), DType::bf16, values.layout()),
         Tensor::host(values.dims(), DType::f32, values.layout())};
  b.bf16.copy(values, t.bf16);
  b.bf16.copy(t.bf16, t.f32);
  return t;
}

Twin random_twin(Backends& b, std::vector<std::int64_t> dims, unsigned seed,
                 Layout layout = Layout::nhwc) {
  return twin(b, random_tensor(std::move(dims), seed, -1.0f, 1.0f, layout));
}

// Output tensors of one shape on each side: bf16 activations against f32 ones.
struct Outputs {
  Tensor bf16, f32;
};

Outputs outputs(std::vector<std::int64_t> dims, Layout layout = Layout::nhwc) {
  return {Tensor::host(dims, DType::bf16, layout), Tensor::host(dims, DType::f32, layout)};
}

Tensor widened(Backends& b, const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor host = Tensor::host(t.dims(), DType::f32, t.layout());
  b.bf16.copy(t, host);
  return host;
}

// ||actual - expected|| / ||expected|| within the bf16 bound.
void check_bf16_close(Backends& b, const Tensor& actual, const Tensor& expected,
                      const std::string& what, double tolerance = kBf16Tolerance) {
  const Tensor a = widened(b, actual);
  REQUIRE(a.dims() == expected.dims());
  double difference = 0.0, reference = 0.0;
  for (std::size_t i = 0; i < a.f32().size(); ++i) {
    const double d = static_cast<double>(a.f32()[i]) - expected.f32()[i];
    difference += d * d;
    reference += static_cast<double>(expected.f32()[i]) * expected.f32()[i];
  }
  const double error = std::sqrt(difference) / std::max(std::sqrt(reference), 1e-12);
  INFO(what << ": relative error " << error);
  CHECK(error < tolerance);
  CHECK(std::isfinite(error));
}

Tensor f32_zeros(std::vector<std::int64_t> dims, Layout layout = Layout::flat) {
  return Tensor::host(std::move(dims), DType::f32, layout);
}

}  // namespace

TEST_CASE("bf16: rounding to nearest even, in oneDNN's copy and in the hand-written kernels",
          "[core]") {
  REQUIRE_NATIVE_BF16();
  Backends b;
  // 1 + 2^-8 lies halfway between 1 and the next bf16 (1 + 2^-7): it rounds to the even 1;
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: it rounds to the even 1 + 2^-6.
  const std::vector<float> values{1.0f,
                                  1.0f + 0x1p-8f,
                                  1.0f + 3 * 0x1p-8f,
                                  -2.5f,
                                  std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::quiet_NaN()};
  const std::vector<float> rounded{1.0f, 1.0f, 1.0f + 0x1p-6f, -2.5f,
                                   std::numeric_limits<float>::infinity()};
  Tensor source = Tensor::host({6}, DType::f32, Layout::flat);
  std::copy(values.begin(), values.end(), source.f32().begin());
  Tensor half = Tensor::host({6}, DType::bf16, Layout::flat);
  b.bf16.copy(source, half);
  const Tensor back = widened(b, half);
  for (std::size_t i = 0; i < rounded.size(); ++i) CHECK(back.f32()[i] == rounded[i]);
  CHECK(std::isnan(back.f32()[5]));

  // The kernels' own rounding (element_types.hpp) agrees with oneDNN's on every case above.
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float kernel =
        hardy::core::cpu::to_float(hardy::core::cpu::from_float<hardy::core::cpu::bf16>(values[i]));
    if (std::isnan(values[i]))
      CHECK(std::isnan(kernel));
    else
      CHECK(kernel == back.f32()[i]);
  }
  // ... and a kernel rounds its result once: 1 scaled by 1 + 3 * 2^-8 is 1 + 2^-6 in bf16.
  Tensor one = Tensor::host({2, 1, 1, 1}, DType::bf16, Layout::nhwc);
  b.bf16.fill(one, 1.0f);
  b.bf16.scale(one, 1.0f + 3 * 0x1p-8f);
  CHECK(widened(b, one).f32()[0] == 1.0f + 0x1p-6f);
}

TEST_CASE("bf16: convolutions (2-D, grouped, transposed, 3-D) match f32", "[core]") {
  REQUIRE_NATIVE_BF16();
  Backends b;
  struct Case {
    std::string name;
    std::vector<std::int64_t> x, weight, y;
    ConvGeometry geometry;
    bool transposed = false;
  };
  const Case cases[] = {
      {"3x3", {2, 16, 12, 12}, {32, 16, 3, 3}, {2, 32, 12, 12}, {.padding = 1}},
      {"strided 5x5", {2, 24, 16, 16}, {32, 24, 5, 5}, {2, 32, 8, 8}, {.stride = 2, .padding = 2}},
      {"dilated", {1, 16, 14, 14}, {16, 16, 3, 3}, {1, 16, 14, 14}, {.padding = 2, .dilation = 2}},
      {"depthwise", {2, 32, 10, 10}, {32, 1, 3, 3}, {2, 32, 10, 10}, {.padding = 1, .groups = 32}},
      {"1x1", {2, 48, 8, 8}, {24, 48, 1, 1}, {2, 24, 8, 8}, {}},
      {"transposed",
       {2, 16, 8, 8},
       {16, 8, 3, 3},
       {2, 8, 16, 16},
       {.stride = 2, .padding = 1},
       true},
      {"3-D", {2, 4, 8, 8, 8}, {16, 4, 3, 3, 3}, {2, 16, 8, 8, 8}, {.padding = 1}},
  };
  unsigned seed = 1;
  for (const Case& c : cases) {
    INFO(c.name);
    const Twin x = random_twin(b, c.x, ++seed);
    const Tensor weight = random_tensor(c.weight, ++seed, -0.3f, 0.3f, Layout::nchw);
    const std::int64_t out = c.y[1];
    const Tensor bias = channel_vector(out, ++seed, -0.5f, 0.5f);
    Outputs y = outputs(c.y);
    const Twin dy = random_twin(b, c.y, ++seed);
    Outputs dx = outputs(c.x);
    Tensor dweight_bf16 = f32_zeros(c.weight, Layout::nchw), dweight_f32 = dweight_bf16.clone();
    Tensor dbias_bf16 = f32_zeros({out}), dbias_f32 = f32_zeros({out});
    for (Backend* backend : {static_cast<Backend*>(&b.bf16), static_cast<Backend*>(&b.f32)}) {
      const bool half = backend == &b.bf16;
      const Tensor& in = half ? x.bf16 : x.f32;
      const Tensor& grad = half ? dy.bf16 : dy.f32;
      Tensor& result = half ? y.bf16 : y.f32;
      Tensor& grad_in = half ? dx.bf16 : dx.f32;
      Tensor& dweight = half ? dweight_bf16 : dweight_f32;
      Tensor& dbias = half ? dbias_bf16 : dbias_f32;
      if (c.transposed) {
        backend->conv2d_transpose_forward(in, weight, &bias, c.geometry, result);
        backend->conv2d_transpose_backward_data(grad, weight, c.geometry, grad_in);
        backend->conv2d_transpose_backward_weights(in, grad, c.geometry, dweight, &dbias);
      } else if (c.x.size() == 5) {
        backend->conv3d_forward(in, weight, &bias, c.geometry, result);
        backend->conv3d_backward_data(grad, weight, c.geometry, grad_in);
        backend->conv3d_backward_weights(in, grad, c.geometry, dweight, &dbias);
      } else {
        backend->conv2d_forward(in, weight, &bias, c.geometry, result);
        backend->conv2d_backward_data(grad, weight, c.geometry, grad_in);
        backend->conv2d_backward_weights(in, grad, c.geometry, dweight, &dbias);
      }
    }
    check_bf16_close(b, y.bf16, y.f32, "forward");
    check_bf16_close(b, dx.bf16, dx.f32, "backward data");
    check_bf16_close(b, dweight_bf16, dweight_f32, "weight gradient (f32)");
    check_bf16_close(b, dbias_bf16, dbias_f32, "bias gradient (f32)");
  }
}

TEST_CASE("bf16: dense layers, pooling, activations, dropout and resampling match f32", "[core]") {
  REQUIRE_NATIVE_BF16();
  Backends b;
  unsigned seed = 100;
  // Dense: x (N, K) bf16, f32 weights and gradients.
  {
    const Twin x = random_twin(b, {3, 40}, ++seed, Layout::flat);
    const Tensor weight = random_tensor({7, 40}, ++seed, -0.3f, 0.3f, Layout::flat);
    const Tensor bias = channel_vector(7, ++seed, -0.5f, 0.5f);
    Outputs y = outputs({3, 7}, Layout::flat);
    b.bf16.dense_forward(x.bf16, weight, &bias, y.bf16);
    b.f32.dense_forward(x.f32, weight, &bias, y.f32);
    check_bf16_close(b, y.bf16, y.f32, "dense forward");
    const Twin dy = random_twin(b, {3, 7}, ++seed, Layout::flat);
    Outputs dx = outputs({3, 40}, Layout::flat);
    b.bf16.dense_backward_data(dy.bf16, weight, dx.bf16);
    b.f32.dense_backward_data(dy.f32, weight, dx.f32);
    check_bf16_close(b, dx.bf16, dx.f32, "dense backward data");
    Tensor dw_bf16 = f32_zeros({7, 40}), dw_f32 = f32_zeros({7, 40});
    Tensor db_bf16 = f32_zeros({7}), db_f32 = f32_zeros({7});
    b.bf16.dense_backward_weights(x.bf16, dy.bf16, dw_bf16, &db_bf16);
    b.f32.dense_backward_weights(x.f32, dy.f32, dw_f32, &db_f32);
    check_bf16_close(b, dw_bf16, dw_f32, "dense weight gradient");
    check_bf16_close(b, db_bf16, db_f32, "dense bias gradient");
  }
  // 3-D max pooling: a maximum is one of its inputs, so bf16 is exact on bf16 inputs.
  {
    const Twin x = random_twin(b, {2, 5, 6, 6, 6}, ++seed);
    Outputs y = outputs({2, 5, 3, 3, 3});
    b.bf16.max_pool3d_forward(x.bf16, {}, y.bf16);
    b.f32.max_pool3d_forward(x.f32, {}, y.f32);
    check_bf16_close(b, y.bf16, y.f32, "max pool forward", 1e-7);
    const Twin dy = random_twin(b, {2, 5, 3, 3, 3}, ++seed);
    Outputs dx = outputs({2, 5, 6, 6, 6});
    b.bf16.max_pool3d_backward(x.bf16, dy.bf16, {}, dx.bf16);
    b.f32.max_pool3d_backward(x.f32, dy.f32, {}, dx.f32);
    check_bf16_close(b, dx.bf16, dx.f32, "max pool backward", 1e-7);
  }
  // relu, leaky relu, scaled tanh.
  {
    const Twin x = random_twin(b, {2, 8, 5, 5}, ++seed);
    const Twin dy = random_twin(b, {2, 8, 5, 5}, ++seed);
    Outputs y = outputs({2, 8, 5, 5}), dx = outputs({2, 8, 5, 5});
    b.bf16.relu_forward(x.bf16, y.bf16);
    b.f32.relu_forward(x.f32, y.f32);
    check_bf16_close(b, y.bf16, y.f32, "relu forward", 1e-7);
    b.bf16.relu_backward(y.bf16, dy.bf16, dx.bf16);
    b.f32.relu_backward(y.f32, dy.f32, dx.f32);
    check_bf16_close(b, dx.bf16, dx.f32, "relu backward", 1e-7);
    b.bf16.leaky_relu_forward(x.bf16, 0.3f, y.bf16);
    b.f32.leaky_relu_forward(x.f32, 0.3f, y.f32);
    check_bf16_close(b, y.bf16, y.f32, "leaky relu forward");
    b.bf16.leaky_relu_backward(y.bf16, dy.bf16, 0.3f, dx.bf16);
    b.f32.leaky_relu_backward(y.f32, dy.f32, 0.3f, dx.f32);
    check_bf16_close(b, dx.bf16, dx.f32, "leaky relu backward");
    b.bf16.scaled_tanh_forward(x.bf16, 1.5f, y.bf16);
    b.f32.scaled_tanh_forward(x.f32, 1.5f, y.f32);
    check_bf16_close(b, y.bf16, y.f32, "scaled tanh forward");
    b.bf16.scaled_tanh_backward(y.bf16, dy.bf16, 1.5f, dx.bf16);
    b.f32.scaled_tanh_backward(y.f32, dy.f32, 1.5f, dx.f32);
    check_bf16_close(b, dx.bf16, dx.f32, "scaled tanh backward");
  }
  // Dropout: the same mask on both sides.
  {
    const Twin x = random_twin(b, {3, 6, 4, 4}, ++seed);
    const std::vector<std::uint64_t> keys{11, 12, 13};
    Outputs y = outputs({3, 6, 4, 4});
    b.bf16.dropout_forward({.x = x.bf16, .rate = 0.3f, .seed = 5, .sample_keys = keys}, y.bf16);
    b.f32.dropout_forward({.x = x.f32, .rate = 0.3f, .seed = 5, .sample_keys = keys}, y.f32);
    check_bf16_close(b, y.bf16, y.f32, "dropout forward");
  }
  // Bilinear resampling, concatenation and its split, global average pooling.
  {
    const Twin x = random_twin(b, {2, 6, 5, 7}, ++seed);
    Outputs y = outputs({2, 6, 10, 14});
    b.bf16.upsample_bilinear_forward(x.bf16, y.bf16);
    b.f32.upsample_bilinear_forward(x.f32, y.f32);
    check_bf16_close(b, y.bf16, y.f32, "upsample forward");
    const Twin dy = random_twin(b, {2, 6, 10, 14}, ++seed);
    Outputs dx = outputs({2, 6, 5, 7});
    b.bf16.upsample_bilinear_backward(dy.bf16, dx.bf16);
    b.f32.upsample_bilinear_backward(dy.f32, dx.f32);
    check_bf16_close(b, dx.bf16, dx.f32, "upsample backward");

    const Twin other = random_twin(b, {2, 3, 5, 7}, ++seed);
    Outputs joined = outputs({2, 9, 5, 7});
    const Tensor* inputs_bf16[] = {&x.bf16, &other.bf16};
    const Tensor* inputs_f32[] = {&x.f32, &other.f32};
    b.bf16.concat_channels(inputs_bf16, joined.bf16);
    b.f32.concat_channels(inputs_f32, joined.f32);
    check_bf16_close(b, joined.bf16, joined.f32, "concat", 1e-7);
    Outputs first = outputs({2, 6, 5, 7}), second = outputs({2, 3, 5, 7});
    Tensor* parts_bf16[] = {&first.bf16, &second.bf16};
    b.bf16.split_channels(joined.bf16, parts_bf16);
    check_bf16_close(b, first.bf16, x.f32, "split", 1e-7);
    check_bf16_close(b, second.bf16, other.f32, "split", 1e-7);

    Outputs pooled = outputs({2, 6, 1, 1});
    b.bf16.global_avg_pool_forward(x.bf16, pooled.bf16);
    b.f32.global_avg_pool_forward(x.f32, pooled.f32);
    check_bf16_close(b, pooled.bf16, pooled.f32, "global average pool forward");
    const Twin dpooled = random_twin(b, {2, 6, 1, 1}, ++seed);
    b.bf16.global_avg_pool_backward(dpooled.bf16, dx.bf16);
    b.f32.global_avg_pool_backward(dpooled.f32, dx.f32);
    check_bf16_close(b, dx.bf16, dx.f32, "global average pool backward");
  }
}

TEST_CASE("bf16: normalizations keep f32 statistics and match f32", "[core]") {
  REQUIRE_NATIVE_BF16();
  Backends b;
  const std::vector<std::int64_t> dims{2, 16, 6, 6};
  const Twin x = random_twin(b, dims, 7);
  const Twin dy = random_twin(b, dims, 8);
  const Tensor gamma = channel_vector(16, 9, 0.5f, 1.5f),
               beta = channel_vector(16, 10, -0.5f, 0.5f);
  const double count = 2.0 * 36;
  // One side's tensors: the bf16 backend's or the f32 one's, each with statistics and parameter
  // gradients of its own (f32 on both).
  struct Side {
    Backend& backend;
    const Tensor &x, &dy;
    Tensor y, dx, mean = f32_zeros({2, 4}), rstd = f32_zeros({2, 4});
    Tensor dgamma = f32_zeros({16}), dbeta = f32_zeros({16});
    Tensor sum = f32_zeros({16}), squares = f32_zeros({16});
  };
  for (const bool relu : {false, true}) {
    INFO("fused relu: " << relu);
    const Outputs y = outputs(dims), dx = outputs(dims);
    Side half{b.bf16, x.bf16, dy.bf16, y.bf16, dx.bf16};
    Side full{b.f32, x.f32, dy.f32, y.f32, dx.f32};
    // Each operation once, on both sides; then the bf16 side against the f32 one.
    const auto on_both = [&](auto&& operation) {
      operation(half);
      operation(full);
    };
    const auto compare = [&](Tensor Side::*member, const std::string& what,
                             double tolerance = kBf16Tolerance) {
      check_bf16_close(b, half.*member, full.*member, what, tolerance);
    };

    on_both([&](Side& s) {
      s.backend.group_norm_forward(
          {.x = s.x, .gamma = gamma, .beta = beta, .groups = 4, .eps = 1e-5f, .fuse_relu = relu},
          s.y, s.mean, s.rstd);
    });
    compare(&Side::y, "group norm forward");
    // The statistics come from the same (bf16) values in f32 and double on both sides.
    compare(&Side::mean, "group norm mean", 1e-6);
    compare(&Side::rstd, "group norm rstd", 1e-6);
    on_both([&](Side& s) {
      s.backend.group_norm_backward({.x = s.x,
                                     .y = s.y,
                                     .dy = s.dy,
                                     .gamma = gamma,
                                     .mean = s.mean,
                                     .rstd = s.rstd,
                                     .groups = 4,
                                     .fuse_relu = relu},
                                    s.dx, s.dgamma, s.dbeta);
    });
    compare(&Side::dx, "group norm backward");
    compare(&Side::dgamma, "group norm dgamma");
    compare(&Side::dbeta, "group norm dbeta");

    // Batch norm, split as a data-parallel job runs it, on the f32 side's statistics.
    on_both([&](Side& s) { s.backend.batch_norm_statistics(s.x, s.sum, s.squares); });
    compare(&Side::sum, "batch norm sums", 1e-6);
    compare(&Side::squares, "batch norm sums of squares", 1e-6);
    Tensor mean = f32_zeros({16}), variance = f32_zeros({16});
    for (int c = 0; c < 16; ++c) {
      mean.f32()[c] = static_cast<float>(full.sum.f32()[c] / count);
      variance.f32()[c] =
          static_cast<float>(full.squares.f32()[c] / count - mean.f32()[c] * mean.f32()[c]);
    }
    on_both([&](Side& s) {
      s.backend.batch_norm_apply({.x = s.x,
                                  .mean = mean,
                                  .variance = variance,
                                  .gamma = gamma,
                                  .beta = beta,
                                  .eps = 1e-5f,
                                  .fuse_relu = relu},
                                 s.y);
    });
    compare(&Side::y, "batch norm apply");
    on_both([&](Side& s) {
      s.backend.batch_norm_backward_statistics({.x = s.x,
                                                .y = s.y,
                                                .dy = s.dy,
                                                .mean = mean,
                                                .variance = variance,
                                                .eps = 1e-5f,
                                                .fuse_relu = relu},
                                               s.dgamma, s.dbeta);
    });
    compare(&Side::dgamma, "batch norm dgamma");
    compare(&Side::dbeta, "batch norm dbeta");
    on_both([&](Side& s) {
      s.backend.batch_norm_backward_data({.x = s.x,
                                          .y = s.y,
                                          .dy = s.dy,
                                          .mean = mean,
                                          .variance = variance,
                                          .gamma = gamma,
                                          .dgamma = full.dgamma,
                                          .dbeta = full.dbeta,
                                          .eps = 1e-5f,
                                          .fuse_relu = relu,
                                          .count = count},
                                         s.dx);
    });
    compare(&Side::dx, "batch norm backward data");
  }
}

TEST_CASE("bf16: the losses are computed in f32 from bf16 outputs", "[core]") {
  REQUIRE_NATIVE_BF16();
  Backends b;
  // Softmax cross-entropy over 5 classes, one pixel ignored.
  const Twin logits = random_twin(b, {2, 5, 4, 4}, 21);
  Tensor labels = Tensor::host({2, 1, 4, 4}, DType::i32, Layout::nhwc);
  for (std::int64_t i = 0; i < labels.numel(); ++i) labels.data<std::int32_t>()[i] = i % 5;
  labels.data<std::int32_t>()[3] = kIgnoreLabel;
  const std::vector<float> weights{1.0f, 2.0f, 0.5f, 1.0f, 3.0f};
  Outputs dlogits = outputs({2, 5, 4, 4});
  const double loss_bf16 = b.bf16.softmax_cross_entropy(
      {.logits = logits.bf16, .labels = labels, .class_weights = weights, .grad_scale = 0.1f},
      dlogits.bf16);
  const double loss_f32 = b.f32.softmax_cross_entropy(
      {.logits = logits.f32, .labels = labels, .class_weights = weights, .grad_scale = 0.1f},
      dlogits.f32);
  // The same (bf16) logits in f32 on both sides: the loss agrees to float precision.
  CHECK(loss_bf16 == Approx(loss_f32).epsilon(1e-6));
  check_bf16_close(b, dlogits.bf16, dlogits.f32, "softmax cross-entropy gradient");
  Tensor argmax_bf16 = Tensor::host({2, 1, 4, 4}, DType::i32, Layout::nhwc);
  Tensor argmax_f32 = argmax_bf16.clone();
  b.bf16.argmax_channels(logits.bf16, argmax_bf16);
  b.f32.argmax_channels(logits.f32, argmax_f32);
  for (std::int64_t i = 0; i < argmax_f32.numel(); ++i)
    CHECK(argmax_bf16.data<std::int32_t>()[i] == argmax_f32.data<std::int32_t>()[i]);

  // Mean squared error against f32 targets.
  const Twin prediction = random_twin(b, {3, 4}, 22, Layout::flat);
  const Tensor target = random_tensor({3, 4}, 23, -1.0f, 1.0f, Layout::flat);
  Outputs dprediction = outputs({3, 4}, Layout::flat);
  const double mse_bf16 = b.bf16.mse_loss(
      {.prediction = prediction.bf16, .target = target, .grad_scale = 0.25f}, dprediction.bf16);
  const double mse_f32 = b.f32.mse_loss(
      {.prediction = prediction.f32, .target = target, .grad_scale = 0.25f}, dprediction.f32);
  CHECK(mse_bf16 == Approx(mse_f32).epsilon(1e-6));
  check_bf16_close(b, dprediction.bf16, dprediction.f32, "mse gradient");

  // Gradient handling on bf16 activations: axpy, sum of squares, the finiteness test.
  const Twin a = random_twin(b, {2, 3, 4, 4}, 24);
  Twin sum = random_twin(b, {2, 3, 4, 4}, 25);
  b.bf16.axpy(0.5f, a.bf16, sum.bf16);
  b.f32.axpy(0.5f, a.f32, sum.f32);
  check_bf16_close(b, sum.bf16, sum.f32, "axpy");
  CHECK(b.bf16.sum_squares(a.bf16) == Approx(b.f32.sum_squares(a.f32)).epsilon(1e-6));
  CHECK_FALSE(b.bf16.has_non_finite(a.bf16));
  b.bf16.scale(sum.bf16, std::numeric_limits<float>::infinity());
  CHECK(b.bf16.has_non_finite(sum.bf16));
}

TEST_CASE("bf16: the backend's operand rules and the precision option", "[core]") {
  CHECK(parse_precision("f32") == Precision::f32);
  CHECK(parse_precision("fp32") == Precision::f32);
  CHECK(parse_precision("bf16") == Precision::bf16);
  CHECK(parse_precision("fp16") == Precision::fp16);
  CHECK_THROWS_AS(parse_precision("int8"), hardy::InvalidArgument);
  CHECK_THROWS_WITH(parse_precision("tf32"), Catch::Contains("f32, bf16, fp16"));
  CHECK(default_precision("cpu") == Precision::f32);
  CHECK(precision_unsupported("cpu", Precision::f32) == std::nullopt);
  const auto fp16 = precision_unsupported("cpu", Precision::fp16);
  REQUIRE(fp16.has_value());
  CHECK_THAT(*fp16, Catch::Contains("--backend cuda"));
  CHECK_THROWS_AS(CpuBackend(CpuOptions{.activation_dtype = DType::f16}), hardy::InvalidArgument);
  CHECK(make_backend("cpu")->activation_dtype() == DType::f32);

  if (!cpu_has_native_bf16()) {
    // Refused, naming what the CPU lacks.
    const auto why = precision_unsupported("cpu", Precision::bf16);
    REQUIRE(why.has_value());
    CHECK_THAT(*why, Catch::Contains("AVX512-BF16"));
    CHECK_THROWS_AS(make_backend("cpu", Precision::bf16), hardy::InvalidArgument);
    return;
  }
  auto backend = make_backend("cpu", Precision::bf16);
  CHECK(backend->activation_dtype() == DType::bf16);
  // Activations may be bf16 (not f16); parameters stay f32.
  Tensor x = Tensor::host({1, 4, 3, 3}, DType::bf16, Layout::nhwc);
  Tensor y = x.clone();
  CHECK_NOTHROW(backend->relu_forward(x, y));
  Tensor half = Tensor::host({1, 4, 3, 3}, DType::f16, Layout::nhwc);
  CHECK_THROWS_WITH(backend->relu_forward(half, half), Catch::Contains("f32 or bf16"));
  const Tensor weight_bf16 = Tensor::host({4, 4, 3, 3}, DType::bf16, Layout::nchw);
  CHECK_THROWS_WITH(backend->conv2d_forward(x, weight_bf16, nullptr, {.padding = 1}, y),
                    Catch::Contains("parameters, gradients and statistics are f32"));
  // The f32 backend still refuses bf16 tensors and conversions.
  CpuBackend f32;
  CHECK_THROWS_WITH(f32.relu_forward(x, y), Catch::Contains("expected f32"));
  Tensor f32_copy = Tensor::host({1, 4, 3, 3}, DType::f32, Layout::nhwc);
  CHECK_THROWS_AS(f32.copy(x, f32_copy), hardy::InvalidArgument);
}
