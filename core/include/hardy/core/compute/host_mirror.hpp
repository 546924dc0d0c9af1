#pragma once
// Host copies of a backend's tensors, for transports that carry host memory only (gloo's TCP
// pairs between fault domains). On a host backend the tensors are their own mirror and nothing
// is copied. On a device, each tensor gets a page-locked host tensor of its shape, allocated on
// first use and kept, so that a step's staging allocates nothing; both directions are one batch
// of copies with one wait for the device.
#include <span>
#include <vector>

#include "hardy/core/compute/backend.hpp"

namespace hardy::core {

class HostMirror {
 public:
  explicit HostMirror(Backend& backend) : backend_(backend) {}
  HostMirror(const HostMirror&) = delete;
  HostMirror& operator=(const HostMirror&) = delete;

  // The tensors' host copies, in their order, holding their values (the tensors themselves on a
  // host backend). Valid until the next stage().
  std::span<Tensor* const> stage(std::span<Tensor* const> tensors);
  // The tensors staged last take their host copies' values (which the host changed meanwhile);
  // returns once the device has them.
  void write_back();

 private:
  Backend& backend_;
  std::vector<Tensor*> staged_;
  std::vector<Tensor> mirrors_;
  std::vector<Tensor*> mirror_ptrs_;
};

}  // namespace hardy::core
