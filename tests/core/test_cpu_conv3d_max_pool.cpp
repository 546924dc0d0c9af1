// The CPU backend's fused 3-D convolution and max pooling (core/src/compute/cpu/
// conv3d_max_pool.cpp) against the same backend's two operations run one after the other: the
// pooled values, each window's choice of maximum, and the gradients of x, the weights and the
// bias, in f32 and bf16. The shapes cover the slab plans: whole samples several to a slab,
// depth slabs (with a shorter last one and a plane no window covers), a 'same' convolution
// (x's gradient computed slab by slab) and one that shrinks the volume (x's gradient from the
// whole convolution gradient); also the layer that picks between the two, and the refusals.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "../../core/src/compute/cpu/cpu_backend.hpp"
#include "backend_test_helpers.hpp"
#include "hardy/core/compute/forwarding_backend.hpp"
#include "hardy/core/nn/network.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy::core;
using namespace hardy::test_backend;

namespace {

struct FusedCase {
  std::string what;
  std::vector<std::int64_t> x;  // (N, C, D, H, W)
  std::int64_t out_channels, kernel;
  int padding;
  bool bias;
};

// x's dims in its f32 reference form, converted to the activation dtype for the backend.
Tensor activation(CpuBackend& backend, const Tensor& f32, DType dtype) {
  if (dtype == DType::f32) return f32.clone();
  Tensor converted = backend.empty(f32.dims(), dtype, Layout::nhwc);
  backend.copy(f32, converted);
  return converted;
}

Tensor widened(CpuBackend& backend, const Tensor& t) {
  if (t.dtype() == DType::f32) return t.clone();
  Tensor f32 = Tensor::host(t.dims(), DType::f32, t.layout());
  backend.copy(t, f32);
  return f32;
}

struct Results {
  Tensor y, x_grad, weight_grad, bias_grad;
  std::vector<std::uint8_t> window;
};

// Runs the case through the fused operation or the two separate ones, on the same inputs.
Results run(CpuBackend& backend, const FusedCase& c, DType dtype, bool fused, bool input_grad) {
  const ConvGeometry convolution{.stride = 1, .padding = c.padding};
  const PoolGeometry pooling{.kernel = 2, .stride = 2};
  const Tensor x = activation(backend, random_tensor(c.x, 11), dtype);
  const Tensor weight = random_tensor({c.out_channels, c.x[1], c.kernel, c.kernel, c.kernel}, 12,
                                      -0.3f, 0.3f, Layout::flat);
  const Tensor bias = random_tensor({c.out_channels}, 13, -0.5f, 0.5f, Layout::flat);
  std::vector<std::int64_t> convolved_dims{c.x[0], c.out_channels};
  for (std::size_t i = 2; i < 5; ++i)
    convolved_dims.push_back(c.x[i] + 2 * c.padding - c.kernel + 1);
  std::vector<std::int64_t> pooled_dims{c.x[0], c.out_channels};
  for (std::size_t i = 2; i < 5; ++i) pooled_dims.push_back(convolved_dims[i] / 2);
  const Tensor dy = activation(backend, random_tensor(pooled_dims, 14), dtype);

  Results r;
  Tensor y = backend.empty(pooled_dims, dtype, Layout::nhwc);
  Tensor x_grad = backend.empty(c.x, dtype, Layout::nhwc);
  Tensor weight_grad = Tensor::host(weight.dims(), DType::f32, Layout::flat);
  Tensor bias_grad = Tensor::host({c.out_channels}, DType::f32, Layout::flat);
  backend.fill(weight_grad, 7.0f);  // overwritten, not added to
  backend.fill(bias_grad, 7.0f);
  const Tensor* b = c.bias ? &bias : nullptr;
  Tensor* db = c.bias ? &bias_grad : nullptr;
  if (fused) {
    const Conv3dMaxPool op{
        .x = x, .weight = weight, .bias = b, .convolution = convolution, .pooling = pooling};
    Tensor window = backend.empty(pooled_dims, DType::u8, Layout::nhwc);
    backend.conv3d_max_pool_forward(op, y, window);
    backend.conv3d_max_pool_backward(op, dy, window, input_grad ? &x_grad : nullptr, weight_grad,
                                     db);
    const auto* bytes = window.data<std::uint8_t>();
    r.window.assign(bytes, bytes + window.numel());
  } else {
    Tensor convolved = backend.empty(convolved_dims, dtype, Layout::nhwc);
    backend.conv3d_forward(x, weight, b, convolution, convolved);
    backend.max_pool3d_forward(convolved, pooling, y);
    Tensor convolved_grad = backend.empty(convolved_dims, dtype, Layout::nhwc);
    backend.max_pool3d_backward(convolved, dy, pooling, convolved_grad);
    backend.conv3d_backward_weights(x, convolved_grad, convolution, weight_grad, db);
    if (input_grad) backend.conv3d_backward_data(convolved_grad, weight, convolution, x_grad);
  }
  r.y = widened(backend, y);
  r.x_grad = widened(backend, x_grad);
  r.weight_grad = weight_grad;
  r.bias_grad = bias_grad;
  return r;
}

const std::vector<FusedCase> fused_cases{
    // Odd sizes: a plane, row and column no window covers; whole samples, two to a slab.
    {"same, odd sizes", {2, 3, 5, 7, 9}, 4, 3, 1, true},
    // CosmoFlow's first block's shape in small: 4 channels in, 32 out, depth slabs of 6 MiB
    // (f32 planes of 64 x 64 x 32 x 4 bytes: 12 to a slab, so 20 planes are a slab of 12 and
    // one of 8; in bf16 the whole sample of 20 planes is 5 MiB, one slab per sample).
    {"same, depth slabs", {2, 4, 20, 64, 64}, 32, 3, 1, true},
    // bf16 depth slabs too: 26 planes of 512 KiB (64 channels at 64 x 64) make 13 MiB.
    {"same, 64 channels", {1, 8, 26, 64, 64}, 64, 3, 1, false},
    // A convolution that shrinks the volume (no padding): x's gradient from the whole gradient.
    {"valid, no padding", {2, 3, 8, 9, 10}, 5, 3, 0, true},
};

}  // namespace

TEST_CASE("cpu backend: fused conv3d + max pooling matches the two operations", "[core]") {
  CpuBackend f32_backend;
  CpuBackend bf16_backend({.activation_dtype = DType::bf16});
  for (const DType dtype : {DType::f32, DType::bf16}) {
    CpuBackend& backend = dtype == DType::f32 ? f32_backend : bf16_backend;
    for (const FusedCase& c : fused_cases)
      for (const bool input_grad : {false, true}) {
        INFO(c.what << ", " << to_string(dtype) << (input_grad ? ", with dx" : ", without dx"));
        const Results fused = run(backend, c, dtype, true, input_grad);
        const Results separate = run(backend, c, dtype, false, input_grad);
        // Each convolution output is the same sum either way (bf16 rounds it the same), so the
        // pooled values are equal; the gradients add the same terms in another order (over
        // 160k voxels for a weight: 2e-4 apart in f32).
        check_close(fused.y, separate.y, dtype == DType::f32 ? 1e-5 : 1e-2);
        const double tolerance = dtype == DType::f32 ? 1e-3 : 2e-2;
        check_close(fused.weight_grad, separate.weight_grad, tolerance);
        if (c.bias) check_close(fused.bias_grad, separate.bias_grad, tolerance);
        if (input_grad) check_close(fused.x_grad, separate.x_grad, tolerance);
        std::size_t unchosen = 0;
        for (std::uint8_t w : fused.window) unchosen += w >= 8;
        CHECK(unchosen == 0);
      }
  }
}

TEST_CASE("cpu backend: fused conv3d + max pooling routes a tie to the window's first maximum",
          "[core]") {
  CpuBackend backend;
  // A 1x1x1 convolution of weight 1: the pooling sees x itself. One window of one channel with
  // the maximum 5 at (0,1,0) and (1,0,0): the first in (d, h, w) order is voxel (0*2+1)*2+0 = 2.
  Tensor x = Tensor::host({1, 1, 2, 2, 2});
  x.f32()[2] = 5.0f;  // (d 0, h 1, w 0) in NDHWC with one channel
  x.f32()[4] = 5.0f;  // (d 1, h 0, w 0)
  Tensor weight = Tensor::host({1, 1, 1, 1, 1}, DType::f32, Layout::flat);
  weight.f32()[0] = 1.0f;
  const Conv3dMaxPool op{
      .x = x, .weight = weight, .bias = nullptr, .convolution = {}, .pooling = {}};
  Tensor y = Tensor::host({1, 1, 1, 1, 1});
  Tensor window = backend.empty({1, 1, 1, 1, 1}, DType::u8, Layout::nhwc);
  backend.conv3d_max_pool_forward(op, y, window);
  CHECK(y.f32()[0] == 5.0f);
  CHECK(window.data<std::uint8_t>()[0] == 2);
  Tensor dx = Tensor::host(x.dims());
  Tensor dweight = Tensor::host(weight.dims(), DType::f32, Layout::flat);
  backend.conv3d_max_pool_backward(op, values_tensor({1, 1, 1, 1, 1}, {1.5f}), window, &dx, dweight,
                                   nullptr);
  for (std::int64_t i = 0; i < 8; ++i) CHECK(dx.f32()[i] == (i == 2 ? 1.5f : 0.0f));
  CHECK(dweight.f32()[0] == 7.5f);  // dy times the chosen input
}

TEST_CASE("cpu backend: fused conv3d + max pooling refuses what it does not fuse", "[core]") {
  CpuBackend backend;
  CHECK(backend.fuses_conv3d_max_pool({.stride = 1, .padding = 1}, {.kernel = 2, .stride = 2}));
  CHECK_FALSE(backend.fuses_conv3d_max_pool({.stride = 2, .padding = 1}, {}));
  CHECK_FALSE(backend.fuses_conv3d_max_pool({.stride = 1, .padding = 2, .dilation = 2}, {}));
  CHECK_FALSE(backend.fuses_conv3d_max_pool({}, {.kernel = 3, .stride = 2, .padding = 1}));
  const Tensor x = random_tensor({1, 2, 4, 4, 4}, 1);
  const Tensor weight = random_tensor({3, 2, 3, 3, 3}, 2, -1.0f, 1.0f, Layout::flat);
  Tensor y = Tensor::host({1, 3, 1, 1, 1});
  Tensor window = backend.empty({1, 3, 1, 1, 1}, DType::u8, Layout::nhwc);
  const Conv3dMaxPool strided{.x = x,
                              .weight = weight,
                              .bias = nullptr,
                              .convolution = {.stride = 2, .padding = 1},
                              .pooling = {}};
  CHECK_THROWS_WITH(backend.conv3d_max_pool_forward(strided, y, window),
                    Catch::Contains("does not fuse") && Catch::Contains("conv3d_max_pool_forward"));
  // The pooled size is checked against the convolution's output: (4 + 2 - 3 + 1) / 2 = 2.
  const Conv3dMaxPool same{
      .x = x, .weight = weight, .bias = nullptr, .convolution = {.padding = 1}, .pooling = {}};
  CHECK_THROWS_WITH(backend.conv3d_max_pool_forward(same, y, window),
                    Catch::Contains("expected [1,3,2,2,2]"));
  Tensor y2 = Tensor::host({1, 3, 2, 2, 2});
  Tensor f32_window = Tensor::host({1, 3, 2, 2, 2});
  CHECK_THROWS_WITH(backend.conv3d_max_pool_forward(same, y2, f32_window),
                    Catch::Contains("window") && Catch::Contains("u8"));
}

TEST_CASE("network: conv3d_max_pool trains the same with and without the fused operation",
          "[core]") {
  // A backend that hides the fusion (as the CUDA backend has none) runs the two operations.
  class Unfused final : public ForwardingBackend {
   public:
    using ForwardingBackend::ForwardingBackend;
    bool fuses_conv3d_max_pool(const ConvGeometry&, const PoolGeometry&) const override {
      return false;
    }
  };
  CpuBackend cpu;
  Unfused unfused(cpu);
  std::vector<Tensor> gradients;
  for (Backend* backend : {static_cast<Backend*>(&cpu), static_cast<Backend*>(&unfused)}) {
    NetworkBuilder b(*backend, {}, WeightInit::glorot_uniform);
    Node x = b.input(2);
    x = b.conv3d_max_pool("conv0", x, 6, 3, {.padding = 1}, true, {});
    x = b.conv3d_max_pool("conv1", x, 4, 3, {.padding = 1}, true, {});
    Network network = b.finish(x);
    unsigned seed = 40;
    for (Parameter* p : network.parameters()) {
      const Tensor values = random_tensor(p->value.dims(), ++seed, -0.3f, 0.3f, p->value.layout());
      backend->copy(values, p->value);
    }
    const Tensor input = random_tensor({2, 2, 8, 8, 8}, 3);
    const Tensor& y = network.forward(input, {});
    REQUIRE(y.dims() == std::vector<std::int64_t>{2, 4, 2, 2, 2});
    network.backward(
        random_tensor(y.dims(), 4), [](std::size_t) {}, nullptr);
    for (Parameter* p : network.parameters()) gradients.push_back(p->grad.clone());
  }
  REQUIRE(gradients.size() == 8);
  for (std::size_t i = 0; i < 4; ++i) check_close(gradients[i], gradients[i + 4], 1e-4);
}
