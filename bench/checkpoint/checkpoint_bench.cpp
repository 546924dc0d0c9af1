// What a checkpoint costs, for models of several sizes (DeepLabv3+ with its channel counts scaled
// up, Adam, so a checkpoint holds three floats per parameter):
//   capture   the training thread's stall: copying model and optimizer state to host buffers,
//             fresh ones (capture) and reused ones (capture_into a CheckpointWriter::take_spare)
//   write     hardy's checkpoint: save_checkpoint (HDF5 file, checksums, fsync, rename,
//             directory fsync, `latest`), from the captured state
//   plain     a plain sequential write of the same number of bytes to the same directory:
//             write(2) in 64 MiB pieces, then fsync
//   read      read_checkpoint: reading and validating every checksum
//   snapshot  a node-local snapshot: SnapshotSlots::write of the captured state into the
//             directory's slot files (copy into mapped pages, XXH3), as the snapshot writer's
//             thread does every step, wall and thread CPU time
//   copy      a plain memcpy of the same tensors into one preallocated buffer: the snapshot's floor
//   step      one training step (forward, loss, backward, Adam) on a small batch, for the stall
//             relative to a step
// Each is the best (least disturbed by other load) of --repeats runs, medians and raw runs are
// in the output too; write and plain alternate their order. Prints one JSON object with
// a record per size on stdout; bench/checkpoint/bench_checkpoint.py runs it, adds torch.save
// of the same tensors and prints the table. With --keep DIR the last checkpoint of each size
// stays in DIR as size-<parameters>.h5 for that comparison.
//
//   build/bin/hardy_checkpoint_bench --sizes 0.15,5,50 --repeats 5 --dir /path/on/the/disk
#include <fcntl.h>
#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hardy/checkpoint/checkpoint_directory.hpp"
#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/checkpoint/snapshot_file.hpp"
#include "hardy/checkpoint/training_state.hpp"
#include "hardy/core/compute/backend.hpp"
#include "hardy/core/nn/model.hpp"
#include "hardy/core/nn/optimizer.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/process_info.hpp"
#include "hardy/core/support/random.hpp"

using namespace hardy;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::vector<double> sizes{0.15, 5, 50};  // millions of parameters
  int repeats = 5;
  fs::path dir = fs::temp_directory_path() / "hardy-checkpoint-bench";
  fs::path keep;
  int step_batch = 8, step_image = 64, step_repeats = 3;  // hardy train's default batch
  int threads = 0;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(
      stderr,
      "hardy_checkpoint_bench: %s\nusage: hardy_checkpoint_bench [--sizes 0.15,5,50] [--repeats N] "
      "[--dir DIR] [--keep DIR] [--step-batch N] [--step-image PIXELS] [--step-repeats N] "
      "[--threads T]\n",
      message.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h")
      usage_error("measures checkpoint costs; see the comment at the top of the source");
    if (i + 1 >= argc) usage_error(arg + " needs a value");
    const std::string value = argv[++i];
    try {
      if (arg == "--sizes") {
        options.sizes.clear();
        for (std::size_t begin = 0; begin <= value.size();) {
          const std::size_t end = std::min(value.find(',', begin), value.size());
          options.sizes.push_back(std::stod(value.substr(begin, end - begin)));
          begin = end + 1;
        }
      } else if (arg == "--repeats") {
        options.repeats = std::stoi(value);
      } else if (arg == "--dir") {
        options.dir = value;
      } else if (arg == "--keep") {
        options.keep = value;
      } else if (arg == "--step-batch") {
        options.step_batch = std::stoi(value);
      } else if (arg == "--step-image") {
        options.step_image = std::stoi(value);
      } else if (arg == "--step-repeats") {
        options.step_repeats = std::stoi(value);
      } else if (arg == "--threads") {
        options.threads = std::stoi(value);
      } else {
        usage_error("unknown option " + arg);
      }
    } catch (const std::logic_error&) {
      usage_error("bad value '" + value + "' for " + arg);
    }
  }
  if (options.repeats < 1) usage_error("--repeats must be at least 1");
  return options;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Snapshots are written every step: many more repeats than a checkpoint, so the best is steady.
constexpr int kSnapshotRepeatsPerRepeat = 20;

double best(const std::vector<double>& values) {
  return *std::min_element(values.begin(), values.end());
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// The default model's channel counts scaled by one factor, so that parameters grow with its
// square; counts stay multiples of 8 (the normalization groups).
core::ModelConfig scaled_model(double millions) {
  const double factor = std::sqrt(millions / 0.151);
  const auto channels = [&](int base) {
    return std::max(8, static_cast<int>(std::lround(base * factor / 8)) * 8);
  };
  core::ModelConfig config;
  config.width = channels(16);
  config.aspp_channels = channels(32);
  config.low_level_channels = channels(16);
  config.decoder_channels = channels(32);
  return config;
}

// write(2) of all the bytes in 64 MiB pieces, then fsync: what any program writing that much
// to this directory would take.
double plain_write(const fs::path& path, const std::vector<std::byte>& bytes) {
  const auto start = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw IoError(fmt::format("cannot create {}: {}", path.string(), std::strerror(errno)));
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n =
        ::write(fd, bytes.data() + done, std::min<std::size_t>(bytes.size() - done, 64 << 20));
    if (n < 0)
      throw IoError(fmt::format("writing {} failed: {}", path.string(), std::strerror(errno)));
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0)
    throw IoError(fmt::format("cannot sync {}", path.string()));
  return seconds_since(start);
}

// Best seconds of one training step on a random batch, after one warm-up step.
double step_seconds(core::Backend& backend, core::Model& model, core::Optimizer& optimizer,
                    const Options& options) {
  const std::vector<std::int64_t> dims{options.step_batch, 16, options.step_image,
                                       options.step_image};
  core::Tensor host = core::Tensor::host(dims, core::DType::f32, backend.activation_layout());
  core::SplitMix64 rng(3);
  for (float& v : host.f32()) v = static_cast<float>(rng.normal());
  core::Tensor x = backend.empty(dims, core::DType::f32, backend.activation_layout());
  backend.copy(host, x);
  core::Tensor labels =
      backend.empty({dims[0], 1, dims[2], dims[3]}, core::DType::i32, backend.activation_layout());
  for (std::int64_t i = 0; i < labels.numel(); ++i)
    labels.data<std::int32_t>()[i] = static_cast<int>(rng.next() % 3);
  const std::vector<float> weights{1.0f, 1.0f, 1.0f};
  core::Tensor dlogits;
  std::vector<double> times;
  for (int s = 0; s <= options.step_repeats; ++s) {
    const auto start = Clock::now();
    const core::Tensor& logits = model.forward(x, true);
    if (!dlogits.defined())
      dlogits = backend.empty(logits.dims(), core::DType::f32, logits.layout());
    backend.softmax_cross_entropy({.logits = logits,
                                   .labels = labels,
                                   .class_weights = weights,
                                   .grad_scale = 1.0f / static_cast<float>(labels.numel())},
                                  dlogits);
    model.backward(dlogits);
    optimizer.step(model.parameters(), 1e-4f);
    backend.synchronize();
    if (s > 0) times.push_back(seconds_since(start));  // the first step creates oneDNN's primitives
  }
  return best(times);
}

nlohmann::json measure(double millions, const Options& options) {
  auto backend = core::make_backend("cpu");
  core::Model model(*backend, scaled_model(millions));
  model.initialize(1);
  core::OptimizerConfig optimizer_config;
  optimizer_config.kind = core::OptimizerKind::adam;
  auto optimizer = core::make_optimizer(optimizer_config, *backend);
  const double step_s =
      options.step_repeats > 0 ? step_seconds(*backend, model, *optimizer, options) : 0.0;

  std::vector<double> capture_fresh, capture_reuse, write, plain, read;
  checkpoint::TrainingState state;
  for (int r = 0; r < options.repeats; ++r) {
    auto start = Clock::now();
    state = checkpoint::capture(model, *optimizer);
    capture_fresh.push_back(seconds_since(start));
    start = Clock::now();
    checkpoint::capture_into(model, *optimizer, state);
    capture_reuse.push_back(seconds_since(start));
  }
  state.step = 1;
  state.world_size = 1;
  state.hosts = {"bench"};
  const fs::path dir = options.dir / fmt::format("size-{}", model.parameter_count());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::uint64_t bytes = 0;
  std::vector<std::byte> plain_bytes;
  for (int r = 0; r < options.repeats; ++r) {
    state.step = r + 1;
    const auto written = [&] {
      const auto start = Clock::now();
      const auto saved = checkpoint::save_checkpoint(
          state, dir, {.keep_last = options.repeats + 1, .keep_every = 0});
      write.push_back(seconds_since(start));
      bytes = saved.bytes;
    };
    const auto plainly = [&] {
      if (plain_bytes.size() != bytes) plain_bytes.assign(bytes, std::byte{0x5a});
      plain.push_back(plain_write(dir / "plain.bin", plain_bytes));
      fs::remove(dir / "plain.bin");
    };
    if (r == 0 || r % 2 == 1) {  // the first write sizes the plain one
      written();
      plainly();
    } else {
      plainly();
      written();
    }
    const auto start = Clock::now();
    const auto restored = checkpoint::read_checkpoint(checkpoint::checkpoint_path(dir, state.step));
    read.push_back(seconds_since(start));
    if (r > 0)
      fs::remove(checkpoint::checkpoint_path(dir, r));  // keep the disk's fill level steady
  }
  std::vector<double> snapshot, snapshot_cpu, copy;
  std::uint64_t snapshot_bytes = 0;
  {
    const fs::path snapshots = dir / "snapshots";
    fs::create_directories(snapshots);
    checkpoint::SnapshotSlots slots(snapshots);
    std::vector<std::byte> floor(checkpoint::tensor_bytes(state));
    for (int r = 0; r < options.repeats * kSnapshotRepeatsPerRepeat; ++r) {
      state.step = r + 1;
      const double cpu_start = core::thread_cpu_seconds();
      auto start = Clock::now();
      snapshot_bytes = slots.write(state).bytes;
      snapshot.push_back(seconds_since(start));
      snapshot_cpu.push_back(core::thread_cpu_seconds() - cpu_start);
      start = Clock::now();
      std::byte* out = floor.data();
      for (const auto* tensors : {&state.model, &state.optimizer})
        for (const checkpoint::NamedTensor& tensor : *tensors) {
          std::memcpy(out, tensor.values.data(), tensor.values.size() * sizeof(float));
          out += tensor.values.size() * sizeof(float);
        }
      copy.push_back(seconds_since(start));
    }
  }
  if (!options.keep.empty()) {
    fs::create_directories(options.keep);
    fs::copy_file(checkpoint::checkpoint_path(dir, options.repeats),
                  options.keep / fmt::format("size-{}.h5", model.parameter_count()),
                  fs::copy_options::overwrite_existing);
  }
  fs::remove_all(dir);

  const double write_s = best(write), plain_s = best(plain), capture_s = best(capture_fresh),
               capture_reuse_s = best(capture_reuse);
  return {{"parameters", model.parameter_count()},
          {"model",
           {{"width", model.config().width},
            {"aspp_channels", model.config().aspp_channels},
            {"decoder_channels", model.config().decoder_channels},
            {"low_level_channels", model.config().low_level_channels}}},
          {"tensors", state.model.size() + state.optimizer.size()},
          {"tensor_bytes", checkpoint::tensor_bytes(state)},
          {"file_bytes", bytes},
          {"capture_s", capture_s},
          {"capture_reuse_s", capture_reuse_s},
          {"write_s", write_s},
          {"plain_write_s", plain_s},
          {"bandwidth_ratio", plain_s / write_s},
          {"write_mb_per_s", static_cast<double>(bytes) / write_s / 1e6},
          {"plain_mb_per_s", static_cast<double>(bytes) / plain_s / 1e6},
          {"read_s", best(read)},
          {"snapshot_bytes", snapshot_bytes},
          {"snapshot_s", best(snapshot)},
          {"snapshot_cpu_s", best(snapshot_cpu)},
          {"copy_s", best(copy)},
          {"step_s", step_s},
          {"step", {{"batch", options.step_batch}, {"image", options.step_image}}},
          {"stall_per_step", step_s > 0 ? capture_s / step_s : 0.0},
          {"stall_reuse_per_step", step_s > 0 ? capture_reuse_s / step_s : 0.0},
          {"median",
           {{"capture_s", median(capture_fresh)},
            {"capture_reuse_s", median(capture_reuse)},
            {"write_s", median(write)},
            {"plain_write_s", median(plain)},
            {"read_s", median(read)},
            {"snapshot_s", median(snapshot)},
            {"snapshot_cpu_s", median(snapshot_cpu)},
            {"copy_s", median(copy)}}},
          {"raw",
           {{"capture_s", capture_fresh},
            {"capture_reuse_s", capture_reuse},
            {"write_s", write},
            {"plain_write_s", plain},
            {"read_s", read},
            {"snapshot_s", snapshot},
            {"copy_s", copy}}}};
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  if (options.threads > 0) omp_set_num_threads(options.threads);
  try {
    fs::create_directories(options.dir);
    nlohmann::json results = {{"dir", fs::absolute(options.dir).string()},
                              {"repeats", options.repeats},
                              {"threads", omp_get_max_threads()},
                              {"sizes", nlohmann::json::array()}};
    for (double millions : options.sizes) {
      std::fprintf(stderr, "hardy_checkpoint_bench: %.2fM parameters...\n", millions);
      results["sizes"].push_back(measure(millions, options));
    }
    std::cout << results.dump() << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hardy_checkpoint_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
