#pragma once
// A small counter-based random source whose output is identical on every platform and compiler
// (the standard library's distributions are implementation-defined), so that a seed names the
// same weights and the same synthetic data everywhere.
#include <cmath>
#include <cstdint>

namespace hardy::core {

// SplitMix64 (Steele, Lea & Flood 2014): a full-period 64-bit generator, also a good hash.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Standard normal by Box-Muller (one value per call keeps the stream position simple).
  double normal() {
    const double u1 = 1.0 - uniform();  // in (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  std::uint64_t state() const { return state_; }

 private:
  std::uint64_t state_;
};

// Mixes several integers into one seed, so that (seed, stream, index) pick independent streams.
inline std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b, std::uint64_t c = 0) {
  SplitMix64 g(a ^ (b * 0xd1342543de82ef95ULL) ^ (c * 0x9e3779b97f4a7c15ULL));
  g.next();
  return g.next();
}

}  // namespace hardy::core
