// Gradient allreduce strategies for one training step of a small CNN (~2.1M parameters):
//   plain:    backward (simulated compute), then one allreduce of all gradients;
//   bucketed: GradientBuckets, each bucket's allreduce started while backward continues.
// Backward is simulated by busy-waiting (it would keep a core busy too), split over the
// parameters in proportion to their size. Run under mpirun, e.g.
//   mpirun -n 4 --oversubscribe build/bin/hardy_allreduce_bench [compute_ms] [steps]
// Times are rank 0's, per step, after a barrier; the ratio is plain / bucketed.
// On one node the ranks' shared-memory transfers and reductions run on the ranks' own cores,
// inside MPI calls, so overlap can only pay off with idle cores or a NIC that moves data itself.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hardy/comm/gradient_buckets.hpp"
#include "hardy/comm/mpi/communicator.hpp"

using namespace hardy;
using Clock = std::chrono::steady_clock;

namespace {

// 3x3 convolutions of a 4-level encoder/decoder (weights in backward order: last layer first)
// plus a bias-sized tensor after each, as normalization parameters would be.
std::vector<core::Parameter> cnn_parameters() {
  const int channels[][2] = {{32, 2},    {64, 32},   {64, 64},   {128, 64},  {128, 128},
                             {256, 128}, {256, 256}, {256, 256}, {128, 256}, {128, 128},
                             {64, 128},  {64, 64},   {32, 64},   {32, 32},   {32, 3}};
  std::vector<core::Parameter> params;
  for (const auto& [out, in] : channels) {
    for (std::int64_t count : {std::int64_t{out} * in * 9, std::int64_t{out}}) {
      core::Parameter p;
      p.name = "conv" + std::to_string(params.size());
      p.value = core::Tensor::host({count}, core::DType::f32, core::Layout::flat);
      p.grad = core::Tensor::host({count}, core::DType::f32, core::Layout::flat);
      params.push_back(std::move(p));
    }
  }
  return params;
}

void busy_wait(double seconds) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
  }
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiSession mpi(&argc, &argv);
  auto world = comm::MpiCommunicator::world();
  const double compute = (argc > 1 ? std::atof(argv[1]) : 100.0) / 1e3;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 10;
  auto params = cnn_parameters();
  std::size_t total = 0;
  for (auto& p : params) total += static_cast<std::size_t>(p.grad.numel());
  auto work = [&](std::size_t i) { busy_wait(compute * params[i].grad.numel() / total); };

  auto time_steps = [&](auto&& step) {
    std::vector<double> times;
    for (int s = 0; s < steps + 2; ++s) {  // two warm-up steps
      world->barrier();
      const auto start = Clock::now();
      step();
      if (s >= 2) times.push_back(seconds_since(start));
    }
    return median(times);
  };

  std::vector<float> flat(total);
  auto plain_allreduce = [&] {
    std::size_t offset = 0;
    for (auto& p : params) {
      auto g = p.grad.f32();
      std::copy(g.begin(), g.end(), flat.begin() + offset);
      offset += g.size();
    }
    world->allreduce_sum(flat);
    offset = 0;
    for (auto& p : params) {
      auto g = p.grad.f32();
      for (float& x : g) x = flat[offset++] / world->size();
    }
  };
  const double comm_only = time_steps(plain_allreduce);
  const double plain = time_steps([&] {
    for (std::size_t i = 0; i < params.size(); ++i) work(i);
    plain_allreduce();
  });
  if (world->rank() == 0) {
    std::printf(
        "ranks %d, %zu tensors, %.2fM parameters (%.1f MB), simulated backward %.0f ms, "
        "median of %d steps\n",
        world->size(), params.size(), total / 1e6, total * 4 / 1e6, compute * 1e3, steps);
    std::printf("  allreduce alone              %8.1f ms\n", comm_only * 1e3);
    std::printf("  plain: backward + allreduce  %8.1f ms\n", plain * 1e3);
  }
  for (std::size_t kib : {256, 1024, 4096, 25 * 1024}) {
    comm::GradientBuckets buckets(*world, core::pointers_to(params), kib * 1024);
    const double bucketed = time_steps([&] {
      for (std::size_t i = 0; i < params.size(); ++i) {
        work(i);
        buckets.mark_ready(i);
      }
      buckets.finish(1.0f / world->size());
    });
    if (world->rank() == 0) {
      std::printf("  bucketed %5zu KiB (%2zu buckets) %8.1f ms   plain/bucketed %.2f\n", kib,
                  buckets.bucket_count(), bucketed * 1e3, plain / bucketed);
    }
  }
  return 0;
}
