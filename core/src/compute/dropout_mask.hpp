#pragma once
// Dropout's keep decision (Backend::dropout_forward), written once for the CPU backend and the
// CUDA kernels: pure 64-bit integer arithmetic, so that both backends, every layout, batch split
// and thread count decide the same for the same (seed, sample key, element).
//
// Each sample gets the state of a SplitMix64 stream, mixed from the seed and its key; its element
// with logical index i = (c * H + h) * W + w is kept when the top 24 bits of that stream's
// (i + 1)-th output reach the rate's threshold. The outputs of one stream are distinct for
// distinct indices (the finaliser is a bijection), and comparing integers leaves no rounding to
// differ between a CPU and a GPU.
#include <cstdint>

#ifndef HARDY_HOST_DEVICE
#if defined(__CUDACC__)
#define HARDY_HOST_DEVICE __host__ __device__
#else
#define HARDY_HOST_DEVICE
#endif
#endif

namespace hardy::core::dropout {

inline constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;  // SplitMix64's increment

// SplitMix64's output finaliser (Steele, Lea & Flood 2014), a bijection of 64-bit integers.
HARDY_HOST_DEVICE inline std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The stream state of one sample: different keys under one seed give different states.
HARDY_HOST_DEVICE inline std::uint64_t sample_state(std::uint64_t seed, std::uint64_t key) {
  return mix(seed ^ mix(key + kGolden));
}

// Elements are kept when the top 24 bits of their hash are at least this: rate * 2^24, rounded,
// computed once on the host (so every backend compares against the same integer).
inline std::uint32_t keep_threshold(float rate) {
  return static_cast<std::uint32_t>(static_cast<double>(rate) * 16777216.0 + 0.5);
}

// Whether the element with logical index `index` (in the sample's (C, H, W) order) is kept.
HARDY_HOST_DEVICE inline bool keep(std::uint64_t state, std::uint64_t index,
                                   std::uint32_t threshold) {
  return (mix(state + (index + 1) * kGolden) >> 40) >= threshold;
}

}  // namespace hardy::core::dropout
