#pragma once
// How the GPU benchmarks time work on a stream: CUDA events recorded before and after it, so that
// the time is the device's, not the host's queueing.
#include <cuda_runtime_api.h>

#include "hardy/core/compute/cuda_runtime.hpp"

namespace hardy::bench {

// Seconds per call of `enqueue`, queued `repeats` times on `stream` between two timing events;
// `wait` waits for the stream (its owner's synchronize()) before the events are read.
template <class Enqueue, class Wait>
double event_seconds_per_call(cudaStream_t stream, int repeats, Enqueue&& enqueue, Wait&& wait) {
  core::cuda::Event start(true), stop(true);
  start.record(stream);
  for (int i = 0; i < repeats; ++i) enqueue();
  stop.record(stream);
  wait();
  float ms = 0.0f;
  HARDY_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return 1e-3 * ms / repeats;
}

}  // namespace hardy::bench
