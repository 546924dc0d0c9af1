// The CUDA backend's plumbing: status checks, RAII owners, device memory, validation, and the
// construction of CudaBackend::Impl (device choice, stream, cuDNN and cuBLAS handles).
#include "compute/cuda/cuda_support.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>

#include "hardy/core/support/error.hpp"

namespace hardy::core::cuda {

// ---- status checks ----

void cuda_check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  throw BackendError(fmt::format("CUDA call {} failed: {} ({})", call, cudaGetErrorName(status),
                                 cudaGetErrorString(status)));
}

void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) return;
  throw BackendError(fmt::format("launching the CUDA kernel {} failed: {} ({})", kernel,
                                 cudaGetErrorName(status), cudaGetErrorString(status)));
}

void cudnn_check(cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  // cuDNN 9 keeps a message about the last failure per thread; it often says which descriptor
  // field was rejected.
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof detail);
  throw BackendError(fmt::format("cuDNN call {} failed: {}{}{}", call, cudnnGetErrorString(status),
                                 detail[0] != '\0' ? ": " : "", detail));
}

void cublas_check(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw BackendError(fmt::format("cuBLAS call {} failed: {} ({})", call,
                                 cublasGetStatusName(status), cublasGetStatusString(status)));
}

int usable_device_count(std::string* reason) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    if (reason != nullptr)
      *reason = fmt::format("cudaGetDeviceCount: {} ({})", cudaGetErrorName(status),
                            cudaGetErrorString(status));
    cudaGetLastError();  // the error is not sticky; leave the runtime clean for the caller
    return 0;
  }
  if (count == 0 && reason != nullptr) *reason = "cudaGetDeviceCount reported 0 devices";
  return count;
}

// ---- streams and events ----

Stream::Stream() { HARDY_CUDA_CHECK(cudaStreamCreateWithFlags(&handle_, cudaStreamNonBlocking)); }
void Stream::synchronize(const char* why) const {
  const cudaError_t status = cudaStreamSynchronize(handle_);
  if (status != cudaSuccess)
    throw BackendError(fmt::format("waiting for the CUDA stream ({}) failed: {} ({})", why,
                                   cudaGetErrorName(status), cudaGetErrorString(status)));
}

Event::Event(bool timing) {
  HARDY_CUDA_CHECK(
      cudaEventCreateWithFlags(&handle_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
void Event::record(cudaStream_t stream) { HARDY_CUDA_CHECK(cudaEventRecord(handle_, stream)); }
void Event::make_wait(cudaStream_t stream) const {
  HARDY_CUDA_CHECK(cudaStreamWaitEvent(stream, handle_, 0));
}

// ---- cuBLAS handle ----

CublasHandle::CublasHandle() { HARDY_CUBLAS_CHECK(cublasCreate(&handle_)); }

// ---- device memory ----

DeviceBuffer::DeviceBuffer(std::size_t bytes, std::shared_ptr<const Stream> stream)
    : OwnedBuffer(bytes), stream_(std::move(stream)) {
  if (bytes == 0) return;
  const cudaError_t status = cudaMalloc(&data_, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw BackendError(fmt::format("cannot allocate {:.1f} MiB of CUDA device memory: {} ({})",
                                   static_cast<double>(bytes) / (1 << 20), cudaGetErrorName(status),
                                   cudaGetErrorString(status)));
  }
  // Zero-filled like host tensors, so that a fresh tensor never holds stale bits.
  HARDY_CUDA_CHECK(cudaMemsetAsync(data_, 0, bytes, stream_->get()));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ == nullptr) return;
  // Kernels queued on the stream may still use the memory. Destructors must not throw, and an
  // error here would have been reported by the operation that caused it.
  cudaStreamSynchronize(stream_->get());
  cudaFree(data_);
}

std::shared_ptr<ResultSlot> ResultSlots::take() {
  std::unique_ptr<ResultSlot> slot;
  {
    const std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      slot = std::move(free_.back());
      free_.pop_back();
    }
  }
  if (!slot) slot = std::make_unique<ResultSlot>();
  return std::shared_ptr<ResultSlot>(slot.release(), [pool = shared_from_this()](ResultSlot* done) {
    const std::lock_guard lock(pool->mutex_);
    try {
      pool->free_.emplace_back(done);
    } catch (...) {  // no room to keep it: free it instead
      delete done;
    }
  });
}

namespace {

class PartialsSum final : public PendingSum::Source {
 public:
  PartialsSum(int device, std::shared_ptr<ResultSlot> slot, int blocks,
              std::optional<LabelPlane> labels)
      : device_(device), slot_(std::move(slot)), blocks_(blocks), labels_(labels) {}
  double read() override {
    HARDY_CUDA_CHECK(cudaSetDevice(device_));
    HARDY_CUDA_CHECK(cudaEventSynchronize(slot_->arrived.get()));
    const auto* host = slot_->memory.as<const char>();
    if (labels_) {
      unsigned long long bad = 0;
      std::memcpy(&bad, host + ResultSlot::partials_bytes, sizeof bad);
      if (bad != std::numeric_limits<unsigned long long>::max()) {
        // Labels come from data files: report the first bad one as the CPU backend does.
        std::int32_t label = 0;
        std::memcpy(&label, host + ResultSlot::partials_bytes + sizeof bad, sizeof label);
        const auto pixel = static_cast<std::int64_t>(bad);
        const std::int64_t plane = labels_->height * labels_->width;
        throw InvalidArgument(
            fmt::format("softmax_cross_entropy: label {} at (n={}, h={}, w={}) is outside [0, {})",
                        label, pixel / plane, pixel % plane / labels_->width,
                        pixel % labels_->width, labels_->classes));
      }
    }
    // Added in block order: the same sum on every run.
    const auto* partials = reinterpret_cast<const double*>(host);
    double total = 0.0;
    for (int b = 0; b < blocks_; ++b) total += partials[b];
    return total;
  }

 private:
  int device_;
  std::shared_ptr<ResultSlot> slot_;
  int blocks_;
  std::optional<LabelPlane> labels_;
};

}  // namespace

PendingSum pending_partials_sum(int device, std::shared_ptr<ResultSlot> slot, int blocks,
                                std::optional<LabelPlane> labels) {
  return PendingSum(std::make_unique<PartialsSum>(device, std::move(slot), blocks, labels));
}

DeviceScratch::~DeviceScratch() {
  if (data_ == nullptr) return;
  cudaStreamSynchronize(stream_->get());
  cudaFree(data_);
}

void* DeviceScratch::get(std::size_t bytes) {
  if (bytes <= capacity_ && data_ != nullptr) return data_;
  // Grow by at least half so that slowly increasing requests do not reallocate every call.
  const std::size_t wanted = std::max<std::size_t>({bytes, capacity_ + capacity_ / 2, 256});
  if (data_ != nullptr) {
    stream_->synchronize("freeing a scratch buffer");
    HARDY_CUDA_CHECK(cudaFree(data_));
    data_ = nullptr;
    capacity_ = 0;
  }
  const cudaError_t status = cudaMalloc(&data_, wanted);
  if (status != cudaSuccess) {
    cudaGetLastError();
    data_ = nullptr;
    throw BackendError(fmt::format("cannot allocate {:.1f} MiB of CUDA scratch memory: {} ({})",
                                   static_cast<double>(wanted) / (1 << 20),
                                   cudaGetErrorName(status), cudaGetErrorString(status)));
  }
  capacity_ = wanted;
  return data_;
}

PinnedBuffer::PinnedBuffer(std::size_t bytes) : OwnedBuffer(bytes) {
  if (bytes == 0) return;
  HARDY_CUDA_CHECK(cudaMallocHost(&data_, bytes));
  std::memset(data_, 0, bytes);
}
PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

std::size_t ConvKeyHash::operator()(const ConvKey& key) const noexcept {
  std::size_t seed = key.values.size();
  for (std::int64_t value : key.values)
    seed ^= std::hash<std::int64_t>{}(value) + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
  return seed;
}

}  // namespace hardy::core::cuda

namespace hardy::core {

namespace {

// The node-local rank that launchers export, so that each rank of a node takes its own GPU.
int local_rank_from_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID",
                           "PMI_LOCAL_RANK", "LOCAL_RANK"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      char* end = nullptr;
      const long rank = std::strtol(value, &end, 10);
      if (end != value && *end == '\0' && rank >= 0) return static_cast<int>(rank);
    }
  }
  return 0;
}

int choose_device(int requested) {
  std::string reason;
  const int count = cuda::usable_device_count(&reason);
  if (count == 0) throw BackendError("the cuda backend needs a CUDA device: " + reason);
  if (requested >= 0) {
    if (requested >= count)
      throw InvalidArgument(
          fmt::format("CUDA device {} requested, but only {} visible", requested, count));
    return requested;
  }
  return local_rank_from_environment() % count;
}

// Chooses the device and makes it current for this thread, before any handle is created on it.
int activate_device(int requested) {
  const int device = choose_device(requested);
  HARDY_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

}  // namespace

CudaBackend::Impl::Impl(CudaOptions options_in)
    : options(options_in),
      device(activate_device(options_in.device)),
      stream(std::make_shared<const cuda::Stream>()),
      workspace(stream),
      weights(stream),
      staging(stream),
      staging_out(stream),
      partials(stream),
      sums(stream),
      small(stream),
      pinned(std::size_t{cuda::max_reduction_blocks} * sizeof(double) + 64) {
  if (!cuda::is_float_type(options.activation_dtype))
    throw InvalidArgument("CudaOptions::activation_dtype must be f32, bf16 or f16, not " +
                          to_string(options.activation_dtype));
  HARDY_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  HARDY_CUDNN_CHECK(cudnnSetStream(cudnn.get(), s()));
  HARDY_CUBLAS_CHECK(cublasSetStream(cublas.get(), s()));
  // Device pointers for alpha/beta would need device scalars; hardy passes host scalars.
  HARDY_CUBLAS_CHECK(cublasSetPointerMode(cublas.get(), CUBLAS_POINTER_MODE_HOST));
}

CudaBackend::Impl::~Impl() {
  // Everything queued must finish before handles and scratch memory go away.
  cudaStreamSynchronize(s());
}

void CudaBackend::Impl::copy_async(void* dst, const void* src, std::size_t bytes,
                                   cudaMemcpyKind kind) {
  if (bytes == 0) return;
  HARDY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s()));
}

const cuda::LinearTaps& CudaBackend::Impl::linear_taps(std::int64_t in_size,
                                                       std::int64_t out_size) {
  auto found = taps.find({in_size, out_size});
  if (found != taps.end()) return found->second.taps;
  // The CPU backend's formula (cpu/resample_pool_concat.cpp): o -> (o + 0.5) * in / out - 0.5,
  // clamped at 0, between two neighbours; computed in double on the host, once per size pair.
  const auto out = static_cast<std::size_t>(out_size), in = static_cast<std::size_t>(in_size);
  std::vector<int> first(out), second(out), lo(in, 0), hi(in, -1);
  std::vector<float> first_weight(out), second_weight(out);
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  for (std::size_t o = 0; o < out; ++o) {
    const double source = std::max((static_cast<double>(o) + 0.5) * scale - 0.5, 0.0);
    const auto tap = std::min(static_cast<std::int64_t>(source), in_size - 1);
    const double lambda = source - static_cast<double>(tap);
    first[o] = static_cast<int>(tap);
    second[o] = static_cast<int>(std::min(tap + 1, in_size - 1));
    first_weight[o] = static_cast<float>(1.0 - lambda);
    second_weight[o] = static_cast<float>(lambda);
  }
  // Both taps grow with o, so the outputs reading input i form one range.
  for (std::size_t o = 0; o < out; ++o)
    for (int i : {first[o], second[o]}) {
      const auto index = static_cast<std::size_t>(i);
      if (hi[index] < lo[index]) lo[index] = static_cast<int>(o);
      hi[index] = static_cast<int>(o);
    }
  cuda::DeviceTaps device_taps;
  const std::size_t bytes = (4 * out + 2 * in) * 4;
  device_taps.storage = std::make_unique<cuda::DeviceBuffer>(bytes, stream);
  auto* base = static_cast<char*>(device_taps.storage->data());
  std::size_t offset = 0;
  auto upload = [&](const auto& values) {
    void* at = base + offset;
    // Synchronous: the host vectors die at the end of this function.
    HARDY_CUDA_CHECK(cudaMemcpy(at, values.data(), values.size() * 4, cudaMemcpyHostToDevice));
    offset += values.size() * 4;
    return at;
  };
  // The memset queued by DeviceBuffer runs on the stream; wait for it before writing.
  wait("uploading resampling taps");
  device_taps.taps.first = static_cast<const int*>(upload(first));
  device_taps.taps.second = static_cast<const int*>(upload(second));
  device_taps.taps.first_weight = static_cast<const float*>(upload(first_weight));
  device_taps.taps.second_weight = static_cast<const float*>(upload(second_weight));
  device_taps.taps.lo = static_cast<const int*>(upload(lo));
  device_taps.taps.hi = static_cast<const int*>(upload(hi));
  return taps.emplace(std::pair{in_size, out_size}, std::move(device_taps)).first->second.taps;
}

}  // namespace hardy::core
