#pragma once
// The element types of the CPU backend's hand-written kernels: f32, and bf16 for activations in
// mixed precision (CpuOptions::activation_dtype). A kernel is a template over the type its
// activations are stored in: it loads each element into float, computes in float (reductions in
// double, as before), and rounds once when it stores, to nearest even, as oneDNN's bf16 kernels
// and the CUDA backend round. Parameters, gradients and statistics stay f32 whatever the
// activations are.
#include <bit>
#include <cstdint>
#include <utility>

#include "hardy/core/compute/tensor.hpp"

namespace hardy::core::cpu {

// A bfloat16 as stored: the upper half of an IEEE float. A plain 16-bit integer, not a distinct
// enum or struct: GCC 12 vectorizes no loop that loads an enum type ("no vectype"), which left
// every bf16 kernel scalar. Kernels take it only as their element type T, through to_float and
// from_float.
using bf16 = std::uint16_t;

inline float to_float(float value) { return value; }
inline float to_float(bf16 value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value) << 16);
}

template <class T>
T from_float(float value);

template <>
inline float from_float<float>(float value) {
  return value;
}

// Round to nearest, ties to even; a NaN stays a (quiet) NaN rather than rounding into infinity.
template <>
inline bf16 from_float<bf16>(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  return static_cast<bf16>(nan ? (bits >> 16) | 0x40u : rounded >> 16);
}

// Runs kernel(float{}) or kernel(bf16{}) for an activation of dtype f32 or bf16 (the operand
// checks have refused every other dtype before a kernel runs).
template <class Kernel>
decltype(auto) with_element_type(DType dtype, Kernel&& kernel) {
  if (dtype == DType::bf16) return std::forward<Kernel>(kernel)(bf16{});
  return std::forward<Kernel>(kernel)(float{});
}

}  // namespace hardy::core::cpu
