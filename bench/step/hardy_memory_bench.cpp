// How much memory a network keeps per sample: the bytes the backend allocates during the first
// training step (forward, loss gradient, backward) of batch 1 and batch 2 at two sizes, counted
// by a Backend decorator. hardy keeps every layer's output and input gradient between steps, so
// this is the step's activation memory (what a GPU must hold besides the weights, their
// gradients and the optimizer's state, which are counted apart). Activations (4-D tensors) are
// reported in elements too: on a GPU in bf16 or fp16 they take 2 bytes each, not 4.
//
//   build/bin/hardy_memory_bench --model deepcam --height 96 --width 144 --full 768x1152
//
// The per-sample figures at --full are extrapolated by pixel count from the two measured sizes
// (H x W and 2H x 2W), whose ratio the output shows (4.0 when the memory is per pixel).
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "hardy/core/compute/forwarding_backend.hpp"
#include "hardy/core/nn/model.hpp"

using namespace hardy;

namespace {

class CountingBackend final : public core::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  std::size_t bytes = 0, activation_elements = 0;

 protected:
  core::Tensor do_empty(std::vector<std::int64_t> dims, core::DType dtype,
                        core::Layout layout) override {
    core::Tensor t = ForwardingBackend::do_empty(std::move(dims), dtype, layout);
    bytes += t.bytes();
    if (t.rank() == 4 && dtype != core::DType::i32) activation_elements += t.numel();
    return t;
  }
};

struct Measured {
  std::size_t bytes, activation_elements;
};

// What one training step allocates beyond the model's construction.
Measured step_memory(const core::ModelConfig& config, int batch, int height, int width) {
  auto cpu = core::make_backend("cpu");
  CountingBackend counting(*cpu);
  core::Model model(counting, config);
  model.initialize(1);
  counting.bytes = counting.activation_elements = 0;
  core::Tensor x = counting.empty({batch, config.input_channels, height, width}, core::DType::f32,
                                  counting.activation_layout());
  counting.fill(x, 0.5f);
  const core::Tensor& logits = model.forward(x, /*training=*/true);
  core::Tensor dlogits = counting.empty(logits.dims(), core::DType::f32, logits.layout());
  counting.fill(dlogits, 1e-3f);
  model.backward(dlogits);
  return {counting.bytes, counting.activation_elements};
}

int usage(const std::string& problem) {
  std::cerr << "hardy_memory_bench: " << problem
            << "\nusage: hardy_memory_bench --model compact|deepcam|tiramisu --height H --width W "
               "[--full HxW]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  core::ModelConfig config;
  int height = 96, width = 144, full_height = 768, full_width = 1152;
  try {
    for (int i = 1; i < argc; i += 2) {
      const std::string flag = argv[i];
      if (i + 1 >= argc) return usage(flag + " needs a value");
      const std::string value = argv[i + 1];
      if (flag == "--model")
        config.architecture = core::parse_architecture(value);
      else if (flag == "--height")
        height = std::stoi(value);
      else if (flag == "--width")
        width = std::stoi(value);
      else if (flag == "--full") {
        const auto x = value.find('x');
        if (x == std::string::npos) return usage("--full takes HxW");
        full_height = std::stoi(value.substr(0, x));
        full_width = std::stoi(value.substr(x + 1));
      } else {
        return usage("unknown option " + flag);
      }
    }
    const int multiple = config.input_multiple();
    if (height % multiple || width % multiple)
      return usage(fmt::format("--height and --width must divide by {}", multiple));
    auto cpu = core::make_backend("cpu");
    const core::Model model(*cpu, config);
    const std::size_t parameters = model.parameter_count();

    auto per_sample = [&](int h, int w) {
      const Measured one = step_memory(config, 1, h, w), two = step_memory(config, 2, h, w);
      return Measured{two.bytes - one.bytes, two.activation_elements - one.activation_elements};
    };
    const Measured small = per_sample(height, width), large = per_sample(2 * height, 2 * width);
    const double scale = static_cast<double>(full_height) * full_width / (4.0 * height * width);
    const double full_elements = static_cast<double>(large.activation_elements) * scale;
    nlohmann::json result{
        {"model", core::to_string(config.architecture)},
        {"parameters", parameters},
        {"measured", {{"height", height}, {"width", width}}},
        {"per_sample_bytes_f32", {small.bytes, large.bytes}},
        {"per_sample_activation_elements", {small.activation_elements, large.activation_elements}},
        {"growth_from_doubling_height_and_width",
         static_cast<double>(large.bytes) / static_cast<double>(small.bytes)},
        {"full", {{"height", full_height}, {"width", full_width}}},
        {"full_per_sample_gib_f32", static_cast<double>(large.bytes) * scale / (1 << 30)},
        {"full_per_sample_activation_gib_bf16", full_elements * 2 / (1 << 30)},
        // Weights (f32), their gradients, Adam's two moments: 16 bytes a parameter.
        {"parameters_gradients_adam_gib", static_cast<double>(parameters) * 16 / (1 << 30)}};
    std::cout << result.dump() << "\n";
  } catch (const std::exception& e) {
    return usage(e.what());
  }
  return 0;
}
