#pragma once
// The CUDA runtime pieces shared by the CUDA backend (core/src/compute/cuda) and the NCCL
// communicator (comm/src/nccl): the one place CUDA runtime status codes become exceptions, and RAII
// owners of streams, events and the libraries' handles. Only the CUDA build (HARDY_HAVE_CUDA)
// includes this header.
#ifndef HARDY_HAVE_CUDA
#error \
    "hardy/core/compute/cuda_runtime.hpp needs a build with the CUDA backend (HARDY_CUDA=ON or AUTO)"
#endif
#include <cuda_runtime_api.h>

#include <string>
#include <utility>

namespace hardy::core::cuda {

// Returns on cudaSuccess; otherwise throws BackendError naming the call and carrying CUDA's
// error name and string. Kernels report launch errors through check_launch().
void cuda_check(cudaError_t status, const char* call);
#define HARDY_CUDA_CHECK(call) ::hardy::core::cuda::cuda_check((call), #call)

// After a kernel launch: a bad configuration shows up in cudaGetLastError.
void check_launch(const char* kernel);

// Number of CUDA devices this process can use; 0 (with the reason in *reason, if given) when
// the driver is missing, no device is visible, or the runtime fails to initialise. Never throws.
int usable_device_count(std::string* reason = nullptr);

// Owns a handle of the CUDA runtime or one of its libraries (a stream, an event, a cuDNN or cuBLAS
// object) and destroys it with `Destroy` unless it was moved from. Move-only; the class that
// derives from it creates the handle.
template <class Handle, auto Destroy>
class OwnedHandle {
 public:
  ~OwnedHandle() {
    if (handle_ != nullptr) Destroy(handle_);
  }
  OwnedHandle(OwnedHandle&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  OwnedHandle& operator=(OwnedHandle&& other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  OwnedHandle(const OwnedHandle&) = delete;
  OwnedHandle& operator=(const OwnedHandle&) = delete;
  Handle get() const { return handle_; }

 protected:
  OwnedHandle() = default;
  Handle handle_ = nullptr;
};

// An owned stream (non-blocking with respect to the legacy default stream, so that other
// libraries' work on stream 0 does not serialise with hardy's).
class Stream : public OwnedHandle<cudaStream_t, cudaStreamDestroy> {
 public:
  Stream();
  void synchronize(const char* why) const;
};

// An owned event without timing (the cheap kind) unless timing is asked for.
class Event : public OwnedHandle<cudaEvent_t, cudaEventDestroy> {
 public:
  explicit Event(bool timing = false);
  void record(cudaStream_t stream);
  // Makes `stream` wait (on the device, not the host) for the last record().
  void make_wait(cudaStream_t stream) const;
};

}  // namespace hardy::core::cuda
