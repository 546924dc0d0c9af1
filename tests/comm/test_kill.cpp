// The gloo-style failure tests: one rank dies by SIGKILL, the survivors must see ProcessFailure
// (not hang), then agree, shrink and carry on. Hidden tags: run_kill_test.sh runs each under
// `mpirun --with-ft ulfm` and checks that every survivor printed SUCCESS.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "hardy/comm/errors.hpp"
#include "hardy/comm/gradient_buckets.hpp"
#include "hardy/comm/mpi/communicator.hpp"

using hardy::comm::MpiCommunicator;
using hardy::comm::ProcessFailure;

namespace {

constexpr int kDeadlineSeconds = 40;  // below CTest's TIMEOUT (60 s)

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

extern "C" void on_deadline(int) {
  const char message[] = "kill test: deadline passed without recovering; a survivor hangs\n";
  (void)!write(2, message, sizeof message - 1);
  _exit(124);
}

// A survivor that hangs ends itself rather than waiting for CTest's timeout.
void arm_deadline() {
  std::signal(SIGALRM, on_deadline);
  alarm(kDeadlineSeconds);
}

// Rank 0 names a file in which the victim writes the time of its death.
std::string stamp_path(MpiCommunicator& world) {
  std::vector<std::byte> bytes(256);
  if (world.rank() == 0) {
    const char* tmp = std::getenv("TMPDIR");
    std::string path = tmp ? tmp : "/tmp";
    path += "/hardy_kill_";
    path += std::to_string(getpid());
    std::memcpy(bytes.data(), path.c_str(), path.size() + 1);
  }
  world.broadcast(bytes, 0);
  return reinterpret_cast<const char*>(bytes.data());
}

[[noreturn]] void die(const std::string& stamp) {
  std::ofstream(stamp) << std::to_string(now_seconds()) << '\n' << std::flush;
  std::raise(SIGKILL);
  std::abort();
}

double read_stamp(const std::string& stamp, double fallback) {
  double killed = fallback;
  std::ifstream(stamp) >> killed;
  return killed;
}

bool skip_without_ulfm(MpiCommunicator& world) {
  if (world.fault_tolerant()) return false;
  WARN("ULFM is not enabled (launch with mpirun --with-ft ulfm); not killing anybody");
  return true;
}

}  // namespace

TEST_CASE("survivors of a SIGKILL get ProcessFailure, shrink and continue", "[.][kill]") {
  auto world = MpiCommunicator::world();
  if (skip_without_ulfm(*world)) return;
  REQUIRE(world->size() >= 2);
  const int victim = world->size() - 1;
  arm_deadline();
  const std::string stamp = stamp_path(*world);
  world->barrier();
  const double after_barrier = now_seconds();
  if (world->rank() == victim) die(stamp);

  std::vector<float> x(1024);
  long iterations = 0;
  std::string failure;
  try {
    for (;;) {
      std::fill(x.begin(), x.end(), 1.0f);
      world->allreduce_sum(x);
      ++iterations;
    }
  } catch (const ProcessFailure& e) {
    failure = e.what();
  }
  const double detected = now_seconds();
  std::printf(
      "rank %d: ProcessFailure %.1f ms after the kill (%.1f ms after the barrier, %ld "
      "allreduces): %s\n",
      world->rank(), 1e3 * (detected - read_stamp(stamp, after_barrier)),
      1e3 * (detected - after_barrier), iterations, failure.c_str());

  world->revoke();  // so that every survivor leaves its pending operations
  REQUIRE(world->agree(1) == 1);
  REQUIRE(world->failed_ranks() == std::vector<int>{victim});
  auto shrunk = world->shrink();
  auto& survivors = shrunk.comm;
  REQUIRE(survivors->size() == world->size() - 1);
  REQUIRE(survivors->rank() == world->rank());
  REQUIRE(hardy::comm::ranks_lost(shrunk.old_ranks, world->size()) == std::vector<int>{victim});
  std::vector<double> value{static_cast<double>(world->rank() + 1)};
  survivors->allreduce_sum(value);
  const int n = survivors->size();
  REQUIRE(value[0] == n * (n + 1) / 2.0);
  survivors->barrier();
  if (survivors->rank() == 0) std::remove(stamp.c_str());
  alarm(0);
  std::printf("rank %d: SUCCESS (recovered in %.1f ms after detection)\n", world->rank(),
              1e3 * (now_seconds() - detected));
  std::fflush(stdout);
}

TEST_CASE("GradientBuckets: a death mid-step raises ProcessFailure, rebinding recovers",
          "[.][kill-buckets]") {
  auto world = MpiCommunicator::world();
  if (skip_without_ulfm(*world)) return;
  const int victim = world->size() - 1;
  arm_deadline();
  const std::string stamp = stamp_path(*world);

  std::vector<hardy::core::Parameter> params(12);
  for (std::size_t i = 0; i < params.size(); ++i) {
    params[i].name = std::string(1, static_cast<char>('a' + i));
    params[i].value = hardy::core::Tensor::host({static_cast<std::int64_t>(1000 * (i + 1))},
                                                hardy::core::DType::f32, hardy::core::Layout::flat);
    params[i].grad = params[i].value.clone();
  }
  auto fill = [&](float v) {
    for (auto& p : params) std::ranges::fill(p.grad.f32(), v);
  };
  hardy::comm::GradientBuckets buckets(*world, hardy::core::pointers_to(params), 16 * 1024);
  REQUIRE(buckets.bucket_count() > 3);
  fill(1.0f);
  buckets.finish(1.0f);  // one healthy step
  REQUIRE(params[0].grad.f32()[0] == static_cast<float>(world->size()));

  world->barrier();
  const double after_barrier = now_seconds();
  fill(1.0f);
  std::string failure;
  try {
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (world->rank() == victim && i == params.size() / 2) die(stamp);  // buckets in flight
      buckets.mark_ready(i);
    }
    buckets.finish(1.0f);
  } catch (const ProcessFailure& e) {
    failure = e.what();
  }
  const double detected = now_seconds();
  REQUIRE_FALSE(failure.empty());
  std::printf("rank %d: GradientBuckets ProcessFailure %.1f ms after the kill: %s\n", world->rank(),
              1e3 * (detected - read_stamp(stamp, after_barrier)), failure.c_str());

  REQUIRE(world->agree(1) == 1);  // finish() has revoked world already
  auto survivors = std::move(world->shrink().comm);
  REQUIRE(survivors->size() == world->size() - 1);
  buckets.rebind(*survivors);
  fill(2.0f);
  buckets.finish(0.5f);
  for (auto& p : params) {
    const auto g = p.grad.f32();
    REQUIRE(std::ranges::all_of(g, [&](float v) { return v == survivors->size(); }));
  }
  survivors->barrier();
  if (survivors->rank() == 0) std::remove(stamp.c_str());
  alarm(0);
  std::printf("rank %d: SUCCESS\n", world->rank());
  std::fflush(stdout);
}
