// Dynamic loss scaling: the scaler's decisions (pure logic) and its unscale/overflow check on
// the CPU backend. tests/gpu/test_loss_scaling_device.cpp runs the same on a GPU in fp16.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/nn/loss_scaler.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy;
using namespace hardy::core;

namespace {

LossScalerConfig small_config() {
  return {.initial_scale = 1024.0f, .growth_interval = 3, .min_scale = 1.0f, .max_scale = 4096.0f};
}

Parameter host_parameter(std::vector<float> grad) {
  Parameter p;
  p.name = "gradient_under_test";
  p.value = Tensor::host({static_cast<std::int64_t>(grad.size())}, DType::f32, Layout::flat);
  p.grad = Tensor::host({static_cast<std::int64_t>(grad.size())}, DType::f32, Layout::flat);
  std::copy(grad.begin(), grad.end(), p.grad.f32().begin());
  return p;
}

}  // namespace

TEST_CASE("loss scaler: a step with an overflow is skipped and the scale lowered", "[core]") {
  LossScaler scaler(small_config());
  CHECK(scaler.scale() == 1024.0f);
  CHECK_FALSE(scaler.update(/*found_non_finite=*/true));
  CHECK(scaler.scale() == 512.0f);
  CHECK(scaler.state().skipped_steps == 1);
  CHECK_FALSE(scaler.update(true));
  CHECK(scaler.scale() == 256.0f);
  CHECK(scaler.state().skipped_steps == 2);
}

TEST_CASE("loss scaler: after growth_interval good steps in a row the scale grows", "[core]") {
  LossScaler scaler(small_config());
  CHECK(scaler.update(false));
  CHECK(scaler.update(false));
  CHECK(scaler.scale() == 1024.0f);
  CHECK(scaler.update(false));  // the third good step in a row
  CHECK(scaler.scale() == 2048.0f);
  CHECK(scaler.state().good_steps == 0);
  // An overflow restarts the count: two more good steps are not enough.
  CHECK(scaler.update(false));
  CHECK_FALSE(scaler.update(true));
  CHECK(scaler.scale() == 1024.0f);
  CHECK(scaler.update(false));
  CHECK(scaler.update(false));
  CHECK(scaler.scale() == 1024.0f);
  CHECK(scaler.update(false));
  CHECK(scaler.scale() == 2048.0f);
}

TEST_CASE("loss scaler: the scale stays within [min_scale, max_scale]", "[core]") {
  LossScaler scaler(small_config());
  for (int i = 0; i < 30; ++i) scaler.update(true);
  CHECK(scaler.scale() == 1.0f);
  for (int i = 0; i < 3 * 30; ++i) scaler.update(false);
  CHECK(scaler.scale() == 4096.0f);
}

TEST_CASE("loss scaler: bf16 and fp32 use a static scale of 1 that still skips overflows",
          "[core]") {
  for (DType dtype : {DType::bf16, DType::f32}) {
    LossScaler scaler(LossScalerConfig::for_activations(dtype));
    CHECK(scaler.scale() == 1.0f);
    CHECK_FALSE(scaler.update(true));
    CHECK(scaler.scale() == 1.0f);
    for (int i = 0; i < 5000; ++i) CHECK(scaler.update(false));
    CHECK(scaler.scale() == 1.0f);
  }
  LossScaler fp16(LossScalerConfig::for_activations(DType::f16));
  CHECK(fp16.scale() == 65536.0f);
  CHECK(fp16.config().dynamic);
}

TEST_CASE("loss scaler: invalid configurations and states are rejected", "[core]") {
  auto with = [](auto change) {
    LossScalerConfig config;
    change(config);
    return config;
  };
  CHECK_THROWS_AS(LossScaler(with([](auto& c) { c.growth_factor = 1.0f; })), InvalidArgument);
  CHECK_THROWS_AS(LossScaler(with([](auto& c) { c.backoff_factor = 1.0f; })), InvalidArgument);
  CHECK_THROWS_AS(LossScaler(with([](auto& c) { c.growth_interval = 0; })), InvalidArgument);
  CHECK_THROWS_AS(LossScaler(with([](auto& c) { c.initial_scale = 0.0f; })), InvalidArgument);
  CHECK_THROWS_AS(LossScaler(with([](auto& c) { c.min_scale = 8.0f, c.max_scale = 4.0f; })),
                  InvalidArgument);
  LossScaler scaler;
  CHECK_THROWS_AS(scaler.restore({std::numeric_limits<float>::infinity(), 0, 0}), InvalidArgument);
  scaler.restore({128.0f, 7, 3});
  CHECK(scaler.scale() == 128.0f);
  CHECK(scaler.state().good_steps == 7);
  CHECK(scaler.state().skipped_steps == 3);
}

TEST_CASE("loss scaler: unscale divides gradients and detects Inf and NaN on the cpu backend",
          "[core]") {
  auto backend = make_backend("cpu");
  LossScaler scaler(small_config());
  std::vector<Parameter> params{host_parameter({1024.0f, -2048.0f}), host_parameter({512.0f})};
  CHECK_FALSE(scaler.unscale(*backend, pointers_to(params)));
  CHECK(params[0].grad.f32()[0] == 1.0f);
  CHECK(params[0].grad.f32()[1] == -2.0f);
  CHECK(params[1].grad.f32()[0] == 0.5f);

  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    std::vector<Parameter> overflowed{host_parameter({1.0f}), host_parameter({2.0f, bad})};
    const bool overflow = scaler.unscale(*backend, pointers_to(overflowed));
    CHECK(overflow);
    const float scale_before = scaler.scale();
    // The trainer skips the optimizer when update() says so.
    CHECK_FALSE(scaler.update(overflow));
    CHECK(scaler.scale() == scale_before / 2);
  }
}
