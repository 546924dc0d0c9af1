#include "hardy/core/compute/backend.hpp"

#include <fmt/format.h>

#include "compute/cpu/cpu_backend.hpp"
#include "hardy/core/support/error.hpp"
#ifdef HARDY_HAVE_CUDA
#include "compute/cuda/cuda_backend.hpp"
#endif

namespace hardy::core {

int conv_output_size(int input, int kernel, const ConvGeometry& g) {
  return (input + 2 * g.padding - g.dilation * (kernel - 1) - 1) / g.stride + 1;
}

std::vector<std::string> available_backends() {
  std::vector<std::string> names{"cpu"};
#ifdef HARDY_HAVE_CUDA
  names.emplace_back("cuda");
#endif
  return names;
}

std::unique_ptr<Backend> make_backend(std::string_view name) {
  if (name == "cpu") return std::make_unique<CpuBackend>();
#ifdef HARDY_HAVE_CUDA
  if (name == "cuda") return make_cuda_backend();
#endif
  throw InvalidArgument(fmt::format("unknown backend '{}'; this build has: {}", name,
                                    fmt::join(available_backends(), ", ")));
}

}  // namespace hardy::core
