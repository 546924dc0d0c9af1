// Main of hardy_gpu_tests. Without a usable CUDA device every test exits with status 77, which
// CTest reports as skipped (SKIP_RETURN_CODE 77), with the reason on stdout. Listing the tests
// (catch_discover_tests runs `--list-test-names-only` at build time) needs no device, so the
// binary builds and registers its tests on machines without a GPU.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <string_view>

#include "hardy/core/compute/cuda_runtime.hpp"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]).starts_with("--list")) return Catch::Session().run(argc, argv);
  std::string reason;
  if (hardy::core::cuda::usable_device_count(&reason) == 0) {
    std::printf("no CUDA device: skipped (%s)\n", reason.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
