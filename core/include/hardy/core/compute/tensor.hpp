#pragma once
// A Tensor is a handle: copying it shares the storage. Logical dimensions are always given in
// (N, C, H, W) order for 4-D activations, (N, C, D, H, W) for 5-D (volumetric) ones, (O, I, KH,
// KW) for convolution weights and (O, I, KD, KH, KW) for 3-D ones; `layout` says how they are
// laid out in memory. hardy's backends keep activations channels-last (NHWC, NDHWC), the layout
// that both oneDNN's AVX-512 kernels and cuDNN's Tensor Core kernels prefer, and weights in OIHW
// (OIDHW; the layout of checkpoints and of PyTorch) on the CPU.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace hardy::core {

enum class DType { f32, f16, bf16, i32, u8 };
// The layouts name the 4-D case but hold for any number of spatial dimensions: nchw is
// "channels second" (row-major over the logical dims: NCHW, NCDHW, and (O, I, K...) weights),
// nhwc is "channels last" (NHWC, NDHWC). A 5-D tensor describes itself as ncdhw or ndhwc.
// flat is row-major with no channel meaning (vectors, matrices such as dense layers' (N, K)).
enum class Layout { nchw, nhwc, flat };
enum class Device { host, cuda };

std::size_t dtype_size(DType dtype);
std::string to_string(DType dtype);
std::string to_string(Layout layout);
// The layout's name for a tensor of this rank: "ncdhw" and "ndhwc" for 5-D tensors.
std::string layout_name(Layout layout, std::size_t rank);

// Owns one allocation. Backends derive from it for device memory.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual std::size_t bytes() const = 0;
  virtual Device device() const = 0;
};

// 64-byte-aligned host memory (one AVX-512 line), zero-initialised.
std::shared_ptr<Buffer> allocate_host(std::size_t bytes);

// Values of `dtype` (f32 or bf16), as bytes, into f32: min(stored, fields) of them.
void widen_to_f32(DType dtype, std::span<const std::byte> stored, std::span<float> fields);

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::vector<std::int64_t> dims, DType dtype, Layout layout,
         std::shared_ptr<Buffer> buffer);

  // A zero-filled host tensor.
  static Tensor host(std::vector<std::int64_t> dims, DType dtype = DType::f32,
                     Layout layout = Layout::nhwc);

  bool defined() const { return buffer_ != nullptr; }
  const std::vector<std::int64_t>& dims() const { return dims_; }
  std::int64_t dim(std::size_t i) const { return dims_.at(i); }
  std::size_t rank() const { return dims_.size(); }
  std::int64_t numel() const;
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Layout layout() const { return layout_; }
  Device device() const { return buffer_ ? buffer_->device() : Device::host; }

  // 4-D accessors (throw for other ranks).
  std::int64_t n() const { return dim4(0); }
  std::int64_t c() const { return dim4(1); }
  std::int64_t h() const { return dim4(2); }
  std::int64_t w() const { return dim4(3); }

  void* raw() { return buffer_ ? buffer_->data() : nullptr; }
  const void* raw() const { return buffer_ ? buffer_->data() : nullptr; }
  template <class T>
  T* data() {
    return static_cast<T*>(raw());
  }
  template <class T>
  const T* data() const {
    return static_cast<const T*>(raw());
  }

  // Host fp32 view; throws unless the tensor is a host f32 tensor.
  std::span<float> f32();
  std::span<const float> f32() const;

  // The same storage seen with other dims and layout (a reshape without a copy): `dims` must
  // hold as many elements. Throws InvalidArgument otherwise.
  Tensor view(std::vector<std::int64_t> dims, Layout layout) const;
  // Product of the dims after the first two (D * H * W of a 5-D tensor, H * W of a 4-D one, 1
  // for a matrix): the elements of one channel of one sample.
  std::int64_t spatial_size() const;

  // Same dims, dtype and layout, fresh host storage holding a copy (host tensors only).
  Tensor clone() const;
  bool same_shape(const Tensor& other) const { return dims_ == other.dims_; }
  std::string describe() const;  // "f32 nhwc [2,16,64,64]", "f32 ndhwc [..]", for messages

 private:
  std::int64_t dim4(std::size_t i) const;
  std::vector<std::int64_t> dims_;
  DType dtype_ = DType::f32;
  Layout layout_ = Layout::flat;
  std::shared_ptr<Buffer> buffer_;
};

// Offset of element (n, c, h, w) of a 4-D tensor with the given dims and layout.
inline std::int64_t offset4(Layout layout, std::int64_t C, std::int64_t H, std::int64_t W,
                            std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
  return layout == Layout::nhwc ? ((n * H + h) * W + w) * C + c : ((n * C + c) * H + h) * W + w;
}

// Offset of element (n, c, d, h, w) of a 5-D tensor with the given dims and layout.
inline std::int64_t offset5(Layout layout, std::int64_t C, std::int64_t D, std::int64_t H,
                            std::int64_t W, std::int64_t n, std::int64_t c, std::int64_t d,
                            std::int64_t h, std::int64_t w) {
  return layout == Layout::nhwc ? (((n * D + d) * H + h) * W + w) * C + c
                                : (((n * C + c) * D + d) * H + h) * W + w;
}

}  // namespace hardy::core
