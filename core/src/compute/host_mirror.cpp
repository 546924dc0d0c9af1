#include "hardy/core/compute/host_mirror.hpp"

namespace hardy::core {

std::span<Tensor* const> HostMirror::stage(std::span<Tensor* const> tensors) {
  staged_.assign(tensors.begin(), tensors.end());
  if (backend_.device() == Device::host) return staged_;
  mirrors_.resize(staged_.size());
  mirror_ptrs_.resize(staged_.size());
  for (std::size_t i = 0; i < staged_.size(); ++i) {
    const Tensor& live = *staged_[i];
    Tensor& mirror = mirrors_[i];
    if (!mirror.defined() || mirror.dims() != live.dims() || mirror.dtype() != live.dtype() ||
        mirror.layout() != live.layout())
      mirror = backend_.empty_host(live.dims(), live.dtype(), live.layout());
    mirror_ptrs_[i] = &mirror;
  }
  std::vector<const Tensor*> from(staged_.begin(), staged_.end());
  backend_.copy(from, mirror_ptrs_);
  return mirror_ptrs_;
}

void HostMirror::write_back() {
  if (backend_.device() == Device::host) return;
  std::vector<const Tensor*> from(mirror_ptrs_.begin(), mirror_ptrs_.end());
  backend_.copy(from, staged_);
  // The host may write the mirrors again as soon as this returns (the next exchange).
  backend_.synchronize();
}

}  // namespace hardy::core
