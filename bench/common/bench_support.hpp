#pragma once
// What hardy's model benchmarks share: the flags that describe the model and its input, number
// parsing, the training step's fixed ingredients (its batch and loss, on any backend), and timing
// statistics. Each benchmark keeps its
// own flags and usage text.
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/nn/model.hpp"
#include "hardy/core/nn/optimizer.hpp"
#include "hardy/core/support/random.hpp"

namespace hardy::bench {

using Clock = std::chrono::steady_clock;

// A bad flag or value; each benchmark prints it with its usage and exits with status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class T>
T parse_number(std::string_view flag, std::string_view text) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size())
    throw UsageError(fmt::format("{} expects a number, got '{}'", flag, text));
  return value;
}

inline std::vector<int> parse_rates(std::string_view flag, std::string_view text) {
  std::vector<int> rates;
  while (!text.empty()) {
    const auto comma = text.find(',');
    rates.push_back(parse_number<int>(flag, text.substr(0, comma)));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
  }
  return rates;
}

// The input batch and the model's shape.
struct ModelShape {
  int batch, height, width;
  core::ModelConfig model;
};

// Applies one of the shape flags (--batch, --height, --width, --input-channels, --classes,
// --model; the compact network's --model-width, --depth, --aspp-channels, --aspp-rates,
// --low-level-channels, --decoder-channels, --groups, --norm; the tiramisu's --dense-layers,
// --growth, --first-channels, --dense-kernel, --dropout); false when `flag` is none of them.
inline bool apply_shape_flag(std::string_view flag, std::string_view value, ModelShape& shape) {
  auto integer = [&] { return parse_number<int>(flag, value); };
  // A name core parses (a network, a norm), its error a usage error.
  auto named = [&](auto parse) {
    try {
      return parse(std::string(value));
    } catch (const std::exception& e) {
      throw UsageError(fmt::format("{}: {}", flag, e.what()));
    }
  };
  auto& m = shape.model;
  if (flag == "--batch")
    shape.batch = integer();
  else if (flag == "--height")
    shape.height = integer();
  else if (flag == "--width")
    shape.width = integer();
  else if (flag == "--input-channels")
    m.input_channels = integer();
  else if (flag == "--classes")
    m.num_classes = integer();
  else if (flag == "--model")
    m.architecture = named(core::parse_architecture);
  else if (flag == "--model-width")
    m.width = integer();
  else if (flag == "--depth")
    m.depth = integer();
  else if (flag == "--aspp-channels")
    m.aspp_channels = integer();
  else if (flag == "--aspp-rates")
    m.aspp_rates = parse_rates(flag, value);
  else if (flag == "--low-level-channels")
    m.low_level_channels = integer();
  else if (flag == "--decoder-channels")
    m.decoder_channels = integer();
  else if (flag == "--groups")
    m.groups = integer();
  else if (flag == "--norm")
    m.norm = named(core::parse_norm_kind);
  else if (flag == "--dense-layers")
    m.dense_layers = parse_rates(flag, value);
  else if (flag == "--growth")
    m.growth = integer();
  else if (flag == "--first-channels")
    m.first_channels = integer();
  else if (flag == "--dense-kernel")
    m.dense_kernel = integer();
  else if (flag == "--dropout")
    m.dropout = parse_number<float>(flag, value);
  else if (flag == "--volume")
    m.volume = integer();
  else
    return false;
  return true;
}

// Fixed, unequal class weights, so that a cross-check notices a loss that ignores them.
inline std::vector<float> unequal_class_weights(int num_classes) {
  std::vector<float> weights;
  for (int k = 0; k < num_classes; ++k)
    weights.push_back(0.5f + 1.5f * static_cast<float>(k) /
                                 static_cast<float>(std::max(1, num_classes - 1)));
  return weights;
}

// 1 / (batch * H * W): hardy's per-pixel mean over the (here single-rank) global batch.
// The loss is a mean over the batch's pixels, or over its targets for a regression.
inline float grad_scale_of(const ModelShape& shape) {
  if (shape.model.regression())
    return 1.0f / static_cast<float>(static_cast<double>(shape.batch) * shape.model.num_classes);
  return 1.0f / static_cast<float>(static_cast<double>(shape.batch) * shape.height * shape.width);
}

// CosmoFlow's sample is fixed: its 4 redshifts in and 4 parameters out, whatever --input-channels
// and --classes say.
inline void fix_regression_shape(ModelShape& shape) {
  if (!shape.model.regression()) return;
  shape.model.input_channels = 4;
  shape.model.num_classes = 4;
}

// The input's dims: (N, C, H, W), or (N, C, D, H, W) for a volumetric network (CosmoFlow's cubes
// of the model's volume).
inline std::vector<std::int64_t> input_dims(const ModelShape& shape) {
  const auto& m = shape.model;
  if (m.volumetric()) return {shape.batch, m.input_channels, m.volume, m.volume, m.volume};
  return {shape.batch, m.input_channels, shape.height, shape.width};
}

// A fixed random batch on `backend`: standard-normal fields in the backend's activation dtype and
// layout, random labels and fixed, unequal class weights; for a regression, targets uniform in
// [-1, 1]. Drawn on the host and copied, so that it serves every backend.
struct Batch {
  core::Tensor fields, labels;  // labels: i32 (N, 1, H, W), or the f32 (N, K) targets
  std::vector<float> class_weights;
};

inline Batch make_batch(core::Backend& backend, const ModelShape& shape, std::uint64_t seed) {
  Batch b;
  const std::vector<std::int64_t> dims = input_dims(shape);
  core::Tensor host = core::Tensor::host(dims, core::DType::f32, backend.activation_layout());
  core::SplitMix64 rng(core::mix_seed(seed, 0xbe7c4, 0));
  for (float& v : host.f32()) v = static_cast<float>(rng.normal());
  core::ensure_tensor(backend, b.fields, dims);
  backend.copy(host, b.fields);
  const int k = shape.model.num_classes;
  if (shape.model.regression()) {
    core::Tensor targets =
        core::Tensor::host({shape.batch, k}, core::DType::f32, core::Layout::flat);
    for (float& t : targets.f32()) t = static_cast<float>(rng.uniform(-1.0, 1.0));
    b.labels = backend.empty({shape.batch, k}, core::DType::f32, core::Layout::flat);
    backend.copy(targets, b.labels);
    return b;
  }
  const std::vector<std::int64_t> label_dims{shape.batch, 1, shape.height, shape.width};
  core::Tensor labels =
      core::Tensor::host(label_dims, core::DType::i32, backend.activation_layout());
  auto* label = labels.data<std::int32_t>();
  for (std::int64_t i = 0; i < labels.numel(); ++i)
    label[i] = static_cast<std::int32_t>(rng.next() % static_cast<std::uint64_t>(k));
  b.labels = backend.empty(label_dims, core::DType::i32, backend.activation_layout());
  backend.copy(labels, b.labels);
  b.class_weights = unequal_class_weights(k);
  return b;
}

// The step's loss sum and its gradient: weighted cross-entropy, or MSE for a regression. The sum
// is read when the caller asks (core::PendingSum): a step that reads it after its backward pass
// is queued runs as the trainer's does.
inline core::PendingSum queue_loss_of(core::Backend& backend, const ModelShape& shape,
                                      const Batch& b, const core::Tensor& logits, float grad_scale,
                                      core::Tensor& dlogits) {
  core::ensure_tensor(backend, dlogits, logits.dims(), logits.dtype());
  if (shape.model.regression())
    return backend.queue_mse_loss(
        {.prediction = logits, .target = b.labels, .grad_scale = grad_scale}, dlogits);
  return backend.queue_softmax_cross_entropy({.logits = logits,
                                              .labels = b.labels,
                                              .class_weights = b.class_weights,
                                              .grad_scale = grad_scale},
                                             dlogits);
}

inline double loss_of(core::Backend& backend, const ModelShape& shape, const Batch& b,
                      const core::Tensor& logits, float grad_scale, core::Tensor& dlogits) {
  return queue_loss_of(backend, shape, b, logits, grad_scale, dlogits).value();
}

inline core::OptimizerConfig adam_config(float weight_decay) {
  core::OptimizerConfig config;
  config.kind = core::OptimizerKind::adam;
  config.weight_decay = weight_decay;
  return config;
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

// CPU seconds the calling thread has used: what a loader takes from a step that shares its core.
inline double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

inline double seconds_between(std::chrono::steady_clock::time_point from,
                              std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// The wall time of each timed training step and of its phases: forward (with the loss), the
// model's backward, and the optimizer.
struct StepPhases {
  std::vector<double> step_s, forward_s, backward_s, optimizer_s;

  void add(std::chrono::steady_clock::time_point start,
           std::chrono::steady_clock::time_point after_forward,
           std::chrono::steady_clock::time_point after_backward,
           std::chrono::steady_clock::time_point end) {
    step_s.push_back(seconds_between(start, end));
    forward_s.push_back(seconds_between(start, after_forward));
    backward_s.push_back(seconds_between(after_forward, after_backward));
    optimizer_s.push_back(seconds_between(after_backward, end));
  }
  // Medians of each and the fastest step, as the benchmarks report them.
  nlohmann::json summary() const {
    return {{"median_s", median(step_s)},
            {"min_s", *std::min_element(step_s.begin(), step_s.end())},
            {"forward_median_s", median(forward_s)},
            {"backward_median_s", median(backward_s)},
            {"optimizer_median_s", median(optimizer_s)}};
  }
};

// What --warmup, --steps, --seed and --lr set: every model benchmark takes them, each with its own
// default step counts.
struct RunFlags {
  int warmup, steps;
  std::uint64_t seed = 1;
  float lr = 1e-3f;
};

// Applies one of the run flags (--warmup, --steps, --seed, --lr); false for other flags.
inline bool apply_run_flag(std::string_view flag, std::string_view value, RunFlags& o) {
  if (flag == "--warmup")
    o.warmup = parse_number<int>(flag, value);
  else if (flag == "--steps")
    o.steps = parse_number<int>(flag, value);
  else if (flag == "--seed")
    o.seed = parse_number<std::uint64_t>(flag, value);
  else if (flag == "--lr")
    o.lr = parse_number<float>(flag, value);
  else
    return false;
  return true;
}

// A benchmark's name and usage text, for --help and for every mistake on its command line.
struct Command {
  const char* program;
  const char* usage;
};

// Prints the message and the usage text and exits with status 2.
[[noreturn]] inline void usage_error(const Command& command, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", command.program, message.c_str());
  std::fputs(command.usage, stderr);
  std::exit(2);
}

// Walks a model benchmark's command line: --help prints the usage and exits 0; a flag named in
// `switches` sets its bool; every other flag takes a value, which the shape flags
// (apply_shape_flag), the run flags (apply_run_flag) and then `own` consume (`own` returns false
// for a flag it does not know). Every mistake ends in usage_error().
template <class Options>
void parse_flags(int argc, char** argv, const Command& command, Options& options,
                 std::initializer_list<std::pair<std::string_view, bool Options::*>> switches,
                 const std::function<bool(std::string_view flag, std::string_view value)>& own) {
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view flag = argv[i];
      if (flag == "--help" || flag == "-h") {
        std::fputs(command.usage, stdout);
        std::exit(0);
      }
      const auto is_switch = std::find_if(switches.begin(), switches.end(),
                                          [&](const auto& s) { return s.first == flag; });
      if (is_switch != switches.end()) {
        options.*(is_switch->second) = true;
        continue;
      }
      if (i + 1 >= argc) usage_error(command, fmt::format("{} needs a value", flag));
      const std::string_view value = argv[++i];
      if (!apply_shape_flag(flag, value, options) && !apply_run_flag(flag, value, options) &&
          !own(flag, value))
        usage_error(command, fmt::format("unknown option {}", flag));
    }
  } catch (const UsageError& e) {
    usage_error(command, e.what());
  }
}

}  // namespace hardy::bench
