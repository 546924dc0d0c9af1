// Relu, bilinear resampling and channel concatenation through oneDNN; global average pooling as
// plain loops (a reduction over H*W per channel, where a pooling primitive gains nothing).
// Activations are f32 or bf16: oneDNN's primitives take either, the loops load into float.
#include <type_traits>

#include "compute/cpu/dnnl_support.hpp"
#include "compute/cpu/element_types.hpp"

namespace hardy::core {

using namespace cpu;  // the backend's internal helpers, declared in dnnl_support.hpp

namespace {

using dnnl::memory;

constexpr auto key_of(PrimitiveKind kind) { return static_cast<std::int64_t>(kind); }

}  // namespace

void CpuBackend::do_relu_forward(const Tensor& x, Tensor& y) {
  constexpr std::string_view operation = "relu_forward";
  dnnl_checked(operation, {&x, &y}, [&] {
    const memory::desc data = dnnl_flat_desc(x);
    const auto key = PrimitiveKey{}.add(key_of(PrimitiveKind::relu_forward)).add(x.numel());
    const CachedPrimitive& relu = impl_->cached(key, [&] {
      const dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference,
                                             dnnl::algorithm::eltwise_relu, data, 0.0f);
      const dnnl::eltwise_forward::primitive_desc pd(desc, impl_->engine);
      return CachedPrimitive{dnnl::eltwise_forward(pd), implementation_name(pd)};
    });
    impl_->execute(relu.primitive, {{DNNL_ARG_SRC, dnnl_memory(impl_->engine, data, x)},
                                    {DNNL_ARG_DST, dnnl_memory(impl_->engine, data, y)}});
  });
}

void CpuBackend::do_relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  constexpr std::string_view operation = "relu_backward";
  dnnl_checked(operation, {&y, &dy, &dx}, [&] {
    const memory::desc data = dnnl_flat_desc(y);
    const auto key = PrimitiveKey{}.add(key_of(PrimitiveKind::relu_backward)).add(y.numel());
    const CachedPrimitive& relu = impl_->cached(key, [&] {
      // The mask comes from the output, so the forward input need not be kept.
      const auto algorithm = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;
      const dnnl::eltwise_forward::primitive_desc hint(
          {dnnl::prop_kind::forward_training, algorithm, data, 0.0f}, impl_->engine);
      const dnnl::eltwise_backward::desc desc(algorithm, data, data, 0.0f);
      const dnnl::eltwise_backward::primitive_desc pd(desc, impl_->engine, hint);
      return CachedPrimitive{dnnl::eltwise_backward(pd), implementation_name(pd)};
    });
    impl_->execute(relu.primitive, {{DNNL_ARG_DST, dnnl_memory(impl_->engine, data, y)},
                                    {DNNL_ARG_DIFF_DST, dnnl_memory(impl_->engine, data, dy)},
                                    {DNNL_ARG_DIFF_SRC, dnnl_memory(impl_->engine, data, dx)}});
  });
}

namespace {

// oneDNN's linear resampling maps output pixel o to source coordinate (o + 0.5) * in / out - 0.5
// and clamps at the borders, which is PyTorch's align_corners=False.
dnnl::resampling_forward::primitive_desc resampling_descriptor(const dnnl::engine& engine,
                                                               const memory::desc& source,
                                                               const memory::desc& destination) {
  const dnnl::resampling_forward::desc desc(
      dnnl::prop_kind::forward_training, dnnl::algorithm::resampling_linear, source, destination);
  return {desc, engine};
}

}  // namespace

void CpuBackend::do_upsample_bilinear_forward(const Tensor& x, Tensor& y) {
  constexpr std::string_view operation = "upsample_bilinear_forward";
  dnnl_checked(operation, {&x, &y}, [&] {
    const memory::desc source = dnnl_desc(x), destination = dnnl_desc(y);
    const auto key =
        PrimitiveKey{}.add(key_of(PrimitiveKind::resample_forward)).add(x.dims()).add(y.dims());
    const CachedPrimitive& resample = impl_->cached(key, [&] {
      const auto pd = resampling_descriptor(impl_->engine, source, destination);
      return CachedPrimitive{dnnl::resampling_forward(pd), implementation_name(pd)};
    });
    impl_->execute(resample.primitive,
                   {{DNNL_ARG_SRC, dnnl_memory(impl_->engine, source, x)},
                    {DNNL_ARG_DST, dnnl_memory(impl_->engine, destination, y)}});
  });
}

namespace {

// Source taps of one output coordinate under half-pixel centres (align_corners=False), as in
// PyTorch and oneDNN: o -> (o + 0.5) * in / out - 0.5, clamped at 0, between two neighbours.
struct LinearTaps {
  std::int64_t first, second;
  float first_weight, second_weight;
};

std::vector<LinearTaps> linear_taps(std::int64_t in_size, std::int64_t out_size) {
  std::vector<LinearTaps> taps(static_cast<std::size_t>(out_size));
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  for (std::int64_t o = 0; o < out_size; ++o) {
    const double source = std::max((static_cast<double>(o) + 0.5) * scale - 0.5, 0.0);
    const std::int64_t first = std::min(static_cast<std::int64_t>(source), in_size - 1);
    const double lambda = source - static_cast<double>(first);
    taps[o] = {first, std::min(first + 1, in_size - 1), static_cast<float>(1.0 - lambda),
               static_cast<float>(lambda)};
  }
  return taps;
}

// The transpose of bilinear resizing, done separably on NHWC rows: first every dy row is
// scattered along W into a (N, OH, IW, C) buffer, then those rows are scattered along H into
// dx. Each output row is written by one thread, in a fixed order, so the result does not depend
// on the thread count. oneDNN 2.6's resampling backward gathers per dx pixel and runs several
// times slower than its forward, worst for few channels (the logits: 7x for C = 3).
template <class T>
void upsample_bilinear_backward_kernel(const Tensor& dy, Tensor& dx) {
  const std::int64_t batch = dx.n(), channels = dx.c();
  const std::int64_t in_h = dx.h(), in_w = dx.w(), out_h = dy.h(), out_w = dy.w();
  const std::vector<LinearTaps> rows = linear_taps(in_h, out_h);
  const std::vector<LinearTaps> columns = linear_taps(in_w, out_w);
  const std::int64_t in_row = in_w * channels, out_row = out_w * channels;
  std::vector<float> along_w(static_cast<std::size_t>(batch * out_h * in_row));
  const T* grad = dy.data<T>();
  T* grad_src = dx.data<T>();
  const bool parallel = dy.numel() >= (1 << 15);
  // Rows of dx are summed in float and stored once (in place where T is float).
  std::vector<float> dx_rows(std::is_same_v<T, float> ? 0 : static_cast<std::size_t>(dx.numel()));
  float* sums = std::is_same_v<T, float> ? reinterpret_cast<float*>(grad_src) : dx_rows.data();

#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t row = 0; row < batch * out_h; ++row) {
    float* to = along_w.data() + row * in_row;
    const T* __restrict from = grad + row * out_row;
    std::fill(to, to + in_row, 0.0f);
    for (std::int64_t ow = 0; ow < out_w; ++ow) {
      const LinearTaps& tap = columns[ow];
      // first == second at the clamped border, so neither is restrict.
      float* first = to + tap.first * channels;
      float* second = to + tap.second * channels;
      const T* __restrict value = from + ow * channels;
      for (std::int64_t c = 0; c < channels; ++c) first[c] += tap.first_weight * to_float(value[c]);
      for (std::int64_t c = 0; c < channels; ++c)
        second[c] += tap.second_weight * to_float(value[c]);
    }
  }
  // Along H, per sample and block of a row's columns (so that a batch of one still spreads).
  constexpr std::int64_t block = 256;
  const std::int64_t blocks = (in_row + block - 1) / block;
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t begin = b * block, width = std::min(block, in_row - begin);
      for (std::int64_t ih = 0; ih < in_h; ++ih)
        std::fill_n(sums + (n * in_h + ih) * in_row + begin, width, 0.0f);
      for (std::int64_t oh = 0; oh < out_h; ++oh) {
        const LinearTaps& tap = rows[oh];
        const float* __restrict value = along_w.data() + (n * out_h + oh) * in_row + begin;
        float* first = sums + (n * in_h + tap.first) * in_row + begin;
        float* second = sums + (n * in_h + tap.second) * in_row + begin;
        for (std::int64_t i = 0; i < width; ++i) first[i] += tap.first_weight * value[i];
        for (std::int64_t i = 0; i < width; ++i) second[i] += tap.second_weight * value[i];
      }
      if constexpr (!std::is_same_v<T, float>)
        for (std::int64_t ih = 0; ih < in_h; ++ih) {
          const std::int64_t offset = (n * in_h + ih) * in_row + begin;
          for (std::int64_t i = 0; i < width; ++i)
            grad_src[offset + i] = from_float<T>(sums[offset + i]);
        }
    }
}

}  // namespace

void CpuBackend::do_upsample_bilinear_backward(const Tensor& dy, Tensor& dx) {
  with_element_type(dx.dtype(), [&](auto element) {
    upsample_bilinear_backward_kernel<decltype(element)>(dy, dx);
  });
}

void CpuBackend::do_concat_channels(std::span<const Tensor* const> inputs, Tensor& y) {
  constexpr std::string_view operation = "concat_channels";
  std::vector<const Tensor*> operands(inputs.begin(), inputs.end());
  operands.push_back(&y);
  dnnl_checked(operation, Operands(operands), [&] {
    PrimitiveKey key = PrimitiveKey{}.add(key_of(PrimitiveKind::concat)).add(y.dims());
    std::vector<memory::desc> sources;
    for (const Tensor* input : inputs) {
      key.add(input->c());
      sources.push_back(dnnl_desc(*input));
    }
    const memory::desc destination = dnnl_desc(y);
    const CachedPrimitive& concat = impl_->cached(key, [&] {
      const dnnl::concat::primitive_desc pd(destination, 1, sources, impl_->engine);
      return CachedPrimitive{dnnl::concat(pd), implementation_name(pd)};
    });
    std::unordered_map<int, memory> arguments{
        {DNNL_ARG_DST, dnnl_memory(impl_->engine, destination, y)}};
    for (std::size_t i = 0; i < inputs.size(); ++i)
      arguments.emplace(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i),
                        dnnl_memory(impl_->engine, sources[i], *inputs[i]));
    impl_->execute(concat.primitive, arguments);
  });
}

void CpuBackend::do_split_channels(const Tensor& dy, std::span<Tensor* const> outputs) {
  constexpr std::string_view operation = "split_channels";
  std::vector<const Tensor*> operands{&dy};
  operands.insert(operands.end(), outputs.begin(), outputs.end());
  dnnl_checked(operation, Operands(operands), [&] {
    const memory::desc whole = dnnl_desc(dy);
    std::int64_t first_channel = 0;
    for (Tensor* output : outputs) {
      // Each output is a reorder out of a channel window of dy, which oneDNN reads in place.
      const memory::desc window = whole.submemory_desc(output->dims(), {0, first_channel, 0, 0});
      const memory::desc destination = dnnl_desc(*output);
      const auto key = PrimitiveKey{}
                           .add(key_of(PrimitiveKind::split_slice))
                           .add(dy.dims())
                           .add(first_channel)
                           .add(output->c());
      const CachedPrimitive& slice = impl_->cached(key, [&] {
        const dnnl::reorder::primitive_desc pd(impl_->engine, window, impl_->engine, destination);
        return CachedPrimitive{dnnl::reorder(pd), implementation_name(pd)};
      });
      impl_->execute(slice.primitive,
                     {{DNNL_ARG_FROM, dnnl_memory(impl_->engine, window, dy)},
                      {DNNL_ARG_TO, dnnl_memory(impl_->engine, destination, *output)}});
      first_channel += output->c();
    }
  });
}

namespace {

template <class T>
void global_avg_pool_forward_kernel(const Tensor& x, Tensor& y) {
  const std::int64_t batch = x.n(), channels = x.c(), pixels = x.h() * x.w();
  const T* src = x.data<T>();
  T* dst = y.data<T>();
  // Blocks of channels give both threads work when the batch is 1.
  constexpr std::int64_t block = 64;
  const std::int64_t blocks = (channels + block - 1) / block;
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t first = b * block, width = std::min(block, channels - first);
      double sums[block] = {};
      for (std::int64_t p = 0; p < pixels; ++p) {
        const T* row = src + (n * pixels + p) * channels + first;
        for (std::int64_t j = 0; j < width; ++j) sums[j] += to_float(row[j]);
      }
      for (std::int64_t j = 0; j < width; ++j)
        dst[n * channels + first + j] =
            from_float<T>(static_cast<float>(sums[j] / static_cast<double>(pixels)));
    }
}

template <class T>
void global_avg_pool_backward_kernel(const Tensor& dy, Tensor& dx) {
  const std::int64_t batch = dx.n(), channels = dx.c(), pixels = dx.h() * dx.w();
  const T* grad = dy.data<T>();
  T* grad_src = dx.data<T>();
  const float share = pixels > 0 ? 1.0f / static_cast<float>(pixels) : 0.0f;
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t p = 0; p < pixels; ++p) {
      T* row = grad_src + (n * pixels + p) * channels;
      for (std::int64_t c = 0; c < channels; ++c)
        row[c] = from_float<T>(to_float(grad[n * channels + c]) * share);
    }
}

}  // namespace

void CpuBackend::do_global_avg_pool_forward(const Tensor& x, Tensor& y) {
  with_element_type(x.dtype(),
                    [&](auto element) { global_avg_pool_forward_kernel<decltype(element)>(x, y); });
}

void CpuBackend::do_global_avg_pool_backward(const Tensor& dy, Tensor& dx) {
  with_element_type(dx.dtype(), [&](auto element) {
    global_avg_pool_backward_kernel<decltype(element)>(dy, dx);
  });
}

}  // namespace hardy::core
