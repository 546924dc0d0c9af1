// The input pipeline against the training step that consumes it, on the CPU:
//   load       samples/s of SampleSource::load on one thread (what the step did before),
//   pipeline   samples/s that a SamplePrefetcher with T loader threads delivers to a consumer
//              that does nothing else (the pipeline's capacity),
//   step       samples/s that training steps of the model consume (CPU backend, fixed batch),
//   overlap    training steps fed through the prefetcher, as TrainingSession feeds them: the
//              step time and the share of it spent waiting for data, per loader thread count.
//   copy       the floor: samples/s of a plain memcpy of the bytes a sample's file holds (its
//              fields and labels as stored: 4 bytes a value, packed 2 a field and 1 a label),
//              on as many threads as the
//              pipeline's loaders, each copying from and into buffers of its own; with
//              `pipeline`, what share of a memcpy per core the loaders reach.
// --measure picks which run (default load,pipeline,steps; copy on request): at the full DeepCAM
// grid a CPU training step takes minutes, so a loader comparison leaves the steps out.
// The pipeline keeps up when pipeline >= step and overlap's wait share is near 0. Each
// measurement prints one JSON line.
//
//   build/bin/hardy_pipeline_bench --source synthetic --height 64 --width 64 --batch 8
//       --loader-threads 1,2 --steps 4   (one command line)
//
// --source picks the SampleSource (open_source below): `synthetic` (SyntheticClimate of
// --input-channels x --height x --width), or `deepcam --data ROOT [--downsample K]` (the train
// split of a DeepCAM-layout dataset, e.g. from `hardy data generate --format deepcam`; the
// sample shape comes from the files), or `packed --data ROOT` (the train split `hardy data pack`
// wrote), or `hdf5 --data ROOT` (hardy's own layout, `hardy data generate`). --cache-mib N puts
// the source under a sample cache of N MiB, as `hardy train --cache-mib` does; `load` then loads
// its samples twice and prints both passes (the first misses, the second hits what it kept).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../common/bench_support.hpp"
#include "hardy/core/compute/backend.hpp"
#include "hardy/core/data/batch_assembler.hpp"
#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/data/dataset.hpp"
#include "hardy/core/data/deepcam.hpp"
#include "hardy/core/data/packed_samples.hpp"
#include "hardy/core/data/prefetcher.hpp"
#include "hardy/core/data/sample_cache.hpp"
#include "hardy/core/data/sampler.hpp"
#include "hardy/core/nn/model.hpp"
#include "hardy/core/nn/optimizer.hpp"

using namespace hardy;
using Clock = std::chrono::steady_clock;
using bench::seconds_between;

namespace {

struct Options : bench::ModelShape, bench::RunFlags {
  Options() : ModelShape{8, 64, 64, {}}, RunFlags{.warmup = 1, .steps = 4} {}
  std::string source = "synthetic";
  std::string data;               // --source deepcam: the dataset root
  int downsample = 1;             // --source deepcam
  std::size_t samples = 256;      // the source's size (synthetic)
  std::size_t cache_mib = 0;      // a sample cache over the source, 0: none
  std::size_t load_samples = 32;  // loaded by the load and pipeline measurements
  std::vector<int> loader_threads{1, 2};
  int prefetch_batches = 2;
  int threads = 0;  // OpenMP threads of the step, 0: OpenMP's default
  std::vector<std::string> measure{"load", "pipeline", "steps"};
  bool measures(std::string_view name) const {
    return std::find(measure.begin(), measure.end(), name) != measure.end();
  }
};

constexpr bench::Command kCommand{
    "hardy_pipeline_bench",
    "usage: hardy_pipeline_bench [--source synthetic|deepcam|packed|hdf5] [--data ROOT]\n"
    "         [--downsample K] [--samples N] [--load-samples N] [--cache-mib N]\n"
    "         [--batch N] [--height H] [--width W] [--input-channels C] [--model-width W]\n"
    "         [--aspp-channels A] [--decoder-channels D] [--low-level-channels L]\n"
    "         [--model compact|tiramisu|deepcam] (and hardy_step_bench's model flags)\n"
    "         [--loader-threads 1,2] [--prefetch-batches K] [--threads T] [--warmup S]\n"
    "         [--steps S] [--seed S] [--measure load,copy,pipeline,steps]\n"};

std::vector<std::string> parse_measurements(std::string_view text) {
  std::vector<std::string> names;
  for (std::size_t begin = 0; begin <= text.size();) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string name(text.substr(begin, end - begin));
    if (name != "load" && name != "copy" && name != "pipeline" && name != "steps")
      bench::usage_error(kCommand, fmt::format("--measure: unknown measurement '{}' (load, copy, "
                                               "pipeline, steps)",
                                               name));
    names.push_back(name);
    begin = end + 1;
  }
  return names;
}

Options parse(int argc, char** argv) {
  Options o;
  bench::parse_flags(argc, argv, kCommand, o, {},
                     [&](std::string_view flag, std::string_view value) {
                       using bench::parse_number;
                       if (flag == "--source")
                         o.source = std::string(value);
                       else if (flag == "--data")
                         o.data = std::string(value);
                       else if (flag == "--downsample")
                         o.downsample = parse_number<int>(flag, value);
                       else if (flag == "--samples")
                         o.samples = parse_number<std::size_t>(flag, value);
                       else if (flag == "--cache-mib")
                         o.cache_mib = parse_number<std::size_t>(flag, value);
                       else if (flag == "--load-samples")
                         o.load_samples = parse_number<std::size_t>(flag, value);
                       else if (flag == "--loader-threads")
                         o.loader_threads = bench::parse_rates(flag, value);
                       else if (flag == "--prefetch-batches")
                         o.prefetch_batches = parse_number<int>(flag, value);
                       else if (flag == "--threads")
                         o.threads = parse_number<int>(flag, value);
                       else if (flag == "--measure")
                         o.measure = parse_measurements(value);
                       else
                         return false;
                       return true;
                     });
  if (o.batch < 1 || o.steps < 1 || o.warmup < 0 || o.threads < 0 || o.prefetch_batches < 1 ||
      o.load_samples < 1 || o.samples < static_cast<std::size_t>(o.batch))
    bench::usage_error(kCommand,
                       "--batch, --steps, --prefetch-batches and --load-samples must be positive, "
                       "--samples at least --batch");
  return o;
}

// The one place that knows the sources; DeepCAM's reader joins here.
std::unique_ptr<core::SampleSource> open_source(const Options& o) {
  if (o.source == "synthetic")
    return std::make_unique<core::SyntheticClimate>(
        core::SampleShape{o.model.input_channels, o.height, o.width}, o.samples, o.seed);
  if (o.source == "deepcam") {
    if (o.data.empty()) bench::usage_error(kCommand, "--source deepcam needs --data ROOT");
    core::DeepCamOptions options;
    options.downsample = o.downsample;
    return std::make_unique<core::DeepCamDataset>(o.data, "train", options);
  }
  if (o.source == "packed") {
    if (o.data.empty()) bench::usage_error(kCommand, "--source packed needs --data ROOT");
    return std::make_unique<core::PackedSamples>(o.data, "train");
  }
  if (o.source == "hdf5") {
    if (o.data.empty()) bench::usage_error(kCommand, "--source hdf5 needs --data ROOT");
    return std::make_unique<core::Hdf5Dataset>(o.data);
  }
  bench::usage_error(
      kCommand,
      fmt::format("unknown --source {} (available: synthetic, deepcam, packed, hdf5)", o.source));
}

std::unique_ptr<core::SampleSource> open_cached_source(const Options& o) {
  auto source = open_source(o);
  if (o.cache_mib == 0) return source;
  return std::make_unique<core::CachedSamples>(std::move(source), o.cache_mib << 20);
}

// What one sample's file holds: bf16 fields and int8 labels when packed, else 4 bytes a value.
std::size_t stored_bytes_per_sample(const Options& o, const core::SampleSource& source) {
  const auto shape = source.shape();
  return o.source == "packed" ? 2 * shape.field_elements() + shape.label_elements()
                              : (shape.field_elements() + shape.label_elements()) * sizeof(float);
}

nlohmann::json common_fields(const Options& o, const core::SampleSource& source,
                             const std::string& measurement) {
  return {{"bench", "hardy_pipeline"},
          {"measurement", measurement},
          {"source", source.describe()},
          {"sample_shape", core::to_string(source.shape())},
          {"sample_mib", static_cast<double>(source.shape().field_elements() * sizeof(float) +
                                             source.shape().label_elements() * 4) /
                             (1 << 20)},
          {"batch", o.batch}};
}

// Sample indices in the order an epoch sampler hands them out, batch after batch.
std::vector<std::size_t> planned_samples(const core::SampleSource& source, std::size_t count,
                                         std::uint64_t seed) {
  core::EpochSampler sampler(source.size(), seed);
  return sampler.next(count).samples;
}

void measure_load(const Options& o, const core::SampleSource& source) {
  const auto plan = planned_samples(source, o.load_samples, o.seed);
  std::vector<float> fields(source.shape().field_elements());
  std::vector<std::int32_t> labels(source.shape().label_elements());
  // A cache's second pass hits what the first kept.
  const int passes = o.cache_mib > 0 ? 2 : 1;
  for (int pass = 1; pass <= passes; ++pass) {
    const double cpu_before = bench::thread_cpu_seconds();
    const auto start = Clock::now();
    for (std::size_t index : plan) source.load(index, fields, labels);
    const double seconds = seconds_between(start, Clock::now());
    const double cpu = bench::thread_cpu_seconds() - cpu_before;
    auto line = common_fields(o, source, "load");
    line["pass"] = pass;
    line["cache_mib"] = o.cache_mib;
    line["samples"] = plan.size();
    line["samples_per_s"] = static_cast<double>(plan.size()) / seconds;
    line["cpu_ms_per_sample"] = 1e3 * cpu / static_cast<double>(plan.size());
    std::cout << line.dump() << std::endl;
  }
}

void measure_pipeline(const Options& o, const core::SampleSource& source, int threads) {
  const auto plan = planned_samples(source, o.load_samples, o.seed);
  core::SamplePrefetcher prefetcher(source, threads,
                                    static_cast<std::size_t>(o.prefetch_batches * o.batch));
  std::vector<float> fields(source.shape().field_elements());
  std::vector<std::int32_t> labels(source.shape().label_elements());
  const auto start = Clock::now();
  prefetcher.announce(plan);
  for (std::size_t index : plan) prefetcher.take(index, fields, labels);
  const double seconds = seconds_between(start, Clock::now());
  auto line = common_fields(o, source, "pipeline");
  line["loader_threads"] = prefetcher.workers();
  line["samples"] = plan.size();
  line["samples_per_s"] = static_cast<double>(plan.size()) / seconds;
  line["samples_per_s_per_thread"] =
      static_cast<double>(plan.size()) / seconds / std::max(1, prefetcher.workers());
  std::cout << line.dump() << std::endl;
}

// A sample's stored bytes copied with memcpy by `threads` threads at once, load_samples copies in
// all, each thread between buffers of its own (touched first, so no page is faulted in the
// clock).
void measure_copy(const Options& o, const core::SampleSource& source, int threads) {
  const std::size_t bytes = stored_bytes_per_sample(o, source);
  std::vector<std::vector<std::byte>> from(static_cast<std::size_t>(threads)),
      into(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    from[static_cast<std::size_t>(t)].assign(bytes, std::byte{0x3f});
    into[static_cast<std::size_t>(t)].assign(bytes, std::byte{0});
  }
  const std::size_t per_thread =
      (o.load_samples + static_cast<std::size_t>(threads) - 1) / static_cast<std::size_t>(threads);
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      auto& in = from[static_cast<std::size_t>(t)];
      auto& out = into[static_cast<std::size_t>(t)];
      for (std::size_t i = 0; i < per_thread; ++i) std::memcpy(out.data(), in.data(), bytes);
    });
  for (auto& worker : workers) worker.join();
  const double seconds = seconds_between(start, Clock::now());
  auto line = common_fields(o, source, "copy");
  line["threads"] = threads;
  line["samples"] = per_thread * static_cast<std::size_t>(threads);
  line["bytes_per_sample"] = bytes;
  line["samples_per_s"] =
      static_cast<double>(per_thread * static_cast<std::size_t>(threads)) / seconds;
  line["samples_per_s_per_thread"] = static_cast<double>(per_thread) / seconds;
  std::cout << line.dump() << std::endl;
}

// Training steps as TrainingSession takes them on one rank: draw the batch, announce it and the
// next prefetch_batches batches (loader_threads 0: load in the step), assemble, forward, loss,
// backward, Adam.
void measure_steps(const Options& o, const core::SampleSource& source, int loader_threads) {
  auto backend = core::make_backend("cpu");
  core::Model model(*backend, o.model);
  model.initialize(o.seed);
  auto optimizer = core::make_optimizer(core::OptimizerConfig{}, *backend);
  optimizer->initialize_state(model.parameters());
  core::BatchAssembler assembler(*backend, source.shape());
  const auto batch = static_cast<std::size_t>(o.batch);
  core::SamplePrefetcher prefetcher(source, loader_threads,
                                    static_cast<std::size_t>(o.prefetch_batches) * batch);
  core::EpochSampler sampler(source.size(), o.seed);
  const std::vector<float> class_weights(static_cast<std::size_t>(o.model.num_classes), 1.0f);
  const float grad_scale = 1.0f / static_cast<float>(batch * o.height * o.width);
  core::Tensor fields, labels, dlogits;
  double step_total = 0, wait_total = 0;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    const auto start = Clock::now();
    const auto current = sampler.next(batch);
    std::vector<std::size_t> plan = current.samples;
    core::EpochSampler ahead = sampler;
    for (int k = 0; k < o.prefetch_batches; ++k) {
      const auto next = ahead.next(batch).samples;
      plan.insert(plan.end(), next.begin(), next.end());
    }
    prefetcher.announce(plan);
    const auto input = assembler.load(prefetcher, current.samples, fields, labels);
    const core::Tensor& logits = model.forward(fields, /*training=*/true);
    core::ensure_tensor(*backend, dlogits, logits.dims());
    backend->softmax_cross_entropy({.logits = logits,
                                    .labels = labels,
                                    .class_weights = class_weights,
                                    .grad_scale = grad_scale},
                                   dlogits);
    model.backward(dlogits);
    optimizer->step(model.parameters(), o.lr);
    backend->synchronize();
    if (i < o.warmup) continue;
    step_total += seconds_between(start, Clock::now());
    wait_total += input.data_wait_s;
  }
  auto line = common_fields(o, source, loader_threads == 0 ? "step_loading_inline" : "overlap");
  line["loader_threads"] = prefetcher.workers();
  line["omp_threads"] = omp_get_max_threads();
  line["model_width"] = o.model.width;
  line["steps"] = o.steps;
  line["step_s"] = step_total / o.steps;
  line["data_wait_s"] = wait_total / o.steps;
  line["data_wait_fraction"] = wait_total / step_total;
  // The step's consumption without its wait for data: what the pipeline must deliver.
  line["compute_samples_per_s"] =
      static_cast<double>(o.batch) * o.steps / (step_total - wait_total);
  line["samples_per_s"] = static_cast<double>(o.batch) * o.steps / step_total;
  std::cout << line.dump() << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  Options options = parse(argc, argv);
  if (options.threads > 0) omp_set_num_threads(options.threads);
  try {
    options.model.validate();
    const auto source = open_cached_source(options);
    options.height = source->shape().height;  // the model trains on what the source gives
    options.width = source->shape().width;
    if (source->shape().channels != options.model.input_channels)
      throw std::runtime_error(fmt::format("{} has {} channels, the model takes {}",
                                           source->describe(), source->shape().channels,
                                           options.model.input_channels));
    if (options.measures("load")) measure_load(options, *source);
    for (int threads : options.loader_threads) {
      // Side by side: the floor, then the loaders, at each thread count.
      if (options.measures("copy")) measure_copy(options, *source, threads);
      if (options.measures("pipeline")) measure_pipeline(options, *source, threads);
    }
    if (options.measures("steps")) {
      measure_steps(options, *source, 0);
      for (int threads : options.loader_threads) measure_steps(options, *source, threads);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hardy_pipeline_bench: %s\n", e.what());
    return 1;
  }
}
