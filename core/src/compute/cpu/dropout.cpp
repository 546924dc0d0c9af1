// Dropout on the CPU: one pass in memory order, each element kept or zeroed by the decision of
// compute/dropout_mask.hpp (the CUDA kernel's too), taken at the element's logical index, so the
// mask is the same whatever the layout, the thread count or where the sample sits in the batch.
#include <cstdint>
#include <vector>

#include "compute/cpu/cpu_backend.hpp"
#include "compute/cpu/element_types.hpp"
#include "compute/dropout_mask.hpp"

namespace hardy::core {

using namespace cpu;  // the backend's internal helpers (element types)

namespace {

// Below this many elements starting a parallel region costs more than the loop itself.
constexpr std::int64_t parallel_threshold = 1 << 15;

// out = in * keep / (1 - rate) for the mask of args (in may be out), f32 or bf16.
template <class T>
void apply_dropout(const Dropout& args, const Tensor& in, Tensor& out) {
  // A 2-D (N, F) tensor is F channels of one element; a 4-D or 5-D one has H * W or D * H * W.
  const std::int64_t batch = in.dim(0), channels = in.dim(1), plane = in.spatial_size();
  const std::uint32_t threshold = dropout::keep_threshold(args.rate);
  const float scale = 1.0f / (1.0f - args.rate);
  std::vector<std::uint64_t> states(static_cast<std::size_t>(batch));
  for (std::int64_t n = 0; n < batch; ++n)
    states[n] = dropout::sample_state(args.seed, args.sample_keys[n]);
  // A sample is `rows` contiguous rows of `row_length` elements: pixels of C channels (channels
  // last), or channels of `plane` pixels (channels second, and flat tensors, which are row-major
  // over the logical dims). The logical index c * plane + pixel of element j of row r is
  // r * across_rows + j * along_row.
  const bool nhwc = in.layout() == Layout::nhwc;
  const std::int64_t rows = nhwc ? plane : channels, row_length = nhwc ? channels : plane;
  const std::int64_t along_row = nhwc ? plane : 1, across_rows = nhwc ? 1 : plane;
  const T* src = in.data<T>();
  T* dst = out.data<T>();
#pragma omp parallel for collapse(2) \
    schedule(static) if (batch * rows * row_length >= parallel_threshold)
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t first = (n * rows + r) * row_length;
      for (std::int64_t j = 0; j < row_length; ++j) {
        const auto index = static_cast<std::uint64_t>(r * across_rows + j * along_row);
        dst[first + j] = from_float<T>(
            dropout::keep(states[n], index, threshold) ? to_float(src[first + j]) * scale : 0.0f);
      }
    }
}

}  // namespace

void CpuBackend::do_dropout_forward(const Dropout& args, Tensor& y) {
  with_element_type(y.dtype(),
                    [&](auto element) { apply_dropout<decltype(element)>(args, args.x, y); });
}

void CpuBackend::do_dropout_backward(const Dropout& args, const Tensor& dy, Tensor& dx) {
  with_element_type(dx.dtype(),
                    [&](auto element) { apply_dropout<decltype(element)>(args, dy, dx); });
}

}  // namespace hardy::core
