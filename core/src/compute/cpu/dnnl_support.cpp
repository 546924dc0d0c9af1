// The CPU backend's oneDNN helpers declared in dnnl_support.hpp: dtype and descriptor mapping,
// memory objects over hardy's tensors, and the operand description in error messages.
#include "compute/cpu/dnnl_support.hpp"

#include <fmt/format.h>

namespace hardy::core::cpu {

using dnnl::memory;

std::string Operands::describe() const {
  std::string text;
  for (const Tensor* t : tensors_) {
    if (t == nullptr) continue;
    if (!text.empty()) text += ", ";
    text += t->describe();
  }
  return text.empty() ? "no tensors" : text;
}

memory::data_type dnnl_data_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return memory::data_type::f32;
    case DType::f16:
      return memory::data_type::f16;
    case DType::bf16:
      return memory::data_type::bf16;
    case DType::i32:
      return memory::data_type::s32;
    case DType::u8:
      return memory::data_type::u8;
  }
  throw Error("unknown dtype");
}

memory::desc dnnl_desc(const Tensor& t) {
  // A flat tensor is row-major over its logical (N, C, ...) dims, i.e. nchw (ncdhw).
  const bool channels_last = t.layout() == Layout::nhwc;
  memory::format_tag tag = memory::format_tag::undef;
  switch (t.rank()) {
    case 2:
      tag = memory::format_tag::ab;
      break;
    case 4:
      tag = channels_last ? memory::format_tag::nhwc : memory::format_tag::nchw;
      break;
    case 5:
      tag = channels_last ? memory::format_tag::ndhwc : memory::format_tag::ncdhw;
      break;
    default:
      throw Error(fmt::format("no oneDNN memory layout for {}", t.describe()));
  }
  return memory::desc(t.dims(), dnnl_data_type(t.dtype()), tag);
}

memory::desc dnnl_any_desc(const Tensor& t) {
  return memory::desc(t.dims(), dnnl_data_type(t.dtype()), memory::format_tag::any);
}

memory::desc dnnl_flat_desc(const Tensor& t) {
  return memory::desc({t.numel()}, dnnl_data_type(t.dtype()), memory::format_tag::a);
}

memory dnnl_memory(const dnnl::engine& engine, const memory::desc& desc, const Tensor& t) {
  // oneDNN takes every handle as void*; inputs are only read.
  return memory(desc, engine, const_cast<void*>(t.raw()));
}

std::string implementation_name(const dnnl::primitive_desc_base& pd) { return pd.impl_info_str(); }

void attach_weights_reorder(const dnnl::engine& engine, CachedPrimitive& cached,
                            const memory::desc& user, const memory::desc& primitive_layout,
                            bool into_primitive) {
  if (primitive_layout == user) return;
  cached.weights_in_primitive_layout = memory(primitive_layout, engine);
  const auto& from = into_primitive ? user : primitive_layout;
  const auto& to = into_primitive ? primitive_layout : user;
  cached.weights_reorder = dnnl::reorder(dnnl::reorder::primitive_desc(engine, from, engine, to));
}

memory weights_for_reading(dnnl::stream& stream, const CachedPrimitive& cached,
                           const memory& user) {
  if (!cached.weights_reorder) return user;
  cached.weights_reorder->execute(
      stream, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, cached.weights_in_primitive_layout}});
  return cached.weights_in_primitive_layout;
}

}  // namespace hardy::core::cpu
