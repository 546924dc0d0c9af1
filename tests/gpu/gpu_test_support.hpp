#pragma once
// Helpers of the GPU tests: random host data, moving it to either backend, and comparing a
// device result with the CPU backend's within a tolerance chosen for the precision.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/compute/cuda_backend.hpp"
#include "hardy/core/support/random.hpp"

namespace hardy::gpu_test {

using core::Backend;
using core::DType;
using core::Layout;
using core::Tensor;

inline std::string precision_name(DType dtype) { return core::to_string(dtype); }

// A bound for each precision a device result may have: bf16, f16, and f32 (any other type).
struct PrecisionBounds {
  double bf16, f16, f32;
  double of(DType dtype) const {
    return dtype == DType::bf16 ? bf16 : dtype == DType::f16 ? f16 : f32;
  }
};

// Relative error (in the 2-norm) below which a result of this precision matches the CPU's.
// Each result is rounded to its storage type once (bf16 keeps 8 significant bits, f16 11), and
// accumulation orders differ, so the bounds are a few units of that rounding.
inline double tolerance_for(DType dtype) {
  return PrecisionBounds{.bf16 = 3e-2, .f16 = 5e-3, .f32 = 1e-4}.of(dtype);
}

// Standard-normal host f32 tensor (times `scale`).
inline Tensor random_host(std::vector<std::int64_t> dims, std::uint64_t seed, float scale = 1.0f,
                          Layout layout = Layout::nhwc) {
  Tensor t = Tensor::host(std::move(dims), DType::f32, layout);
  core::SplitMix64 rng(core::mix_seed(seed, 0x9e3, 1));
  for (float& v : t.f32()) v = scale * static_cast<float>(rng.normal());
  return t;
}

// A host f32 copy of any tensor of `backend` (converting bf16/f16 and the device).
inline Tensor to_host_f32(Backend& backend, const Tensor& t) {
  Tensor host = Tensor::host(t.dims(), DType::f32, t.layout());
  backend.copy(t, host);
  return host;
}

// The same values on the device in `dtype`, and on the host rounded through `dtype`, so that
// the CPU reference starts from exactly the device's inputs.
struct Twin {
  Tensor device;
  Tensor host;
};

inline Twin twin(core::CudaBackend& cuda, const Tensor& host_values, DType dtype) {
  Twin t;
  t.device = cuda.empty(host_values.dims(), dtype, host_values.layout());
  cuda.copy(host_values, t.device);
  t.host = to_host_f32(cuda, t.device);
  return t;
}

inline double norm(const Tensor& t) {
  double total = 0.0;
  for (float v : t.f32()) total += static_cast<double>(v) * v;
  return std::sqrt(total);
}

// ||a - b|| / max(||b||, floor): a is the device result (host copy), b the CPU reference.
inline double relative_error(const Tensor& a, const Tensor& b, double floor = 1e-12) {
  REQUIRE(a.dims() == b.dims());
  double difference = 0.0;
  const auto x = a.f32(), y = b.f32();
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    difference += d * d;
  }
  return std::sqrt(difference) / std::max(norm(b), floor);
}

// Compares a device tensor with the CPU reference and reports both norms on failure.
inline void check_close(core::CudaBackend& cuda, const Tensor& device_result,
                        const Tensor& cpu_result, double tolerance, const std::string& what,
                        double floor = 1e-12) {
  const Tensor host = to_host_f32(cuda, device_result);
  const double error = relative_error(host, cpu_result, floor);
  INFO(what << ": relative error " << error << " (tolerance " << tolerance << "), |cuda| "
            << norm(host) << ", |cpu| " << norm(cpu_result));
  CHECK(std::isfinite(error));
  CHECK(error <= tolerance);
}

}  // namespace hardy::gpu_test
