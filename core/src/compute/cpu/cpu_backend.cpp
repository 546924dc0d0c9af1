// CpuBackend lifetime and memory operations.
#include "compute/cpu/cpu_backend.hpp"

#include <cstdlib>
#include <cstring>

#include "compute/cpu/dnnl_support.hpp"

namespace hardy::core {

using namespace cpu;  // the backend's internal helpers, declared in dnnl_support.hpp
using dnnl::memory;

namespace {

const OperandRules& rules_for(const CpuOptions& options) {
  if (const auto why = cpu_precision_unsupported(options.activation_dtype))
    throw InvalidArgument(*why);
  return options.activation_dtype == DType::bf16 ? operands::cpu_bf16_rules : operands::cpu_rules;
}

}  // namespace

bool cpu_has_native_bf16() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  // oneDNN's ISA values are bit sets: each includes the bits of those it extends.
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

std::string cpu_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "SSE4.1";
    case dnnl::cpu_isa::avx:
      return "AVX";
    case dnnl::cpu_isa::avx2:
      return "AVX2";
    case dnnl::cpu_isa::avx2_vnni:
      return "AVX2 with VNNI";
    case dnnl::cpu_isa::avx512_core:
      return "AVX-512";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "AVX-512 with VNNI";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "AVX-512 with BF16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "AVX-512 with AMX";
    default:
      return fmt::format("instruction set {:#x}",
                         static_cast<unsigned>(dnnl::get_effective_cpu_isa()));
  }
}

std::optional<std::string> cpu_precision_unsupported(DType dtype) {
  if (dtype == DType::f32) return std::nullopt;
  if (dtype != DType::bf16)
    return fmt::format(
        "the cpu backend trains in f32 or bf16, not {} (fp16 training needs --backend cuda)",
        to_string(dtype));
  if (cpu_has_native_bf16()) return std::nullopt;
  // Emulated bf16 (oneDNN's AVX-512 kernels without the BF16 instructions, or reference code
  // below AVX-512) would be slower than the f32 it is meant to beat, so it is refused.
  return fmt::format(
      "bf16 training on the cpu needs a CPU with the AVX512-BF16 or AMX instructions, and oneDNN "
      "finds {} here{}; without them every bf16 operation would be emulated, slower than f32: "
      "train with --precision f32",
      cpu_isa_name(),
      std::getenv("ONEDNN_MAX_CPU_ISA") || std::getenv("DNNL_MAX_CPU_ISA")
          ? " (limited by ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA)"
          : "");
}

CpuBackend::CpuBackend(CpuOptions options)
    : Backend(rules_for(options)),
      impl_(dnnl_checked("creating the oneDNN CPU engine", {},
                         [] { return std::make_unique<Impl>(); })),
      activation_dtype_(options.activation_dtype) {}

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
  const bool same_type = src.dtype() == dst.dtype();
  if (same_type && src.raw() == dst.raw() && src.layout() == dst.layout()) return;
  if (same_type && same_memory_order(src, dst)) {
    if (src.bytes() > 0) std::memcpy(dst.raw(), src.raw(), src.bytes());
    return;
  }
  // A layout or type conversion (f32 <-> bf16, rounding to nearest even): oneDNN's reorder.
  dnnl_checked("copy (layout or type conversion)", {&src, &dst}, [&] {
    const bool flat = src.rank() != 2 && src.rank() != 4 && src.rank() != 5;
    const memory::desc from = flat ? dnnl_flat_desc(src) : dnnl_desc(src);
    const memory::desc to = flat ? dnnl_flat_desc(dst) : dnnl_desc(dst);
    const auto key = PrimitiveKey{}
                         .add(static_cast<std::int64_t>(PrimitiveKind::layout_reorder))
                         .add(src.dims())
                         .add(static_cast<std::int64_t>(src.dtype()))
                         .add(static_cast<std::int64_t>(dst.dtype()))
                         .add(static_cast<std::int64_t>(src.layout() == Layout::nhwc))
                         .add(static_cast<std::int64_t>(dst.layout() == Layout::nhwc));
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
