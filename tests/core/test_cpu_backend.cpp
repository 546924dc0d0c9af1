// The oneDNN CPU backend against naive reference loops (forward) and central finite
// differences of a scalar objective L = sum(y .* r) (every backward). Shapes are small and
// deliberately awkward: odd channel counts, non-square images, strides, dilation.
#include <omp.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../../core/src/compute/cpu/cpu_backend.hpp"
#include "backend_test_helpers.hpp"
#include "hardy/core/compute/forwarding_backend.hpp"
#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/support/error.hpp"
#include "reference_ops.hpp"

using namespace hardy::core;
namespace reference = hardy::test_reference;
using namespace hardy::test_backend;

namespace {

// A normalization's input and affine parameters for a gradient check, drawn from seeds
// first_seed, first_seed + 3, ... With the relu, drawn until `preactivation()` (the layer without
// its relu, into y) leaves no value within reach of a finite-difference step of the kink.
struct NormalizationInputs {
  Tensor x, gamma, beta;
};

void draw_normalization_inputs(NormalizationInputs& in, const std::vector<std::int64_t>& dims,
                               unsigned first_seed, bool relu, const Tensor& y,
                               const std::function<void()>& preactivation) {
  for (unsigned seed = first_seed;; seed += 3) {
    REQUIRE(seed < 2000);
    in.x = random_tensor(dims, seed);
    in.gamma = channel_vector(dims[1], seed + 1, 0.5f, 1.5f);
    in.beta = channel_vector(dims[1], seed + 2, -0.5f, 0.5f);
    preactivation();
    if (!relu || min_magnitude(y) > 0.02) break;
  }
}

// dx, dgamma and dbeta against finite differences; with the relu, a smaller step stays clear of
// its kink.
void check_normalization_gradients(NormalizationInputs& in, const Tensor& dx, const Tensor& dgamma,
                                   const Tensor& dbeta, const std::function<double()>& objective,
                                   bool relu) {
  const float step = relu ? 1e-3f : 1e-2f;
  check_gradient("dx", in.x, dx, objective, step);
  check_gradient("dgamma", in.gamma, dgamma, objective, step);
  check_gradient("dbeta", in.beta, dbeta, objective, step);
}

struct ConvCase {
  std::int64_t batch, in_channels, out_channels, height, width, kernel;
  ConvGeometry geometry;
  bool bias;
};

const std::vector<ConvCase> conv_cases{
    {2, 3, 4, 7, 6, 3, {.stride = 1, .padding = 1, .dilation = 1}, true},
    {1, 5, 8, 9, 7, 3, {.stride = 2, .padding = 1, .dilation = 1}, false},
    {2, 4, 6, 8, 9, 3, {.stride = 1, .padding = 2, .dilation = 2}, true},
    {1, 3, 5, 7, 8, 1, {.stride = 2, .padding = 0, .dilation = 1}, true},
    {1, 2, 3, 11, 10, 3, {.stride = 3, .padding = 1, .dilation = 2}, false},
    // Atrous pyramids on small maps: the dilated kernel and the padding exceed the image.
    {1, 3, 4, 3, 4, 3, {.stride = 1, .padding = 4, .dilation = 4}, true},
    {2, 6, 3, 1, 1, 1, {.stride = 1, .padding = 0, .dilation = 1}, true},
    // Channel counts the AVX-512 kernels block, so the weights go through a layout reorder.
    {1, 32, 16, 6, 5, 3, {.stride = 1, .padding = 1, .dilation = 1}, true},
};

// Grouped convolutions: two groups, depthwise (groups == channels, also with two filters per
// channel), and channel counts the AVX-512 kernels block.
const std::vector<ConvCase> grouped_conv_cases{
    {2, 4, 6, 7, 6, 3, {.stride = 1, .padding = 1, .dilation = 1, .groups = 2}, true},
    {1, 6, 4, 9, 7, 3, {.stride = 2, .padding = 1, .dilation = 1, .groups = 2}, false},
    {2, 5, 5, 8, 9, 3, {.stride = 1, .padding = 2, .dilation = 2, .groups = 5}, true},
    {1, 3, 6, 7, 8, 3, {.stride = 2, .padding = 1, .dilation = 1, .groups = 3}, false},
    {1, 32, 32, 6, 5, 3, {.stride = 1, .padding = 1, .dilation = 1, .groups = 32}, true},
    {1, 32, 16, 6, 5, 1, {.stride = 1, .padding = 0, .dilation = 1, .groups = 4}, true},
};

std::string describe_case(const ConvCase& c) {
  return "conv x=[" + std::to_string(c.batch) + "," + std::to_string(c.in_channels) + "," +
         std::to_string(c.height) + "," + std::to_string(c.width) +
         "] O=" + std::to_string(c.out_channels) + " k=" + std::to_string(c.kernel) +
         " stride=" + std::to_string(c.geometry.stride) +
         " pad=" + std::to_string(c.geometry.padding) +
         " dil=" + std::to_string(c.geometry.dilation) +
         " groups=" + std::to_string(c.geometry.groups) + (c.bias ? " bias" : "");
}

// The backend's conv2d passes at one geometry.
ConvPasses conv2d_passes(CpuBackend& backend, const ConvGeometry& g) {
  return bind_conv_passes(backend, g, &CpuBackend::conv2d_forward,
                          &CpuBackend::conv2d_backward_data, &CpuBackend::conv2d_backward_weights);
}

ConvTensors make_conv(const ConvCase& c, unsigned seed) {
  const auto output = [&](std::int64_t size) {
    return conv_output_size(static_cast<int>(size), static_cast<int>(c.kernel), c.geometry);
  };
  return {random_tensor({c.batch, c.in_channels, c.height, c.width}, seed),
          random_tensor({c.out_channels, c.in_channels / c.geometry.groups, c.kernel, c.kernel},
                        seed + 1, -0.5f, 0.5f, Layout::nchw),
          channel_vector(c.out_channels, seed + 2, -0.5f, 0.5f),
          Tensor::host({c.batch, c.out_channels, output(c.height), output(c.width)})};
}

}  // namespace

TEST_CASE("cpu backend: conv2d forward matches the reference", "[core]") {
  CpuBackend backend;
  unsigned seed = 1;
  for (const ConvCase& c : conv_cases) {
    INFO(describe_case(c));
    ConvTensors t = make_conv(c, seed += 10);
    const Tensor* bias = c.bias ? &t.bias : nullptr;
    backend.conv2d_forward(t.x, t.weight, bias, c.geometry, t.y);
    check_close(t.y, reference::conv2d(t.x, t.weight, bias, c.geometry));
  }
}

// oneDNN 2.6's jit_1x1 backward-weights kernel crashed (SIGSEGV) on this case: a strided 1x1
// convolution of NHWC inputs with fewer than 16 channels, the tiramisu's transition down. The
// backend takes another implementation there; the gradient must still be right.
TEST_CASE("cpu backend: a strided 1x1 convolution's weight gradient on few channels", "[core]") {
  auto backend = make_backend("cpu");
  const std::int64_t n = 2, c = 14, size = 64;
  const Tensor x = random_tensor({n, c, size, size}, 91);
  const Tensor dy = random_tensor({n, c, size / 2, size / 2}, 92);
  Tensor dweight = Tensor::host({c, c, 1, 1}, DType::f32, Layout::nchw);
  Tensor dbias = Tensor::host({c}, DType::f32, Layout::flat);
  backend->conv2d_backward_weights(x, dy, {.stride = 2}, dweight, &dbias);
  double worst = 0;
  for (std::int64_t o = 0; o < c; ++o)
    for (std::int64_t i = 0; i < c; ++i) {
      double expected = 0;
      for (std::int64_t b = 0; b < n; ++b)
        for (std::int64_t h = 0; h < size / 2; ++h)
          for (std::int64_t w = 0; w < size / 2; ++w)
            expected += static_cast<double>(reference::at(dy, b, o, h, w)) *
                        reference::at(x, b, i, 2 * h, 2 * w);
      worst = std::max(worst, std::abs(dweight.f32()[o * c + i] - expected));
    }
  CHECK(worst < 1e-3);
}

TEST_CASE("cpu backend: conv2d gradients match finite differences", "[core]") {
  CpuBackend backend;
  unsigned seed = 100;
  for (const ConvCase& c : conv_cases) {
    INFO(describe_case(c));
    ConvTensors t = make_conv(c, seed += 10);
    check_conv_gradients(t, c.bias, seed + 5, conv2d_passes(backend, c.geometry));
  }
}

TEST_CASE("cpu backend: grouped and depthwise conv2d match the reference and finite differences",
          "[core]") {
  CpuBackend backend;
  unsigned seed = 200;
  for (const ConvCase& c : grouped_conv_cases) {
    INFO(describe_case(c));
    ConvTensors t = make_conv(c, seed += 10);
    const Tensor* bias = c.bias ? &t.bias : nullptr;
    backend.conv2d_forward(t.x, t.weight, bias, c.geometry, t.y);
    check_close(t.y, reference::conv2d(t.x, t.weight, bias, c.geometry));
    // The same weights laid out (O, KH, KW, I / groups) give the same result.
    Tensor nhwc_weight = backend.empty(t.weight.dims(), DType::f32, Layout::nhwc);
    backend.copy(t.weight, nhwc_weight);
    Tensor y_nhwc_weight = Tensor::host(t.y.dims());
    backend.conv2d_forward(t.x, nhwc_weight, bias, c.geometry, y_nhwc_weight);
    check_close(y_nhwc_weight, t.y, 1e-6);
    check_conv_gradients(t, c.bias, seed + 5, conv2d_passes(backend, c.geometry));
  }
}

TEST_CASE("cpu backend: grouped convolution operands are checked", "[core]") {
  CpuBackend backend;
  const Tensor x = random_tensor({1, 6, 5, 5}, 300);
  Tensor y = Tensor::host({1, 4, 5, 5});
  const ConvGeometry four_groups{.stride = 1, .padding = 1, .dilation = 1, .groups = 4};
  const Tensor weight = random_tensor({4, 1, 3, 3}, 301, -0.5f, 0.5f, Layout::nchw);
  REQUIRE_THROWS_WITH(backend.conv2d_forward(x, weight, nullptr, four_groups, y),
                      Catch::Contains("conv2d_forward") &&
                          Catch::Contains("groups 4 must divide") && Catch::Contains(x.describe()));
  // Two groups of three input channels: the weights must be (O, 3, KH, KW).
  const ConvGeometry two_groups{.stride = 1, .padding = 1, .dilation = 1, .groups = 2};
  const Tensor full_weight = random_tensor({4, 6, 3, 3}, 302, -0.5f, 0.5f, Layout::nchw);
  REQUIRE_THROWS_WITH(backend.conv2d_forward(x, full_weight, nullptr, two_groups, y),
                      Catch::Contains(full_weight.describe()) && Catch::Contains("in 2 groups") &&
                          Catch::Contains("expected [O,3,KH,KW]"));
  const ConvGeometry no_groups{.stride = 1, .padding = 1, .dilation = 1, .groups = 0};
  REQUIRE_THROWS_WITH(backend.conv2d_forward(x, full_weight, nullptr, no_groups, y),
                      Catch::Contains("groups 0"));
  const Tensor grouped_weight = random_tensor({4, 3, 3, 3}, 303, -0.5f, 0.5f, Layout::nchw);
  backend.conv2d_forward(x, grouped_weight, nullptr, two_groups, y);
  check_close(y, reference::conv2d(x, grouped_weight, nullptr, two_groups));
}

namespace {

// A transposed convolution x (N, I, H, W) -> y (N, O, out_h, out_w) with weight (I, O, K, K).
struct TransposedCase {
  std::int64_t batch, in_channels, out_channels, height, width, kernel;
  ConvGeometry geometry;
  std::int64_t out_h, out_w;
  bool bias;
};

const std::vector<TransposedCase> transposed_cases{
    // Kernel 3, stride 2, padding 1: both output sizes a stride-2 convolution maps back to 5x7.
    {2, 3, 4, 5, 7, 3, {.stride = 2, .padding = 1, .dilation = 1}, 9, 13, true},
    {2, 3, 4, 5, 7, 3, {.stride = 2, .padding = 1, .dilation = 1}, 10, 14, false},
    {1, 3, 4, 5, 7, 3, {.stride = 2, .padding = 1, .dilation = 1}, 9, 14, true},
    // Kernel 2, stride 2: the decoder's exact doubling.
    {2, 4, 3, 4, 3, 2, {.stride = 2, .padding = 0, .dilation = 1}, 8, 6, true},
    {1, 4, 3, 4, 3, 2, {.stride = 2, .padding = 0, .dilation = 1}, 8, 6, false},
    {1, 2, 3, 4, 5, 3, {.stride = 1, .padding = 2, .dilation = 2}, 4, 5, true},
    {1, 3, 2, 3, 4, 3, {.stride = 3, .padding = 1, .dilation = 1}, 9, 12, false},
    // Channel counts the AVX-512 kernels block, so the weights go through a layout reorder.
    {1, 32, 16, 4, 5, 3, {.stride = 2, .padding = 1, .dilation = 1}, 8, 10, true},
};

std::string describe_case(const TransposedCase& c) {
  return "conv_transpose x=[" + std::to_string(c.batch) + "," + std::to_string(c.in_channels) +
         "," + std::to_string(c.height) + "," + std::to_string(c.width) +
         "] O=" + std::to_string(c.out_channels) + " k=" + std::to_string(c.kernel) +
         " stride=" + std::to_string(c.geometry.stride) +
         " pad=" + std::to_string(c.geometry.padding) +
         " dil=" + std::to_string(c.geometry.dilation) + " -> " + std::to_string(c.out_h) + "x" +
         std::to_string(c.out_w) + (c.bias ? " bias" : "");
}

ConvTensors make_transposed(const TransposedCase& c, unsigned seed) {
  return {random_tensor({c.batch, c.in_channels, c.height, c.width}, seed),
          random_tensor({c.in_channels, c.out_channels, c.kernel, c.kernel}, seed + 1, -0.5f, 0.5f,
                        Layout::nchw),
          channel_vector(c.out_channels, seed + 2, -0.5f, 0.5f),
          Tensor::host({c.batch, c.out_channels, c.out_h, c.out_w})};
}

}  // namespace

TEST_CASE("cpu backend: conv2d_transpose forward matches the reference", "[core]") {
  CpuBackend backend;
  unsigned seed = 400;
  for (const TransposedCase& c : transposed_cases) {
    INFO(describe_case(c));
    ConvTensors t = make_transposed(c, seed += 10);
    const Tensor* bias = c.bias ? &t.bias : nullptr;
    CHECK(conv_transpose_output_size(static_cast<int>(c.height), static_cast<int>(c.kernel),
                                     c.geometry) <= c.out_h);
    backend.conv2d_transpose_forward(t.x, t.weight, bias, c.geometry, t.y);
    check_close(t.y,
                reference::conv2d_transpose(t.x, t.weight, bias, c.geometry, c.out_h, c.out_w));
    // The same weights laid out (I, KH, KW, O) give the same result.
    Tensor nhwc_weight = backend.empty(t.weight.dims(), DType::f32, Layout::nhwc);
    backend.copy(t.weight, nhwc_weight);
    Tensor y_nhwc_weight = Tensor::host(t.y.dims());
    backend.conv2d_transpose_forward(t.x, nhwc_weight, bias, c.geometry, y_nhwc_weight);
    check_close(y_nhwc_weight, t.y, 1e-6);
  }
}

TEST_CASE("cpu backend: conv2d_transpose is the data gradient of conv2d", "[core]") {
  // Without bias, the transposed convolution of dy is conv2d_backward_data's dx, the output
  // padding included (the rows and columns no kernel tap reaches are zero in both).
  CpuBackend backend;
  unsigned seed = 500;
  for (const TransposedCase& c : transposed_cases) {
    INFO(describe_case(c));
    ConvTensors t = make_transposed(c, seed += 10);
    backend.conv2d_transpose_forward(t.x, t.weight, nullptr, c.geometry, t.y);
    Tensor dx = Tensor::host(t.y.dims());
    backend.conv2d_backward_data(t.x, t.weight, c.geometry, dx);
    check_close(t.y, dx, 1e-5);
  }
}

TEST_CASE("cpu backend: conv2d_transpose gradients match finite differences", "[core]") {
  CpuBackend backend;
  unsigned seed = 600;
  for (const TransposedCase& c : transposed_cases) {
    INFO(describe_case(c));
    ConvTensors t = make_transposed(c, seed += 10);
    check_conv_gradients(
        t, c.bias, seed + 5,
        bind_conv_passes(backend, c.geometry, &CpuBackend::conv2d_transpose_forward,
                         &CpuBackend::conv2d_transpose_backward_data,
                         &CpuBackend::conv2d_transpose_backward_weights));
  }
}

TEST_CASE("cpu backend: conv2d_transpose operands are checked", "[core]") {
  CpuBackend backend;
  const TransposedCase c = transposed_cases.front();  // 5x7 -> 9..10 x 13..14
  ConvTensors t = make_transposed(c, 700);
  for (const auto& [h, w] : std::vector<std::array<std::int64_t, 2>>{{8, 13}, {11, 13}, {9, 15}}) {
    Tensor wrong_y = Tensor::host({c.batch, c.out_channels, h, w});
    REQUIRE_THROWS_WITH(
        backend.conv2d_transpose_forward(t.x, t.weight, &t.bias, c.geometry, wrong_y),
        Catch::Contains("conv2d_transpose_forward") && Catch::Contains(wrong_y.describe()) &&
            Catch::Contains("[2,4,9..10,13..14]"));
  }
  Tensor wrong_channels = Tensor::host({c.batch, c.out_channels + 1, c.out_h, c.out_w});
  REQUIRE_THROWS_AS(
      backend.conv2d_transpose_forward(t.x, t.weight, nullptr, c.geometry, wrong_channels),
      hardy::InvalidArgument);
  // PyTorch's (I, O, KH, KW): a convolution's (O, I, KH, KW) does not fit.
  const Tensor conv_weight =
      random_tensor({c.out_channels, c.in_channels, 3, 3}, 701, -0.5f, 0.5f, Layout::nchw);
  REQUIRE_THROWS_WITH(
      backend.conv2d_transpose_forward(t.x, conv_weight, nullptr, c.geometry, t.y),
      Catch::Contains(conv_weight.describe()) && Catch::Contains("expected [3,O,KH,KW]"));
  // A geometry that says transposed is the hooks' business: conv2d_* refuses it.
  ConvGeometry marked = c.geometry;
  marked.transposed = true;
  Tensor conv_y = Tensor::host(t.x.dims());
  REQUIRE_THROWS_WITH(backend.conv2d_backward_data(t.y, t.weight, marked, conv_y),
                      Catch::Contains("conv2d_backward_data") && Catch::Contains("transposed"));
  ConvGeometry grouped = c.geometry;
  grouped.groups = 3;
  REQUIRE_THROWS_WITH(backend.conv2d_transpose_forward(t.x, t.weight, nullptr, grouped, t.y),
                      Catch::Contains("conv2d_transpose_forward") && Catch::Contains("groups 3"));
  Tensor wrong_bias = channel_vector(c.in_channels, 702, -0.5f, 0.5f);
  REQUIRE_THROWS_WITH(backend.conv2d_transpose_forward(t.x, t.weight, &wrong_bias, c.geometry, t.y),
                      Catch::Contains("bias") && Catch::Contains(wrong_bias.describe()));
  Tensor dx = Tensor::host(t.x.dims());
  Tensor wrong_dy = Tensor::host({c.batch, c.out_channels, 11, 14});
  REQUIRE_THROWS_WITH(
      backend.conv2d_transpose_backward_data(wrong_dy, t.weight, c.geometry, dx),
      Catch::Contains("conv2d_transpose_backward_data") && Catch::Contains(wrong_dy.describe()));
  Tensor dweight = Tensor::host(t.weight.dims(), DType::f32, Layout::nchw);
  REQUIRE_THROWS_WITH(
      backend.conv2d_transpose_backward_weights(t.x, wrong_dy, c.geometry, dweight, nullptr),
      Catch::Contains("conv2d_transpose_backward_weights"));
}

TEST_CASE("cpu backend: repeated shapes reuse cached primitives", "[core]") {
  CpuBackend backend;
  const ConvCase c = conv_cases.back();
  ConvTensors first = make_conv(c, 7);
  backend.conv2d_forward(first.x, first.weight, &first.bias, c.geometry, first.y);
  const std::size_t after_first_call = backend.cached_primitive_count();
  CHECK(after_first_call >= 1);
  ConvTensors second = make_conv(c, 8);  // fresh buffers, same shapes
  backend.conv2d_forward(second.x, second.weight, &second.bias, c.geometry, second.y);
  CHECK(backend.cached_primitive_count() == after_first_call);

  // A whole training step creates nothing the second time round.
  Tensor dx = Tensor::host(first.x.dims());
  Tensor dweight = Tensor::host(first.weight.dims(), DType::f32, Layout::nchw);
  Tensor dbias = Tensor::host(first.bias.dims(), DType::f32, Layout::flat);
  const auto step = [&] {
    backend.conv2d_forward(first.x, first.weight, &first.bias, c.geometry, first.y);
    backend.relu_forward(first.y, first.y);
    backend.relu_backward(first.y, first.y, first.y);
    backend.conv2d_backward_data(first.y, first.weight, c.geometry, dx);
    backend.conv2d_backward_weights(first.x, first.y, c.geometry, dweight, &dbias);
  };
  step();
  const std::size_t after_first_step = backend.cached_primitive_count();
  step();
  CHECK(backend.cached_primitive_count() == after_first_step);

  ConvCase strided = c;
  strided.geometry.stride = 2;
  ConvTensors other = make_conv(strided, 9);
  backend.conv2d_forward(other.x, other.weight, nullptr, strided.geometry, other.y);
  CHECK(backend.cached_primitive_count() == after_first_step + 1);
}

TEST_CASE("cpu backend: mismatched shapes are rejected with the offending tensors", "[core]") {
  CpuBackend backend;
  ConvTensors t = make_conv(conv_cases.front(), 3);
  Tensor wrong_y = Tensor::host({2, 4, 6, 6});
  REQUIRE_THROWS_AS(backend.conv2d_forward(t.x, t.weight, nullptr, {}, wrong_y),
                    hardy::InvalidArgument);
  REQUIRE_THROWS_WITH(backend.conv2d_forward(t.x, t.weight, nullptr, {}, wrong_y),
                      Catch::Contains(wrong_y.describe()) && Catch::Contains(t.x.describe()));
  Tensor wrong_weight = Tensor::host({4, 2, 3, 3}, DType::f32, Layout::nchw);
  REQUIRE_THROWS_WITH(backend.conv2d_forward(t.x, wrong_weight, nullptr, {}, t.y),
                      Catch::Contains(wrong_weight.describe()));
  Tensor nchw_x = Tensor::host(t.x.dims(), DType::f32, Layout::nchw);
  REQUIRE_THROWS_AS(backend.conv2d_forward(nchw_x, t.weight, nullptr, {}, t.y),
                    hardy::InvalidArgument);

  Tensor x = random_tensor({1, 6, 2, 2}, 4);
  Tensor gamma = channel_vector(6, 5, 0.5f, 1.5f), beta = channel_vector(6, 6, -0.5f, 0.5f);
  Tensor y = Tensor::host(x.dims());
  Tensor mean = Tensor::host({1, 4}, DType::f32, Layout::flat), rstd = mean.clone();
  REQUIRE_THROWS_WITH(
      backend.group_norm_forward(
          {.x = x, .gamma = gamma, .beta = beta, .groups = 4, .eps = 1e-5f, .fuse_relu = false}, y,
          mean, rstd),
      Catch::Contains("4 groups"));
  Tensor short_gamma = channel_vector(5, 7, 0.5f, 1.5f);
  REQUIRE_THROWS_WITH(backend.batch_norm_apply({.x = x,
                                                .mean = gamma,
                                                .variance = gamma,
                                                .gamma = short_gamma,
                                                .beta = beta,
                                                .eps = 1e-5f,
                                                .fuse_relu = false},
                                               y),
                      Catch::Contains(short_gamma.describe()));
  Tensor small = Tensor::host({1, 6, 1, 2});
  REQUIRE_THROWS_AS(backend.relu_forward(x, small), hardy::InvalidArgument);
}

namespace {

// Counts the relu hooks that reach the inner backend.
class CountingBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  int relu_calls = 0;

 protected:
  void do_relu_forward(const Tensor& x, Tensor& y) override {
    ++relu_calls;
    ForwardingBackend::do_relu_forward(x, y);
  }
};

}  // namespace

TEST_CASE("backend: operands are checked before the hook, also through a decorator", "[core]") {
  CpuBackend cpu;
  CountingBackend counting(cpu);
  CHECK(counting.name() == "cpu");
  CHECK(counting.operand_rules().device == Device::host);
  Tensor x = random_tensor({1, 6, 2, 2}, 4, -1.0f, 1.0f);
  Tensor small = Tensor::host({1, 6, 1, 2});
  REQUIRE_THROWS_WITH(counting.relu_forward(x, small), Catch::Contains("relu_forward") &&
                                                           Catch::Contains(x.describe()) &&
                                                           Catch::Contains(small.describe()));
  CHECK(counting.relu_calls == 0);
  Tensor through_decorator = Tensor::host(x.dims()), direct = Tensor::host(x.dims());
  counting.relu_forward(x, through_decorator);
  cpu.relu_forward(x, direct);
  CHECK(counting.relu_calls == 1);
  CHECK(std::vector<float>(through_decorator.f32().begin(), through_decorator.f32().end()) ==
        std::vector<float>(direct.f32().begin(), direct.f32().end()));
  // Operations the decorator does not override reach the inner backend's hook unchanged.
  Tensor flat = Tensor::host({4}, DType::f32, Layout::flat);
  counting.fill(flat, 2.5f);
  CHECK(counting.sum_squares(flat) == 25.0);
  Tensor integers = Tensor::host({4}, DType::i32, Layout::flat);
  REQUIRE_THROWS_WITH(counting.sum_squares(integers),
                      Catch::Contains("sum_squares") && Catch::Contains(integers.describe()));
}

TEST_CASE("cpu backend: group norm forward matches the reference", "[core]") {
  CpuBackend backend;
  for (const bool relu : {false, true}) {
    for (const float offset : {0.0f, 1000.0f}) {  // a large mean tests the variance numerics
      INFO("relu " << relu << ", offset " << offset);
      Tensor x = random_tensor({2, 6, 5, 4}, 11, offset - 1.0f, offset + 1.0f);
      Tensor gamma = channel_vector(6, 12, 0.5f, 1.5f), beta = channel_vector(6, 13, -0.5f, 0.5f);
      Tensor y = Tensor::host(x.dims());
      Tensor mean = Tensor::host({2, 3}, DType::f32, Layout::flat), rstd = mean.clone();
      backend.group_norm_forward(
          {.x = x, .gamma = gamma, .beta = beta, .groups = 3, .eps = 1e-5f, .fuse_relu = relu}, y,
          mean, rstd);
      const auto expected = reference::group_norm(x, gamma, beta, 3, 1e-5f, relu);
      check_close(y, expected.y, 2e-4);
      for (std::size_t i = 0; i < expected.mean.size(); ++i) {
        CHECK(mean.f32()[i] == Approx(expected.mean[i]).epsilon(1e-6));
        CHECK(rstd.f32()[i] == Approx(expected.rstd[i]).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("cpu backend: group norm gradients match finite differences", "[core]") {
  CpuBackend backend;
  const int groups = 2;
  const float eps = 1e-5f;
  for (const bool relu : {false, true}) {
    INFO("fused relu " << relu);
    NormalizationInputs in;
    Tensor y = Tensor::host({2, 4, 3, 3});
    Tensor mean = Tensor::host({2, groups}, DType::f32, Layout::flat), rstd = mean.clone();
    const auto forward = [&](bool with_relu) {
      backend.group_norm_forward({.x = in.x,
                                  .gamma = in.gamma,
                                  .beta = in.beta,
                                  .groups = groups,
                                  .eps = eps,
                                  .fuse_relu = with_relu},
                                 y, mean, rstd);
    };
    draw_normalization_inputs(in, y.dims(), 20, relu, y, [&] { forward(false); });
    const Tensor r = random_tensor(y.dims(), 21);
    const auto objective = [&] {
      forward(relu);
      return weighted_sum(y, r);
    };
    objective();
    Tensor dx = Tensor::host(in.x.dims());
    Tensor dgamma = Tensor::host({4}, DType::f32, Layout::flat), dbeta = dgamma.clone();
    backend.group_norm_backward({.x = in.x,
                                 .y = y,
                                 .dy = r,
                                 .gamma = in.gamma,
                                 .mean = mean,
                                 .rstd = rstd,
                                 .groups = groups,
                                 .fuse_relu = relu},
                                dx, dgamma, dbeta);
    check_normalization_gradients(in, dx, dgamma, dbeta, objective, relu);
  }
}

TEST_CASE("cpu backend: batch norm statistics and apply match the reference", "[core]") {
  CpuBackend backend;
  Tensor x = random_tensor({3, 5, 4, 3}, 30, -2.0f, 3.0f);
  Tensor sum = Tensor::host({5}, DType::f32, Layout::flat), sum_squares = sum.clone();
  backend.batch_norm_statistics(x, sum, sum_squares);
  for (std::int64_t c = 0; c < 5; ++c) {
    double expected_sum = 0, expected_squares = 0;
    for (std::int64_t n = 0; n < 3; ++n)
      for (std::int64_t h = 0; h < 4; ++h)
        for (std::int64_t w = 0; w < 3; ++w) {
          const double value = reference::at(x, n, c, h, w);
          expected_sum += value;
          expected_squares += value * value;
        }
    CHECK(sum.f32()[c] == Approx(expected_sum).epsilon(1e-6).margin(1e-5));
    CHECK(sum_squares.f32()[c] == Approx(expected_squares).epsilon(1e-6));
  }
  Tensor mean = channel_vector(5, 31, -0.5f, 0.5f), variance = channel_vector(5, 32, 0.5f, 2.0f);
  Tensor gamma = channel_vector(5, 33, 0.5f, 1.5f), beta = channel_vector(5, 34, -0.5f, 0.5f);
  for (const bool relu : {false, true}) {
    INFO("relu " << relu);
    Tensor y = Tensor::host(x.dims());
    backend.batch_norm_apply({.x = x,
                              .mean = mean,
                              .variance = variance,
                              .gamma = gamma,
                              .beta = beta,
                              .eps = 1e-3f,
                              .fuse_relu = relu},
                             y);
    check_close(y, reference::batch_norm(x, mean, variance, gamma, beta, 1e-3f, relu));
  }
}

TEST_CASE("cpu backend: batch norm gradients match finite differences", "[core]") {
  CpuBackend backend;
  const std::vector<std::int64_t> dims{2, 3, 3, 4};
  const double count = 2 * 3 * 4;  // N * H * W
  const float eps = 1e-5f;
  for (const bool relu : {false, true}) {
    INFO("fused relu " << relu);
    NormalizationInputs in;
    Tensor y = Tensor::host(dims);
    Tensor sum = Tensor::host({3}, DType::f32, Layout::flat), sum_squares = sum.clone();
    Tensor mean = sum.clone(), variance = sum.clone();
    // Training-mode batch norm as the trainer chains it: statistics, then apply.
    const auto forward = [&](bool with_relu) {
      backend.batch_norm_statistics(in.x, sum, sum_squares);
      for (std::int64_t c = 0; c < 3; ++c) {
        const double m = sum.f32()[c] / count;
        mean.f32()[c] = static_cast<float>(m);
        variance.f32()[c] = static_cast<float>(sum_squares.f32()[c] / count - m * m);
      }
      backend.batch_norm_apply({.x = in.x,
                                .mean = mean,
                                .variance = variance,
                                .gamma = in.gamma,
                                .beta = in.beta,
                                .eps = eps,
                                .fuse_relu = with_relu},
                               y);
    };
    draw_normalization_inputs(in, dims, 40, relu, y, [&] { forward(false); });
    const Tensor r = random_tensor(dims, 41);
    const auto objective = [&] {
      forward(relu);
      return weighted_sum(y, r);
    };
    objective();
    Tensor dgamma = Tensor::host({3}, DType::f32, Layout::flat), dbeta = dgamma.clone();
    Tensor dx = Tensor::host(dims);
    backend.batch_norm_backward_statistics({.x = in.x,
                                            .y = y,
                                            .dy = r,
                                            .mean = mean,
                                            .variance = variance,
                                            .eps = eps,
                                            .fuse_relu = relu},
                                           dgamma, dbeta);
    backend.batch_norm_backward_data({.x = in.x,
                                      .y = y,
                                      .dy = r,
                                      .mean = mean,
                                      .variance = variance,
                                      .gamma = in.gamma,
                                      .dgamma = dgamma,
                                      .dbeta = dbeta,
                                      .eps = eps,
                                      .fuse_relu = relu,
                                      .count = count},
                                     dx);
    check_normalization_gradients(in, dx, dgamma, dbeta, objective, relu);
  }
}

TEST_CASE("cpu backend: relu forward and backward", "[core]") {
  CpuBackend backend;
  Tensor x = away_from_zero({2, 5, 3, 3}, 50, 0.1f);
  Tensor y = Tensor::host(x.dims());
  backend.relu_forward(x, y);
  for (std::size_t i = 0; i < x.f32().size(); ++i) CHECK(y.f32()[i] == std::max(x.f32()[i], 0.0f));
  const Tensor r = random_tensor(x.dims(), 51);
  Tensor dx = Tensor::host(x.dims());
  backend.relu_backward(y, r, dx);
  check_gradient("dx", x, dx, [&] {
    backend.relu_forward(x, y);
    return weighted_sum(y, r);
  });
}

TEST_CASE("cpu backend: the gradient check catches a wrong gradient", "[core]") {
  CpuBackend backend;
  Tensor x = away_from_zero({1, 4, 3, 3}, 55, 0.1f);
  Tensor y = Tensor::host(x.dims());
  const Tensor r = random_tensor(x.dims(), 56);
  const auto objective = [&] {
    backend.relu_forward(x, y);
    return weighted_sum(y, r);
  };
  // Forgetting the relu mask, or a gradient off by 1 %, must exceed the tolerance.
  CHECK(compare_gradient(x, r, objective, 1e-2f).relative_error > gradient_tolerance);
  ConvTensors t = make_conv(conv_cases.front(), 57);
  const Tensor dy = random_tensor(t.y.dims(), 58);
  Tensor dx = Tensor::host(t.x.dims());
  backend.conv2d_backward_data(dy, t.weight, {.stride = 1, .padding = 1, .dilation = 1}, dx);
  for (float& value : dx.f32()) value *= 1.01f;
  const auto conv_objective = [&] {
    backend.conv2d_forward(t.x, t.weight, nullptr, {.stride = 1, .padding = 1, .dilation = 1}, t.y);
    return weighted_sum(t.y, dy);
  };
  CHECK(compare_gradient(t.x, dx, conv_objective, 1e-2f).relative_error > gradient_tolerance);
}

TEST_CASE("cpu backend: bilinear upsampling matches PyTorch align_corners=False", "[core]") {
  CpuBackend backend;
  // torch.nn.functional.interpolate(x, size=4, mode="bilinear", align_corners=False): output
  // pixels sample the input at -0.25, 0.25, 0.75, 1.25 (clamped to the border).
  const Tensor x = values_tensor({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor y = Tensor::host({1, 1, 4, 4});
  backend.upsample_bilinear_forward(x, y);
  check_close(y,
              values_tensor({1, 1, 4, 4}, {1.00f, 1.25f, 1.75f, 2.00f,  //
                                           1.50f, 1.75f, 2.25f, 2.50f,  //
                                           2.50f, 2.75f, 3.25f, 3.50f,  //
                                           3.00f, 3.25f, 3.75f, 4.00f}),
              1e-6);
  // Upsampling, mixed up/down sampling, and a 1x1 source that broadcasts.
  for (const auto& [in_h, in_w, out_h, out_w] :
       std::vector<std::array<std::int64_t, 4>>{{3, 5, 7, 4}, {4, 6, 8, 12}, {1, 1, 3, 5}}) {
    INFO(in_h << "x" << in_w << " -> " << out_h << "x" << out_w);
    const Tensor source = random_tensor({2, 5, in_h, in_w}, 60);
    Tensor resized = Tensor::host({2, 5, out_h, out_w});
    backend.upsample_bilinear_forward(source, resized);
    check_close(resized, reference::upsample_bilinear(source, out_h, out_w), 1e-5);
  }
}

TEST_CASE("cpu backend: bilinear upsampling gradient matches finite differences", "[core]") {
  CpuBackend backend;
  for (const auto& [out_h, out_w] :
       std::vector<std::array<std::int64_t, 2>>{{7, 9}, {2, 3}, {1, 1}}) {
    INFO("3x4 -> " << out_h << "x" << out_w);
    Tensor x = random_tensor({2, 3, 3, 4}, 61);
    Tensor y = Tensor::host({2, 3, out_h, out_w});
    const Tensor r = random_tensor(y.dims(), 62);
    Tensor dx = Tensor::host(x.dims());
    backend.upsample_bilinear_backward(r, dx);
    check_gradient("dx", x, dx, [&] {
      backend.upsample_bilinear_forward(x, y);
      return weighted_sum(y, r);
    });
  }
  Tensor one_pixel = random_tensor({1, 4, 1, 1}, 63);
  Tensor broadcast = Tensor::host({1, 4, 5, 3});
  const Tensor r = random_tensor(broadcast.dims(), 64);
  Tensor d_one_pixel = Tensor::host(one_pixel.dims());
  backend.upsample_bilinear_backward(r, d_one_pixel);
  check_gradient("1x1 broadcast dx", one_pixel, d_one_pixel, [&] {
    backend.upsample_bilinear_forward(one_pixel, broadcast);
    return weighted_sum(broadcast, r);
  });
}

TEST_CASE("cpu backend: concat and split round-trip and are each other's gradient", "[core]") {
  CpuBackend backend;
  Tensor a = random_tensor({2, 3, 4, 5}, 70), b = random_tensor({2, 5, 4, 5}, 71);
  Tensor c = random_tensor({2, 1, 4, 5}, 72);
  Tensor y = Tensor::host({2, 9, 4, 5});
  const std::vector<const Tensor*> inputs{&a, &b, &c};
  backend.concat_channels(inputs, y);
  for (std::int64_t n = 0; n < 2; ++n)
    for (std::int64_t h = 0; h < 4; ++h)
      for (std::int64_t w = 0; w < 5; ++w) {
        for (std::int64_t k = 0; k < 3; ++k)
          CHECK(reference::at(y, n, k, h, w) == reference::at(a, n, k, h, w));
        for (std::int64_t k = 0; k < 5; ++k)
          CHECK(reference::at(y, n, 3 + k, h, w) == reference::at(b, n, k, h, w));
        CHECK(reference::at(y, n, 8, h, w) == reference::at(c, n, 0, h, w));
      }
  Tensor a_back = Tensor::host(a.dims()), b_back = Tensor::host(b.dims());
  Tensor c_back = Tensor::host(c.dims());
  const std::vector<Tensor*> outputs{&a_back, &b_back, &c_back};
  backend.split_channels(y, outputs);
  check_close(a_back, a, 0.0);
  check_close(b_back, b, 0.0);
  check_close(c_back, c, 0.0);

  // d/da sum(concat(a, b, c) .* r) = split(r)[0], and d/dy sum(split(y)_i .* r_i) = concat(r_i).
  const Tensor r = random_tensor(y.dims(), 73);
  backend.split_channels(r, outputs);
  const auto concat_objective = [&] {
    backend.concat_channels(inputs, y);
    return weighted_sum(y, r);
  };
  check_gradient("concat da", a, a_back, concat_objective);
  check_gradient("concat db", b, b_back, concat_objective);
  const Tensor ra = random_tensor(a.dims(), 74), rb = random_tensor(b.dims(), 75);
  const Tensor rc = random_tensor(c.dims(), 76);
  Tensor dy = Tensor::host(y.dims());
  backend.concat_channels(std::vector<const Tensor*>{&ra, &rb, &rc}, dy);
  check_gradient("split dy", y, dy, [&] {
    backend.split_channels(y, outputs);
    return weighted_sum(a_back, ra) + weighted_sum(b_back, rb) + weighted_sum(c_back, rc);
  });
}

TEST_CASE("cpu backend: global average pooling forward and gradient", "[core]") {
  CpuBackend backend;
  Tensor x = random_tensor({2, 70, 3, 4}, 80);  // more channels than one pooling block
  Tensor y = Tensor::host({2, 70, 1, 1});
  backend.global_avg_pool_forward(x, y);
  check_close(y, reference::global_avg_pool(x), 1e-6);
  const Tensor r = random_tensor(y.dims(), 81);
  Tensor dx = Tensor::host(x.dims());
  backend.global_avg_pool_backward(r, dx);
  check_gradient("dx", x, dx, [&] {
    backend.global_avg_pool_forward(x, y);
    return weighted_sum(y, r);
  });
}

namespace {

Tensor labels_tensor(std::vector<std::int64_t> dims, const std::vector<std::int32_t>& values) {
  Tensor labels = Tensor::host(std::move(dims), DType::i32);
  REQUIRE(labels.numel() == static_cast<std::int64_t>(values.size()));
  std::copy(values.begin(), values.end(), labels.data<std::int32_t>());
  return labels;
}

}  // namespace

TEST_CASE("cpu backend: softmax cross-entropy on a hand-checked case", "[core]") {
  CpuBackend backend;
  // Pixel 0: logits (1, 2, 3), label 2, weight 0.5: nll = log(e^1 + e^2 + e^3) - 3 = 0.40760596.
  // Pixel 1: logits (0, 0, 0), label 0, weight 1: nll = log 3 = 1.09861229.
  const Tensor logits = values_tensor({1, 3, 1, 2}, {1, 2, 3, 0, 0, 0});
  const Tensor labels = labels_tensor({1, 1, 1, 2}, {2, 0});
  const std::vector<float> class_weights{1.0f, 2.0f, 0.5f};
  Tensor dlogits = Tensor::host(logits.dims());
  const double loss = backend.softmax_cross_entropy(
      {.logits = logits, .labels = labels, .class_weights = class_weights, .grad_scale = 2.0f},
      dlogits);
  CHECK(loss == Approx(0.5 * 0.4076059644443806 + 1.0986122886681098).epsilon(1e-6));
  // grad_scale 2 * weight * (softmax - onehot); softmax(1, 2, 3) = (0.09003057, 0.24472847,
  // 0.66524096).
  const std::vector<double> expected{
      0.09003057317038046,     0.24472847105479764, 0.6652409557748219 - 1.0,
      2.0 * (1.0 / 3.0 - 1.0), 2.0 / 3.0,           2.0 / 3.0};
  for (std::size_t i = 0; i < expected.size(); ++i)
    CHECK(dlogits.f32()[i] == Approx(expected[i]).epsilon(1e-5));
}

TEST_CASE("a pending sum reads its source once, and rethrows what the source found", "[core]") {
  struct CountingSource final : PendingSum::Source {
    CountingSource(int& reads, bool fails) : reads_(reads), fails_(fails) {}
    double read() override {
      ++reads_;
      if (fails_) throw hardy::InvalidArgument("label 9 at (n=0, h=0, w=1) is outside [0, 3)");
      return 2.5;
    }
    int& reads_;
    bool fails_;
  };
  CHECK(PendingSum().value() == 0.0);
  CHECK(PendingSum::ready(1.25).value() == 1.25);
  int reads = 0;
  PendingSum good(std::make_unique<CountingSource>(reads, false));
  CHECK(reads == 0);  // nothing is read before it is asked for
  CHECK(good.value() == 2.5);
  CHECK(good.value() == 2.5);
  CHECK(reads == 1);
  PendingSum moved = std::move(good);
  CHECK(moved.value() == 2.5);
  CHECK(reads == 1);
  int failed_reads = 0;
  PendingSum bad(std::make_unique<CountingSource>(failed_reads, true));
  CHECK_THROWS_WITH(bad.value(), Catch::Contains("label 9"));
  CHECK_THROWS_AS(bad.value(), hardy::InvalidArgument);  // never a silent 0 after the first throw
  CHECK(failed_reads == 2);

  // The CPU's queued losses are the losses: its kernels ran on the call.
  CpuBackend backend;
  const Tensor logits = values_tensor({1, 3, 1, 2}, {1, 2, 3, 0, 0, 0});
  const Tensor labels = labels_tensor({1, 1, 1, 2}, {2, 0});
  const std::vector<float> class_weights{1.0f, 2.0f, 0.5f};
  Tensor dlogits = Tensor::host(logits.dims());
  const SoftmaxCrossEntropy args{
      .logits = logits, .labels = labels, .class_weights = class_weights, .grad_scale = 2.0f};
  PendingSum queued = backend.queue_softmax_cross_entropy(args, dlogits);
  CHECK(queued.value() == backend.softmax_cross_entropy(args, dlogits));
  const Tensor target = values_tensor({1, 3, 1, 2}, {0, 2, 3, 1, 0, 0});
  Tensor dprediction = Tensor::host(logits.dims());
  const MseLoss mse{.prediction = logits, .target = target, .grad_scale = 1.0f};
  CHECK(backend.queue_mse_loss(mse, dprediction).value() == Approx(2.0));  // (1-0)^2 + (0-1)^2
}

TEST_CASE("cpu backend: softmax cross-entropy gradient matches finite differences", "[core]") {
  CpuBackend backend;
  Tensor logits = random_tensor({2, 4, 3, 3}, 90, -2.0f, 2.0f);
  std::vector<std::int32_t> values;
  std::mt19937 generator(91);
  for (int i = 0; i < 18; ++i) values.push_back(static_cast<std::int32_t>(generator() % 4));
  const Tensor labels = labels_tensor({2, 1, 3, 3}, values);
  const std::vector<float> class_weights{1.0f, 0.5f, 2.0f, 1.5f};
  const float grad_scale = 0.25f;
  Tensor dlogits = Tensor::host(logits.dims()), scratch = Tensor::host(logits.dims());
  backend.softmax_cross_entropy({.logits = logits,
                                 .labels = labels,
                                 .class_weights = class_weights,
                                 .grad_scale = grad_scale},
                                dlogits);
  check_gradient("dlogits", logits, dlogits, [&] {
    return grad_scale * backend.softmax_cross_entropy({.logits = logits,
                                                       .labels = labels,
                                                       .class_weights = class_weights,
                                                       .grad_scale = grad_scale},
                                                      scratch);
  });
}

TEST_CASE("cpu backend: softmax cross-entropy rejects labels outside the classes", "[core]") {
  CpuBackend backend;
  const Tensor logits = random_tensor({1, 4, 1, 3}, 95);
  Tensor dlogits = Tensor::host(logits.dims());
  const std::vector<float> class_weights(4, 1.0f);
  for (const std::int32_t bad : {7, 4, -2}) {
    const Tensor labels = labels_tensor({1, 1, 1, 3}, {0, bad, 2});
    REQUIRE_THROWS_AS(backend.softmax_cross_entropy({.logits = logits,
                                                     .labels = labels,
                                                     .class_weights = class_weights,
                                                     .grad_scale = 1.0f},
                                                    dlogits),
                      hardy::InvalidArgument);
    REQUIRE_THROWS_WITH(backend.softmax_cross_entropy({.logits = logits,
                                                       .labels = labels,
                                                       .class_weights = class_weights,
                                                       .grad_scale = 1.0f},
                                                      dlogits),
                        Catch::Contains("label " + std::to_string(bad)));
  }
  const Tensor labels = labels_tensor({1, 1, 1, 3}, {0, 1, 2});
  REQUIRE_THROWS_AS(backend.softmax_cross_entropy({.logits = logits,
                                                   .labels = labels,
                                                   .class_weights = std::vector<float>(3, 1.0f),
                                                   .grad_scale = 1.0f},
                                                  dlogits),
                    hardy::InvalidArgument);
}

TEST_CASE("cpu backend: ignored pixels add no loss and get no gradient", "[core]") {
  CpuBackend backend;
  // The hand-checked case above with a third pixel whose label is kIgnoreLabel.
  const Tensor logits = values_tensor({1, 3, 1, 3}, {1, 2, 3, 0, 0, 0, 5, -4, 9});
  const Tensor labels = labels_tensor({1, 1, 1, 3}, {2, 0, hardy::core::kIgnoreLabel});
  const std::vector<float> class_weights{1.0f, 2.0f, 0.5f};
  Tensor dlogits = Tensor::host(logits.dims());
  std::fill_n(dlogits.f32().begin(), 9, 123.0f);  // must be overwritten, not left
  const double loss = backend.softmax_cross_entropy(
      {.logits = logits, .labels = labels, .class_weights = class_weights, .grad_scale = 2.0f},
      dlogits);
  CHECK(loss == Approx(0.5 * 0.4076059644443806 + 1.0986122886681098).epsilon(1e-6));
  for (std::size_t i = 6; i < 9; ++i) CHECK(dlogits.f32()[i] == 0.0f);
  CHECK(dlogits.f32()[0] == Approx(0.09003057317038046).epsilon(1e-5));
}

TEST_CASE("cpu backend: argmax over channels", "[core]") {
  CpuBackend backend;
  // Three pixels of three classes; the last has a tie, which goes to the first class.
  const Tensor logits = values_tensor({1, 3, 1, 3}, {0, 5, 1, -2, -3, -1, 4, 1, 4});
  Tensor labels = Tensor::host({1, 1, 1, 3}, DType::i32);
  backend.argmax_channels(logits, labels);
  CHECK(std::vector<std::int32_t>(labels.data<std::int32_t>(), labels.data<std::int32_t>() + 3) ==
        std::vector<std::int32_t>{1, 2, 0});
}

TEST_CASE("cpu backend: copy converts layouts and fill sets every element", "[core]") {
  CpuBackend backend;
  const Tensor nchw = random_tensor({2, 3, 4, 5}, 100, -1.0f, 1.0f, Layout::nchw);
  Tensor nhwc = backend.empty(nchw.dims(), DType::f32, Layout::nhwc);
  backend.copy(nchw, nhwc);
  for (std::int64_t n = 0; n < 2; ++n)
    for (std::int64_t c = 0; c < 3; ++c)
      for (std::int64_t h = 0; h < 4; ++h)
        for (std::int64_t w = 0; w < 5; ++w)
          CHECK(reference::at(nhwc, n, c, h, w) == reference::at(nchw, n, c, h, w));
  Tensor round_trip = backend.empty(nchw.dims(), DType::f32, Layout::nchw);
  backend.copy(nhwc, round_trip);
  check_close(round_trip, nchw, 0.0);
  Tensor same_layout = backend.empty(nchw.dims(), DType::f32, Layout::nchw);
  backend.copy(nchw, same_layout);
  check_close(same_layout, nchw, 0.0);
  Tensor wrong = backend.empty({2, 3, 5, 4}, DType::f32, Layout::nhwc);
  REQUIRE_THROWS_AS(backend.copy(nchw, wrong), hardy::InvalidArgument);

  Tensor ints = backend.empty({1, 2, 1, 3}, DType::i32, Layout::nchw);
  for (std::int32_t i = 0; i < 6; ++i) ints.data<std::int32_t>()[i] = i;
  Tensor ints_nhwc = backend.empty(ints.dims(), DType::i32, Layout::nhwc);
  backend.copy(ints, ints_nhwc);
  CHECK(std::vector<std::int32_t>(ints_nhwc.data<std::int32_t>(),
                                  ints_nhwc.data<std::int32_t>() + 6) ==
        std::vector<std::int32_t>{0, 3, 1, 4, 2, 5});

  Tensor values = backend.empty({3, 7}, DType::f32, Layout::flat);
  backend.fill(values, -2.5f);
  for (float value : values.f32()) CHECK(value == -2.5f);
  Tensor halves = backend.empty({5}, DType::bf16, Layout::flat);
  backend.fill(halves, 1.5f);
  for (int i = 0; i < 5; ++i) CHECK(halves.data<std::uint16_t>()[i] == 0x3FC0);  // bf16 1.5
  backend.fill(ints, 7.0f);
  for (int i = 0; i < 6; ++i) CHECK(ints.data<std::int32_t>()[i] == 7);
}

// The model's shapes are big enough for the threaded path: the backward must still be the
// forward's exact adjoint, and a sample's gradient must not depend on the batch it came in or on
// the thread count (data-parallel runs split batches; ranks run different thread counts).
TEST_CASE("cpu backend: bilinear upsampling backward is batch- and thread-independent", "[core]") {
  CpuBackend backend;
  const int threads = omp_get_max_threads();
  for (const auto& [channels, in_size, out_size] :
       std::vector<std::array<std::int64_t, 3>>{{3, 16, 64}, {32, 8, 16}, {32, 1, 8}}) {
    INFO(channels << " channels, " << in_size << "^2 -> " << out_size << "^2");
    const Tensor r = random_tensor({8, channels, out_size, out_size}, 90);
    const Tensor x = random_tensor({8, channels, in_size, in_size}, 91);
    Tensor y = Tensor::host(r.dims()), dx = Tensor::host(x.dims());
    backend.upsample_bilinear_forward(x, y);
    backend.upsample_bilinear_backward(r, dx);
    const double forward = weighted_sum(y, r), adjoint = weighted_sum(x, dx);
    CHECK(std::abs(forward - adjoint) <= 1e-5 * std::abs(forward) + 1e-4);

    omp_set_num_threads(1);
    const std::int64_t per_sample_in = channels * in_size * in_size,
                       per_sample_out = channels * out_size * out_size;
    for (int part = 0; part < 4; ++part) {  // the batch of 8 as 4 batches of 2, on one thread
      Tensor r_part = Tensor::host({2, channels, out_size, out_size});
      std::copy_n(r.f32().begin() + part * 2 * per_sample_out, 2 * per_sample_out,
                  r_part.f32().begin());
      Tensor dx_part = Tensor::host({2, channels, in_size, in_size});
      backend.upsample_bilinear_backward(r_part, dx_part);
      CHECK(std::equal(dx_part.f32().begin(), dx_part.f32().end(),
                       dx.f32().begin() + part * 2 * per_sample_in));
    }
    omp_set_num_threads(threads);
  }
}

namespace {

// Sample n of a 4-D tensor at logical (c, h, w) order, whatever its layout.
std::vector<float> sample_values(const Tensor& t, std::int64_t n) {
  std::vector<float> values;
  for (std::int64_t c = 0; c < t.c(); ++c)
    for (std::int64_t h = 0; h < t.h(); ++h)
      for (std::int64_t w = 0; w < t.w(); ++w) values.push_back(reference::at(t, n, c, h, w));
  return values;
}

// Which elements of sample n were kept (are non-zero), in logical order.
std::vector<bool> sample_mask(const Tensor& t, std::int64_t n) {
  std::vector<bool> mask;
  for (float value : sample_values(t, n)) mask.push_back(value != 0.0f);
  return mask;
}

double fraction_differing(const std::vector<bool>& a, const std::vector<bool>& b) {
  REQUIRE(a.size() == b.size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differing += a[i] != b[i];
  return static_cast<double>(differing) / static_cast<double>(a.size());
}

}  // namespace

TEST_CASE("cpu backend: dropout keeps 1 - rate of the elements, scaled by 1 / (1 - rate)",
          "[core]") {
  CpuBackend backend;
  const Tensor x = away_from_zero({4, 16, 64, 64}, 800, 0.1f);
  Tensor y = Tensor::host(x.dims());
  const std::vector<std::uint64_t> keys{3, 1, 4, 1 << 20};
  for (const float rate : {0.1f, 0.3f, 0.5f, 0.9f}) {
    INFO("rate " << rate);
    backend.dropout_forward({.x = x, .rate = rate, .seed = 42, .sample_keys = keys}, y);
    const float scale = 1.0f / (1.0f - rate);
    std::size_t kept = 0, wrong = 0;
    for (std::size_t i = 0; i < x.f32().size(); ++i) {
      if (y.f32()[i] == 0.0f) continue;
      ++kept;
      wrong += y.f32()[i] != x.f32()[i] * scale;
    }
    CHECK(wrong == 0);
    const double fraction = static_cast<double>(kept) / static_cast<double>(x.numel());
    CHECK(std::fabs(fraction - (1.0 - rate)) < 0.01);
    // Each sample on its own, too (a key that left a sample all kept or all dropped would hide).
    for (std::int64_t n = 0; n < x.n(); ++n) {
      const std::vector<bool> mask = sample_mask(y, n);
      const double sample_fraction =
          static_cast<double>(std::count(mask.begin(), mask.end(), true)) / mask.size();
      CHECK(std::fabs(sample_fraction - (1.0 - rate)) < 0.02);
    }
  }
}

TEST_CASE("cpu backend: a sample's dropout mask depends on its seed and key only", "[core]") {
  CpuBackend backend;
  const float rate = 0.4f;
  const std::uint64_t seed = 1234;
  // Three samples with keys 7, 8, 9; then the last two again, in the other order, in a batch of
  // their own and in the other layout.
  const Tensor x = away_from_zero({3, 5, 6, 7}, 810, 0.1f);
  const std::vector<std::uint64_t> keys{7, 8, 9};
  Tensor y = Tensor::host(x.dims());
  backend.dropout_forward({.x = x, .rate = rate, .seed = seed, .sample_keys = keys}, y);

  Tensor swapped = Tensor::host({2, 5, 6, 7}, DType::f32, Layout::nchw);
  for (std::int64_t n = 0; n < 2; ++n)
    for (std::int64_t c = 0; c < 5; ++c)
      for (std::int64_t h = 0; h < 6; ++h)
        for (std::int64_t w = 0; w < 7; ++w)
          reference::at(swapped, n, c, h, w) = reference::at(x, 2 - n, c, h, w);
  const std::vector<std::uint64_t> swapped_keys{9, 8};
  Tensor y_swapped = Tensor::host(swapped.dims(), DType::f32, Layout::nchw);
  backend.dropout_forward({.x = swapped, .rate = rate, .seed = seed, .sample_keys = swapped_keys},
                          y_swapped);
  CHECK(sample_values(y_swapped, 0) == sample_values(y, 2));
  CHECK(sample_values(y_swapped, 1) == sample_values(y, 1));

  // On one thread, the same.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  Tensor y_one_thread = Tensor::host(x.dims());
  backend.dropout_forward({.x = x, .rate = rate, .seed = seed, .sample_keys = keys}, y_one_thread);
  omp_set_num_threads(threads);
  check_close(y_one_thread, y, 0.0);

  // Another key, or another seed, gives another mask (about 2 * 0.4 * 0.6 of the elements differ).
  const std::vector<std::uint64_t> other_keys{7, 10, 9};
  Tensor y_other = Tensor::host(x.dims());
  backend.dropout_forward({.x = x, .rate = rate, .seed = seed, .sample_keys = other_keys}, y_other);
  CHECK(sample_values(y_other, 0) == sample_values(y, 0));
  CHECK(fraction_differing(sample_mask(y_other, 1), sample_mask(y, 1)) > 0.3);
  backend.dropout_forward({.x = x, .rate = rate, .seed = seed + 1, .sample_keys = keys}, y_other);
  for (std::int64_t n = 0; n < 3; ++n)
    CHECK(fraction_differing(sample_mask(y_other, n), sample_mask(y, n)) > 0.3);
  // Samples of one batch do not share a mask either.
  CHECK(fraction_differing(sample_mask(y, 0), sample_mask(y, 1)) > 0.3);
}

TEST_CASE("cpu backend: dropout backward applies the forward mask; rate 0 is the identity",
          "[core]") {
  CpuBackend backend;
  const Tensor x = away_from_zero({2, 4, 5, 6}, 820, 0.1f);
  const Tensor dy = random_tensor(x.dims(), 821);
  const std::vector<std::uint64_t> keys{100, 200};
  const float rate = 0.25f;
  const Dropout args{.x = x, .rate = rate, .seed = 9, .sample_keys = keys};
  Tensor y = Tensor::host(x.dims()), dx = Tensor::host(x.dims());
  backend.dropout_forward(args, y);
  backend.dropout_backward(args, dy, dx);
  for (std::size_t i = 0; i < x.f32().size(); ++i) {
    const float expected = y.f32()[i] != 0.0f ? dy.f32()[i] / (1.0f - rate) : 0.0f;
    CHECK(dx.f32()[i] == Approx(expected).epsilon(1e-6));
  }
  // The gradient of sum(y .* dy) with respect to x is dx.
  Tensor x_varied = x.clone();
  check_gradient("dx", x_varied, dx, [&] {
    backend.dropout_forward({.x = x_varied, .rate = rate, .seed = 9, .sample_keys = keys}, y);
    return weighted_sum(y, dy);
  });
  // In place, through a decorator, the same.
  CountingBackend decorated(backend);
  Tensor in_place = dy.clone();
  decorated.dropout_backward(args, in_place, in_place);
  check_close(in_place, dx, 0.0);

  const Dropout identity{.x = x, .rate = 0.0f, .seed = 9, .sample_keys = keys};
  backend.dropout_forward(identity, y);
  check_close(y, x, 0.0);
  backend.dropout_backward(identity, dy, dx);
  check_close(dx, dy, 0.0);
}

TEST_CASE("cpu backend: dropout operands are checked", "[core]") {
  CpuBackend backend;
  const Tensor x = random_tensor({2, 3, 4, 4}, 830);
  Tensor y = Tensor::host(x.dims());
  const std::vector<std::uint64_t> keys{1, 2}, one_key{1};
  for (const float rate : {1.0f, -0.1f, 1.5f, NAN}) {
    REQUIRE_THROWS_WITH(
        backend.dropout_forward({.x = x, .rate = rate, .seed = 0, .sample_keys = keys}, y),
        Catch::Contains("dropout_forward") && Catch::Contains("outside [0, 1)"));
  }
  REQUIRE_THROWS_WITH(
      backend.dropout_forward({.x = x, .rate = 0.5f, .seed = 0, .sample_keys = one_key}, y),
      Catch::Contains("1 sample keys for the 2 samples"));
  Tensor small = Tensor::host({2, 3, 4, 3});
  REQUIRE_THROWS_WITH(
      backend.dropout_forward({.x = x, .rate = 0.5f, .seed = 0, .sample_keys = keys}, small),
      Catch::Contains(small.describe()));
  Tensor nchw_y = Tensor::host(x.dims(), DType::f32, Layout::nchw);
  REQUIRE_THROWS_AS(
      backend.dropout_forward({.x = x, .rate = 0.5f, .seed = 0, .sample_keys = keys}, nchw_y),
      hardy::InvalidArgument);
  REQUIRE_THROWS_WITH(backend.dropout_backward(
                          {.x = x, .rate = 0.5f, .seed = 0, .sample_keys = keys}, small, small),
                      Catch::Contains("dropout_backward") && Catch::Contains(small.describe()));
  const Tensor flat = Tensor::host({6}, DType::f32, Layout::flat);
  Tensor flat_y = Tensor::host({6}, DType::f32, Layout::flat);
  REQUIRE_THROWS_WITH(
      backend.dropout_forward({.x = flat, .rate = 0.5f, .seed = 0, .sample_keys = keys}, flat_y),
      Catch::Contains("a 2-D, 4-D or 5-D tensor"));
}
