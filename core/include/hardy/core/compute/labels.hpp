#pragma once
// The label vocabulary of hardy's segmentation: what a per-pixel label (int32) may hold and what
// each class is called. It sits in compute/ because the loss kernels read labels (they skip
// kIgnoreLabel and reject anything outside [0, classes)); data/ writes labels with it and nn/'s
// metrics count them with it. Plain constants, no dependencies.
#include <array>
#include <cstdint>
#include <string_view>

namespace hardy::core {

inline constexpr int kNumClasses = 3;
inline constexpr int kBackground = 0;
inline constexpr int kTropicalCyclone = 1;
inline constexpr int kAtmosphericRiver = 2;
// A pixel that counts for nothing: not in the loss, its gradient or the metrics (the pixels of a
// sample skipped under --bad-samples skip).
inline constexpr std::int32_t kIgnoreLabel = -1;
inline constexpr std::array<std::string_view, kNumClasses> kClassNames = {
    "background", "tropical_cyclone", "atmospheric_river"};

}  // namespace hardy::core
