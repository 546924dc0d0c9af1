// CpuBackend lifetime and memory operations.
#include "compute/cpu/cpu_backend.hpp"

#include <cstring>

#include "compute/cpu/dnnl_support.hpp"

namespace hardy::core {

using namespace cpu;  // the backend's internal helpers, declared in dnnl_support.hpp
using dnnl::memory;

CpuBackend::CpuBackend()
    : Backend(operands::cpu_rules), impl_(dnnl_checked("creating the oneDNN CPU engine", {}, [] {
        return std::make_unique<Impl>();
      })) {}

CpuBackend::~CpuBackend() = default;

std::size_t CpuBackend::cached_primitive_count() const { return impl_->primitives.size(); }

Tensor CpuBackend::do_empty(std::vector<std::int64_t> dims, DType dtype, Layout layout) {
  return Tensor::host(std::move(dims), dtype, layout);
}

namespace {

// Channels second and channels last address the same bytes when C == 1 or the spatial size
// is 1 (and a flat 4-D or 5-D tensor is channels second), so only the remaining cases of 4-D
// (nchw, nhwc) and 5-D (ncdhw, ndhwc) tensors need a reorder.
bool same_memory_order(const Tensor& a, const Tensor& b) {
  if (a.rank() != 4 && a.rank() != 5) return true;
  const auto effective = [](Layout layout) { return layout == Layout::nhwc ? 1 : 0; };
  if (effective(a.layout()) == effective(b.layout())) return true;
  return a.dim(1) == 1 || a.spatial_size() == 1;
}

}  // namespace

void CpuBackend::do_copy(const Tensor& src, Tensor& dst) {
  if (src.raw() == dst.raw() && src.layout() == dst.layout()) return;
  if (same_memory_order(src, dst)) {
    if (src.bytes() > 0) std::memcpy(dst.raw(), src.raw(), src.bytes());
    return;
  }
  dnnl_checked("copy (layout conversion)", {&src, &dst}, [&] {
    const memory::desc from = dnnl_desc(src);
    const memory::desc to = dnnl_desc(dst);
    const auto key = PrimitiveKey{}
                         .add(static_cast<std::int64_t>(PrimitiveKind::layout_reorder))
                         .add(src.dims())
                         .add(static_cast<std::int64_t>(src.dtype()))
                         .add(static_cast<std::int64_t>(src.layout() == Layout::nhwc));
    const CachedPrimitive& reorder = impl_->cached(key, [&] {
      const dnnl::reorder::primitive_desc pd(impl_->engine, from, impl_->engine, to);
      return CachedPrimitive{dnnl::reorder(pd), implementation_name(pd)};
    });
    impl_->execute(reorder.primitive, {{DNNL_ARG_FROM, dnnl_memory(impl_->engine, from, src)},
                                       {DNNL_ARG_TO, dnnl_memory(impl_->engine, to, dst)}});
  });
}

namespace {

template <class T>
void fill_with(Tensor& t, T value) {
  T* data = t.data<T>();
  const std::int64_t count = t.numel();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < count; ++i) data[i] = value;
}

}  // namespace

void CpuBackend::do_fill(Tensor& t, float value) {
  switch (t.dtype()) {
    case DType::f32:
      return fill_with(t, value);
    case DType::i32:
      return fill_with(t, static_cast<std::int32_t>(value));
    case DType::u8:
      return fill_with(t, static_cast<std::uint8_t>(value));
    case DType::f16:
    case DType::bf16:
      break;
  }
  // Half-precision rounding is oneDNN's, so filled tensors match what its kernels would produce.
  std::uint16_t bits = 0;
  dnnl_checked("fill", {&t}, [&] {
    const memory::desc from({1}, memory::data_type::f32, memory::format_tag::a);
    const memory::desc to({1}, dnnl_data_type(t.dtype()), memory::format_tag::a);
    const auto key = PrimitiveKey{}
                         .add(static_cast<std::int64_t>(PrimitiveKind::scalar_convert))
                         .add(static_cast<std::int64_t>(t.dtype()));
    const CachedPrimitive& convert = impl_->cached(key, [&] {
      const dnnl::reorder::primitive_desc pd(impl_->engine, from, impl_->engine, to);
      return CachedPrimitive{dnnl::reorder(pd), implementation_name(pd)};
    });
    impl_->execute(convert.primitive, {{DNNL_ARG_FROM, memory(from, impl_->engine, &value)},
                                       {DNNL_ARG_TO, memory(to, impl_->engine, &bits)}});
  });
  fill_with(t, bits);
}

}  // namespace hardy::core
