#pragma once
// What the buffers of the backends share (the host's in tensor.cpp, cuda::DeviceBuffer): the
// allocation's address and size, and no copies. The derived buffer allocates data_ in its
// constructor and frees it in its destructor.
#include <cstddef>

#include "hardy/core/compute/tensor.hpp"

namespace hardy::core {

class OwnedBuffer : public Buffer {
 public:
  OwnedBuffer(const OwnedBuffer&) = delete;
  OwnedBuffer& operator=(const OwnedBuffer&) = delete;
  void* data() final { return data_; }
  std::size_t bytes() const final { return bytes_; }

 protected:
  explicit OwnedBuffer(std::size_t bytes) : bytes_(bytes) {}

  void* data_ = nullptr;
  std::size_t bytes_;
};

}  // namespace hardy::core
