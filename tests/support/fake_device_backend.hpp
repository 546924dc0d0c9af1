#pragma once
// The CPU backend dressed as a device, for testing code that must never touch device memory as
// if it were the host's: its tensors live in host memory but say Device::cuda, so Tensor::f32()
// and every host-only path refuse them as they would a GPU's, while copies and kernels still
// run (on the CPU). It counts copies, batched copies and waits.
#include <memory>
#include <span>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/compute/forwarding_backend.hpp"

namespace hardy::testing {

class FakeDeviceBackend final : public core::ForwardingBackend {
 public:
  explicit FakeDeviceBackend(core::Backend& cpu)
      : ForwardingBackend(cpu, device_rules(cpu.operand_rules())) {}

  core::Device device() const override { return core::Device::cuda; }

  int single_copies = 0;   // copy() of one pair
  int batched_copies = 0;  // copy() of many pairs
  int waits = 0;           // synchronize()
  int host_allocations = 0;

 protected:
  core::Tensor do_empty(std::vector<std::int64_t> dims, core::DType dtype,
                        core::Layout layout) override {
    core::Tensor host = ForwardingBackend::do_empty(dims, dtype, layout);
    return core::Tensor(std::move(dims), dtype, layout, std::make_shared<OnDevice>(host));
  }
  core::Tensor do_empty_host(std::vector<std::int64_t> dims, core::DType dtype,
                             core::Layout layout) override {
    ++host_allocations;
    return ForwardingBackend::do_empty_host(std::move(dims), dtype, layout);
  }
  void do_copy(const core::Tensor& src, core::Tensor& dst) override {
    ++single_copies;
    ForwardingBackend::do_copy(src, dst);
  }
  void do_copy_many(std::span<const core::Tensor* const> src,
                    std::span<core::Tensor* const> dst) override {
    ++batched_copies;
    for (std::size_t i = 0; i < src.size(); ++i) ForwardingBackend::do_copy(*src[i], *dst[i]);
  }
  void do_synchronize() override { ++waits; }

 private:
  // Host memory that calls itself device memory.
  class OnDevice final : public core::Buffer {
   public:
    explicit OnDevice(core::Tensor host) : host_(std::move(host)) {}
    void* data() override { return host_.raw(); }
    std::size_t bytes() const override { return host_.bytes(); }
    core::Device device() const override { return core::Device::cuda; }

   private:
    core::Tensor host_;
  };
  static core::OperandRules device_rules(core::OperandRules rules) {
    rules.device = core::Device::cuda;
    rules.device_name = "device";
    return rules;
  }
};

}  // namespace hardy::testing
