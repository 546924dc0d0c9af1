// Dynamic loss scaling on the device in fp16: a loss scale too large for fp16 makes the loss
// gradient overflow (Inf), the weight gradient inherits it, LossScaler::unscale finds it through
// has_non_finite, and the step is skipped with the scale lowered until a step fits; that step's
// unscaled gradient equals the unscaled fp32 gradient of the CPU backend.
#include <catch2/catch.hpp>
#include <cmath>

#include "gpu_test_support.hpp"
#include "hardy/core/nn/loss_scaler.hpp"
#include "hardy/core/nn/optimizer.hpp"

using namespace hardy;
using namespace hardy::core;
using namespace hardy::gpu_test;

TEST_CASE("loss scaling on the device: an fp16 overflow skips the step and lowers the scale",
          "[gpu]") {
  CudaOptions options;
  options.activation_dtype = DType::f16;
  CudaBackend cuda(options);
  auto cpu = make_backend("cpu");

  // A 3-class 1x1 convolution (the classifier) on a 2 x 8 x 4 x 4 fp16 input.
  const std::int64_t n = 2, in = 8, h = 4, w = 4, classes = 3;
  const ConvGeometry g{1, 0, 1};
  const Twin x = twin(cuda, random_host({n, in, h, w}, 81), DType::f16);
  Tensor weight_host = random_host({classes, in, 1, 1}, 82, 0.5f, Layout::nchw);
  Parameter p;
  p.name = "classifier.weight";
  p.value = cuda.empty({classes, in, 1, 1}, DType::f32, Layout::nchw);
  p.grad = cuda.empty({classes, in, 1, 1}, DType::f32, Layout::nchw);
  cuda.copy(weight_host, p.value);
  Tensor labels_host = Tensor::host({n, 1, h, w}, DType::i32, Layout::nhwc);
  for (std::int64_t i = 0; i < labels_host.numel(); ++i)
    labels_host.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % classes);
  Tensor labels = cuda.empty({n, 1, h, w}, DType::i32, Layout::nhwc);
  cuda.copy(labels_host, labels);
  const std::vector<float> class_weights{1.0f, 2.0f, 3.0f};
  const float per_pixel = 1.0f / static_cast<float>(n * h * w);

  Tensor logits = cuda.empty({n, classes, h, w}, DType::f16, Layout::nhwc);
  Tensor dlogits = cuda.empty({n, classes, h, w}, DType::f16, Layout::nhwc);
  cuda.conv2d_forward(x.device, p.value, nullptr, g, logits);

  // The reference: the same step in fp32 on the CPU without any scaling.
  Tensor logits_cpu = Tensor::host({n, classes, h, w});
  Tensor dlogits_cpu = Tensor::host({n, classes, h, w});
  Tensor grad_cpu = Tensor::host({classes, in, 1, 1}, DType::f32, Layout::nchw);
  cpu->conv2d_forward(x.host, weight_host, nullptr, g, logits_cpu);
  cpu->softmax_cross_entropy({.logits = logits_cpu,
                              .labels = labels_host,
                              .class_weights = class_weights,
                              .grad_scale = per_pixel},
                             dlogits_cpu);
  cpu->conv2d_backward_weights(x.host, dlogits_cpu, g, grad_cpu, nullptr);

  LossScalerConfig config;
  config.initial_scale = 16777216.0f;  // 2^24: the loss gradient reaches ~2^24 / 32 * 3 > 65504
  config.max_scale = 16777216.0f;
  LossScaler scaler(config);
  OptimizerConfig sgd;
  sgd.momentum = 0.0f;
  sgd.weight_decay = 0.0f;
  auto optimizer = make_optimizer(sgd, cuda);
  std::vector<Parameter*> params{&p};
  optimizer->initialize_state(params);

  int skipped = 0;
  bool applied = false;
  for (int attempt = 0; attempt < 30 && !applied; ++attempt) {
    const float scale = scaler.scale();
    cuda.softmax_cross_entropy({.logits = logits,
                                .labels = labels,
                                .class_weights = class_weights,
                                .grad_scale = per_pixel * scale},
                               dlogits);
    cuda.conv2d_backward_weights(x.device, dlogits, g, p.grad, nullptr);
    const bool overflow = scaler.unscale(cuda, params);
    applied = scaler.update(overflow);
    if (applied) break;
    ++skipped;
    CHECK(scaler.scale() == scale / 2);
    // A skipped step leaves the weights alone: the optimizer never ran.
    check_close(cuda, p.value, weight_host, 0.0, "weights after a skipped step");
  }
  INFO("skipped " << skipped << " steps, final scale " << scaler.scale());
  REQUIRE(applied);
  CHECK(skipped >= 3);
  CHECK(scaler.state().skipped_steps == skipped);
  CHECK(scaler.scale() < config.initial_scale);
  check_close(cuda, p.grad, grad_cpu, 1e-2, "unscaled fp16 gradient against the fp32 reference");

  optimizer->step(params, 0.1f);
  Tensor after = to_host_f32(cuda, p.value);
  CHECK(relative_error(after, weight_host) > 0.0);
}
