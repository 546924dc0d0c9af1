// hardy's training step on the CUDA backend: forward, weighted softmax cross-entropy (CosmoFlow:
// MSE on its 4 targets), backward, Adam, on a fixed random batch, timed after warm-up (which
// includes cuDNN's algorithm search). The step is the trainer's: fp16 runs the dynamic loss scaler
// (the loss gradient scaled, the gradients unscaled and checked for Inf/NaN, an overflowed step
// skipped); bf16 and fp32 check the gradients with a static scale of 1, as training does. Prints
// one JSON line: step time and its phases, the convolution FLOPs of a step, the achieved TFLOP/s of
// the whole step (convolution FLOPs / step time) and of the convolutions alone (convolution FLOPs /
// their GPU time), every operation's GPU time per step and the per-shape convolution table (CUDA
// events around every operation in --profile-steps extra steps); with
// --op-profile also that table as text on stderr. With --peak it measures the device's dense BF16
// peak instead: a large cuBLAS bf16 GEMM with fp32 accumulation. With --converge it trains the job
// of examples/tiny.ini (synthetic climate data, 300 Adam steps) on the CPU and on the GPU from the
// same initial weights and sample order, and reports both loss curves and held-out mean IoUs.
//
//   hardy_gpu_bench --batch 16 --height 256 --width 256 --model-width 32 --precision bf16
//   hardy_gpu_bench --batch 8 --height 768 --width 1152 --model-width 64 --op-profile
//   hardy_gpu_bench --model cosmoflow --volume 128 --batch 4
//   hardy_gpu_bench --peak
//   hardy_gpu_bench --converge [--steps 300]
//
// bench/gpu/bench_gpu.py runs it next to PyTorch (bench/gpu/torch_gpu_step.py) and writes
// bench/results/gpu-<date>.json.
#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../common/bench_support.hpp"
#include "event_timing.hpp"
#include "hardy/core/compute/cuda_backend.hpp"
#include "hardy/core/compute/cuda_runtime.hpp"
#include "hardy/core/data/batch_assembler.hpp"
#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/data/sampler.hpp"
#include "hardy/core/nn/evaluation.hpp"
#include "hardy/core/nn/layers.hpp"
#include "hardy/core/nn/loss_scaler.hpp"
#include "hardy/core/nn/lr_schedule.hpp"
#include "hardy/core/nn/model.hpp"
#include "hardy/core/nn/optimizer.hpp"
#include "hardy/core/support/random.hpp"
#include "op_profile_backend.hpp"

using namespace hardy;

namespace {

struct Options : bench::ModelShape, bench::RunFlags {
  // steps 0: 20, or 300 with --converge
  Options() : ModelShape{16, 256, 256, {}}, RunFlags{.warmup = 5, .steps = 0} {}
  std::string precision;  // empty: HARDY_CUDA_PRECISION or bf16
  int profile_steps = 5;
  float weight_decay = 1e-4f;
  bool peak = false;
  bool converge = false;
  bool op_profile = false;
  int peak_size = 8192;
};

constexpr bench::Command kCommand{
    "hardy_gpu_bench",
    "usage: hardy_gpu_bench [--batch N] [--height H] [--width W] [--input-channels C]\n"
    "         [--classes K] [--model-width W] [--depth D] [--aspp-channels A]\n"
    "         [--aspp-rates 2,4,6] [--low-level-channels L] [--decoder-channels D]\n"
    "         [--groups G] [--norm group|batch] [--precision bf16|fp16|fp32]\n"
    "         [--model compact|tiramisu|deepcam|cosmoflow] [--volume V] (and\n"
    "         hardy_step_bench's model flags)\n"
    "         [--warmup S] [--steps S] [--profile-steps S] [--op-profile] [--seed S]\n"
    "         [--lr LR]\n"
    "       hardy_gpu_bench --peak [--peak-size N]\n"
    "       hardy_gpu_bench --converge [--steps S] [--precision P]\n"};

Options parse(int argc, char** argv) {
  Options o;
  bench::parse_flags(argc, argv, kCommand, o,
                     {{"--peak", &Options::peak},
                      {"--converge", &Options::converge},
                      {"--op-profile", &Options::op_profile}},
                     [&](std::string_view flag, std::string_view value) {
                       if (flag == "--norm")
                         o.model.norm = core::parse_norm_kind(std::string(value));
                       else if (flag == "--precision")
                         o.precision = std::string(value);
                       else if (flag == "--profile-steps")
                         o.profile_steps = bench::parse_number<int>(flag, value);
                       else if (flag == "--peak-size")
                         o.peak_size = bench::parse_number<int>(flag, value);
                       else
                         return false;
                       return true;
                     });
  if (o.steps == 0) o.steps = o.converge ? 300 : 20;
  bench::fix_regression_shape(o);
  if (o.batch < 1 || o.height < 1 || o.width < 1 || o.steps < 1 || o.warmup < 0 ||
      o.profile_steps < 0 || o.peak_size < 256)
    bench::usage_error(kCommand,
                       "sizes and --steps must be positive, --warmup and --profile-steps >= 0, "
                       "--peak-size >= 256");
  return o;
}

// Dense BF16 throughput of this device: C = A * B with n x n bf16 matrices, fp32 accumulation.
int peak(const Options& o) {
  core::CudaBackend cuda;  // selects and initialises the device
  const std::int64_t n = o.peak_size;
  core::Tensor a = cuda.empty({n, n}, core::DType::bf16, core::Layout::flat);
  core::Tensor b = cuda.empty({n, n}, core::DType::bf16, core::Layout::flat);
  core::Tensor c = cuda.empty({n, n}, core::DType::bf16, core::Layout::flat);
  cuda.fill(a, 0.01f);
  cuda.fill(b, 0.01f);
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "hardy_gpu_bench: cublasCreate failed\n");
    return 1;
  }
  cublasSetStream(handle, cuda.stream());
  const float one = 1.0f, zero = 0.0f;
  auto gemm = [&] {
    const auto status =
        cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(n),
                     static_cast<int>(n), &one, a.raw(), CUDA_R_16BF, static_cast<int>(n), b.raw(),
                     CUDA_R_16BF, static_cast<int>(n), &zero, c.raw(), CUDA_R_16BF,
                     static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (status != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasGemmEx failed");
  };
  for (int i = 0; i < 5; ++i) gemm();
  const double seconds =
      bench::event_seconds_per_call(cuda.stream(), 50, gemm, [&] { cuda.synchronize(); });
  cublasDestroy(handle);
  const double flops = 2.0 * static_cast<double>(n) * n * n;
  std::cout << nlohmann::json{{"bench", "hardy_gpu_peak"},
                              {"device", cuda.device_description()},
                              {"gemm", fmt::format("bf16 {}x{}x{}, fp32 accumulation", n, n, n)},
                              {"seconds_per_gemm", seconds},
                              {"tflops", flops / seconds / 1e12}}
                   .dump()
            << std::endl;
  return 0;
}

core::CudaOptions cuda_options(const Options& o) {
  core::CudaOptions options = core::CudaOptions::from_environment();
  if (o.precision.empty()) return options;
  if (o.precision == "bf16")
    options.activation_dtype = core::DType::bf16;
  else if (o.precision == "fp16")
    options.activation_dtype = core::DType::f16;
  else if (o.precision == "fp32")
    options.activation_dtype = core::DType::f32;
  else
    bench::usage_error(kCommand, "--precision must be bf16, fp16 or fp32");
  return options;
}

// examples/tiny.ini's class weights: inverse square roots of the class frequencies of the first
// 64 samples, normalised to an average pixel weight of 1 (core::resolve_class_weights).
std::vector<float> tiny_class_weights(const core::SampleSource& source) {
  const auto frequencies = core::class_frequencies(source, 64);
  std::vector<float> weights;
  double mean_weight = 0;
  for (double frequency : frequencies) {
    const double f = std::max(frequency, 1e-4);
    weights.push_back(static_cast<float>(1.0 / std::sqrt(f)));
    mean_weight += f / std::sqrt(f);
  }
  for (float& w : weights) w = static_cast<float>(w / mean_weight);
  return weights;
}

// The job of examples/tiny.ini on one backend: the loss of every step and the held-out mean IoU.
nlohmann::json train_tiny_job(core::Backend& backend, long steps) {
  const core::SampleShape shape{16, 64, 64};
  const std::uint64_t seed = 7;
  core::SyntheticClimate storage(shape, 512 + 64, seed);
  core::SampleRange train(storage, 0, 512), held_out(storage, 512, 64);
  core::ModelConfig config;  // width 16, depth 1, ASPP 32 at rates 2,4,6, decoder 32, group norm
  core::Model model(backend, config);
  model.initialize(seed);
  auto optimizer = core::make_optimizer(bench::adam_config(1e-4f), backend);
  optimizer->initialize_state(model.parameters());
  core::LrSchedule schedule;
  schedule.base_lr = 0.003f;
  schedule.warmup_steps = 10;
  schedule.total_steps = steps;
  schedule.decay = core::LrSchedule::Decay::cosine;
  core::EpochSampler sampler(train.size(), seed);
  core::BatchAssembler assembler(backend, shape);
  const std::vector<float> class_weights = tiny_class_weights(train);
  constexpr std::size_t global_batch = 8;
  const float grad_scale = 1.0f / static_cast<float>(global_batch * shape.height * shape.width);
  core::Tensor fields, labels, dlogits;
  std::optional<core::LossScaler> scaler;
  std::vector<double> losses;
  long skipped = 0;
  const auto start = bench::Clock::now();
  for (long step = 0; step < steps; ++step) {
    const core::GlobalBatch batch = sampler.next(global_batch);
    assembler.load(train, batch.samples, fields, labels);
    // fp16 activations get dynamic loss scaling, as the trainer does.
    if (!scaler) scaler.emplace(core::LossScalerConfig::for_activations(fields.dtype()));
    const core::Tensor& logits = model.forward(fields, /*training=*/true);
    core::ensure_tensor(backend, dlogits, logits.dims(), logits.dtype());
    const double loss = backend.softmax_cross_entropy({.logits = logits,
                                                       .labels = labels,
                                                       .class_weights = class_weights,
                                                       .grad_scale = grad_scale * scaler->scale()},
                                                      dlogits);
    model.backward(dlogits);
    const bool overflow = scaler->unscale(backend, model.parameters());
    if (scaler->update(overflow))
      optimizer->step(model.parameters(), schedule.at(step));
    else
      ++skipped;
    losses.push_back(loss * grad_scale);
  }
  backend.synchronize();
  const double seconds = std::chrono::duration<double>(bench::Clock::now() - start).count();
  const core::ConfusionMatrix confusion = core::evaluate(model, held_out, 16);
  auto mean = [&](std::size_t begin, std::size_t end) {
    return std::accumulate(losses.begin() + static_cast<std::ptrdiff_t>(begin),
                           losses.begin() + static_cast<std::ptrdiff_t>(end), 0.0) /
           static_cast<double>(end - begin);
  };
  std::vector<double> every_tenth;
  for (std::size_t i = 0; i < losses.size(); i += 10) every_tenth.push_back(losses[i]);
  const std::size_t last = std::min<std::size_t>(10, losses.size());
  return {{"backend", std::string(backend.name())},
          {"activation_dtype", core::to_string(fields.dtype())},
          {"steps", steps},
          {"seconds", seconds},
          {"first_5_mean_loss", mean(0, std::min<std::size_t>(5, losses.size()))},
          {"last_10_mean_loss", mean(losses.size() - last, losses.size())},
          {"loss_every_10_steps", every_tenth},
          {"skipped_steps", skipped},
          {"held_out_mean_iou", confusion.mean_iou()},
          {"held_out_pixel_accuracy", confusion.pixel_accuracy()}};
}

int converge(const Options& o) {
  auto cpu = core::make_backend("cpu");
  core::CudaBackend cuda(cuda_options(o));
  nlohmann::json result{{"bench", "hardy_gpu_converge"},
                        {"device", cuda.device_description()},
                        {"job",
                         "examples/tiny.ini: synthetic climate 16x64x64, 512 samples + 64 "
                         "held out, batch 8, Adam 0.003 with cosine decay, seed 7"},
                        {"cpu", train_tiny_job(*cpu, o.steps)},
                        {"cuda", train_tiny_job(cuda, o.steps)}};
  std::cout << result.dump() << std::endl;
  return 0;
}

int step_benchmark(const Options& o) {
  const core::CudaOptions options = cuda_options(o);
  core::CudaBackend cuda(options);
  bench::OpProfileBackend backend(cuda);
  core::Model model(backend, o.model);
  model.initialize(o.seed);

  // The batch in the dtype the model's layers allocate activations in (ensure_tensor decides);
  // CosmoFlow's cubes and targets for a regression.
  const bench::Batch batch = bench::make_batch(backend, o, o.seed);
  core::Tensor dlogits;
  const float grad_scale = bench::grad_scale_of(o);
  auto optimizer = core::make_optimizer(bench::adam_config(o.weight_decay), backend);
  optimizer->initialize_state(model.parameters());
  core::LossScaler scaler(core::LossScalerConfig::for_activations(batch.fields.dtype()));

  bench::StepPhases phases;
  std::vector<double> losses;
  long skipped = 0;
  const int total = o.warmup + o.steps + o.profile_steps;
  for (int i = 0; i < total; ++i) {
    const bool profiling = i >= o.warmup + o.steps;
    backend.enable(profiling);
    const auto start = bench::Clock::now();
    const core::Tensor& logits = model.forward(batch.fields, /*training=*/true);
    // The loss comes back to the host, which waits for the forward pass.
    const double loss_sum =
        bench::loss_of(backend, o, batch, logits, grad_scale * scaler.scale(), dlogits);
    const auto after_forward = bench::Clock::now();
    model.backward(dlogits);
    backend.synchronize();
    const auto after_backward = bench::Clock::now();
    // As the trainer: unscale and check (one wait for the device), then step or skip.
    if (scaler.update(scaler.unscale(backend, model.parameters())))
      optimizer->step(model.parameters(), o.lr);
    else if (!profiling && i >= o.warmup)
      ++skipped;
    backend.synchronize();
    const auto end = bench::Clock::now();
    losses.push_back(loss_sum * grad_scale);
    if (profiling) backend.collect();
    if (i < o.warmup || profiling) continue;
    phases.add(start, after_forward, after_backward, end);
  }

  // The step as the trainer queues it: the loss read once the step's kernels are queued, the
  // host waiting only at the overflow check and after the update (Trainer::update), --steps
  // steps back to back, timed by the host's clock and by events on the backend's stream (as
  // torch_gpu_step.py times PyTorch's steps). The phases above wait after forward and backward
  // to time them, which this step does not.
  backend.enable(false);
  double back_to_back_s = 0, back_to_back_device_s = 0;
  if (o.steps > 0) {
    std::unique_ptr<core::DeviceSpan> span = backend.start_device_span();
    const auto start = bench::Clock::now();
    for (int i = 0; i < o.steps; ++i) {
      const core::Tensor& logits = model.forward(batch.fields, /*training=*/true);
      core::PendingSum loss_sum =
          bench::queue_loss_of(backend, o, batch, logits, grad_scale * scaler.scale(), dlogits);
      model.backward(dlogits);
      if (scaler.update(scaler.unscale(backend, model.parameters())))
        optimizer->step(model.parameters(), o.lr);
      backend.synchronize();
      losses.push_back(loss_sum.value() * grad_scale);
    }
    span->end();
    back_to_back_s = bench::seconds_between(start, bench::Clock::now()) / o.steps;
    back_to_back_device_s = span->seconds() / o.steps;
  }

  const double step = bench::median(phases.step_s);
  nlohmann::json convolutions = nlohmann::json::array(), operations = nlohmann::json::array();
  double conv_flops_per_step = 0, conv_seconds_per_step = 0, op_seconds_per_step = 0;
  using Rows = std::vector<std::pair<std::string, bench::OpProfileBackend::Entry>>;
  const auto slowest_first = [](const std::map<std::string, bench::OpProfileBackend::Entry>& t) {
    Rows rows(t.begin(), t.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    return rows;
  };
  if (o.profile_steps > 0) {
    conv_flops_per_step = backend.total_flops(backend.convolutions()) / o.profile_steps;
    conv_seconds_per_step = backend.total_seconds(backend.convolutions()) / o.profile_steps;
    op_seconds_per_step = backend.total_seconds(backend.operations()) / o.profile_steps;
    for (const auto& [key, e] : slowest_first(backend.convolutions()))
      convolutions.push_back({{"pass_and_shape", key},
                              {"calls_per_step", static_cast<double>(e.calls) / o.profile_steps},
                              {"ms_per_call", 1e3 * e.seconds / static_cast<double>(e.calls)},
                              {"tflops", e.flops / e.seconds / 1e12}});
    for (const auto& [name, e] : slowest_first(backend.operations()))
      operations.push_back({{"operation", name},
                            {"calls_per_step", static_cast<double>(e.calls) / o.profile_steps},
                            {"ms_per_step", 1e3 * e.seconds / o.profile_steps},
                            {"share_of_step", e.seconds / o.profile_steps / step}});
  }
  nlohmann::json model_shape = core::to_json(o.model);
  model_shape["norm"] = core::to_string(o.model.norm);
  nlohmann::json result{
      {"bench", "hardy_gpu_step"},
      {"device", cuda.device_description()},
      {"activation_dtype", core::to_string(batch.fields.dtype())},
      {"backend_activation_dtype", core::to_string(cuda.activation_dtype())},
      {"cudnn_algorithms", options.benchmark_algorithms ? "benchmark" : "heuristic"},
      {"allow_tf32", options.allow_tf32},
      {"batch", o.batch},
      {"input", bench::input_dims(o)},
      {"model", model_shape},
      {"parameters", model.parameter_count()},
      {"warmup", o.warmup},
      {"steps", o.steps},
      {"conv_flops_per_step", conv_flops_per_step},
      {"conv_gpu_s_per_step", conv_seconds_per_step},
      // Convolutions are counted, everything else (normalization, resampling, loss, Adam) is
      // not: the step figure is a lower bound on the FLOP rate of all the step's arithmetic.
      {"step_tflops", conv_flops_per_step / step / 1e12},
      {"conv_tflops",
       conv_seconds_per_step > 0 ? conv_flops_per_step / conv_seconds_per_step / 1e12 : 0.0},
      {"conv_share_of_step", conv_seconds_per_step / step},
      // GPU time inside operations; the rest of the step is host work and launch gaps.
      {"op_gpu_s_per_step", op_seconds_per_step},
      {"outside_operations_s_per_step", step - op_seconds_per_step},
      {"back_to_back_s", back_to_back_s},
      {"back_to_back_device_s", back_to_back_device_s},
      {"loss_scale", scaler.scale()},
      {"skipped_steps", skipped},
      {"operations", operations},
      {"first_loss", losses.front()},
      {"last_loss", losses.back()},
      {"convolutions", convolutions}};
  result.update(phases.summary());
  if (o.op_profile) {
    std::fprintf(stderr, "%-32s %8s %10s %7s\n", "operation", "calls", "ms/step", "share");
    for (const auto& row : operations)
      std::fprintf(stderr, "%-32s %8.1f %10.3f %6.1f%%\n",
                   row["operation"].get<std::string>().c_str(), row["calls_per_step"].get<double>(),
                   row["ms_per_step"].get<double>(), 100 * row["share_of_step"].get<double>());
    std::fprintf(stderr, "%-32s %8s %10.3f %6.1f%%\n", "(outside operations)", "",
                 1e3 * (step - op_seconds_per_step), 100 * (step - op_seconds_per_step) / step);
  }
  std::cout << result.dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  std::string reason;
  if (core::cuda::usable_device_count(&reason) == 0) {
    std::fprintf(stderr, "hardy_gpu_bench: no CUDA device (%s)\n", reason.c_str());
    return 77;
  }
  try {
    if (options.peak) return peak(options);
    if (options.converge) return converge(options);
    options.model.validate();
    return step_benchmark(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hardy_gpu_bench: %s\n", e.what());
    return 1;
  }
}
