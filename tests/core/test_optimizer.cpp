// Optimizers, learning-rate schedules and the element-wise kernels beneath them. Expected values
// are worked out by hand in the comments (and, where the arithmetic is long, written as
// expressions of literal numbers) so that a mistake in the shared formula code cannot hide.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/nn/lr_schedule.hpp"
#include "hardy/core/nn/optimizer.hpp"
#include "hardy/core/nn/parameter.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy::core;

namespace {

Tensor flat_tensor(const std::vector<float>& values) {
  Tensor tensor =
      Tensor::host({static_cast<std::int64_t>(values.size())}, DType::f32, Layout::flat);
  std::copy(values.begin(), values.end(), tensor.f32().begin());
  return tensor;
}

Parameter make_parameter(std::string name, const std::vector<float>& values,
                         const std::vector<float>& grads, bool weight_decay) {
  return Parameter{.name = std::move(name),
                   .value = flat_tensor(values),
                   .grad = flat_tensor(grads),
                   .weight_decay = weight_decay};
}

// Relative tolerance 1e-5 suits float arithmetic; the absolute margin covers expected zeros.
void require_values(const Tensor& tensor, const std::vector<double>& expected,
                    double margin = 1e-6) {
  const std::span<const float> actual = tensor.f32();
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("element " << i);
    CHECK(actual[i] == Approx(expected[i]).epsilon(1e-5).margin(margin));
  }
}

// The two parameters every optimizer test uses: a decayed weight and an undecayed bias.
std::vector<Parameter> weight_and_bias() {
  std::vector<Parameter> params;
  params.push_back(make_parameter("layer.weight", {1.0f, -2.0f}, {0.5f, 0.25f}, true));
  params.push_back(make_parameter("layer.bias", {3.0f}, {-1.0f}, false));
  return params;
}

OptimizerConfig config_of(OptimizerKind kind) {
  OptimizerConfig config;
  config.kind = kind;
  config.momentum = 0.9f;
  config.weight_decay = 0.1f;
  return config;
}

}  // namespace

// ---- parsing and configuration ----

TEST_CASE("optimizer: kind names parse and print", "[core]") {
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::lars, OptimizerKind::adam})
    CHECK(parse_optimizer_kind(to_string(kind)) == kind);
  CHECK(parse_optimizer_kind("lars") == OptimizerKind::lars);
  CHECK(parse_optimizer_kind("lamb") == OptimizerKind::lamb);
  try {
    parse_optimizer_kind("rmsprop");
    FAIL("expected InvalidArgument");
  } catch (const hardy::InvalidArgument& e) {
    CHECK_THAT(e.what(), Catch::Contains("rmsprop") && Catch::Contains("sgd, lars, adam, lamb"));
  }
}

TEST_CASE("optimizer: out-of-range configuration is rejected", "[core]") {
  auto backend = make_backend("cpu");
  const auto rejects = [&](auto change) {
    OptimizerConfig config;
    change(config);
    CHECK_THROWS_AS(make_optimizer(config, *backend), hardy::InvalidArgument);
  };
  rejects([](OptimizerConfig& c) { c.momentum = 1.0f; });
  rejects([](OptimizerConfig& c) { c.momentum = -0.1f; });
  rejects([](OptimizerConfig& c) { c.weight_decay = -1e-4f; });
  rejects([](OptimizerConfig& c) { c.beta2 = 1.0f; });
  rejects([](OptimizerConfig& c) { c.eps = 0.0f; });
  rejects([](OptimizerConfig& c) { c.lars_eta = std::numeric_limits<float>::quiet_NaN(); });
  rejects([](OptimizerConfig& c) {
    c.momentum = 0.0f;
    c.nesterov = true;
  });
  CHECK_NOTHROW(make_optimizer(OptimizerConfig{}, *backend));
}

// ---- SGD ----

TEST_CASE("optimizer: sgd with momentum and weight decay, two steps", "[core]") {
  auto backend = make_backend("cpu");
  auto optimizer = make_optimizer(config_of(OptimizerKind::sgd), *backend);
  std::vector<Parameter> params = weight_and_bias();

  // weight, step 1: g' = g + 0.1 * w = [0.5 + 0.1, 0.25 - 0.2] = [0.6, 0.05]
  //   v = [0.6, 0.05];  w = [1 - 0.1 * 0.6, -2 - 0.1 * 0.05] = [0.94, -2.005]
  // bias (no decay): v = -1;  w = 3 - 0.1 * -1 = 3.1
  optimizer->step(params, 0.1f);
  require_values(params[0].value, {0.94, -2.005});
  require_values(params[1].value, {3.1});
  CHECK(optimizer->steps_taken() == 1);

  // weight, step 2: g' = [0.5 + 0.094, 0.25 - 0.2005] = [0.594, 0.0495]
  //   v = 0.9 * [0.6, 0.05] + g' = [1.134, 0.0945];  w = [0.94 - 0.1134, -2.005 - 0.00945]
  // bias: v = 0.9 * -1 - 1 = -1.9;  w = 3.1 + 0.19
  optimizer->step(params, 0.1f);
  require_values(params[0].value, {0.8266, -2.01445});
  require_values(params[1].value, {3.29});
  CHECK(optimizer->steps_taken() == 2);
  // The caller's gradients are inputs only.
  require_values(params[0].grad, {0.5, 0.25});
}

TEST_CASE("optimizer: sgd with nesterov momentum, two steps", "[core]") {
  auto backend = make_backend("cpu");
  OptimizerConfig config = config_of(OptimizerKind::sgd);
  config.nesterov = true;
  auto optimizer = make_optimizer(config, *backend);
  std::vector<Parameter> params = weight_and_bias();

  // weight, step 1: g' = [0.6, 0.05], v = [0.6, 0.05]
  //   step = g' + 0.9 * v = [1.14, 0.095];  w = [1 - 0.114, -2 - 0.0095]
  // bias: g' = -1, v = -1, step = -1 - 0.9 = -1.9;  w = 3 + 0.19
  optimizer->step(params, 0.1f);
  require_values(params[0].value, {0.886, -2.0095});
  require_values(params[1].value, {3.19});

  // weight, step 2: g' = [0.5 + 0.0886, 0.25 - 0.20095] = [0.5886, 0.04905]
  //   v = [0.54 + 0.5886, 0.045 + 0.04905] = [1.1286, 0.09405]
  //   step = g' + 0.9 * v = [0.5886 + 1.01574, 0.04905 + 0.084645] = [1.60434, 0.133695]
  //   w = [0.886 - 0.160434, -2.0095 - 0.0133695]
  // bias: v = -0.9 - 1 = -1.9, step = -1 + 0.9 * -1.9 = -2.71;  w = 3.19 + 0.271
  optimizer->step(params, 0.1f);
  require_values(params[0].value, {0.725566, -2.0228695});
  require_values(params[1].value, {3.461});
}

// ---- Adam ----

TEST_CASE("optimizer: adam with weight decay, two steps", "[core]") {
  auto backend = make_backend("cpu");
  OptimizerConfig config = config_of(OptimizerKind::adam);
  config.beta1 = 0.9f;
  config.beta2 = 0.999f;
  config.eps = 1e-8f;
  auto optimizer = make_optimizer(config, *backend);
  std::vector<Parameter> params = weight_and_bias();

  // Step 1: m = 0.1 * g', v = 0.001 * g'^2, and the bias corrections (0.1, 0.001) undo those
  // factors, so w -= 0.01 * g' / (|g'| + 1e-8): a step of lr against the sign of g'.
  // weight: g' = [0.6, 0.05];  w = [1 - 0.01, -2 - 0.01].  bias: g = -1;  w = 3 + 0.01
  optimizer->step(params, 0.01f);
  require_values(params[0].value, {0.99, -2.01});
  require_values(params[1].value, {3.01});

  // Step 2, bias corrections 1 - 0.9^2 = 0.19 and 1 - 0.999^2 = 0.001999.
  // weight[0]: g' = 0.5 + 0.1 * 0.99 = 0.599
  //   m = 0.9 * 0.06 + 0.1 * 0.599 = 0.1139
  //   v = 0.999 * 0.00036 + 0.001 * 0.599^2 = 0.00035964 + 0.000358801 = 0.000718441
  // weight[1]: g' = 0.25 + 0.1 * -2.01 = 0.049
  //   m = 0.9 * 0.005 + 0.1 * 0.049 = 0.0094
  //   v = 0.999 * 0.0000025 + 0.001 * 0.049^2 = 0.0000024975 + 0.000002401 = 0.0000048985
  // bias: m = 0.9 * -0.1 + 0.1 * -1 = -0.19;  v = 0.999 * 0.001 + 0.001 * 1 = 0.001999
  //   so m / 0.19 = -1 and v / 0.001999 = 1: w = 3.01 + 0.01
  optimizer->step(params, 0.01f);
  require_values(params[0].value,
                 {0.99 - 0.01 * (0.1139 / 0.19) / (std::sqrt(0.000718441 / 0.001999) + 1e-8),
                  -2.01 - 0.01 * (0.0094 / 0.19) / (std::sqrt(0.0000048985 / 0.001999) + 1e-8)});
  require_values(params[1].value, {3.02});
}

// ---- LARS / LARC ----
// Shared setup: w = [3, 4] (||w|| = 5), g = [0.6, 0.8] (||g|| = 1), eta = 0.5, wd = 0.1,
// lars_eps = 0, so trust_ratio = 0.5 * 5 / (1 + 0.1 * 5) = 5/3 and g' = g + 0.1 * w = [0.9, 1.2].

namespace {

OptimizerConfig lars_config(bool larc_clip) {
  OptimizerConfig config = config_of(OptimizerKind::lars);
  config.lars_eta = 0.5f;
  config.lars_eps = 0.0f;
  config.larc_clip = larc_clip;
  return config;
}

std::vector<Parameter> lars_weight_and_bias() {
  std::vector<Parameter> params;
  params.push_back(make_parameter("layer.weight", {3.0f, 4.0f}, {0.6f, 0.8f}, true));
  params.push_back(make_parameter("layer.bias", {3.0f}, {-1.0f}, false));
  return params;
}

}  // namespace

TEST_CASE("optimizer: lars scales the step by the trust ratio, two steps", "[core]") {
  auto backend = make_backend("cpu");
  auto optimizer = make_optimizer(lars_config(false), *backend);
  std::vector<Parameter> params = lars_weight_and_bias();

  // weight, step 1: local_lr = 0.1 * 5/3 = 1/6;  v = (1/6) * [0.9, 1.2] = [0.15, 0.2]
  //   w = [3 - 0.15, 4 - 0.2] = [2.85, 3.8]
  // bias (excluded: local_lr = lr, no decay): v = 0.1 * -1 = -0.1;  w = 3.1
  optimizer->step(params, 0.1f);
  require_values(params[0].value, {2.85, 3.8});
  require_values(params[1].value, {3.1});

  // weight, step 2: ||w|| = sqrt(2.85^2 + 3.8^2) = sqrt(22.5625) = 4.75
  //   trust_ratio = 0.5 * 4.75 / (1 + 0.475) = 2.375 / 1.475;  local_lr = 0.2375 / 1.475
  //   g' = [0.6 + 0.285, 0.8 + 0.38] = [0.885, 1.18]
  //   local_lr * g' = [0.2101875 / 1.475, 0.28025 / 1.475] = [0.1425, 0.19]
  //   v = 0.9 * [0.15, 0.2] + [0.1425, 0.19] = [0.2775, 0.37];  w = [2.85 - 0.2775, 3.8 - 0.37]
  // bias: v = 0.9 * -0.1 - 0.1 = -0.19;  w = 3.1 + 0.19
  optimizer->step(params, 0.1f);
  require_values(params[0].value, {2.5725, 3.43});
  require_values(params[1].value, {3.29});
  require_values(params[0].grad, {0.6, 0.8});
}

TEST_CASE("optimizer: larc clipping caps the local rate at the global rate", "[core]") {
  auto backend = make_backend("cpu");

  SECTION("clip active: trust ratio 5/3 above lr 0.1, two steps") {
    auto optimizer = make_optimizer(lars_config(true), *backend);
    std::vector<Parameter> params = lars_weight_and_bias();
    // step 1: local_lr = min(5/3, 0.1) = 0.1;  v = 0.1 * [0.9, 1.2] = [0.09, 0.12]
    optimizer->step(params, 0.1f);
    require_values(params[0].value, {2.91, 3.88});
    require_values(params[1].value, {3.1});
    // step 2: ||w|| = 0.97 * 5 = 4.85, trust_ratio = 2.425 / 1.485 > 0.1, so local_lr = 0.1
    //   g' = [0.6 + 0.291, 0.8 + 0.388] = [0.891, 1.188]
    //   v = 0.9 * [0.09, 0.12] + 0.1 * g' = [0.081 + 0.0891, 0.108 + 0.1188] = [0.1701, 0.2268]
    optimizer->step(params, 0.1f);
    require_values(params[0].value, {2.91 - 0.1701, 3.88 - 0.2268});
    require_values(params[1].value, {3.29});
  }

  SECTION("clip inactive: trust ratio 5/3 below lr 2") {
    auto optimizer = make_optimizer(lars_config(true), *backend);
    std::vector<Parameter> params = lars_weight_and_bias();
    // local_lr = min(5/3, 2) = 5/3;  v = (5/3) * [0.9, 1.2] = [1.5, 2.0];  w = [1.5, 2.0]
    // bias: local_lr = 2;  w = 3 + 2 * 1 = 5
    optimizer->step(params, 2.0f);
    require_values(params[0].value, {1.5, 2.0});
    require_values(params[1].value, {5.0});
  }

  SECTION("the same lr 2 without clipping scales instead") {
    auto optimizer = make_optimizer(lars_config(false), *backend);
    std::vector<Parameter> params = lars_weight_and_bias();
    // local_lr = 2 * 5/3 = 10/3;  v = (10/3) * [0.9, 1.2] = [3, 4];  w = [0, 0]
    optimizer->step(params, 2.0f);
    require_values(params[0].value, {0.0, 0.0});
  }
}

TEST_CASE("optimizer: lars and larc use the global rate when a norm is zero", "[core]") {
  auto backend = make_backend("cpu");
  for (bool larc_clip : {false, true}) {
    INFO("larc_clip " << larc_clip);
    auto optimizer = make_optimizer(lars_config(larc_clip), *backend);
    std::vector<Parameter> params;
    params.push_back(make_parameter("zero.weight", {0.0f, 0.0f}, {1.0f, 2.0f}, true));
    params.push_back(make_parameter("still.weight", {3.0f, 4.0f}, {0.0f, 0.0f}, true));
    // zero weight: local_lr = lr = 2 (not min(1, 2) = 1), g' = g;  w = -2 * [1, 2]
    // zero gradient: local_lr = 2, g' = 0.1 * [3, 4];  w = [3, 4] - 2 * [0.3, 0.4]
    optimizer->step(params, 2.0f);
    require_values(params[0].value, {-2.0, -4.0});
    require_values(params[1].value, {2.4, 3.2});
  }
}

TEST_CASE("optimizer: lars with nesterov momentum", "[core]") {
  auto backend = make_backend("cpu");
  OptimizerConfig config = lars_config(false);
  config.nesterov = true;
  auto optimizer = make_optimizer(config, *backend);
  std::vector<Parameter> params = lars_weight_and_bias();
  // local_lr * g' = (1/6) * [0.9, 1.2] = [0.15, 0.2] = v
  // w -= local_lr * g' + 0.9 * v = [0.15 + 0.135, 0.2 + 0.18] = [0.285, 0.38]
  // bias: v = -0.1;  w = 3 - (-0.1 + 0.9 * -0.1) = 3.19
  optimizer->step(params, 0.1f);
  require_values(params[0].value, {2.715, 3.62});
  require_values(params[1].value, {3.19});
}

// ---- state ----

TEST_CASE("optimizer: state tensors are named per kind and persist across steps", "[core]") {
  auto backend = make_backend("cpu");

  SECTION("sgd momentum") {
    auto optimizer = make_optimizer(config_of(OptimizerKind::sgd), *backend);
    std::vector<Parameter> params = weight_and_bias();
    CHECK(optimizer->state_tensors().empty());
    optimizer->step(params, 0.1f);
    auto state = optimizer->state_tensors();
    REQUIRE(state.size() == 2);
    CHECK(state[0].first == "momentum/layer.weight");
    CHECK(state[1].first == "momentum/layer.bias");
    require_values(*state[0].second, {0.6, 0.05});
    optimizer->step(params, 0.1f);
    // The same tensors, updated in place (values from the sgd two-step test).
    require_values(*state[0].second, {1.134, 0.0945});
    require_values(*state[1].second, {-1.9});
  }

  SECTION("adam moments") {
    auto optimizer = make_optimizer(config_of(OptimizerKind::adam), *backend);
    std::vector<Parameter> params = weight_and_bias();
    optimizer->initialize_state(params);
    auto state = optimizer->state_tensors();
    REQUIRE(state.size() == 4);
    CHECK(state[0].first == "adam_m/layer.weight");
    CHECK(state[1].first == "adam_v/layer.weight");
    CHECK(state[2].first == "adam_m/layer.bias");
    CHECK(state[3].first == "adam_v/layer.bias");
    require_values(*state[0].second, {0.0, 0.0});
    optimizer->step(params, 0.01f);
    // The configuration holds beta2 as a float, 0.999f = 0.99900001, so 1 - beta2 is
    // 0.00099998713: 1.3e-5 away from 0.001, which the tolerance would notice in v.
    constexpr double one_minus_beta2 = 1.0 - 0.999f;
    constexpr double beta2 = 0.999f;
    // m = 0.1 * [0.6, 0.05], v = (1 - beta2) * [0.36, 0.0025]
    require_values(*state[0].second, {0.06, 0.005});
    require_values(*state[1].second, {one_minus_beta2 * 0.36, one_minus_beta2 * 0.0025}, 0.0);
    optimizer->step(params, 0.01f);
    // As in the adam two-step test: m = [0.1139, 0.0094] and, with g'^2 = [0.358801, 0.002401],
    // v = beta2 * v + (1 - beta2) * g'^2.
    require_values(*state[0].second, {0.1139, 0.0094}, 0.0);
    require_values(*state[1].second,
                   {beta2 * one_minus_beta2 * 0.36 + one_minus_beta2 * 0.358801,
                    beta2 * one_minus_beta2 * 0.0025 + one_minus_beta2 * 0.002401},
                   0.0);
  }
}

TEST_CASE("optimizer: restored state and step count continue a run exactly", "[core]") {
  auto backend = make_backend("cpu");
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::lars, OptimizerKind::adam}) {
    INFO(to_string(kind));
    auto original = make_optimizer(config_of(kind), *backend);
    std::vector<Parameter> params = weight_and_bias();
    original->step(params, 0.01f);

    std::vector<Parameter> restored_params = weight_and_bias();
    for (std::size_t i = 0; i < params.size(); ++i)
      backend->copy(params[i].value, restored_params[i].value);
    auto restored = make_optimizer(config_of(kind), *backend);
    restored->initialize_state(restored_params);
    auto source = original->state_tensors();
    auto target = restored->state_tensors();
    REQUIRE(source.size() == target.size());
    for (std::size_t i = 0; i < source.size(); ++i) {
      CHECK(source[i].first == target[i].first);
      backend->copy(*source[i].second, *target[i].second);
    }
    restored->set_steps_taken(original->steps_taken());

    original->step(params, 0.01f);
    restored->step(restored_params, 0.01f);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto expected = params[i].value.f32();
      const auto actual = restored_params[i].value.f32();
      CHECK(std::vector<float>(actual.begin(), actual.end()) ==
            std::vector<float>(expected.begin(), expected.end()));
    }
  }
}

TEST_CASE("optimizer: state follows parameter names, not positions", "[core]") {
  auto backend = make_backend("cpu");
  auto optimizer = make_optimizer(config_of(OptimizerKind::sgd), *backend);
  std::vector<Parameter> params = weight_and_bias();
  optimizer->step(params, 0.1f);
  std::vector<Parameter> reversed{params[1], params[0]};  // Tensor copies share storage
  optimizer->step(reversed, 0.1f);
  require_values(params[0].value, {0.8266, -2.01445});
  require_values(params[1].value, {3.29});
}

TEST_CASE("optimizer: bad parameters are rejected before anything changes", "[core]") {
  auto backend = make_backend("cpu");
  auto optimizer = make_optimizer(config_of(OptimizerKind::sgd), *backend);

  std::vector<Parameter> duplicated = weight_and_bias();
  duplicated.push_back(duplicated[0]);
  CHECK_THROWS_AS(optimizer->step(duplicated, 0.1f), hardy::InvalidArgument);
  require_values(duplicated[0].value, {1.0, -2.0});

  std::vector<Parameter> gradient_missing = weight_and_bias();
  gradient_missing[1].grad = Tensor();
  CHECK_THROWS_AS(optimizer->step(gradient_missing, 0.1f), hardy::InvalidArgument);
  require_values(gradient_missing[0].value, {1.0, -2.0});

  std::vector<Parameter> gradient_mismatched = weight_and_bias();
  gradient_mismatched[0].grad = flat_tensor({1.0f, 2.0f, 3.0f});
  CHECK_THROWS_AS(optimizer->step(gradient_mismatched, 0.1f), hardy::InvalidArgument);

  std::vector<Parameter> params = weight_and_bias();
  CHECK_THROWS_AS(optimizer->step(params, -0.1f), hardy::InvalidArgument);
  CHECK_THROWS_AS(optimizer->step(params, std::numeric_limits<float>::quiet_NaN()),
                  hardy::InvalidArgument);
  CHECK(optimizer->steps_taken() == 0);

  optimizer->step(params, 0.1f);
  std::vector<Parameter> resized = weight_and_bias();
  resized[1] = make_parameter("layer.bias", {3.0f, 3.0f}, {1.0f, 1.0f}, false);
  CHECK_THROWS_AS(optimizer->step(resized, 0.1f), hardy::InvalidArgument);
  CHECK_THROWS_AS(optimizer->set_steps_taken(-1), hardy::InvalidArgument);
}

// ---- learning-rate schedule ----
// Shared shape: base 0.4, 10 warm-up steps, 110 steps in all, so decay runs over steps 10..110
// and step 60 is half-way.

namespace {

LrSchedule schedule_with(LrSchedule::Decay decay) {
  LrSchedule schedule;
  schedule.base_lr = 0.4f;
  schedule.warmup_steps = 10;
  schedule.total_steps = 110;
  schedule.decay = decay;
  return schedule;
}

}  // namespace

TEST_CASE("optimizer: lr schedule warm-up is linear up to the base rate", "[core]") {
  const LrSchedule schedule = schedule_with(LrSchedule::Decay::none);
  CHECK(schedule.at(0) == Approx(0.04));  // 0.4 * 1 / 10
  CHECK(schedule.at(4) == Approx(0.2));   // 0.4 * 5 / 10
  CHECK(schedule.at(9) == Approx(0.4));   // 0.4 * 10 / 10
  CHECK(schedule.at(10) == Approx(0.4));
  CHECK(schedule.at(60) == Approx(0.4));
  CHECK(schedule.at(110) == Approx(0.4));
  CHECK(schedule.at(1000) == Approx(0.4));

  LrSchedule no_warmup = schedule;
  no_warmup.warmup_steps = 0;
  CHECK(no_warmup.at(0) == Approx(0.4));
}

TEST_CASE("optimizer: lr schedule cosine decay", "[core]") {
  LrSchedule schedule = schedule_with(LrSchedule::Decay::cosine);
  schedule.final_fraction = 0.1f;  // floor 0.04
  CHECK(schedule.at(0) == Approx(0.04));
  CHECK(schedule.at(10) == Approx(0.4));
  CHECK(schedule.at(35) == Approx(0.04 + 0.36 * 0.5 * (1 + 0.70710678)));  // cos(pi / 4)
  CHECK(schedule.at(60) == Approx(0.04 + 0.36 * 0.5));                     // cos(pi / 2) = 0
  CHECK(schedule.at(110) == Approx(0.04));
  CHECK(schedule.at(500) == Approx(0.04));

  // Warm-up filling the whole run leaves no decay steps: the floor from total_steps on.
  schedule.warmup_steps = 110;
  CHECK(schedule.at(109) == Approx(0.4));
  CHECK(schedule.at(110) == Approx(0.04));
}

TEST_CASE("optimizer: lr schedule polynomial decay", "[core]") {
  LrSchedule schedule = schedule_with(LrSchedule::Decay::poly);
  schedule.poly_power = 2.0f;
  CHECK(schedule.at(0) == Approx(0.04));
  CHECK(schedule.at(10) == Approx(0.4));
  CHECK(schedule.at(35) == Approx(0.4 * 0.75 * 0.75));
  CHECK(schedule.at(60) == Approx(0.4 * 0.5 * 0.5));
  CHECK(schedule.at(110) == Approx(0.0).margin(1e-9));

  schedule.poly_power = 1.0f;
  schedule.final_fraction = 0.5f;  // floor 0.2
  CHECK(schedule.at(60) == Approx(0.2 + 0.2 * 0.5));
  CHECK(schedule.at(110) == Approx(0.2));
}

TEST_CASE("optimizer: lr schedule step decay", "[core]") {
  LrSchedule schedule = schedule_with(LrSchedule::Decay::step);
  schedule.step_every = 25;
  schedule.step_gamma = 0.1f;
  CHECK(schedule.at(0) == Approx(0.04));
  CHECK(schedule.at(10) == Approx(0.4));
  CHECK(schedule.at(34) == Approx(0.4));      // 24 steps after warm-up
  CHECK(schedule.at(35) == Approx(0.04));     // 25: one period
  CHECK(schedule.at(60) == Approx(0.004));    // 50: two periods
  CHECK(schedule.at(109) == Approx(0.0004));  // 99: three periods
  CHECK(schedule.at(110) == Approx(0.00004));
  CHECK(schedule.at(200) == Approx(0.00004));
}

TEST_CASE("optimizer: lr schedule multistep decay at fractions of the run or at steps", "[core]") {
  // CosmoFlow's reference: x0.25 from 25% of the run, x0.125 from 50%, after a warm-up of 1/32.
  LrSchedule schedule = schedule_with(LrSchedule::Decay::multistep);
  schedule.total_steps = 200;
  schedule.warmup_steps = 0;
  schedule.warmup_fraction = 0.03125f;  // round(6.25) = 6 steps
  schedule.milestones = {0.25, 0.5};
  schedule.milestone_factors = {0.25f, 0.125f};
  CHECK(schedule.warmup() == 6);
  CHECK(schedule.at(0) == Approx(0.4 / 6));
  CHECK(schedule.at(5) == Approx(0.4));
  CHECK(schedule.at(49) == Approx(0.4));
  CHECK(schedule.at(50) == Approx(0.1));
  CHECK(schedule.at(99) == Approx(0.1));
  CHECK(schedule.at(100) == Approx(0.05));
  CHECK(schedule.at(199) == Approx(0.05));
  CHECK(schedule.at(400) == Approx(0.05));
  // A run too short to keep the fractions apart (a 2-step job with CosmoFlow's recipe): both land
  // on step 1, where the later factor applies.
  schedule.total_steps = 2;
  CHECK_NOTHROW(schedule.validate());
  CHECK(schedule.at(1) == Approx(0.4 * 0.125));

  // DeepCAM's: warm-up 400 steps, x0.1 from step 1200; a run of 200 steps ends inside the
  // warm-up when the schedule allows it, and is refused otherwise.
  LrSchedule steps = schedule_with(LrSchedule::Decay::multistep);
  steps.total_steps = 200;
  steps.warmup_steps = 400;
  steps.milestones = {1200};
  steps.milestone_factors = {0.1f};
  CHECK_THROWS_AS(steps.validate(), hardy::InvalidArgument);
  steps.warmup_may_outlast_run = true;
  CHECK(steps.at(0) == Approx(0.4 / 400));
  CHECK(steps.at(199) == Approx(0.4 * 200 / 400));
  steps.total_steps = 2000;
  CHECK(steps.at(399) == Approx(0.4));
  CHECK(steps.at(1199) == Approx(0.4));
  CHECK(steps.at(1200) == Approx(0.04));
  CHECK(steps.at(1999) == Approx(0.04));
}

TEST_CASE("optimizer: lr schedule rejects bad settings", "[core]") {
  const auto rejects = [](auto change) {
    LrSchedule schedule = schedule_with(LrSchedule::Decay::cosine);
    change(schedule);
    CHECK_THROWS_AS(schedule.validate(), hardy::InvalidArgument);
    CHECK_THROWS_AS(schedule.at(0), hardy::InvalidArgument);
  };
  rejects([](LrSchedule& s) { s.base_lr = -0.1f; });
  rejects([](LrSchedule& s) { s.base_lr = std::numeric_limits<float>::infinity(); });
  rejects([](LrSchedule& s) { s.total_steps = 0; });
  rejects([](LrSchedule& s) { s.warmup_steps = 111; });
  rejects([](LrSchedule& s) { s.warmup_steps = -1; });
  rejects([](LrSchedule& s) { s.final_fraction = 1.5f; });
  rejects([](LrSchedule& s) {
    s.decay = LrSchedule::Decay::poly;
    s.poly_power = 0.0f;
  });
  rejects([](LrSchedule& s) {
    s.decay = LrSchedule::Decay::step;
    s.step_every = 0;
  });
  rejects([](LrSchedule& s) {
    s.decay = LrSchedule::Decay::step;
    s.step_every = 10;
    s.step_gamma = 0.0f;
  });
  rejects([](LrSchedule& s) { s.warmup_fraction = 1.5f; });
  rejects([](LrSchedule& s) { s.decay = LrSchedule::Decay::multistep; });  // no milestones
  rejects([](LrSchedule& s) {
    s.decay = LrSchedule::Decay::multistep;
    s.milestones = {0.5, 0.25};  // descending
    s.milestone_factors = {0.5f, 0.25f};
  });
  rejects([](LrSchedule& s) {
    s.decay = LrSchedule::Decay::multistep;
    s.milestones = {0.5};
    s.milestone_factors = {0.5f, 0.25f};  // one too many
  });
  rejects([](LrSchedule& s) {
    s.decay = LrSchedule::Decay::multistep;
    s.milestones = {12.5};  // neither a fraction nor a whole step
    s.milestone_factors = {0.5f};
  });
  rejects([](LrSchedule& s) {
    s.decay = LrSchedule::Decay::multistep;
    s.milestones = {0.5};
    s.milestone_factors = {0.0f};
  });
  CHECK_THROWS_AS(schedule_with(LrSchedule::Decay::none).at(-1), hardy::InvalidArgument);

  for (LrSchedule::Decay decay :
       {LrSchedule::Decay::none, LrSchedule::Decay::cosine, LrSchedule::Decay::poly,
        LrSchedule::Decay::step, LrSchedule::Decay::multistep})
    CHECK(parse_lr_decay(to_string(decay)) == decay);
  try {
    parse_lr_decay("exponential");
    FAIL("expected InvalidArgument");
  } catch (const hardy::InvalidArgument& e) {
    CHECK_THAT(e.what(), Catch::Contains("exponential") &&
                             Catch::Contains("none, cosine, poly, step, multistep"));
  }
}

// ---- LAMB ----
// The reference: apex's FusedLAMB (adam_w_mode, bias correction, grad averaging, global
// gradient-norm clipping, use_nvlamb = false) written out in double precision, one parameter at a
// time, independent of the optimizer's code path through the backend's kernels.

namespace {

struct LambReference {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-6, weight_decay = 0.01, max_grad_norm = 1.0;
  std::vector<std::vector<double>> m, v;
  long t = 0;

  void step(std::vector<std::vector<double>>& w, const std::vector<std::vector<double>>& g,
            const std::vector<bool>& decayed, double lr) {
    if (m.empty())
      for (const auto& tensor : w) {
        m.emplace_back(tensor.size(), 0.0);
        v.emplace_back(tensor.size(), 0.0);
      }
    ++t;
    double squares = 0;
    for (const auto& tensor : g)
      for (double x : tensor) squares += x * x;
    const double clip = max_grad_norm > 0 ? std::max(std::sqrt(squares) / max_grad_norm, 1.0) : 1.0;
    for (std::size_t p = 0; p < w.size(); ++p) {
      const double wd = decayed[p] ? weight_decay : 0.0;
      std::vector<double> u(w[p].size());
      double w_norm = 0, u_norm = 0;
      for (std::size_t i = 0; i < w[p].size(); ++i) {
        const double grad = g[p][i] / clip;
        m[p][i] = beta1 * m[p][i] + (1 - beta1) * grad;
        v[p][i] = beta2 * v[p][i] + (1 - beta2) * grad * grad;
        const double m_hat = m[p][i] / (1 - std::pow(beta1, static_cast<double>(t)));
        const double v_hat = v[p][i] / (1 - std::pow(beta2, static_cast<double>(t)));
        u[i] = m_hat / (std::sqrt(v_hat) + eps) + wd * w[p][i];
        w_norm += w[p][i] * w[p][i];
        u_norm += u[i] * u[i];
      }
      w_norm = std::sqrt(w_norm);
      u_norm = std::sqrt(u_norm);
      const double trust = (wd != 0 && w_norm > 0 && u_norm > 0) ? w_norm / u_norm : 1.0;
      for (std::size_t i = 0; i < w[p].size(); ++i) w[p][i] -= lr * trust * u[i];
    }
  }
};

OptimizerConfig lamb_config(float max_grad_norm) {
  OptimizerConfig config;
  config.kind = OptimizerKind::lamb;
  config.beta1 = 0.9f;
  config.beta2 = 0.999f;
  config.eps = 1e-6f;
  config.weight_decay = 0.01f;
  config.lamb_max_grad_norm = max_grad_norm;
  return config;
}

}  // namespace

TEST_CASE("optimizer: lamb matches a double-precision reference over three steps", "[core]") {
  for (const float max_grad_norm : {1.0f, 0.0f}) {
    INFO("lamb_max_grad_norm " << max_grad_norm);
    auto backend = make_backend("cpu");
    auto optimizer = make_optimizer(lamb_config(max_grad_norm), *backend);
    std::vector<Parameter> params;
    params.push_back(
        make_parameter("layer.weight", {3.0f, -4.0f, 0.5f}, {0.6f, 0.8f, -0.3f}, true));
    params.push_back(make_parameter("layer.bias", {0.25f, -1.0f}, {-1.0f, 0.2f}, false));
    LambReference reference;
    reference.max_grad_norm = max_grad_norm;
    std::vector<std::vector<double>> w{{3.0, -4.0, 0.5}, {0.25, -1.0}};
    // Three steps with new gradients each time, so that the moments, the bias corrections and
    // the clipping (global norm about 1.5, 1.2 and 0.9 against 1) all take part.
    const std::vector<std::vector<std::vector<float>>> grads{{{0.6f, 0.8f, -0.3f}, {-1.0f, 0.2f}},
                                                             {{0.4f, -0.9f, 0.2f}, {0.5f, -0.3f}},
                                                             {{-0.2f, 0.5f, 0.6f}, {0.3f, 0.1f}}};
    const std::vector<double> rates{0.01, 0.02, 0.005};
    for (std::size_t step = 0; step < grads.size(); ++step) {
      for (std::size_t p = 0; p < params.size(); ++p)
        std::copy(grads[step][p].begin(), grads[step][p].end(), params[p].grad.f32().begin());
      std::vector<std::vector<double>> g;
      for (const auto& tensor : grads[step]) g.emplace_back(tensor.begin(), tensor.end());
      reference.step(w, g, {true, false}, rates[step]);
      optimizer->step(params, static_cast<float>(rates[step]));
      INFO("step " << step + 1);
      require_values(params[0].value, w[0]);
      require_values(params[1].value, w[1]);
    }
    CHECK(optimizer->state_tensors().front().first == "lamb_m/layer.weight");
    // The caller's gradients are left as they were (the clipping works on a copy).
    require_values(params[0].grad, {-0.2, 0.5, 0.6});
  }
}

TEST_CASE("optimizer: lamb moves a decayed tensor by lr times its norm", "[core]") {
  // The trust ratio makes the step's norm lr * ||w||, whatever the gradient's size: the layer-wise
  // adaptation that lets LAMB take large batches.
  auto backend = make_backend("cpu");
  auto optimizer = make_optimizer(lamb_config(0.0f), *backend);
  for (const float scale : {1e-3f, 1.0f, 1e3f}) {
    std::vector<Parameter> params;
    params.push_back(make_parameter("w" + std::to_string(scale), {3.0f, 4.0f},
                                    {0.6f * scale, -0.8f * scale}, true));
    optimizer->step(params, 0.1f);
    const auto moved = params[0].value.f32();
    const double distance = std::hypot(moved[0] - 3.0, moved[1] - 4.0);
    CHECK(distance == Approx(0.1 * 5.0).epsilon(1e-4));
  }
}

// ---- element-wise kernels ----

TEST_CASE("optimizer: element-wise axpy, scale and sum_squares", "[core]") {
  auto backend = make_backend("cpu");
  // 37 elements: two full AVX-512 vectors and a 5-element remainder.
  std::vector<float> ones(37, 1.0f);
  std::vector<float> counting(37);
  for (int i = 0; i < 37; ++i) counting[i] = static_cast<float>(i + 1);
  Tensor x = flat_tensor(counting);
  Tensor y = flat_tensor(ones);

  backend->axpy(2.0f, x, y);  // y[i] = 1 + 2 * (i + 1)
  std::vector<double> expected(37);
  for (int i = 0; i < 37; ++i) expected[i] = 1.0 + 2.0 * (i + 1);
  require_values(y, expected);

  backend->scale(y, 0.5f);  // y[i] = 0.5 + (i + 1)
  for (int i = 0; i < 37; ++i) expected[i] = 0.5 + (i + 1);
  require_values(y, expected);

  // 1^2 + ... + 37^2 = 37 * 38 * 75 / 6
  CHECK(backend->sum_squares(x) == 17575.0);

  // Large enough for the parallel path: 100003 elements of 0.5, squares sum to 100003 / 4.
  Tensor big = flat_tensor(std::vector<float>(100003, 0.5f));
  CHECK(backend->sum_squares(big) == 25000.75);
  Tensor big_y = flat_tensor(std::vector<float>(100003, 1.0f));
  backend->axpy(-4.0f, big, big_y);  // 1 - 4 * 0.5 = -1 everywhere
  backend->scale(big_y, 3.0f);
  CHECK(backend->sum_squares(big_y) == 9.0 * 100003);
}

TEST_CASE("optimizer: element-wise has_non_finite", "[core]") {
  auto backend = make_backend("cpu");
  std::vector<float> values(37, 1.5f);
  values[3] = std::numeric_limits<float>::max();
  values[4] = -0.0f;
  values[5] = std::numeric_limits<float>::denorm_min();
  CHECK_FALSE(backend->has_non_finite(flat_tensor(values)));

  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    INFO("value " << bad);
    std::vector<float> with_bad = values;
    with_bad.back() = bad;  // in the scalar remainder
    CHECK(backend->has_non_finite(flat_tensor(with_bad)));
    std::vector<float> big(100003, 0.25f);
    big[51234] = bad;
    CHECK(backend->has_non_finite(flat_tensor(big)));
  }
  CHECK_FALSE(backend->has_non_finite(flat_tensor(std::vector<float>(100003, 0.25f))));
}

TEST_CASE("optimizer: has_non_finite over many tensors finds the one bad element", "[core]") {
  auto backend = make_backend("cpu");
  const Tensor first = flat_tensor(std::vector<float>(9, 1.0f));
  const Tensor second = flat_tensor(std::vector<float>(100003, 0.5f));
  std::vector<float> values(5, 2.0f);
  values[4] = std::numeric_limits<float>::infinity();
  const Tensor bad_last = flat_tensor(values);
  const Tensor* good[] = {&first, &second};
  const Tensor* with_bad[] = {&first, &second, &bad_last};
  CHECK_FALSE(backend->has_non_finite(good));
  CHECK(backend->has_non_finite(with_bad));
  CHECK_FALSE(backend->has_non_finite(std::span<const Tensor* const>{}));
  Tensor undefined;
  const Tensor* with_undefined[] = {&first, &undefined};
  CHECK_THROWS_AS(backend->has_non_finite(with_undefined), hardy::InvalidArgument);
}

TEST_CASE("optimizer: element-wise kernels reject mismatched tensors", "[core]") {
  auto backend = make_backend("cpu");
  Tensor five = flat_tensor(std::vector<float>(5, 1.0f));
  Tensor six = flat_tensor(std::vector<float>(6, 1.0f));
  try {
    backend->axpy(1.0f, five, six);
    FAIL("expected InvalidArgument");
  } catch (const hardy::InvalidArgument& e) {
    CHECK_THAT(e.what(), Catch::Contains("f32 flat [5]") && Catch::Contains("f32 flat [6]"));
  }
  Tensor integers = Tensor::host({5}, DType::i32, Layout::flat);
  CHECK_THROWS_AS(backend->scale(integers, 2.0f), hardy::InvalidArgument);
  CHECK_THROWS_AS(backend->sum_squares(integers), hardy::InvalidArgument);
  Tensor undefined;
  CHECK_THROWS_AS(backend->has_non_finite(undefined), hardy::InvalidArgument);
  Tensor velocity = flat_tensor(std::vector<float>(6, 0.0f));
  CHECK_THROWS_AS(
      backend->sgd_update(five, five, velocity,
                          {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.0f, .nesterov = false}),
      hardy::InvalidArgument);
  Tensor m = flat_tensor(std::vector<float>(5, 0.0f));
  Tensor v = flat_tensor(std::vector<float>(5, 0.0f));
  CHECK_THROWS_AS(backend->adam_update(five, five, m, v,
                                       {.lr = 0.1f,
                                        .beta1 = 0.9f,
                                        .beta2 = 0.999f,
                                        .eps = 1e-8f,
                                        .weight_decay = 0.0f,
                                        .step = 0}),
                  hardy::InvalidArgument);
  CHECK_THROWS_AS(backend->adam_update(five, six, m, v,
                                       {.lr = 0.1f,
                                        .beta1 = 0.9f,
                                        .beta2 = 0.999f,
                                        .eps = 1e-8f,
                                        .weight_decay = 0.0f,
                                        .step = 1}),
                  hardy::InvalidArgument);
}

// ---- convergence ----

TEST_CASE("optimizer: sgd and adam minimise a quadratic", "[core]") {
  auto backend = make_backend("cpu");
  // f(w) = sum_i 0.5 * a_i * (w_i - c_i)^2, gradient a_i * (w_i - c_i), minimum at c.
  const std::vector<float> curvature{1.0f, 4.0f, 0.25f};
  const std::vector<float> minimum{1.0f, -2.0f, 0.5f};
  const auto minimise = [&](OptimizerConfig config, const LrSchedule& schedule) {
    config.weight_decay = 0.0f;
    auto optimizer = make_optimizer(config, *backend);
    std::vector<Parameter> params;
    params.push_back(make_parameter("w", {0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f}, true));
    for (long step = 0; step < schedule.total_steps; ++step) {
      const auto w = params[0].value.f32();
      const auto grad = params[0].grad.f32();
      for (std::size_t i = 0; i < w.size(); ++i) grad[i] = curvature[i] * (w[i] - minimum[i]);
      optimizer->step(params, schedule.at(step));
    }
    return params[0].value.clone();
  };

  SECTION("sgd with momentum, constant rate") {
    LrSchedule schedule{.base_lr = 0.1f, .total_steps = 300, .decay = LrSchedule::Decay::none};
    const Tensor w = minimise(config_of(OptimizerKind::sgd), schedule);
    for (std::size_t i = 0; i < minimum.size(); ++i)
      CHECK(w.f32()[i] == Approx(minimum[i]).margin(1e-4));
  }

  SECTION("adam, cosine-decayed rate") {
    LrSchedule schedule{.base_lr = 0.1f, .total_steps = 400, .decay = LrSchedule::Decay::cosine};
    const Tensor w = minimise(config_of(OptimizerKind::adam), schedule);
    for (std::size_t i = 0; i < minimum.size(); ++i)
      CHECK(w.f32()[i] == Approx(minimum[i]).margin(1e-3));
  }
}
