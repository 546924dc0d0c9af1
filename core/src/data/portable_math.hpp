#pragma once
// Arithmetic that gives the same bits on every platform and compiler, for the synthetic data
// generators (a seed names the same samples everywhere): only +, -, *, /, sqrt and integer
// rounding, which IEEE 754 pins down, instead of libm's exp, log and sin, whose last bits
// differ between libraries; and a counter-based random stream per (seed, sample, stream).
//
// Bit-identical results also need identical rounding: a file that includes this header has
// fused multiply-adds, which compilers otherwise form when the target has them (-march=native)
// and which change last bits, turned off from here on.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

#include "hardy/core/support/random.hpp"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace hardy::core::portable {

inline constexpr double kPi = 3.14159265358979323846;

// A counter-based stream of core::SplitMix64, so that any (seed, index, stream) triple gives an
// independent, reproducible sequence without state shared between samples.
class Random {
 public:
  Random(std::uint64_t seed, std::uint64_t index, std::uint64_t stream) : generator_(seed) {
    generator_ = SplitMix64(generator_.next() ^ index);
    generator_ = SplitMix64(generator_.next() ^ stream);
    generator_ = SplitMix64(generator_.next());
  }

  std::uint64_t next() { return generator_.next(); }
  double uniform() { return generator_.uniform(); }  // [0, 1)
  double uniform(double low, double high) { return generator_.uniform(low, high); }
  int integer(int low, int high) {  // inclusive
    return low + static_cast<int>(uniform() * (high - low + 1));
  }
  double sign() { return (next() >> 63) != 0 ? 1.0 : -1.0; }
  // Approximately standard normal (Irwin-Hall sum of four 16-bit uniforms), exact in float.
  float noise() {
    const std::uint64_t bits = next();
    const auto sum = static_cast<std::int32_t>((bits & 0xffff) + ((bits >> 16) & 0xffff) +
                                               ((bits >> 32) & 0xffff) + (bits >> 48));
    return static_cast<float>(sum - 131070) * (1.7320508f / 65536.0f);
  }

 private:
  SplitMix64 generator_;
};

// 1/n and 1/(n (n + 1)), rounded once at compile time: multiplying by them is as portable as
// dividing, and several times faster.
inline constexpr auto kReciprocals = [] {
  std::array<double, 20> table{};
  for (int n = 1; n < 20; ++n) table[n] = 1.0 / n;
  return table;
}();
inline constexpr auto kPairReciprocals = [] {
  std::array<double, 20> table{};
  for (int n = 1; n < 20; ++n) table[n] = 1.0 / (n * (n + 1));
  return table;
}();

// Rounds to the nearest integer, halves away from zero, without a libm call.
inline long long round_to_integer(double x) {
  return static_cast<long long>(x < 0 ? x - 0.5 : x + 0.5);
}

// exp(x) by Cody-Waite reduction to |r| <= ln(2)/2 and a Taylor polynomial, within a few ulp.
inline double exp_portable(double x) {
  if (x < -700.0) return 0.0;
  x = std::min(x, 700.0);
  const long long k = round_to_integer(x * 1.4426950408889634);
  const double r = (x - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10;
  double sum = 1.0;
  for (int n = 13; n >= 1; --n) sum = 1.0 + sum * r * kReciprocals[n];
  // Times 2^k, built directly: exact, as k stays within the normal exponent range.
  return sum * std::bit_cast<double>(static_cast<std::uint64_t>(k + 1023) << 52);
}

// sin and cos together, by reduction to [-pi/4, pi/4] and Taylor polynomials.
inline void sincos_portable(double x, double& sine, double& cosine) {
  const long long n = round_to_integer(x * 0.63661977236758134308);
  const double r = (x - n * 1.57079632673412561417e+00) - n * 6.07710050650619224932e-11;
  const double r2 = r * r;
  double s = 1.0, c = 1.0;
  for (int k = 9; k >= 1; --k) {
    s = 1.0 - s * r2 * kPairReciprocals[2 * k];
    c = 1.0 - c * r2 * kPairReciprocals[2 * k - 1];
  }
  s *= r;
  switch (n & 3) {
    case 0:
      sine = s, cosine = c;
      break;
    case 1:
      sine = c, cosine = -s;
      break;
    case 2:
      sine = -s, cosine = -c;
      break;
    default:
      sine = -c, cosine = s;
      break;
  }
}

// log(x) for x > 0: x = m 2^k with m in [sqrt(1/2), sqrt(2)) exactly, then
// log(m) = 2 atanh(z), z = (m - 1) / (m + 1), |z| < 0.172, by its odd series to z^41.
inline double log_portable(double x) {
  int k = 0;
  double m = x;
  while (m >= 1.4142135623730951) m *= 0.5, ++k;
  while (m < 0.7071067811865476) m *= 2.0, --k;
  const double z = (m - 1.0) / (m + 1.0), z2 = z * z;
  double sum = 0.0;
  for (int n = 41; n >= 1; n -= 2) sum = 1.0 / n + z2 * sum;
  return k * 0.6931471805599453 + 2.0 * z * sum;
}

}  // namespace hardy::core::portable
