#pragma once
// Shared by the CPU backend's translation units only: the oneDNN engine and primitive cache
// behind CpuBackend::Impl, the single place where oneDNN errors become hardy errors, and the
// reproducible parallel reductions used by the hand-written kernels. (Operands arrive checked:
// Backend's public operations check them against operands::cpu_rules.)
#include <fmt/format.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compute/cpu/cpu_backend.hpp"
#include "compute/operand_checks.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::core {

// Internal helpers get their own namespace so that their external-linkage names cannot collide
// with helpers of other translation units of hardy_core.
namespace cpu {

// The tensors an operation works on, named in its error messages; null entries are skipped.
// Holds a view: it lives only as long as the call it is passed to.
class Operands {
 public:
  Operands(std::initializer_list<const Tensor*> tensors)
      : tensors_(tensors.begin(), tensors.size()) {}
  explicit Operands(std::span<const Tensor* const> tensors) : tensors_(tensors) {}

  // "f32 nhwc [2,3,8,8], f32 nchw [4,3,3,3]"
  std::string describe() const;

 private:
  std::span<const Tensor* const> tensors_;
};

// Every oneDNN call of the backend runs inside this function, so that a rejected operation is
// reported with the hardy operation, the tensors involved and oneDNN's status rather than as a
// bare dnnl::error escaping from deep inside a layer.
template <class Call>
decltype(auto) dnnl_checked(std::string_view operation, Operands operands, Call&& call) {
  try {
    return std::forward<Call>(call)();
  } catch (const dnnl::error& e) {
    throw BackendError(fmt::format("oneDNN rejected {} on {}: {} (status {})", operation,
                                   operands.describe(), e.what(), dnnl_status2str(e.status)));
  }
}

// Identifies one cached primitive: the operation followed by every shape and parameter that
// went into its descriptor.
struct PrimitiveKey {
  std::vector<std::int64_t> values;

  PrimitiveKey& add(std::int64_t value) {
    values.push_back(value);
    return *this;
  }
  PrimitiveKey& add(const std::vector<std::int64_t>& dims) {
    values.push_back(static_cast<std::int64_t>(dims.size()));
    values.insert(values.end(), dims.begin(), dims.end());
    return *this;
  }
  bool operator==(const PrimitiveKey&) const = default;
};

struct PrimitiveKeyHash {
  std::size_t operator()(const PrimitiveKey& key) const noexcept {
    std::size_t seed = key.values.size();
    for (std::int64_t value : key.values)
      seed ^= std::hash<std::int64_t>{}(value) + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
    return seed;
  }
};

enum class PrimitiveKind : std::int64_t {
  conv_forward,
  conv_backward_data,
  conv_backward_weights,
  deconv_forward,
  deconv_backward_data,
  deconv_backward_weights,
  batch_norm_apply,
  relu_forward,
  relu_backward,
  resample_forward,
  resample_backward,
  concat,
  split_slice,
  layout_reorder,
  scalar_convert,
  exponential,
  dense_forward,
  dense_backward_data,
  dense_backward_weights,
  leaky_relu_forward,
  leaky_relu_backward,
  conv3d_slab_forward,  // a slab of a fused 3-D convolution and max pooling
  conv3d_slab_backward_weights,
  conv3d_slab_backward_data,
};

// A primitive plus, for convolutions, the reorder between the user's OIHW (IOHW) weights and the
// blocked layout the primitive chose (weights change every step, so only the reorder is cached).
struct CachedPrimitive {
  CachedPrimitive(dnnl::primitive primitive, std::string implementation)
      : primitive(std::move(primitive)), implementation(std::move(implementation)) {}

  dnnl::primitive primitive;
  std::string implementation;
  std::optional<dnnl::reorder> weights_reorder;
  dnnl::memory weights_in_primitive_layout;
};

}  // namespace cpu

struct CpuBackend::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<cpu::PrimitiveKey, cpu::CachedPrimitive, cpu::PrimitiveKeyHash> primitives;

  template <class Build>
  cpu::CachedPrimitive& cached(const cpu::PrimitiveKey& key, Build&& build) {
    auto found = primitives.find(key);
    if (found == primitives.end()) found = primitives.emplace(key, build()).first;
    return found->second;
  }

  // Host memory an operation reuses from call to call, one buffer per slot, grown (never
  // shrunk) to the largest size asked for: a fused convolution's slab of output, or its whole
  // gradient. Allocating it each call would fault its pages in afresh every step.
  std::vector<std::shared_ptr<Buffer>> scratch_buffers;

  std::shared_ptr<Buffer> scratch_buffer(std::size_t slot, std::size_t bytes) {
    if (scratch_buffers.size() <= slot) scratch_buffers.resize(slot + 1);
    std::shared_ptr<Buffer>& buffer = scratch_buffers[slot];
    if (!buffer || buffer->bytes() < bytes) {
      buffer.reset();  // the old one goes first: the two need not fit in memory together
      buffer = allocate_host(bytes);
    }
    return buffer;
  }
  void* scratch(std::size_t slot, std::size_t bytes) { return scratch_buffer(slot, bytes)->data(); }

  // Runs a primitive to completion; the hand-written kernels that follow read its output.
  void execute(const dnnl::primitive& primitive,
               const std::unordered_map<int, dnnl::memory>& arguments) {
    primitive.execute(stream, arguments);
    stream.wait();
  }
};

namespace cpu {

// ---- memory descriptors ----
dnnl::memory::data_type dnnl_data_type(DType dtype);
// A 2-D matrix (row-major), 4-D or 5-D activation (or OIHW / OIDHW weights) as laid out by the
// tensor's layout.
dnnl::memory::desc dnnl_desc(const Tensor& t);
// The same dims with the layout left to the primitive.
dnnl::memory::desc dnnl_any_desc(const Tensor& t);
// The tensor viewed as a dense 1-D array (element-wise operations, per-channel vectors).
dnnl::memory::desc dnnl_flat_desc(const Tensor& t);
dnnl::memory dnnl_memory(const dnnl::engine& engine, const dnnl::memory::desc& desc,
                         const Tensor& t);
// CachedPrimitive::implementation of a primitive descriptor, kept for diagnostics.
std::string implementation_name(const dnnl::primitive_desc_base& pd);

// ---- weights in the primitive's layout and type ----
// Prepares the reorder between the user's f32 weights and the layout (and, in bf16, the type) the
// primitive takes them in, if they differ: into the primitive for passes that read weights, out
// of it for a weight gradient.
void attach_weights_reorder(const dnnl::engine& engine, CachedPrimitive& cached,
                            const dnnl::memory::desc& user,
                            const dnnl::memory::desc& primitive_layout, bool into_primitive);
// The weights argument of a primitive that reads them: the user's tensor itself or its copy in
// the primitive's layout (queued on the in-order stream ahead of the primitive).
dnnl::memory weights_for_reading(dnnl::stream& stream, const CachedPrimitive& cached,
                                 const dnnl::memory& user);

// ---- reproducible reductions ----
// Each sample's pixels are cut into a fixed number of chunks, independent of the thread count;
// partial sums are kept per chunk and added in chunk order, so a reduction gives bitwise the
// same result however many OpenMP threads run it.
inline constexpr std::int64_t chunks_per_sample = 64;

// The per-chunk partial sums (sample-major, then chunk, then row_width values) added in chunk
// order into one row per sample.
inline std::vector<double> add_chunks_in_order(const std::vector<double>& partial,
                                               std::int64_t batch, std::int64_t chunks,
                                               std::int64_t row_width) {
  std::vector<double> total(static_cast<std::size_t>(batch * row_width), 0.0);
  for (std::int64_t sample = 0; sample < batch; ++sample)
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk)
      for (std::int64_t i = 0; i < row_width; ++i)
        total[sample * row_width + i] += partial[(sample * chunks + chunk) * row_width + i];
  return total;
}

// Sums over the pixels of each sample: accumulate(sample, pixel, sums) adds one pixel's
// contribution to a row of row_width doubles. Returns batch rows, sample-major. Pass batch = 1
// and pixels = N * H * W to reduce over the whole batch.
template <class Accumulate>
std::vector<double> sum_over_pixels(std::int64_t batch, std::int64_t pixels, std::int64_t row_width,
                                    Accumulate&& accumulate) {
  const std::int64_t chunks = std::clamp<std::int64_t>(pixels, 1, chunks_per_sample);
  std::vector<double> partial(static_cast<std::size_t>(batch * chunks * row_width), 0.0);
#pragma omp parallel for schedule(static)
  for (std::int64_t task = 0; task < batch * chunks; ++task) {
    const std::int64_t sample = task / chunks, chunk = task % chunks;
    double* sums = partial.data() + task * row_width;
    const std::int64_t end = pixels * (chunk + 1) / chunks;
    for (std::int64_t pixel = pixels * chunk / chunks; pixel < end; ++pixel)
      accumulate(sample, pixel, sums);
  }
  return add_chunks_in_order(partial, batch, chunks, row_width);
}

// sum_over_pixels for the element-wise statistics of normalization layers, where the per-pixel
// work is a few flops per channel: accumulate(sample, pixel, sums) adds into a row of floats
// that holds at most pixel_block pixels' contributions before it is added into the chunk's
// double sums. Float rows let the channel loop vectorize at full width, without float-to-double
// conversions; 16 terms per float sum keep its rounding error near 1e-6 of the row's magnitude.
// The partition is fixed by the shape, so results stay independent of the thread count.
inline constexpr std::int64_t pixel_block = 16;

template <class Accumulate>
std::vector<double> sum_over_pixels_blocked(std::int64_t batch, std::int64_t pixels,
                                            std::int64_t row_width, Accumulate&& accumulate) {
  // Chunks of at least one pixel block, so that small maps are not cut into slivers.
  const std::int64_t chunks = std::clamp<std::int64_t>(pixels / pixel_block, 1, chunks_per_sample);
  std::vector<double> partial(static_cast<std::size_t>(batch * chunks * row_width), 0.0);
  std::vector<float> blocks(static_cast<std::size_t>(batch * chunks * row_width));
  // A parallel region costs more than small tensors' whole reduction.
#pragma omp parallel for schedule(static) if (batch * pixels * row_width >= (1 << 15))
  for (std::int64_t task = 0; task < batch * chunks; ++task) {
    const std::int64_t sample = task / chunks, chunk = task % chunks;
    double* sums = partial.data() + task * row_width;
    const std::span<float> block(blocks.data() + task * row_width,
                                 static_cast<std::size_t>(row_width));
    const std::int64_t end = pixels * (chunk + 1) / chunks;
    for (std::int64_t first = pixels * chunk / chunks; first < end; first += pixel_block) {
      std::fill(block.begin(), block.end(), 0.0f);
      for (std::int64_t pixel = first; pixel < std::min(end, first + pixel_block); ++pixel)
        accumulate(sample, pixel, block.data());
      for (std::int64_t i = 0; i < row_width; ++i) sums[i] += block[i];
    }
  }
  return add_chunks_in_order(partial, batch, chunks, row_width);
}

}  // namespace cpu
}  // namespace hardy::core
