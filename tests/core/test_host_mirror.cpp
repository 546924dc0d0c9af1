// HostMirror: what the fault domains' gloo exchange sends of a device backend's tensors.
#include <catch2/catch.hpp>
#include <numeric>
#include <vector>

#include "../../core/src/compute/cpu/cpu_backend.hpp"
#include "fake_device_backend.hpp"
#include "hardy/core/compute/host_mirror.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy::core;
using namespace hardy::testing;

namespace {

std::vector<float> values_of(const Tensor& host) { return {host.f32().begin(), host.f32().end()}; }

// Device tensors holding 0, 1, 2, ... (first) and 100, 101, ... (second).
std::vector<Tensor> device_tensors(FakeDeviceBackend& device) {
  std::vector<Tensor> tensors;
  float start = 0;
  for (std::int64_t size : {5, 3}) {
    Tensor host = Tensor::host({size}, DType::f32, Layout::flat);
    std::iota(host.f32().begin(), host.f32().end(), start);
    tensors.push_back(device.empty({size}, DType::f32, Layout::flat));
    device.copy(host, tensors.back());
    start += 100;
  }
  return tensors;
}

std::vector<float> download(FakeDeviceBackend& device, const Tensor& tensor) {
  Tensor host = Tensor::host(tensor.dims(), tensor.dtype(), tensor.layout());
  device.copy(tensor, host);
  return values_of(host);
}

}  // namespace

TEST_CASE("host mirror: a host backend's tensors are their own mirror", "[core]") {
  CpuBackend cpu;
  Tensor a = Tensor::host({4}, DType::f32, Layout::flat);
  Tensor* tensors[] = {&a};
  HostMirror mirror(cpu);
  const auto staged = mirror.stage(tensors);
  REQUIRE(staged.size() == 1);
  CHECK(staged[0] == &a);
  mirror.write_back();  // nothing to do
}

TEST_CASE("host mirror: device tensors staged to host copies and written back in one batch",
          "[core]") {
  CpuBackend cpu;
  FakeDeviceBackend device(cpu);
  std::vector<Tensor> live = device_tensors(device);
  // What the fake is for: a host-only path refuses these as it would a GPU's memory.
  REQUIRE_THROWS_AS(live[0].f32(), hardy::Error);
  std::vector<Tensor*> tensors{&live[0], &live[1]};
  HostMirror mirror(device);

  device.batched_copies = 0;
  const auto staged = mirror.stage(tensors);
  REQUIRE(staged.size() == 2);
  CHECK(device.batched_copies == 1);
  CHECK(device.host_allocations == 2);
  CHECK(staged[0]->device() == hardy::core::Device::host);
  CHECK(values_of(*staged[0]) == std::vector<float>{0, 1, 2, 3, 4});
  CHECK(values_of(*staged[1]) == std::vector<float>{100, 101, 102});

  // The host changes the copies (a sum arrived); the device tensors take them, in one batch and
  // with a wait, since the host may write the copies again at once.
  for (Tensor* t : staged)
    for (float& v : t->f32()) v *= 2;
  device.waits = 0;
  mirror.write_back();
  CHECK(device.batched_copies == 2);
  CHECK(device.waits == 1);
  CHECK(download(device, live[0]) == std::vector<float>{0, 2, 4, 6, 8});
  CHECK(download(device, live[1]) == std::vector<float>{200, 202, 204});

  // Staged again: the copies are reused (nothing allocated) and hold the device's values.
  const auto again = mirror.stage(tensors);
  CHECK(device.host_allocations == 2);
  CHECK(again[0] == staged[0]);
  CHECK(values_of(*again[1]) == std::vector<float>{200, 202, 204});
}

TEST_CASE("host mirror: a tensor of another shape gets a new copy", "[core]") {
  CpuBackend cpu;
  FakeDeviceBackend device(cpu);
  std::vector<Tensor> live = device_tensors(device);
  HostMirror mirror(device);
  std::vector<Tensor*> first{&live[0]};
  mirror.stage(first);
  std::vector<Tensor*> second{&live[1]};
  const auto staged = mirror.stage(second);
  CHECK(staged[0]->numel() == 3);
  CHECK(values_of(*staged[0]) == std::vector<float>{100, 101, 102});
}
