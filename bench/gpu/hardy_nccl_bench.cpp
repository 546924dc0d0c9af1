// NCCL bandwidth as hardy uses it: in-place allreduce of float buffers from 1 MiB to 1 GiB, the
// bucketed gradient allreduce of a DeepLabv3+ model's gradients (NcclGradientBuckets, 25 MiB
// buckets), and the restore broadcast of its weights and Adam state (broadcast_tensors).
// Prints one JSON line with, per size, the time per operation, the algorithm bandwidth
// (bytes / time) and the bus bandwidth (nccl-tests' definition: allreduce algbw * 2 (n-1) / n,
// broadcast algbw), which is what compares against the interconnect's speed.
//
// Under mpirun (one rank per GPU) MPI bootstraps NCCL, as in training. Started directly it runs
// one rank without initialising MPI: NCCL then moves data within one GPU only, so its numbers
// show NCCL's per-call overhead, not any interconnect.
//
//   hardy_nccl_bench [--model-width 32] [--iterations 20]
//   mpirun -n 8 hardy_nccl_bench
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "event_timing.hpp"
#include "hardy/comm/mpi/communicator.hpp"
#include "hardy/comm/nccl/communicator.hpp"
#include "hardy/comm/nccl/gradient_buckets.hpp"
#include "hardy/comm/self_communicator.hpp"
#include "hardy/core/compute/cuda_backend.hpp"
#include "hardy/core/nn/model.hpp"
#include "hardy/core/nn/optimizer.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy;

namespace {

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

// Seconds per call of `enqueue` (queued `iterations` times on comm's stream, after 3 warm-up
// calls), timed with CUDA events on that stream.
template <class Enqueue>
double time_per_call(comm::NcclCommunicator& comm, int iterations, Enqueue&& enqueue) {
  for (int i = 0; i < 3; ++i) enqueue();
  comm.synchronize();
  return bench::event_seconds_per_call(comm.stream(), iterations, enqueue,
                                       [&] { comm.synchronize(); });
}

int run(int argc, char** argv) {
  int model_width = 32, iterations = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i], value = argv[i + 1];
    int number = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (error != std::errc{} || end != value.data() + value.size() || number < 1) {
      std::fprintf(stderr, "hardy_nccl_bench: %s expects a positive integer\n", argv[i]);
      return 2;
    }
    if (flag == "--model-width")
      model_width = number;
    else if (flag == "--iterations")
      iterations = number;
    else {
      std::fprintf(stderr, "usage: hardy_nccl_bench [--model-width W] [--iterations N]\n");
      return 2;
    }
  }

  std::unique_ptr<comm::MpiSession> mpi;
  std::unique_ptr<comm::Communicator> bootstrap;
  if (launched_by_mpi()) {
    mpi = std::make_unique<comm::MpiSession>(&argc, &argv);
    bootstrap = comm::MpiCommunicator::world();
  } else {
    bootstrap = std::make_unique<comm::SelfCommunicator>();
  }
  core::CudaBackend cuda;  // one GPU per node-local rank
  auto nccl = comm::NcclCommunicator::create(*bootstrap);
  const double ranks = nccl->size();
  const double bus_factor = ranks > 1 ? 2.0 * (ranks - 1) / ranks : 1.0;

  nlohmann::json allreduce = nlohmann::json::array();
  for (std::size_t bytes = std::size_t{1} << 20; bytes <= std::size_t{1} << 30; bytes <<= 2) {
    core::Tensor data =
        cuda.empty({static_cast<std::int64_t>(bytes / 4)}, core::DType::f32, core::Layout::flat);
    cuda.synchronize();
    const double seconds = time_per_call(
        *nccl, iterations, [&] { nccl->allreduce_sum(data.data<float>(), bytes / 4); });
    allreduce.push_back({{"bytes", bytes},
                         {"seconds", seconds},
                         {"algbw_gb_s", static_cast<double>(bytes) / seconds / 1e9},
                         {"busbw_gb_s", static_cast<double>(bytes) / seconds / 1e9 * bus_factor}});
  }

  // A model's gradients through the trainer's bucketing, and its state through the restore
  // broadcast.
  core::ModelConfig config;
  config.width = model_width;
  config.aspp_channels = 2 * model_width;
  config.decoder_channels = 2 * model_width;
  core::Model model(cuda, config);
  const auto& params = model.parameters();
  comm::NcclGradientBuckets buckets(*nccl, cuda, cuda.stream(), {params.rbegin(), params.rend()});
  double gradient_bytes = 0;
  for (const core::Parameter* p : params) gradient_bytes += static_cast<double>(p->grad.bytes());
  std::vector<double> bucket_seconds;
  for (int i = 0; i < iterations + 3; ++i) {
    cuda.synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t k = 0; k < params.size(); ++k) buckets.mark_ready(k);
    buckets.finish(1.0f);
    cuda.synchronize();
    if (i >= 3)
      bucket_seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(bucket_seconds.begin(), bucket_seconds.end());
  const double bucket_median = bucket_seconds[bucket_seconds.size() / 2];

  core::OptimizerConfig adam;
  adam.kind = core::OptimizerKind::adam;
  auto optimizer = core::make_optimizer(adam, cuda);
  optimizer->initialize_state(params);
  std::vector<core::Tensor*> state;
  for (core::Parameter* p : params) state.push_back(&p->value);
  for (auto& [name, tensor] : optimizer->state_tensors()) state.push_back(tensor);
  double state_bytes = 0;
  for (const core::Tensor* t : state) state_bytes += static_cast<double>(t->bytes());
  std::vector<double> broadcast_seconds;
  for (int i = 0; i < iterations + 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    comm::broadcast_tensors(*nccl, cuda.stream(), state, 0);
    if (i >= 3)
      broadcast_seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(broadcast_seconds.begin(), broadcast_seconds.end());
  const double broadcast_median = broadcast_seconds[broadcast_seconds.size() / 2];

  if (bootstrap->rank() == 0)
    std::cout
        << nlohmann::json{{"bench", "hardy_nccl"},
                          {"device", cuda.device_description()},
                          {"ranks", nccl->size()},
                          {"bootstrap", mpi ? "mpi" : "single process (no MPI, no interconnect)"},
                          {"allreduce_in_place", allreduce},
                          {"gradient_buckets",
                           {{"model_width", model_width},
                            {"parameters", model.parameter_count()},
                            {"bytes", gradient_bytes},
                            {"buckets", buckets.bucket_count()},
                            {"median_s", bucket_median},
                            {"busbw_gb_s", gradient_bytes / bucket_median / 1e9 * bus_factor}}},
                          {"restore_broadcast",
                           {{"tensors", state.size()},
                            {"bytes", state_bytes},
                            {"median_s", broadcast_median},
                            {"busbw_gb_s", state_bytes / broadcast_median / 1e9}}}}
               .dump()
        << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string reason;
  if (core::cuda::usable_device_count(&reason) == 0) {
    std::fprintf(stderr, "hardy_nccl_bench: no CUDA device (%s)\n", reason.c_str());
    return 77;
  }
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hardy_nccl_bench: %s\n", e.what());
    return 1;
  }
}
