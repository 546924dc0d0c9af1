// The CPU backend's operations for volumetric regression networks (CosmoFlow): 5-D layouts and
// copies, 3-D convolution and max pooling, dense layers, flatten, leaky relu, scaled tanh, the
// MSE loss and dropout beyond 4-D, each against naive float64 reference loops (forward) and
// central finite differences of L = sum(y .* r) (backward). Shapes are small and awkward: odd
// sizes, strides, padding, dilation, channel counts the AVX-512 kernels block.
#include <omp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../../core/src/compute/cpu/cpu_backend.hpp"
#include "../../core/src/compute/dropout_mask.hpp"
#include "backend_test_helpers.hpp"
#include "hardy/core/compute/forwarding_backend.hpp"
#include "hardy/core/support/error.hpp"
#include "reference_ops.hpp"

using namespace hardy::core;
namespace reference = hardy::test_reference;
using namespace hardy::test_backend;

namespace {

Tensor flat_tensor(std::vector<std::int64_t> dims, unsigned seed, float low = -1.0f,
                   float high = 1.0f) {
  return random_tensor(std::move(dims), seed, low, high, Layout::flat);
}

// The same values in the other 5-D layout (through the backend's copy).
Tensor in_layout(Backend& backend, const Tensor& t, Layout layout) {
  Tensor converted = Tensor::host(t.dims(), DType::f32, layout);
  backend.copy(t, converted);
  return converted;
}

struct Conv3dCase {
  std::int64_t batch, in_channels, out_channels, depth, height, width, kernel;
  ConvGeometry geometry;
  bool bias;
};

const std::vector<Conv3dCase> conv3d_cases{
    // CosmoFlow's 'same' 3x3x3 convolution, on a non-cubic volume.
    {2, 3, 4, 5, 6, 7, 3, {.stride = 1, .padding = 1, .dilation = 1}, true},
    {1, 4, 5, 7, 6, 5, 3, {.stride = 2, .padding = 1, .dilation = 1}, false},
    {1, 2, 3, 6, 7, 8, 3, {.stride = 1, .padding = 2, .dilation = 2}, true},
    // A strided 1x1x1 convolution on few channels (oneDNN's jit_1x1 is kept away from it).
    {2, 5, 3, 5, 5, 6, 1, {.stride = 2, .padding = 0, .dilation = 1}, true},
    {1, 3, 2, 4, 3, 5, 2, {.stride = 3, .padding = 0, .dilation = 1}, false},
    // Channel counts the AVX-512 kernels block, so the weights go through a layout reorder.
    {1, 16, 32, 4, 5, 6, 3, {.stride = 1, .padding = 1, .dilation = 1}, true},
};

std::string describe_case(const Conv3dCase& c) {
  return "conv3d x=[" + std::to_string(c.batch) + "," + std::to_string(c.in_channels) + "," +
         std::to_string(c.depth) + "," + std::to_string(c.height) + "," + std::to_string(c.width) +
         "] O=" + std::to_string(c.out_channels) + " k=" + std::to_string(c.kernel) +
         " stride=" + std::to_string(c.geometry.stride) +
         " pad=" + std::to_string(c.geometry.padding) +
         " dil=" + std::to_string(c.geometry.dilation) + (c.bias ? " bias" : "");
}

ConvTensors make_conv3d(const Conv3dCase& c, unsigned seed) {
  const auto output = [&](std::int64_t size) {
    return conv_output_size(static_cast<int>(size), static_cast<int>(c.kernel), c.geometry);
  };
  return {
      random_tensor({c.batch, c.in_channels, c.depth, c.height, c.width}, seed),
      random_tensor({c.out_channels, c.in_channels, c.kernel, c.kernel, c.kernel}, seed + 1, -0.5f,
                    0.5f, Layout::nchw),
      channel_vector(c.out_channels, seed + 2, -0.5f, 0.5f),
      Tensor::host({c.batch, c.out_channels, output(c.depth), output(c.height), output(c.width)})};
}

// Distinct values 0.01 apart (shuffled), so that a finite-difference step of 1e-3 never changes
// which element of a pooling window is the largest.
Tensor distinct_values(std::vector<std::int64_t> dims, unsigned seed) {
  Tensor t = Tensor::host(std::move(dims));
  std::vector<float> values(t.f32().size());
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = 0.01f * (static_cast<float>(i) - static_cast<float>(values.size()) / 2);
  std::shuffle(values.begin(), values.end(), std::mt19937(seed));
  std::copy(values.begin(), values.end(), t.f32().begin());
  return t;
}

}  // namespace

TEST_CASE("cpu backend: 5-D tensors convert between ndhwc and ncdhw", "[core]") {
  CpuBackend backend;
  const Tensor x = random_tensor({2, 3, 4, 5, 6}, 1);
  CHECK(x.describe() == "f32 ndhwc [2,3,4,5,6]");
  const Tensor channels_second = in_layout(backend, x, Layout::nchw);
  CHECK(channels_second.describe() == "f32 ncdhw [2,3,4,5,6]");
  std::size_t mismatches = 0;
  for (std::int64_t n = 0; n < 2; ++n)
    for (std::int64_t c = 0; c < 3; ++c)
      for (std::int64_t d = 0; d < 4; ++d)
        for (std::int64_t h = 0; h < 5; ++h)
          for (std::int64_t w = 0; w < 6; ++w)
            mismatches +=
                reference::at5(channels_second, n, c, d, h, w) != reference::at5(x, n, c, d, h, w);
  CHECK(mismatches == 0);
  // Not the same bytes: the conversion really permuted them.
  CHECK(!std::equal(x.f32().begin(), x.f32().end(), channels_second.f32().begin()));
  check_close(in_layout(backend, channels_second, Layout::nhwc), x, 0.0);
  // A flat 5-D tensor is row-major over (N, C, D, H, W), i.e. ncdhw.
  const Tensor flat = in_layout(backend, x, Layout::flat);
  CHECK(std::equal(flat.f32().begin(), flat.f32().end(), channels_second.f32().begin()));
}

TEST_CASE("cpu backend: conv3d forward matches the reference", "[core]") {
  CpuBackend backend;
  unsigned seed = 1;
  for (const Conv3dCase& c : conv3d_cases) {
    INFO(describe_case(c));
    ConvTensors t = make_conv3d(c, seed += 10);
    const Tensor* bias = c.bias ? &t.bias : nullptr;
    backend.conv3d_forward(t.x, t.weight, bias, c.geometry, t.y);
    check_close(t.y, reference::conv3d(t.x, t.weight, bias, c.geometry));
  }
}

TEST_CASE("cpu backend: conv3d gradients match finite differences", "[core]") {
  CpuBackend backend;
  unsigned seed = 100;
  for (const Conv3dCase& c : conv3d_cases) {
    INFO(describe_case(c));
    ConvTensors t = make_conv3d(c, seed += 10);
    check_conv_gradients(
        t, c.bias, seed + 5,
        bind_conv_passes(backend, c.geometry, &CpuBackend::conv3d_forward,
                         &CpuBackend::conv3d_backward_data, &CpuBackend::conv3d_backward_weights));
  }
}

TEST_CASE("cpu backend: conv3d repeats a shape without new primitives", "[core]") {
  CpuBackend backend;
  ConvTensors t = make_conv3d(conv3d_cases.front(), 7);
  backend.conv3d_forward(t.x, t.weight, &t.bias, conv3d_cases.front().geometry, t.y);
  const std::size_t cached = backend.cached_primitive_count();
  backend.conv3d_forward(t.x, t.weight, &t.bias, conv3d_cases.front().geometry, t.y);
  CHECK(backend.cached_primitive_count() == cached);
}

TEST_CASE("cpu backend: 3-D max pooling matches the reference and finite differences", "[core]") {
  CpuBackend backend;
  struct Case {
    std::vector<std::int64_t> dims;
    PoolGeometry geometry;
  };
  // CosmoFlow's 2x2x2 / 2 on odd sizes (the last row is dropped), overlapping windows with
  // padding, and a dense 3x3x3 / 1 window; more channels than one backward block.
  const std::vector<Case> cases{{{2, 3, 5, 6, 7}, {.kernel = 2, .stride = 2, .padding = 0}},
                                {{1, 4, 6, 5, 7}, {.kernel = 3, .stride = 2, .padding = 1}},
                                {{1, 2, 4, 4, 5}, {.kernel = 3, .stride = 1, .padding = 1}},
                                {{2, 20, 4, 4, 2}, {.kernel = 2, .stride = 2, .padding = 0}}};
  unsigned seed = 200;
  for (const Case& c : cases) {
    const PoolGeometry& g = c.geometry;
    INFO("pool x=[" << c.dims[0] << "," << c.dims[1] << "," << c.dims[2] << "," << c.dims[3] << ","
                    << c.dims[4] << "] k" << g.kernel << " s" << g.stride << " p" << g.padding);
    Tensor x = distinct_values(c.dims, ++seed);
    const Tensor expected = reference::max_pool3d(x, g);
    Tensor y = Tensor::host(expected.dims());
    backend.max_pool3d_forward(x, g, y);
    check_close(y, expected, 0.0);

    const Tensor r = random_tensor(y.dims(), ++seed);
    Tensor dx = Tensor::host(x.dims());
    backend.fill(dx, 7.0f);  // backward overwrites
    backend.max_pool3d_backward(x, r, g, dx);
    check_gradient(
        "dx", x, dx,
        [&] {
          backend.max_pool3d_forward(x, g, y);
          return weighted_sum(y, r);
        },
        1e-3f);
  }
}

TEST_CASE("cpu backend: 3-D max pooling routes a tie to the window's first maximum", "[core]") {
  CpuBackend backend;
  // One 2x2x2 window of two channels: channel 0 ties at (0,1,0) and (1,0,0); channel 1 has its
  // maximum at (1,1,1) only.
  Tensor x = Tensor::host({1, 2, 2, 2, 2});
  reference::at5(x, 0, 0, 0, 1, 0) = 5.0f;
  reference::at5(x, 0, 0, 1, 0, 0) = 5.0f;
  reference::at5(x, 0, 1, 1, 1, 1) = 3.0f;
  Tensor y = Tensor::host({1, 2, 1, 1, 1});
  backend.max_pool3d_forward(x, {}, y);
  CHECK(y.f32()[0] == 5.0f);
  CHECK(y.f32()[1] == 3.0f);
  const Tensor dy = values_tensor({1, 2, 1, 1, 1}, {1.5f, -2.0f});
  Tensor dx = Tensor::host(x.dims());
  backend.max_pool3d_backward(x, dy, {}, dx);
  for (std::int64_t d = 0; d < 2; ++d)
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t w = 0; w < 2; ++w) {
        CHECK(reference::at5(dx, 0, 0, d, h, w) == (d == 0 && h == 1 && w == 0 ? 1.5f : 0.0f));
        CHECK(reference::at5(dx, 0, 1, d, h, w) == (d == 1 && h == 1 && w == 1 ? -2.0f : 0.0f));
      }
}

TEST_CASE("cpu backend: dense layers match the reference and finite differences", "[core]") {
  CpuBackend backend;
  struct Case {
    std::int64_t batch, inputs, outputs;
    bool bias;
  };
  const std::vector<Case> cases{{3, 37, 5, true}, {1, 16, 4, false}, {5, 130, 17, true}};
  unsigned seed = 300;
  for (const Case& c : cases) {
    INFO("dense N=" << c.batch << " K=" << c.inputs << " O=" << c.outputs);
    Tensor x = flat_tensor({c.batch, c.inputs}, ++seed);
    Tensor weight = flat_tensor({c.outputs, c.inputs}, ++seed, -0.5f, 0.5f);
    Tensor bias = channel_vector(c.outputs, ++seed, -0.5f, 0.5f);
    const Tensor* b = c.bias ? &bias : nullptr;
    Tensor y = Tensor::host({c.batch, c.outputs}, DType::f32, Layout::flat);
    backend.dense_forward(x, weight, b, y);
    check_close(y, reference::dense(x, weight, b));

    const Tensor r = flat_tensor(y.dims(), ++seed);
    Tensor dx = Tensor::host(x.dims(), DType::f32, Layout::flat);
    Tensor dweight = Tensor::host(weight.dims(), DType::f32, Layout::flat);
    Tensor dbias = Tensor::host(bias.dims(), DType::f32, Layout::flat);
    backend.dense_backward_data(r, weight, dx);
    backend.dense_backward_weights(x, r, dweight, c.bias ? &dbias : nullptr);
    const auto objective = [&] {
      backend.dense_forward(x, weight, b, y);
      return weighted_sum(y, r);
    };
    check_gradient("dx", x, dx, objective);
    check_gradient("dweight", weight, dweight, objective);
    if (c.bias) check_gradient("dbias", bias, dbias, objective);
  }
}

TEST_CASE("cpu backend: flatten is PyTorch's (C, D, H, W) order from either layout", "[core]") {
  CpuBackend backend;
  ForwardingBackend decorated(backend);
  const Tensor x = random_tensor({2, 3, 4, 3, 5}, 400);
  const Tensor expected = reference::flatten(x);
  for (const Layout layout : {Layout::nhwc, Layout::nchw}) {
    INFO("from " << to_string(layout));
    const Tensor volume = in_layout(backend, x, layout);
    Tensor flat = Tensor::host(expected.dims(), DType::f32, Layout::flat);
    decorated.flatten_forward(volume, flat);
    check_close(flat, expected, 0.0);
    // Backward is the inverse, into either layout.
    Tensor back = Tensor::host(x.dims(), DType::f32, layout);
    backend.flatten_backward(flat, back);
    check_close(back, volume, 0.0);
  }
  // A 4-D activation flattens too (N, C * H * W).
  const Tensor image = random_tensor({2, 3, 4, 5}, 401);
  Tensor flat_image = Tensor::host({2, 60}, DType::f32, Layout::flat);
  backend.flatten_forward(image, flat_image);
  CHECK(flat_image.f32()[1 * 60 + 2 * 20 + 3 * 5 + 4] == reference::at(image, 1, 2, 3, 4));
  Tensor wrong = Tensor::host({2, 61}, DType::f32, Layout::flat);
  REQUIRE_THROWS_WITH(backend.flatten_forward(image, wrong),
                      Catch::Contains("flatten_forward") && Catch::Contains("[2,60]"));
}

TEST_CASE("cpu backend: leaky relu on 2-D, 4-D and 5-D tensors", "[core]") {
  CpuBackend backend;
  const float slope = 0.3f;
  unsigned seed = 500;
  for (const auto& dims :
       std::vector<std::vector<std::int64_t>>{{3, 7}, {2, 3, 4, 5}, {2, 3, 4, 3, 5}}) {
    INFO("rank " << dims.size());
    Tensor x = away_from_zero(dims, ++seed, 0.05f);
    Tensor y = Tensor::host(dims, DType::f32, x.layout());
    backend.leaky_relu_forward(x, slope, y);
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < x.f32().size(); ++i) {
      const float v = x.f32()[i];
      mismatches += std::fabs(y.f32()[i] - (v > 0 ? v : slope * v)) > 1e-7f;
    }
    CHECK(mismatches == 0);
    const Tensor r = random_tensor(dims, ++seed);
    Tensor dx = Tensor::host(dims, DType::f32, x.layout());
    // From y, and from x (same signs for slope >= 0): the same gradient.
    backend.leaky_relu_backward(y, r, slope, dx);
    Tensor dx_from_x = Tensor::host(dims, DType::f32, x.layout());
    backend.leaky_relu_backward(x, r, slope, dx_from_x);
    check_close(dx_from_x, dx, 0.0);
    check_gradient(
        "dx", x, dx,
        [&] {
          backend.leaky_relu_forward(x, slope, y);
          return weighted_sum(y, r);
        },
        1e-2f);
  }
  Tensor x = random_tensor({2, 3}, 1, -1.0f, 1.0f, Layout::flat), y = x.clone();
  REQUIRE_THROWS_WITH(backend.leaky_relu_forward(x, -0.1f, y),
                      Catch::Contains("leaky_relu_forward") && Catch::Contains("slope"));
}

TEST_CASE("cpu backend: scaled tanh forward and gradient", "[core]") {
  CpuBackend backend;
  const float scale = 1.2f;
  Tensor x = flat_tensor({5, 4}, 600, -2.5f, 2.5f);
  Tensor y = Tensor::host(x.dims(), DType::f32, Layout::flat);
  backend.scaled_tanh_forward(x, scale, y);
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < x.f32().size(); ++i)
    mismatches += std::fabs(y.f32()[i] - scale * std::tanh(static_cast<double>(x.f32()[i]))) > 1e-6;
  CHECK(mismatches == 0);
  const Tensor r = flat_tensor(x.dims(), 601);
  Tensor dx = Tensor::host(x.dims(), DType::f32, Layout::flat);
  backend.scaled_tanh_backward(y, r, scale, dx);
  check_gradient(
      "dx", x, dx,
      [&] {
        backend.scaled_tanh_forward(x, scale, y);
        return weighted_sum(y, r);
      },
      1e-3f);
  REQUIRE_THROWS_WITH(backend.scaled_tanh_forward(x, 0.0f, y),
                      Catch::Contains("scaled_tanh_forward") && Catch::Contains("nonzero"));
}

TEST_CASE("cpu backend: mse loss on a hand-checked case and its gradient", "[core]") {
  CpuBackend backend;
  // Errors (0.5, -1, 2, 0) and (0.25, 0, 0, -0.5): sum of squares 5.25 + 0.3125 = 5.5625.
  const Tensor prediction =
      values_tensor({2, 4}, {1.5f, 0.0f, 2.0f, -1.0f, 0.25f, 0.5f, 0.5f, -0.5f});
  const Tensor target = values_tensor({2, 4}, {1.0f, 1.0f, 0.0f, -1.0f, 0.0f, 0.5f, 0.5f, 0.0f});
  const float grad_scale = 1.0f / 8.0f;
  Tensor dprediction = Tensor::host({2, 4});
  const double loss = backend.mse_loss(
      {.prediction = prediction, .target = target, .grad_scale = grad_scale}, dprediction);
  CHECK(loss == Approx(5.5625).epsilon(1e-12));
  const std::vector<float> errors{0.5f, -1.0f, 2.0f, 0.0f, 0.25f, 0.0f, 0.0f, -0.5f};
  for (std::size_t i = 0; i < errors.size(); ++i)
    CHECK(dprediction.f32()[i] == Approx(2.0 * grad_scale * errors[i]).margin(1e-7));

  Tensor p = flat_tensor({3, 4}, 700);
  const Tensor t = flat_tensor({3, 4}, 701);
  Tensor grad = Tensor::host(p.dims(), DType::f32, Layout::flat);
  Tensor scratch = grad.clone();
  backend.mse_loss({.prediction = p, .target = t, .grad_scale = 0.5f}, grad);
  check_gradient("dprediction", p, grad, [&] {
    return 0.5 * backend.mse_loss({.prediction = p, .target = t, .grad_scale = 0.5f}, scratch);
  });
  const Tensor wrong = Tensor::host({3, 5});
  REQUIRE_THROWS_WITH(
      backend.mse_loss({.prediction = p, .target = wrong, .grad_scale = 1.0f}, grad),
      Catch::Contains("mse_loss") && Catch::Contains(wrong.describe()));
}

TEST_CASE("cpu backend: dropout masks follow the logical index for 2-D and 5-D tensors", "[core]") {
  CpuBackend backend;
  const std::vector<std::uint64_t> keys{11, 12};
  const float rate = 0.4f;
  const std::uint64_t seed = 99;
  // Values at least 0.25 from zero, so that only the mask makes a zero.
  Tensor x = away_from_zero({2, 3, 4, 3, 5}, 800, 0.25f);
  Tensor y = Tensor::host(x.dims());
  backend.dropout_forward({.x = x, .rate = rate, .seed = seed, .sample_keys = keys}, y);
  // Each element kept exactly where the mask says, at its logical (C, D, H, W) index.
  const std::uint32_t threshold = dropout::keep_threshold(rate);
  std::size_t mismatches = 0, kept = 0;
  for (std::int64_t n = 0; n < 2; ++n) {
    const std::uint64_t state = dropout::sample_state(seed, keys[n]);
    std::uint64_t index = 0;
    for (std::int64_t c = 0; c < 3; ++c)
      for (std::int64_t d = 0; d < 4; ++d)
        for (std::int64_t h = 0; h < 3; ++h)
          for (std::int64_t w = 0; w < 5; ++w, ++index) {
            const bool keep = dropout::keep(state, index, threshold);
            const float value = reference::at5(y, n, c, d, h, w);
            const float expected = keep ? reference::at5(x, n, c, d, h, w) / (1.0f - rate) : 0.0f;
            mismatches += std::fabs(value - expected) > 1e-6f;
            kept += keep;
          }
  }
  CHECK(mismatches == 0);
  CHECK(kept > 0);
  CHECK(kept < 2 * 180);
  // The channels-second layout and the flattened (N, F) matrix get the same mask.
  const Tensor x_ncdhw = in_layout(backend, x, Layout::nchw);
  Tensor y_ncdhw = Tensor::host(x.dims(), DType::f32, Layout::nchw);
  backend.dropout_forward({.x = x_ncdhw, .rate = rate, .seed = seed, .sample_keys = keys}, y_ncdhw);
  check_close(in_layout(backend, y_ncdhw, Layout::nhwc), y, 0.0);
  Tensor x_flat = Tensor::host({2, 180}, DType::f32, Layout::flat);
  backend.flatten_forward(x, x_flat);
  Tensor y_flat = Tensor::host({2, 180}, DType::f32, Layout::flat);
  backend.dropout_forward({.x = x_flat, .rate = rate, .seed = seed, .sample_keys = keys}, y_flat);
  Tensor y_flattened = Tensor::host({2, 180}, DType::f32, Layout::flat);
  backend.flatten_forward(y, y_flattened);
  check_close(y_flat, y_flattened, 0.0);
  // Backward applies the same mask.
  Tensor dx = Tensor::host({2, 180}, DType::f32, Layout::flat);
  backend.dropout_backward({.x = x_flat, .rate = rate, .seed = seed, .sample_keys = keys}, x_flat,
                           dx);
  check_close(dx, y_flat, 0.0);
  Tensor three_d = Tensor::host({2, 3, 4});
  Tensor three_d_y = Tensor::host({2, 3, 4});
  REQUIRE_THROWS_WITH(
      backend.dropout_forward({.x = three_d, .rate = rate, .seed = seed, .sample_keys = keys},
                              three_d_y),
      Catch::Contains("2-D, 4-D or 5-D"));
}

TEST_CASE("cpu backend: 2-D, 3-D and dense operations refuse each other's tensors", "[core]") {
  CpuBackend backend;
  const Tensor volume = random_tensor({1, 2, 4, 4, 4}, 900);
  const Tensor image = random_tensor({1, 2, 4, 4}, 901);
  const Tensor weight2d = random_tensor({3, 2, 3, 3}, 902, -1.0f, 1.0f, Layout::nchw);
  const Tensor weight3d = random_tensor({3, 2, 3, 3, 3}, 903, -1.0f, 1.0f, Layout::nchw);
  Tensor volume_out = Tensor::host({1, 3, 4, 4, 4});
  Tensor image_out = Tensor::host({1, 3, 4, 4});
  const ConvGeometry same{.stride = 1, .padding = 1};
  REQUIRE_THROWS_WITH(backend.conv2d_forward(volume, weight2d, nullptr, same, image_out),
                      Catch::Contains("conv2d_forward") && Catch::Contains("a 4-D nhwc tensor") &&
                          Catch::Contains("ndhwc [1,2,4,4,4]"));
  REQUIRE_THROWS_WITH(backend.conv3d_forward(image, weight3d, nullptr, same, volume_out),
                      Catch::Contains("conv3d_forward") && Catch::Contains("a 5-D ndhwc tensor"));
  REQUIRE_THROWS_WITH(backend.conv3d_forward(volume, weight2d, nullptr, same, volume_out),
                      Catch::Contains("conv3d_forward") && Catch::Contains("(O, I, KD, KH, KW)"));
  REQUIRE_THROWS_WITH(
      backend.conv3d_forward(volume, weight3d, nullptr, {.stride = 1, .padding = 0}, volume_out),
      Catch::Contains("conv3d_forward") && Catch::Contains("expected [1,3,2,2,2]"));
  REQUIRE_THROWS_WITH(backend.conv3d_forward(volume, weight3d, nullptr,
                                             {.stride = 1, .padding = 1, .groups = 2}, volume_out),
                      Catch::Contains("groups 2 is not supported"));
  const Tensor channels_second = in_layout(backend, volume, Layout::nchw);
  REQUIRE_THROWS_WITH(backend.conv3d_forward(channels_second, weight3d, nullptr, same, volume_out),
                      Catch::Contains("ncdhw") && Catch::Contains("channels last"));
  Tensor pooled = Tensor::host({1, 2, 2, 2, 2});
  REQUIRE_THROWS_WITH(
      backend.global_avg_pool_forward(volume, pooled),
      Catch::Contains("global_avg_pool_forward") && Catch::Contains("a 4-D nhwc tensor"));
  REQUIRE_THROWS_WITH(backend.max_pool3d_forward(volume, {.kernel = 2, .stride = 1}, pooled),
                      Catch::Contains("max_pool3d_forward") && Catch::Contains("[1,2,3,3,3]"));
  REQUIRE_THROWS_WITH(
      backend.max_pool3d_forward(volume, {.kernel = 2, .stride = 2, .padding = 2}, pooled),
      Catch::Contains("padding at most kernel / 2"));
  Tensor pooled_image = Tensor::host({1, 2, 2, 2});
  REQUIRE_THROWS_WITH(backend.max_pool3d_forward(image, {}, pooled_image),
                      Catch::Contains("a 5-D ndhwc tensor"));
  const Tensor dense_weight = flat_tensor({3, 128}, 904);
  Tensor dense_out = Tensor::host({1, 3}, DType::f32, Layout::flat);
  REQUIRE_THROWS_WITH(backend.dense_forward(volume, dense_weight, nullptr, dense_out),
                      Catch::Contains("dense_forward") && Catch::Contains("a 2-D (N, K) tensor"));
  const Tensor matrix = flat_tensor({1, 100}, 905);
  REQUIRE_THROWS_WITH(backend.dense_forward(matrix, dense_weight, nullptr, dense_out),
                      Catch::Contains("dense_forward") && Catch::Contains("expected [O,100]"));
  // relu is element-wise: it takes any rank.
  Tensor relu_out = Tensor::host(volume.dims());
  backend.relu_forward(volume, relu_out);
}

// CosmoFlow's first convolution at a quarter of its size per side (4 x 32^3 -> 32 channels,
// batch 4): forward, backward data and backward weights. Hidden: run it by name for a timing.
TEST_CASE("cpu backend: conv3d timing at 4x32^3 -> 32, batch 4", "[.][benchmark]") {
  CpuBackend backend;
  const ConvGeometry same{.stride = 1, .padding = 1};
  const Tensor x = random_tensor({4, 4, 32, 32, 32}, 1);
  const Tensor weight = random_tensor({32, 4, 3, 3, 3}, 2, -0.2f, 0.2f, Layout::nchw);
  const Tensor bias = channel_vector(32, 3, -0.1f, 0.1f);
  Tensor y = Tensor::host({4, 32, 32, 32, 32});
  Tensor dx = Tensor::host(x.dims());
  Tensor dweight = Tensor::host(weight.dims(), DType::f32, Layout::nchw);
  Tensor dbias = Tensor::host({32}, DType::f32, Layout::flat);
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  double forward = 1e9, data = 1e9, weights = 1e9;
  for (int round = 0; round < 4; ++round) {  // the first builds the primitives
    auto start = Clock::now();
    backend.conv3d_forward(x, weight, &bias, same, y);
    forward = std::min(forward, seconds(Clock::now() - start));
    start = Clock::now();
    backend.conv3d_backward_data(y, weight, same, dx);
    data = std::min(data, seconds(Clock::now() - start));
    start = Clock::now();
    backend.conv3d_backward_weights(x, y, same, dweight, &dbias);
    weights = std::min(weights, seconds(Clock::now() - start));
  }
  WARN("conv3d 4x32^3 -> 32, batch 4, " << omp_get_max_threads() << " threads: forward "
                                        << forward * 1e3 << " ms, backward data " << data * 1e3
                                        << " ms, backward weights " << weights * 1e3 << " ms");
}
