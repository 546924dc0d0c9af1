#pragma once
// Shared by the CUDA backend's C++ translation units: the cuDNN and cuBLAS status checks, RAII
// owners of every library handle and descriptor, device memory (tensor storage and the scratch
// pools), the convolution plan cache, CudaBackend::Impl, and argument validation.
#include <cublas_v2.h>
#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compute/operand_checks.hpp"
#include "compute/owned_buffer.hpp"
#include "hardy/core/compute/cuda_backend.hpp"
#include "hardy/core/compute/cuda_runtime.hpp"
#include "kernels.hpp"

namespace hardy::core::cuda {

// ---- status checks: the one place each library's status becomes an exception ----
// Both throw BackendError naming the call and carrying the library's own error text.
void cudnn_check(cudnnStatus_t status, const char* call);
void cublas_check(cublasStatus_t status, const char* call);
#define HARDY_CUDNN_CHECK(call) ::hardy::core::cuda::cudnn_check((call), #call)
#define HARDY_CUBLAS_CHECK(call) ::hardy::core::cuda::cublas_check((call), #call)

// ---- RAII for library handles and descriptors ----
// Owns one cuDNN object created by Create and destroyed by Destroy. Move-only.
template <class Handle, cudnnStatus_t (*Create)(Handle*), cudnnStatus_t (*Destroy)(Handle)>
class CudnnObject : public OwnedHandle<Handle, Destroy> {
 public:
  CudnnObject() { cudnn_check(Create(&this->handle_), "creating a cuDNN object"); }
};

using CudnnHandle = CudnnObject<cudnnHandle_t, cudnnCreate, cudnnDestroy>;
using TensorDescriptor =
    CudnnObject<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor =
    CudnnObject<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    CudnnObject<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                cudnnDestroyConvolutionDescriptor>;

class CublasHandle : public OwnedHandle<cublasHandle_t, cublasDestroy> {
 public:
  CublasHandle();
};

// ---- device memory ----
// Tensor storage: cudaMalloc'd, zero-filled on the backend's stream, freed after that stream
// has drained (cudaFree only "may" synchronise). The stream is shared so that it outlives
// every buffer, even buffers that outlive the backend.
class DeviceBuffer final : public OwnedBuffer {
 public:
  DeviceBuffer(std::size_t bytes, std::shared_ptr<const Stream> stream);
  ~DeviceBuffer() override;
  Device device() const override { return Device::cuda; }

 private:
  std::shared_ptr<const Stream> stream_;
};

// A grow-only device allocation reused by every call that needs temporary memory of one kind
// (the cuDNN workspace, converted weights, reduction partials...). Work is stream-ordered, so
// reuse is safe; growing waits for the stream before freeing the old block.
class DeviceScratch {
 public:
  explicit DeviceScratch(std::shared_ptr<const Stream> stream) : stream_(std::move(stream)) {}
  ~DeviceScratch();
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  // At least `bytes` (valid until the next call of get() on this scratch).
  void* get(std::size_t bytes);
  template <class T>
  T* get_as(std::size_t count) {
    return static_cast<T*>(get(count * sizeof(T)));
  }
  std::size_t capacity() const { return capacity_; }

 private:
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
  std::shared_ptr<const Stream> stream_;
};

// Page-locked host memory: the small results copied back (loss partials, flags), and host
// tensors that device copies reach by DMA (CudaBackend::empty_host). Zero-filled, as host
// tensors are.
class PinnedBuffer final : public OwnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t bytes);
  ~PinnedBuffer() override;
  Device device() const override { return Device::host; }
  template <class T>
  T* as() {
    return static_cast<T*>(data_);
  }
};

// Page-locked memory for a result that queued work copies back (a loss's per-block partial sums,
// the first bad pixel and its label), with the event that marks its arrival. A loss is read after
// its step (PendingSum), and with gradient lag two are in flight, so each has its own.
struct ResultSlot {
  static constexpr std::size_t partials_bytes = std::size_t{max_reduction_blocks} * sizeof(double);
  // [partials][first bad pixel: u64][its label: i32][4 bytes of padding]
  static constexpr std::size_t bytes = partials_bytes + 16;
  ResultSlot() : memory(bytes) {}
  PinnedBuffer memory;
  Event arrived;
};

// The slots not in use, made as needed (cudaMallocHost is slow: the first steps make them) and
// reused. A slot goes back when the last owner of take()'s pointer drops it, even after the
// backend is gone.
class ResultSlots : public std::enable_shared_from_this<ResultSlots> {
 public:
  std::shared_ptr<ResultSlot> take();

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<ResultSlot>> free_;
};

// Where a cross-entropy's labels lie, for the message about a bad one.
struct LabelPlane {
  std::int64_t height = 0, width = 0;
  int classes = 0;
};

// The sum of the `blocks` partials that work queued before slot->arrived copies into the slot,
// read after it has arrived; with `labels`, a bad label found by that work is thrown as the CPU
// backend throws it.
PendingSum pending_partials_sum(int device, std::shared_ptr<ResultSlot> slot, int blocks,
                                std::optional<LabelPlane> labels);

// What CudaBackend::start_upload's copies run with, made at the first upload and reused: a
// stream of their own, device memory for a host batch before its conversion, and events (the
// work queued before the start; the copies' start and end, timed).
struct UploadLane {
  UploadLane()
      : stream(std::make_shared<const Stream>()), staging(stream), start(true), end(true) {}
  std::shared_ptr<const Stream> stream;
  DeviceScratch staging;
  Event queued, start, end;
  bool in_use = false;  // an upload holds the lane (one at a time)
};

// ---- convolution plans ----
enum class ConvKind : int { forward, backward_data, backward_weights };

// One convolution problem: pass, activation type and every size and geometry parameter.
struct ConvKey {
  std::array<std::int64_t, 18> values{};
  bool operator==(const ConvKey&) const = default;
};
struct ConvKeyHash {
  std::size_t operator()(const ConvKey& key) const noexcept;
};

// Descriptors and the algorithm chosen for one ConvKey (cuDNN convolutions only: 1x1 stride-1
// unpadded ones are matrix products and go to cuBLAS without a plan).
struct ConvPlan {
  TensorDescriptor x, y;  // x: the input (or dx), y: the output (or dy)
  FilterDescriptor w;
  ConvolutionDescriptor conv;
  int algorithm = 0;
  std::size_t workspace_bytes = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

// Per (input size, output size) of one resampled dimension: LinearTaps' arrays on the device.
struct DeviceTaps {
  std::unique_ptr<DeviceBuffer> storage;
  LinearTaps taps{};
};

// Operands arrive checked (operand_checks.hpp, applied by Backend against operands::cuda_rules).
using operands::is_float_type;

}  // namespace hardy::core::cuda

namespace hardy::core {

struct CudaBackend::Impl {
  explicit Impl(CudaOptions options);
  ~Impl();

  CudaOptions options;
  int device = 0;
  cudaDeviceProp properties{};
  std::shared_ptr<const cuda::Stream> stream;
  cuda::CudnnHandle cudnn;
  cuda::CublasHandle cublas;
  std::unordered_map<cuda::ConvKey, cuda::ConvPlan, cuda::ConvKeyHash> conv_plans;
  std::map<std::pair<std::int64_t, std::int64_t>, cuda::DeviceTaps> taps;
  // One pool per kind of temporary, so that the temporaries of one call never share memory.
  cuda::DeviceScratch workspace;    // cuDNN's
  cuda::DeviceScratch weights;      // weights converted for a convolution
  cuda::DeviceScratch staging;      // copy(): source uploaded from the host / upsample rows
  cuda::DeviceScratch staging_out;  // copy(): converted result before it goes to the host
  cuda::DeviceScratch partials;     // float partial sums of channel reductions
  cuda::DeviceScratch sums;         // double results of channel reductions, group terms
  cuda::DeviceScratch small;        // flags, class weights, per-block partials, coefficients
  cuda::PinnedBuffer pinned;        // small results on their way to the host
  std::unique_ptr<cuda::UploadLane> upload_lane;  // start_upload()'s, made at the first
  std::shared_ptr<cuda::ResultSlots> results = std::make_shared<cuda::ResultSlots>();  // losses'

  cudaStream_t s() const { return stream->get(); }
  // cudaMemcpyAsync on the stream, checked.
  void copy_async(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
  // src (on the host or the device) converted into device memory `to` laid out as dst, on
  // `stream`: dtype and layout conversions run as a kernel; a host source goes through `staging`.
  void convert_async(const Tensor& src, const Tensor& dst, void* to, cuda::DeviceScratch& staging,
                     cudaStream_t stream);
  // The same from device memory `from` holding dst's dims as `from_dtype` in `from_layout`.
  void convert_on_device(const void* from, DType from_dtype, Layout from_layout, const Tensor& dst,
                         void* to, cudaStream_t stream);
  // Waits for the stream; `why` names the operation in an error message.
  void wait(const char* why) { stream->synchronize(why); }
  const cuda::LinearTaps& linear_taps(std::int64_t in_size, std::int64_t out_size);
};

}  // namespace hardy::core
