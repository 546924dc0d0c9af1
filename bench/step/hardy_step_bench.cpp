// One full training step of one of hardy's networks (--model compact, the default, tiramisu,
// deepcam or cosmoflow; core/include/hardy/core/nn/model.hpp) on the CPU backend: forward,
// weighted softmax cross-entropy (cosmoflow: MSE), backward, Adam update, on a fixed random batch.
// Warm-up steps (which create and cache the oneDNN primitives) are excluded; the result is one JSON
// line on stdout with median and mean step seconds and the median of each phase.
// bench/step/bench_step.py runs it next to the PyTorch version of the same model
// (bench/step/torch_networks.py).
//
//   build-bench/bin/hardy_step_bench --batch 8 --height 64 --width 64 --threads 2
//   build-bench/bin/hardy_step_bench --model deepcam --batch 2 --height 64 --width 64
//
// --op-profile adds the time per backend operation and shape (bench/step/timing_backend.hpp),
// summed over the timed steps, to stderr. --dump DIR writes the initial model, the batch, the
// loss, logits and gradients of one step and the parameters after one Adam update, for
// tests/core/test_torch_crosscheck.py, and then exits.
#include <fmt/format.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../common/bench_support.hpp"
#include "hardy/checkpoint/model_file.hpp"
#include "hardy/core/compute/backend.hpp"
#include "hardy/core/nn/model.hpp"
#include "hardy/core/nn/optimizer.hpp"
#include "hardy/core/support/hdf5.hpp"
#include "hardy/core/support/random.hpp"
#include "timing_backend.hpp"

using namespace hardy;

namespace {

struct Options : bench::ModelShape, bench::RunFlags {
  Options() : ModelShape{8, 64, 64, {}}, RunFlags{.warmup = 3, .steps = 20} {}
  int threads = 0;  // 0: leave OpenMP's default (OMP_NUM_THREADS or all cores)
  float weight_decay = 1e-4f;
  bool op_profile = false;
  std::filesystem::path dump;
  core::Precision precision = core::Precision::f32;  // --precision f32|bf16
};

constexpr bench::Command kCommand{
    "hardy_step_bench",
    "usage: hardy_step_bench [--batch N] [--height H] [--width W] [--input-channels C]\n"
    "         [--classes K] [--model compact|tiramisu|deepcam|cosmoflow]\n"
    "         [--threads T] [--warmup S] [--steps S] [--seed S] [--lr LR]\n"
    "         [--weight-decay WD] [--precision f32|bf16] [--op-profile] [--dump DIR]\n"
    "       compact (the default): [--model-width W] [--depth D] [--aspp-channels A]\n"
    "         [--aspp-rates 2,4,6] [--low-level-channels L] [--decoder-channels D] [--groups G]\n"
    "         [--norm group|batch]\n"
    "       tiramisu: [--dense-layers 2,2,2,4,5] [--growth G] [--first-channels F]\n"
    "         [--dense-kernel K] [--dropout P]\n"
    "       deepcam: no model flags (the published network)\n"
    "       cosmoflow: [--volume V] (its 4 redshifts in and 4 targets out are fixed; --height\n"
    "         and --width are ignored)\n"};

Options parse(int argc, char** argv) {
  Options o;
  bench::parse_flags(argc, argv, kCommand, o, {{"--op-profile", &Options::op_profile}},
                     [&](std::string_view flag, std::string_view value) {
                       if (flag == "--threads")
                         o.threads = bench::parse_number<int>(flag, value);
                       else if (flag == "--weight-decay")
                         o.weight_decay = bench::parse_number<float>(flag, value);
                       else if (flag == "--dump")
                         o.dump = std::string(value);
                       else if (flag == "--precision")
                         o.precision = core::parse_precision(value);
                       else
                         return false;
                       return true;
                     });
  if (o.batch < 1 || o.height < 1 || o.width < 1 || o.steps < 1 || o.warmup < 0 || o.threads < 0)
    bench::usage_error(
        kCommand,
        "--batch, --height, --width and --steps must be positive, --warmup and --threads >= 0");
  bench::fix_regression_shape(o);
  return o;
}

double mean(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

// A host f32 copy of a tensor in (N, C, [D,] H, W) order (or flat), as the Python side reads it
// (bf16 activations widened).
core::Tensor host_nchw(core::Backend& backend, const core::Tensor& t) {
  core::Tensor host = core::Tensor::host(t.dims(), core::DType::f32,
                                         t.rank() >= 4 ? core::Layout::nchw : core::Layout::flat);
  backend.copy(t, host);
  return host;
}

void write_f32(core::h5::Id parent, const std::string& name, core::Backend& backend,
               const core::Tensor& t) {
  const core::Tensor host = host_nchw(backend, t);
  core::h5::write_dataset<float>(parent, name, host.f32(),
                                 std::vector<core::h5::Extent>(t.dims().begin(), t.dims().end()));
}

nlohmann::json config_json(const Options& o) {
  nlohmann::json config = core::to_json(o.model);
  config["norm_eps"] = o.model.norm_eps;
  return config;
}

// One step on the initial weights, written for tests/core/test_torch_crosscheck.py:
//   DIR/model.h5  the initial parameters (checkpoint::save_model, /model/<name>)
//   DIR/step.h5   /input (N,C,H,W), /labels (N,H,W) i32, /class_weights (a regression:
//                 /input (N,C,D,H,W) and /targets (N,K) instead), /loss (the mean
//                 loss, hardy's loss_sum * grad_scale), /logits (N,K,H,W), /grads/<name>,
//                 /after_step/<name> (parameters after one Adam step at --lr), /buffers/<name>
//                 (batch-norm running statistics after the step's forward), and attributes
//                 config (JSON), lr, weight_decay, parameters and buffers (the names in the
//                 model's order; HDF5 groups list them alphabetically).
int dump_step(const Options& o) {
  auto backend = core::make_backend("cpu", o.precision);
  core::Model model(*backend, o.model);
  model.initialize(o.seed);
  std::filesystem::create_directories(o.dump);
  checkpoint::save_model(model, o.dump / "model.h5");

  const bench::Batch b = bench::make_batch(*backend, o, o.seed);
  const float grad_scale = bench::grad_scale_of(o);
  // cosmoflow's dropout (0.5, as published) draws hardy's hash masks, which torch's random ones
  // cannot match: its step is dumped with the forward pass in inference mode, which only turns
  // dropout off (it has no batch norm).
  const bool training = !o.model.regression();
  const core::Tensor& logits = model.forward(b.fields, training);
  core::Tensor dlogits;
  const double loss_sum = bench::loss_of(*backend, o, b, logits, grad_scale, dlogits);
  model.backward(dlogits);

  namespace h5 = core::h5;
  h5::Handle file = h5::create_file(o.dump / "step.h5");
  h5::write_attribute(file.id(), "config", config_json(o).dump());
  h5::write_attribute(file.id(), "lr", static_cast<double>(o.lr));
  h5::write_attribute(file.id(), "weight_decay", static_cast<double>(o.weight_decay));
  std::vector<std::string> parameter_names, buffer_names;
  for (const core::Parameter* p : model.parameters()) parameter_names.push_back(p->name);
  for (const auto& entry : model.buffers()) buffer_names.push_back(entry.first);
  h5::write_attribute(file.id(), "parameters", parameter_names);
  if (!buffer_names.empty()) h5::write_attribute(file.id(), "buffers", buffer_names);
  write_f32(file.id(), "input", *backend, b.fields);
  if (o.model.regression()) {
    write_f32(file.id(), "targets", *backend, b.labels);
  } else {
    std::vector<std::int32_t> labels(b.labels.data<std::int32_t>(),
                                     b.labels.data<std::int32_t>() + b.labels.numel());
    h5::write_dataset<std::int32_t>(
        file.id(), "labels", labels,
        {static_cast<core::h5::Extent>(o.batch), static_cast<core::h5::Extent>(o.height),
         static_cast<core::h5::Extent>(o.width)});
    h5::write_dataset<float>(file.id(), "class_weights", b.class_weights, {b.class_weights.size()});
  }
  const double loss = loss_sum * grad_scale;
  h5::write_dataset<double>(file.id(), "loss", std::span(&loss, 1), {1});
  write_f32(file.id(), "logits", *backend, logits);
  {
    h5::Handle grads = h5::create_groups(file.id(), "grads");
    for (const core::Parameter* p : model.parameters())
      write_f32(grads.id(), p->name, *backend, p->grad);
  }
  if (!buffer_names.empty()) {
    h5::Handle buffers = h5::create_groups(file.id(), "buffers");
    for (const auto& [name, tensor] : model.buffers())
      write_f32(buffers.id(), name, *backend, *tensor);
  }
  auto optimizer = core::make_optimizer(bench::adam_config(o.weight_decay), *backend);
  optimizer->step(model.parameters(), o.lr);
  {
    h5::Handle after = h5::create_groups(file.id(), "after_step");
    for (const core::Parameter* p : model.parameters())
      write_f32(after.id(), p->name, *backend, p->value);
  }
  file.close();
  std::cout << nlohmann::json{{"dump", o.dump.string()}, {"loss", loss}}.dump() << "\n";
  return 0;
}

int benchmark(const Options& o) {
  auto cpu = core::make_backend("cpu", o.precision);
  bench::TimingBackend timing(*cpu);
  // Without --op-profile the model talks to the CPU backend directly, so that the step time
  // carries no decorator overhead at all.
  core::Backend& backend = o.op_profile ? static_cast<core::Backend&>(timing) : *cpu;
  core::Model model(backend, o.model);
  model.initialize(o.seed);
  const bench::Batch b = bench::make_batch(backend, o, o.seed);
  const float grad_scale = bench::grad_scale_of(o);
  auto optimizer = core::make_optimizer(bench::adam_config(o.weight_decay), backend);

  core::Tensor dlogits;
  bench::StepPhases phases;
  std::vector<double> cpu_s, losses;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    if (i == o.warmup) timing.reset();
    const auto start = bench::Clock::now();
    const double cpu_start = bench::TimingBackend::process_cpu_seconds();
    const core::Tensor& logits = model.forward(b.fields, /*training=*/true);
    const double loss_sum = bench::loss_of(backend, o, b, logits, grad_scale, dlogits);
    backend.synchronize();
    const auto after_forward = bench::Clock::now();
    model.backward(dlogits);
    backend.synchronize();
    const auto after_backward = bench::Clock::now();
    optimizer->step(model.parameters(), o.lr);
    backend.synchronize();
    const auto end = bench::Clock::now();
    const double cpu_end = bench::TimingBackend::process_cpu_seconds();
    losses.push_back(loss_sum * grad_scale);
    if (i < o.warmup) continue;
    phases.add(start, after_forward, after_backward, end);
    cpu_s.push_back(cpu_end - cpu_start);
  }

  const dnnl_version_t* dnnl = dnnl_version();
  nlohmann::json result{
      {"bench", "hardy_step"},
      {"backend", std::string(cpu->name())},
      {"precision", std::string(core::to_string(o.precision))},
      {"onednn_version", fmt::format("{}.{}.{}", dnnl->major, dnnl->minor, dnnl->patch)},
      {"threads", omp_get_max_threads()},
      {"batch", o.batch},
      {"height", o.height},
      {"width", o.width},
      {"model", config_json(o)},
      {"parameters", model.parameter_count()},
      {"warmup", o.warmup},
      {"steps", o.steps},
      {"mean_s", mean(phases.step_s)},
      // CPU time of all threads per step (spin-waiting OpenMP threads included).
      {"cpu_median_s", bench::median(cpu_s)},
      {"first_loss", losses.front()},
      {"last_loss", losses.back()}};
  result.update(phases.summary());
  std::cout << result.dump() << std::endl;

  if (o.op_profile) {
    // Largest first, per step, with the share of the (median) step.
    std::vector<std::pair<std::string, bench::TimingBackend::Entry>> rows(timing.entries().begin(),
                                                                          timing.entries().end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    const double per_step = bench::median(phases.step_s);
    double total = 0;
    for (const auto& row : rows) total += row.second.seconds;
    std::cerr << fmt::format(
        "{:>9} {:>6} {:>9} {:>6}  operation (per step, {} timed steps; ops sum to {:.2f} ms of a "
        "{:.2f} ms median step)\n",
        "wall ms", "%", "cpu ms", "calls", o.steps, 1e3 * total / o.steps, 1e3 * per_step);
    for (const auto& [key, entry] : rows) {
      const double ms = 1e3 * entry.seconds / o.steps;
      std::cerr << fmt::format("{:9.3f} {:6.1f} {:9.3f} {:6.1f}  {}\n", ms,
                               100 * ms / (1e3 * per_step), 1e3 * entry.cpu_seconds / o.steps,
                               static_cast<double>(entry.calls) / o.steps, key);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  if (options.threads > 0) omp_set_num_threads(options.threads);
  try {
    options.model.validate();
    return options.dump.empty() ? benchmark(options) : dump_step(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hardy_step_bench: %s\n", e.what());
    return 1;
  }
}
