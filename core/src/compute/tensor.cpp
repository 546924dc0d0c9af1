#include "hardy/core/compute/tensor.hpp"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "compute/owned_buffer.hpp"
#include "hardy/core/support/enum_names.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::core {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::u8:
      return 1;
  }
  throw Error("unknown dtype");
}

namespace {
constexpr std::string_view kDTypeNames[] = {"f32", "f16", "bf16", "i32", "u8"};
static_assert(std::size(kDTypeNames) == static_cast<std::size_t>(DType::u8) + 1);
constexpr std::string_view kLayoutNames[] = {"nchw", "nhwc", "flat"};
static_assert(std::size(kLayoutNames) == static_cast<std::size_t>(Layout::flat) + 1);
}  // namespace

std::string to_string(DType dtype) { return std::string(name_of(kDTypeNames, dtype)); }

std::string to_string(Layout layout) { return std::string(name_of(kLayoutNames, layout)); }

std::string layout_name(Layout layout, std::size_t rank) {
  if (rank == 5 && layout == Layout::nchw) return "ncdhw";
  if (rank == 5 && layout == Layout::nhwc) return "ndhwc";
  return to_string(layout);
}

namespace {

class HostBuffer final : public OwnedBuffer {
 public:
  explicit HostBuffer(std::size_t bytes) : OwnedBuffer(bytes) {
    // Buffers of a huge page or more start on a huge-page boundary and ask for huge pages, so
    // that the kernel can back them with 2 MiB pages (transparent huge pages, set to `always`
    // on many distributions and `madvise` on others): a pass over hundreds of MB otherwise
    // misses the TLB on every 4 KiB page. Measured at CosmoFlow's 128^3 in bf16: routing the
    // first block's gradient into a reused 6 MiB slab took 41 ms on 4 KiB pages and 17 ms on
    // huge pages, the slab's weight gradient 120 ms and 104 ms.
    constexpr std::size_t huge_page = std::size_t{2} << 20;
    const std::size_t alignment = bytes >= huge_page ? huge_page : 64;
    const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
    // posix_memalign, unlike aligned_alloc, does not round the size up to the alignment: a
    // buffer just past a huge page does not take two.
    if (::posix_memalign(&data_, alignment, rounded) != 0 || data_ == nullptr)
      throw Error(fmt::format("cannot allocate {} bytes of host memory", bytes));
#if defined(MADV_HUGEPAGE)
    // A hint (errors ignored); whole huge pages inside the buffer only.
    if (alignment == huge_page) ::madvise(data_, rounded / huge_page * huge_page, MADV_HUGEPAGE);
#endif
    std::memset(data_, 0, rounded);
  }
  ~HostBuffer() override { std::free(data_); }
  Device device() const override { return Device::host; }
};

}  // namespace

void widen_to_f32(DType dtype, std::span<const std::byte> stored, std::span<float> fields) {
  if (dtype == DType::f32) {
    std::memcpy(fields.data(), stored.data(), std::min(stored.size(), fields.size_bytes()));
    return;
  }
  if (dtype != DType::bf16)
    throw Error(fmt::format("{} values cannot be widened to f32", to_string(dtype)));
  const auto* words = reinterpret_cast<const std::uint16_t*>(stored.data());
  const std::size_t count = std::min(stored.size() / 2, fields.size());
  for (std::size_t i = 0; i < count; ++i)
    fields[i] = std::bit_cast<float>(static_cast<std::uint32_t>(words[i]) << 16);
}

std::shared_ptr<Buffer> allocate_host(std::size_t bytes) {
  return std::make_shared<HostBuffer>(bytes);
}

Tensor::Tensor(std::vector<std::int64_t> dims, DType dtype, Layout layout,
               std::shared_ptr<Buffer> buffer)
    : dims_(std::move(dims)), dtype_(dtype), layout_(layout), buffer_(std::move(buffer)) {
  for (auto d : dims_)
    if (d < 0) throw InvalidArgument(fmt::format("negative tensor dimension in {}", describe()));
  if (buffer_ && buffer_->bytes() < bytes())
    throw Error(
        fmt::format("buffer of {} bytes is too small for {}", buffer_->bytes(), describe()));
}

Tensor Tensor::host(std::vector<std::int64_t> dims, DType dtype, Layout layout) {
  std::int64_t count = 1;
  for (auto d : dims) count *= d;
  return Tensor(std::move(dims), dtype, layout,
                allocate_host(static_cast<std::size_t>(count) * dtype_size(dtype)));
}

std::int64_t Tensor::numel() const {
  return std::accumulate(dims_.begin(), dims_.end(), std::int64_t{1}, std::multiplies<>());
}

std::int64_t Tensor::dim4(std::size_t i) const {
  if (dims_.size() != 4) throw Error(fmt::format("expected a 4-D tensor, got {}", describe()));
  return dims_[i];
}

std::span<float> Tensor::f32() {
  if (dtype_ != DType::f32 || device() != Device::host)
    throw Error(fmt::format("expected a host f32 tensor, got {}", describe()));
  return {data<float>(), static_cast<std::size_t>(numel())};
}

std::span<const float> Tensor::f32() const {
  if (dtype_ != DType::f32 || device() != Device::host)
    throw Error(fmt::format("expected a host f32 tensor, got {}", describe()));
  return {data<float>(), static_cast<std::size_t>(numel())};
}

Tensor Tensor::view(std::vector<std::int64_t> dims, Layout layout) const {
  Tensor viewed(std::move(dims), dtype_, layout, nullptr);
  if (viewed.numel() != numel())
    throw InvalidArgument(fmt::format("cannot view {} as [{}]: {} elements against {}", describe(),
                                      fmt::join(viewed.dims_, ","), viewed.numel(), numel()));
  viewed.buffer_ = buffer_;
  return viewed;
}

std::int64_t Tensor::spatial_size() const {
  std::int64_t size = 1;
  for (std::size_t i = 2; i < dims_.size(); ++i) size *= dims_[i];
  return size;
}

Tensor Tensor::clone() const {
  if (device() != Device::host) throw Error("Tensor::clone works on host tensors only");
  Tensor copy = host(dims_, dtype_, layout_);
  if (bytes() > 0) std::memcpy(copy.raw(), raw(), bytes());
  return copy;
}

std::string Tensor::describe() const {
  return fmt::format("{} {} [{}]{}", to_string(dtype_), layout_name(layout_, dims_.size()),
                     fmt::join(dims_, ","), device() == Device::cuda ? " on cuda" : "");
}

}  // namespace hardy::core
