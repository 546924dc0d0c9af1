// Memory conversions, point-wise operations, the loss and the optimizer updates of the CUDA
// backend. All are memory-bound single passes; each thread does fp32 arithmetic on whatever
// storage type the tensors have. Reductions that end on the host write one partial sum per
// block and the host adds them in block order, so results are the same on every run.
#include <cstdint>
#include <type_traits>

#include "compute/dropout_mask.hpp"
#include "device_math.cuh"

namespace hardy::core::cuda {

namespace {

// ---- memory and conversions ----

template <class S, class D>
__device__ __forceinline__ D convert_value(S value) {
  if constexpr (std::is_same_v<S, D>) {
    return value;
  } else {
    return from_float<D>(to_float(value));
  }
}

struct Shape4 {
  Index n, c, h, w;
};

// Offset of (n, c, h, w) in NHWC or NCHW order.
__device__ __forceinline__ Index offset_of(bool nhwc, const Shape4& s, Index n, Index c, Index h,
                                           Index w) {
  return nhwc ? ((n * s.h + h) * s.w + w) * s.c + c : ((n * s.c + c) * s.h + h) * s.w + w;
}

template <class S, class D>
__global__ void convert_permute_kernel(const S* src, bool src_nhwc, D* dst, bool dst_nhwc,
                                       Shape4 shape) {
  const Index count = shape.n * shape.c * shape.h * shape.w;
  if (src_nhwc == dst_nhwc) {
    HARDY_GRID_STRIDE_LOOP(i, count) { dst[i] = convert_value<S, D>(src[i]); }
    return;
  }
  HARDY_GRID_STRIDE_LOOP(i, count) {
    // Coordinates of destination element i, then the source element at the same coordinates.
    Index n, c, h, w;
    if (dst_nhwc) {
      c = i % shape.c;
      w = (i / shape.c) % shape.w;
      h = (i / (shape.c * shape.w)) % shape.h;
      n = i / (shape.c * shape.w * shape.h);
    } else {
      w = i % shape.w;
      h = (i / shape.w) % shape.h;
      c = (i / (shape.w * shape.h)) % shape.c;
      n = i / (shape.w * shape.h * shape.c);
    }
    dst[i] = convert_value<S, D>(src[offset_of(src_nhwc, shape, n, c, h, w)]);
  }
}

template <class S, class D>
void launch_convert_permute(const void* src, bool src_nhwc, void* dst, bool dst_nhwc,
                            const Shape4& shape, cudaStream_t stream) {
  const Index count = shape.n * shape.c * shape.h * shape.w;
  convert_permute_kernel<S, D><<<blocks_for(count), threads_per_block, 0, stream>>>(
      static_cast<const S*>(src), src_nhwc, static_cast<D*>(dst), dst_nhwc, shape);
  check_launch("convert_permute");
}

template <class T>
__global__ void fill_kernel(T* data, T value, Index count) {
  HARDY_GRID_STRIDE_LOOP(i, count) { data[i] = value; }
}

template <class T>
__global__ void fill_float_kernel(T* data, float value, Index count) {
  const T converted = from_float<T>(value);
  HARDY_GRID_STRIDE_LOOP(i, count) { data[i] = converted; }
}

// ---- point-wise ----

template <class T>
__global__ void add_channel_bias_kernel(T* y, const float* bias, Index count, Index channels) {
  HARDY_GRID_STRIDE_LOOP(i, count) { y[i] = from_float<T>(to_float(y[i]) + bias[i % channels]); }
}

template <class T>
__global__ void relu_forward_kernel(const T* x, T* y, Index count) {
  HARDY_GRID_STRIDE_LOOP(i, count) { y[i] = from_float<T>(fmaxf(to_float(x[i]), 0.0f)); }
}

template <class T>
__global__ void relu_backward_kernel(const T* y, const T* dy, T* dx, Index count) {
  HARDY_GRID_STRIDE_LOOP(i, count) {
    dx[i] = from_float<T>(to_float(y[i]) > 0.0f ? to_float(dy[i]) : 0.0f);
  }
}

// The activations of one parameter whose gradient is computed from their output.
struct LeakyRelu {
  float slope;
  __device__ float forward(float x) const { return x > 0.0f ? x : slope * x; }
  __device__ float backward(float y, float dy) const { return y > 0.0f ? dy : slope * dy; }
};

struct ScaledTanh {
  float scale, inverse_scale;
  __device__ float forward(float x) const { return scale * tanhf(x); }
  // The CPU backend's arithmetic: t = y / scale, dx = dy * scale * (1 - t^2).
  __device__ float backward(float y, float dy) const {
    const float t = y * inverse_scale;
    return dy * scale * (1.0f - t * t);
  }
};

template <class T, class Activation>
__global__ void activation_forward_kernel(const T* x, T* y, Activation activation, Index count) {
  HARDY_GRID_STRIDE_LOOP(i, count) { y[i] = from_float<T>(activation.forward(to_float(x[i]))); }
}

template <class T, class Activation>
__global__ void activation_backward_kernel(const T* y, const T* dy, T* dx, Activation activation,
                                           Index count) {
  HARDY_GRID_STRIDE_LOOP(i, count) {
    dx[i] = from_float<T>(activation.backward(to_float(y[i]), to_float(dy[i])));
  }
}

template <class T>
__global__ void axpy_kernel(float alpha, const T* x, T* y, Index count) {
  HARDY_GRID_STRIDE_LOOP(i, count) {
    y[i] = from_float<T>(to_float(y[i]) + alpha * to_float(x[i]));
  }
}

template <class T>
__global__ void scale_kernel(T* x, float alpha, Index count) {
  HARDY_GRID_STRIDE_LOOP(i, count) { x[i] = from_float<T>(to_float(x[i]) * alpha); }
}

// Element i in memory order is sample n's element `within`; its logical index in the sample's
// (C, H, W) order is `within` itself in NCHW, and channel * H * W + pixel in NHWC.
template <class T>
__global__ void dropout_kernel(const T* x, T* y, bool nhwc, Shape4 shape,
                               const std::uint64_t* sample_states, std::uint32_t threshold,
                               float scale) {
  const Index plane = shape.h * shape.w, per_sample = shape.c * plane;
  const Index count = shape.n * per_sample;
  HARDY_GRID_STRIDE_LOOP(i, count) {
    const Index n = i / per_sample, within = i % per_sample;
    const Index index = nhwc ? within % shape.c * plane + within / shape.c : within;
    const bool kept = dropout::keep(sample_states[n], static_cast<std::uint64_t>(index), threshold);
    y[i] = from_float<T>(kept ? to_float(x[i]) * scale : 0.0f);
  }
}

// ---- reductions ----

// Sums a per-thread double over the block; the result is valid in thread 0.
__device__ double block_sum(double value) {
  __shared__ double shared[threads_per_block];
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int half = threads_per_block / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  return shared[0];
}

unsigned int reduction_blocks(Index count) {
  return std::min<unsigned int>(blocks_for(count), max_reduction_blocks);
}

template <class T>
__global__ void sum_squares_kernel(const T* x, Index count, double* partials) {
  double total = 0.0;
  HARDY_GRID_STRIDE_LOOP(i, count) {
    const double value = to_float(x[i]);
    total += value * value;
  }
  total = block_sum(total);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// Partial sums of (prediction - target)^2 per block, and dprediction = 2 * grad_scale * error
// (which may overwrite the prediction: each element is read before it is written).
template <class T>
__global__ void mse_kernel(const T* prediction, const float* target, Index count,
                           double twice_scale, T* dprediction, double* partials) {
  double total = 0.0;
  HARDY_GRID_STRIDE_LOOP(i, count) {
    // A NaN target is one left out (a skipped sample's): no loss, no gradient.
    const double error =
        isnan(target[i]) ? 0.0 : static_cast<double>(to_float(prediction[i])) - target[i];
    total += error * error;
    dprediction[i] = from_float<T>(static_cast<float>(twice_scale * error));
  }
  total = block_sum(total);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

template <class T>
__global__ void find_non_finite_kernel(const T* x, Index count, int* flag) {
  int found = 0;
  HARDY_GRID_STRIDE_LOOP(i, count) { found |= !isfinite(to_float(x[i])); }
  if (__syncthreads_or(found) && threadIdx.x == 0) *flag = 1;
}

// ---- optimizers: the CPU backend's arithmetic (cpu/elementwise.cpp), element for element ----

__global__ void sgd_kernel(float* param, const float* grad, float* velocity, Index count, float lr,
                           float momentum, float weight_decay, float gradient_weight,
                           float velocity_weight) {
  HARDY_GRID_STRIDE_LOOP(i, count) {
    const float decayed_grad = grad[i] + weight_decay * param[i];
    const float new_velocity = momentum * velocity[i] + decayed_grad;
    velocity[i] = new_velocity;
    param[i] -= lr * (gradient_weight * decayed_grad + velocity_weight * new_velocity);
  }
}

__global__ void adam_kernel(float* param, const float* grad, float* m, float* v, Index count,
                            float step_size, float inverse_sqrt_bias_correction2, float beta1,
                            float beta2, float eps, float weight_decay) {
  const float one_minus_beta1 = 1.0f - beta1, one_minus_beta2 = 1.0f - beta2;
  HARDY_GRID_STRIDE_LOOP(i, count) {
    const float decayed_grad = grad[i] + weight_decay * param[i];
    const float new_m = beta1 * m[i] + one_minus_beta1 * decayed_grad;
    const float new_v = beta2 * v[i] + one_minus_beta2 * decayed_grad * decayed_grad;
    m[i] = new_m;
    v[i] = new_v;
    param[i] -= step_size * new_m / (sqrtf(new_v) * inverse_sqrt_bias_correction2 + eps);
  }
}

// ---- loss ----

// core::kIgnoreLabel (compute/labels.hpp), copied so that the kernels use plain device constants.
constexpr std::int32_t kIgnoredPixel = -1;

template <class T>
__global__ void softmax_cross_entropy_kernel(const T* logits, const std::int32_t* labels,
                                             const float* class_weights, Index pixels, int classes,
                                             float grad_scale, T* dlogits, double* partials,
                                             unsigned long long* first_bad_pixel) {
  double total = 0.0;
  HARDY_GRID_STRIDE_LOOP(pixel, pixels) {
    const T* row = logits + pixel * classes;
    T* grad_row = dlogits + pixel * classes;
    const std::int32_t target = labels[pixel];
    if (target == kIgnoredPixel) {  // a skipped sample's pixel: no loss, no gradient
      for (int c = 0; c < classes; ++c) grad_row[c] = from_float<T>(0.0f);
      continue;
    }
    if (target < 0 || target >= classes) {
      atomicMin(first_bad_pixel, static_cast<unsigned long long>(pixel));
      continue;
    }
    const float target_score = to_float(row[target]);  // read first: dlogits may alias logits
    // log-sum-exp shifted by the maximum, as on the CPU; the exponentials are recomputed in the
    // second pass instead of being kept (the class count is not known at compile time).
    float largest = to_float(row[0]);
    for (int c = 1; c < classes; ++c) largest = fmaxf(largest, to_float(row[c]));
    double exp_sum = 0.0;
    for (int c = 0; c < classes; ++c) exp_sum += expf(to_float(row[c]) - largest);
    const double weight = class_weights[target];
    total += weight * (log(exp_sum) + largest - target_score);
    const float scale = static_cast<float>(grad_scale * weight / exp_sum);
    const float target_shift = static_cast<float>(grad_scale * weight);
    for (int c = 0; c < classes; ++c) {
      const float value = expf(to_float(row[c]) - largest) * scale;
      grad_row[c] = from_float<T>(c == target ? value - target_shift : value);
    }
  }
  total = block_sum(total);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// The label at the first bad pixel, read beside the loss: the loss is read after the step, when
// the labels may hold the next batch's.
__global__ void label_at_first_bad_kernel(const std::int32_t* labels,
                                          const unsigned long long* first_bad_pixel,
                                          std::int32_t* first_bad_label) {
  const unsigned long long pixel = *first_bad_pixel;
  if (pixel != ~0ull) *first_bad_label = labels[pixel];
}

template <class T>
__global__ void argmax_kernel(const T* logits, std::int32_t* labels, Index pixels, int classes) {
  HARDY_GRID_STRIDE_LOOP(pixel, pixels) {
    const T* row = logits + pixel * classes;
    int best = 0;
    float best_score = to_float(row[0]);
    for (int c = 1; c < classes; ++c) {
      const float score = to_float(row[c]);
      if (score > best_score) {
        best = c;
        best_score = score;
      }
    }
    labels[pixel] = best;
  }
}

// ---- channel slices ----

template <class E>
__global__ void channel_slices_kernel(E* whole, Index rows, Index whole_channels,
                                      ChannelSlices slices, bool to_whole) {
  HARDY_GRID_STRIDE_LOOP(i, rows * whole_channels) {
    const Index row = i / whole_channels, channel = i % whole_channels;
    for (int k = 0; k < slices.count; ++k) {
      const Index local = channel - slices.first_channel[k];
      if (local < 0 || local >= slices.channels[k]) continue;
      E* slice = static_cast<E*>(slices.data[k]) + row * slices.channels[k] + local;
      if (to_whole)
        whole[i] = *slice;
      else
        *slice = whole[i];
      break;
    }
  }
}

}  // namespace

void convert_permute(const void* src, DType src_type, bool src_nhwc, void* dst, DType dst_type,
                     bool dst_nhwc, Index n, Index c, Index h, Index w, cudaStream_t stream) {
  const Shape4 shape{n, c, h, w};
  if (shape.n * shape.c * shape.h * shape.w == 0) return;
  if (src_type == DType::i32 || src_type == DType::u8) {
    if (dst_type != src_type)
      throw std::logic_error("convert_permute: integer tensors are only copied, not converted");
    if (src_type == DType::i32)
      launch_convert_permute<std::int32_t, std::int32_t>(src, src_nhwc, dst, dst_nhwc, shape,
                                                         stream);
    else
      launch_convert_permute<std::uint8_t, std::uint8_t>(src, src_nhwc, dst, dst_nhwc, shape,
                                                         stream);
    return;
  }
  dispatch_float(src_type, [&](auto source) {
    dispatch_float(dst_type, [&](auto destination) {
      launch_convert_permute<decltype(source), decltype(destination)>(src, src_nhwc, dst, dst_nhwc,
                                                                      shape, stream);
    });
  });
}

void fill(void* data, DType type, float value, Index count, cudaStream_t stream) {
  if (count == 0) return;
  switch (type) {
    case DType::i32:
      fill_kernel<<<blocks_for(count), threads_per_block, 0, stream>>>(
          static_cast<std::int32_t*>(data), static_cast<std::int32_t>(value), count);
      break;
    case DType::u8:
      fill_kernel<<<blocks_for(count), threads_per_block, 0, stream>>>(
          static_cast<std::uint8_t*>(data), static_cast<std::uint8_t>(value), count);
      break;
    default:
      dispatch_float(type, [&](auto tag) {
        using T = decltype(tag);
        fill_float_kernel<<<blocks_for(count), threads_per_block, 0, stream>>>(
            static_cast<T*>(data), value, count);
      });
  }
  check_launch("fill");
}

// OIHW is NCHW and OHWI is NHWC of the shape (O, I, KH, KW): the conversions are permutations.
void weights_to_ohwi(const float* oihw, void* ohwi, DType type, Index o, Index i, Index kh,
                     Index kw, cudaStream_t stream) {
  convert_permute(oihw, DType::f32, false, ohwi, type, true, o, i, kh, kw, stream);
}

void weights_from_ohwi(const void* ohwi, DType type, float* oihw, Index o, Index i, Index kh,
                       Index kw, cudaStream_t stream) {
  convert_permute(ohwi, type, true, oihw, DType::f32, false, o, i, kh, kw, stream);
}

void add_channel_bias(void* y, DType type, const float* bias, Index rows, Index channels,
                      cudaStream_t stream) {
  dispatch_float(type, [&](auto tag) {
    using T = decltype(tag);
    add_channel_bias_kernel<<<blocks_for(rows * channels), threads_per_block, 0, stream>>>(
        static_cast<T*>(y), bias, rows * channels, channels);
  });
  check_launch("add_channel_bias");
}

void relu_forward(const void* x, void* y, DType type, Index count, cudaStream_t stream) {
  dispatch_float(type, [&](auto tag) {
    using T = decltype(tag);
    relu_forward_kernel<<<blocks_for(count), threads_per_block, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), count);
  });
  check_launch("relu_forward");
}

void relu_backward(const void* y, const void* dy, void* dx, DType type, Index count,
                   cudaStream_t stream) {
  dispatch_float(type, [&](auto tag) {
    using T = decltype(tag);
    relu_backward_kernel<<<blocks_for(count), threads_per_block, 0, stream>>>(
        static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), count);
  });
  check_launch("relu_backward");
}

void axpy(float alpha, const void* x, void* y, DType type, Index count, cudaStream_t stream) {
  dispatch_float(type, [&](auto tag) {
    using T = decltype(tag);
    axpy_kernel<<<blocks_for(count), threads_per_block, 0, stream>>>(
        alpha, static_cast<const T*>(x), static_cast<T*>(y), count);
  });
  check_launch("axpy");
}

void scale(void* x, DType type, float alpha, Index count, cudaStream_t stream) {
  dispatch_float(type, [&](auto tag) {
    using T = decltype(tag);
    scale_kernel<<<blocks_for(count), threads_per_block, 0, stream>>>(static_cast<T*>(x), alpha,
                                                                      count);
  });
  check_launch("scale");
}

void apply_dropout(const void* x, void* y, DType type, bool nhwc, Index n, Index c, Index h,
                   Index w, const std::uint64_t* sample_states, std::uint32_t threshold,
                   float scale, cudaStream_t stream) {
  launch_per_element(type, n * c * h * w, "dropout", [&](auto tag, unsigned int blocks) {
    using T = decltype(tag);
    dropout_kernel<<<blocks, threads_per_block, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), nhwc, Shape4{n, c, h, w}, sample_states,
        threshold, scale);
  });
}

template <class Activation>
void activation_forward(const char* name, const void* x, void* y, DType type, Activation activation,
                        Index count, cudaStream_t stream) {
  launch_per_element(type, count, name, [&](auto tag, unsigned int blocks) {
    using T = decltype(tag);
    activation_forward_kernel<<<blocks, threads_per_block, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), activation, count);
  });
}

template <class Activation>
void activation_backward(const char* name, const void* y, const void* dy, void* dx, DType type,
                         Activation activation, Index count, cudaStream_t stream) {
  launch_per_element(type, count, name, [&](auto tag, unsigned int blocks) {
    using T = decltype(tag);
    activation_backward_kernel<<<blocks, threads_per_block, 0, stream>>>(
        static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), activation,
        count);
  });
}

void leaky_relu_forward(const void* x, void* y, DType type, float slope, Index count,
                        cudaStream_t stream) {
  activation_forward("leaky_relu_forward", x, y, type, LeakyRelu{slope}, count, stream);
}

void leaky_relu_backward(const void* y, const void* dy, void* dx, DType type, float slope,
                         Index count, cudaStream_t stream) {
  activation_backward("leaky_relu_backward", y, dy, dx, type, LeakyRelu{slope}, count, stream);
}

void scaled_tanh_forward(const void* x, void* y, DType type, float scale, Index count,
                         cudaStream_t stream) {
  activation_forward("scaled_tanh_forward", x, y, type, ScaledTanh{scale, 1.0f / scale}, count,
                     stream);
}

void scaled_tanh_backward(const void* y, const void* dy, void* dx, DType type, float scale,
                          Index count, cudaStream_t stream) {
  activation_backward("scaled_tanh_backward", y, dy, dx, type, ScaledTanh{scale, 1.0f / scale},
                      count, stream);
}

int mse_loss(const void* prediction, DType type, const float* target, Index count, float grad_scale,
             void* dprediction, double* partials, cudaStream_t stream) {
  const unsigned int blocks = reduction_blocks(count);
  dispatch_float(type, [&](auto tag) {
    using T = decltype(tag);
    mse_kernel<<<blocks, threads_per_block, 0, stream>>>(
        static_cast<const T*>(prediction), target, count, 2.0 * static_cast<double>(grad_scale),
        static_cast<T*>(dprediction), partials);
  });
  check_launch("mse_loss");
  return static_cast<int>(blocks);
}

int sum_squares_partials(const void* x, DType type, Index count, double* partials,
                         cudaStream_t stream) {
  const unsigned int blocks = reduction_blocks(count);
  dispatch_float(type, [&](auto tag) {
    using T = decltype(tag);
    sum_squares_kernel<<<blocks, threads_per_block, 0, stream>>>(static_cast<const T*>(x), count,
                                                                 partials);
  });
  check_launch("sum_squares");
  return static_cast<int>(blocks);
}

void find_non_finite(const void* x, DType type, Index count, int* flag, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_float(type, [&](auto tag) {
    using T = decltype(tag);
    find_non_finite_kernel<<<reduction_blocks(count), threads_per_block, 0, stream>>>(
        static_cast<const T*>(x), count, flag);
  });
  check_launch("find_non_finite");
}

void sgd_update(float* param, const float* grad, float* velocity, Index count, float lr,
                float momentum, float weight_decay, bool nesterov, cudaStream_t stream) {
  if (count == 0) return;
  // (0, 1) steps by v, (1, momentum) by Nesterov's g' + momentum * v (see cpu/elementwise.cpp).
  sgd_kernel<<<blocks_for(count), threads_per_block, 0, stream>>>(
      param, grad, velocity, count, lr, momentum, weight_decay, nesterov ? 1.0f : 0.0f,
      nesterov ? momentum : 1.0f);
  check_launch("sgd_update");
}

void adam_update(float* param, const float* grad, float* m, float* v, Index count, float step_size,
                 float inverse_sqrt_bias_correction2, float beta1, float beta2, float eps,
                 float weight_decay, cudaStream_t stream) {
  if (count == 0) return;
  adam_kernel<<<blocks_for(count), threads_per_block, 0, stream>>>(
      param, grad, m, v, count, step_size, inverse_sqrt_bias_correction2, beta1, beta2, eps,
      weight_decay);
  check_launch("adam_update");
}

int softmax_cross_entropy(const void* logits, DType type, const std::int32_t* labels,
                          const float* class_weights, Index pixels, int classes, float grad_scale,
                          void* dlogits, double* partials, unsigned long long* first_bad_pixel,
                          std::int32_t* first_bad_label, cudaStream_t stream) {
  const unsigned int blocks = reduction_blocks(pixels);
  dispatch_float(type, [&](auto tag) {
    using T = decltype(tag);
    softmax_cross_entropy_kernel<<<blocks, threads_per_block, 0, stream>>>(
        static_cast<const T*>(logits), labels, class_weights, pixels, classes, grad_scale,
        static_cast<T*>(dlogits), partials, first_bad_pixel);
  });
  check_launch("softmax_cross_entropy");
  label_at_first_bad_kernel<<<1, 1, 0, stream>>>(labels, first_bad_pixel, first_bad_label);
  check_launch("softmax_cross_entropy (bad label)");
  return static_cast<int>(blocks);
}

void argmax_channels(const void* logits, DType type, std::int32_t* labels, Index pixels,
                     int classes, cudaStream_t stream) {
  if (pixels == 0) return;
  dispatch_float(type, [&](auto tag) {
    using T = decltype(tag);
    argmax_kernel<<<blocks_for(pixels), threads_per_block, 0, stream>>>(
        static_cast<const T*>(logits), labels, pixels, classes);
  });
  check_launch("argmax_channels");
}

void copy_channel_slices(void* whole, Index rows, Index whole_channels, const ChannelSlices& slices,
                         int element_size, bool to_whole, cudaStream_t stream) {
  const Index count = rows * whole_channels;
  if (count == 0) return;
  // 16-byte units (8 bf16/f16 or 4 f32 channels per copy) where every window and pointer
  // allows: an eighth of the index arithmetic and of the memory transactions.
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  const auto whole_units = [&](Index channels) { return channels * element_size % 16 == 0; };
  bool wide = aligned(whole) && whole_units(whole_channels);
  for (int k = 0; k < slices.count; ++k)
    wide = wide && aligned(slices.data[k]) && whole_units(slices.channels[k]) &&
           whole_units(slices.first_channel[k]);
  if (wide) {
    ChannelSlices units = slices;
    for (int k = 0; k < slices.count; ++k) {
      units.channels[k] = slices.channels[k] * element_size / 16;
      units.first_channel[k] = slices.first_channel[k] * element_size / 16;
    }
    const Index row_units = whole_channels * element_size / 16;
    channel_slices_kernel<<<blocks_for(rows * row_units), threads_per_block, 0, stream>>>(
        static_cast<uint4*>(whole), rows, row_units, units, to_whole);
    check_launch("copy_channel_slices");
    return;
  }
  switch (element_size) {
    case 2:
      channel_slices_kernel<<<blocks_for(count), threads_per_block, 0, stream>>>(
          static_cast<std::uint16_t*>(whole), rows, whole_channels, slices, to_whole);
      break;
    case 4:
      channel_slices_kernel<<<blocks_for(count), threads_per_block, 0, stream>>>(
          static_cast<std::uint32_t*>(whole), rows, whole_channels, slices, to_whole);
      break;
    default:
      throw std::logic_error("copy_channel_slices: element size must be 2 or 4 bytes");
  }
  check_launch("copy_channel_slices");
}

}  // namespace hardy::core::cuda
