#pragma once
// The CUDA runtime pieces shared by the CUDA backend (core/src/compute/cuda) and the NCCL
// communicator (comm/src/nccl): the one place CUDA runtime status codes become exceptions, and RAII
// owners of streams and events. Only the CUDA build (HARDY_HAVE_CUDA) includes this header.
#ifndef HARDY_HAVE_CUDA
#error \
    "hardy/core/compute/cuda_runtime.hpp needs a build with the CUDA backend (HARDY_CUDA=ON or AUTO)"
#endif
#include <cuda_runtime_api.h>

#include <string>

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

// An owned stream (non-blocking with respect to the legacy default stream, so that other
// libraries' work on stream 0 does not serialise with hardy's).
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize(const char* why) const;

 private:
  cudaStream_t stream_ = nullptr;
};

// An owned event without timing (the cheap kind) unless timing is asked for.
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream);
  // Makes `stream` wait (on the device, not the host) for the last record().
  void make_wait(cudaStream_t stream) const;

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace hardy::core::cuda
